/* Shape inference unit tests: broadcasting (fixed, symbolic, unknown dims, errors), symbolic dims
 * through MatMul/Gemm/Conv/Transpose, value propagation (Shape -> Gather -> Concat -> Reshape,
 * ConstantOfShape, Range, Slice), per-opset axes (Reduce*, Squeeze), If branches, conflicts with
 * declared types, strict mode, value_info write-back, and allocation failures. */
#include <stdlib.h>
#include <string.h>

#include "otter/infer.h"
#include "testutil.h"

/* "float32[N,3,?]" / "int64(no shape)" / "(none)" */
static const char *type_str(const otter_type *t) {
    static char buf[512];
    if (!t || t->kind != OTTER_TYPE_TENSOR) return "(none)";
    size_t k = (size_t)snprintf(buf, sizeof buf, "%s", t->has_elem_type ? otter_dtype_name(t->elem_type) : "?");
    if (t->rank < 0) {
        snprintf(buf + k, sizeof buf - k, "(no shape)");
        return buf;
    }
    k += (size_t)snprintf(buf + k, sizeof buf - k, "[");
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i].value >= 0)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%lld", i ? "," : "", (long long)t->dims[i].value);
        else
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? "," : "",
                                  t->dims[i].param ? t->dims[i].param : "?");
    }
    snprintf(buf + k, sizeof buf - k, "]");
    return buf;
}

static void expect_type(const otter_model *m, const char *name, const char *want) {
    const char *got = type_str(otter_graph_value_type(m->graph, name));
    printf("  %-10s inferred %-22s expected %s\n", name, got, want);
    CHECK(strcmp(got, want) == 0);
}

/* Parse "N,3,?" into dims/params for otter_graph_add_input. */
static void add_input(otter_graph *g, const char *name, otter_dtype dt, const char *shape) {
    int64_t dims[OTTER_MAX_RANK];
    const char *params[OTTER_MAX_RANK];
    static char store[64][32];
    static int used;
    int r = 0;
    if (shape[0]) {
        const char *p = shape;
        while (*p) {
            const char *e = strchr(p, ',');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (p[0] >= '0' && p[0] <= '9') {
                dims[r] = atoll(p);
                params[r] = NULL;
            } else {
                dims[r] = -1;
                char *s = store[used++ % 64];
                snprintf(s, 32, "%.*s", (int)len, p);
                params[r] = s[0] == '?' ? NULL : s;
            }
            r++;
            p += len + (e ? 1 : 0);
        }
    }
    CHECK_OK(otter_graph_add_input(g, name, dt, r, dims, params));
}

static void add_ints(otter_graph *g, const char *name, int rank, size_t count, const int64_t *v) {
    otter_tensor *t;
    int64_t d[1] = {(int64_t)count};
    CHECK_OK(otter_tensor_from_data(&t, name, OTTER_DTYPE_INT64, rank, d, v));
    CHECK_OK(otter_graph_add_initializer(g, t));
}

static otter_model *new_model(int64_t opset) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", opset));
    return m;
}

