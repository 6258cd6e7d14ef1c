/* Graph fusions (see fuse.h): one pass over a copy of the top-level graph, in node order. A chain
 * starts at a Conv / Gemm / MatMul and absorbs the single reader of its current output while that
 * reader matches the next allowed stage; the fused node takes the place of the chain's last node
 * (so a sum input produced between the Conv and the Add is defined before it is read) and keeps
 * the last node's output name. MaxPool's standard-op gradient is matched from its ScatterElements.
 * Removed nodes are freed only at the end: the maps borrow their strings. */
#include "runtime/fuse.h"

#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/strmap.h"
#include "ops/shape_math.h"
#include "runtime/layout.h"
#include "runtime/ops/conv_direct.h"

typedef struct fz {
    otter_graph *g;
    int64_t opset;      /* default domain */
    bool fold;          /* may make new initializers from constant ones (BatchNormalization folding) */
    ot_strmap uses;     /* name -> readers (node inputs at any depth, graph outputs) */
    ot_strmap reader;   /* name -> index of a top-level node reading it */
    ot_strmap producer; /* name -> index of the top-level node writing it */
    ot_strmap inits;    /* initializer name -> index */
    ot_strmap inputs;   /* graph input name -> index */
    ot_strmap names;    /* every name in the graph (for new initializer names) */
    otter_node **dead;
    size_t n_dead, cap_dead;
    size_t n_fused;
    bool made_ms;        /* made a com.microsoft node (FusedMatMul): the copy imports that domain */
    bool made_core_grad; /* made an AttentionCoreGrad (its heads' Transposes may go) */
    unsigned counter;
    /* Concats of convolutions joined where only blocked outputs run parts alone (fuse_concat_convs): each
     * FusedConv and where its convolutions, then its Concat, lie in dead */
    struct joined_parts {
        const otter_node *fused;
        size_t first_dead, n_parts;
    } * joined;
    size_t n_joined, cap_joined;
} fz;

static bool default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static bool is_op(const otter_node *n, const char *op) {
    return n && default_domain(n->domain) && !strcmp(n->op_type, op);
}

/* n is ONNX Runtime's com.microsoft `op` (the training graphs' gradient operators). */
static bool is_ms_op(const otter_node *n, const char *op) {
    return n && n->domain && !strcmp(n->domain, "com.microsoft") && !strcmp(n->op_type, op);
}

static intptr_t get(const ot_strmap *m, const char *k) {
    intptr_t v;
    return k && k[0] && ot_strmap_get(m, k, &v) ? v : -1;
}

static otter_status count_uses(fz *f, const otter_graph *g, bool top) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        for (size_t i = 0; i < n->n_inputs; i++) {
            if (!n->inputs[i][0]) continue;
            intptr_t c = get(&f->uses, n->inputs[i]);
            OT_TRY(ot_strmap_put(&f->uses, n->inputs[i], c < 0 ? 1 : c + 1));
            if (top) OT_TRY(ot_strmap_put(&f->reader, n->inputs[i], (intptr_t)k));
            if (top) OT_TRY(ot_strmap_put(&f->names, n->inputs[i], 1));
        }
        if (top)
            for (size_t o = 0; o < n->n_outputs; o++)
                if (n->outputs[o][0]) {
                    OT_TRY(ot_strmap_put(&f->names, n->outputs[o], 1));
                    OT_TRY(ot_strmap_put(&f->producer, n->outputs[o], (intptr_t)k));
                }
        for (size_t a = 0; a < n->n_attrs; a++) {
            const otter_attr *at = &n->attrs[a];
            if (at->type == OTTER_ATTR_GRAPH && at->g) OT_TRY(count_uses(f, at->g, false));
            if (at->type == OTTER_ATTR_GRAPHS)
                for (size_t i = 0; i < at->n_graphs; i++) OT_TRY(count_uses(f, at->graphs[i], false));
        }
    }
    return OTTER_OK;
}

/* The one top-level node reading `name` (nothing else reads it, and it is no graph output), or -1. */
static int64_t only_reader(const fz *f, const char *name) {
    if (get(&f->uses, name) != 1) return -1;
    intptr_t k = get(&f->reader, name);
    if (k < 0 || !f->g->nodes[k]) return -1;
    const otter_node *n = f->g->nodes[k];
    size_t seen = 0;
    for (size_t i = 0; i < n->n_inputs; i++) seen += !strcmp(n->inputs[i], name);
    return seen == 1 ? (int64_t)k : -1;
}

/* An initializer the caller can't override (not a graph input), or NULL. */
static otter_tensor *const_init(const fz *f, const char *name) {
    intptr_t i = get(&f->inits, name);
    if (i < 0 || get(&f->inputs, name) >= 0) return NULL;
    return f->g->initializers[i];
}

/* Known to be float32: an initializer or a declared graph input of that type. */
static bool is_float32(const fz *f, const char *name) {
    intptr_t i = get(&f->inits, name);
    if (i >= 0) return f->g->initializers[i]->dtype == OTTER_DTYPE_FLOAT;
    i = get(&f->inputs, name);
    if (i < 0) return false;
    const otter_value *v = &f->g->inputs[i];
    return v->has_type && v->type.kind == OTTER_TYPE_TENSOR && v->type.has_elem_type &&
           v->type.elem_type == OTTER_DTYPE_FLOAT;
}

/* A declared graph input of rank 1, float32 (a bias parameter of a training graph). */
static bool float_vector_input(const fz *f, const char *name) {
    const intptr_t i = get(&f->inputs, name);
    return i >= 0 && is_float32(f, name) && f->g->inputs[i].type.rank == 1;
}

/* Keep n until the end, when it is freed with the removed nodes (the maps borrow its strings). */
static otter_status park(fz *f, otter_node *n) {
    OT_TRY(ot_grow((void **)&f->dead, &f->cap_dead, f->n_dead + 1, sizeof *f->dead));
    f->dead[f->n_dead++] = n;
    return OTTER_OK;
}

static otter_status bury(fz *f, size_t k) {
    OT_TRY(park(f, f->g->nodes[k]));
    f->g->nodes[k] = NULL;
    f->n_fused++;
    return OTTER_OK;
}

/* A new float initializer with a fresh name derived from base; its name into *name. */
static otter_status new_init(fz *f, const char *base, int rank, const int64_t *dims, const float *data,
                             const char **name) {
    char buf[512];
    do snprintf(buf, sizeof buf, "%s_otter_fused_%u", base, f->counter++);
    while (get(&f->names, buf) >= 0 || get(&f->inits, buf) >= 0);
    otter_tensor *t;
    OT_TRY(otter_tensor_from_data(&t, buf, OTTER_DTYPE_FLOAT, rank, dims, data));
    OT_TRY(otter_graph_add_initializer(f->g, t));
    OT_TRY(ot_strmap_put(&f->inits, t->name, (intptr_t)(f->g->n_initializers - 1)));
    *name = t->name;
    return OTTER_OK;
}

/* Replace string *slot (freeing nothing now: the old one may be a map key) by a copy of v. */
static otter_status set_name(fz *f, char **slot, const char *v) {
    char *c = ot_strdup(v);
    if (!c) return OT_NOMEM();
    /* keep the old string alive until the end in a dead node's place: park it as a fake node */
    otter_node *holder = ot_calloc(1, sizeof *holder);
    if (!holder) {
        ot_free(c);
        return OT_NOMEM();
    }
    holder->op_type = *slot; /* freed with the holder */
    otter_status s = park(f, holder);
    if (s != OTTER_OK) {
        ot_free(c);
        ot_free(holder);
        return s;
    }
    *slot = c;
    return OTTER_OK;
}

static otter_status set_input(fz *f, otter_node *n, size_t i, const char *v) {
    while (n->n_inputs <= i) OT_TRY(otter_node_add_input(n, ""));
    return set_name(f, &n->inputs[i], v);
}

/* The activation a chain ends with: its com.otter name ("" for none) and parameters (fused_act.h). */
typedef struct chain_act {
    const char *name;
    size_t n_params;
    float params[2];
} chain_act;

/* Node k takes over node last's output and place; last is buried. The output names are swapped:
 * the dead node keeps the old one. */
static otter_status take_over(fz *f, size_t k, size_t last) {
    otter_node *n = f->g->nodes[k], *l = f->g->nodes[last];
    char *t = n->outputs[0];
    n->outputs[0] = l->outputs[0];
    l->outputs[0] = t;
    OT_TRY(bury(f, last));
    f->g->nodes[last] = n;
    f->g->nodes[k] = NULL;
    return OTTER_OK;
}

/* Turn chain head `head` (at index k) into com.otter `op` ending at node `last`, whose output and
 * place it takes over. */
static otter_status finish_chain(fz *f, size_t k, size_t last, const char *op, const chain_act *act) {
    otter_node *n = f->g->nodes[k];
    OT_TRY(set_name(f, &n->op_type, op));
    OT_TRY(otter_node_set_domain(n, "com.otter"));
    if (act->name[0]) OT_TRY(otter_node_set_attr_string(n, "activation", act->name));
    if (act->n_params) OT_TRY(otter_node_set_attr_floats(n, "activation_params", act->n_params, act->params));
    return take_over(f, k, last);
}

/* Conv -> BatchNormalization with constant parameters: new W' = W * s, B' = (B - mean) * s + beta,
 * s = scale / sqrt(var + eps), computed in double. */
