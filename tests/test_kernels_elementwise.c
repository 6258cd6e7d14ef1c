/* Hand-computed checks of the elementwise / reduce kernels beyond the ONNX backend suite:
 * broadcasting (every walker path against a naive reference, on 1 and 2 threads), the error a
 * non-broadcastable pair gives, in-place chains, integer edge cases (wrap-around, division by zero
 * and INT_MIN / -1 must not trap), Mod sign rules, float16/bfloat16 conversion, Reduce over
 * non-adjacent axes, float sums over rows of every length up to 70. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "runtime/ops/broadcast.h"
#include "testutil.h"

/* A one-node model: inputs "A", "B", ... (given dtype/shape), output "Y". */
typedef struct {
    const char *op;
    int n_in;
    const otter_tensor *in[4];
    int n_out;
    int opset;
    int threads;
    /* optional attributes */
    const char *int_attr;
    int64_t int_val;
    const char *ints_attr;
    size_t n_ints;
    const int64_t *ints_val;
} node_case;

static otter_status run_node(const node_case *c, otter_tensor **out) {
    static const char *const IN[] = {"A", "B", "C", "D"};
    static const char *const OUT[] = {"Y", "Z"};
    otter_model *m = NULL;
    otter_status s = otter_model_create(&m, "g", c->opset ? c->opset : 17);
    if (s) return s;
    otter_node *n = NULL;
    s = otter_node_create(&n, c->op, "the_node", (size_t)c->n_in, IN, (size_t)(c->n_out ? c->n_out : 1), OUT);
    if (!s && c->int_attr) s = otter_node_set_attr_int(n, c->int_attr, c->int_val);
    if (!s && c->ints_attr) s = otter_node_set_attr_ints(n, c->ints_attr, c->n_ints, c->ints_val);
    if (!s) s = otter_graph_add_node(m->graph, n);
    for (int i = 0; !s && i < c->n_in; i++)
        s = otter_graph_add_input(m->graph, IN[i], c->in[i]->dtype, c->in[i]->rank, c->in[i]->dims, NULL);
    if (!s) s = otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
    otter_session *sess = NULL;
    otter_session_options o = {0};
    o.n_threads = c->threads ? c->threads : 1;
    o.opt_level_set = true;
    if (!s) s = otter_session_create(&sess, m, &o);
    *out = NULL;
    if (!s) s = otter_session_run(sess, (size_t)c->n_in, NULL, c->in, 1, NULL, out);
    otter_session_free(sess);
    otter_model_free(m);
    return s;
}

static otter_tensor *make(otter_dtype t, int rank, const int64_t *dims, const void *data) {
    otter_tensor *x = NULL;
    if (data)
        otter_tensor_from_data(&x, NULL, t, rank, dims, data);
    else
        otter_tensor_create(&x, NULL, t, rank, dims);
    return x;
}

static otter_tensor *make_random_f32(int rank, const int64_t *dims, unsigned seed) {
    otter_tensor *x = make(OTTER_DTYPE_FLOAT, rank, dims, NULL);
    float *p = x->data;
    srand(seed);
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) p[i] = (float)rand() / RAND_MAX * 4.0f - 2.0f;
    return x;
}

/* Naive broadcast index: element of t for output multi-index idx (output rank r). */
static int64_t bidx(const otter_tensor *t, int r, const int64_t *idx) {
    int64_t off = 0;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[i], k = idx[r - t->rank + i];
        off = off * d + (d == 1 ? 0 : k);
    }
    return off;
}

