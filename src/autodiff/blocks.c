/* Blocks: small builders that append ONNX nodes, for forward models and custom losses. */
#include "otter/blocks.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/rng.h"
#include "core/strmap.h"
#include "otter/infer.h"

struct otter_builder {
    otter_model *m;
    otter_status status;
    char message[512];
    ot_rng rng;
    ot_strmap taken; /* every tensor and node name in use (keys owned by `names`) */
    char **names;
    size_t n_names, cap_names;
    size_t counter;
    otter_model *typed; /* inferred copy for type lookups, rebuilt when stale */
    size_t typed_nodes;
};

const char *otter_reduction_name(otter_reduction r) {
    return r == OTTER_REDUCE_SUM ? "sum" : r == OTTER_REDUCE_NONE ? "none" : "mean";
}

static void fail(otter_builder *b, otter_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(otter_builder *b, otter_status s, const char *fmt, ...) {
    if (b->status != OTTER_OK) return;
    b->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->message, sizeof b->message, fmt, ap);
    va_end(ap);
}

static void fail_from_last(otter_builder *b, otter_status s) { fail(b, s, "%s", otter_last_error()); }

static const char *remember(otter_builder *b, char *name) {
    if (!name || ot_grow((void **)&b->names, &b->cap_names, b->n_names + 1, sizeof *b->names) != OTTER_OK ||
        ot_strmap_put(&b->taken, name, 1) != OTTER_OK) {
        ot_free(name);
        fail(b, OTTER_ERR_NOMEM, "out of memory");
        return NULL;
    }
    b->names[b->n_names++] = name;
    return name;
}

/* A name not used in the graph yet: `base` itself when free, else base_<n>. */
static const char *fresh(otter_builder *b, const char *base) {
    if (b->status != OTTER_OK) return NULL;
    if (!ot_strmap_get(&b->taken, base, NULL)) return remember(b, ot_strdup(base));
    for (;;) {
        char *n = ot_sprintf("%s_%zu", base, b->counter++);
        if (!n) return remember(b, NULL);
        if (!ot_strmap_get(&b->taken, n, NULL)) return remember(b, n);
        ot_free(n);
    }
}

otter_status otter_builder_create(otter_builder **out, otter_model *m, uint64_t seed) {
    *out = NULL;
    otter_builder *b = ot_calloc(1, sizeof *b);
    if (!b) return OT_NOMEM();
    b->m = m;
    b->rng.state = seed;
    otter_graph *g = m->graph;
    for (size_t i = 0; i < g->n_inputs; i++) remember(b, ot_strdup(g->inputs[i].name));
    for (size_t i = 0; i < g->n_initializers; i++) remember(b, ot_strdup(g->initializers[i]->name));
    for (size_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i]->name) remember(b, ot_strdup(g->nodes[i]->name));
        for (size_t j = 0; j < g->nodes[i]->n_outputs; j++) remember(b, ot_strdup(g->nodes[i]->outputs[j]));
    }
    if (b->status != OTTER_OK) {
        otter_builder_finish(b);
        return OT_NOMEM();
    }
    *out = b;
    return OTTER_OK;
}

otter_model *otter_builder_model(otter_builder *b) { return b->m; }

otter_status otter_builder_finish(otter_builder *b) {
    if (!b) return OTTER_OK;
    otter_status s = b->status;
    if (s != OTTER_OK) ot_error(s, "%s", b->message);
    for (size_t i = 0; i < b->n_names; i++) ot_free(b->names[i]);
    ot_free(b->names);
    ot_strmap_free(&b->taken);
    otter_model_free(b->typed);
    ot_free(b);
    return s;
}

/* ---- node helpers ---------------------------------------------------------------------------- */

static otter_node *emit(otter_builder *b, const char *op, size_t n_in, const char *const *ins, const char *out) {
    if (b->status != OTTER_OK || !out) return NULL;
    for (size_t i = 0; i < n_in; i++)
        if (!ins[i]) return NULL;
    otter_node *n;
    otter_status s = otter_node_create(&n, op, out, n_in, ins, 1, &out);
    if (s == OTTER_OK) s = otter_graph_add_node(b->m->graph, n);
    if (s != OTTER_OK) {
        fail_from_last(b, s);
        return NULL;
    }
    return n;
}

static const char *op(otter_builder *b, const char *op_type, size_t n_in, const char *const *ins) {
    char base[64];
    snprintf(base, sizeof base, "%s", op_type);
    const char *out = fresh(b, base);
    return emit(b, op_type, n_in, ins, out) ? out : NULL;
}
#define OP(b, type, ...)                                                                                               \
    op((b), (type), sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), (const char *[]){__VA_ARGS__})