static otter_status fold_bn(fz *f, otter_node *conv, const otter_node *bn, bool *done) {
    *done = false;
    if (!f->fold || f->opset < 9 || bn->n_inputs != 5 || otter_node_attr_int(bn, "training_mode", 0) != 0)
        return OTTER_OK;
    for (size_t o = 1; o < bn->n_outputs; o++)
        if (bn->outputs[o][0]) return OTTER_OK;
    const otter_tensor *w = const_init(f, conv->inputs[1]);
    const otter_tensor *b = conv->n_inputs > 2 && conv->inputs[2][0] ? const_init(f, conv->inputs[2]) : NULL;
    if (!w || w->dtype != OTTER_DTYPE_FLOAT || w->rank < 3 || (conv->n_inputs > 2 && conv->inputs[2][0] && !b))
        return OTTER_OK;
    int64_t M = w->dims[0], per = M ? otter_tensor_numel(w) / M : 0;
    if (b && (b->dtype != OTTER_DTYPE_FLOAT || otter_tensor_numel(b) != M)) return OTTER_OK;
    const float *p[4];
    for (int i = 0; i < 4; i++) {
        const otter_tensor *t = const_init(f, bn->inputs[1 + i]);
        if (!t || t->dtype != OTTER_DTYPE_FLOAT || otter_tensor_numel(t) != M) return OTTER_OK;
        p[i] = t->data;
    }
    double eps = otter_node_attr_float(bn, "epsilon", 1e-5f);
    float *nw = ot_malloc((size_t)(M * per + M + 1) * sizeof(float));
    if (!nw) return OT_NOMEM();
    float *nb = nw + M * per;
    const float *wv = w->data, *bv = b ? b->data : NULL;
    for (int64_t m = 0; m < M; m++) {
        double s = (double)p[0][m] / sqrt((double)p[3][m] + eps);
        for (int64_t i = 0; i < per; i++) nw[m * per + i] = (float)((double)wv[m * per + i] * s);
        nb[m] = (float)(((bv ? (double)bv[m] : 0.0) - (double)p[2][m]) * s + (double)p[1][m]);
    }
    const char *wn, *bname;
    otter_status st = new_init(f, conv->inputs[1], w->rank, w->dims, nw, &wn);
    if (st == OTTER_OK) st = new_init(f, conv->inputs[1], 1, &M, nb, &bname);
    ot_free(nw);
    OT_TRY(st);
    OT_TRY(set_input(f, conv, 1, wn));
    OT_TRY(set_input(f, conv, 2, bname));
    *done = true;
    return OTTER_OK;
}

/* The operand of Add node `add` other than `name`. */
static const char *other_input(const otter_node *add, const char *name) {
    if (add->n_inputs != 2) return NULL;
    return !strcmp(add->inputs[0], name) ? add->inputs[1] : add->inputs[0];
}

/* A constant float tensor that broadcasts as one value per output channel of a Conv output of rank
 * `rank` with M channels: M elements, the channel axis right-aligned, other dims 1. */
static const otter_tensor *channel_bias(const fz *f, const char *name, int rank, int64_t M) {
    const otter_tensor *t = const_init(f, name);
    if (!t || t->dtype != OTTER_DTYPE_FLOAT || otter_tensor_numel(t) != M || t->rank > rank || t->rank < rank - 1)
        return NULL;
    int ch = t->rank - (rank - 1); /* index of the channel axis in t */
    for (int d = 0; d < t->rank; d++)
        if (d != ch && t->dims[d] != 1) return NULL;
    return ch >= 0 && t->dims[ch] == M ? t : NULL;
}

/* MaxPool 2x2, stride 2, no padding, floor, Indices in row-major order if any: what the direct conv
 * kernel pools. */
static bool maxpool_2x2(const otter_node *p) {
    if (!is_op(p, "MaxPool") || otter_node_attr_int(p, "storage_order", 0) != 0) return false;
    const otter_attr *ks = otter_node_attr(p, "kernel_shape"), *st = otter_node_attr(p, "strides");
    const otter_attr *pads = otter_node_attr(p, "pads"), *dil = otter_node_attr(p, "dilations");
    if (!ks || ks->n_ints != 2 || ks->ints[0] != 2 || ks->ints[1] != 2 || !st || st->n_ints != 2 || st->ints[0] != 2 ||
        st->ints[1] != 2)
        return false;
    for (size_t i = 0; pads && i < pads->n_ints; i++)
        if (pads->ints[i] != 0) return false;
    for (size_t i = 0; dil && i < dil->n_ints; i++)
        if (dil->ints[i] != 1) return false;
    const char *ap = otter_node_attr_string(p, "auto_pad", "NOTSET");
    return otter_node_attr_int(p, "ceil_mode", 0) == 0 && (!strcmp(ap, "NOTSET") || !strcmp(ap, "VALID"));
}

/* Append output `name` to n. */
static otter_status add_output(otter_node *n, const char *name) {
    char *copy = ot_strdup(name);
    char **grown = copy ? ot_realloc(n->outputs, (n->n_outputs + 1) * sizeof *grown) : NULL;
    if (!grown) {
        ot_free(copy);
        return OT_NOMEM();
    }
    n->outputs = grown;
    n->outputs[n->n_outputs++] = copy;
    return OTTER_OK;
}

/* `name` read by one top-level MaxPool and one Shape (no start / end) after node k, and by nothing
 * else (a training graph: MaxPool's gradient takes dX's shape from the Shape): the MaxPool's index,
 * the Shape's into *shape; else -1. */
static int64_t pool_and_shape(const fz *f, size_t k, const char *name, int64_t *shape) {
    int64_t pool = -1, n_read = 0;
    *shape = -1;
    for (size_t j = k + 1; j < f->g->n_nodes; j++) {
        const otter_node *c = f->g->nodes[j];
        if (!c) continue;
        int64_t reads = 0;
        for (size_t i = 0; i < c->n_inputs; i++) reads += !strcmp(c->inputs[i], name);
        if (!reads) continue;
        n_read += reads;
        if (reads == 1 && is_op(c, "MaxPool") && pool < 0)
            pool = (int64_t)j;
        else if (reads == 1 && is_op(c, "Shape") && c->n_attrs == 0 && *shape < 0)
            *shape = (int64_t)j;
        else
            return -1;
    }
    return pool >= 0 && *shape >= 0 && n_read == get(&f->uses, name) ? pool : -1;
}

/* The top-level node writing `name` when it is the default-domain `op` (its index into *at unless NULL),
 * or NULL. */
static const otter_node *made_by(const fz *f, const char *name, const char *op, int64_t *at) {
    intptr_t k = get(&f->producer, name);
    const otter_node *n = k >= 0 ? f->g->nodes[k] : NULL;
    if (at) *at = k;
    return is_op(n, op) ? n : NULL;
}

/* A constant float32 scalar: an initializer (not a graph input) or a Constant node's value; an
 * empty name (an omitted optional input) keeps *v. */
static bool const_scalar(const fz *f, const char *name, float *v) {
    if (!name[0]) return true;
    const otter_tensor *t = const_init(f, name);
    const otter_node *c = t ? NULL : made_by(f, name, "Constant", NULL);
    const otter_attr *a = c ? otter_node_attr(c, "value") : NULL;
    if (a && a->type == OTTER_ATTR_TENSOR) t = a->t;
    if (!t || t->dtype != OTTER_DTYPE_FLOAT || otter_tensor_numel(t) != 1) return false;
    *v = *(const float *)t->data;
    return true;
}

/* The activation node c (reading the chain's value `x` as its input 0) as a fused activation: false
 * when it is none the kernels fuse (or Clip with bounds that are not constant). */
static bool fusable_act(const fz *f, const otter_node *c, const char *x, chain_act *act) {
    static const char *const plain[] = {"Relu", "HardSwish", "Sigmoid"};
    if (c->n_inputs < 1 || strcmp(c->inputs[0], x) != 0 || c->n_outputs != 1) return false;
    *act = (chain_act){.name = ""};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        if (is_op(c, plain[i])) {
            act->name = plain[i];
            return true;
        }
    if (is_op(c, "LeakyRelu")) {
        *act = (chain_act){"LeakyRelu", 1, {otter_node_attr_float(c, "alpha", 0.01f)}};
        return true;
    }
    if (is_op(c, "Gelu")) {
        const char *approx = otter_node_attr_string(c, "approximate", "none");
        act->name = !strcmp(approx, "none") ? "Gelu" : !strcmp(approx, "tanh") ? "GeluTanh" : "";
        return act->name[0] != 0;
    }
    if (is_op(c, "HardSigmoid")) {
        *act = (chain_act){
            "HardSigmoid", 2, {otter_node_attr_float(c, "alpha", 0.2f), otter_node_attr_float(c, "beta", 0.5f)}};
        return true;
    }
    if (!is_op(c, "Clip")) return false;
    /* Clip-6's bounds are attributes, Clip-11's optional constant inputs */
    *act =
        (chain_act){"Clip", 2, {otter_node_attr_float(c, "min", -INFINITY), otter_node_attr_float(c, "max", INFINITY)}};
    return (c->n_inputs < 2 || const_scalar(f, c->inputs[1], &act->params[0])) &&
           (c->n_inputs < 3 || const_scalar(f, c->inputs[2], &act->params[1]));
}

/* x * Sigmoid(x) (SiLU / Swish): `name` read by one top-level Sigmoid and one Mul after node k and
 * nothing else, the Mul's other operand the Sigmoid's output, which nothing else reads: the Mul's
 * index, the Sigmoid's into *sig; else -1. */
static int64_t swish_of(const fz *f, size_t k, const char *name, int64_t *sig) {
    int64_t mul = -1;
    *sig = -1;
    if (get(&f->uses, name) != 2) return -1;
    for (size_t j = k + 1; j < f->g->n_nodes && (mul < 0 || *sig < 0); j++) {
        const otter_node *c = f->g->nodes[j];
        if (is_op(c, "Sigmoid") && c->n_inputs == 1 && !strcmp(c->inputs[0], name) && c->n_outputs == 1)
            *sig = (int64_t)j;
        else if (is_op(c, "Mul") && c->n_inputs == 2 && c->n_outputs == 1 &&
                 (!strcmp(c->inputs[0], name) || !strcmp(c->inputs[1], name)))
            mul = (int64_t)j;
    }
    if (mul < 0 || *sig < 0 || only_reader(f, f->g->nodes[*sig]->outputs[0]) != mul ||
        strcmp(other_input(f->g->nodes[mul], name), f->g->nodes[*sig]->outputs[0]) != 0)
        return *sig = -1;
    return mul;
}

/* The next node of a Conv chain whose value is `out`: its only reader, or a MaxPool with a Shape
 * (*shape), or the Mul of a Swish (*sig); -1 when none. */
static int64_t chain_next(const fz *f, size_t k, const char *out, int64_t *shape, int64_t *sig) {
    *shape = *sig = -1;
    int64_t r = only_reader(f, out);
    if (r < 0) r = pool_and_shape(f, k, out, shape);
    if (r < 0) r = swish_of(f, k, out, sig);
    return r;
}

