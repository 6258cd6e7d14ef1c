/* Training artifacts in ONNX Runtime's layout: the training, eval and optimizer models and the
 * checkpoint, built from a forward model. The contract (input/output order, names, opsets) is
 * ../shared/specs/ort-training-format.md. */
#include "otter/artifacts.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/core.h"
#include "core/strmap.h"
#include "otter/autodiff.h"
#include "otter/check.h"
#include "otter/checkpoint.h"
#include "otter/edit.h"
#include "otter/io.h"

bool otter_loss_from_name(const char *name, otter_loss_kind *out) {
    static const struct {
        const char *name;
        otter_loss_kind kind;
    } names[] = {{"MSELoss", OTTER_LOSS_MSE},
                 {"CrossEntropyLoss", OTTER_LOSS_CROSS_ENTROPY},
                 {"BCEWithLogitsLoss", OTTER_LOSS_BCE_WITH_LOGITS},
                 {"L1Loss", OTTER_LOSS_L1},
                 {"none", OTTER_LOSS_NONE}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (ot_streq(name, names[i].name)) {
            *out = names[i].kind;
            return true;
        }
    *out = OTTER_LOSS_NONE;
    return false;
}

static bool in_list(const char *name, size_t n, const char *const *list) {
    for (size_t i = 0; i < n; i++)
        if (ot_streq(name, list[i])) return true;
    return false;
}

/* ---- parameters ----------------------------------------------------------------------------- */

/* Which initializers become parameters, in initializer order. */
static otter_status choose_params(otter_artifacts *a, const otter_graph *g, const otter_artifacts_options *o) {
    for (size_t i = 0; i < o->n_requires_grad; i++) {
        ptrdiff_t k = otter_graph_find_initializer(g, o->requires_grad[i]);
        if (k < 0)
            return ot_error(OTTER_ERR_NOT_FOUND, "requires_grad: '%s' is not an initializer", o->requires_grad[i]);
        if (!otter_dtype_is_float(g->initializers[k]->dtype))
            return ot_error(OTTER_ERR_INVALID, "requires_grad: '%s' is %s, not a float tensor", o->requires_grad[i],
                            otter_dtype_name(g->initializers[k]->dtype));
        if (in_list(o->requires_grad[i], o->n_frozen, o->frozen))
            return ot_error(OTTER_ERR_ARGUMENT, "'%s' is listed as both trainable and frozen", o->requires_grad[i]);
    }
    for (size_t i = 0; i < o->n_frozen; i++)
        if (otter_graph_find_initializer(g, o->frozen[i]) < 0)
            return ot_error(OTTER_ERR_NOT_FOUND, "frozen: '%s' is not an initializer", o->frozen[i]);
    /* BatchNormalization running statistics are frozen by default. */
    ot_strmap bn = {0};
    if (!o->n_requires_grad)
        for (size_t i = 0; i < g->n_nodes; i++)
            if (ot_streq(g->nodes[i]->op_type, "BatchNormalization"))
                for (size_t j = 3; j < 5 && j < g->nodes[i]->n_inputs; j++)
                    if (ot_strmap_put(&bn, g->nodes[i]->inputs[j], 1) != OTTER_OK) {
                        ot_strmap_free(&bn);
                        return OT_NOMEM();
                    }
    a->trainable = ot_calloc(g->n_initializers + 1, sizeof *a->trainable);
    a->frozen = ot_calloc(g->n_initializers + 1, sizeof *a->frozen);
    otter_status s = a->trainable && a->frozen ? OTTER_OK : OT_NOMEM();
    for (size_t i = 0; i < g->n_initializers && s == OTTER_OK; i++) {
        const otter_tensor *t = g->initializers[i];
        bool frozen = in_list(t->name, o->n_frozen, o->frozen);
        bool bn_stat = ot_strmap_get(&bn, t->name, NULL);
        bool trainable = o->n_requires_grad ? in_list(t->name, o->n_requires_grad, o->requires_grad)
                                            : !frozen && !bn_stat && t->dtype == OTTER_DTYPE_FLOAT;
        char **list = trainable ? a->trainable : (frozen || bn_stat) ? a->frozen : NULL;
        if (!list) continue;
        size_t *n = trainable ? &a->n_trainable : &a->n_frozen;
        if (!(list[*n] = ot_strdup(t->name)))
            s = OT_NOMEM();
        else
            (*n)++;
        if (bn_stat && !frozen && !trainable) a->n_bn_frozen++;
    }
    ot_strmap_free(&bn);
    if (s == OTTER_OK && a->n_trainable == 0)
        s = ot_error(OTTER_ERR_INVALID, "the model has no trainable parameters (no float initializers to train)");
    return s;
}

/* ---- the loss ----------------------------------------------------------------------------------- */

/* Append the loss to m and make its outputs [loss, additional outputs...]. */
static otter_status add_loss(otter_model *m, const otter_artifacts_options *o, char **loss_name) {
    otter_graph *g = m->graph;
    size_t n_in = o->n_loss_inputs ? o->n_loss_inputs : g->n_outputs;
    const char **loss_inputs = ot_calloc(n_in + 1, sizeof *loss_inputs);
    if (!loss_inputs) return OT_NOMEM();
    for (size_t i = 0; i < n_in; i++) {
        loss_inputs[i] = o->n_loss_inputs ? o->loss_inputs[i] : g->outputs[i].name;
        if (otter_graph_find_output(g, loss_inputs[i]) < 0 && otter_graph_find_producer(g, loss_inputs[i]) < 0) {
            ot_free(loss_inputs);
            return ot_error(OTTER_ERR_NOT_FOUND, "loss input '%s' is not a tensor of the model", loss_inputs[i]);
        }
    }
    otter_builder *b;
    otter_status s = otter_builder_create(&b, m, 0);
    if (s != OTTER_OK) {
        ot_free(loss_inputs);
        return s;
    }
    const char *loss = NULL;
    const char *target_names[] = {"target", "target_1", "target_2", "target_3"};
    bool single = n_in == 1;
    for (size_t i = 0; i < n_in; i++) {
        const char *part = NULL;
        const char *target = single ? "target" : i < 4 ? target_names[i] : "target_n";
        switch (o->loss) {
        case OTTER_LOSS_MSE:
            part = otter_block_mse_loss(b, loss_inputs[i], target, o->reduction);
            break;
        case OTTER_LOSS_L1:
            part = otter_block_l1_loss(b, loss_inputs[i], target, o->reduction);
            break;
        case OTTER_LOSS_BCE_WITH_LOGITS:
            part = otter_block_bce_with_logits_loss(b, loss_inputs[i], target, o->reduction, o->pos_weight,
                                                    o->n_pos_weight);
            break;
        case OTTER_LOSS_CROSS_ENTROPY:
            part = otter_block_cross_entropy_loss(b, loss_inputs[i], single ? "labels" : target, o->reduction,
                                                  o->ce_weight, o->n_ce_weight, o->has_ignore_index, o->ignore_index);
            break;
        case OTTER_LOSS_NONE:
            part = NULL;
            break;
        }
        if (o->loss == OTTER_LOSS_NONE) break;
        loss = loss ? otter_block_add(b, loss, part) : part;
    }
    if (o->loss == OTTER_LOSS_NONE)
        loss = o->custom_loss ? o->custom_loss(b, n_in, loss_inputs, o->custom_loss_user) : loss_inputs[0];
    char *name = loss ? ot_strdup(loss) : NULL;
    s = otter_builder_finish(b);
    ot_free(loss_inputs);
    if (s == OTTER_OK && !name) s = loss ? OT_NOMEM() : ot_error(OTTER_ERR_INVALID, "the custom loss built nothing");
    if (s != OTTER_OK) {
        ot_free(name);
        return ot_error_context(s, "adding the loss: ");
    }
    /* Outputs: the loss, then the additional outputs (with their declared types when known). */
    otter_graph *outs;
    if ((s = otter_graph_create(&outs, "outputs")) != OTTER_OK) {
        ot_free(name);
        return s;
    }
    s = otter_graph_add_output(outs, name, OTTER_DTYPE_FLOAT, 0, NULL, NULL);
    for (size_t i = 0; i < o->n_additional_outputs && s == OTTER_OK; i++) {
        const char *x = o->additional_outputs[i];
        if (otter_graph_find_producer(g, x) < 0 && otter_graph_find_input(g, x) < 0) {
            s = ot_error(OTTER_ERR_NOT_FOUND, "additional output '%s' is not a tensor of the model", x);
            break;
        }
        s = otter_graph_add_output(outs, x, OTTER_DTYPE_FLOAT, -1, NULL, NULL);
        const otter_type *t = otter_graph_value_type(g, x);
        otter_type copy;
        if (s == OTTER_OK && t && (s = otter_type_copy(&copy, t)) == OTTER_OK) {
            otter_type_clear(&outs->outputs[outs->n_outputs - 1].type);
            outs->outputs[outs->n_outputs - 1].type = copy;
        }
    }
    if (s == OTTER_OK) { /* swap the output lists; outs takes the old one away */
        otter_value *v = g->outputs;
        size_t n = g->n_outputs, cap = g->cap_outputs;
        g->outputs = outs->outputs;
        g->n_outputs = outs->n_outputs;
        g->cap_outputs = outs->cap_outputs;
        outs->outputs = v;
        outs->n_outputs = n;
        outs->cap_outputs = cap;
    }
    otter_graph_free(outs);
    if (s != OTTER_OK) {
        ot_free(name);
        return s;
    }
    *loss_name = name;
    return OTTER_OK;
}

/* ---- moving parameters to graph inputs ---------------------------------------------------------- */

/* Parameters leave the initializer list and become graph inputs after the user inputs, in order.
 * The initializer tensors move into *taken (trainable first, then frozen), for the checkpoint. */
static otter_status params_to_inputs(otter_graph *g, const otter_artifacts *a, otter_tensor **taken) {
    size_t n = 0;
    for (size_t i = 0; i < g->n_initializers;) {
        otter_tensor *t = g->initializers[i];
        if (!in_list(t->name, a->n_trainable, (const char *const *)a->trainable) &&
            !in_list(t->name, a->n_frozen, (const char *const *)a->frozen)) {
            i++;
            continue;
        }
        if (otter_graph_find_input(g, t->name) < 0)
            OT_TRY(otter_graph_add_input(g, t->name, t->dtype, t->rank, t->dims, NULL));
        if (taken)
            taken[n++] = t;
        else
            otter_tensor_free(t);
        memmove(&g->initializers[i], &g->initializers[i + 1], (g->n_initializers - i - 1) * sizeof *g->initializers);
        g->n_initializers--;
    }
    return OTTER_OK;
}

static otter_status add_ort_opsets(otter_model *m) {
    static const char *domains[] = {"com.microsoft",    "com.microsoft.nchwc",      "com.microsoft.experimental",
                                    "ai.onnx.training", "ai.onnx.preview.training", "org.pytorch.aten"};
    for (size_t i = 0; i < sizeof domains / sizeof domains[0]; i++)
        if (!otter_model_opset(m, domains[i])) OT_TRY(otter_model_set_opset(m, domains[i], 1));
    if (!otter_model_opset(m, "ai.onnx.ml")) OT_TRY(otter_model_set_opset(m, "ai.onnx.ml", 5));
    return OTTER_OK;
}

static otter_status build_training(otter_artifacts *a, const otter_model *with_loss, const char *loss,
                                   otter_tensor **params, const otter_artifacts_options *o) {
    OT_TRY(otter_model_clone(&a->training, with_loss));
    otter_model *m = a->training;
    otter_grad_options go = {.loss = loss, .n_wrt = a->n_trainable, .wrt = (const char *const *)a->trainable};
    OT_TRY(otter_model_add_gradients(m, &go));
    otter_graph *g = m->graph;
    /* The gradient builder made training-mode BatchNormalization nodes BatchNormInternal, as ORT does. */
    for (size_t i = 0; i < g->n_nodes && o->bn_unbiased_running_var; i++)
        if (ot_streq(g->nodes[i]->op_type, "BatchNormInternal") && ot_streq(g->nodes[i]->domain, "com.microsoft"))
            OT_TRY(otter_node_set_attr_int(g->nodes[i], "otter_unbiased_running_var", 1));
    OT_TRY(params_to_inputs(g, a, params));
    /* Gradient accumulation: <p>_grad.accumulation.buffer inputs, InPlaceAccumulatorV2 per parameter. */
    for (size_t i = 0; i < a->n_trainable; i++) {
        ptrdiff_t k = otter_graph_find_input(g, a->trainable[i]);
        OT_ASSERT(k >= 0);
        char *buffer = ot_sprintf("%s_grad.accumulation.buffer", a->trainable[i]);
        char *grad = ot_sprintf("%s_grad", a->trainable[i]);
        char *out = ot_sprintf("%s_grad.accumulation.out", a->trainable[i]);
        otter_status s = buffer && grad && out ? OTTER_OK : OT_NOMEM();
        if (s == OTTER_OK) {
            otter_type t;
            memset(&t, 0, sizeof t);
            t.rank = -1;
            s = otter_type_copy(&t, &g->inputs[k].type);
            if (s == OTTER_OK) {
                s = otter_graph_add_input(g, buffer, OTTER_DTYPE_FLOAT, 0, NULL, NULL);
                if (s == OTTER_OK) {
                    otter_type_clear(&g->inputs[g->n_inputs - 1].type);
                    g->inputs[g->n_inputs - 1].type = t;
                } else {
                    otter_type_clear(&t);
                }
            }
        }
        otter_node *n = NULL;
        if (s == OTTER_OK) {
            const char *ins[] = {buffer, grad, "lazy_reset_grad"}, *outs[] = {out};
            char *node_name = ot_sprintf("%s_accumulator", a->trainable[i]);
            s = node_name ? otter_node_create(&n, "InPlaceAccumulatorV2", node_name, 3, ins, 1, outs) : OT_NOMEM();
            ot_free(node_name);
            if (s == OTTER_OK && (s = otter_node_set_domain(n, "com.microsoft")) != OTTER_OK)
                otter_node_free(n);
            else if (s == OTTER_OK)
                s = otter_graph_add_node(g, n);
        }
        ot_free(buffer);
        ot_free(grad);
        ot_free(out);
        OT_TRY(s);
    }
    int64_t one = 1;
    OT_TRY(otter_graph_add_input(g, "lazy_reset_grad", OTTER_DTYPE_BOOL, 1, &one, NULL));
    for (size_t i = 0; i < a->n_trainable; i++) {
        char *out = ot_sprintf("%s_grad.accumulation.out", a->trainable[i]);
        otter_status s = out ? otter_graph_add_output(g, out, OTTER_DTYPE_BOOL, 1, &one, NULL) : OT_NOMEM();
        ot_free(out);
        OT_TRY(s);
    }
    return add_ort_opsets(m);
}

/* Eval: forward + loss with parameters as inputs in the training model's order; Dropout's
 * training_mode cleared, BatchNormalization in inference mode. */
static otter_status build_eval(otter_artifacts *a, const otter_model *with_loss, const otter_model *forward) {
    OT_TRY(otter_model_clone(&a->eval, with_loss));
    otter_graph *g = a->eval->graph;
    OT_TRY(params_to_inputs(g, a, NULL));
    /* The forward model's outputs, which the loss replaced: recorded (OTTER_FORWARD_OUTPUT_KEY<i>) with their
     * types, so that an export keeps them by default. */
    for (size_t i = 0; i < forward->graph->n_outputs; i++) {
        const otter_value *v = &forward->graph->outputs[i];
        char *key = ot_sprintf("%s%zu", OTTER_FORWARD_OUTPUT_KEY, i);
        otter_status s = key ? otter_model_set_metadata(a->eval, key, v->name) : OT_NOMEM();
        ot_free(key);
        OT_TRY(s);
        if (v->has_type && !otter_graph_value_type(g, v->name))
            OT_TRY(otter_graph_add_value_info(g, v->name, &v->type));
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        if (ot_streq(n->op_type, "Dropout") && n->n_inputs > 2) {
            while (n->n_inputs > 2) ot_free(n->inputs[--n->n_inputs]);
        } else if (ot_streq(n->op_type, "BatchNormalization")) {
            otter_attr *tm = otter_node_attr_mut(n, "training_mode");
            if (tm) tm->i = 0;
            while (n->n_outputs > 1) ot_free(n->outputs[--n->n_outputs]);
        }
    }
    /* Parameter inputs must follow the training model's order (ORT refuses otherwise). */
    return otter_graph_clean(g, NULL);
}

void otter_artifacts_adamw_defaults(otter_artifacts_options *o) {
    o->adamw_set = true;
    o->beta1 = 0.9f, o->beta2 = 0.999f, o->epsilon = 1e-6f, o->weight_decay = 0.0f;
    o->correct_bias = 1, o->adam_mode = 1;
}

static otter_status build_optimizer(otter_artifacts *a, const otter_model *base, const otter_artifacts_options *o) {
    int64_t opset = otter_model_opset(base, "");
    OT_TRY(otter_model_create(&a->optimizer, "graph", opset ? opset : 14));
    otter_model *m = a->optimizer;
    m->ir_version = base->ir_version > 7 ? base->ir_version : 7;
    OT_TRY(otter_model_set_opset(m, "com.microsoft", 1));
    otter_graph *g = m->graph;
    int64_t one = 1;
    OT_TRY(otter_graph_add_input(g, "learning_rate", OTTER_DTYPE_FLOAT, 1, &one, NULL));
    OT_TRY(otter_graph_add_input(g, "step", OTTER_DTYPE_INT64, 1, &one, NULL));
    bool adamw = o->optimizer == OTTER_OPTIM_ADAMW;
    const char *seqs[] = {"params", "gradients", "first_order_moments", "second_order_moments"};
    for (size_t i = 0; i < (adamw ? 4u : 3u); i++) {
        OT_TRY(otter_graph_add_input(g, seqs[i], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
        otter_type *t = &g->inputs[g->n_inputs - 1].type;
        otter_type elem;
        otter_type_init_tensor(&elem, OTTER_DTYPE_FLOAT, -1, NULL);
        otter_type *boxed = ot_calloc(1, sizeof *boxed);
        if (!boxed) return OT_NOMEM();
        *boxed = elem;
        otter_type_clear(t);
        t->kind = OTTER_TYPE_SEQUENCE;
        t->elem = boxed;
    }
    otter_node *n;
    if (adamw) {
        const char *out = "adamw.updated_flag";
        OT_TRY(otter_node_create(&n, "AdamWOptimizer", "AdamWOptimizer", 6,
                                 (const char *[]){"learning_rate", "step", "params", "gradients", "first_order_moments",
                                                  "second_order_moments"},
                                 1, &out));
        otter_artifacts_options hp = *o;
        if (!hp.adamw_set) otter_artifacts_adamw_defaults(&hp);
        otter_status s = otter_node_set_domain(n, "com.microsoft");
        if (s == OTTER_OK) s = otter_node_set_attr_float(n, "alpha", hp.beta1);
        if (s == OTTER_OK) s = otter_node_set_attr_float(n, "beta", hp.beta2);
        if (s == OTTER_OK) s = otter_node_set_attr_float(n, "epsilon", hp.epsilon);
        if (s == OTTER_OK) s = otter_node_set_attr_float(n, "weight_decay", hp.weight_decay);
        if (s == OTTER_OK) s = otter_node_set_attr_int(n, "correct_bias", hp.correct_bias);
        if (s == OTTER_OK) s = otter_node_set_attr_int(n, "adam_mode", hp.adam_mode);
        if (s != OTTER_OK) {
            otter_node_free(n);
            return s;
        }
        OT_TRY(otter_graph_add_node(g, n));
        OT_TRY(otter_graph_add_output(g, out, OTTER_DTYPE_BOOL, 1, &one, NULL));
    } else {
        const char *out = "sgd.update_completed";
        OT_TRY(otter_node_create(&n, "SGDOptimizerV2", "SGDOptimizerV2", 3,
                                 (const char *[]){"learning_rate", "params", "gradients"}, 1, &out));
        otter_status s = otter_node_set_domain(n, "com.microsoft");
        if (s != OTTER_OK) {
            otter_node_free(n);
            return s;
        }
        OT_TRY(otter_graph_add_node(g, n));
        OT_TRY(otter_graph_add_output(g, out, OTTER_DTYPE_BOOL, 0, NULL, NULL));
    }
    return OTTER_OK;
}

static otter_status fill_checkpoint(otter_artifacts *a, struct otter_checkpoint *c, otter_tensor **params,
                                    size_t n_params) {
    for (size_t k = 0; k < 2; k++) {
        otter_param_kind kind = k == 0 ? OTTER_PARAM_TRAINABLE : OTTER_PARAM_FROZEN;
        char **names = k == 0 ? a->trainable : a->frozen;
        size_t n = k == 0 ? a->n_trainable : a->n_frozen;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n_params; j++)
                if (ot_streq(params[j]->name, names[i])) OT_TRY(otter_checkpoint_add_param(c, kind, params[j]));
    }
    return OTTER_OK;
}

/* The checkpoint (and the nominal one, values left out), parameters in initializer order. */
static otter_status build_checkpoints(otter_artifacts *a, otter_tensor **params, size_t n_params, bool nominal) {
    OT_TRY(otter_checkpoint_create(&a->checkpoint));
    OT_TRY(fill_checkpoint(a, a->checkpoint, params, n_params));
    if (!nominal) return OTTER_OK;
    OT_TRY(otter_checkpoint_create(&a->nominal));
    OT_TRY(otter_checkpoint_set_nominal(a->nominal, true));
    return fill_checkpoint(a, a->nominal, params, n_params);
}

void otter_artifacts_free(otter_artifacts *a) {
    if (!a) return;
    otter_model_free(a->training);
    otter_model_free(a->eval);
    otter_model_free(a->optimizer);
    otter_checkpoint_free(a->checkpoint);
    otter_checkpoint_free(a->nominal);
    for (size_t i = 0; i < a->n_trainable; i++) ot_free(a->trainable[i]);
    for (size_t i = 0; i < a->n_frozen; i++) ot_free(a->frozen[i]);
    ot_free(a->trainable);
    ot_free(a->frozen);
    memset(a, 0, sizeof *a);
}

/* Every artifact of this build carries one id (see OTTER_ARTIFACTS_GENERATION_KEY). */
static otter_status stamp_generation(otter_artifacts *a) {
    ot_random_id(a->generation);
    otter_model *models[] = {a->training, a->eval, a->optimizer};
    for (size_t i = 0; i < 3; i++)
        if (models[i]) OT_TRY(otter_model_set_metadata(models[i], OTTER_ARTIFACTS_GENERATION_KEY, a->generation));
    OT_TRY(otter_checkpoint_set_property_string(a->checkpoint, OTTER_ARTIFACTS_GENERATION_KEY, a->generation));
    if (a->nominal)
        OT_TRY(otter_checkpoint_set_property_string(a->nominal, OTTER_ARTIFACTS_GENERATION_KEY, a->generation));
    return OTTER_OK;
}

otter_status otter_artifacts_build(otter_artifacts *a, const otter_model *m, const otter_artifacts_options *opts) {
    memset(a, 0, sizeof *a);
    otter_artifacts_options o = opts ? *opts : (otter_artifacts_options){0};
    otter_model *with_loss = NULL;
    char *loss = NULL;
    /* An invalid model (a name defined twice, a dangling input, ...) would give artifacts that
     * compute something else than the model; refuse it with the checker's first problem. */
    otter_status s = otter_model_check(m, NULL);
    if (s != OTTER_OK) return ot_error_context(s, "the model is not valid: ");
    otter_tensor **params = ot_calloc(m->graph->n_initializers + 1, sizeof *params);
    s = params ? OTTER_OK : OT_NOMEM();
    if (s == OTTER_OK) s = choose_params(a, m->graph, &o);
    if (s == OTTER_OK) s = otter_model_clone(&with_loss, m);
    if (s == OTTER_OK) s = otter_graph_topo_sort(with_loss->graph);
    if (s == OTTER_OK) s = add_loss(with_loss, &o, &loss);
    if (s == OTTER_OK) s = build_training(a, with_loss, loss, params, &o);
    if (s == OTTER_OK) s = build_eval(a, with_loss, m);
    if (s == OTTER_OK && o.optimizer != OTTER_OPTIM_NONE) s = build_optimizer(a, m, &o);
    if (s == OTTER_OK) s = build_checkpoints(a, params, a->n_trainable + a->n_frozen, o.nominal_checkpoint);
    if (s == OTTER_OK) s = stamp_generation(a);
    for (size_t i = 0; params && params[i]; i++) otter_tensor_free(params[i]);
    ot_free(params);
    ot_free(loss);
    otter_model_free(with_loss);
    if (s != OTTER_OK) otter_artifacts_free(a);
    return s;
}

static char *artifact_path(const char *dir, const char *prefix, const char *name) {
    return ot_sprintf("%s/%s%s", dir, prefix ? prefix : "", name);
}

/* mkdir -p */
static otter_status make_dirs(const char *dir) {
    char *path = ot_strdup(dir);
    if (!path) return OT_NOMEM();
    otter_status s = OTTER_OK;
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0') continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            s = ot_error(OTTER_ERR_IO, "%s: cannot create the folder: %s", path, strerror(errno));
            break;
        }
        *p = c;
        if (!c) break;
    }
    ot_free(path);
    return s;
}