/* Add / Sub / Mul over a shape pair against the naive loop. */
static void check_broadcast(int ra, const int64_t *da, int rb, const int64_t *db, int threads) {
    otter_tensor *a = make_random_f32(ra, da, 1), *b = make_random_f32(rb, db, 2);
    static const char *const OPS[] = {"Add", "Sub", "Mul", "Div"};
    for (int op = 0; op < 4; op++) {
        node_case c = {OPS[op], 2, {a, b}, 1, 17, threads, NULL, 0, NULL, 0, NULL};
        otter_tensor *y = NULL;
        CHECK_OK(run_node(&c, &y));
        if (!y) continue;
        int r = y->rank;
        int64_t idx[OTTER_MAX_RANK] = {0}, n = otter_tensor_numel(y), bad = 0;
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t rem = i;
            for (int d = r - 1; d >= 0; d--) idx[d] = rem % y->dims[d], rem /= y->dims[d];
            float x1 = ((float *)a->data)[bidx(a, r, idx)], x2 = ((float *)b->data)[bidx(b, r, idx)];
            float want = op == 0 ? x1 + x2 : op == 1 ? x1 - x2 : op == 2 ? x1 * x2 : x1 / x2;
            double err = fabs((double)want - ((float *)y->data)[i]);
            worst = tu_worse(worst, err);
            bad += !(err <= 1e-6 * fabs(want));
        }
        char s1[64], s2[64];
        printf("%s %s x %s (%d threads): %lld elements, worst error %g\n", OPS[op], ot_shape_str(s1, 64, ra, da),
               ot_shape_str(s2, 64, rb, db), threads, (long long)n, worst);
        CHECK(bad == 0);
        otter_tensor_free(y);
    }
    otter_tensor_free(a);
    otter_tensor_free(b);
}

static void test_broadcast_paths(void) {
    int64_t s1[] = {2, 3, 4}, s2[] = {4}, s3[] = {2, 3, 1}, s4[] = {1, 4}, s5[] = {3, 1}, s6[] = {1};
    check_broadcast(3, s1, 3, s1, 1);   /* same shape: one flat row */
    check_broadcast(3, s1, 1, s6, 1);   /* scalar: stride 0 */
    check_broadcast(1, s6, 3, s1, 1);   /* scalar on the left */
    check_broadcast(3, s1, 1, s2, 1);   /* row bias */
    check_broadcast(3, s3, 2, s4, 1);   /* outer product: strided general path */
    check_broadcast(2, s5, 3, s1, 1);   /* middle broadcast */
    check_broadcast(0, NULL, 3, s1, 1); /* rank 0 */
    int64_t big[] = {301, 257}, bias[] = {257}, col[] = {301, 1};
    check_broadcast(2, big, 1, bias, 2); /* large, split over threads mid-row */
    check_broadcast(2, big, 2, col, 2);
    check_broadcast(2, col, 1, bias, 2);
    /* a value per plane (squeeze-excitation's scale): planes of 9 (a tail past the vectors), of 4 (2x2),
     * the value on either side, split over threads */
    int64_t se[] = {2, 5, 3, 3}, se2[] = {3, 7, 2, 2}, scale[] = {2, 5, 1, 1}, scale2[] = {3, 7, 1, 1};
    check_broadcast(4, se, 4, scale, 1);
    check_broadcast(4, scale, 4, se, 1);
    check_broadcast(4, se2, 4, scale2, 1);
    check_broadcast(4, scale2, 4, se2, 1);
    int64_t many[] = {64, 96, 4, 4}, per[] = {64, 96, 1, 1};
    check_broadcast(4, many, 4, per, 2);
}

/* Where(C, X, Y) against the naive select: condition, X and Y each full or broadcast (a scalar X or
 * Y is the masked-select path gradients use), element sizes 1, 4 and 8. */
