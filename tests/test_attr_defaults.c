/* Kernels read attribute defaults from the operator schemas (runtime/ops/kernel_ctx.c):
 *   - for a set of operators, a node with an attribute omitted gives exactly the output of the same
 *     node with the attribute set to the default the schema table gives at that opset, across opsets
 *     where ONNX changed it (Softmax / LogSoftmax / Hardmax axis: 1 before opset 13, -1 from 13);
 *     where the two opsets' defaults differ, setting the other opset's default must change the output
 *     (so the comparison can tell a wrong default from a right one); Selu-1's alpha and gamma (1.6732,
 *     1.0507) differ from Selu-6's;
 *   - a required attribute left out is an error naming the node and the attribute;
 *   - MaxUnpool's output shape from the kernel equals shape inference's and ot_window_transpose_axis's. */
#include <string.h>

#include "check/schema.h"
#include "ops/shape_math.h"
#include "otter/infer.h"
#include "otter/ir.h"
#include "otter/runtime.h"
#include "testutil.h"

#define NODE_NAME "the_node"

/* An attribute to set on the node: from a schema entry (its default) or an explicit int. */
typedef struct set_attr {
    const ot_schema_attr *def; /* set to this schema attribute's default */
    const char *name;          /* else: this INT attribute ... */
    int64_t i;                 /* ... with this value */
} set_attr;

static otter_status set_default(otter_node *n, const ot_schema_attr *a) {
    switch ((otter_attr_type)a->type) {
    case OTTER_ATTR_INT:
        return otter_node_set_attr_int(n, a->name, a->def_i);
    case OTTER_ATTR_FLOAT:
        return otter_node_set_attr_float(n, a->name, a->def_f);
    case OTTER_ATTR_STRING:
        return otter_node_set_attr_string(n, a->name, a->def_s);
    case OTTER_ATTR_INTS:
        return otter_node_set_attr_ints(n, a->name, a->def_count, a->def_list);
    default:
        return OTTER_ERR_UNSUPPORTED;
    }
}

/* Run one node of op at opset on float inputs in[0..n_in) with attributes fixed[] and extra (if any);
 * *out gets output 0. */
static otter_status run_node(const char *op, int opset, size_t n_in, otter_tensor *const *in, const set_attr *fixed,
                             size_t n_fixed, const set_attr *extra, otter_tensor **out) {
    static const char *const IN[] = {"i0", "i1", "i2", "i3", "i4"};
    static const char *const OUT[] = {"o0"};
    *out = NULL;
    otter_model *m = NULL;
    otter_status s = otter_model_create(&m, "g", opset);
    if (s) return s;
    otter_node *n = NULL;
    s = otter_node_create(&n, op, NODE_NAME, n_in, IN, 1, OUT);
    for (size_t k = 0; !s && k < n_fixed + (extra != NULL); k++) {
        const set_attr *a = k < n_fixed ? &fixed[k] : extra;
        s = a->def ? set_default(n, a->def) : otter_node_set_attr_int(n, a->name, a->i);
    }
    if (!s)
        s = otter_graph_add_node(m->graph, n);
    else
        otter_node_free(n);
    for (size_t k = 0; !s && k < n_in; k++)
        s = otter_graph_add_input(m->graph, IN[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL);
    if (!s) s = otter_graph_add_output(m->graph, OUT[0], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
    otter_session *sess = NULL;
    otter_session_options o = {.n_threads = 1};
    if (!s) s = otter_session_create(&sess, m, &o);
    if (!s) s = otter_session_run(sess, n_in, IN, (const otter_tensor *const *)in, 1, OUT, out);
    otter_session_free(sess);
    otter_model_free(m);
    return s;
}

static bool same_tensor(const otter_tensor *a, const otter_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank) return false;
    if (memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) != 0) return false;
    return memcmp(a->data, b->data, otter_tensor_nbytes(a)) == 0;
}

