/* Training session: classify the training graph's inputs against the checkpoint, lay the parameters,
 * gradients and moments out in parallel flat slabs, bind them to the training and eval sessions once,
 * and run the train, eval and optimizer steps.
 *
 * The optimizer model's single node (com.microsoft AdamWOptimizer or SGDOptimizerV2, optionally after
 * InplaceClipGradNorm) takes seq(tensor(float)) inputs that otter's runtime does not carry; its update is
 * elementwise and its hyperparameters are attributes, so the session reads the node and applies the same
 * math (runtime/optim.h) to the whole slab in one loop, which equals updating each tensor of the sequences. */
#include <string.h>

#include "core/core.h"
#include "format/checkpoint_internal.h"
#include "otter/artifacts.h"
#include "otter/io.h"
#include "runtime/session.h"
#include "runtime/threadpool.h"
#include "training/training_internal.h"

static const char GRAD_BUF[] = "_grad.accumulation.buffer";
static const char GRAD_OUT[] = "_grad.accumulation.out";

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static char *dims_str(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < rank && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)dims[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

/* The declared type of a graph input agrees with a tensor (unknown parts agree with anything). */
static otter_status check_decl(const char *model, const otter_value *v, const otter_tensor *t, const char *what) {
    char a[256], b[256];
    if (!v->has_type || v->type.kind != OTTER_TYPE_TENSOR) return OTTER_OK;
    const otter_type *ty = &v->type;
    if (ty->has_elem_type && ty->elem_type != t->dtype)
        return ot_error(OTTER_ERR_INVALID, "%s input '%s' is %s, the checkpoint's %s is %s", model, v->name,
                        otter_dtype_name(ty->elem_type), what, otter_dtype_name(t->dtype));
    if (ty->rank < 0) return OTTER_OK;
    bool ok = ty->rank == t->rank;
    for (int i = 0; ok && i < ty->rank; i++)
        if (ty->dims[i].value >= 0 && ty->dims[i].value != t->dims[i]) ok = false;
    if (!ok) {
        int64_t d[OTTER_MAX_RANK];
        int r = ty->rank < OTTER_MAX_RANK ? ty->rank : OTTER_MAX_RANK;
        for (int i = 0; i < r; i++) d[i] = ty->dims[i].value;
        return ot_error(OTTER_ERR_INVALID,
                        "%s input '%s' has shape %s, the checkpoint's %s has shape %s (artifacts from different "
                        "models?)",
                        model, v->name, dims_str(a, sizeof a, r, d), what, dims_str(b, sizeof b, t->rank, t->dims));
    }
    return OTTER_OK;
}

static bool is_initializer(const otter_graph *g, const char *name) {
    return otter_graph_find_initializer(g, name) >= 0;
}

static void binding_free(ot_training_binding *b) {
    otter_session_free(b->sess);
    ot_free(b->user_in);
    ot_free(b->user_in_type);
    ot_free(b->user_out);
    ot_free(b->run_names);
    ot_free(b->run_inputs);
    memset(b, 0, sizeof *b);
}

void otter_training_session_free(otter_training_session *s) {
    if (!s) return;
    binding_free(&s->train);
    binding_free(&s->eval);
    for (size_t i = 0; i < s->n_params; i++) {
        ot_training_param *p = &s->params[i];
        if (!p->is_f32) ot_free(p->value.data);
        ot_free(p->name);
    }
    ot_free(s->params);
    ot_free(s->train_slab);
    ot_free(s->grad_slab);
    ot_free(s->m1);
    ot_free(s->m2);
    ot_free(s->frozen_slab);
    ot_free(s->dropouts);
    otter_model_free(s->train_m);
    otter_model_free(s->eval_m);
    otter_model_free(s->optim_m);
    otter_checkpoint_free(s->ck);
    ot_free(s);
}

ot_training_param *ot_training_find_param(const otter_training_session *s, const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < s->n_params; i++)
        if (strcmp(s->params[i].name, name) == 0) return &s->params[i];
    return NULL;
}

/* ---- training graph ---------------------------------------------------------------------------- */