static void set_int(otter_builder *b, otter_node *n, const char *name, int64_t v) {
    if (n && otter_node_set_attr_int(n, name, v) != OTTER_OK) fail_from_last(b, OTTER_ERR_NOMEM);
}

/* An initializer owned by the graph; returns its name. */
static const char *initializer(otter_builder *b, const char *base, otter_dtype dt, int rank, const int64_t *dims,
                               const void *data) {
    const char *name = fresh(b, base);
    if (!name) return NULL;
    otter_tensor *t;
    otter_status s = otter_tensor_from_data(&t, name, dt, rank, dims, data);
    if (s == OTTER_OK) s = otter_graph_add_initializer(b->m->graph, t);
    if (s != OTTER_OK) fail_from_last(b, s);
    return s == OTTER_OK ? name : NULL;
}

static const char *i64s(otter_builder *b, const char *base, size_t n, const int64_t *v) {
    int64_t d = (int64_t)n;
    return initializer(b, base, OTTER_DTYPE_INT64, 1, &d, v);
}

/* Static type of a tensor: declared, else inferred on a copy of the model. */
static const otter_type *type_of(otter_builder *b, const char *x) {
    if (!x) return NULL;
    const otter_type *t = otter_graph_value_type(b->m->graph, x);
    if (t) return t;
    if (!b->typed || b->typed_nodes != b->m->graph->n_nodes) {
        otter_model_free(b->typed);
        b->typed = NULL;
        if (otter_model_clone(&b->typed, b->m) != OTTER_OK || otter_model_infer_shapes(b->typed, NULL) != OTTER_OK) {
            otter_model_free(b->typed);
            b->typed = NULL;
            return NULL;
        }
        b->typed_nodes = b->m->graph->n_nodes;
    }
    return otter_graph_value_type(b->typed->graph, x);
}

/* ---- inputs and outputs ------------------------------------------------------------------------ */

const char *otter_block_input(otter_builder *b, const char *name, otter_dtype dtype, int rank, const int64_t *dims) {
    if (b->status != OTTER_OK) return NULL;
    const char *params[OTTER_MAX_RANK];
    for (int i = 0; i < rank && i < OTTER_MAX_RANK; i++) params[i] = dims[i] < 0 ? "batch_size" : NULL;
    otter_status s = otter_graph_add_input(b->m->graph, name, dtype, rank, dims, params);
    if (s != OTTER_OK) {
        fail_from_last(b, s);
        return NULL;
    }
    return remember(b, ot_strdup(name));
}

/* Add a graph output with x's static type (or untyped). */
static void declare_output(otter_builder *b, const char *name, const char *like) {
    const otter_type *t = type_of(b, like);
    otter_graph *g = b->m->graph;
    otter_status s =
        otter_graph_add_output(g, name, t && t->has_elem_type ? t->elem_type : OTTER_DTYPE_FLOAT, -1, NULL, NULL);
    if (s == OTTER_OK && t) {
        otter_type copy;
        if (otter_type_copy(&copy, t) != OTTER_OK)
            s = OTTER_ERR_NOMEM;
        else {
            otter_type_clear(&g->outputs[g->n_outputs - 1].type);
            g->outputs[g->n_outputs - 1].type = copy;
        }
    }
    if (s != OTTER_OK) fail_from_last(b, s);
}

const char *otter_block_output(otter_builder *b, const char *x, const char *name) {
    if (!x || b->status != OTTER_OK) return NULL;
    if (!ot_streq(x, name)) {
        const char *out = fresh(b, name);
        if (out && !ot_streq(out, name)) {
            fail(b, OTTER_ERR_INVALID, "output name '%s' is already used in the graph", name);
            return NULL;
        }
        if (!emit(b, "Identity", 1, &x, out)) return NULL;
    }
    declare_output(b, name, x);
    return b->status == OTTER_OK ? name : NULL;
}

/* ---- elementwise --------------------------------------------------------------------------------- */