static void check_where(int rc, const int64_t *dc, int rx, const int64_t *dx, int ry, const int64_t *dy) {
    static const otter_dtype TYPES[] = {OTTER_DTYPE_UINT8, OTTER_DTYPE_FLOAT, OTTER_DTYPE_INT64};
    otter_tensor *c = make(OTTER_DTYPE_BOOL, rc, dc, NULL);
    srand(3);
    for (int64_t i = 0; i < otter_tensor_numel(c); i++) ((uint8_t *)c->data)[i] = (uint8_t)(rand() % 2);
    for (int t = 0; t < 3; t++) {
        otter_tensor *x = make(TYPES[t], rx, dx, NULL), *y = make(TYPES[t], ry, dy, NULL);
        size_t es = otter_dtype_size(TYPES[t]);
        for (int64_t i = 0; i < otter_tensor_numel(x) * (int64_t)es; i++) ((uint8_t *)x->data)[i] = (uint8_t)(i + 1);
        for (int64_t i = 0; i < otter_tensor_numel(y) * (int64_t)es; i++) ((uint8_t *)y->data)[i] = (uint8_t)(200 - i);
        node_case nc = {"Where", 3, {c, x, y}, 1, 17, 1, NULL, 0, NULL, 0, NULL};
        otter_tensor *o = NULL;
        CHECK_OK(run_node(&nc, &o));
        int64_t idx[OTTER_MAX_RANK] = {0}, n = o ? otter_tensor_numel(o) : 0, bad = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t rem = i;
            for (int d = o->rank - 1; d >= 0; d--) idx[d] = rem % o->dims[d], rem /= o->dims[d];
            bool pick_x = ((uint8_t *)c->data)[bidx(c, o->rank, idx)] != 0;
            const otter_tensor *src = pick_x ? x : y;
            bad += memcmp((uint8_t *)o->data + i * es, (uint8_t *)src->data + bidx(src, o->rank, idx) * es, es) != 0;
        }
        char s1[64], s2[64], s3[64];
        printf("Where %s %s x %s x %s: %lld elements, %lld wrong\n", otter_dtype_name(TYPES[t]),
               ot_shape_str(s1, 64, rc, dc), ot_shape_str(s2, 64, rx, dx), ot_shape_str(s3, 64, ry, dy), (long long)n,
               (long long)bad);
        CHECK(o && bad == 0);
        otter_tensor_free(o);
        otter_tensor_free(x);
        otter_tensor_free(y);
    }
    otter_tensor_free(c);
}

static void test_where_paths(void) {
    int64_t full[] = {3, 37}, one[] = {1}, col[] = {3, 1};
    check_where(2, full, 2, full, 2, full); /* contiguous */
    check_where(2, full, 1, one, 2, full);  /* scalar X: Where(mask, 0, dY) */
    check_where(2, full, 2, full, 1, one);  /* scalar Y: Where(mask, dY, 0) */
    check_where(2, col, 2, full, 1, one);   /* broadcast condition: strided path */
}

static void test_broadcast_error(void) {
    int64_t da[] = {3, 4}, db[] = {2, 5};
    otter_tensor *a = make(OTTER_DTYPE_FLOAT, 2, da, NULL), *b = make(OTTER_DTYPE_FLOAT, 2, db, NULL);
    node_case c = {"Add", 2, {a, b}, 1, 17, 1, NULL, 0, NULL, 0, NULL};
    otter_tensor *y = NULL;
    otter_status s = run_node(&c, &y);
    const char *msg = otter_last_error();
    printf("Add [3,4] + [2,5]: %s: %s\n", otter_status_name(s), msg);
    CHECK(s != OTTER_OK);
    CHECK(strstr(msg, "the_node") != NULL);
    CHECK(strstr(msg, "Add") != NULL);
    CHECK(strstr(msg, "'B'") != NULL);
    CHECK(strstr(msg, "[2,5]") != NULL);
    CHECK(strstr(msg, "[3,4]") != NULL);
    otter_tensor_free(y);
    /* mismatched dtypes name both inputs */
    otter_tensor *bi = make(OTTER_DTYPE_INT32, 2, da, NULL);
    node_case c2 = {"Mul", 2, {a, bi}, 1, 17, 1, NULL, 0, NULL, 0, NULL};
    s = run_node(&c2, &y);
    printf("Mul float x int32: %s: %s\n", otter_status_name(s), otter_last_error());
    CHECK(s != OTTER_OK);
    CHECK(strstr(otter_last_error(), "int32") != NULL);
    otter_tensor_free(y);
    otter_tensor_free(a);
    otter_tensor_free(b);
    otter_tensor_free(bi);
}

/* A graph of float X [1000] -> Y [10, 100]: nodes given as {op, input, second input or NULL, output},
 * with "shape" an int64 initializer [10, 100] for Reshape. */