static otter_status classify_training(otter_training_session *s) {
    const otter_graph *g = s->train_m->graph;
    size_t n_ck = otter_checkpoint_param_count(s->ck, OTTER_PARAM_TRAINABLE) +
                  otter_checkpoint_param_count(s->ck, OTTER_PARAM_FROZEN);
    s->params = ot_calloc(n_ck ? n_ck : 1, sizeof *s->params);
    s->train.user_in = ot_calloc(g->n_inputs + 1, sizeof *s->train.user_in);
    s->train.user_in_type = ot_calloc(g->n_inputs + 1, sizeof *s->train.user_in_type);
    const char **bufs = ot_calloc(g->n_inputs + 1, sizeof *bufs);
    if (!s->params || !s->train.user_in || !s->train.user_in_type || !bufs) {
        ot_free(bufs);
        return OT_NOMEM();
    }
    otter_status st = OTTER_OK;
    bool have_reset = false;
    size_t n_bufs = 0;
    for (size_t i = 0; i < g->n_inputs && st == OTTER_OK; i++) {
        const otter_value *v = &g->inputs[i];
        if (is_initializer(g, v->name)) continue;
        const otter_tensor *t = NULL;
        otter_param_kind kind;
        if (strcmp(v->name, "lazy_reset_grad") == 0) {
            have_reset = true;
            if (v->has_type && v->type.kind == OTTER_TYPE_TENSOR && v->type.has_elem_type &&
                v->type.elem_type != OTTER_DTYPE_BOOL)
                st = ot_error(OTTER_ERR_INVALID, "training model input 'lazy_reset_grad' is %s, expected bool",
                              otter_dtype_name(v->type.elem_type));
        } else if (otter_checkpoint_get_param(s->ck, v->name, &t, &kind) == OTTER_OK) {
            if (ot_training_find_param(s, v->name)) {
                st = ot_error(OTTER_ERR_INVALID, "training model lists input '%s' twice", v->name);
                break;
            }
            st = check_decl("training model", v, t, "parameter");
            if (st != OTTER_OK) break;
            ot_training_param *p = &s->params[s->n_params++];
            p->name = ot_strdup(v->name);
            if (!p->name) {
                st = OT_NOMEM();
                break;
            }
            p->trainable = kind == OTTER_PARAM_TRAINABLE;
            p->is_f32 = t->dtype == OTTER_DTYPE_FLOAT;
            p->numel = (size_t)otter_tensor_numel(t);
            p->value = (otter_tensor){.name = p->name, .dtype = t->dtype, .rank = t->rank};
            memcpy(p->value.dims, t->dims, sizeof t->dims);
            if (p->trainable && !p->is_f32)
                st = ot_error(OTTER_ERR_UNSUPPORTED, "trainable parameter '%s' is %s; otter trains float32 parameters",
                              p->name, otter_dtype_name(t->dtype));
        } else if (ends_with(v->name, GRAD_BUF)) {
            bufs[n_bufs++] = v->name;
        } else {
            otter_clear_error();
            s->train.user_in_type[s->train.n_user_in] = v->has_type ? &v->type : NULL;
            s->train.user_in[s->train.n_user_in++] = v->name;
        }
    }
    if (st == OTTER_OK && !have_reset)
        st = ot_error(OTTER_ERR_INVALID, "the training model has no 'lazy_reset_grad' input (not a training model?)");
    /* every checkpoint parameter is a training input */
    for (int k = 0; k < 2 && st == OTTER_OK; k++) {
        otter_param_kind kind = k ? OTTER_PARAM_FROZEN : OTTER_PARAM_TRAINABLE;
        for (size_t i = 0; i < otter_checkpoint_param_count(s->ck, kind) && st == OTTER_OK; i++) {
            const otter_tensor *t = otter_checkpoint_param_at(s->ck, kind, i);
            if (!ot_training_find_param(s, t->name))
                st = ot_error(OTTER_ERR_INVALID,
                              "checkpoint parameter '%s' is not an input of the training model (checkpoint and "
                              "training model from different models?)",
                              t->name);
        }
    }
    /* gradient buffers: one per trainable parameter, shaped like it */
    for (size_t i = 0; i < n_bufs && st == OTTER_OK; i++) {
        size_t n = strlen(bufs[i]) - (sizeof GRAD_BUF - 1);
        ot_training_param *p = NULL;
        for (size_t j = 0; j < s->n_params; j++)
            if (strlen(s->params[j].name) == n && strncmp(s->params[j].name, bufs[i], n) == 0) p = &s->params[j];
        if (!p) {
            st = ot_error(OTTER_ERR_INVALID,
                          "training model input '%s' is a gradient buffer but the checkpoint has no parameter '%.*s' "
                          "(checkpoint from a different model?)",
                          bufs[i], (int)n, bufs[i]);
        } else if (!p->trainable) {
            st = ot_error(OTTER_ERR_INVALID,
                          "training model input '%s' is a gradient buffer for '%s', a frozen parameter", bufs[i],
                          p->name);
        } else if (p->grad_input) {
            st = ot_error(OTTER_ERR_INVALID, "parameter '%s' has two gradient buffers", p->name);
        } else {
            p->grad_input = bufs[i];
            st = check_decl("training model", &g->inputs[otter_graph_find_input(g, bufs[i])], &p->value,
                            "gradient buffer's parameter");
        }
    }
    for (size_t j = 0; j < s->n_params && st == OTTER_OK; j++)
        if (s->params[j].trainable && !s->params[j].grad_input)
            st = ot_error(OTTER_ERR_INVALID, "trainable parameter '%s' has no input '%s%s' in the training model",
                          s->params[j].name, s->params[j].name, GRAD_BUF);
    ot_free(bufs);
    if (st != OTTER_OK) return st;

    /* user outputs: everything but the accumulation flags */
    s->train.user_out = ot_calloc(g->n_outputs + 1, sizeof *s->train.user_out);
    if (!s->train.user_out) return OT_NOMEM();
    for (size_t i = 0; i < g->n_outputs; i++)
        if (!ends_with(g->outputs[i].name, GRAD_OUT)) s->train.user_out[s->train.n_user_out++] = g->outputs[i].name;
    if (s->train.n_user_out == 0) return ot_error(OTTER_ERR_INVALID, "the training model has no loss output");
    return OTTER_OK;
}

/* Slabs: trainable float32 parameters, then frozen float32 ones, each in graph order. */
static otter_status lay_out(otter_training_session *s) {
    size_t off_all = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        ot_training_param *p = &s->params[i];
        p->off_all = p->off_train = SIZE_MAX;
        if (!p->is_f32) continue;
        p->off_all = off_all;
        off_all += p->numel;
        if (p->trainable) {
            p->off_train = s->n_train;
            s->n_train += p->numel;
        } else {
            s->n_frozen += p->numel;
        }
    }
    s->train_slab = ot_calloc(s->n_train ? s->n_train : 1, sizeof(float));
    s->grad_slab = ot_calloc(s->n_train ? s->n_train : 1, sizeof(float));
    s->frozen_slab = ot_calloc(s->n_frozen ? s->n_frozen : 1, sizeof(float));
    if (!s->train_slab || !s->grad_slab || !s->frozen_slab) return OT_NOMEM();
    size_t off_frozen = 0;
    for (size_t i = 0; i < s->n_params; i++) {
        ot_training_param *p = &s->params[i];
        const otter_tensor *t = NULL;
        OT_TRY(otter_checkpoint_get_param(s->ck, p->name, &t, NULL));
        size_t nb = otter_tensor_nbytes(t);
        if (p->is_f32) {
            p->value.data =
                p->trainable ? (void *)(s->train_slab + p->off_train) : (void *)(s->frozen_slab + off_frozen);
            if (!p->trainable) off_frozen += p->numel;
        } else {
            if (t->dtype == OTTER_DTYPE_STRING)
                return ot_error(OTTER_ERR_UNSUPPORTED, "parameter '%s' is a string tensor", p->name);
            p->value.data = ot_calloc(nb ? nb : 1, 1);
            if (!p->value.data) return OT_NOMEM();
        }
        p->value.owns_data = false;
        p->set = t->data != NULL || p->numel == 0;
        if (t->data && nb) memcpy(p->value.data, t->data, nb);
        /* the checkpoint's copy goes at once: the state is held once while the slabs fill */
        if (p->set && t->dtype != OTTER_DTYPE_STRING) OT_TRY(ot_ckpt_view_param(s->ck, p->name, p->value.data));
        if (p->trainable) {
            p->grad = p->value;
            p->grad.name = (char *)(uintptr_t)p->grad_input;
            p->grad.data = s->grad_slab + p->off_train;
        }
    }
    return OTTER_OK;
}