static otter_status fuse_conv(fz *f, size_t k) {
    otter_node *n = f->g->nodes[k];
    if (n->n_outputs != 1 || n->n_inputs < 2 || n->n_inputs > 3) return OTTER_OK;
    const otter_tensor *w = get(&f->inits, n->inputs[1]) >= 0 ? f->g->initializers[get(&f->inits, n->inputs[1])] : NULL;
    bool f32 = is_float32(f, n->inputs[1]);
    const char *out = n->outputs[0];
    int64_t last = -1;
    int stage = 0;
    bool pool = false;
    chain_act act = {.name = ""};
    for (int64_t r, shape, sig; !pool && (r = chain_next(f, k, out, &shape, &sig)) >= 0;) {
        otter_node *c = f->g->nodes[r];
        bool taken = false;
        if (sig >= 0) {
            if (stage >= 4) break;
            act = (chain_act){.name = "Swish"};
            OT_TRY(bury(f, (size_t)sig));
            stage = 4, taken = true;
        } else if (stage < 1 && is_op(c, "BatchNormalization")) {
            OT_TRY(fold_bn(f, n, c, &taken));
            if (taken) stage = 1;
        } else if (stage < 3 && is_op(c, "Add") && f32 && other_input(c, out)) {
            const char *z = other_input(c, out);
            bool has_b = n->n_inputs > 2 && n->inputs[2][0];
            const otter_tensor *cb = w && w->rank >= 3 ? channel_bias(f, z, w->rank, w->dims[0]) : NULL;
            if (stage < 2 && cb && !has_b) {
                /* per-channel constant: the bias (y + b in both graphs) */
                OT_TRY(set_input(f, n, 2, z));
                stage = 2, taken = true;
            } else if (!cb && get(&f->inits, z) < 0) {
                /* a computed value (residual): the fused sum input Z */
                OT_TRY(set_input(f, n, 2, has_b ? n->inputs[2] : ""));
                OT_TRY(set_input(f, n, 3, z));
                stage = 3, taken = true;
            }
        } else if (stage < 4 && fusable_act(f, c, out, &act)) {
            stage = 4, taken = true;
        } else if (f32 && maxpool_2x2(c) && (!act.name[0] || !strcmp(act.name, "Relu"))) {
            /* (the kernels pool after the activation, which commutes with the max only for Relu) */
            /* outputs 1 and 2: the Indices, the unpooled shape (for the Shape) */
            OT_TRY(otter_node_set_attr_int(n, "maxpool_2x2", 1));
            if (c->n_outputs > 1 || shape >= 0) OT_TRY(add_output(n, c->n_outputs > 1 ? c->outputs[1] : ""));
            if (shape >= 0) {
                OT_TRY(add_output(n, f->g->nodes[shape]->outputs[0]));
                OT_TRY(bury(f, (size_t)shape));
            }
            pool = taken = true;
        }
        if (!taken) break;
        if (last >= 0) OT_TRY(bury(f, (size_t)last));
        last = r;
        out = c->outputs[0];
    }
    if (last < 0) return OTTER_OK;
    return finish_chain(f, k, (size_t)last, "FusedConv", &act);
}

/* The activation node reading `out`, product k's result, as a fused activation of that product: any
 * the kernels fuse when the product is float (its weights a float initializer), else Relu only. */
static int64_t product_act(const fz *f, const char *out, bool f32, chain_act *act) {
    int64_t r = only_reader(f, out);
    if (r < 0 || !fusable_act(f, f->g->nodes[r], out, act)) return -1;
    return f32 || !strcmp(act->name, "Relu") ? r : -1;
}

static otter_status fuse_gemm(fz *f, size_t k) {
    otter_node *n = f->g->nodes[k];
    if (n->n_outputs != 1 || n->n_inputs < 2) return OTTER_OK;
    chain_act act;
    int64_t r = product_act(f, n->outputs[0], is_float32(f, n->inputs[1]), &act);
    if (r < 0) return OTTER_OK;
    return finish_chain(f, k, (size_t)r, "FusedGemm", &act);
}

static const otter_node *made_by(const fz *f, const char *name, const char *op, int64_t *at);

/* The name an Identity chain ending in `name` starts from (name itself when no Identity writes it):
 * exporters share equal initial weights between layers through Identity nodes (PyTorch's
 * deep-copied TransformerEncoder layers), which the session turns into aliases. */
static const char *through_identity(const fz *f, const char *name) {
    const otter_node *id;
    for (int hops = 0; hops < 16 && (id = made_by(f, name, "Identity", NULL)) && id->n_inputs == 1; hops++)
        name = id->inputs[0];
    return name;
}

/* FusedMatMul's flags for an operand a Transpose with this perm (rank r) made: the last two axes
 * swapped (trans), the first axis moved to just before the last (transBatch, ONNX Runtime's layout
 * of attention heads: [T, B*H, d] read as [B*H, T, d]), or both; false for any other perm. */
static bool transpose_flags(const otter_node *t, bool *trans, bool *trans_batch) {
    const otter_attr *a = otter_node_attr(t, "perm");
    if (!a || a->type != OTTER_ATTR_INTS || a->n_ints < 2) return false;
    const int64_t r = (int64_t)a->n_ints, *p = a->ints;
    bool swap = true, batch = r >= 3, both = r >= 3;
    for (int64_t i = 0; i < r; i++) {
        const bool head = i < r - 2, second_last = i == r - 2;
        swap &= p[i] == (head ? i : second_last ? r - 1 : r - 2);
        batch &= p[i] == (head ? i + 1 : second_last ? 0 : r - 1);
        both &= p[i] == (head ? i + 1 : second_last ? r - 1 : 0);
    }
    *trans = swap || both, *trans_batch = batch || both;
    return swap || batch || both;
}

/* x = Div(y, c), Mul(y, c) or Mul(c, y), c a float32 constant scalar (not 0), x read by nothing
 * else: y, with the factor (1 / c for Div) into *scale and the node's index into *at; else NULL. */
static const char *scaled_operand(const fz *f, const char *x, float *scale, int64_t *at) {
    const otter_node *d = made_by(f, x, "Div", at), *m = d ? NULL : made_by(f, x, "Mul", at);
    float c;
    if (get(&f->uses, x) != 1 || (!d && !m)) return NULL;
    const otter_node *n = d ? d : m;
    if (n->n_inputs != 2 || !n->inputs[0][0] || !n->inputs[1][0]) return NULL;
    const int side = !d && const_scalar(f, n->inputs[0], &c) ? 0 : 1; /* the constant's side */
    if (!const_scalar(f, n->inputs[side], &c) || c == 0.0f) return NULL;
    *scale = d ? 1.0f / c : c;
    return n->inputs[1 - side];
}

/* Whether the graph shows x is float32 (FusedMatMul computes in float32, and the fusions don't see
 * value types): a float32 initializer, graph input or constant scalar, or, within `depth` steps
 * back, the output of an operator whose output type is every input's (arithmetic, products) or its
 * first input's (layout, Softmax, Relu) where such an input is shown float32. A MatMul's operands
 * share one type, so one shown operand tells both. */
