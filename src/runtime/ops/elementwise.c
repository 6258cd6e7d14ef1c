/* Elementwise operators: unary math and activations, binary arithmetic / comparison / logic with
 * multidirectional broadcasting, the variadic Max/Min/Sum/Mean, Where, Clip.
 *
 * Every kernel is a loop over a contiguous row written once per dtype by a macro; binary rows are
 * specialised for (stride 1, stride 1), (1, 0) and (0, 1) so the compiler vectorises same-shape
 * and scalar-broadcast operands; other broadcasts go through ot_bcast_walk's strided rows.
 * float16 / bfloat16 run the float32 kernel on converted copies. Signed integer arithmetic wraps
 * (computed in unsigned types) and integer division by zero gives 0 instead of trapping. */
#include <float.h>
#include <math.h>
#include <tgmath.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/vec_math.h"

/* Type lists with a wide unsigned type for wrapping arithmetic: X(enum, type, suffix, wide unsigned). */
#define FLTS(X) X(OTTER_DTYPE_FLOAT, float, f32, float) X(OTTER_DTYPE_DOUBLE, double, f64, double)
#define SINTS(X)                                                                                                       \
    X(OTTER_DTYPE_INT8, int8_t, i8, uint32_t)                                                                          \
    X(OTTER_DTYPE_INT16, int16_t, i16, uint32_t)                                                                       \
    X(OTTER_DTYPE_INT32, int32_t, i32, uint32_t) X(OTTER_DTYPE_INT64, int64_t, i64, uint64_t)
#define UINTS(X)                                                                                                       \
    X(OTTER_DTYPE_UINT8, uint8_t, u8, uint32_t)                                                                        \
    X(OTTER_DTYPE_UINT16, uint16_t, u16, uint32_t)                                                                     \
    X(OTTER_DTYPE_UINT32, uint32_t, u32, uint32_t) X(OTTER_DTYPE_UINT64, uint64_t, u64, uint64_t)
#define INTS(X) SINTS(X) UINTS(X)
#define NUMS(X) FLTS(X) INTS(X)

static bool is_half(otter_dtype t) { return t == OTTER_DTYPE_FLOAT16 || t == OTTER_DTYPE_BFLOAT16; }

/* A float32 copy of a float16/bfloat16 tensor (same shape); ot_free(tmp->data) afterwards. */
static otter_status half_to_f32(const ot_kernel_ctx *ctx, const otter_tensor *t, otter_tensor *tmp) {
    *tmp = *t;
    tmp->name = NULL;
    tmp->extra = NULL;
    tmp->owns_data = false;
    tmp->dtype = OTTER_DTYPE_FLOAT;
    int64_t n = otter_tensor_numel(t);
    tmp->data = ot_malloc((size_t)n * sizeof(float));
    if (!tmp->data) return OT_NOMEM();
    ot_convert(tmp->data, OTTER_DTYPE_FLOAT, t->data, t->dtype, n);
    return OTTER_OK;
}

/* A float32 scratch tensor shaped like t. */
static otter_status f32_like(const otter_tensor *t, otter_tensor *tmp) {
    *tmp = *t;
    tmp->name = NULL;
    tmp->extra = NULL;
    tmp->owns_data = false;
    tmp->dtype = OTTER_DTYPE_FLOAT;
    tmp->data = ot_malloc((size_t)otter_tensor_numel(t) * sizeof(float));
    return tmp->data ? OTTER_OK : OT_NOMEM();
}

/* ======================================================================================== */
/* Unary                                                                                     */
/* ======================================================================================== */

typedef struct uparams {
    double alpha, beta, gamma;
} uparams;
typedef void (*unary_fn)(const void *x, void *y, int64_t n, const uparams *p);

#define UNARY_KERNEL(NAME, S, T, EXPR)                                                                                 \
    static void NAME##_u_##S(const void *xv, void *yv, int64_t n, const uparams *p) {                                  \
        typedef T ti;                                                                                                  \
        const ti *xs = xv;                                                                                             \
        ti *ys = yv;                                                                                                   \
        const ti alpha = (ti)p->alpha, beta = (ti)p->beta, gamma = (ti)p->gamma;                                       \
        (void)alpha, (void)beta, (void)gamma;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                                              \
            ti x = xs[i];                                                                                              \
            ys[i] = (ti)(EXPR);                                                                                        \
        }                                                                                                              \
    }
/* A float-only unary op: kernels for float and double and its dtype table. */
#define UNARY_FLOAT_OP(NAME, EXPR)                                                                                     \
    UNARY_KERNEL(NAME, f32, float, EXPR)                                                                               \
    UNARY_KERNEL(NAME, f64, double, EXPR)                                                                              \
    static const unary_fn NAME##_tbl[OTTER_DTYPE_COUNT_] = {                                                           \
        [OTTER_DTYPE_FLOAT] = NAME##_u_f32, [OTTER_DTYPE_DOUBLE] = NAME##_u_f64};

UNARY_FLOAT_OP(ceil, ceil(x))
UNARY_FLOAT_OP(floor, floor(x))
UNARY_FLOAT_OP(round, nearbyint(x))
UNARY_FLOAT_OP(reciprocal, (ti)1 / x)
UNARY_FLOAT_OP(sqrt, sqrt(x))
UNARY_FLOAT_OP(exp, exp(x))
UNARY_FLOAT_OP(log, log(x))
UNARY_FLOAT_OP(sin, sin(x))
UNARY_FLOAT_OP(cos, cos(x))
UNARY_FLOAT_OP(tan, tan(x))
UNARY_FLOAT_OP(asin, asin(x))
UNARY_FLOAT_OP(acos, acos(x))
UNARY_FLOAT_OP(atan, atan(x))
UNARY_FLOAT_OP(sinh, sinh(x))
UNARY_FLOAT_OP(cosh, cosh(x))
UNARY_FLOAT_OP(asinh, asinh(x))
UNARY_FLOAT_OP(acosh, acosh(x))
UNARY_FLOAT_OP(atanh, atanh(x))
UNARY_FLOAT_OP(erf, erf(x))
/* Float-only ops whose float32 rows run vec_math's vectorized activation (AVX2 where the CPU has it; relative
 * error a few ulp, see vec_math.c); double keeps libm through EXPR. */
#define VEC_FLOAT_OP(NAME, ACT, EXPR)                                                                                  \
    static void NAME##_u_f32(const void *xv, void *yv, int64_t n, const uparams *p) {                                  \
        (void)p;                                                                                                       \
        ot_vec_activation(ACT, 0, xv, NULL, yv, n);                                                                    \
    }                                                                                                                  \
    UNARY_KERNEL(NAME, f64, double, EXPR)                                                                              \
    static const unary_fn NAME##_tbl[OTTER_DTYPE_COUNT_] = {                                                           \
        [OTTER_DTYPE_FLOAT] = NAME##_u_f32, [OTTER_DTYPE_DOUBLE] = NAME##_u_f64};