static otter_status make_run_arrays(ot_training_binding *b, size_t n_fixed) {
    b->n_run = b->n_user_in + n_fixed;
    b->run_names = ot_calloc(b->n_run + 1, sizeof *b->run_names);
    b->run_inputs = ot_calloc(b->n_run + 1, sizeof *b->run_inputs);
    if (!b->run_names || !b->run_inputs) return OT_NOMEM();
    for (size_t i = 0; i < b->n_user_in; i++) b->run_names[i] = b->user_in[i];
    return OTTER_OK;
}

/* ---- accumulators and shape reads early ---------------------------------------------------------------- */

static bool is_accumulator(const otter_node *n) {
    return ot_streq(n->domain, "com.microsoft") &&
           (ot_streq(n->op_type, "InPlaceAccumulatorV2") || ot_streq(n->op_type, "InPlaceAccumulator"));
}

/* Shape and Size read only their input's shape: a backward pass's Shape of a forward activation
 * (the gradients of Slice, Reshape, Div, ... ask for their input's shape) kept the whole activation
 * alive until backward reached it. */
static bool reads_shape_only(const otter_node *n) {
    return ot_str_empty(n->domain) && (ot_streq(n->op_type, "Shape") || ot_streq(n->op_type, "Size"));
}

static bool runs_early(const otter_node *n) { return is_accumulator(n) || reads_shape_only(n); }

typedef struct node_rank {
    size_t after; /* runs right after node `after` (its own index unless moved) */
    size_t moved; /* 0 in place, 1 moved up */
    size_t index; /* original position: ties keep the file's order */
    otter_node *node;
} node_rank;

static int cmp_node_rank(const void *pa, const void *pb) {
    const node_rank *a = pa, *b = pb;
    if (a->after != b->after) return a->after < b->after ? -1 : 1;
    if (a->moved != b->moved) return a->moved < b->moved ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* ONNX Runtime's artifacts (and otter's) place the gradient accumulators after the whole backward
 * pass, so every weight gradient stays alive in the arena until the step ends (45 MB of resnet18's
 * 100 MB arena); and a backward Shape node keeps the forward activation it reads alive until
 * then (150 of the 541 MB a 4-layer d=256 encoder's step peaked at, batch 32). Each accumulator
 * and each Shape / Size moves to right after the node producing the last of its inputs (the
 * graph stays topologically sorted: it reads nothing produced later, and what reads its output
 * came after it already), so what it reads can die as soon as its other readers are done. */
static otter_status run_early(otter_graph *g) {
    node_rank *r = ot_calloc(g->n_nodes + 1, sizeof *r);
    if (!r) return OT_NOMEM();
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        r[i] = (node_rank){.after = i, .index = i, .node = n};
        if (!runs_early(n)) continue;
        size_t last = 0;
        bool found = false, blocked = false;
        for (size_t k = 0; k < n->n_inputs; k++)
            for (size_t j = i; !ot_str_empty(n->inputs[k]) && j-- > 0;) {
                const otter_node *p = g->nodes[j];
                bool produces = false;
                for (size_t o = 0; o < p->n_outputs; o++) produces |= ot_streq(p->outputs[o], n->inputs[k]);
                if (!produces) continue;
                blocked |= runs_early(p); /* chains of them keep their order */
                if (!found || j > last) last = j, found = true;
                break;
            }
        if (found && !blocked) r[i].after = last, r[i].moved = 1;
    }
    qsort(r, g->n_nodes, sizeof *r, cmp_node_rank);
    for (size_t i = 0; i < g->n_nodes; i++) g->nodes[i] = r[i].node;
    ot_free(r);
    return OTTER_OK;
}

static otter_status bind_training(otter_training_session *s, const otter_session_options *so) {
    size_t n_fixed = s->n_params + 1;
    for (size_t i = 0; i < s->n_params; i++) n_fixed += s->params[i].trainable;
    OT_TRY(make_run_arrays(&s->train, n_fixed));
    size_t k = s->train.n_user_in;
    for (size_t i = 0; i < s->n_params; i++) {
        s->train.run_names[k] = s->params[i].name;
        s->train.run_inputs[k++] = &s->params[i].value;
    }
    for (size_t i = 0; i < s->n_params; i++)
        if (s->params[i].trainable) {
            s->train.run_names[k] = s->params[i].grad_input;
            s->train.run_inputs[k++] = &s->params[i].grad;
        }
    int64_t one = 1;
    s->reset_flag =
        (otter_tensor){.name = "lazy_reset_grad", .dtype = OTTER_DTYPE_BOOL, .rank = 1, .data = &s->reset_value};
    s->reset_flag.dims[0] = one;
    s->train.run_names[k] = "lazy_reset_grad";
    s->train.run_inputs[k++] = &s->reset_flag;
    OT_ASSERT(k == s->train.n_run);
    OT_TRY(run_early(s->train_m->graph));
    otter_status st = otter_session_create(&s->train.sess, s->train_m, so);
    if (st != OTTER_OK) return ot_error_context(st, "training model: ");
    /* Dropout nodes get a per-step seed when the session is seeded, in the graph the session runs
     * (a fused copy when the runtime fused anything) */
    const otter_graph *g = otter_session_model(s->train.sess)->graph;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (ot_str_empty(g->nodes[i]->domain) && strcmp(g->nodes[i]->op_type, "Dropout") == 0) {
            otter_node **d = ot_realloc(s->dropouts, (s->n_dropouts + 1) * sizeof *d);
            if (!d) return OT_NOMEM();
            s->dropouts = d;
            s->dropouts[s->n_dropouts++] = g->nodes[i];
        }
    return OTTER_OK;
}