static bool shown_float(const fz *f, const char *x, int depth) {
    static const char *const every_input[] = {"Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "FusedMatMul", "FusedGemm"};
    static const char *const first_input[] = {"Transpose", "Reshape", "Slice", "Softmax", "Squeeze",
                                              "Unsqueeze", "Flatten", "Relu",  "Identity"};
    float c;
    if (is_float32(f, x) || const_scalar(f, x, &c)) return true;
    const intptr_t k = get(&f->producer, x);
    const otter_node *p = depth > 0 && k >= 0 ? f->g->nodes[k] : NULL;
    if (!p || !(default_domain(p->domain) || !strcmp(p->domain, "com.otter") || !strcmp(p->domain, "com.microsoft")))
        return false;
    size_t n_in = 0;
    for (size_t i = 0; i < sizeof every_input / sizeof *every_input; i++)
        if (!strcmp(p->op_type, every_input[i])) n_in = p->n_inputs;
    for (size_t i = 0; i < sizeof first_input / sizeof *first_input; i++)
        if (!strcmp(p->op_type, first_input[i])) n_in = 1;
    for (size_t i = 0; i < n_in && i < p->n_inputs; i++)
        if (p->inputs[i][0] && shown_float(f, p->inputs[i], depth - 1)) return true;
    return false;
}

/* A MatMul reading a Transpose that only moves its operand's axes the way FusedMatMul's flags read
 * them (transpose_flags), or scaled by a constant (scaled_operand), becomes a com.microsoft
 * FusedMatMul reading the Transpose's input where it lies, the scale in alpha: no copy of the
 * operand (PyTorch's attention exports: Q / sqrt(d) and K^T of [T, B*H, d] heads, V's heads). As
 * ONNX Runtime's MatMulTransposeFusion and MatMulScaleFusion do. The same products, summed in the
 * same order; a power-of-two scale (sqrt(64)) gives the same bits. */
static otter_status fuse_matmul_operands(fz *f, size_t k) {
    otter_node *n = f->g->nodes[k];
    const char *in[2] = {n->inputs[0], n->inputs[1]};
    bool trans[2] = {false, false}, trans_batch[2] = {false, false}, any = false;
    const bool is_float = shown_float(f, in[0], 6) || shown_float(f, in[1], 6);
    float alpha = 1.0f;
    int64_t gone[4];
    int n_gone = 0;
    for (int i = 0; i < 2; i++) {
        bool transposed = false;
        for (int step = 0; step < 2; step++) { /* a scale and a Transpose, in either order */
            float c;
            int64_t at;
            const char *y = scaled_operand(f, in[i], &c, &at);
            const otter_node *t = y || transposed ? NULL : made_by(f, in[i], "Transpose", &at);
            if (!y && t &&
                (get(&f->uses, in[i]) != 1 || t->n_inputs != 1 || !transpose_flags(t, &trans[i], &trans_batch[i])))
                t = NULL;
            if (!y && !t) break;
            if (y) alpha *= c, in[i] = y;
            if (t) transposed = true, in[i] = t->inputs[0];
            gone[n_gone++] = at;
            any = true;
        }
    }
    if (!any || !is_float) return OTTER_OK;
    OT_TRY(set_name(f, &n->op_type, "FusedMatMul"));
    OT_TRY(otter_node_set_domain(n, "com.microsoft"));
    for (int i = 0; i < 2; i++) OT_TRY(set_input(f, n, (size_t)i, in[i]));
    const char *attr[2][2] = {{"transA", "transBatchA"}, {"transB", "transBatchB"}};
    for (int i = 0; i < 2; i++) {
        if (trans[i]) OT_TRY(otter_node_set_attr_int(n, attr[i][0], 1));
        if (trans_batch[i]) OT_TRY(otter_node_set_attr_int(n, attr[i][1], 1));
    }
    if (alpha != 1.0f) OT_TRY(otter_node_set_attr_float(n, "alpha", alpha));
    for (int i = 0; i < n_gone; i++) OT_TRY(bury(f, (size_t)gone[i]));
    f->made_ms = true;
    return OTTER_OK;
}

static otter_status fuse_matmul(fz *f, size_t k) {
    otter_node *n = f->g->nodes[k];
    if (n->n_outputs != 1 || n->n_inputs != 2) return OTTER_OK;
    const char *wn = through_identity(f, n->inputs[1]);
    const otter_tensor *w = get(&f->inits, wn) >= 0 ? f->g->initializers[get(&f->inits, wn)] : NULL;
    int64_t last = -1, r = only_reader(f, n->outputs[0]);
    const char *out = n->outputs[0];
    /* + a bias: constant and fitting constant weights, or a parameter (a graph input, declared a float
     * vector) of a float product: Add broadcasts a vector along the last axis as the kernel adds it */
    const bool w_float = w && w->rank == 2 && w->dtype == OTTER_DTYPE_FLOAT;
    if (r >= 0 && is_op(f->g->nodes[r], "Add") &&
        (w_float || (!w && (shown_float(f, n->inputs[0], 6) || shown_float(f, n->inputs[1], 6))))) {
        const char *bn = other_input(f->g->nodes[r], out);
        const otter_tensor *b = bn ? const_init(f, through_identity(f, bn)) : NULL;
        if ((w_float && b && b->rank == 1 && b->dtype == OTTER_DTYPE_FLOAT &&
             (b->dims[0] == w->dims[1] || b->dims[0] == 1)) ||
            (!w && bn && float_vector_input(f, through_identity(f, bn)))) {
            OT_TRY(set_input(f, n, 2, bn));
            last = r;
            out = f->g->nodes[r]->outputs[0];
        }
    }
    chain_act act = {.name = ""};
    int64_t a = product_act(f, out, w && w->dtype == OTTER_DTYPE_FLOAT, &act);
    if (a >= 0) {
        if (last >= 0) OT_TRY(bury(f, (size_t)last));
        last = a;
    }
    if (last < 0) return fuse_matmul_operands(f, k);
    return finish_chain(f, k, (size_t)last, "FusedMatMul", &act);
}

/* v = Reshape(src, [-1]) (constant shape) read only by node `reader`: that Reshape's index, its input
 * into *src; else -1. */
static int64_t flattened(const fz *f, const char *v, size_t reader, const char **src) {
    int64_t k;
    const otter_node *r = made_by(f, v, "Reshape", &k);
    if (!r || r->n_inputs != 2 || only_reader(f, v) != (int64_t)reader) return -1;
    const otter_tensor *s = const_init(f, r->inputs[1]);
    if (!s || s->dtype != OTTER_DTYPE_INT64 || s->rank != 1 || s->dims[0] != 1 || ((const int64_t *)s->data)[0] != -1)
        return -1;
    *src = r->inputs[0];
    return k;
}

/* ConstantOfShape filling with float32 +0 (its default). */
static bool zero_f32_fill(const otter_node *n) {
    const otter_attr *a = otter_node_attr(n, "value");
    if (!a) return true;
    const otter_tensor *t = a->type == OTTER_ATTR_TENSOR ? a->t : NULL;
    if (!t || t->dtype != OTTER_DTYPE_FLOAT || otter_tensor_numel(t) != 1) return false;
    uint32_t bits;
    memcpy(&bits, t->data, sizeof bits);
    return bits == 0;
}

/* MaxPool's gradient as autodiff writes it in standard ops (src/autodiff/rules_nn.c):
 *   S = shape of X; zeros = ConstantOfShape(S); scattered = ScatterElements(Reshape(zeros, [-1]),
 *   Reshape(Indices, [-1]), Reshape(dY, [-1]), axis 0, reduction none | add); dX = Reshape(scattered, S)
 * with Indices MaxPool's second output -> com.otter MaxPoolGrad(dY, Indices, S), one pass over dX;
 * and with ReluGrad(dX, X) after it -> MaxPoolGrad(dY, Indices, S, P) (P: MaxPool's output).
 * `k` is the ScatterElements. MaxPool's indices are distinct where windows don't overlap, so "none"
 * and "add" agree (up to the sign of a zero dY). */
static otter_status fuse_maxpool_grad(fz *f, size_t k) {
    const otter_node *sc = f->g->nodes[k];
    const char *red = otter_node_attr_string(sc, "reduction", "none");
    if (f->opset < 11 || sc->n_inputs != 3 || sc->n_outputs != 1 || otter_node_attr_int(sc, "axis", 0) != 0 ||
        (strcmp(red, "none") && strcmp(red, "add")))
        return OTTER_OK;
    const char *zeros = NULL, *ind = NULL, *dy = NULL;
    int64_t c, out = only_reader(f, sc->outputs[0]);
    int64_t r0 = flattened(f, sc->inputs[0], k, &zeros), r1 = flattened(f, sc->inputs[1], k, &ind),
            r2 = flattened(f, sc->inputs[2], k, &dy);
    if (r0 < 0 || r1 < 0 || r2 < 0 || out < 0 || only_reader(f, zeros) != r0) return OTTER_OK;
    const otter_node *cs = made_by(f, zeros, "ConstantOfShape", &c), *pool = made_by(f, ind, "MaxPool", NULL);
    const otter_node *re = f->g->nodes[out];
    if (!cs || cs->n_inputs != 1 || !zero_f32_fill(cs) || !pool || pool->n_outputs < 2 ||
        strcmp(pool->outputs[1], ind) || !is_op(re, "Reshape") || re->n_inputs != 2 || re->n_outputs != 1 ||
        strcmp(re->inputs[0], sc->outputs[0]) || strcmp(re->inputs[1], cs->inputs[0]))
        return OTTER_OK;
    /* dX's only reader a ReluGrad at MaxPool's input X: dX is nonzero only at the Indices, where X
     * is MaxPool's output P, so P > 0 picks the values ReluGrad keeps (input 3 of the fused node) */
    int64_t rg = only_reader(f, re->outputs[0]);
    const otter_node *rn = rg >= 0 ? f->g->nodes[rg] : NULL;
    bool relu = is_ms_op(rn, "ReluGrad") && rn->n_inputs == 2 && rn->n_outputs == 1 &&
                !strcmp(rn->inputs[0], re->outputs[0]) && pool->n_inputs >= 1 &&
                !strcmp(rn->inputs[1], pool->inputs[0]) && pool->outputs[0][0];
    otter_node *n;
    OT_TRY(otter_node_create(&n, "MaxPoolGrad", re->name, relu ? 4 : 3,
                             (const char *[]){dy, ind, cs->inputs[0], pool->outputs[0]}, 1,
                             (const char *const *)(relu ? rn->outputs : re->outputs)));
    otter_status s = otter_node_set_domain(n, "com.otter");
    int64_t gone[6] = {c, r0, r1, r2, out, rg};
    for (int i = 0; i < 5 + relu && s == OTTER_OK; i++) s = bury(f, (size_t)gone[i]);
    /* X lost the ReluGrad's read, Y gained this one's */
    if (s == OTTER_OK && relu) s = ot_strmap_put(&f->uses, pool->inputs[0], get(&f->uses, pool->inputs[0]) - 1);
    if (s == OTTER_OK && relu) s = ot_strmap_put(&f->uses, pool->outputs[0], get(&f->uses, pool->outputs[0]) + 1);
    /* n takes the ScatterElements' place, after the Reshapes of dY and Indices and so after both */
    if (s == OTTER_OK) s = park(f, f->g->nodes[k]);
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    f->g->nodes[k] = n;
    return OTTER_OK;
}

/* A Less (or Greater) node writing `mask` as the comparison of x with a bound: its index, and x and the
 * bound into *x and *bound (or -1). */
static int64_t bound_compare(const fz *f, const char *mask, const char *op, const char **x, const char **bound) {
    int64_t at;
    const otter_node *c = made_by(f, mask, op, &at);
    if (!c || c->n_inputs != 2 || c->n_outputs != 1) return -1;
    *x = c->inputs[0], *bound = c->inputs[1];
    return at;
}

/* Clip's gradient as autodiff writes it in standard ops (src/autodiff/rules_elementwise.c):
 *   dX = Where(Or(Less(X, min), Greater(X, max)), 0, dY), or Where(Less(X, min), 0, dY) or
 *   Where(Greater(X, max), 0, dY) with one bound
 * -> com.otter ClipGrad(dY, X, min, max): one pass and no mask tensors (the four nodes were 23% of a
 * MobileNetV2 training step, whose ReLU6 are Clips). A mask something else reads too (the bounds' own
 * gradients) stays. `k` is the Where. */
static otter_status fuse_clip_grad(fz *f, size_t k) {
    const otter_node *w = f->g->nodes[k];
    float zero = 1.0f;
    if (w->n_inputs != 3 || w->n_outputs != 1 || !w->inputs[1][0] || !const_scalar(f, w->inputs[1], &zero) ||
        zero != 0.0f || signbit(zero))
        return OTTER_OK;
    const char *x = NULL, *lo = "", *hi = "", *x2 = NULL;
    int64_t or_at = -1, lt = -1, gt = -1;
    const otter_node *o = made_by(f, w->inputs[0], "Or", &or_at);
    if (o && o->n_inputs == 2) {
        lt = bound_compare(f, o->inputs[0], "Less", &x, &lo);
        gt = bound_compare(f, o->inputs[1], "Greater", &x2, &hi);
        if (lt < 0 || gt < 0 || strcmp(x, x2)) return OTTER_OK;
    } else {
        or_at = -1;
        lt = bound_compare(f, w->inputs[0], "Less", &x, &lo);
        if (lt < 0) gt = bound_compare(f, w->inputs[0], "Greater", &x, &hi);
        if (lt < 0 && gt < 0) return OTTER_OK;
    }
    float bound; /* ClipGrad takes scalar bounds */
    if ((lo[0] && !const_scalar(f, lo, &bound)) || (hi[0] && !const_scalar(f, hi, &bound))) return OTTER_OK;
    /* the masks no one else reads go: the Or if only the Where reads it, a comparison if only the
     * Or (or, with one bound, the Where) reads it */
    const bool drop_or = or_at >= 0 && only_reader(f, o->outputs[0]) == (int64_t)k;
    const int64_t via = or_at >= 0 ? or_at : (int64_t)k;
    int64_t gone[3], n_gone = 0;
    if (drop_or) gone[n_gone++] = or_at;
    for (int i = 0; i < 2 && (or_at < 0 || drop_or); i++) {
        const int64_t c = i == 0 ? lt : gt;
        if (c >= 0 && only_reader(f, f->g->nodes[c]->outputs[0]) == via) gone[n_gone++] = c;
    }
    otter_node *n;
    OT_TRY(otter_node_create(&n, "ClipGrad", w->name, hi[0] ? 4 : 3, (const char *[]){w->inputs[2], x, lo, hi}, 1,
                             (const char *const *)w->outputs));
    otter_status s = otter_node_set_domain(n, "com.otter");
    /* reads: the removed nodes' inputs lose theirs, the Where's zero its, X and the bounds gain the
     * fused node's (dY keeps one) */
    for (int64_t i = 0; i < n_gone && s == OTTER_OK; i++) {
        const otter_node *dead = f->g->nodes[gone[i]];
        for (size_t j = 0; j < dead->n_inputs && s == OTTER_OK; j++)
            s = ot_strmap_put(&f->uses, dead->inputs[j], get(&f->uses, dead->inputs[j]) - 1);
    }
    for (size_t j = 1; j < n->n_inputs && s == OTTER_OK; j++)
        if (n->inputs[j][0]) s = ot_strmap_put(&f->uses, n->inputs[j], get(&f->uses, n->inputs[j]) + 1);
    if (s == OTTER_OK) s = ot_strmap_put(&f->uses, w->inputs[1], get(&f->uses, w->inputs[1]) - 1);
    if (s == OTTER_OK) s = ot_strmap_put(&f->uses, w->inputs[0], get(&f->uses, w->inputs[0]) - 1);
    for (int64_t i = 0; i < n_gone && s == OTTER_OK; i++) s = bury(f, (size_t)gone[i]);
    if (s == OTTER_OK) s = park(f, f->g->nodes[k]);
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    f->g->nodes[k] = n; /* in the Where's place: after X, dY and the bounds */
    f->n_fused++;
    return OTTER_OK;
}

/* ---- a Concat of convolutions of one input --------------------------------------------------- */

/* Attribute `name` of n as ints: its n_ints (0 when unset) and ints into *v. */
static size_t attr_ints(const otter_node *n, const char *name, const int64_t **v) {
    const otter_attr *a = otter_node_attr(n, name);
    *v = a ? a->ints : NULL;
    return a ? a->n_ints : 0;
}

static bool same_ints(const otter_node *a, const otter_node *b, const char *name) {
    const int64_t *u, *v;
    const size_t n = attr_ints(a, name, &u);
    return n == attr_ints(b, name, &v) && (n == 0 || !memcmp(u, v, n * sizeof *u));
}

static bool same_act(const otter_node *a, const otter_node *b) {
    const otter_attr *u = otter_node_attr(a, "activation_params"), *v = otter_node_attr(b, "activation_params");
    const size_t n = u ? u->n_floats : 0;
    return !strcmp(otter_node_attr_string(a, "activation", ""), otter_node_attr_string(b, "activation", "")) &&
           n == (v ? v->n_floats : 0) && (n == 0 || !memcmp(u->floats, v->floats, n * sizeof *u->floats));
}

/* A 2-D convolution (Conv or an activation-only FusedConv) of one group at dilation 1 with explicit
 * pads, constant float weights [M, C, KH, KW] (*w) and bias (*b, or NULL). */
static bool plain_conv(const fz *f, const otter_node *c, const otter_tensor **w, const otter_tensor **b) {
    const bool fused = c && c->domain && !strcmp(c->domain, "com.otter") && !strcmp(c->op_type, "FusedConv");
    if (!c || !(is_op(c, "Conv") || fused) || c->n_outputs != 1 || c->n_inputs < 2 || c->n_inputs > 3) return false;
    if (fused && (otter_node_attr(c, "maxpool_2x2") || otter_node_attr(c, "channel_blocks") ||
                  otter_node_attr(c, "kernel_parts")))
        return false;
    const int64_t *v;
    const size_t nd = attr_ints(c, "dilations", &v);
    for (size_t i = 0; i < nd; i++)
        if (v[i] != 1) return false;
    const size_t np = attr_ints(c, "pads", &v);
    if (np != 0 && np != 4) return false;
    for (size_t i = 0; i < np; i++)
        if (v[i] < 0) return false;
    *w = const_init(f, through_identity(f, c->inputs[1]));
    *b = c->n_inputs > 2 && c->inputs[2][0] ? const_init(f, through_identity(f, c->inputs[2])) : NULL;
    return otter_node_attr_int(c, "group", 1) == 1 &&
           strcmp(otter_node_attr_string(c, "auto_pad", "NOTSET"), "NOTSET") == 0 && *w &&
           (*w)->dtype == OTTER_DTYPE_FLOAT && (*w)->rank == 4 && (*w)->dims[0] > 0 &&
           (c->n_inputs < 3 || !c->inputs[2][0] ||
            (*b && (*b)->dtype == OTTER_DTYPE_FLOAT && (*b)->rank == 1 && (*b)->dims[0] == (*w)->dims[0]));
}

/* A channel Concat of convolutions of one input that nothing else reads, with one activation, one
 * stride and one output size: one FusedConv over the largest kernel (kernel_shape) that reads every
 * part's own weights and bias, each at the window of that kernel its pads put it (kernel_parts). The
 * channel-lane kernel runs each part's window only: the same bits as the separate convolutions.
 * SqueezeNet's Fire modules (a 1x1 and a 3x3 expand of the squeeze) then write their Concat's
 * channels directly, and the two expands share one padded copy of the squeeze. Only where that kernel
 * runs (elsewhere the parts would be padded into one kernel and the zeros computed): AVX-512; AVX2,
 * whose tiles run parts only into channel blocks, when the layout pass blocks the node (split_planar_parts
 * undoes the others); and in sessions that fold initializers (inference: the weights are constants). */
static otter_status fuse_concat_convs(fz *f, size_t k) {
    const otter_node *cat = f->g->nodes[k];
    const size_t n = cat->n_inputs;
    if (!f->fold || ot_conv_direct_isa() == OT_CONV_ISA_NONE || cat->n_outputs != 1 || n < 2 || n > OT_CONV_MAX_PARTS ||
        otter_node_attr_int(cat, "axis", 0) != 1)
        return OTTER_OK;
    size_t at[OT_CONV_MAX_PARTS];
    const otter_tensor *w[OT_CONV_MAX_PARTS], *b[OT_CONV_MAX_PARTS];
    int64_t pads[OT_CONV_MAX_PARTS][4], K[2] = {0, 0}, P[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const int64_t p = get(&f->producer, cat->inputs[i]);
        if (p < 0 || only_reader(f, cat->inputs[i]) != (int64_t)k) return OTTER_OK;
        const otter_node *c = f->g->nodes[p], *c0 = i ? f->g->nodes[at[0]] : c;
        if (!plain_conv(f, c, &w[i], &b[i]) || strcmp(c->inputs[0], c0->inputs[0]) != 0 ||
            w[i]->dims[1] != w[0]->dims[1] || !same_ints(c, c0, "strides") || !same_act(c, c0) ||
            (i + 1 < n && w[i]->dims[0] % 16 != 0)) /* ot_conv_direct.parts: all but the last in 16s */
            return OTTER_OK;
        for (size_t j = 0; j < i; j++)
            if (at[j] == (size_t)p) return OTTER_OK;
        at[i] = (size_t)p;
        const int64_t *v;
        const size_t np = attr_ints(c, "pads", &v);
        for (int d = 0; d < 4; d++) pads[i][d] = np ? v[d] : 0;
        for (int d = 0; d < 2; d++) {
            /* the same output size from every input size: pads minus kernel agree */
            if (pads[i][d] + pads[i][d + 2] - w[i]->dims[2 + d] != pads[0][d] + pads[0][d + 2] - w[0]->dims[2 + d])
                return OTTER_OK;
            if (w[i]->dims[2 + d] > K[d]) K[d] = w[i]->dims[2 + d];
            if (pads[i][d] > P[d]) P[d] = pads[i][d];
        }
    }
    /* each kernel's window in the largest: shifted by the pad it lacks, inside */
    int64_t parts[OT_CONV_MAX_PARTS * OT_CONV_PART_INTS];
    for (size_t i = 0; i < n; i++) {
        int64_t *pt = parts + i * OT_CONV_PART_INTS;
        pt[0] = w[i]->dims[0], pt[1] = w[i]->dims[2], pt[2] = w[i]->dims[3];
        pt[3] = P[0] - pads[i][0], pt[4] = P[1] - pads[i][1];
        if (pt[3] + pt[1] > K[0] || pt[4] + pt[2] > K[1]) return OTTER_OK;
    }
    const int64_t fused_pads[4] = {P[0], P[1], pads[0][0] + pads[0][2] - w[0]->dims[2] + K[0] - P[0],
                                   pads[0][1] + pads[0][3] - w[0]->dims[3] + K[1] - P[1]};
    /* X, part 0's W and B, no sum input, then each further part's W and B: the weights stay where they are */
    const char *in[3 + 2 * OT_CONV_MAX_PARTS];
    size_t n_in = 0;
    in[n_in++] = f->g->nodes[at[0]]->inputs[0];
    for (size_t i = 0; i < n; i++) {
        const otter_node *c = f->g->nodes[at[i]];
        in[n_in++] = c->inputs[1];
        in[n_in++] = c->n_inputs > 2 ? c->inputs[2] : "";
        if (i == 0) in[n_in++] = "";
    }
    otter_node *fused = NULL;
    otter_status s = otter_node_create(&fused, "FusedConv", cat->name && cat->name[0] ? cat->name : cat->outputs[0],
                                       n_in, in, 1, (const char *const *)cat->outputs);
    const otter_node *c0 = f->g->nodes[at[0]];
    if (s == OTTER_OK) s = otter_node_set_domain(fused, "com.otter");
    if (s == OTTER_OK) s = otter_node_set_attr_ints(fused, "pads", 4, fused_pads);
    if (s == OTTER_OK) s = otter_node_set_attr_ints(fused, "kernel_shape", 2, K);
    const int64_t *st;
    const size_t n_st = attr_ints(c0, "strides", &st);
    if (s == OTTER_OK && n_st) s = otter_node_set_attr_ints(fused, "strides", n_st, st);
    const char *act = otter_node_attr_string(c0, "activation", "");
    if (s == OTTER_OK && act[0]) s = otter_node_set_attr_string(fused, "activation", act);
    const otter_attr *ap = otter_node_attr(c0, "activation_params");
    if (s == OTTER_OK && ap && ap->n_floats)
        s = otter_node_set_attr_floats(fused, "activation_params", ap->n_floats, ap->floats);
    if (s == OTTER_OK) s = otter_node_set_attr_ints(fused, "kernel_parts", n * OT_CONV_PART_INTS, parts);
    const bool tentative = ot_conv_direct_isa() != OT_CONV_ISA_AVX512;
    if (s == OTTER_OK && tentative)
        s = ot_grow((void **)&f->joined, &f->cap_joined, f->n_joined + 1, sizeof *f->joined);
    if (s != OTTER_OK) {
        otter_node_free(fused);
        return s;
    }
    if (tentative) f->joined[f->n_joined++] = (struct joined_parts){fused, f->n_dead, n};
    for (size_t i = 0; s == OTTER_OK && i < n; i++) s = bury(f, at[i]);
    if (s == OTTER_OK) s = park(f, f->g->nodes[k]);
    if (s != OTTER_OK) {
        otter_node_free(fused);
        return s;
    }
    f->g->nodes[k] = fused; /* the Concat's place: after every part */
    return OTTER_OK;
}

/* After the layout pass: each tentatively joined FusedConv left planar (no channel_blocks) is replaced by its
 * convolutions and Concat again, taken back from dead, unless a name they write is now written by another
 * node. */
static otter_status split_planar_parts(fz *f) {
    otter_graph *g = f->g;
    for (size_t j = 0; j < f->n_joined; j++) {
        const struct joined_parts *jp = &f->joined[j];
        if (otter_node_attr(jp->fused, "channel_blocks")) continue;
        size_t at = g->n_nodes, clash = 0;
        for (size_t k = 0; k < g->n_nodes; k++) {
            if (g->nodes[k] == jp->fused) at = k;
            for (size_t o = 0; o < g->nodes[k]->n_outputs; o++)
                for (size_t i = 0; i < jp->n_parts; i++)
                    clash += !strcmp(g->nodes[k]->outputs[o], f->dead[jp->first_dead + i]->outputs[0]);
        }
        if (at == g->n_nodes || clash) continue;
        OT_TRY(ot_grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + jp->n_parts, sizeof *g->nodes));
        OT_TRY(park(f, g->nodes[at])); /* the maps may borrow its strings */
        memmove(g->nodes + at + jp->n_parts + 1, g->nodes + at + 1, (g->n_nodes - at - 1) * sizeof *g->nodes);
        for (size_t i = 0; i <= jp->n_parts; i++) { /* the convolutions, then the Concat */
            g->nodes[at + i] = f->dead[jp->first_dead + i];
            f->dead[jp->first_dead + i] = NULL;
        }
        g->n_nodes += jp->n_parts;
        f->n_fused -= jp->n_parts;
    }
    return OTTER_OK;
}