static otter_tensor *ramp(int rank, const int64_t *dims, unsigned seed) {
    otter_tensor *x = NULL;
    if (otter_tensor_create(&x, NULL, OTTER_DTYPE_FLOAT, rank, dims) != OTTER_OK) return NULL;
    float *p = x->data;
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 8) & 0xffff) / 65535.0f - 0.5f;
    }
    return x;
}

static otter_tensor *filled(int rank, const int64_t *dims, float v) {
    otter_tensor *x = ramp(rank, dims, 1);
    for (int64_t i = 0; x && i < otter_tensor_numel(x); i++) ((float *)x->data)[i] = v;
    return x;
}

typedef struct defaults_case {
    const char *op;
    int opset;
    const char *attr;  /* the attribute under test, omitted vs set to the schema's default */
    set_attr fixed[2]; /* attributes every run sets (required ones) */
    size_t n_fixed;
} defaults_case;

/* The attribute omitted and set to its schema default give the same output. Returns the schema
 * attribute (NULL when the table lacks it: a failed check). */
static const ot_schema_attr *check_default(const defaults_case *c, size_t n_in, otter_tensor *const *in) {
    const ot_schema_attr *a = ot_schema_attr_find(ot_schema_find("", c->op, c->opset), c->attr);
    CHECK(a && a->has_default);
    if (!a || !a->has_default) return NULL;
    otter_tensor *omitted = NULL, *given = NULL;
    set_attr def = {.def = a};
    CHECK_OK(run_node(c->op, c->opset, n_in, in, c->fixed, c->n_fixed, NULL, &omitted));
    CHECK_OK(run_node(c->op, c->opset, n_in, in, c->fixed, c->n_fixed, &def, &given));
    bool same = same_tensor(omitted, given);
    CHECK(same);
    if (!same) fprintf(stderr, "  %s-%d: '%s' omitted differs from the schema default\n", c->op, c->opset, c->attr);
    otter_tensor_free(omitted);
    otter_tensor_free(given);
    return a;
}

/* Softmax-like axis: at opset 11 (default 1) and 13 (default -1) the omitted axis equals the schema's,
 * and the other opset's default gives another output on a 3-D input. */
static void check_axis_change(const char *op) {
    int64_t dims[3] = {2, 3, 4};
    otter_tensor *x = ramp(3, dims, 7);
    const int opsets[2] = {11, 13};
    for (int k = 0; k < 2; k++) {
        defaults_case c = {.op = op, .opset = opsets[k], .attr = "axis"};
        const ot_schema_attr *a = check_default(&c, 1, &x);
        const ot_schema_attr *other = ot_schema_attr_find(ot_schema_find("", op, opsets[1 - k]), "axis");
        CHECK(a && other && a->def_i != other->def_i);
        if (!a || !other) continue;
        otter_tensor *omitted = NULL, *wrong = NULL;
        set_attr w = {.name = "axis", .i = other->def_i};
        CHECK_OK(run_node(op, opsets[k], 1, &x, NULL, 0, NULL, &omitted));
        CHECK_OK(run_node(op, opsets[k], 1, &x, NULL, 0, &w, &wrong));
        CHECK(omitted && wrong && !same_tensor(omitted, wrong));
        otter_tensor_free(omitted);
        otter_tensor_free(wrong);
    }
    otter_tensor_free(x);
}