/* ---- eval graph ---------------------------------------------------------------------------------- */

static bool is_training_user_input(const otter_training_session *s, const char *name) {
    for (size_t i = 0; i < s->train.n_user_in; i++)
        if (strcmp(s->train.user_in[i], name) == 0) return true;
    return false;
}

static otter_status bind_eval(otter_training_session *s, const otter_session_options *so) {
    const otter_graph *g = s->eval_m->graph;
    ot_training_binding *b = &s->eval;
    b->user_in = ot_calloc(g->n_inputs + 1, sizeof *b->user_in);
    b->user_in_type = ot_calloc(g->n_inputs + 1, sizeof *b->user_in_type);
    b->user_out = ot_calloc(g->n_outputs + 1, sizeof *b->user_out);
    ot_training_param **ps = ot_calloc(g->n_inputs + 1, sizeof *ps);
    if (!b->user_in || !b->user_in_type || !b->user_out || !ps) {
        ot_free(ps);
        return OT_NOMEM();
    }
    size_t n_ps = 0;
    otter_status st = OTTER_OK;
    for (size_t i = 0; i < g->n_inputs && st == OTTER_OK; i++) {
        const otter_value *v = &g->inputs[i];
        if (is_initializer(g, v->name)) continue;
        ot_training_param *p = ot_training_find_param(s, v->name);
        if (p) {
            st = check_decl("eval model", v, &p->value, "parameter");
            ps[n_ps++] = p;
        } else if (is_training_user_input(s, v->name)) {
            b->user_in_type[b->n_user_in] = v->has_type ? &v->type : NULL;
            b->user_in[b->n_user_in++] = v->name;
        } else {
            st = ot_error(OTTER_ERR_INVALID,
                          "eval model input '%s' is neither a checkpoint parameter nor an input of the training model "
                          "(eval model from a different model?)",
                          v->name);
        }
    }
    /* parameters in the training model's order, as ORT requires */
    for (size_t i = 1; i < n_ps && st == OTTER_OK; i++)
        if (ps[i] < ps[i - 1])
            st = ot_error(OTTER_ERR_INVALID,
                          "eval model: parameter inputs '%s' and '%s' are not in the training model's order",
                          ps[i - 1]->name, ps[i]->name);
    if (st == OTTER_OK && n_ps == 0 && s->n_params > 0)
        st = ot_error(OTTER_ERR_INVALID, "eval model has none of the checkpoint's parameters as inputs (eval model "
                                         "from a different model?)");
    if (st == OTTER_OK) st = make_run_arrays(b, n_ps);
    for (size_t i = 0; i < n_ps && st == OTTER_OK; i++) {
        b->run_names[b->n_user_in + i] = ps[i]->name;
        b->run_inputs[b->n_user_in + i] = &ps[i]->value;
    }
    ot_free(ps);
    if (st != OTTER_OK) return st;
    for (size_t i = 0; i < g->n_outputs; i++) b->user_out[b->n_user_out++] = g->outputs[i].name;
    st = otter_session_create(&b->sess, s->eval_m, so);
    if (st != OTTER_OK) return ot_error_context(st, "eval model: ");
    return OTTER_OK;
}

/* ---- optimizer graph ----------------------------------------------------------------------------- */