/* The folder's manifest: "writing" before the first file, "complete" after the last. */
static otter_status write_manifest(const otter_artifacts *a, const char *dir, const char *prefix, const char *state) {
    char *path = artifact_path(dir, prefix, OTTER_ARTIFACTS_MANIFEST);
    char *text = ot_sprintf("otter artifacts %s %s\n", a->generation, state);
    otter_status s = path && text ? ot_write_file_atomic(path, text, strlen(text)) : OT_NOMEM();
    ot_free(text);
    ot_free(path);
    return s;
}

otter_status otter_artifacts_write(const otter_artifacts *a, const char *dir, const otter_artifacts_options *opts) {
    OT_TRY(make_dirs(dir));
    const char *prefix = opts ? opts->prefix : NULL;
    OT_TRY(write_manifest(a, dir, prefix, "writing"));
    struct {
        const char *name;
        const otter_model *m;
    } models[] = {
        {"training_model.onnx", a->training}, {"eval_model.onnx", a->eval}, {"optimizer_model.onnx", a->optimizer}};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 3 && s == OTTER_OK; i++) {
        if (!models[i].m) continue;
        char *path = artifact_path(dir, prefix, models[i].name);
        s = path ? otter_model_save(models[i].m, path, NULL) : OT_NOMEM();
        ot_free(path);
    }
    otter_checkpoint_save_options co = {.keep_order = true};
    if (s == OTTER_OK) {
        char *path = artifact_path(dir, prefix, "checkpoint");
        s = path ? otter_checkpoint_save(a->checkpoint, path, &co) : OT_NOMEM();
        ot_free(path);
    }
    if (s == OTTER_OK && a->nominal) {
        char *path = artifact_path(dir, prefix, "nominal_checkpoint");
        s = path ? otter_checkpoint_save(a->nominal, path, &co) : OT_NOMEM();
        ot_free(path);
    }
    if (s == OTTER_OK) s = write_manifest(a, dir, prefix, "complete");
    return s;
}