static void test_broadcast(void) {
    printf("broadcasting:\n");
    otter_model *m = new_model(17);
    otter_graph *g = m->graph;
    add_input(g, "a", OTTER_DTYPE_FLOAT, "N,3,1");
    add_input(g, "b", OTTER_DTYPE_FLOAT, "4");
    add_input(g, "c", OTTER_DTYPE_FLOAT, "N");
    add_input(g, "d", OTTER_DTYPE_FLOAT, "M");
    add_input(g, "e", OTTER_DTYPE_FLOAT, "1");
    add_input(g, "f", OTTER_DTYPE_FLOAT, "?");
    add_input(g, "h", OTTER_DTYPE_FLOAT, "5");
    add_input(g, "s", OTTER_DTYPE_FLOAT, "");
    tu_add_node(g, "Add", "add1", "a b", "ab");
    tu_add_node(g, "Mul", "mul1", "c c", "cc");
    tu_add_node(g, "Sub", "sub1", "c d", "cd");
    tu_add_node(g, "Div", "div1", "c e", "ce");
    tu_add_node(g, "Add", "add2", "c h", "ch");
    tu_add_node(g, "Add", "add3", "f e", "fe");
    tu_add_node(g, "Pow", "pow1", "a s", "as");
    tu_add_node(g, "Max", "max1", "a b c", "abc");
    tu_add_node(g, "Greater", "gt1", "a b", "gt");
    tu_add_node(g, "Where", "where1", "gt a b", "w");
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "ab", "float32[N,3,4]");
    expect_type(m, "cc", "float32[N]");
    expect_type(m, "cd", "float32[?]");
    expect_type(m, "ce", "float32[N]");
    expect_type(m, "ch", "float32[5]");
    expect_type(m, "fe", "float32[?]");
    expect_type(m, "as", "float32[N,3,1]");
    expect_type(m, "abc", "float32[N,3,4]");
    expect_type(m, "gt", "bool[N,3,4]");
    expect_type(m, "w", "float32[N,3,4]");
    otter_model_free(m);

    /* shapes that do not broadcast: the error names the node, operator and input */
    m = new_model(17);
    g = m->graph;
    add_input(g, "a", OTTER_DTYPE_FLOAT, "2,3");
    add_input(g, "b", OTTER_DTYPE_FLOAT, "4,3");
    tu_add_node(g, "Add", "bad_add", "a b", "y");
    CHECK_STATUS(otter_model_infer_shapes(m, NULL), OTTER_ERR_INVALID);
    printf("  2x3 + 4x3: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "bad_add") && strstr(otter_last_error(), "(Add)") &&
          strstr(otter_last_error(), "'b'"));
    otter_model_free(m);

    /* mixed element types */
    m = new_model(17);
    g = m->graph;
    add_input(g, "a", OTTER_DTYPE_FLOAT, "2");
    add_input(g, "b", OTTER_DTYPE_INT64, "2");
    tu_add_node(g, "Mul", "mixed", "a b", "y");
    CHECK_STATUS(otter_model_infer_shapes(m, NULL), OTTER_ERR_INVALID);
    printf("  float * int64: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "mixed") && strstr(otter_last_error(), "int64"));
    otter_model_free(m);
}

static void test_symbolic_layers(void) {
    printf("symbolic dims through layers:\n");
    otter_model *m = new_model(14);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "batch,784");
    add_input(g, "w1", OTTER_DTYPE_FLOAT, "784,200");
    add_input(g, "w2", OTTER_DTYPE_FLOAT, "10,200");
    add_input(g, "img", OTTER_DTYPE_FLOAT, "batch,3,32,32");
    add_input(g, "k", OTTER_DTYPE_FLOAT, "32,3,3,3");
    add_input(g, "bx", OTTER_DTYPE_FLOAT, "2,batch,5,6");
    add_input(g, "by", OTTER_DTYPE_FLOAT, "6,7");
    tu_add_node(g, "MatMul", "mm", "x w1", "h");
    tu_add_node(g, "Relu", "relu", "h", "hr");
    otter_node *n = tu_add_node(g, "Gemm", "gemm", "hr w2", "logits");
    CHECK_OK(otter_node_set_attr_int(n, "transB", 1));
    tu_add_node(g, "Softmax", "sm", "logits", "p");
    n = tu_add_node(g, "Conv", "conv", "img k", "c");
    int64_t pads[4] = {1, 1, 1, 1};
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    n = tu_add_node(g, "MaxPool", "pool", "c", "pl");
    int64_t ks[2] = {2, 2};
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, ks));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, ks));
    tu_add_node(g, "Flatten", "flat", "pl", "fl");
    n = tu_add_node(g, "Transpose", "tr", "img", "t");
    int64_t perm[4] = {0, 2, 3, 1};
    CHECK_OK(otter_node_set_attr_ints(n, "perm", 4, perm));
    tu_add_node(g, "MatMul", "bmm", "bx by", "bm");
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "h", "float32[batch,200]");
    expect_type(m, "logits", "float32[batch,10]");
    expect_type(m, "p", "float32[batch,10]");
    expect_type(m, "c", "float32[batch,32,32,32]");
    expect_type(m, "pl", "float32[batch,32,16,16]");
    expect_type(m, "fl", "float32[batch,8192]");
    expect_type(m, "t", "float32[batch,32,32,3]");
    expect_type(m, "bm", "float32[2,batch,5,7]");
    otter_model_free(m);
}