static otter_status parse_optimizer(otter_training_session *s) {
    const otter_graph *g = s->optim_m->graph;
    const otter_node *opt = NULL, *clip = NULL;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const otter_node *n = g->nodes[i];
        bool ms = n->domain && strcmp(n->domain, "com.microsoft") == 0;
        if (ms && (strcmp(n->op_type, "AdamWOptimizer") == 0 || strcmp(n->op_type, "SGDOptimizerV2") == 0)) {
            if (opt)
                return ot_error(OTTER_ERR_UNSUPPORTED, "optimizer model: more than one optimizer node ('%s', '%s')",
                                opt->name ? opt->name : "", n->name ? n->name : "");
            opt = n;
        } else if (ms && strcmp(n->op_type, "InplaceClipGradNorm") == 0 && !clip) {
            clip = n;
        } else {
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "optimizer model: node '%s' (%s) is not an optimizer node otter drives (AdamWOptimizer, "
                            "SGDOptimizerV2, InplaceClipGradNorm)",
                            n->name ? n->name : "", n->op_type);
        }
    }
    if (!opt) return ot_error(OTTER_ERR_INVALID, "optimizer model has no AdamWOptimizer or SGDOptimizerV2 node");
    bool adamw = strcmp(opt->op_type, "AdamWOptimizer") == 0;
    static const char *const want[] = {"learning_rate",       "step", "params", "gradients", "first_order_moments",
                                       "second_order_moments"};
    size_t n_want = adamw ? 6 : 5;
    size_t k = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        if (is_initializer(g, g->inputs[i].name)) continue;
        if (k >= n_want || strcmp(g->inputs[i].name, want[k]) != 0)
            return ot_error(OTTER_ERR_INVALID,
                            "optimizer model input %zu is '%s', expected '%s' (inputs must be learning_rate, step, "
                            "params, gradients, first_order_moments%s, in this order)",
                            k, g->inputs[i].name, k < n_want ? want[k] : "(nothing)",
                            adamw ? ", second_order_moments" : "");
        k++;
    }
    if (k != n_want)
        return ot_error(OTTER_ERR_INVALID, "optimizer model has %zu inputs, expected %zu (missing '%s')", k, n_want,
                        want[k]);
    const char *grads = "gradients";
    if (clip) {
        if (clip->n_inputs < 1 || strcmp(clip->inputs[0], "gradients") != 0 || clip->n_outputs < 1)
            return ot_error(OTTER_ERR_INVALID, "optimizer model: InplaceClipGradNorm must read 'gradients'");
        grads = clip->outputs[0];
        s->clip = true;
        s->clip_max_norm = otter_node_attr_float(clip, "max_norm", 1.0f);
        s->clip_norm_type = otter_node_attr_string(clip, "norm_type", "fro");
    }
    size_t wi = adamw ? 2 : 1, gi = adamw ? 3 : 2;
    if (opt->n_inputs <= gi || strcmp(opt->inputs[0], "learning_rate") != 0 || strcmp(opt->inputs[wi], "params") != 0 ||
        strcmp(opt->inputs[gi], grads) != 0 ||
        (adamw &&
         (opt->n_inputs < 6 || strcmp(opt->inputs[1], "step") != 0 ||
          strcmp(opt->inputs[4], "first_order_moments") != 0 || strcmp(opt->inputs[5], "second_order_moments") != 0)))
        return ot_error(OTTER_ERR_INVALID,
                        "optimizer model: node '%s' (%s) is not wired to the graph's inputs as ORT "
                        "lays it out",
                        opt->name ? opt->name : "", opt->op_type);
    if (adamw) {
        s->optim = TS_OPTIM_ADAMW;
        OT_TRY(ot_adamw_params_from_node(opt, &s->adamw));
    } else {
        s->optim = TS_OPTIM_SGD;
    }
    return OTTER_OK;
}

/* Momentums and step from the checkpoint's group0 (when the state holds values). */
static otter_status load_optimizer_state(otter_training_session *s) {
    const otter_optimizer_group *gr = NULL;
    if (otter_checkpoint_get_group(s->ck, "group0", &gr) != OTTER_OK) {
        otter_clear_error();
        return OTTER_OK;
    }
    s->step = gr->step;
    if (s->optim == TS_OPTIM_NONE || s->n_train == 0 || otter_checkpoint_is_nominal(s->ck)) return OTTER_OK;
    size_t n_m = s->optim == TS_OPTIM_ADAMW ? 2 : 1;
    float *slab[2] = {NULL, NULL};
    for (size_t j = 0; j < n_m; j++) {
        slab[j] = ot_calloc(s->n_train, sizeof(float));
        if (!slab[j]) {
            ot_free(slab[0]);
            return OT_NOMEM();
        }
    }
    otter_status st = OTTER_OK;
    bool any = false, all = true;
    const char *missing = NULL, *missing_m = NULL;
    for (size_t i = 0; i < s->n_params && st == OTTER_OK; i++) {
        ot_training_param *p = &s->params[i];
        if (!p->trainable) continue;
        for (size_t j = 0; j < n_m; j++) {
            const char *mn = j ? "momentum1" : "momentum0";
            const otter_tensor *m = NULL;
            if (otter_checkpoint_get_optimizer_state(s->ck, "group0", p->name, mn, &m) != OTTER_OK || !m->data) {
                otter_clear_error();
                all = false;
                if (!missing) missing = p->name, missing_m = mn;
                continue;
            }
            any = true;
            if (m->dtype != OTTER_DTYPE_FLOAT || (size_t)otter_tensor_numel(m) != p->numel)
                st = ot_error(OTTER_ERR_INVALID, "checkpoint: %s of parameter '%s' does not match the parameter", mn,
                              p->name);
            else {
                memcpy(slab[j] + p->off_train, m->data, p->numel * sizeof(float));
                otter_tensor v = *m;
                v.data = slab[j] + p->off_train;
                st = ot_ckpt_view_momentum(s->ck, "group0", p->name, &v);
            }
        }
    }
    if (st == OTTER_OK && any && !all)
        st = ot_error(OTTER_ERR_INVALID, "checkpoint: group0 has no %s for parameter '%s'", missing_m, missing);
    if (st != OTTER_OK || !any) {
        if (any && ot_ckpt_own_data(s->ck) != OTTER_OK) st = OT_NOMEM(); /* the views go before the slabs */
        ot_free(slab[0]);
        ot_free(slab[1]);
        return st;
    }
    s->m1 = slab[0];
    s->m2 = slab[1];
    s->have_moments = true;
    return OTTER_OK;
}

/* ---- create ------------------------------------------------------------------------------------ */