VEC_FLOAT_OP(tanh, OT_VEC_TANH, tanh(x))
VEC_FLOAT_OP(sigmoid, OT_VEC_SIGMOID, x >= 0 ? (ti)1 / ((ti)1 + exp(-x)) : exp(x) / ((ti)1 + exp(x)))
UNARY_FLOAT_OP(hardsigmoid, fmax((ti)0, fmin((ti)1, alpha *x + beta)))
VEC_FLOAT_OP(hardswish, OT_VEC_HARDSWISH, x *fmax((ti)0, fmin((ti)1, x / (ti)6 + (ti)0.5)))
UNARY_FLOAT_OP(leakyrelu, x < 0 ? alpha * x : x)
UNARY_FLOAT_OP(elu, x < 0 ? alpha * (exp(x) - (ti)1) : x)
UNARY_FLOAT_OP(selu, x <= 0 ? gamma * (alpha * exp(x) - alpha) : gamma * x)
UNARY_FLOAT_OP(celu, fmax((ti)0, x) + fmin((ti)0, alpha *(exp(x / alpha) - (ti)1)))
UNARY_FLOAT_OP(thresholdedrelu, x > alpha ? x : (ti)0)
UNARY_FLOAT_OP(softplus, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)))
UNARY_FLOAT_OP(softsign, x / ((ti)1 + fabs(x)))
UNARY_FLOAT_OP(mish, x *tanh(x > 0 ? x + log1p(exp(-x)) : log1p(exp(x))))
UNARY_FLOAT_OP(shrink, x < -alpha ? x + beta : (x > alpha ? x - beta : (ti)0))

/* Ops that also take integers. Negation wraps (computed in uint64_t). */
#define ABS_S(E, T, S, U)  UNARY_KERNEL(abs, S, T, x < 0 ? (ti)(0 - (uint64_t)x) : x)
#define ABS_U(E, T, S, U)  UNARY_KERNEL(abs, S, T, x)
#define NEG_S(E, T, S, U)  UNARY_KERNEL(neg, S, T, (ti)(0 - (uint64_t)x))
#define SIGN_S(E, T, S, U) UNARY_KERNEL(sign, S, T, x > 0 ? 1 : (x < 0 ? -1 : 0))
#define SIGN_U(E, T, S, U) UNARY_KERNEL(sign, S, T, x > 0 ? 1 : 0)
#define RELU_S(E, T, S, U) UNARY_KERNEL(relu, S, T, x > 0 ? x : 0)
UNARY_KERNEL(abs, f32, float, fabs(x))
UNARY_KERNEL(abs, f64, double, fabs(x))
UNARY_KERNEL(neg, f32, float, -x)
UNARY_KERNEL(neg, f64, double, -x)
UNARY_KERNEL(sign, f32, float, x > 0 ? (ti)1 : (x < 0 ? (ti)-1 : x))
UNARY_KERNEL(sign, f64, double, x > 0 ? (ti)1 : (x < 0 ? (ti)-1 : x))
/* Relu f32: four lanes at a time with a compare mask (GCC/Clang vector extension; the scalar form
 * compiles to a data-dependent branch that mispredicts on mixed signs). Same bits as x > 0 ? x : 0. */
static void relu_u_f32(const void *xv, void *yv, int64_t n, const uparams *p) {
    const float *xs = xv;
    float *ys = yv;
    const ot_v4 zero = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        ot_v4 x = ot_v4_load(xs + i);
        ot_v4_store(ys + i, (ot_v4)((ot_i4)x & (x > zero)));
    }
    for (; i < n; i++) ys[i] = xs[i] > 0 ? xs[i] : 0.0f;
    (void)p;
}
UNARY_KERNEL(relu, f64, double, x > 0 ? x : (ti)0)
SINTS(ABS_S)
UINTS(ABS_U)
SINTS(NEG_S)
SINTS(SIGN_S)
UINTS(SIGN_U)
SINTS(RELU_S)
#define TBL_ENTRY(NAME, S, E) [E] = NAME##_u_##S
#define ABS_T(E, T, S, U)     TBL_ENTRY(abs, S, E),
#define NEG_T(E, T, S, U)     TBL_ENTRY(neg, S, E),
#define SIGN_T(E, T, S, U)    TBL_ENTRY(sign, S, E),
#define RELU_T(E, T, S, U)    TBL_ENTRY(relu, S, E),
static const unary_fn abs_tbl[OTTER_DTYPE_COUNT_] = {FLTS(ABS_T) INTS(ABS_T)};
static const unary_fn neg_tbl[OTTER_DTYPE_COUNT_] = {FLTS(NEG_T) SINTS(NEG_T)};
static const unary_fn sign_tbl[OTTER_DTYPE_COUNT_] = {FLTS(SIGN_T) INTS(SIGN_T)};
static const unary_fn relu_tbl[OTTER_DTYPE_COUNT_] = {FLTS(RELU_T) SINTS(RELU_T)};

typedef struct {
    unary_fn fn;
    const void *x;
    void *y;
    size_t es;
    otter_dtype half; /* FLOAT16 / BFLOAT16 when converting through float, else UNDEFINED */
    const uparams *p;
} unary_job;

static void unary_range(void *arg, int64_t begin, int64_t end) {
    const unary_job *j = arg;
    if (j->half == OTTER_DTYPE_UNDEFINED) {
        j->fn((const char *)j->x + (size_t)begin * j->es, (char *)j->y + (size_t)begin * j->es, end - begin, j->p);
        return;
    }
    float buf[1024];
    for (int64_t i = begin; i < end; i += 1024) {
        int64_t m = end - i < 1024 ? end - i : 1024;
        ot_convert(buf, OTTER_DTYPE_FLOAT, (const uint16_t *)j->x + i, j->half, m);
        j->fn(buf, buf, m, j->p);
        ot_convert((uint16_t *)j->y + i, j->half, buf, OTTER_DTYPE_FLOAT, m);
    }
}

static otter_status run_unary(ot_kernel_ctx *ctx, const unary_fn *tbl, const uparams *p) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    unary_job j = {tbl[x->dtype], x->data, NULL, otter_dtype_size(x->dtype), OTTER_DTYPE_UNDEFINED, p};
    if (!j.fn && is_half(x->dtype) && tbl[OTTER_DTYPE_FLOAT]) {
        j.fn = tbl[OTTER_DTYPE_FLOAT];
        j.half = x->dtype;
    }
    if (!j.fn) return ot_ctx_bad_type(ctx, 0, x->dtype);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    j.y = y->data;
    int64_t n = otter_tensor_numel(x);
    if (n > 0) ot_parallel_for(ctx, n, 16384, unary_range, &j);
    return OTTER_OK;
}

/* A float attribute (schema default when unset) as a double. */
static otter_status attr_d(const ot_kernel_ctx *ctx, const char *name, double *v) {
    float f;
    OT_TRY(ot_ctx_attr_float(ctx, name, &f));
    *v = f;
    return OTTER_OK;
}

#define SIMPLE_UNARY_RUN(NAME)                                                                                         \
    otter_status ot_kernel_##NAME(ot_kernel_ctx *ctx) {                                                                \
        uparams p = {0, 0, 0};                                                                                         \
        return run_unary(ctx, NAME##_tbl, &p);                                                                         \
    }
SIMPLE_UNARY_RUN(abs)
SIMPLE_UNARY_RUN(neg)
SIMPLE_UNARY_RUN(sign)
SIMPLE_UNARY_RUN(relu)
SIMPLE_UNARY_RUN(ceil)
SIMPLE_UNARY_RUN(floor)
SIMPLE_UNARY_RUN(round)
SIMPLE_UNARY_RUN(reciprocal)
SIMPLE_UNARY_RUN(sqrt)
SIMPLE_UNARY_RUN(exp)
SIMPLE_UNARY_RUN(log)
SIMPLE_UNARY_RUN(sin)
SIMPLE_UNARY_RUN(cos)
SIMPLE_UNARY_RUN(tan)
SIMPLE_UNARY_RUN(asin)
SIMPLE_UNARY_RUN(acos)
SIMPLE_UNARY_RUN(atan)
SIMPLE_UNARY_RUN(sinh)
SIMPLE_UNARY_RUN(cosh)
SIMPLE_UNARY_RUN(asinh)
SIMPLE_UNARY_RUN(acosh)
SIMPLE_UNARY_RUN(atanh)
SIMPLE_UNARY_RUN(erf)
SIMPLE_UNARY_RUN(tanh)
SIMPLE_UNARY_RUN(sigmoid)
SIMPLE_UNARY_RUN(hardswish)
SIMPLE_UNARY_RUN(softplus)
SIMPLE_UNARY_RUN(softsign)
SIMPLE_UNARY_RUN(mish)