static void test_value_propagation(void) {
    printf("value propagation:\n");
    otter_model *m = new_model(13);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "N,3,4,5");
    int64_t zero = 0, minus1 = -1, axes0 = 0, s1 = 1, e3 = 3;
    otter_tensor *t;
    CHECK_OK(otter_tensor_from_data(&t, "i0", OTTER_DTYPE_INT64, 0, NULL, &zero));
    CHECK_OK(otter_graph_add_initializer(g, t));
    add_ints(g, "neg1", 1, 1, &minus1);
    add_ints(g, "ax0", 1, 1, &axes0);
    add_ints(g, "st", 1, 1, &s1);
    add_ints(g, "en", 1, 1, &e3);
    /* Shape -> Gather -> Unsqueeze -> Concat(-1) -> Reshape: [N, 60] */
    tu_add_node(g, "Shape", "shape", "x", "shp");
    tu_add_node(g, "Gather", "gather", "shp i0", "n0");
    tu_add_node(g, "Unsqueeze", "unsq", "n0 ax0", "n0v");
    otter_node *n = tu_add_node(g, "Concat", "cat", "n0v neg1", "newshape");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 0));
    tu_add_node(g, "Reshape", "reshape", "x newshape", "r");
    /* Slice of the shape [3,4] * 2 -> ConstantOfShape: [6,8] */
    tu_add_node(g, "Slice", "slice", "shp st en", "mid");
    int64_t two = 2;
    add_ints(g, "two", 1, 1, &two);
    tu_add_node(g, "Mul", "mul", "mid two", "mid2");
    tu_add_node(g, "ConstantOfShape", "cos", "mid2", "zeros");
    /* Expand x's batch: Concat(shape[0], [3,4,5]) through Expand */
    tu_add_node(g, "Expand", "expand", "x shp", "ex");
    /* Range over a constant: 0..10 step 3 -> 4 elements */
    int64_t r0 = 0, r1 = 10, r2 = 3;
    CHECK_OK(otter_tensor_from_data(&t, "ra", OTTER_DTYPE_INT64, 0, NULL, &r0));
    CHECK_OK(otter_graph_add_initializer(g, t));
    CHECK_OK(otter_tensor_from_data(&t, "rb", OTTER_DTYPE_INT64, 0, NULL, &r1));
    CHECK_OK(otter_graph_add_initializer(g, t));
    CHECK_OK(otter_tensor_from_data(&t, "rc", OTTER_DTYPE_INT64, 0, NULL, &r2));
    CHECK_OK(otter_graph_add_initializer(g, t));
    tu_add_node(g, "Range", "range", "ra rb rc", "rng");
    tu_add_node(g, "Size", "size", "r", "sz");
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "shp", "int64[4]");
    expect_type(m, "n0", "int64[]");
    expect_type(m, "newshape", "int64[2]");
    expect_type(m, "r", "float32[N,60]");
    expect_type(m, "mid", "int64[2]");
    expect_type(m, "zeros", "float32[6,8]");
    expect_type(m, "ex", "float32[N,3,4,5]");
    expect_type(m, "rng", "int64[4]");
    expect_type(m, "sz", "int64[]");
    otter_model_free(m);

    /* with no_data_prop the Reshape only knows its rank (as onnx without data_prop) */
    m = new_model(13);
    g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "N,3,4,5");
    add_ints(g, "neg1", 1, 1, &minus1);
    tu_add_node(g, "Shape", "shape", "x", "shp");
    CHECK_OK(otter_tensor_from_data(&t, "i0", OTTER_DTYPE_INT64, 1, (int64_t[]){1}, &zero));
    CHECK_OK(otter_graph_add_initializer(g, t));
    tu_add_node(g, "Gather", "gather", "shp i0", "n0v");
    n = tu_add_node(g, "Concat", "cat", "n0v neg1", "newshape");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 0));
    tu_add_node(g, "Reshape", "reshape", "x newshape", "r");
    otter_infer_options o = {0};
    o.no_data_prop = true;
    otter_model *m2 = NULL;
    CHECK_OK(otter_model_clone(&m2, m));
    CHECK_OK(otter_model_infer_shapes(m2, &o));
    expect_type(m2, "r", "float32[?,?]");
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "r", "float32[N,60]");
    otter_model_free(m2);
    otter_model_free(m);
}