otter_status otter_training_session_create_from_models(otter_training_session **out, otter_checkpoint *ckpt,
                                                       otter_model *training, otter_model *eval, otter_model *optimizer,
                                                       const otter_training_options *opts) {
    if (!out || !ckpt || !training)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_training_session_create: NULL checkpoint or training model");
    *out = NULL;
    otter_training_session *s = ot_calloc(1, sizeof *s);
    if (!s) return OT_NOMEM();
    s->ck = ckpt;
    s->train_m = training;
    s->eval_m = eval;
    s->optim_m = optimizer;
    s->lr = 0.001f;
    s->accumulate = false;
    if (opts && opts->seed_set) s->seed_set = true, s->seed = opts->seed;
    /* opt level 2: fusions (runtime/fuse.c), among them the one for MaxPool's standard-op gradient */
    otter_session_options so = {.n_threads = opts ? opts->n_threads : 0,
                                .opt_level = 2,
                                .opt_level_set = true,
                                .max_memory_bytes = opts ? opts->max_memory_bytes : 0,
                                .profile = opts && opts->profile};
    otter_status st = classify_training(s);
    if (st == OTTER_OK) st = lay_out(s);
    if (st == OTTER_OK) st = bind_training(s, &so);
    if (st == OTTER_OK && eval) st = bind_eval(s, &so);
    if (st == OTTER_OK && optimizer) {
        st = parse_optimizer(s);
        if (st != OTTER_OK) ot_error_context(st, "optimizer model: ");
    }
    if (st == OTTER_OK) st = load_optimizer_state(s);
    if (st == OTTER_OK) st = ot_training_share_state(s);
    if (st != OTTER_OK) {
        otter_status own = ot_ckpt_own_data(s->ck); /* it borrowed the slabs about to go */
        if (own != OTTER_OK) st = own;
        s->ck = NULL; /* the caller keeps what it passed */
        s->train_m = s->eval_m = s->optim_m = NULL;
        otter_training_session_free(s);
        return st;
    }
    *out = s;
    return OTTER_OK;
}

static otter_status load_model_opt(otter_model **m, const char *path, const void *data, size_t size, const char *what) {
    *m = NULL;
    otter_status st = OTTER_OK;
    if (path)
        st = otter_model_load(m, path);
    else if (data)
        st = otter_model_load_from_memory(m, data, size, NULL);
    if (st != OTTER_OK) ot_error_context(st, "%s: ", what);
    return st;
}

/* Artifacts carrying a generation (OTTER_ARTIFACTS_GENERATION_KEY) must carry the same one; *want is
 * the first seen (or the folder manifest's). */
static otter_status same_generation(const char **want, const char *have, const char *what) {
    if (!have) return OTTER_OK; /* made elsewhere (ONNX Runtime): nothing to compare */
    if (!*want) *want = have;
    if (strcmp(*want, have) == 0) return OTTER_OK;
    return ot_error(OTTER_ERR_INVALID,
                    "the %s comes from another `otter artifacts` run (generation %s, the rest %s): the files are a "
                    "mix of two runs; make the artifacts again into one folder",
                    what, have, *want);
}

static otter_status create_loaded(otter_training_session **out, otter_checkpoint *ckpt, const char *tp, const void *td,
                                  size_t ts, const char *ep, const void *ed, size_t es, const char *op, const void *od,
                                  size_t os, const otter_training_options *opts, const char **generation) {
    if (!out || !ckpt || (!tp && !td))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_training_session_create: NULL checkpoint or training model");
    otter_model *t = NULL, *e = NULL, *o = NULL;
    otter_status st = load_model_opt(&t, tp, td, ts, "training model");
    if (st == OTTER_OK) st = load_model_opt(&e, ep, ed, es, "eval model");
    if (st == OTTER_OK) st = load_model_opt(&o, op, od, os, "optimizer model");
    const otter_model *models[] = {t, e, o};
    static const char *const whats[] = {"training model", "eval model", "optimizer model"};
    for (size_t i = 0; i < 3 && st == OTTER_OK && generation; i++)
        st = same_generation(generation, otter_model_metadata(models[i], OTTER_ARTIFACTS_GENERATION_KEY), whats[i]);
    if (st == OTTER_OK) st = otter_training_session_create_from_models(out, ckpt, t, e, o, opts);
    if (st != OTTER_OK) {
        otter_model_free(t);
        otter_model_free(e);
        otter_model_free(o);
    }
    return st;
}

otter_status otter_training_session_create(otter_training_session **out, otter_checkpoint *ckpt,
                                           const char *training_model, const char *eval_model,
                                           const char *optimizer_model, const otter_training_options *opts) {
    if (!training_model) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_session_create: NULL training model path");
    return create_loaded(out, ckpt, training_model, NULL, 0, eval_model, NULL, 0, optimizer_model, NULL, 0, opts, NULL);
}

otter_status otter_training_session_create_from_memory(otter_training_session **out, otter_checkpoint *ckpt,
                                                       const void *training, size_t training_size, const void *eval,
                                                       size_t eval_size, const void *optimizer, size_t optimizer_size,
                                                       const otter_training_options *opts) {
    if (!training)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_training_session_create_from_memory: NULL training model");
    return create_loaded(out, ckpt, NULL, training, training_size, NULL, eval, eval_size, NULL, optimizer,
                         optimizer_size, opts, NULL);
}

static bool file_exists(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    fclose(f);
    return true;
}

/* The folder's manifest (OTTER_ARTIFACTS_MANIFEST): OK with *generation set (or NULL without one);
 * an error when it records an interrupted write or can't be read. */
static otter_status read_manifest(const char *dir, const char *prefix, char generation[33], bool *found) {
    *found = false;
    char *file = ot_sprintf("%s%s", prefix, OTTER_ARTIFACTS_MANIFEST);
    char *path = file ? ot_path_join(dir, file) : NULL;
    ot_free(file);
    if (!path) return OT_NOMEM();
    void *text = NULL;
    size_t size = 0;
    otter_status st = ot_read_file(path, &text, &size);
    if (st == OTTER_ERR_NOT_FOUND) {
        otter_clear_error();
        ot_free(path);
        return OTTER_OK;
    }
    char state[16] = "";
    if (st == OTTER_OK &&
        (sscanf(text, "otter artifacts %32[0-9a-f] %15s", generation, state) != 2 || strlen(generation) != 32))
        st = ot_error(OTTER_ERR_INVALID, "'%s': not an otter artifacts manifest", path);
    else if (st == OTTER_OK && strcmp(state, "complete") != 0)
        st = ot_error(OTTER_ERR_INVALID,
                      "'%s' says '%s': an `otter artifacts` write into this folder was interrupted, so its files may "
                      "be a mix of two runs; make the artifacts again",
                      path, state);
    *found = st == OTTER_OK;
    ot_free(text);
    ot_free(path);
    return st;
}