otter_status ot_kernel_hardsigmoid(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    OT_TRY(attr_d(ctx, "beta", &p.beta));
    return run_unary(ctx, hardsigmoid_tbl, &p);
}
otter_status ot_kernel_leakyrelu(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    return run_unary(ctx, leakyrelu_tbl, &p);
}
otter_status ot_kernel_elu(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    return run_unary(ctx, elu_tbl, &p);
}
otter_status ot_kernel_selu(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    OT_TRY(attr_d(ctx, "gamma", &p.gamma));
    return run_unary(ctx, selu_tbl, &p);
}
otter_status ot_kernel_celu(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    return run_unary(ctx, celu_tbl, &p);
}
otter_status ot_kernel_thresholdedrelu(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "alpha", &p.alpha));
    return run_unary(ctx, thresholdedrelu_tbl, &p);
}
otter_status ot_kernel_shrink(ot_kernel_ctx *ctx) {
    uparams p = {0};
    OT_TRY(attr_d(ctx, "lambd", &p.alpha));
    OT_TRY(attr_d(ctx, "bias", &p.beta));
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!otter_dtype_is_float(x->dtype)) {
        /* integer Shrink: compute through double element by element */
        otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
        if (!y) return ctx->output_status;
        int64_t n = otter_tensor_numel(x);
        if (otter_dtype_size(x->dtype) == 0 || x->dtype == OTTER_DTYPE_BOOL) return ot_ctx_bad_type(ctx, 0, x->dtype);
        for (int64_t i = 0; i < n; i++) {
            double v = ot_get_f64(x->data, x->dtype, i);
            v = v < -p.alpha ? v + p.beta : (v > p.alpha ? v - p.beta : 0);
            ot_set_f64(y->data, x->dtype, i, v);
        }
        return OTTER_OK;
    }
    return run_unary(ctx, shrink_tbl, &p);
}

/* Not, IsNaN, IsInf: type-changing unaries, cheap enough for one loop. */
otter_status ot_kernel_not(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->dtype != OTTER_DTYPE_BOOL) return ot_ctx_bad_type(ctx, 0, x->dtype);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_BOOL, x->rank, x->dims);
    if (!y) return ctx->output_status;
    const uint8_t *a = x->data;
    uint8_t *o = y->data;
    int64_t n = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) o[i] = !a[i];
    return OTTER_OK;
}

static otter_status isnan_isinf(ot_kernel_ctx *ctx, bool inf) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!otter_dtype_is_float(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_BOOL, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t pos = 0, neg = 0; /* IsInf's own: IsNaN reads neither */
    if (inf) {
        OT_TRY(ot_ctx_attr_int(ctx, "detect_positive", &pos));
        OT_TRY(ot_ctx_attr_int(ctx, "detect_negative", &neg));
    }
    uint8_t *o = y->data;
    int64_t n = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        double v = ot_get_f64(x->data, x->dtype, i);
        o[i] = inf ? (isinf(v) && ((v > 0 && pos) || (v < 0 && neg))) : isnan(v);
    }
    return OTTER_OK;
}
otter_status ot_kernel_isnan(ot_kernel_ctx *ctx) { return isnan_isinf(ctx, false); }
otter_status ot_kernel_isinf(ot_kernel_ctx *ctx) { return isnan_isinf(ctx, true); }

/* ======================================================================================== */
/* Binary                                                                                    */
/* ======================================================================================== */

typedef struct {
    void *o;
    const void *a, *b, *c;
} bin_arg;

/* Row kernel: o = EXPR(a, b) with types ti (inputs), to (output), uw (wide unsigned / same float). */
#define BIN_KERNEL(NAME, S, TI, TO, UW, EXPR)                                                                          \
    static void NAME##_b_##S(void *argp, const int64_t *off, const int64_t *step, int64_t n) {                         \
        typedef TI ti;                                                                                                 \
        typedef TO to;                                                                                                 \
        typedef UW uw;                                                                                                 \
        const bin_arg *g = argp;                                                                                       \
        to *restrict o = (to *)g->o + off[0];                                                                          \
        const ti *A = (const ti *)g->a + off[1], *B = (const ti *)g->b + off[2];                                       \
        int64_t sa = step[1], sb = step[2];                                                                            \
        (void)sizeof(uw);                                                                                              \
        if (sa == 1 && sb == 1) {                                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ti a = A[i], b = B[i];                                                                                 \
                o[i] = (to)(EXPR);                                                                                     \
            }                                                                                                          \
        } else if (sa == 1 && sb == 0) {                                                                               \
            const ti b = B[0];                                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ti a = A[i];                                                                                           \
                o[i] = (to)(EXPR);                                                                                     \
            }                                                                                                          \
        } else if (sa == 0 && sb == 1) {                                                                               \
            const ti a = A[0];                                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ti b = B[i];                                                                                           \
                o[i] = (to)(EXPR);                                                                                     \
            }                                                                                                          \
        } else {                                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                                          \
                ti a = A[i * sa], b = B[i * sb];                                                                       \
                o[i] = (to)(EXPR);                                                                                     \
            }                                                                                                          \
        }                                                                                                              \
    }
#define BTBL(NAME, S, E) [E] = NAME##_b_##S

/* Float32 row kernel for the four arithmetic operators, in ot_v4 steps where a side is contiguous
 * (GCC -O2 leaves BIN_KERNEL's loops scalar); the same bits as the scalar loop. OP works on a float
 * or an ot_v4 mixed with a float. */