const char *otter_block_add(otter_builder *b, const char *x, const char *y) { return OP(b, "Add", x, y); }
const char *otter_block_sub(otter_builder *b, const char *x, const char *y) { return OP(b, "Sub", x, y); }
const char *otter_block_mul(otter_builder *b, const char *x, const char *y) { return OP(b, "Mul", x, y); }
const char *otter_block_div(otter_builder *b, const char *x, const char *y) { return OP(b, "Div", x, y); }
const char *otter_block_pow(otter_builder *b, const char *x, const char *y) { return OP(b, "Pow", x, y); }
const char *otter_block_sigmoid(otter_builder *b, const char *x) { return OP(b, "Sigmoid", x); }
const char *otter_block_log(otter_builder *b, const char *x) { return OP(b, "Log", x); }
const char *otter_block_neg(otter_builder *b, const char *x) { return OP(b, "Neg", x); }
const char *otter_block_abs(otter_builder *b, const char *x) { return OP(b, "Abs", x); }
const char *otter_block_relu(otter_builder *b, const char *x) { return OP(b, "Relu", x); }
const char *otter_block_flatten(otter_builder *b, const char *x) { return OP(b, "Flatten", x); }

const char *otter_block_constant(otter_builder *b, float value) {
    return initializer(b, "const", OTTER_DTYPE_FLOAT, 0, NULL, &value);
}

const char *otter_block_clip(otter_builder *b, const char *x, float lo, float hi) {
    return OP(b, "Clip", x, otter_block_constant(b, lo), otter_block_constant(b, hi));
}

const char *otter_block_cast(otter_builder *b, const char *x, otter_dtype to) {
    const char *out = fresh(b, "Cast");
    otter_node *n = emit(b, "Cast", 1, &x, out);
    set_int(b, n, "to", to);
    return n ? out : NULL;
}

static const char *reduce(otter_builder *b, const char *type, const char *x, size_t n_axes, const int64_t *axes,
                          int keepdims) {
    int64_t opset = otter_model_opset(b->m, "");
    bool as_input = opset >= (strcmp(type, "ReduceSum") == 0 ? 13 : 18);
    const char *out = fresh(b, type);
    otter_node *n;
    if (n_axes && as_input) {
        n = emit(b, type, 2, (const char *[]){x, i64s(b, "axes", n_axes, axes)}, out);
    } else {
        n = emit(b, type, 1, &x, out);
        if (n && n_axes && otter_node_set_attr_ints(n, "axes", n_axes, axes) != OTTER_OK)
            fail_from_last(b, OTTER_ERR_NOMEM);
    }
    set_int(b, n, "keepdims", keepdims);
    return n ? out : NULL;
}

const char *otter_block_reduce_mean(otter_builder *b, const char *x, size_t n_axes, const int64_t *axes, int keepdims) {
    return reduce(b, "ReduceMean", x, n_axes, axes, keepdims);
}
const char *otter_block_reduce_sum(otter_builder *b, const char *x, size_t n_axes, const int64_t *axes, int keepdims) {
    return reduce(b, "ReduceSum", x, n_axes, axes, keepdims);
}

/* ---- losses -------------------------------------------------------------------------------------- */

static const char *reduce_loss(otter_builder *b, const char *x, otter_reduction r) {
    if (r == OTTER_REDUCE_NONE) return x;
    return reduce(b, r == OTTER_REDUCE_SUM ? "ReduceSum" : "ReduceMean", x, 0, NULL, 0);
}

/* A target input typed like x, unless the graph already has a tensor of that name. */
static const char *target_like(otter_builder *b, const char *target, const char *x, bool drop_class_axis) {
    if (b->status != OTTER_OK) return NULL;
    if (ot_strmap_get(&b->taken, target, NULL)) return target;
    const otter_type *t = type_of(b, x);
    if (!t || t->kind != OTTER_TYPE_TENSOR || t->rank < 0) {
        fail(b, OTTER_ERR_INVALID, "can't tell the shape of '%s' to make the loss input '%s'", x, target);
        return NULL;
    }
    int64_t dims[OTTER_MAX_RANK];
    const char *params[OTTER_MAX_RANK];
    int rank = 0;
    for (int i = 0; i < t->rank; i++) {
        if (drop_class_axis && i == 1) continue;
        dims[rank] = t->dims[i].value;
        params[rank++] = t->dims[i].param;
    }
    otter_dtype dt = drop_class_axis ? OTTER_DTYPE_INT64 : t->elem_type;
    otter_status s = otter_graph_add_input(b->m->graph, target, dt, rank, dims, params);
    if (s != OTTER_OK) {
        fail_from_last(b, s);
        return NULL;
    }
    return remember(b, ot_strdup(target));
}