otter_status otter_training_session_create_from_dir(otter_training_session **out, const char *dir, const char *prefix,
                                                    const char *checkpoint, const otter_training_options *opts) {
    if (!out || !dir) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_session_create_from_dir: NULL argument");
    const char *pf = prefix ? prefix : "";
    static const char *const names[] = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"};
    char *paths[4] = {NULL, NULL, NULL, NULL};
    char manifest[33] = "";
    bool has_manifest = false;
    otter_status st = read_manifest(dir, pf, manifest, &has_manifest);
    const char *generation = has_manifest ? manifest : NULL;
    for (int i = 0; i < 4 && st == OTTER_OK; i++) {
        char *file = ot_sprintf("%s%s", pf, names[i]);
        paths[i] = file ? ot_path_join(dir, file) : NULL;
        ot_free(file);
        if (!paths[i]) st = OT_NOMEM();
    }
    otter_checkpoint *ck = NULL;
    if (st == OTTER_OK && !file_exists(paths[0]))
        st = ot_error(OTTER_ERR_NOT_FOUND, "'%s': no training model in the artifacts folder", paths[0]);
    if (st == OTTER_OK) st = otter_checkpoint_load(&ck, checkpoint ? checkpoint : paths[3]);
    if (st == OTTER_OK) {
        const otter_property *p = NULL;
        if (otter_checkpoint_get_property(ck, OTTER_ARTIFACTS_GENERATION_KEY, &p) != OTTER_OK) otter_clear_error();
        st = same_generation(&generation, p && p->type == OTTER_PROPERTY_STRING ? p->s : NULL, "checkpoint");
        if (st == OTTER_OK)
            st = create_loaded(out, ck, paths[0], NULL, 0, file_exists(paths[1]) ? paths[1] : NULL, NULL, 0,
                               file_exists(paths[2]) ? paths[2] : NULL, NULL, 0, opts, &generation);
        if (st != OTTER_OK) otter_checkpoint_free(ck);
    }
    for (int i = 0; i < 4; i++) ot_free(paths[i]);
    return st;
}

bool otter_training_has_eval(const otter_training_session *s) { return s && s->eval.sess; }
bool otter_training_has_optimizer(const otter_training_session *s) { return s && s->optim != TS_OPTIM_NONE; }

size_t otter_training_profile(const otter_training_session *s, otter_training_graph g, otter_node_profile *out,
                              size_t cap) {
    const otter_session *rt = !s                          ? NULL
                              : g == OTTER_TRAINING_GRAPH ? s->train.sess
                              : g == OTTER_EVAL_GRAPH     ? s->eval.sess
                                                          : NULL;
    return rt ? otter_session_profile(rt, out, cap) : 0;
}

/* ---- inputs and outputs -------------------------------------------------------------------------- */

static const ot_training_binding *binding(const otter_training_session *s, otter_training_graph g) {
    if (!s) return NULL;
    return g == OTTER_EVAL_GRAPH ? &s->eval : &s->train;
}

size_t otter_training_input_count(const otter_training_session *s, otter_training_graph g) {
    const ot_training_binding *b = binding(s, g);
    return b ? b->n_user_in : 0;
}
const char *otter_training_input_name(const otter_training_session *s, otter_training_graph g, size_t i) {
    const ot_training_binding *b = binding(s, g);
    return b && i < b->n_user_in ? b->user_in[i] : NULL;
}
const otter_type *otter_training_input_type(const otter_training_session *s, otter_training_graph g, size_t i) {
    const ot_training_binding *b = binding(s, g);
    return b && i < b->n_user_in ? b->user_in_type[i] : NULL;
}
size_t otter_training_output_count(const otter_training_session *s, otter_training_graph g) {
    const ot_training_binding *b = binding(s, g);
    return b ? b->n_user_out : 0;
}
const char *otter_training_output_name(const otter_training_session *s, otter_training_graph g, size_t i) {
    const ot_training_binding *b = binding(s, g);
    return b && i < b->n_user_out ? b->user_out[i] : NULL;
}

/* ---- steps ------------------------------------------------------------------------------------- */

static otter_status bind_user(ot_training_binding *b, const char *model, size_t n, const char *const *names,
                              const otter_tensor *const *in) {
    if (n && !in) return ot_error(OTTER_ERR_ARGUMENT, "%s step: inputs is NULL", model);
    if (!names) {
        if (n != b->n_user_in)
            return ot_error(OTTER_ERR_ARGUMENT, "%s step: %zu inputs given, the %s model takes %zu (first: '%s')",
                            model, n, model, b->n_user_in, b->n_user_in ? b->user_in[0] : "");
        for (size_t i = 0; i < n; i++) b->run_inputs[i] = in[i];
        return OTTER_OK;
    }
    for (size_t j = 0; j < b->n_user_in; j++) b->run_inputs[j] = NULL;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < b->n_user_in && !(names[i] && strcmp(names[i], b->user_in[j]) == 0)) j++;
        if (j == b->n_user_in)
            return ot_error(OTTER_ERR_NOT_FOUND, "%s step: the %s model has no user input '%s'", model, model,
                            names[i] ? names[i] : "(null)");
        b->run_inputs[j] = in[i];
    }
    for (size_t j = 0; j < b->n_user_in; j++)
        if (!b->run_inputs[j])
            return ot_error(OTTER_ERR_ARGUMENT, "%s step: input '%s' is missing", model, b->user_in[j]);
    return OTTER_OK;
}

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void seed_dropouts(otter_training_session *s) {
    if (!s->seed_set) return;
    for (size_t i = 0; i < s->n_dropouts; i++) {
        otter_attr *a = otter_node_attr_mut(s->dropouts[i], "seed");
        int64_t v = (int64_t)(mix64(s->seed ^ mix64(((uint64_t)s->step << 20) + (s->since_opt << 8) + i)) >> 2);
        if (a && a->type == OTTER_ATTR_INT) {
            a->i = v; /* in place: the kernel reads it at run time; no allocation per step */
        } else if (otter_node_set_attr_int(s->dropouts[i], "seed", v) != OTTER_OK) {
            otter_clear_error(); /* out of memory: this step's mask comes from the unseeded stream */
        }
    }
}