#define BIN_F32_KERNEL(NAME, OP)                                                                                       \
    static void NAME##_b_f32(void *argp, const int64_t *off, const int64_t *step, int64_t n) {                         \
        const bin_arg *g = argp;                                                                                       \
        float *o = (float *)g->o + off[0];                                                                             \
        const float *A = (const float *)g->a + off[1], *B = (const float *)g->b + off[2];                              \
        const int64_t sa = step[1], sb = step[2];                                                                      \
        int64_t i = 0;                                                                                                 \
        if (sa == 1 && sb == 1)                                                                                        \
            for (; i + 4 <= n; i += 4) ot_v4_store(o + i, ot_v4_load(A + i) OP ot_v4_load(B + i));                     \
        else if (sa == 1 && sb == 0)                                                                                   \
            for (; i + 4 <= n; i += 4) ot_v4_store(o + i, ot_v4_load(A + i) OP B[0]);                                  \
        else if (sa == 0 && sb == 1)                                                                                   \
            for (; i + 4 <= n; i += 4) ot_v4_store(o + i, A[0] OP ot_v4_load(B + i));                                  \
        for (; i < n; i++) o[i] = A[i * sa] OP B[i * sb];                                                              \
    }                                                                                                                  \
    static void NAME##_planes_f32(const bin_planes *p, int64_t p0, int64_t p1) {                                       \
        for (int64_t q = p0; p->blk > 1 && q < p1; q++) { /* lanes of blk values a position */                         \
            float *o = p->o + q * p->len * p->blk;                                                                     \
            const float *x = p->x + q * p->len * p->blk, *s = p->s + q * p->blk;                                       \
            for (int64_t j = 0; j < p->len * p->blk; j += p->blk)                                                      \
                for (int64_t i = 0; i < p->blk; i += 4)                                                                \
                    ot_v4_store(o + j + i, p->s_first ? ot_v4_load(s + i) OP ot_v4_load(x + j + i)                     \
                                                      : ot_v4_load(x + j + i) OP ot_v4_load(s + i));                   \
        }                                                                                                              \
        for (int64_t q = p0; p->blk == 1 && q < p1; q++) {                                                             \
            float *o = p->o + q * p->len;                                                                              \
            const float *x = p->x + q * p->len, s = p->s[q];                                                           \
            int64_t i = 0;                                                                                             \
            if (p->s_first) {                                                                                          \
                for (; i + 4 <= p->len; i += 4) ot_v4_store(o + i, s OP ot_v4_load(x + i));                            \
                for (; i < p->len; i++) o[i] = s OP x[i];                                                              \
            } else {                                                                                                   \
                for (; i + 4 <= p->len; i += 4) ot_v4_store(o + i, ot_v4_load(x + i) OP s);                            \
                for (; i < p->len; i++) o[i] = x[i] OP s;                                                              \
            }                                                                                                          \
        }                                                                                                              \
    }
/* Planes times a value per plane (squeeze-excitation's x * scale [N][C][1][1], a per-channel bias):
 * the rows of the broadcast walk are planes, as short as 2x2 late in mobile nets, where a row call
 * per plane cost more than its products (efficientnet_b0's Muls at batch 32: 8.6% of inference).
 * Channel-blocked planes (runtime/ops/channel_blocks.h) are positions of 16 lanes with 16 values a
 * plane, where the walk's rows are single positions (mobilenet_v3_small's blocked Muls took 3x the
 * planar ones' time). */
typedef struct bin_planes {
    float *o;
    const float *x, *s; /* x [planes][len][blk], s [planes][blk] */
    int64_t len, blk;   /* blk: 1, or a multiple of 4 */
    bool s_first;       /* s is the left operand */
} bin_planes;
BIN_F32_KERNEL(add, +)
BIN_F32_KERNEL(sub, -)
BIN_F32_KERNEL(mul, *)
BIN_F32_KERNEL(div, /)

/* arithmetic (float32's kernels above) */
#define ADD_X(E, T, S, U)  BIN_KERNEL(add, S, T, T, U, (uw)a + (uw)b)
#define SUB_X(E, T, S, U)  BIN_KERNEL(sub, S, T, T, U, (uw)a - (uw)b)
#define MUL_X(E, T, S, U)  BIN_KERNEL(mul, S, T, T, U, (uw)a *(uw)b)
#define DIVF_X(E, T, S, U) BIN_KERNEL(div, S, T, T, U, a / b)
#define DIVS_X(E, T, S, U) BIN_KERNEL(div, S, T, T, U, b == 0 ? 0 : (b == -1 ? (ti)(0 - (uw)a) : a / b))
#define DIVU_X(E, T, S, U) BIN_KERNEL(div, S, T, T, U, b == 0 ? 0 : a / b)
#define NUMS_BUT_F32(X)    X(OTTER_DTYPE_DOUBLE, double, f64, double) INTS(X)
NUMS_BUT_F32(ADD_X)
NUMS_BUT_F32(SUB_X)
NUMS_BUT_F32(MUL_X)
DIVF_X(OTTER_DTYPE_DOUBLE, double, f64, double)
SINTS(DIVS_X)
UINTS(DIVU_X)
#define ADD_T(E, T, S, U) BTBL(add, S, E),
#define SUB_T(E, T, S, U) BTBL(sub, S, E),
#define MUL_T(E, T, S, U) BTBL(mul, S, E),
#define DIV_T(E, T, S, U) BTBL(div, S, E),
static const ot_bcast_row_fn add_tbl[OTTER_DTYPE_COUNT_] = {NUMS(ADD_T)};
static const ot_bcast_row_fn sub_tbl[OTTER_DTYPE_COUNT_] = {NUMS(SUB_T)};
static const ot_bcast_row_fn mul_tbl[OTTER_DTYPE_COUNT_] = {NUMS(MUL_T)};
static const ot_bcast_row_fn div_tbl[OTTER_DTYPE_COUNT_] = {NUMS(DIV_T)};

/* Mod: fmod=0 takes the divisor's sign (Python), fmod=1 the dividend's (C). */
#define MODF_X(E, T, S, U)                                                                                             \
    BIN_KERNEL(mod, S, T, T, U,                                                                                        \
               b == 0 ? (ti)NAN : (fmod(a, b) != 0 && ((fmod(a, b) < 0) != (b < 0)) ? fmod(a, b) + b : fmod(a, b)))
#define FMODF_X(E, T, S, U) BIN_KERNEL(fmod, S, T, T, U, fmod(a, b))
#define MODS_X(E, T, S, U)                                                                                             \
    BIN_KERNEL(mod, S, T, T, U, b == 0 || b == -1 ? 0 : ((a % b != 0 && ((a % b < 0) != (b < 0))) ? a % b + b : a % b))
#define FMODS_X(E, T, S, U) BIN_KERNEL(fmod, S, T, T, U, b == 0 || b == -1 ? 0 : a % b)
#define MODU_X(E, T, S, U)  BIN_KERNEL(mod, S, T, T, U, b == 0 ? 0 : a % b)
#define FMODU_X(E, T, S, U) BIN_KERNEL(fmod, S, T, T, U, b == 0 ? 0 : a % b)
FLTS(MODF_X)
FLTS(FMODF_X)
SINTS(MODS_X)
SINTS(FMODS_X)
UINTS(MODU_X)
UINTS(FMODU_X)
#define MOD_T(E, T, S, U)  BTBL(mod, S, E),
#define FMOD_T(E, T, S, U) BTBL(fmod, S, E),
static const ot_bcast_row_fn mod_tbl[OTTER_DTYPE_COUNT_] = {NUMS(MOD_T)};
static const ot_bcast_row_fn fmod_tbl[OTTER_DTYPE_COUNT_] = {NUMS(FMOD_T)};

/* Max / Min propagate NaN like numpy. */
#define MAXF_X(E, T, S, U) BIN_KERNEL(max, S, T, T, U, (a >= b || a != a) ? a : b)
#define MINF_X(E, T, S, U) BIN_KERNEL(min, S, T, T, U, (a <= b || a != a) ? a : b)
#define MAXI_X(E, T, S, U) BIN_KERNEL(max, S, T, T, U, a >= b ? a : b)
#define MINI_X(E, T, S, U) BIN_KERNEL(min, S, T, T, U, a <= b ? a : b)
FLTS(MAXF_X)
FLTS(MINF_X)
INTS(MAXI_X)
INTS(MINI_X)
#define MAX_T(E, T, S, U) BTBL(max, S, E),
#define MIN_T(E, T, S, U) BTBL(min, S, E),
static const ot_bcast_row_fn max_tbl[OTTER_DTYPE_COUNT_] = {NUMS(MAX_T)};
static const ot_bcast_row_fn min_tbl[OTTER_DTYPE_COUNT_] = {NUMS(MIN_T)};