static otter_model *chain_graph(size_t n_nodes, const char *const nodes[][4]) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 17));
    int64_t d[] = {1000}, d2[] = {10, 100}, two = 2;
    otter_tensor *shape;
    CHECK_OK(otter_tensor_create(&shape, "shape", OTTER_DTYPE_INT64, 1, &two));
    memcpy(shape->data, d2, sizeof d2);
    CHECK_OK(otter_graph_add_initializer(m->graph, shape));
    for (size_t k = 0; k < n_nodes; k++) {
        otter_node *n;
        const char *ins[2] = {nodes[k][1], nodes[k][2]}, *outs[1] = {nodes[k][3]};
        CHECK_OK(otter_node_create(&n, nodes[k][0], nodes[k][3], nodes[k][2] ? 2 : 1, ins, 1, outs));
        CHECK_OK(otter_graph_add_node(m->graph, n));
    }
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, d, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 2, d2, NULL));
    return m;
}

/* Runs the chain_graph of `nodes` twice (the second run on the arena plan) on `threads` threads:
 * Y must be sign * 2 e^X, with `shared` outputs sharing an input's buffer. */
static void check_chain(const char *label, size_t n_nodes, const char *const nodes[][4], int threads, float sign,
                        size_t shared) {
    otter_model *m = chain_graph(n_nodes, nodes);
    int64_t d[] = {1000};
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = threads}));
    otter_tensor *x = make_random_f32(1, d, 3);
    const otter_tensor *in[] = {x};
    for (int run = 0; run < 2; run++) {
        otter_tensor *y = NULL;
        CHECK_OK(otter_session_run(s, 1, NULL, in, 1, NULL, &y));
        int bad = !y || y->rank != 2 || y->dims[0] != 10;
        for (int i = 0; y && i < 1000; i++) {
            float want = sign * (2 * expf(((float *)x->data)[i]));
            bad += !(fabsf(((float *)y->data)[i] - want) <= 1e-6f * fabsf(want)); /* counts NaN too */
        }
        otter_memory_stats st;
        CHECK_OK(otter_session_memory_stats(s, &st));
        printf("%s, run %d: %d mismatches, %zu outputs sharing an input's buffer\n", label, run, bad, st.n_inplace);
        CHECK(bad == 0);
        CHECK(st.n_inplace == shared);
        otter_tensor_free(y);
    }
    otter_tensor_free(x);
    otter_session_free(s);
    otter_model_free(m);
}

/* Exp -> Add(t, t) -> Reshape -> Relu -> Neg: intermediates die into in-place-capable ops (Reshape then
 * costs nothing: its output is its input's block). Add, Reshape, Relu and Neg share a buffer. */
static void test_inplace_chain(void) {
    static const char *const nodes[][4] = {{"Exp", "X", NULL, "t"},
                                           {"Add", "t", "t", "u"},
                                           {"Reshape", "u", "shape", "w"},
                                           {"Relu", "w", NULL, "v"},
                                           {"Neg", "v", NULL, "Y"}};
    check_chain("in-place chain Exp->Add(t,t)->Reshape->Relu->Neg", 5, nodes, 2, -1.0f, 4);
}

/* t = Exp(X); w = Reshape(t) (a view: t's block); v = Neg(t), where t dies but its view w lives on,
 * so Neg must not run in place; Y = w - Reshape(v) = 2 e^X (e^X - e^X = 0 had Neg overwritten w).
 * w and v2 are views, and Y runs in place over w once t and w are its block's last values. */
static void test_view_outlives_input(void) {
    static const char *const nodes[][4] = {{"Exp", "X", NULL, "t"},
                                           {"Reshape", "t", "shape", "w"},
                                           {"Neg", "t", NULL, "v"},
                                           {"Reshape", "v", "shape", "v2"},
                                           {"Sub", "w", "v2", "Y"}};
    check_chain("view outliving its input (Exp->Reshape, Neg, Reshape, Sub)", 5, nodes, 1, 1.0f, 3);
}

static otter_tensor *run2(const char *op, otter_tensor *a, otter_tensor *b, const char *attr, int64_t v) {
    node_case c = {op, b ? 2 : 1, {a, b}, 1, 17, 1, attr, v, NULL, 0, NULL};
    otter_tensor *y = NULL;
    CHECK_OK(run_node(&c, &y));
    return y;
}