void otter_training_set_seed(otter_training_session *s, uint64_t seed) {
    if (!s) return;
    s->seed_set = true;
    s->seed = seed;
}

otter_status otter_training_train_step(otter_training_session *s, size_t n_inputs, const char *const *input_names,
                                       const otter_tensor *const *inputs, size_t n_outputs, otter_tensor **outputs) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_train_step: NULL session");
    OT_TRY(ot_training_require_all_set(s, "train step"));
    if (n_outputs > s->train.n_user_out)
        return ot_error(OTTER_ERR_ARGUMENT, "train step: %zu outputs asked for, the training model has %zu", n_outputs,
                        s->train.n_user_out);
    OT_TRY(bind_user(&s->train, "training", n_inputs, input_names, inputs));
    s->reset_value = s->accumulate ? 0 : 1;
    seed_dropouts(s);
    otter_status st = otter_session_run(s->train.sess, s->train.n_run, s->train.run_names, s->train.run_inputs,
                                        n_outputs, s->train.user_out, outputs);
    if (st != OTTER_OK) return ot_error_context(st, "train step: ");
    s->accumulate = true;
    s->since_opt++;
    return OTTER_OK;
}

otter_status otter_training_lazy_reset_grad(otter_training_session *s) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_lazy_reset_grad: NULL session");
    s->accumulate = false;
    return OTTER_OK;
}

otter_status otter_training_eval_step(otter_training_session *s, size_t n_inputs, const char *const *input_names,
                                      const otter_tensor *const *inputs, size_t n_outputs, otter_tensor **outputs) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_eval_step: NULL session");
    if (!s->eval.sess) return ot_error(OTTER_ERR_ARGUMENT, "eval step: the session has no eval model");
    OT_TRY(ot_training_require_all_set(s, "eval step"));
    if (n_outputs > s->eval.n_user_out)
        return ot_error(OTTER_ERR_ARGUMENT, "eval step: %zu outputs asked for, the eval model has %zu", n_outputs,
                        s->eval.n_user_out);
    OT_TRY(bind_user(&s->eval, "eval", n_inputs, input_names, inputs));
    otter_status st = otter_session_run(s->eval.sess, s->eval.n_run, s->eval.run_names, s->eval.run_inputs, n_outputs,
                                        s->eval.user_out, outputs);
    if (st != OTTER_OK) return ot_error_context(st, "eval step: ");
    return OTTER_OK;
}

/* The update is elementwise over the flat slabs, so it runs in chunks on the training session's
 * threads (same bits as one pass: each element's operations don't depend on the split). A chunk of
 * 16K parameters is 256 KB over the four slabs: big enough that a chunk outweighs handing it out. */
enum { OPTIMIZER_CHUNK = 16384 };
typedef struct optimizer_job {
    const otter_training_session *s;
    int64_t step;
} optimizer_job;

static void optimizer_chunks(void *arg, int64_t c0, int64_t c1) {
    const optimizer_job *j = arg;
    const otter_training_session *s = j->s;
    const int64_t b = c0 * OPTIMIZER_CHUNK,
                  e = c1 * OPTIMIZER_CHUNK < (int64_t)s->n_train ? c1 * OPTIMIZER_CHUNK : (int64_t)s->n_train;
    if (s->optim == TS_OPTIM_ADAMW)
        ot_adamw_update(&s->adamw, s->lr, j->step, e - b, s->train_slab + b, s->grad_slab + b, s->m1 + b, s->m2 + b);
    else
        ot_sgd_update(s->lr, e - b, s->train_slab + b, s->grad_slab + b);
}

otter_status otter_training_optimizer_step(otter_training_session *s) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_optimizer_step: NULL session");
    if (s->optim == TS_OPTIM_NONE)
        return ot_error(OTTER_ERR_ARGUMENT, "optimizer step: the session has no optimizer model");
    OT_TRY(ot_training_require_all_set(s, "optimizer step"));
    if (!s->have_moments && s->n_train) {
        s->m1 = ot_calloc(s->n_train, sizeof(float));
        if (s->optim == TS_OPTIM_ADAMW) s->m2 = ot_calloc(s->n_train, sizeof(float));
        if (!s->m1 || (s->optim == TS_OPTIM_ADAMW && !s->m2)) {
            ot_free(s->m1);
            ot_free(s->m2);
            s->m1 = s->m2 = NULL;
            return OT_NOMEM();
        }
        s->have_moments = true;
    }
    int64_t t = s->step + 1;
    if (s->clip && s->n_train) {
        otter_tensor g = {.name = "gradients", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .data = s->grad_slab};
        g.dims[0] = (int64_t)s->n_train;
        otter_tensor *gp = &g;
        OT_TRY(ot_clip_grad_norm(1, &gp, s->clip_max_norm, s->clip_norm_type, NULL));
    }
    optimizer_job job = {.s = s, .step = t};
    ot_pool_run(s->train.sess->pool, ((int64_t)s->n_train + OPTIMIZER_CHUNK - 1) / OPTIMIZER_CHUNK, 1, optimizer_chunks,
                &job);
    s->step = t;
    s->since_opt = 0;
    return OTTER_OK;
}

int64_t otter_training_step_count(const otter_training_session *s) { return s ? s->step : 0; }