/* PRelu: slope b where a < 0. */
#define PRELU_X(E, T, S, U) BIN_KERNEL(prelu, S, T, T, U, a < 0 ? a * b : a)
FLTS(PRELU_X)
SINTS(PRELU_X)
#define PRELU_T(E, T, S, U) BTBL(prelu, S, E),
static const ot_bcast_row_fn prelu_tbl[OTTER_DTYPE_COUNT_] = {FLTS(PRELU_T) SINTS(PRELU_T)};

/* Pow between floats of the same type (other combinations go through double). */
#define POWF_X(E, T, S, U) BIN_KERNEL(pow, S, T, T, U, pow(a, b))
FLTS(POWF_X)
static const ot_bcast_row_fn pow_tbl[OTTER_DTYPE_COUNT_] = {
    [OTTER_DTYPE_FLOAT] = pow_b_f32, [OTTER_DTYPE_DOUBLE] = pow_b_f64};

/* comparisons (output bool) */
#define EQ_X(E, T, S, U) BIN_KERNEL(eq, S, T, uint8_t, U, a == b)
#define GT_X(E, T, S, U) BIN_KERNEL(gt, S, T, uint8_t, U, a > b)
#define GE_X(E, T, S, U) BIN_KERNEL(ge, S, T, uint8_t, U, a >= b)
#define LT_X(E, T, S, U) BIN_KERNEL(lt, S, T, uint8_t, U, a < b)
#define LE_X(E, T, S, U) BIN_KERNEL(le, S, T, uint8_t, U, a <= b)
NUMS(EQ_X)
NUMS(GT_X)
NUMS(GE_X)
NUMS(LT_X)
NUMS(LE_X)
BIN_KERNEL(eq, b8, uint8_t, uint8_t, uint8_t, a == b)
/* Equal on strings (opset 19): same bytes */
static inline bool bytes_equal(otter_bytes a, otter_bytes b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}
BIN_KERNEL(eq, str, otter_bytes, uint8_t, uint8_t, bytes_equal(a, b))
#define EQ_T(E, T, S, U) BTBL(eq, S, E),
#define GT_T(E, T, S, U) BTBL(gt, S, E),
#define GE_T(E, T, S, U) BTBL(ge, S, E),
#define LT_T(E, T, S, U) BTBL(lt, S, E),
#define LE_T(E, T, S, U) BTBL(le, S, E),
static const ot_bcast_row_fn eq_tbl[OTTER_DTYPE_COUNT_] = {
    NUMS(EQ_T)[OTTER_DTYPE_BOOL] = eq_b_b8, [OTTER_DTYPE_STRING] = eq_b_str};
static const ot_bcast_row_fn gt_tbl[OTTER_DTYPE_COUNT_] = {NUMS(GT_T)};
static const ot_bcast_row_fn ge_tbl[OTTER_DTYPE_COUNT_] = {NUMS(GE_T)};
static const ot_bcast_row_fn lt_tbl[OTTER_DTYPE_COUNT_] = {NUMS(LT_T)};
static const ot_bcast_row_fn le_tbl[OTTER_DTYPE_COUNT_] = {NUMS(LE_T)};

/* logic on bool */
BIN_KERNEL(and, b8, uint8_t, uint8_t, uint8_t, a &b)
BIN_KERNEL(or, b8, uint8_t, uint8_t, uint8_t, a | b)
BIN_KERNEL(xor, b8, uint8_t, uint8_t, uint8_t, a ^ b)
static const ot_bcast_row_fn and_tbl[OTTER_DTYPE_COUNT_] = {[OTTER_DTYPE_BOOL] = and_b_b8};
static const ot_bcast_row_fn or_tbl[OTTER_DTYPE_COUNT_] = {[OTTER_DTYPE_BOOL] = or_b_b8};
static const ot_bcast_row_fn xor_tbl[OTTER_DTYPE_COUNT_] = {[OTTER_DTYPE_BOOL] = xor_b_b8};

/* BitShift on unsigned integers; shifting by the width or more gives 0. */
#define SHL_X(E, T, S, U) BIN_KERNEL(shl, S, T, T, U, b >= sizeof(ti) * 8 ? 0 : (uw)a << b)
#define SHR_X(E, T, S, U) BIN_KERNEL(shr, S, T, T, U, b >= sizeof(ti) * 8 ? 0 : a >> b)
UINTS(SHL_X)
UINTS(SHR_X)
#define SHL_T(E, T, S, U) BTBL(shl, S, E),
#define SHR_T(E, T, S, U) BTBL(shr, S, E),
static const ot_bcast_row_fn shl_tbl[OTTER_DTYPE_COUNT_] = {UINTS(SHL_T)};
static const ot_bcast_row_fn shr_tbl[OTTER_DTYPE_COUNT_] = {UINTS(SHR_T)};

typedef void (*bin_planes_fn)(const bin_planes *p, int64_t p0, int64_t p1);
static const struct {
    ot_bcast_row_fn row;
    bin_planes_fn planes;
} planes_kernels[] = {
    {add_b_f32, add_planes_f32}, {sub_b_f32, sub_planes_f32}, {mul_b_f32, mul_planes_f32}, {div_b_f32, div_planes_f32}};

typedef struct {
    bin_planes_fn fn;
    bin_planes p;
} planes_task;

static void planes_range(void *arg, int64_t p0, int64_t p1) {
    const planes_task *t = arg;
    t->fn(&t->p, p0, p1);
}

/* Whether bc (merged) is planes of bc.dims[1] floats (or of bc.dims[1] positions of bc.dims[2] lanes)
 * with one operand a value per plane (a value per lane of a plane) and the other contiguous, and fn
 * one of the float arithmetic rows: then o = fn over the planes, run. */
static bool bin_exec_planes(const ot_kernel_ctx *ctx, ot_bcast_row_fn fn, const ot_bcast *bc, otter_tensor *o,
                            const otter_tensor *a, const otter_tensor *b) {
    if (bc->rank != 2 && !(bc->rank == 3 && bc->dims[2] % 4 == 0)) return false;
    const int64_t len = bc->dims[1], blk = bc->rank == 3 ? bc->dims[2] : 1, d = bc->rank - 1;
    const int64_t *so = bc->strides[0], *sa = bc->strides[1], *sb = bc->strides[2];
    /* a plane of the contiguous operand and of o: [len][blk]; of the other: [blk] */
    const bool a_planes = sa[0] == len * blk && sa[1] == blk && sa[d] == 1,
               b_planes = sb[0] == len * blk && sb[1] == blk && sb[d] == 1;
    const bool a_values = sa[0] == blk && sa[1] == 0 && sa[d] == (blk > 1),
               b_values = sb[0] == blk && sb[1] == 0 && sb[d] == (blk > 1);
    const bool s_first = a_values && b_planes;
    if (so[0] != len * blk || so[1] != blk || so[d] != 1 || !(s_first || (a_planes && b_values))) return false;
    for (size_t k = 0; k < sizeof planes_kernels / sizeof *planes_kernels; k++) {
        if (planes_kernels[k].row != fn) continue;
        const planes_task t = {planes_kernels[k].planes,
                               {o->data, s_first ? b->data : a->data, s_first ? a->data : b->data, len, blk, s_first}};
        const int64_t grain = OT_GRAIN_ELEMWISE / (len * blk);
        ot_parallel_for(ctx, bc->dims[0], grain > 1 ? grain : 1, planes_range, (void *)&t);
        return true;
    }
    return false;
}