/* Dropout's ratio (its input 1 from opset 12, else its attribute; 0.5 when absent) when constant. */
static bool dropout_ratio(const fz *f, const otter_node *n, float *ratio) {
    *ratio = 0.5f;
    if (f->opset < 12) {
        *ratio = otter_node_attr_float(n, "ratio", 0.5f);
        return true;
    }
    return n->n_inputs < 2 || const_scalar(f, n->inputs[1], ratio);
}

/* com.microsoft DropoutGrad(dY, mask, ratio?, training_mode?) reading mask with a constant ratio of 0. */
static bool zero_dropout_grad(const fz *f, const otter_node *n, const char *mask) {
    float ratio = 0.5f;
    return is_ms_op(n, "DropoutGrad") && n->n_inputs >= 2 && n->n_outputs == 1 && !strcmp(n->inputs[1], mask) &&
           strcmp(n->inputs[0], mask) && (n->n_inputs < 3 || const_scalar(f, n->inputs[2], &ratio)) && ratio == 0.0f;
}

/* Node k becomes Identity(in) writing its output 0 (the old node is kept until the end). */
static otter_status to_identity(fz *f, size_t k, const char *in) {
    otter_node *old = f->g->nodes[k], *n;
    OT_TRY(otter_node_create(&n, "Identity", old->name, 1, (const char *const[]){in}, 1,
                             (const char *const[]){old->outputs[0]}));
    otter_status s = park(f, old);
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    f->g->nodes[k] = n;
    f->n_fused++;
    return OTTER_OK;
}