static void check_defaults(void) {
    int64_t d3[3] = {2, 3, 4}, d4[4] = {1, 4, 5, 5}, d2[2] = {3, 4}, c1[1] = {4}, i1[1] = {2};
    otter_tensor *x3 = ramp(3, d3, 3), *x4 = ramp(4, d4, 5), *a2 = ramp(2, d2, 9), *b2 = ramp(2, d2, 11);
    otter_tensor *scale = ramp(1, c1, 13), *bias = ramp(1, c1, 17), *mean = ramp(1, c1, 19), *var = filled(1, c1, 0.5f);
    otter_tensor *bt = NULL, *idx = NULL, *c3 = ramp(1, (int64_t[]){3}, 31);
    otter_tensor_create(&bt, NULL, OTTER_DTYPE_FLOAT, 2, (int64_t[]){4, 3});
    memcpy(bt->data, b2->data, otter_tensor_nbytes(b2));
    otter_tensor_create(&idx, NULL, OTTER_DTYPE_INT64, 1, i1);
    ((int64_t *)idx->data)[0] = 1, ((int64_t *)idx->data)[1] = 0;
    const set_attr lrn_size = {.name = "size", .i = 3}, k2[1] = {{.name = "blocksize", .i = 2}};
    struct {
        defaults_case c;
        size_t n_in;
        otter_tensor *in[5];
    } cases[] = {
        {{"ArgMax", 13, "axis"}, 1, {x3}},
        {{"ArgMax", 13, "keepdims"}, 1, {x3}},
        {{"ArgMax", 11, "axis"}, 1, {x3}},
        {{"Flatten", 13, "axis"}, 1, {x3}},
        {{"Gather", 13, "axis"}, 2, {x3, idx}},
        {{"LRN", 13, "alpha", {lrn_size}, 1}, 1, {x4}},
        {{"LRN", 13, "beta", {lrn_size}, 1}, 1, {x4}},
        {{"LRN", 13, "bias", {lrn_size}, 1}, 1, {x4}},
        {{"Gemm", 13, "alpha"}, 3, {a2, bt, c3}},
        {{"Gemm", 13, "beta"}, 3, {a2, bt, c3}},
        {{"Gemm", 13, "transB"}, 3, {a2, bt, c3}},
        {{"BatchNormalization", 9, "epsilon"}, 5, {x4, scale, bias, mean, var}},
        {{"BatchNormalization", 15, "epsilon"}, 5, {x4, scale, bias, mean, var}},
        {{"InstanceNormalization", 6, "epsilon"}, 3, {x4, scale, bias}},
        {{"LayerNormalization", 17, "axis"}, 2, {x3, bias}},
        {{"LayerNormalization", 17, "epsilon"}, 2, {x3, bias}},
        {{"LpNormalization", 1, "p"}, 1, {x3}},
        {{"LpNormalization", 1, "axis"}, 1, {x3}},
        {{"DepthToSpace", 13, "mode", {k2[0]}, 1}, 1, {x4}},
        {{"Conv", 11, "group"}, 2, {x4, x4}},
        {{"Conv", 11, "auto_pad"}, 2, {x4, x4}},
        {{"Selu", 1, "alpha"}, 1, {x3}},
        {{"Selu", 1, "gamma"}, 1, {x3}},
        {{"Selu", 6, "alpha"}, 1, {x3}},
        {{"Selu", 6, "gamma"}, 1, {x3}},
        {{"Clip", 6, "min"}, 1, {x3}},
        {{"Clip", 6, "max"}, 1, {x3}},
        {{"HardSigmoid", 6, "alpha"}, 1, {x3}},
        {{"HardSigmoid", 6, "beta"}, 1, {x3}},
        {{"LeakyRelu", 16, "alpha"}, 1, {x3}},
        {{"Elu", 6, "alpha"}, 1, {x3}},
        {{"Shrink", 9, "lambd"}, 1, {x3}},
        {{"Shrink", 9, "bias"}, 1, {x3}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) check_default(&cases[k].c, cases[k].n_in, cases[k].in);
    /* Pooling: the ceil_mode / count_include_pad / storage_order defaults */
    int64_t ks[2] = {2, 2}, st[2] = {2, 2};
    const char *pool_attrs[][2] = {{"MaxPool", "ceil_mode"},
                                   {"MaxPool", "storage_order"},
                                   {"AveragePool", "ceil_mode"},
                                   {"AveragePool", "count_include_pad"}};
    for (size_t k = 0; k < 4; k++) {
        /* kernel_shape and strides set as the "defaults" of stand-in schema entries */
        ot_schema_attr kshape = {.name = "kernel_shape", .type = OTTER_ATTR_INTS, .def_list = ks, .def_count = 2};
        ot_schema_attr strides = {.name = "strides", .type = OTTER_ATTR_INTS, .def_list = st, .def_count = 2};
        defaults_case c = {pool_attrs[k][0], 12, pool_attrs[k][1], {{.def = &kshape}, {.def = &strides}}, 2};
        check_default(&c, 1, &x4);
    }
    otter_tensor *all[] = {x3, x4, a2, b2, scale, bias, mean, var, bt, idx, c3};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) otter_tensor_free(all[k]);
}