/* o = fn(a, b) over the broadcast of a and b into o's shape. */
static void bin_exec(const ot_kernel_ctx *ctx, ot_bcast_row_fn fn, otter_tensor *o, const otter_tensor *a,
                     const otter_tensor *b) {
    ot_bcast bc;
    const otter_tensor *ins[2] = {a, b};
    ot_bcast_init_tensors(&bc, o, 2, ins);
    if (bc.numel == 0 || bin_exec_planes(ctx, fn, &bc, o, a, b)) return;
    bin_arg g = {o->data, a->data, b->data, NULL};
    ot_bcast_parallel(ctx, &bc, OT_GRAIN_ELEMWISE, fn, &g);
}

/* o = fn(a, b) where a, b may be float16/bfloat16 and fn the float32 kernel. */
static otter_status bin_exec_half(const ot_kernel_ctx *ctx, ot_bcast_row_fn fn, otter_tensor *o, const otter_tensor *a,
                                  const otter_tensor *b) {
    otter_tensor ta, tb, to;
    bool ha = is_half(a->dtype), hb = is_half(b->dtype), ho = is_half(o->dtype);
    otter_status s = OTTER_OK;
    ta.data = tb.data = to.data = NULL;
    if (ha && (s = half_to_f32(ctx, a, &ta)) != OTTER_OK) goto done;
    if (hb && (s = half_to_f32(ctx, b, &tb)) != OTTER_OK) goto done;
    if (ho && (s = f32_like(o, &to)) != OTTER_OK) goto done;
    bin_exec(ctx, fn, ho ? &to : o, ha ? &ta : a, hb ? &tb : b);
    if (ho) ot_convert(o->data, o->dtype, to.data, OTTER_DTYPE_FLOAT, otter_tensor_numel(o));
done:
    if (ha) ot_free(ta.data);
    if (hb) ot_free(tb.data);
    if (ho) ot_free(to.data);
    return s;
}

static otter_status same_types(const ot_kernel_ctx *ctx, const otter_tensor *a, size_t ia, const otter_tensor *b,
                               size_t ib) {
    if (a->dtype != b->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has type %s but input %zu '%s' has type %s", ib,
                            ot_ctx_input_name(ctx, ib), otter_dtype_name(b->dtype), ia, ot_ctx_input_name(ctx, ia),
                            otter_dtype_name(a->dtype));
    return OTTER_OK;
}

/* Opsets before 7: with broadcast=1, B's dims line up with A's starting at `axis` (default: A's
 * trailing dims); view B at A's rank so numpy broadcasting does the rest. */
static otter_status legacy_view(const ot_kernel_ctx *ctx, const otter_tensor *a, const otter_tensor *b,
                                otter_tensor *view, int64_t default_axis) {
    *view = *b;
    /* No schema default: Add-1's axis defaults to aligning B with A's trailing dims in its description,
     * and PRelu has no axis attribute (before opset 7 the slope is per channel, axis 1). */
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", default_axis >= 0 ? default_axis : a->rank - b->rank);
    if (axis < 0) axis += a->rank;
    if (axis < 0 || axis + b->rank > a->rank) {
        char s1[256], s2[256];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input 1 '%s' shape %s does not fit input 0 '%s' shape %s at axis %lld",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, b->rank, b->dims),
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s2, sizeof s2, a->rank, a->dims), (long long)axis);
    }
    view->rank = a->rank;
    for (int i = 0; i < a->rank; i++) view->dims[i] = i >= axis && i < axis + b->rank ? b->dims[i - axis] : 1;
    return OTTER_OK;
}

/* Output shape of a op b; the error names both inputs. */
static otter_status binary_shape(const ot_kernel_ctx *ctx, const otter_tensor *a, const otter_tensor *b, int *rank,
                                 int64_t *dims) {
    if (ot_broadcast_shape2(a->rank, a->dims, b->rank, b->dims, rank, dims)) return OTTER_OK;
    char s1[256], s2[256];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 '%s' shape %s does not broadcast with input 0 '%s' shape %s",
                        ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, b->rank, b->dims),
                        ot_ctx_input_name(ctx, 0), ot_shape_str(s2, sizeof s2, a->rank, a->dims));
}

static otter_status binary_core(ot_kernel_ctx *ctx, const ot_bcast_row_fn *tbl, bool out_bool, const otter_tensor *a,
                                const otter_tensor *b) {
    OT_TRY(same_types(ctx, a, 0, b, 1));
    ot_bcast_row_fn fn = tbl[a->dtype];
    bool half = false;
    if (!fn && is_half(a->dtype) && tbl[OTTER_DTYPE_FLOAT]) {
        fn = tbl[OTTER_DTYPE_FLOAT];
        half = true;
    }
    if (!fn) return ot_ctx_bad_type(ctx, 0, a->dtype);
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(binary_shape(ctx, a, b, &rank, dims));
    otter_tensor *o = ot_ctx_output(ctx, 0, out_bool ? OTTER_DTYPE_BOOL : a->dtype, rank, dims);
    if (!o) return ctx->output_status;
    if (half) return bin_exec_half(ctx, fn, o, a, b);
    bin_exec(ctx, fn, o, a, b);
    return OTTER_OK;
}

static otter_status run_binary(ot_kernel_ctx *ctx, const ot_bcast_row_fn *tbl, bool out_bool) {
    const otter_tensor *a, *b;
    OT_TRY(ot_ctx_need_input(ctx, 0, &a));
    OT_TRY(ot_ctx_need_input(ctx, 1, &b));
    otter_tensor view;
    int64_t broadcast = 0;
    if (ctx->opset < 7) OT_TRY(ot_ctx_attr_int(ctx, "broadcast", &broadcast));
    if (broadcast) {
        OT_TRY(legacy_view(ctx, a, b, &view, -1));
        b = &view;
    }
    return binary_core(ctx, tbl, out_bool, a, b);
}

#define BINARY_RUN(NAME, TBL, BOOL)                                                                                    \
    otter_status ot_kernel_##NAME(ot_kernel_ctx *ctx) { return run_binary(ctx, TBL, BOOL); }
BINARY_RUN(add, add_tbl, false)
BINARY_RUN(sub, sub_tbl, false)
BINARY_RUN(mul, mul_tbl, false)
BINARY_RUN(div, div_tbl, false)
BINARY_RUN(equal, eq_tbl, true)
BINARY_RUN(greater, gt_tbl, true)
BINARY_RUN(greater_equal, ge_tbl, true)
BINARY_RUN(less, lt_tbl, true)
BINARY_RUN(less_equal, le_tbl, true)
BINARY_RUN(and, and_tbl, false)
BINARY_RUN(or, or_tbl, false)
BINARY_RUN(xor, xor_tbl, false)

otter_status ot_kernel_mod(ot_kernel_ctx *ctx) {
    int64_t fmod_attr;
    OT_TRY(ot_ctx_attr_int(ctx, "fmod", &fmod_attr));
    return run_binary(ctx, fmod_attr ? fmod_tbl : mod_tbl, false);
}

otter_status ot_kernel_bitshift(ot_kernel_ctx *ctx) {
    const char *dir;
    OT_TRY(ot_ctx_attr_string(ctx, "direction", &dir));
    if (ot_streq(dir, "LEFT")) return run_binary(ctx, shl_tbl, false);
    if (ot_streq(dir, "RIGHT")) return run_binary(ctx, shr_tbl, false);
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'direction' must be \"LEFT\" or \"RIGHT\", not \"%s\"",
                        dir ? dir : "(missing)");
}