/* Dropout with a constant ratio of 0 passes X through, in training mode too (PyTorch exports a layer
 * built with dropout=0.0 as Dropout(X, 0, true)), and its DropoutGrad passes dY through: both become
 * Identity, which the session makes aliases, when every reader of the mask is such a DropoutGrad. In
 * a 4-layer transformer encoder's training step the 24 nodes moved 0.7 GB. */
static otter_status drop_zero_dropout(fz *f, size_t k) {
    const otter_node *n = f->g->nodes[k];
    float ratio;
    if (n->n_inputs < 1 || !n->inputs[0][0] || n->n_outputs < 1 || !n->outputs[0][0] || !dropout_ratio(f, n, &ratio) ||
        ratio != 0.0f)
        return OTTER_OK;
    const char *mask = n->n_outputs > 1 ? n->outputs[1] : "";
    intptr_t uses = get(&f->uses, mask), grads = 0;
    for (size_t j = k + 1; uses > 0 && j < f->g->n_nodes; j++) grads += zero_dropout_grad(f, f->g->nodes[j], mask);
    if (uses > 0 && grads != uses) return OTTER_OK;
    for (size_t j = k + 1; grads > 0 && j < f->g->n_nodes; j++)
        if (zero_dropout_grad(f, f->g->nodes[j], mask)) OT_TRY(to_identity(f, j, f->g->nodes[j]->inputs[0]));
    return to_identity(f, k, n->inputs[0]);
}

/* The com.microsoft SliceGrad writing `name`, read only by node `reader`, or NULL. */
static otter_node *slice_grad_for(const fz *f, const char *name, size_t reader, int64_t *at) {
    *at = get(&f->producer, name);
    otter_node *n = *at >= 0 ? f->g->nodes[*at] : NULL;
    if (!is_ms_op(n, "SliceGrad") || n->n_inputs < 4 || n->n_inputs > 6 || n->n_outputs != 1 ||
        only_reader(f, name) != (int64_t)reader)
        return NULL;
    return n;
}

/* Shapes a and b are the same value: one name, or both Shape (all of it) of one tensor. */
static bool same_shape_value(const fz *f, const char *a, const char *b) {
    if (!strcmp(a, b)) return true;
    const otter_node *sa = made_by(f, a, "Shape", NULL), *sb = made_by(f, b, "Shape", NULL);
    return sa && sb && sa->n_inputs == 1 && sb->n_inputs == 1 && !strcmp(sa->inputs[0], sb->inputs[0]) &&
           !sa->n_attrs && !sb->n_attrs;
}

/* Sum of SliceGrads of one shape (q, k and v sliced from one projection) -> com.otter SlicesGrad:
 * the first SliceGrad's six inputs, then (dY, starts, ends, axes, steps) of each other one. */
static otter_status fuse_slices_grad(fz *f, size_t k) {
    const otter_node *sum = f->g->nodes[k];
    const size_t parts = sum->n_inputs;
    if (parts < 2 || parts > 64 || sum->n_outputs != 1) return OTTER_OK;
    int64_t at[64];
    const otter_node *sg[64];
    for (size_t i = 0; i < parts; i++) {
        sg[i] = slice_grad_for(f, sum->inputs[i], k, &at[i]);
        if (!sg[i] || !same_shape_value(f, sg[i]->inputs[1], sg[0]->inputs[1])) return OTTER_OK;
    }
    const char *ins[6 + 5 * 63];
    size_t n = 0;
    for (size_t i = 0; i < parts; i++)
        for (size_t j = 0; j < 6; j++)
            if (i == 0 || j != 1) ins[n++] = j < sg[i]->n_inputs ? sg[i]->inputs[j] : "";
    otter_node *fused;
    OT_TRY(otter_node_create(&fused, "SlicesGrad", sum->name, n, ins, 1, (const char *const[]){sum->outputs[0]}));
    otter_status s = otter_node_set_domain(fused, "com.otter");
    if (s == OTTER_OK) s = park(f, f->g->nodes[k]);
    if (s != OTTER_OK) {
        otter_node_free(fused);
        return s;
    }
    f->g->nodes[k] = fused;
    for (size_t i = 0; i < parts; i++) OT_TRY(bury(f, (size_t)at[i]));
    return OTTER_OK;
}

/* n is a com.microsoft FusedMatMul of two inputs with these transA / transB, no transBatch; its alpha into *alpha. */
static bool ms_product(const otter_node *n, bool ta, bool tb, float *alpha) {
    if (!is_ms_op(n, "FusedMatMul") || n->n_inputs != 2 || n->n_outputs != 1 || !n->inputs[0][0] || !n->inputs[1][0] ||
        otter_node_attr_int(n, "transA", 0) != ta || otter_node_attr_int(n, "transB", 0) != tb ||
        otter_node_attr_int(n, "transBatchA", 0) || otter_node_attr_int(n, "transBatchB", 0))
        return false;
    *alpha = otter_node_attr_float(n, "alpha", 1.0f);
    return true;
}

/* Made before node `at` (a graph input, an initializer or an earlier node's output). */
static bool defined_before(const fz *f, const char *name, intptr_t at) { return get(&f->producer, name) < at; }

/* The gradient of Softmax(S) V as autodiff writes it for an exported attention (rules of MatMul and
 * Softmax): dP = FusedMatMul(dY, V, transB) [-> Identity], dS = SoftmaxGrad_13(dP, P) read by
 * FusedMatMul(dS, Kt, transB) (dQs) and FusedMatMul(Qs, dS, transA) (dKt), with dV = FusedMatMul(P, dY,
 * transA) when there is one -> com.otter AttentionCoreGrad(dY, V, P, Kt, Qs) -> dQs, dKt, dV, a batch's
 * scores in cache from dP to dS (runtime/ops/training_attention.c), in dP's product's place. `k` is the
 * SoftmaxGrad_13. */