static void test_opset_axes(void) {
    printf("axes as attribute or input, per opset:\n");
    int64_t ax1 = 1;
    /* ReduceMean: axes attribute until opset 17, input from 18; ReduceSum: input from 13 */
    for (int opset = 13; opset <= 18; opset += 5) {
        otter_model *m = new_model(opset);
        otter_graph *g = m->graph;
        add_input(g, "x", OTTER_DTYPE_FLOAT, "B,7,9");
        add_ints(g, "axes", 1, 1, &ax1);
        otter_node *n = tu_add_node(g, "ReduceMean", "rm", opset >= 18 ? "x axes" : "x", "mean");
        if (opset < 18) CHECK_OK(otter_node_set_attr_ints(n, "axes", 1, &ax1));
        n = tu_add_node(g, "ReduceSum", "rs", "x axes", "sum");
        CHECK_OK(otter_node_set_attr_int(n, "keepdims", 0));
        tu_add_node(g, "Unsqueeze", "unsq", "sum axes", "u");
        tu_add_node(g, "Squeeze", "sq", "u axes", "sq");
        /* Split: sizes as input at 13 ([3,3,1]), num_outputs at 18 (uneven: 3,3,1) */
        int64_t sizes[3] = {3, 3, 1};
        add_ints(g, "sizes", 1, 3, sizes);
        otter_node *sp = tu_add_node(g, "Split", "split", opset >= 18 ? "x" : "x sizes", "p0 p1 p2");
        CHECK_OK(otter_node_set_attr_int(sp, "axis", 1));
        if (opset >= 18) CHECK_OK(otter_node_set_attr_int(sp, "num_outputs", 3));
        CHECK_OK(otter_model_infer_shapes(m, NULL));
        printf(" opset %d\n", opset);
        expect_type(m, "mean", "float32[B,1,9]");
        expect_type(m, "sum", "float32[B,9]");
        expect_type(m, "u", "float32[B,1,9]");
        expect_type(m, "sq", "float32[B,9]");
        expect_type(m, "p2", "float32[B,1,9]");
        otter_model_free(m);
    }
    /* Split-13 without sizes splits evenly; opset 11 Squeeze with the axes attribute */
    otter_model *m = new_model(11);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "1,6");
    otter_node *n = tu_add_node(g, "Squeeze", "sq", "x", "y");
    CHECK_OK(otter_node_set_attr_ints(n, "axes", 1, (int64_t[]){0}));
    n = tu_add_node(g, "Split", "split", "y", "a b");
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "y", "float32[6]");
    expect_type(m, "b", "float32[3]");
    otter_model_free(m);
    /* squeezing a dimension that is not 1 is an error naming the node */
    m = new_model(11);
    g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "2,6");
    n = tu_add_node(g, "Squeeze", "bad_squeeze", "x", "y");
    CHECK_OK(otter_node_set_attr_ints(n, "axes", 1, (int64_t[]){1}));
    CHECK_STATUS(otter_model_infer_shapes(m, NULL), OTTER_ERR_INVALID);
    printf("  squeeze axis of size 6: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "bad_squeeze") != NULL);
    otter_model_free(m);
}