otter_status ot_kernel_prelu(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *slope;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &slope));
    otter_tensor view;
    if (ctx->opset < 7 && slope->rank == 1 && x->rank >= 2 && slope->dims[0] == x->dims[1] && slope->dims[0] != 1) {
        /* before opset 7 a 1-D slope holds one value per channel (axis 1) */
        OT_TRY(legacy_view(ctx, x, slope, &view, 1));
        slope = &view;
    }
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    if (!ot_broadcast_shape2(x->rank, x->dims, slope->rank, slope->dims, &rank, dims) || rank != x->rank ||
        memcmp(dims, x->dims, sizeof(int64_t) * (size_t)rank) != 0) {
        char s1[256], s2[256];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input 1 '%s' (slope) shape %s does not broadcast to input 0 '%s' shape %s",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, slope->rank, slope->dims),
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s2, sizeof s2, x->rank, x->dims));
    }
    return binary_core(ctx, prelu_tbl, false, x, slope);
}

/* Pow(X: T, Y: T1) -> T. Same float types use the fast kernel; anything else through double. */
otter_status ot_kernel_pow(ot_kernel_ctx *ctx) {
    const otter_tensor *a, *b;
    OT_TRY(ot_ctx_need_input(ctx, 0, &a));
    OT_TRY(ot_ctx_need_input(ctx, 1, &b));
    otter_tensor view;
    int64_t broadcast = 0;
    if (ctx->opset < 7) OT_TRY(ot_ctx_attr_int(ctx, "broadcast", &broadcast));
    if (broadcast) {
        OT_TRY(legacy_view(ctx, a, b, &view, -1));
        b = &view;
    }
    if (a->dtype == b->dtype && (pow_tbl[a->dtype] || is_half(a->dtype))) return binary_core(ctx, pow_tbl, false, a, b);
    if (otter_dtype_size(a->dtype) == 0 || a->dtype == OTTER_DTYPE_BOOL || a->dtype == OTTER_DTYPE_STRING ||
        (a->dtype >= OTTER_DTYPE_COMPLEX64 && a->dtype <= OTTER_DTYPE_COMPLEX128))
        return ot_ctx_bad_type(ctx, 0, a->dtype);
    if (otter_dtype_size(b->dtype) == 0 || b->dtype == OTTER_DTYPE_BOOL || b->dtype == OTTER_DTYPE_STRING ||
        (b->dtype >= OTTER_DTYPE_COMPLEX64 && b->dtype <= OTTER_DTYPE_COMPLEX128))
        return ot_ctx_bad_type(ctx, 1, b->dtype);
    int rank;
    int64_t dims[OTTER_MAX_RANK];

    OT_TRY(binary_shape(ctx, a, b, &rank, dims));
    otter_tensor *o = ot_ctx_output(ctx, 0, a->dtype, rank, dims);
    if (!o) return ctx->output_status;
    int64_t na = otter_tensor_numel(a), nb = otter_tensor_numel(b), no = otter_tensor_numel(o);
    double *da = ot_malloc(sizeof(double) * (size_t)(na ? na : 1));
    double *db = ot_malloc(sizeof(double) * (size_t)(nb ? nb : 1));
    double *dout = ot_malloc(sizeof(double) * (size_t)(no ? no : 1));
    if (!da || !db || !dout) {
        ot_free(da), ot_free(db), ot_free(dout);
        return OT_NOMEM();
    }
    ot_convert(da, OTTER_DTYPE_DOUBLE, a->data, a->dtype, na);
    ot_convert(db, OTTER_DTYPE_DOUBLE, b->data, b->dtype, nb);
    otter_tensor ta = *a, tb = *b, to = *o;
    ta.data = da, tb.data = db, to.data = dout;
    ta.dtype = tb.dtype = to.dtype = OTTER_DTYPE_DOUBLE;
    bin_exec(ctx, pow_b_f64, &to, &ta, &tb);
    ot_convert(o->data, o->dtype, dout, OTTER_DTYPE_DOUBLE, no);
    ot_free(da), ot_free(db), ot_free(dout);
    return OTTER_OK;
}

/* ---- variadic Max / Min / Sum / Mean --------------------------------------------------- */

static otter_status run_variadic(ot_kernel_ctx *ctx, const ot_bcast_row_fn *tbl, bool mean) {
    size_t idx[64], n = 0;
    const otter_tensor *first = NULL;
    for (size_t i = 0; i < ctx->n_inputs && n < 64; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) continue;
        if (!first)
            first = t;
        else
            OT_TRY(same_types(ctx, first, idx[0], t, i));
        idx[n++] = i;
    }
    if (!first) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs at least one input");
    if (ctx->n_inputs > 64) return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "more than 64 inputs");
    otter_dtype dt = first->dtype;
    bool half = is_half(dt) && !tbl[dt] && tbl[OTTER_DTYPE_FLOAT];
    ot_bcast_row_fn fn = half ? tbl[OTTER_DTYPE_FLOAT] : tbl[dt];
    if (!fn || (mean && !otter_dtype_is_float(dt))) return ot_ctx_bad_type(ctx, idx[0], dt);
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_broadcast_inputs(ctx, n, idx, &rank, dims));
    otter_tensor *o = ot_ctx_output(ctx, 0, dt, rank, dims);
    if (!o) return ctx->output_status;
    otter_tensor acc = *o, cur[2];
    otter_status s = OTTER_OK;
    int64_t numel = otter_tensor_numel(o);
    if (half && (s = f32_like(o, &acc)) != OTTER_OK) return s;
    cur[0].data = cur[1].data = NULL;
    const otter_tensor *v0 = ctx->inputs[idx[0]];
    if (half && (s = half_to_f32(ctx, v0, &cur[0])) != OTTER_OK) goto done;
    if (half) v0 = &cur[0];
    if (n == 1) {
        memcpy(acc.data, v0->data, (size_t)numel * otter_dtype_size(acc.dtype));
    } else {
        for (size_t k = 1; k < n; k++) {
            const otter_tensor *vk = ctx->inputs[idx[k]];
            if (half) {
                ot_free(cur[1].data);
                cur[1].data = NULL;
                if ((s = half_to_f32(ctx, vk, &cur[1])) != OTTER_OK) goto done;
                vk = &cur[1];
            }
            bin_exec(ctx, fn, &acc, k == 1 ? v0 : &acc, vk);
        }
    }
    if (mean) {
        if (acc.dtype == OTTER_DTYPE_FLOAT)
            for (int64_t i = 0; i < numel; i++) ((float *)acc.data)[i] /= (float)n;
        else
            for (int64_t i = 0; i < numel; i++) ((double *)acc.data)[i] /= (double)n;
    }
    if (half) ot_convert(o->data, dt, acc.data, OTTER_DTYPE_FLOAT, numel);
done:
    if (half) {
        ot_free(acc.data);
        ot_free(cur[0].data);
        ot_free(cur[1].data);
    }
    return s;
}

otter_status ot_kernel_max(ot_kernel_ctx *ctx) { return run_variadic(ctx, max_tbl, false); }
otter_status ot_kernel_min(ot_kernel_ctx *ctx) { return run_variadic(ctx, min_tbl, false); }
otter_status ot_kernel_sum(ot_kernel_ctx *ctx) { return run_variadic(ctx, add_tbl, false); }
otter_status ot_kernel_mean(ot_kernel_ctx *ctx) { return run_variadic(ctx, add_tbl, true); }

/* ---- Where ---------------------------------------------------------------------------- */

/* A contiguous condition selects with masks (branches on data mispredict and don't vectorize);
 * X or Y may be a broadcast scalar, as the 0 of Where(mask, dY, 0) in gradients. */