static void test_int_edges(void) {
    int64_t d4[] = {4};
    int32_t a32[] = {INT32_MAX, INT32_MIN, 7, -7}, b32[] = {1, -1, 0, 3};
    otter_tensor *a = make(OTTER_DTYPE_INT32, 1, d4, a32), *b = make(OTTER_DTYPE_INT32, 1, d4, b32);
    otter_tensor *y = run2("Add", a, b, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[0] == INT32_MIN); /* wraps */
    CHECK(y && ((int32_t *)y->data)[1] == INT32_MAX);
    otter_tensor_free(y);
    y = run2("Div", a, b, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[1] == INT32_MIN); /* INT_MIN / -1 does not trap */
    CHECK(y && ((int32_t *)y->data)[2] == 0);         /* x / 0 gives 0 */
    CHECK(y && ((int32_t *)y->data)[3] == -2);        /* truncates toward zero */
    otter_tensor_free(y);
    y = run2("Mul", a, b, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[1] == INT32_MIN); /* INT_MIN * -1 wraps */
    otter_tensor_free(y);
    y = run2("Mod", a, b, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[3] == 2); /* -7 mod 3 takes the divisor's sign */
    CHECK(y && ((int32_t *)y->data)[2] == 0);
    otter_tensor_free(y);
    y = run2("Mod", a, b, "fmod", 1);
    CHECK(y && ((int32_t *)y->data)[3] == -1); /* C fmod takes the dividend's sign */
    otter_tensor_free(y);
    y = run2("Neg", a, NULL, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[1] == INT32_MIN);
    otter_tensor_free(y);
    y = run2("Abs", a, NULL, NULL, 0);
    CHECK(y && ((int32_t *)y->data)[3] == 7 && ((int32_t *)y->data)[1] == INT32_MIN);
    otter_tensor_free(y);
    printf("int32 edges: wrap, INT_MIN/-1, x/0, Mod/fmod signs, Neg/Abs of INT_MIN checked\n");

    uint8_t u8a[] = {200, 1, 255, 3}, u8b[] = {100, 9, 1, 0};
    otter_tensor *ua = make(OTTER_DTYPE_UINT8, 1, d4, u8a), *ub = make(OTTER_DTYPE_UINT8, 1, d4, u8b);
    y = run2("Add", ua, ub, NULL, 0);
    CHECK(y && ((uint8_t *)y->data)[0] == 44 && ((uint8_t *)y->data)[2] == 0);
    otter_tensor_free(y);
    y = run2("Sub", ua, ub, NULL, 0);
    CHECK(y && ((uint8_t *)y->data)[1] == 248);
    otter_tensor_free(y);
    node_case c = {"BitShift", 2, {ua, ub}, 1, 17, 1, NULL, 0, NULL, 0, NULL};
    otter_tensor *yy = NULL;
    /* no direction attribute: a clean error */
    CHECK(run_node(&c, &yy) == OTTER_ERR_INVALID);
    otter_tensor_free(yy);
    uint16_t u16a[] = {65535, 300, 2, 1}, u16b[] = {65535, 300, 16, 15};
    otter_tensor *wa = make(OTTER_DTYPE_UINT16, 1, d4, u16a), *wb = make(OTTER_DTYPE_UINT16, 1, d4, u16b);
    y = run2("Mul", wa, wb, NULL, 0);
    CHECK(y && ((uint16_t *)y->data)[0] == 1 && ((uint16_t *)y->data)[1] == (uint16_t)(300 * 300));
    otter_tensor_free(y);
    printf("uint8/uint16 wrap-around checked\n");
    otter_tensor_free(a), otter_tensor_free(b), otter_tensor_free(ua), otter_tensor_free(ub);
    otter_tensor_free(wa), otter_tensor_free(wb);
}