const char *otter_block_mse_loss(otter_builder *b, const char *x, const char *target, otter_reduction r) {
    const char *t = target_like(b, target, x, false);
    return reduce_loss(b, OP(b, "Pow", OP(b, "Sub", x, t), otter_block_constant(b, 2.0f)), r);
}

const char *otter_block_l1_loss(otter_builder *b, const char *x, const char *target, otter_reduction r) {
    const char *t = target_like(b, target, x, false);
    return reduce_loss(b, OP(b, "Abs", OP(b, "Sub", x, t)), r);
}

const char *otter_block_cross_entropy_loss(otter_builder *b, const char *logits, const char *labels, otter_reduction r,
                                           const float *weight, size_t n_weight, int has_ignore, int64_t ignore_index) {
    const char *l = target_like(b, labels, logits, true);
    const char *ins[3] = {logits, l, NULL};
    size_t n_in = 2;
    if (weight) {
        int64_t d = (int64_t)n_weight;
        ins[n_in++] = initializer(b, "ce_weight", OTTER_DTYPE_FLOAT, 1, &d, weight);
    }
    const char *loss = fresh(b, "loss"), *log_prob = fresh(b, "log_prob");
    if (b->status != OTTER_OK) return NULL;
    for (size_t i = 0; i < n_in; i++)
        if (!ins[i]) return NULL;
    otter_node *n;
    const char *outs[2] = {loss, log_prob};
    otter_status s = otter_node_create(&n, "SoftmaxCrossEntropyLoss", loss, n_in, ins, 2, outs);
    if (s == OTTER_OK) {
        s = otter_node_set_attr_string(n, "reduction", otter_reduction_name(r));
        if (s == OTTER_OK && has_ignore) s = otter_node_set_attr_int(n, "ignore_index", ignore_index);
        if (s == OTTER_OK)
            s = otter_graph_add_node(b->m->graph, n); /* frees n on failure */
        else
            otter_node_free(n);
    }
    if (s != OTTER_OK) {
        fail_from_last(b, s);
        return NULL;
    }
    return loss;
}

/* -(log(sigmoid(x)) * t * [pos_weight] + log(1 - sigmoid(x)) * (1 - t)), reduced (ORT's formulation). */
const char *otter_block_bce_with_logits_loss(otter_builder *b, const char *x, const char *target, otter_reduction r,
                                             const float *pos_weight, size_t n_pos_weight) {
    const char *t = target_like(b, target, x, false);
    const char *sig = OP(b, "Sigmoid", x);
    const char *one = otter_block_constant(b, 1.0f);
    const char *pos = OP(b, "Mul", OP(b, "Log", sig), t);
    if (pos_weight) {
        int64_t d = (int64_t)n_pos_weight;
        pos = OP(b, "Mul", pos, initializer(b, "pos_weight", OTTER_DTYPE_FLOAT, 1, &d, pos_weight));
    }
    const char *neg = OP(b, "Mul", OP(b, "Log", OP(b, "Sub", one, sig)), OP(b, "Sub", one, t));
    return reduce_loss(b, OP(b, "Neg", OP(b, "Add", pos, neg)), r);
}

/* ---- layers -------------------------------------------------------------------------------------- */

/* PyTorch's default: kaiming_uniform(a = sqrt(5)) gives bound 1/sqrt(fan_in), the bias the same. */
static const char *uniform_param(otter_builder *b, const char *layer, const char *what, int rank, const int64_t *dims,
                                 double fan_in) {
    if (b->status != OTTER_OK) return NULL;
    int64_t count = 1;
    for (int i = 0; i < rank; i++) count *= dims[i];
    float *v = ot_calloc((size_t)count, sizeof *v);
    if (!v) {
        fail(b, OTTER_ERR_NOMEM, "out of memory");
        return NULL;
    }
    double bound = 1.0 / sqrt(fan_in);
    for (int64_t i = 0; i < count; i++) v[i] = (float)((2.0 * ot_rng_uniform(&b->rng) - 1.0) * bound);
    char *base = ot_sprintf("%s.%s", layer, what);
    const char *name = base ? initializer(b, base, OTTER_DTYPE_FLOAT, rank, dims, v) : NULL;
    if (!base) fail(b, OTTER_ERR_NOMEM, "out of memory");
    ot_free(base);
    ot_free(v);
    return name;
}