static otter_status fuse_attention_core_grad(fz *f, size_t k) {
    const otter_node *sg = f->g->nodes[k];
    if (!is_ms_op(sg, "SoftmaxGrad_13") || sg->n_inputs != 2 || sg->n_outputs != 1 ||
        otter_node_attr_int(sg, "axis", -1) != -1 || only_reader(f, sg->inputs[0]) != (int64_t)k)
        return OTTER_OK;
    const char *dp = sg->inputs[0], *p = sg->inputs[1], *ds = sg->outputs[0];
    int64_t id_at = -1;
    const otter_node *id = made_by(f, dp, "Identity", &id_at);
    if (id && (id->n_inputs != 1 || only_reader(f, id->inputs[0]) != id_at)) return OTTER_OK;
    if (id) dp = id->inputs[0];
    const intptr_t at = get(&f->producer, dp);
    const otter_node *mdp = at >= 0 ? f->g->nodes[at] : NULL;
    float a_dp, a_q = 0, a_k = 0, a_v;
    if (!ms_product(mdp, false, true, &a_dp) || a_dp != 1.0f) return OTTER_OK;
    const char *dy = mdp->inputs[0], *v = mdp->inputs[1], *kt = NULL, *qs = NULL;
    int64_t q_at = -1, k_at = -1, v_at = -1, ds_reads = 0;
    for (size_t j = 0; j < f->g->n_nodes; j++) {
        const otter_node *n = f->g->nodes[j];
        if (!n || j == k) continue;
        for (size_t i = 0; i < n->n_inputs; i++) ds_reads += !strcmp(n->inputs[i], ds);
        if (q_at < 0 && ms_product(n, false, true, &a_q) && !strcmp(n->inputs[0], ds) && strcmp(n->inputs[1], ds))
            q_at = (int64_t)j, kt = n->inputs[1];
        else if (k_at < 0 && ms_product(n, true, false, &a_k) && !strcmp(n->inputs[1], ds) && strcmp(n->inputs[0], ds))
            k_at = (int64_t)j, qs = n->inputs[0];
        else if (v_at < 0 && ms_product(n, true, false, &a_v) && a_v == 1.0f && !strcmp(n->inputs[0], p) &&
                 !strcmp(n->inputs[1], dy))
            v_at = (int64_t)j;
    }
    if (q_at < 0 || k_at < 0 || ds_reads != 2 || get(&f->uses, ds) != 2 || !defined_before(f, p, at) ||
        !defined_before(f, kt, at) || !defined_before(f, qs, at) || !shown_float(f, dy, 6))
        return OTTER_OK;
    const char *outs[3] = {f->g->nodes[q_at]->outputs[0], f->g->nodes[k_at]->outputs[0],
                           v_at >= 0 ? f->g->nodes[v_at]->outputs[0] : ""};
    otter_node *n;
    OT_TRY(otter_node_create(&n, "AttentionCoreGrad", sg->name, 5, (const char *const[]){dy, v, p, kt, qs},
                             v_at >= 0 ? 3 : 2, outs));
    otter_status s = otter_node_set_domain(n, "com.otter");
    if (s == OTTER_OK && a_q != 1.0f) s = otter_node_set_attr_float(n, "alpha_q", a_q);
    if (s == OTTER_OK && a_k != 1.0f) s = otter_node_set_attr_float(n, "alpha_k", a_k);
    if (s == OTTER_OK) s = park(f, f->g->nodes[at]);
    if (s != OTTER_OK) {
        otter_node_free(n);
        return s;
    }
    f->g->nodes[at] = n;
    f->made_core_grad = true;
    for (size_t o = 0; o < n->n_outputs; o++) OT_TRY(ot_strmap_put(&f->producer, n->outputs[o], at));
    const int64_t gone[5] = {(int64_t)k, id_at, q_at, k_at, v_at};
    for (int i = 0; i < 5; i++)
        if (gone[i] >= 0) OT_TRY(bury(f, (size_t)gone[i]));
    return OTTER_OK;
}

/* Transpose(Gemm(A, B), perm [1, 0]), the Gemm read by nothing else -> Gemm(B, A) with the transposes
 * swapped and flipped: C^T = op(B)^T op(A)^T. The gradient of MatMul(X, Transpose(W)) transposes the
 * weight gradient it computes (a 256 x 1024 copy a layer and step of the encoder); the product now
 * writes it in place: the same products, summed in the same order over k. */
static otter_status fuse_transposed_gemm(fz *f, size_t k) {
    otter_node *t = f->g->nodes[k];
    const otter_attr *perm = otter_node_attr(t, "perm");
    if (t->n_inputs != 1 || t->n_outputs != 1 || !perm || perm->type != OTTER_ATTR_INTS || perm->n_ints != 2 ||
        perm->ints[0] != 1 || perm->ints[1] != 0)
        return OTTER_OK;
    int64_t at;
    otter_node *gemm = made_by(f, t->inputs[0], "Gemm", &at) ? f->g->nodes[at] : NULL;
    if (!gemm || only_reader(f, t->inputs[0]) != (int64_t)k || gemm->n_outputs != 1 ||
        (gemm->n_inputs > 2 && gemm->inputs[2][0]) || gemm->n_inputs < 2)
        return OTTER_OK;
    const int64_t ta = otter_node_attr_int(gemm, "transA", 0), tb = otter_node_attr_int(gemm, "transB", 0);
    char *a = gemm->inputs[0];
    gemm->inputs[0] = gemm->inputs[1];
    gemm->inputs[1] = a;
    OT_TRY(otter_node_set_attr_int(gemm, "transA", !tb));
    OT_TRY(otter_node_set_attr_int(gemm, "transB", !ta));
    return take_over(f, (size_t)at, k);
}

/* ReluGrad(dY, X) with dY a com.microsoft FusedMatMul's product that nothing else reads (through
 * Identity nodes: the zero-ratio DropoutGrads drop_zero_dropout made) -> com.otter
 * FusedMatMulReluGrad(A, B, X): each tile of the product gated by X's sign as it is stored, instead
 * of a pass over dY after it (the encoder's feed-forward: dY written, then read again with X and dX
 * written, 16 MB each a layer and step). The same products; dX = X > 0 ? dY : +0 as ReluGrad. */
static otter_status fuse_relu_grad_product(fz *f, size_t k) {
    const otter_node *rg = f->g->nodes[k];
    if (rg->n_inputs != 2 || rg->n_outputs != 1 || !rg->inputs[0][0] || !rg->inputs[1][0] ||
        !strcmp(rg->inputs[0], rg->inputs[1]))
        return OTTER_OK;
    enum { MAX_HOPS = 8 };
    int64_t ids[MAX_HOPS], at;
    int n_ids = 0;
    const char *dy = rg->inputs[0];
    int64_t reader = (int64_t)k;
    for (const otter_node *id; (id = made_by(f, dy, "Identity", &at)) && id->n_inputs == 1;) {
        if (n_ids == MAX_HOPS || only_reader(f, dy) != reader) return OTTER_OK;
        ids[n_ids++] = reader = at;
        dy = id->inputs[0];
    }
    const intptr_t p = get(&f->producer, dy);
    otter_node *mm = p >= 0 ? f->g->nodes[p] : NULL;
    if (!is_ms_op(mm, "FusedMatMul") || mm->n_inputs != 2 || mm->n_outputs != 1 || only_reader(f, dy) != reader)
        return OTTER_OK;
    OT_TRY(set_name(f, &mm->op_type, "FusedMatMulReluGrad"));
    OT_TRY(otter_node_set_domain(mm, "com.otter"));
    OT_TRY(set_input(f, mm, 2, rg->inputs[1]));
    for (int i = 0; i < n_ids; i++) OT_TRY(bury(f, (size_t)ids[i]));
    return take_over(f, (size_t)p, k);
}

/* ---- attention heads' Transposes around AttentionCoreGrad ---------------------------------------- */

/* Whether a subgraph of g's nodes reads name. */
static bool read_in_subgraph(const otter_graph *g, const char *name, bool top) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        if (!n) continue;
        for (size_t i = 0; !top && i < n->n_inputs; i++)
            if (!strcmp(n->inputs[i], name)) return true;
        for (size_t a = 0; a < n->n_attrs; a++) {
            const otter_attr *at = &n->attrs[a];
            if (at->type == OTTER_ATTR_GRAPH && at->g && read_in_subgraph(at->g, name, false)) return true;
            for (size_t i = 0; at->type == OTTER_ATTR_GRAPHS && i < at->n_graphs; i++)
                if (read_in_subgraph(at->graphs[i], name, false)) return true;
        }
    }
    return false;
}

/* The top-level nodes reading name (up to max, in *at), counted now (the fusions before changed the readers the
 * maps counted); -1 when it is a graph output, read in a subgraph or by more than max nodes. */
static int readers_now(const fz *f, const char *name, size_t *at, int max) {
    const otter_graph *g = f->g;
    for (size_t i = 0; i < g->n_outputs; i++)
        if (!strcmp(g->outputs[i].name, name)) return -1;
    int n = 0;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *r = g->nodes[k];
        bool reads = false;
        for (size_t i = 0; r && i < r->n_inputs; i++) reads |= !strcmp(r->inputs[i], name);
        if (!reads) continue;
        if (n == max) return -1;
        at[n++] = k;
    }
    return read_in_subgraph(g, name, true) ? -1 : n;
}

/* The com.otter AttentionCoreGrad node n. */
static bool is_core_grad(const otter_node *n) {
    return n && n->domain && !strcmp(n->domain, "com.otter") && !strcmp(n->op_type, "AttentionCoreGrad");
}

/* A Transpose's perm of rank 3, or NULL. */
static const int64_t *perm3(const otter_node *t) {
    const otter_attr *a = otter_node_attr(t, "perm");
    return t->n_inputs == 1 && t->n_outputs == 1 && a && a->type == OTTER_ATTR_INTS && a->n_ints == 3 ? a->ints : NULL;
}