static void test_half(void) {
    int mism = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ot_f16_to_f32((uint16_t)h);
        uint16_t back = ot_f32_to_f16(f);
        if (isnan(f) ? !isnan(ot_f16_to_f32(back)) : back != h) mism++;
    }
    printf("float16 -> float -> float16 over all 65536 patterns: %d mismatches\n", mism);
    CHECK(mism == 0);
    CHECK(ot_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00); /* tie rounds to even */
    CHECK(ot_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02); /* tie rounds to even (up) */
    CHECK(ot_f32_to_f16(65519.0f) == 0x7bff);           /* largest finite */
    CHECK(ot_f32_to_f16(65520.0f) == 0x7c00);           /* rounds to inf */
    CHECK(ot_f32_to_f16(5.9604645e-8f) == 0x0001);      /* smallest subnormal */
    CHECK(ot_f32_to_f16(2.9802322e-8f) == 0x0000);      /* half of it: tie to even 0 */
    CHECK(ot_f32_to_f16(-0.0f) == 0x8000);
    CHECK(ot_f32_to_bf16(1.0f + 1.0f / 256) == 0x3f80); /* tie to even */
    CHECK(ot_bf16_to_f32(ot_f32_to_bf16(3.140625f)) == 3.140625f);
    /* float16 through a kernel: Add runs the float32 kernel on converted copies */
    int64_t d[] = {3};
    uint16_t ha[] = {0x3c00, 0x4000, 0xbc00}, hb[] = {0x3c00, 0x3800, 0x3c00}; /* 1,2,-1 + 1,0.5,1 */
    otter_tensor *a = make(OTTER_DTYPE_FLOAT16, 1, d, ha), *b = make(OTTER_DTYPE_FLOAT16, 1, d, hb);
    otter_tensor *y = run2("Add", a, b, NULL, 0);
    CHECK(y && y->dtype == OTTER_DTYPE_FLOAT16);
    CHECK(y && ((uint16_t *)y->data)[0] == 0x4000 && ((uint16_t *)y->data)[1] == 0x4100 &&
          ((uint16_t *)y->data)[2] == 0x0000);
    otter_tensor_free(y), otter_tensor_free(a), otter_tensor_free(b);
}

static void test_reduce_general(void) {
    int64_t d[] = {2, 3, 4}, axes[] = {0, 2};
    otter_tensor *x = make_random_f32(3, d, 5);
    node_case c = {"ReduceMax", 1, {x}, 1, 13, 1, "keepdims", 0, "axes", 2, axes};
    otter_tensor *y = NULL;
    CHECK_OK(run_node(&c, &y));
    CHECK(y && y->rank == 1 && y->dims[0] == 3);
    double worst = 0;
    for (int j = 0; y && j < 3; j++) {
        float want = -INFINITY;
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 4; k++) want = fmaxf(want, ((float *)x->data)[(i * 3 + j) * 4 + k]);
        worst = tu_worse(worst, fabs(want - ((float *)y->data)[j]));
    }
    printf("ReduceMax axes [0,2] of [2,3,4] (non-adjacent axes): worst error %g\n", worst);
    CHECK(worst == 0);
    otter_tensor_free(y);
    /* out-of-range axis: a clean error naming the input */
    int64_t bad_axes[] = {3};
    node_case c2 = {"ReduceMax", 1, {x}, 1, 13, 1, NULL, 0, "axes", 1, bad_axes};
    CHECK(run_node(&c2, &y) == OTTER_ERR_INVALID);
    printf("ReduceMax axes [3] on rank 3: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'A'") != NULL);
    otter_tensor_free(x);
}

/* ReduceSum / Mean / L1 / SumSquare over the last axis, rows of 1..70 floats (the 16-wide partial
 * sums, their tails, and rows shorter than one step), on 1 and 2 threads, against sums in double. */
static void test_reduce_rows(void) {
    static const char *const ops[] = {"ReduceSum", "ReduceMean", "ReduceL1", "ReduceSumSquare"};
    double worst = 0;
    for (int64_t r = 1; r <= 70; r += r < 20 ? 1 : 7)
        for (int op = 0; op < 4; op++)
            for (int threads = 1; threads <= 2; threads++) {
                int64_t d[] = {5, 3, r}, axes[] = {-1}, axes_dims[] = {1};
                otter_tensor *x = make_random_f32(3, d, (unsigned)(r * 4 + op));
                otter_tensor *ax = make(OTTER_DTYPE_INT64, 1, axes_dims, axes);
                /* ReduceSum takes its axes as an input from opset 13; the others from 18 */
                node_case c = {ops[op], op == 0 ? 2 : 1,    {x, ax}, 1,   13, threads, "keepdims",
                               0,       op ? "axes" : NULL, 1,       axes};
                otter_tensor *y = NULL;
                CHECK_OK(run_node(&c, &y));
                CHECK(y && y->rank == 2 && y->dims[0] == 5 && y->dims[1] == 3);
                for (int64_t o = 0; y && o < 15; o++) {
                    double want = 0;
                    for (int64_t k = 0; k < r; k++) {
                        double v = ((const float *)x->data)[o * r + k];
                        want += op == 2 ? fabs(v) : op == 3 ? v * v : v;
                    }
                    if (op == 1) want /= (double)r;
                    worst = tu_worse(worst, fabs(want - ((const float *)y->data)[o]) / (1 + fabs(want)));
                }
                otter_tensor_free(y), otter_tensor_free(x), otter_tensor_free(ax);
            }
    printf("ReduceSum/Mean/L1/SumSquare over rows of 1..70 floats: worst relative error %.2e\n", worst);
    CHECK(worst < 1e-6);
}