static void test_declared_and_strict(void) {
    printf("declared types, strict mode, value_info:\n");
    otter_model *m = new_model(17);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "N,4");
    tu_add_node(g, "Relu", "relu", "x", "h");
    tu_add_node(g, "MyCustomOp", "custom", "h", "c");
    tu_add_node(g, "Sigmoid", "sig", "h", "y");
    int64_t yd[2] = {-1, -1};
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 2, yd, NULL));
    otter_infer_stats st;
    CHECK_OK(otter_model_infer_shapes_ex(m, NULL, &st));
    printf("  stats: %zu nodes, %zu unknown ops, %zu typed, %zu shaped\n", st.n_nodes, st.n_unknown_ops,
           st.n_outputs_typed, st.n_outputs_shaped);
    CHECK(st.n_nodes == 3 && st.n_unknown_ops == 1 && st.n_outputs_typed == 2 && st.n_outputs_shaped == 2);
    expect_type(m, "h", "float32[N,4]");
    expect_type(m, "c", "(none)");
    expect_type(m, "y", "float32[N,4]"); /* the declared output's unknown dims are filled in */
    CHECK(otter_graph_find_value_info(g, "h") >= 0 && otter_graph_find_value_info(g, "y") < 0);
    /* running again changes nothing (idempotent) */
    size_t nvi = g->n_value_info;
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    CHECK(g->n_value_info == nvi);
    otter_infer_options strict = {0};
    strict.strict = true;
    CHECK_STATUS(otter_model_infer_shapes(m, &strict), OTTER_ERR_UNSUPPORTED);
    printf("  strict: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "custom") && strstr(otter_last_error(), "MyCustomOp"));
    otter_model_free(m);

    /* a declared output that contradicts the inference */
    m = new_model(17);
    g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "2,4");
    tu_add_node(g, "Relu", "relu", "x", "y");
    int64_t bad[2] = {2, 5};
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 2, bad, NULL));
    CHECK_STATUS(otter_model_infer_shapes(m, NULL), OTTER_ERR_INVALID);
    printf("  declared [2,5] vs inferred [2,4]: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'relu'") && strstr(otter_last_error(), "'y'") &&
          strstr(otter_last_error(), "differ"));
    CHECK_OK(otter_graph_change_output(g, "y", OTTER_DTYPE_INT64, 2, (int64_t[]){2, 4}, NULL));
    CHECK_STATUS(otter_model_infer_shapes(m, NULL), OTTER_ERR_INVALID);
    printf("  declared int64 vs inferred float: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "element type") != NULL);
    otter_model_free(m);

    /* a declared value_info type feeds nodes after an unknown op */
    m = new_model(17);
    g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "3");
    tu_add_node(g, "Opaque", "op", "x", "h");
    tu_add_node(g, "Neg", "neg", "h", "y");
    otter_type vt;
    memset(&vt, 0, sizeof vt);
    vt.rank = -1;
    CHECK_OK(otter_type_set_tensor(&vt, OTTER_DTYPE_FLOAT, 2, (int64_t[]){3, 3}, NULL));
    CHECK_OK(otter_graph_add_value_info(g, "h", &vt));
    otter_type_clear(&vt);
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "y", "float32[3,3]");
    otter_model_free(m);
}