static const char *const acg_layout_attr[8] = {"layout_dY", "layout_V",   "layout_P",   "layout_Kt",
                                               "layout_Qs", "layout_dQs", "layout_dKt", "layout_dV"};

/* A rank-3 Transpose read only by AttentionCoreGrads (each at most once, in no layout yet) -> gone: they read its
 * input in that layout. PyTorch's attention export in training: dY's heads, a 4 MB copy a layer and step of the
 * encoder. (V's and K^T's heads are also read by the forward products, which stay on the contiguous copy: a
 * product reading heads 32 KB apart in place ran 1.6x slower than the Transpose and the product together.) */
static otter_status fold_head_transpose(fz *f, size_t k) {
    const otter_node *t = f->g->nodes[k];
    const int64_t *perm = perm3(t);
    const int L = perm ? ot_head_layout_of_perm(perm) : 0;
    size_t at[8];
    const int n = L ? readers_now(f, t->outputs[0], at, 8) : -1;
    if (n <= 0) return OTTER_OK;
    for (int r = 0; r < n; r++) {
        const otter_node *x = f->g->nodes[at[r]];
        size_t seen = 0, where = 0;
        for (size_t i = 0; i < x->n_inputs; i++)
            if (!strcmp(x->inputs[i], t->outputs[0])) seen++, where = i;
        if (seen != 1 || !is_core_grad(x) || where >= 5 || otter_node_attr_int(x, acg_layout_attr[where], 0))
            return OTTER_OK;
    }
    for (int r = 0; r < n; r++) {
        otter_node *x = f->g->nodes[at[r]];
        size_t where = 0;
        while (strcmp(x->inputs[where], t->outputs[0])) where++;
        OT_TRY(otter_node_set_attr_int(x, acg_layout_attr[where], L));
        OT_TRY(set_input(f, x, where, t->inputs[0]));
    }
    return bury(f, k);
}

/* Transpose(AttentionCoreGrad's output [-> Identity]), read by nothing else: the output stored in that layout
 * under the Transpose's name (perm [1, 0, 2]: layout 1, [0, 2, 1]: 2, [2, 0, 1]: 3, the inverse of the inputs'
 * [1, 2, 0]). The gradients of PyTorch's V and K^T heads go back to [T, B*H, d] this way. */
static otter_status fold_head_output_transpose(fz *f, size_t k) {
    const otter_node *t = f->g->nodes[k];
    const int64_t *perm = perm3(t);
    if (!perm) return OTTER_OK;
    size_t at[2];
    const char *x = t->inputs[0];
    int64_t id_at = -1;
    const otter_node *id = made_by(f, x, "Identity", &id_at);
    if (id && (id->n_inputs != 1 || readers_now(f, x, at, 1) != 1)) return OTTER_OK;
    if (id) x = id->inputs[0];
    if (readers_now(f, x, at, 1) != 1) return OTTER_OK;
    const intptr_t p = get(&f->producer, x);
    otter_node *acg = p >= 0 ? f->g->nodes[p] : NULL;
    if (!is_core_grad(acg)) return OTTER_OK;
    size_t o = 0;
    while (o < acg->n_outputs && strcmp(acg->outputs[o], x)) o++;
    /* the layout that reads this Transpose's output back as the product: its perm's inverse as an input perm */
    int64_t inv[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++)
        if (perm[i] >= 0 && perm[i] < 3) inv[perm[i]] = i;
    const int L = ot_head_layout_of_perm(inv);
    if (o >= 3 || !L || otter_node_attr_int(acg, acg_layout_attr[5 + o], 0)) return OTTER_OK;
    OT_TRY(otter_node_set_attr_int(acg, acg_layout_attr[5 + o], L));
    OT_TRY(set_name(f, &acg->outputs[o], t->outputs[0]));
    OT_TRY(ot_strmap_put(&f->producer, acg->outputs[o], p));
    if (id) OT_TRY(bury(f, (size_t)id_at));
    return bury(f, k);
}

/* Any chain to fuse at all (so models without one are not copied)? */
static bool worth_it(const otter_graph *g) {
    for (size_t k = 0; k < g->n_nodes; k++)
        if (is_op(g->nodes[k], "Conv") || is_op(g->nodes[k], "Gemm") || is_op(g->nodes[k], "MatMul") ||
            is_op(g->nodes[k], "ScatterElements") || is_op(g->nodes[k], "Where") || is_op(g->nodes[k], "Dropout") ||
            is_op(g->nodes[k], "Sum") || is_ms_op(g->nodes[k], "SoftmaxGrad_13") || is_ms_op(g->nodes[k], "ReluGrad"))
            return true;
    return false;
}

/* A copy of m whose graph holds views of m's initializers. */
static otter_status copy_model(const otter_model *m, otter_model **out) {
    otter_graph g = *m->graph;
    g.n_initializers = 0, g.initializers = NULL, g.cap_initializers = 0;
    otter_model mm = *m;
    mm.graph = &g;
    otter_model *c = NULL;
    OT_TRY(otter_model_clone(&c, &mm));
    for (size_t i = 0; i < m->graph->n_initializers; i++) {
        const otter_tensor *t = m->graph->initializers[i];
        otter_tensor *v = ot_calloc(1, sizeof *v);
        if (!v || !(v->name = ot_strdup(t->name))) {
            ot_free(v);
            otter_model_free(c);
            return OT_NOMEM();
        }
        v->dtype = t->dtype, v->rank = t->rank, v->data = t->data, v->owns_data = false;
        memcpy(v->dims, t->dims, sizeof v->dims);
        otter_status s = otter_graph_add_initializer(c->graph, v);
        if (s != OTTER_OK) {
            otter_model_free(c);
            return s;
        }
    }
    *out = c;
    return OTTER_OK;
}

static otter_status run_passes(fz *f) {
    otter_graph *g = f->g;
    OT_TRY(count_uses(f, g, true));
    for (size_t i = 0; i < g->n_outputs; i++) {
        intptr_t c = get(&f->uses, g->outputs[i].name);
        OT_TRY(ot_strmap_put(&f->uses, g->outputs[i].name, c < 0 ? 1 : c + 1));
    }
    for (size_t i = 0; i < g->n_initializers; i++)
        OT_TRY(ot_strmap_put(&f->inits, g->initializers[i]->name, (intptr_t)i));
    for (size_t i = 0; i < g->n_inputs; i++) {
        OT_TRY(ot_strmap_put(&f->inputs, g->inputs[i].name, (intptr_t)i));
        OT_TRY(ot_strmap_put(&f->names, g->inputs[i].name, 1));
    }
    /* gradients first: a ReluGrad fused there no longer reads the Relu's output, which the Conv's
     * chain may then take up to the MaxPool */
    for (size_t k = 0; k < g->n_nodes; k++) {
        if (is_op(g->nodes[k], "ScatterElements")) OT_TRY(fuse_maxpool_grad(f, k));
        if (is_op(g->nodes[k], "Where")) OT_TRY(fuse_clip_grad(f, k));
        if (is_op(g->nodes[k], "Dropout")) OT_TRY(drop_zero_dropout(f, k));
        if (is_op(g->nodes[k], "Sum")) OT_TRY(fuse_slices_grad(f, k));
        if (is_ms_op(g->nodes[k], "SoftmaxGrad_13")) OT_TRY(fuse_attention_core_grad(f, k));
        if (is_op(g->nodes[k], "Transpose")) OT_TRY(fuse_transposed_gemm(f, k));
        if (is_ms_op(g->nodes[k], "ReluGrad")) OT_TRY(fuse_relu_grad_product(f, k));
    }
    /* after the attention gradients are AttentionCoreGrad: the heads' Transposes on their both sides */
    for (size_t k = 0; f->made_core_grad && k < g->n_nodes; k++)
        if (is_op(g->nodes[k], "Transpose")) {
            OT_TRY(fold_head_transpose(f, k));
            if (g->nodes[k]) OT_TRY(fold_head_output_transpose(f, k));
        }
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        if (is_op(n, "Conv"))
            OT_TRY(fuse_conv(f, k));
        else if (is_op(n, "Gemm"))
            OT_TRY(fuse_gemm(f, k));
        else if (is_op(n, "MatMul"))
            OT_TRY(fuse_matmul(f, k));
    }
    /* after the chains, whose activations the parts must share */
    for (size_t k = 0; k < g->n_nodes; k++)
        if (is_op(g->nodes[k], "Concat")) OT_TRY(fuse_concat_convs(f, k));
    return OTTER_OK;
}

otter_status ot_fuse_model(const otter_model *m, bool fold_initializers, otter_model **out, size_t *n_fused) {
    *out = NULL;
    if (n_fused) *n_fused = 0;
    if (!m || !m->graph || !worth_it(m->graph)) return OTTER_OK;
    otter_model *c = NULL;
    OT_TRY(copy_model(m, &c));
    fz f = {.g = c->graph, .opset = otter_model_opset(m, ""), .fold = fold_initializers};
    otter_status s = run_passes(&f);
    size_t j = 0; /* drop the fused-away nodes' places */
    for (size_t k = 0; k < c->graph->n_nodes; k++)
        if (c->graph->nodes[k]) c->graph->nodes[j++] = c->graph->nodes[k];
    c->graph->n_nodes = j;
    size_t n_blocked = 0;
    if (s == OTTER_OK) s = ot_layout_channel_blocks(c->graph, &n_blocked);
    if (s == OTTER_OK) s = split_planar_parts(&f);
    if (s == OTTER_OK && (f.n_fused || n_blocked)) s = otter_model_set_opset(c, "com.otter", 1);
    if (s == OTTER_OK && f.made_ms && otter_model_opset(c, "com.microsoft") < 1)
        s = otter_model_set_opset(c, "com.microsoft", 1);
    ot_strmap_free(&f.uses), ot_strmap_free(&f.reader), ot_strmap_free(&f.producer), ot_strmap_free(&f.inits),
        ot_strmap_free(&f.inputs), ot_strmap_free(&f.names);
    for (size_t i = 0; i < f.n_dead; i++) otter_node_free(f.dead[i]);
    ot_free(f.dead), ot_free(f.joined);
    if (s != OTTER_OK || !(f.n_fused || n_blocked)) {
        /* on failure the copy may be half-edited: drop it (the session runs the model as written) */
        otter_model_free(c);
        return s;
    }
    *out = c;
    if (n_fused) *n_fused = f.n_fused;
    return OTTER_OK;
}