/* ReduceSum / Mean / L1 / SumSquare over the middle axis of [outer][r][inner] (a bias gradient's sum over
 * batch and positions: vectors across columns, chunks of 256 columns over the threads): every column summed
 * in order, so the float sums of a plain loop to the bit; inner 1..530 (tails, one chunk, several), on 1 and 2
 * threads, over axis 1 of [3, 37, inner] and axes 0, 1 of [2, 19, inner]. */
static void test_reduce_columns(void) {
    static const char *const ops[] = {"ReduceSum", "ReduceMean", "ReduceL1", "ReduceSumSquare"};
    static const int64_t inners[] = {2, 5, 255, 256, 257, 530};
    double worst = 0;
    for (size_t in = 0; in < sizeof inners / sizeof *inners; in++)
        for (int lead = 0; lead < 2; lead++)
            for (int op = 0; op < 4; op++)
                for (int threads = 1; threads <= 2; threads++) {
                    const int64_t inner = inners[in], outer = lead ? 1 : 3, r = lead ? 2 * 19 : 37;
                    int64_t d[] = {lead ? 2 : 3, lead ? 19 : 37, inner}, axes[] = {lead ? 0 : 1, 1},
                            axes_dims[] = {lead ? 2 : 1};
                    otter_tensor *x = make_random_f32(3, d, (unsigned)(inner * 8 + op * 2 + lead));
                    otter_tensor *ax = make(OTTER_DTYPE_INT64, 1, axes_dims, axes);
                    node_case c = {ops[op], op == 0 ? 2 : 1,    {x, ax},      1,   13, threads, "keepdims",
                                   0,       op ? "axes" : NULL, axes_dims[0], axes};
                    otter_tensor *y = NULL;
                    CHECK_OK(run_node(&c, &y));
                    CHECK(y && otter_tensor_numel(y) == outer * inner);
                    for (int64_t o = 0; y && o < outer; o++)
                        for (int64_t i = 0; i < inner; i++) {
                            float want = 0.0f;
                            for (int64_t k = 0; k < r; k++) {
                                const float v = ((const float *)x->data)[(o * r + k) * inner + i];
                                want += op == 2 ? fabsf(v) : op == 3 ? v * v : v;
                            }
                            const float got = ((const float *)y->data)[o * inner + i];
                            /* Mean divides after; SumSquare's products may fuse into FMAs where a build
                             * contracts them */
                            const double w = op == 1 ? want / (double)r : want;
                            if (op == 1 || op == 3)
                                worst = tu_worse(worst, fabs(w - got) / (1 + fabs(w)));
                            else
                                CHECK(got == want);
                        }
                    otter_tensor_free(y), otter_tensor_free(x), otter_tensor_free(ax);
                }
    printf("ReduceSum/L1 over middle axes, 2..530 columns: the plain loop's bits; Mean, SumSquare within %.2e\n",
           worst);
    CHECK(worst < 1e-6);
}

int main(void) {
    test_broadcast_paths();
    test_where_paths();
    test_broadcast_error();
    test_inplace_chain();
    test_view_outlives_input();
    test_int_edges();
    test_half();
    test_reduce_general();
    test_reduce_rows();
    test_reduce_columns();
    return tu_finish("test_kernels_elementwise");
}