/* A required attribute left out: INVALID, naming the node and the attribute. */
static void check_required(void) {
    int64_t d4[4] = {1, 4, 3, 3};
    otter_tensor *x = ramp(4, d4, 23), *y = NULL;
    const char *cases[][2] = {{"LRN", "size"}, {"SpaceToDepth", "blocksize"}};
    for (size_t k = 0; k < 2; k++) {
        CHECK_STATUS(run_node(cases[k][0], 13, 1, &x, NULL, 0, NULL, &y), OTTER_ERR_INVALID);
        const char *msg = otter_last_error();
        CHECK(strstr(msg, NODE_NAME) != NULL);
        CHECK(strstr(msg, cases[k][1]) != NULL);
        otter_tensor_free(y);
        y = NULL;
    }
    otter_tensor_free(x);
}

/* MaxUnpool's output shape: the kernel's, shape inference's and ot_window_transpose_axis's agree. */
static void check_maxunpool_shape(void) {
    const int64_t xd[4] = {1, 1, 3, 2}, kshape[2] = {3, 2}, strides[2] = {2, 3}, pads[4] = {1, 0, 0, 1};
    otter_tensor *x = ramp(4, xd, 29), *ind = NULL, *y = NULL;
    otter_tensor_create(&ind, NULL, OTTER_DTYPE_INT64, 4, xd);
    for (int64_t i = 0; i < 6; i++) ((int64_t *)ind->data)[i] = i;
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 11));
    otter_node *n = NULL;
    const char *in[2] = {"x", "i"}, *out[1] = {"y"};
    CHECK_OK(otter_node_create(&n, "MaxUnpool", NODE_NAME, 2, in, 1, out));
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, kshape));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, strides));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 4, xd, NULL));
    CHECK_OK(otter_graph_add_input(m->graph, "i", OTTER_DTYPE_INT64, 4, xd, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 1};
    CHECK_OK(otter_session_create(&s, m, &o));
    const otter_tensor *bound[2] = {x, ind};
    if (s) CHECK_OK(otter_session_run(s, 2, in, bound, 1, out, &y));
    otter_session_free(s);
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    const otter_type *v = otter_graph_value_type(m->graph, "y");
    CHECK(y && v && v->rank == 4);
    for (int i = 0; y && v && v->rank == 4 && i < 2; i++) {
        int64_t pb = pads[i], pe = pads[2 + i], want = -1;
        CHECK(ot_window_transpose_axis(xd[2 + i], kshape[i], strides[i], 1, 0, OT_AUTO_PAD_NOTSET, -1, true, &pb, &pe,
                                       &want) == OT_WINDOW_OK);
        CHECK(y->dims[2 + i] == want);
        CHECK(v->dims[2 + i].value == want);
        printf("MaxUnpool axis %d: kernel %lld, inferred %lld, shape_math %lld\n", i, (long long)y->dims[2 + i],
               (long long)v->dims[2 + i].value, (long long)want);
    }
    otter_tensor_free(y);
    otter_tensor_free(x);
    otter_tensor_free(ind);
    otter_model_free(m);
}

int main(void) {
    check_axis_change("Softmax");
    check_axis_change("LogSoftmax");
    check_axis_change("Hardmax");
    check_defaults();
    check_required();
    check_maxunpool_shape();
    return tu_finish("test_attr_defaults");
}