static otter_graph *branch(const char *name, const char *shape) {
    otter_graph *b = NULL;
    CHECK_OK(otter_graph_create(&b, name));
    otter_node *n = tu_add_node(b, "Identity", NULL, "outer", "o");
    (void)n;
    (void)shape;
    CHECK_OK(otter_graph_add_output(b, "o", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    b->outputs[0].has_type = false;
    otter_type_clear(&b->outputs[0].type);
    return b;
}

static void test_if(void) {
    printf("If branches:\n");
    otter_model *m = new_model(17);
    otter_graph *g = m->graph;
    add_input(g, "cond", OTTER_DTYPE_BOOL, "");
    add_input(g, "outer", OTTER_DTYPE_FLOAT, "N,3");
    otter_node *n = tu_add_node(g, "If", "if", "cond", "res");
    CHECK_OK(otter_node_set_attr_graph(n, "then_branch", branch("then", "")));
    /* else: Transpose gives [3,N]: the union keeps the rank, drops unequal dims */
    otter_graph *e = NULL;
    CHECK_OK(otter_graph_create(&e, "else"));
    tu_add_node(e, "Transpose", "t", "outer", "o");
    CHECK_OK(otter_graph_add_output(e, "o", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    e->outputs[0].has_type = false;
    otter_type_clear(&e->outputs[0].type);
    CHECK_OK(otter_node_set_attr_graph(n, "else_branch", e));
    tu_add_node(g, "If", "if2", "cond", "res2");
    n = g->nodes[1];
    CHECK_OK(otter_node_set_attr_graph(n, "then_branch", branch("then2", "")));
    CHECK_OK(otter_node_set_attr_graph(n, "else_branch", branch("else2", "")));
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "res", "float32[?,?]");
    expect_type(m, "res2", "float32[N,3]");
    /* the subgraph got its own value_info / output types */
    const otter_attr *a = otter_node_attr(g->nodes[0], "else_branch");
    printf("  else branch output: %s\n", type_str(&a->g->outputs[0].type));
    CHECK(strcmp(type_str(&a->g->outputs[0].type), "float32[3,N]") == 0);
    otter_model_free(m);
}

/* Allocation failure at every step: a clean error, never a crash (leaks show under ASan). */
static long alloc_budget;
static void *fail_malloc(size_t n, void *u) {
    (void)u;
    return alloc_budget-- > 0 ? malloc(n) : NULL;
}
static void *fail_realloc(void *p, size_t n, void *u) {
    (void)u;
    return alloc_budget-- > 0 ? realloc(p, n) : NULL;
}
static void fail_free(void *p, void *u) {
    (void)u;
    free(p);
}

static void test_alloc_failures(void) {
    otter_model *m = new_model(13);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "N,3,4,5");
    int64_t minus1 = -1, zero = 0;
    add_ints(g, "neg1", 1, 1, &minus1);
    add_ints(g, "i0", 1, 1, &zero);
    tu_add_node(g, "Shape", "shape", "x", "shp");
    tu_add_node(g, "Gather", "gather", "shp i0", "n0");
    otter_node *n = tu_add_node(g, "Concat", "cat", "n0 neg1", "ns");
    CHECK_OK(otter_node_set_attr_int(n, "axis", 0));
    tu_add_node(g, "Reshape", "reshape", "x ns", "r");
    tu_add_node(g, "Relu", "relu", "r", "y");
    int ok = 0, nomem = 0, other = 0;
    otter_allocator a = {fail_malloc, fail_realloc, fail_free, NULL};
    for (long k = 0; k < 400; k++) {
        otter_model *c = NULL;
        CHECK_OK(otter_model_clone(&c, m));
        alloc_budget = k;
        otter_set_allocator(&a);
        otter_status s = otter_model_infer_shapes(c, NULL);
        otter_set_allocator(NULL);
        if (s == OTTER_OK)
            ok++;
        else if (s == OTTER_ERR_NOMEM)
            nomem++;
        else
            other++;
        otter_model_free(c);
    }
    printf("allocation failures: %d runs failed cleanly with NOMEM, %d succeeded, %d other errors\n", nomem, ok, other);
    CHECK(nomem > 0 && ok > 0 && other == 0);
    otter_model_free(m);
}

/* The narrow element types: QuantizeLinear's output_dtype (opset 21) and zero point type,
 * DequantizeLinear's output_dtype (opset 23), Cast and BitCast to them. */
static void test_narrow_types(void) {
    printf("narrow element types:\n");
    otter_model *m = new_model(25);
    otter_graph *g = m->graph;
    add_input(g, "x", OTTER_DTYPE_FLOAT, "N,4");
    add_input(g, "s", OTTER_DTYPE_FLOAT, "");
    add_input(g, "z4", OTTER_DTYPE_INT4, "");
    add_input(g, "q8", OTTER_DTYPE_FLOAT8E4M3FN, "N,4");
    add_input(g, "sh", OTTER_DTYPE_FLOAT16, "");
    otter_node *q = tu_add_node(g, "QuantizeLinear", "q_dtype", "x s", "y16");
    CHECK_OK(otter_node_set_attr_int(q, "output_dtype", OTTER_DTYPE_INT16));
    tu_add_node(g, "QuantizeLinear", "q_zp", "x s z4", "y4");
    otter_node *d = tu_add_node(g, "DequantizeLinear", "dq_dtype", "q8 s", "dbf");
    CHECK_OK(otter_node_set_attr_int(d, "output_dtype", OTTER_DTYPE_BFLOAT16));
    tu_add_node(g, "DequantizeLinear", "dq_scale", "q8 sh", "dh");
    otter_node *c = tu_add_node(g, "Cast", "cast", "x", "c2");
    CHECK_OK(otter_node_set_attr_int(c, "to", OTTER_DTYPE_FLOAT4E2M1));
    otter_node *b = tu_add_node(g, "BitCast", "bitcast", "q8", "u8");
    CHECK_OK(otter_node_set_attr_int(b, "to", OTTER_DTYPE_UINT8));
    CHECK_OK(otter_model_set_opset(m, "", 26));
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "y16", "int16[N,4]");
    expect_type(m, "y4", "int4[N,4]");
    expect_type(m, "dbf", "bfloat16[N,4]");
    expect_type(m, "dh", "float16[N,4]");
    expect_type(m, "c2", "float4e2m1[N,4]");
    expect_type(m, "u8", "uint8[N,4]");
    otter_model_free(m);
}

/* com.microsoft FusedMatMul: transBatchA / transBatchB move a rank >= 3 operand's first axis to just
 * before its last, then transA / transB swap the last two (ONNX Runtime's shapes). */
static void test_fused_matmul(void) {
    printf("FusedMatMul:\n");
    otter_model *m = new_model(17);
    CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    otter_graph *g = m->graph;
    add_input(g, "q", OTTER_DTYPE_FLOAT, "T,BH,64");
    add_input(g, "k", OTTER_DTYPE_FLOAT, "S,BH,64");
    add_input(g, "w", OTTER_DTYPE_FLOAT, "64,32");
    otter_node *n = tu_add_node(g, "FusedMatMul", "qk", "q k", "scores");
    CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
    CHECK_OK(otter_node_set_attr_int(n, "transBatchA", 1));
    CHECK_OK(otter_node_set_attr_int(n, "transBatchB", 1));
    CHECK_OK(otter_node_set_attr_int(n, "transB", 1));
    n = tu_add_node(g, "FusedMatMul", "qw", "q w", "proj");
    CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
    CHECK_OK(otter_node_set_attr_int(n, "transBatchA", 1));
    CHECK_OK(otter_model_infer_shapes(m, NULL));
    expect_type(m, "scores", "float32[BH,T,S]");
    expect_type(m, "proj", "float32[BH,T,32]");
    otter_model_free(m);
}

int main(void) {
    test_broadcast();
    test_narrow_types();
    test_symbolic_layers();
    test_value_propagation();
    test_opset_axes();
    test_declared_and_strict();
    test_if();
    test_alloc_failures();
    test_fused_matmul();
    return tu_finish("test_infer");
}