#define WHERE_SELECT(T, XI, YI)                                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                                                  \
        T m = (T)0 - (T)(c[i] != 0);                                                                                   \
        o[i] = (T)((XI & m) | (YI & (T)~m));                                                                           \
    }
#define WHERE_KERNEL(S, T)                                                                                             \
    static void where_##S(void *argp, const int64_t *off, const int64_t *step, int64_t n) {                            \
        const bin_arg *g = argp;                                                                                       \
        T *o = (T *)g->o + off[0];                                                                                     \
        const uint8_t *c = (const uint8_t *)g->a + off[1];                                                             \
        const T *x = (const T *)g->b + off[2], *y = (const T *)g->c + off[3];                                          \
        int64_t sc = step[1], sx = step[2], sy = step[3];                                                              \
        if (sc == 1 && sx == 1 && sy == 1)                                                                             \
            WHERE_SELECT(T, x[i], y[i])                                                                                \
        else if (sc == 1 && sx == 0 && sy == 1)                                                                        \
            WHERE_SELECT(T, x[0], y[i])                                                                                \
        else if (sc == 1 && sx == 1 && sy == 0)                                                                        \
            WHERE_SELECT(T, x[i], y[0])                                                                                \
        else                                                                                                           \
            for (int64_t i = 0; i < n; i++) o[i] = c[i * sc] ? x[i * sx] : y[i * sy];                                  \
    }
WHERE_KERNEL(1, uint8_t)
WHERE_KERNEL(2, uint16_t)
WHERE_KERNEL(4, uint32_t)
WHERE_KERNEL(8, uint64_t)

otter_status ot_kernel_where(ot_kernel_ctx *ctx) {
    const otter_tensor *c, *x, *y;
    OT_TRY(ot_ctx_need_input(ctx, 0, &c));
    OT_TRY(ot_ctx_need_input(ctx, 1, &x));
    OT_TRY(ot_ctx_need_input(ctx, 2, &y));
    if (c->dtype != OTTER_DTYPE_BOOL) return ot_ctx_bad_type(ctx, 0, c->dtype);
    OT_TRY(same_types(ctx, x, 1, y, 2));
    ot_bcast_row_fn fn;
    switch (otter_dtype_size(x->dtype)) {
    case 1:
        fn = where_1;
        break;
    case 2:
        fn = where_2;
        break;
    case 4:
        fn = where_4;
        break;
    case 8:
        fn = where_8;
        break;
    default:
        return ot_ctx_bad_type(ctx, 1, x->dtype);
    }
    if (x->dtype == OTTER_DTYPE_STRING) return ot_ctx_bad_type(ctx, 1, x->dtype);
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    static const size_t idx[3] = {0, 1, 2};
    OT_TRY(ot_broadcast_inputs(ctx, 3, idx, &rank, dims));
    otter_tensor *o = ot_ctx_output(ctx, 0, x->dtype, rank, dims);
    if (!o) return ctx->output_status;
    ot_bcast bc;
    const otter_tensor *ins[3] = {c, x, y};
    ot_bcast_init_tensors(&bc, o, 3, ins);
    if (bc.numel == 0) return OTTER_OK;
    bin_arg g = {o->data, c->data, x->data, y->data};
    ot_bcast_parallel(ctx, &bc, OT_GRAIN_ELEMWISE, fn, &g);
    return OTTER_OK;
}

/* ---- Clip ------------------------------------------------------------------------------ */

typedef struct {
    const void *x;
    void *y;
    const void *lo, *hi; /* one element of the input type */
    otter_dtype t;
} clip_job;

#define CLIP_X(E, T, S, U)                                                                                             \
    static void clip_##S(const clip_job *j, int64_t b, int64_t e) {                                                    \
        const T *x = j->x;                                                                                             \
        T *y = j->y, lo = *(const T *)j->lo, hi = *(const T *)j->hi;                                                   \
        for (int64_t i = b; i < e; i++) {                                                                              \
            T v = x[i] < lo ? lo : x[i];                                                                               \
            y[i] = v > hi ? hi : v;                                                                                    \
        }                                                                                                              \
    }
NUMS(CLIP_X)

static void clip_range(void *arg, int64_t b, int64_t e) {
    const clip_job *j = arg;
#define CLIP_CASE(E, T, S, U)                                                                                          \
    case E:                                                                                                            \
        clip_##S(j, b, e);                                                                                             \
        break;
    switch (j->t) {
        NUMS(CLIP_CASE)
    default:
        break;
    }
#undef CLIP_CASE
}

otter_status ot_kernel_clip(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    otter_dtype dt = x->dtype, kt = is_half(dt) ? OTTER_DTYPE_FLOAT : dt;
    union {
        double d;
        uint64_t u;
        char bytes[8];
    } lo, hi;
    switch (kt) {
#define LIM_SET(E, T, L, H)                                                                                            \
    case E: {                                                                                                          \
        T l = (T)(L), h = (T)(H);                                                                                      \
        memcpy(lo.bytes, &l, sizeof l);                                                                                \
        memcpy(hi.bytes, &h, sizeof h);                                                                                \
        break;                                                                                                         \
    }
#define LIMF(E, T, S, U) LIM_SET(E, T, -INFINITY, INFINITY)
#define LIMS(E, T, S, U)                                                                                               \
    LIM_SET(E, T, -(int64_t)(((uint64_t)1 << (sizeof(T) * 8 - 1)) - 1) - 1, ((uint64_t)1 << (sizeof(T) * 8 - 1)) - 1)
#define LIMU(E, T, S, U) LIM_SET(E, T, 0, ~(T)0)
        FLTS(LIMF)
        SINTS(LIMS)
        UINTS(LIMU)
#undef LIM
    default:
        return ot_ctx_bad_type(ctx, 0, dt);
    }
    size_t es = otter_dtype_size(kt);
    if (ctx->opset < 11) {
        float fl, fh;
        OT_TRY(ot_ctx_attr_float(ctx, "min", &fl));
        OT_TRY(ot_ctx_attr_float(ctx, "max", &fh));
        ot_convert(lo.bytes, kt, &fl, OTTER_DTYPE_FLOAT, 1);
        ot_convert(hi.bytes, kt, &fh, OTTER_DTYPE_FLOAT, 1);
    } else {
        for (size_t k = 1; k <= 2; k++) {
            const otter_tensor *b = ot_ctx_input(ctx, k);
            if (!b) continue;
            if (b->dtype != dt) return same_types(ctx, x, 0, b, k);
            if (otter_tensor_numel(b) != 1)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' (%s) must be a scalar, has %lld elements",
                                    k, ot_ctx_input_name(ctx, k), k == 1 ? "min" : "max",
                                    (long long)otter_tensor_numel(b));
            ot_convert(k == 1 ? lo.bytes : hi.bytes, kt, b->data, dt, 1);
        }
    }
    (void)es;
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    if (n == 0) return OTTER_OK;
    if (is_half(dt)) {
        otter_tensor tx;
        OT_TRY(half_to_f32(ctx, x, &tx));
        clip_job j = {tx.data, tx.data, lo.bytes, hi.bytes, kt};
        clip_range(&j, 0, n);
        ot_convert(y->data, dt, tx.data, OTTER_DTYPE_FLOAT, n);
        ot_free(tx.data);
        return OTTER_OK;
    }
    clip_job j = {x->data, y->data, lo.bytes, hi.bytes, kt};
    ot_parallel_for(ctx, n, OT_GRAIN_ELEMWISE, clip_range, &j);
    return OTTER_OK;
}