const char *otter_block_linear(otter_builder *b, const char *name, const char *x, int64_t in, int64_t out) {
    int64_t wd[2] = {out, in}, bd[1] = {out};
    const char *w = uniform_param(b, name, "weight", 2, wd, (double)in);
    const char *bias = uniform_param(b, name, "bias", 1, bd, (double)in);
    char *base = ot_sprintf("%s_out", name);
    const char *y = base ? fresh(b, base) : NULL;
    ot_free(base);
    otter_node *n = emit(b, "Gemm", 3, (const char *[]){x, w, bias}, y);
    set_int(b, n, "transB", 1);
    return n ? y : NULL;
}

const char *otter_block_conv2d(otter_builder *b, const char *name, const char *x, int64_t in_ch, int64_t out_ch,
                               int64_t kernel, int64_t stride, int64_t pad) {
    int64_t wd[4] = {out_ch, in_ch, kernel, kernel}, bd[1] = {out_ch};
    double fan_in = (double)(in_ch * kernel * kernel);
    const char *w = uniform_param(b, name, "weight", 4, wd, fan_in);
    const char *bias = uniform_param(b, name, "bias", 1, bd, fan_in);
    char *base = ot_sprintf("%s_out", name);
    const char *y = base ? fresh(b, base) : NULL;
    ot_free(base);
    otter_node *n = emit(b, "Conv", 3, (const char *[]){x, w, bias}, y);
    int64_t k[2] = {kernel, kernel}, s[2] = {stride, stride}, p[4] = {pad, pad, pad, pad};
    if (n && (otter_node_set_attr_ints(n, "kernel_shape", 2, k) != OTTER_OK ||
              otter_node_set_attr_ints(n, "strides", 2, s) != OTTER_OK ||
              otter_node_set_attr_ints(n, "pads", 4, p) != OTTER_OK))
        fail_from_last(b, OTTER_ERR_NOMEM);
    return n ? y : NULL;
}

const char *otter_block_maxpool2d(otter_builder *b, const char *x, int64_t kernel, int64_t stride) {
    const char *y = fresh(b, "MaxPool");
    otter_node *n = emit(b, "MaxPool", 1, &x, y);
    int64_t k[2] = {kernel, kernel}, s[2] = {stride, stride};
    if (n && (otter_node_set_attr_ints(n, "kernel_shape", 2, k) != OTTER_OK ||
              otter_node_set_attr_ints(n, "strides", 2, s) != OTTER_OK))
        fail_from_last(b, OTTER_ERR_NOMEM);
    return n ? y : NULL;
}

/* ---- the seeds' models ---------------------------------------------------------------------------- */

typedef const char *(*body_fn)(otter_builder *b, const char *x);

static otter_status build_model(otter_model **out, const char *name, uint64_t seed, int rank, const int64_t *dims,
                                body_fn body) {
    *out = NULL;
    otter_model *m;
    OT_TRY(otter_model_create(&m, name, 14));
    otter_builder *b;
    otter_status s = otter_builder_create(&b, m, seed);
    if (s != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    otter_block_output(b, body(b, otter_block_input(b, "input", OTTER_DTYPE_FLOAT, rank, dims)), "output");
    if ((s = otter_builder_finish(b)) != OTTER_OK) {
        otter_model_free(m);
        return s;
    }
    *out = m;
    return OTTER_OK;
}

static const char *mnist_body(otter_builder *b, const char *x) {
    const char *h = otter_block_relu(b, otter_block_linear(b, "fc1", x, 784, 200));
    h = otter_block_relu(b, otter_block_linear(b, "fc2", h, 200, 200));
    return otter_block_linear(b, "fc3", h, 200, 10);
}

static const char *cifar_body(otter_builder *b, const char *x) {
    static const char *names[3] = {"conv1", "conv2", "conv3"};
    int64_t ch[4] = {3, 32, 64, 128};
    for (int i = 0; i < 3; i++)
        x = otter_block_maxpool2d(b, otter_block_relu(b, otter_block_conv2d(b, names[i], x, ch[i], ch[i + 1], 3, 1, 1)),
                                  2, 2);
    const char *h = otter_block_relu(b, otter_block_linear(b, "fc1", otter_block_flatten(b, x), 2048, 512));
    return otter_block_linear(b, "fc2", h, 512, 10);
}

otter_status otter_model_mnist_dnn(otter_model **out, uint64_t seed) {
    int64_t dims[2] = {-1, 784};
    return build_model(out, "mnist_dnn", seed, 2, dims, mnist_body);
}

otter_status otter_model_cifar10_cnn(otter_model **out, uint64_t seed) {
    int64_t dims[4] = {-1, 3, 32, 32};
    return build_model(out, "cifar10_cnn", seed, 4, dims, cifar_body);
}
