/* Training operators: com.microsoft gradient / training ops that ORT-made training graphs contain,
 * and the ai.onnx.preview.training optimizers. This file holds the op table, the shared helpers,
 * the accumulators, activation gradients, Gelu family, Dropout/Scale/ReduceAllL2, FusedMatMul and
 * the preview optimizers; training_nn.c and training_shape.c hold the rest.
 *
 * Not here: com.microsoft AdamWOptimizer, SGDOptimizerV2 and InplaceClipGradNorm, whose inputs
 * are tensor sequences that the runtime does not carry; their math is in runtime/optim.c and the
 * training session calls it directly.
 *
 * In-place semantics: InPlaceAccumulator(V2) and ZeroGradient change their first input tensor (the
 * gradient buffer the caller passes in), as ORT's kernels do through output aliasing. */
#include <math.h>
#include <string.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/training_internal.h"
#include "runtime/ops/vec_math.h"
#include "runtime/optim.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

bool ot_train_is_float(otter_dtype t) {
    return t == OTTER_DTYPE_FLOAT || t == OTTER_DTYPE_DOUBLE || t == OTTER_DTYPE_FLOAT16 || t == OTTER_DTYPE_BFLOAT16;
}

bool ot_train_wanted(const ot_kernel_ctx *ctx, size_t i) {
    return i < ctx->n_outputs && i < ctx->node->n_outputs && !ot_str_empty(ctx->node->outputs[i]);
}

bool ot_train_same_shape(const otter_tensor *a, const otter_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

otter_status ot_train_need(const ot_kernel_ctx *ctx, size_t i, const char *what, const otter_tensor **t) {
    *t = ot_ctx_input(ctx, i);
    if (!*t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu (%s) is missing", i, what);
    return OTTER_OK;
}

/* dY (input 0) and input 1 (named `what`), which an elementwise gradient needs in one shape. */
static otter_status need_dy_and(const ot_kernel_ctx *ctx, const char *what, const otter_tensor **dy,
                                const otter_tensor **x) {
    char s1[128], s2[128];
    OT_TRY(ot_train_need(ctx, 0, "dY", dy));
    OT_TRY(ot_train_need(ctx, 1, what, x));
    if (!ot_train_same_shape(*dy, *x))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' %s and %s '%s' %s must have one shape",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, (*dy)->rank, (*dy)->dims), what,
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, (*x)->rank, (*x)->dims));
    return OTTER_OK;
}

otter_status ot_train_in(const ot_kernel_ctx *ctx, size_t i, const float **out, float **tmp) {
    const otter_tensor *t = ot_ctx_input(ctx, i);
    *tmp = NULL;
    if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    if (!ot_train_is_float(t->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s': dtype %s, expected a float type", i,
                            ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype));
    return ot_ctx_input_f32(ctx, i, t, out, tmp);
}

otter_status ot_train_out(ot_kernel_ctx *ctx, size_t i, otter_dtype dt, int rank, const int64_t *dims, otter_tensor **t,
                          float **p, float **tmp) {
    *tmp = NULL;
    *t = ot_ctx_output(ctx, i, dt, rank, dims);
    if (!*t) return ctx->output_status;
    return ot_output_f32(*t, p, tmp);
}

otter_status ot_train_finish(otter_status s, size_t n_out, otter_tensor *const *o, float *const *tout, size_t n_in,
                             float *const *tin) {
    for (size_t k = 0; k < n_out; k++) ot_output_f32_done(s == OTTER_OK ? o[k] : NULL, tout[k]);
    for (size_t k = 0; k < n_in; k++) ot_free(tin[k]);
    return s;
}

otter_status ot_train_shape_input(const ot_kernel_ctx *ctx, size_t i, int *rank, int64_t *dims) {
    int64_t n = 0;
    OT_TRY(ot_ctx_input_ints(ctx, i, dims, OTTER_MAX_RANK, &n));
    for (int64_t k = 0; k < n; k++)
        if (dims[k] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s': negative dimension %lld", i,
                                ot_ctx_input_name(ctx, i), (long long)dims[k]);
    *rank = (int)n;
    return OTTER_OK;
}

otter_status ot_train_scalar(const ot_kernel_ctx *ctx, size_t i, double def, double *out) {
    const otter_tensor *t = ot_ctx_input(ctx, i);
    if (!t) {
        *out = def;
        return OTTER_OK;
    }
    if (otter_tensor_numel(t) != 1 || t->dtype == OTTER_DTYPE_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must hold one number", i,
                            ot_ctx_input_name(ctx, i));
    *out = ot_get_f64(t->data, t->dtype, 0);
    return OTTER_OK;
}

static bool bool_input(const ot_kernel_ctx *ctx, size_t i, bool def) {
    const otter_tensor *t = ot_ctx_input(ctx, i);
    if (!t || otter_tensor_numel(t) < 1) return def;
    return ot_get_f64(t->data, t->dtype, 0) != 0.0;
}

/* ---- accumulators ----------------------------------------------------------------------------- */

/* One accumulation of same-typed elements (a sum only for float and double, else a copy), split
 * over the threads by element ranges. */
typedef struct acc_args {
    void *dst;
    const void *src;
    size_t elem; /* bytes an element */
    bool add;
} acc_args;

static void acc_range(void *arg, int64_t i0, int64_t i1) {
    const acc_args *a = arg;
    if (!a->add) {
        memcpy((char *)a->dst + i0 * a->elem, (const char *)a->src + i0 * a->elem, (size_t)(i1 - i0) * a->elem);
    } else if (a->elem == sizeof(float)) {
        float *restrict d = a->dst;
        const float *restrict s = a->src;
        for (int64_t i = i0; i < i1; i++) d[i] += s[i];
    } else {
        double *restrict d = a->dst;
        const double *restrict s = a->src;
        for (int64_t i = i0; i < i1; i++) d[i] += s[i];
    }
}

/* dst (any float type) = (add ? dst : 0) + src, elementwise over n; src may have another float type.
 * Float and double on the session's threads: the gradient buffers of a training step (ResNet-18's
 * 45 MB) were copied on one thread, 5.4 ms of a 157 ms step at 2 threads. */
static otter_status accumulate(const ot_kernel_ctx *ctx, otter_tensor *dst, const otter_tensor *src, bool add) {
    int64_t n = otter_tensor_numel(dst);
    if (dst->dtype == src->dtype && (dst->dtype == OTTER_DTYPE_FLOAT || dst->dtype == OTTER_DTYPE_DOUBLE || !add)) {
        acc_args a = {dst->data, src->data, otter_tensor_nbytes(dst) / (size_t)(n ? n : 1), add};
        if (n) ot_parallel_for(ctx, n, 1 << 14, acc_range, &a);
        return OTTER_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double v = ot_get_f64(src->data, src->dtype, i);
        if (add) v += ot_get_f64(dst->data, dst->dtype, i);
        ot_set_f64(dst->data, dst->dtype, i, v);
    }
    return OTTER_OK;
}

static otter_status check_acc(const ot_kernel_ctx *ctx, const otter_tensor *buf, const otter_tensor *val) {
    char s1[128], s2[128];
    if (!ot_train_is_float(buf->dtype) || !ot_train_is_float(val->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "buffer '%s' (%s) and value '%s' (%s) must be float tensors",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(buf->dtype), ot_ctx_input_name(ctx, 1),
                            otter_dtype_name(val->dtype));
    if (otter_tensor_numel(buf) != otter_tensor_numel(val))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "buffer '%s' %s and value '%s' %s differ in size",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, buf->rank, buf->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, val->rank, val->dims));
    return OTTER_OK;
}

static otter_status copy_to_output(ot_kernel_ctx *ctx, size_t i, const otter_tensor *src) {
    otter_tensor *o = ot_ctx_output(ctx, i, src->dtype, src->rank, src->dims);
    if (!o) return ctx->output_status;
    if (otter_tensor_nbytes(src)) memcpy(o->data, src->data, otter_tensor_nbytes(src));
    return OTTER_OK;
}

/* InPlaceAccumulatorV2(accumulation_buffer, value, overwrite_flag?) -> (updated_flag, buffer_out?) */
otter_status ot_kernel_inplace_accumulator_v2(ot_kernel_ctx *ctx) {
    const otter_tensor *cb, *val;
    OT_TRY(ot_train_need(ctx, 0, "accumulation_buffer", &cb));
    OT_TRY(ot_train_need(ctx, 1, "value", &val));
    otter_tensor *buf = ctx->inputs[0];
    OT_TRY(check_acc(ctx, buf, val));
    OT_TRY(accumulate(ctx, buf, val, !bool_input(ctx, 2, false)));
    (void)cb;
    int64_t one = 1;
    otter_tensor *flag = ot_ctx_output(ctx, 0, OTTER_DTYPE_BOOL, 1, &one);
    if (!flag) return ctx->output_status;
    ((uint8_t *)flag->data)[0] = 1;
    if (ot_train_wanted(ctx, 1)) OT_TRY(copy_to_output(ctx, 1, buf));
    return OTTER_OK;
}

/* InPlaceAccumulator(old_sum, value, update_signal?) -> new_sum; old_sum changes in place too. */
otter_status ot_kernel_inplace_accumulator(ot_kernel_ctx *ctx) {
    const otter_tensor *cb, *val;
    OT_TRY(ot_train_need(ctx, 0, "old_sum", &cb));
    OT_TRY(ot_train_need(ctx, 1, "value", &val));
    otter_tensor *buf = ctx->inputs[0];
    OT_TRY(check_acc(ctx, buf, val));
    if (bool_input(ctx, 2, true)) OT_TRY(accumulate(ctx, buf, val, true));
    return copy_to_output(ctx, 0, buf);
}

/* ZeroGradient(old_gradient, reset_signal) -> zero_gradient; old_gradient is zeroed in place too. */
otter_status ot_kernel_zero_gradient(ot_kernel_ctx *ctx) {
    const otter_tensor *cb;
    OT_TRY(ot_train_need(ctx, 0, "old_gradient", &cb));
    otter_tensor *buf = ctx->inputs[0];
    if (!ot_train_is_float(buf->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "old_gradient '%s' must be a float tensor",
                            ot_ctx_input_name(ctx, 0));
    if (otter_tensor_nbytes(buf)) memset(buf->data, 0, otter_tensor_nbytes(buf));
    return copy_to_output(ctx, 0, buf);
}

/* ReduceSumTraining(data, axes; keepdims, noop_with_empty_axes): ONNX Runtime's ReduceSum with the axes as an
 * input for graphs below opset 13 (its dynamic broadcast gradients), which is ReduceSum-13. */
otter_status ot_kernel_reduce_sum_training(ot_kernel_ctx *ctx) {
    int64_t opset = ctx->opset;
    ctx->opset = 13; /* the ReduceSum kernel reads the axes from input 1 from opset 13 on */
    otter_status s = ot_kernel_reduce_sum(ctx);
    ctx->opset = opset;
    return s;
}

/* ---- activation gradients ----------------------------------------------------------------------- */

enum { G_RELU, G_SIGMOID, G_TANH, G_GELU, G_FASTGELU };

#define SQRT1_2     0.70710678118654752440
#define INV_SQRT2PI 0.39894228040143267794
#define GELU_K      0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C      0.044715

static inline float gelu_f(float x) { return 0.5f * x * (1.0f + erff(x * (float)SQRT1_2)); }
static inline float fastgelu_f(float x) {
    return 0.5f * x * (1.0f + tanhf((float)GELU_K * (x + (float)GELU_C * x * x * x)));
}
static inline float gelu_d(float x) {
    return 0.5f * (1.0f + erff(x * (float)SQRT1_2)) + x * (float)INV_SQRT2PI * expf(-0.5f * x * x);
}
static inline float fastgelu_d(float x) {
    float u = (float)GELU_K * (x + (float)GELU_C * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * (float)GELU_K * (1.0f + 3.0f * (float)GELU_C * x * x);
}

typedef struct {
    int kind;
    const float *DY, *X, *B; /* B: bias over the last axis or NULL */
    float *DX;
    int64_t last;
} ag_job;

/* dx[i] = dy[i] * f'(x[i] + b[i]) over [0, n); b may be NULL. */
static void ag_row(int kind, const float *restrict dy, const float *restrict x, const float *restrict b,
                   float *restrict dx, int64_t n) {
    int64_t i = 0;
    if (!b && kind == G_RELU) {
        const ot_v4 zero = {0, 0, 0, 0};
        for (; i + 4 <= n; i += 4) {
            ot_i4 m = ot_v4_load(x + i) > zero;
            ot_v4_store(dx + i, (ot_v4)((ot_i4)ot_v4_load(dy + i) & m));
        }
    } else if (!b && kind == G_SIGMOID) {
        const ot_v4 one = {1, 1, 1, 1};
        for (; i + 4 <= n; i += 4) {
            ot_v4 v = ot_v4_load(x + i);
            ot_v4_store(dx + i, ot_v4_load(dy + i) * v * (one - v));
        }
    } else if (!b && kind == G_TANH) {
        const ot_v4 one = {1, 1, 1, 1};
        for (; i + 4 <= n; i += 4) {
            ot_v4 v = ot_v4_load(x + i);
            ot_v4_store(dx + i, ot_v4_load(dy + i) * (one - v * v));
        }
    }
    for (; i < n; i++) {
        float v = x[i] + (b ? b[i] : 0.0f), g = dy[i];
        switch (kind) {
        case G_RELU:
            dx[i] = v > 0.0f ? g : 0.0f;
            break;
        case G_SIGMOID:
            dx[i] = g * v * (1.0f - v);
            break;
        case G_TANH:
            dx[i] = g * (1.0f - v * v);
            break;
        case G_GELU:
            dx[i] = g * gelu_d(v);
            break;
        default:
            dx[i] = g * fastgelu_d(v);
            break;
        }
    }
}

/* Elements [i0, i1): without a bias one contiguous row, with one row pieces along the last axis. */
static void ag_range(void *arg, int64_t i0, int64_t i1) {
    const ag_job *j = arg;
    if (!j->B) {
        ag_row(j->kind, j->DY + i0, j->X + i0, NULL, j->DX + i0, i1 - i0);
        return;
    }
    for (int64_t i = i0; i < i1;) {
        int64_t k = i % j->last, m = j->last - k < i1 - i ? j->last - k : i1 - i;
        ag_row(j->kind, j->DY + i, j->X + i, j->B + k, j->DX + i, m);
        i += m;
    }
}

/* dX = dY * f'(.) from input 1 (X or Y as the op defines) plus an optional bias (input 2, broadcast
 * over the last axis). Elementwise, split over the session's threads. */
static otter_status act_grad(ot_kernel_ctx *ctx, int kind, bool with_bias) {
    const otter_tensor *dy, *x, *b = NULL;
    OT_TRY(need_dy_and(ctx, kind == G_SIGMOID || kind == G_TANH ? "Y" : "X", &dy, &x));
    int64_t n = otter_tensor_numel(dy), last = dy->rank ? dy->dims[dy->rank - 1] : 1;
    if (with_bias) {
        OT_TRY(ot_train_need(ctx, 2, "B", &b));
        if (otter_tensor_numel(b) != last)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld (last axis)",
                                ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(b), (long long)last);
    }
    const float *DY, *X, *B = NULL;
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL, *DX = NULL;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &X, &t1);
    if (s == OTTER_OK && b) s = ot_train_in(ctx, 2, &B, &t2);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, dy->rank, dy->dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        ag_job j = {kind, DY, X, B, DX, last > 0 ? last : 1};
        int64_t grain = kind == G_GELU || kind == G_FASTGELU ? 4096 : 32768;
        if (n > 0) ot_parallel_for(ctx, n, grain, ag_range, &j);
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1), ot_free(t2);
    return s;
}

typedef struct qg_job {
    const float *DY, *X;
    float *DX;
    float alpha;
} qg_job;

/* dX = dY * s * (1 + alpha * X * (1 - s)), s = sigmoid(alpha * X) from vec_math's vectorized sigmoid,
 * over blocks that stay in L1. */
static void qg_range(void *arg, int64_t i0, int64_t i1) {
    const qg_job *j = arg;
    enum { BLOCK = 512 };
    float s[BLOCK];
    for (int64_t b = i0; b < i1; b += BLOCK) {
        const int64_t m = i1 - b < BLOCK ? i1 - b : BLOCK;
        const float *x = j->X + b, *dy = j->DY + b;
        float *dx = j->DX + b;
        for (int64_t i = 0; i < m; i++) s[i] = j->alpha * x[i];
        ot_vec_activation(OT_VEC_SIGMOID, 0.0f, s, NULL, s, m);
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            ot_v4 sv = ot_v4_load(s + i);
            ot_v4_store(dx + i, ot_v4_load(dy + i) * sv * (1.0f + j->alpha * ot_v4_load(x + i) * (1.0f - sv)));
        }
        for (; i < m; i++) dx[i] = dy[i] * s[i] * (1.0f + j->alpha * x[i] * (1.0f - s[i]));
    }
}

/* com.microsoft QuickGeluGrad(dY, X; alpha = 1.702): the gradient of QuickGelu / Swish / SiLU,
 * X * sigmoid(alpha * X), in one pass (the decomposed form takes a Sigmoid, three Muls and a Sum). */
otter_status ot_kernel_quick_gelu_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(need_dy_and(ctx, "X", &dy, &x));
    qg_job j = {.alpha = ot_ctx_attr_float_or(ctx, "alpha", 1.702f)}; /* ONNX Runtime's operator: no ONNX schema */
    float *t0 = NULL, *t1 = NULL, *ty = NULL;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &j.DY, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &j.X, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, dy->rank, dy->dims, &dx, &j.DX, &ty);
    if (s == OTTER_OK) {
        int64_t n = otter_tensor_numel(dy);
        if (n > 0) ot_parallel_for(ctx, n, 16384, qg_range, &j);
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}

otter_status ot_kernel_relu_grad(ot_kernel_ctx *ctx) { return act_grad(ctx, G_RELU, false); }
otter_status ot_kernel_sigmoid_grad(ot_kernel_ctx *ctx) { return act_grad(ctx, G_SIGMOID, false); }
otter_status ot_kernel_tanh_grad(ot_kernel_ctx *ctx) { return act_grad(ctx, G_TANH, false); }
otter_status ot_kernel_gelu_grad(ot_kernel_ctx *ctx) { return act_grad(ctx, G_GELU, false); }
otter_status ot_kernel_fastgelu_grad(ot_kernel_ctx *ctx) {
    /* FastGeluGrad(dY, X) or the bias form (dY, X, B) some graphs use */
    return act_grad(ctx, G_FASTGELU, ot_ctx_input(ctx, 2) != NULL);
}
otter_status ot_kernel_bias_gelu_grad_dx(ot_kernel_ctx *ctx) { return act_grad(ctx, G_GELU, true); }
otter_status ot_kernel_bias_fastgelu_grad_dx(ot_kernel_ctx *ctx) { return act_grad(ctx, G_FASTGELU, true); }

/* Forward Gelu(X), FastGelu(X, bias?), BiasGelu(A, B): bias over the last axis. */
static otter_status gelu_forward(ot_kernel_ctx *ctx, bool fast, bool bias_required) {
    const otter_tensor *x, *b = ot_ctx_input(ctx, 1);
    OT_TRY(ot_train_need(ctx, 0, "X", &x));
    if (bias_required && !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (bias) is missing");
    int64_t n = otter_tensor_numel(x), last = x->rank ? x->dims[x->rank - 1] : 1;
    if (b && otter_tensor_numel(b) != last)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld (last axis)",
                            ot_ctx_input_name(ctx, 1), (long long)otter_tensor_numel(b), (long long)last);
    const float *X, *B = NULL;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *Y = NULL;
    otter_tensor *y;
    otter_status s = ot_train_in(ctx, 0, &X, &t0);
    if (s == OTTER_OK && b) s = ot_train_in(ctx, 1, &B, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &y, &Y, &ty);
    if (s == OTTER_OK) {
        for (int64_t i = 0; i < n; i++) {
            float v = X[i] + (B ? B[i % last] : 0.0f);
            Y[i] = fast ? fastgelu_f(v) : gelu_f(v);
        }
        ot_output_f32_done(y, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}

otter_status ot_kernel_gelu(ot_kernel_ctx *ctx) { return gelu_forward(ctx, false, false); }
otter_status ot_kernel_fastgelu(ot_kernel_ctx *ctx) { return gelu_forward(ctx, true, false); }
otter_status ot_kernel_biasgelu(ot_kernel_ctx *ctx) { return gelu_forward(ctx, false, true); }

/* ---- SoftmaxGrad / LogSoftmaxGrad ------------------------------------------------------------------ */

typedef struct sm_grad_job {
    const float *dy, *y;
    float *dx;
    int64_t mid, inner;
    bool log;
} sm_grad_job;

typedef double sm_d4 __attribute__((vector_size(32)));

/* A contiguous line (in == 1) runs in vectors: the four running sums in the lanes of one vector of doubles, each
 * element's term exact in double, so the same sums in the same order (the same bits); in the encoder's attention
 * gradient (128 scores a line) the scalar loop took 20 us a head, as long as a product. */
void ot_softmax_grad_line(bool log, const float *dy, const float *restrict y, float *dx, int64_t mid, int64_t in) {
    double acc[4] = {0, 0, 0, 0};
    int64_t k = 0;
    if (in == 1) {
        sm_d4 v = {0, 0, 0, 0};
        for (; k + 4 <= mid; k += 4) {
            const sm_d4 d = __builtin_convertvector(ot_v4_load(dy + k), sm_d4);
            v += log ? d : d * __builtin_convertvector(ot_v4_load(y + k), sm_d4);
        }
        for (int q = 0; q < 4; q++) acc[q] = v[q];
    }
    for (; k + 4 <= mid; k += 4)
        for (int q = 0; q < 4; q++)
            acc[q] += log ? (double)dy[(k + q) * in] : (double)dy[(k + q) * in] * y[(k + q) * in];
    for (; k < mid; k++) acc[0] += log ? (double)dy[k * in] : (double)dy[k * in] * y[k * in];
    const float sum = (float)((acc[0] + acc[1]) + (acc[2] + acc[3]));
    if (log) {
        for (k = 0; k < mid; k++) dx[k * in] = dy[k * in] - expf(y[k * in]) * sum;
        return;
    }
    const ot_v4 vs = {sum, sum, sum, sum};
    for (k = 0; in == 1 && k + 4 <= mid; k += 4) ot_v4_store(dx + k, ot_v4_load(y + k) * (ot_v4_load(dy + k) - vs));
    for (; k < mid; k++) dx[k * in] = y[k * in] * (dy[k * in] - sum);
}

/* Lines [l0, l1) (line l: outer l / inner, offset l % inner). */
static void sm_grad_lines(void *arg, int64_t l0, int64_t l1) {
    const sm_grad_job *j = arg;
    const int64_t mid = j->mid, in = j->inner;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t base = l / in * mid * in + l % in;
        ot_softmax_grad_line(j->log, j->dy + base, j->y + base, j->dx + base, mid, in);
    }
}

/* v13: one axis (default -1); v1: the input coerced to 2-D at axis (default 1). Lines over the threads. */
static otter_status softmax_grad_common(ot_kernel_ctx *ctx, bool log, bool v13) {
    const otter_tensor *dy, *y;
    OT_TRY(need_dy_and(ctx, "Y", &dy, &y));
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", v13 ? -1 : 1); /* ONNX Runtime's operator: no ONNX schema */
    int r = dy->rank ? dy->rank : 1;
    if (!ot_norm_axis(&axis, r))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for rank %d", (long long)axis, dy->rank);
    int64_t outer = 1, mid = 1, inner = 1;
    for (int i = 0; i < dy->rank; i++) {
        if (i < axis)
            outer *= dy->dims[i];
        else if (i == axis || !v13)
            mid *= dy->dims[i];
        else
            inner *= dy->dims[i];
    }
    const float *DY, *Y;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *DX = NULL;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &Y, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, dy->rank, dy->dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        sm_grad_job j = {.dy = DY, .y = Y, .dx = DX, .mid = mid, .inner = inner, .log = log};
        ot_parallel_for(ctx, outer * inner, 1 + 16384 / (mid + 1), sm_grad_lines, &j);
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}

otter_status ot_kernel_softmax_grad(ot_kernel_ctx *ctx) { return softmax_grad_common(ctx, false, false); }
otter_status ot_kernel_softmax_grad13(ot_kernel_ctx *ctx) { return softmax_grad_common(ctx, false, true); }
otter_status ot_kernel_logsoftmax_grad(ot_kernel_ctx *ctx) { return softmax_grad_common(ctx, true, false); }
otter_status ot_kernel_logsoftmax_grad13(ot_kernel_ctx *ctx) { return softmax_grad_common(ctx, true, true); }

/* ---- DropoutGrad, Scale, ReduceAllL2 ---------------------------------------------------------------- */

/* Elements [i0, i1) of DropoutGrad: dY times scale where the mask is set, or dY itself (pass). A bool
 * mask (what Dropout writes) gets a loop the compiler vectorizes: the per-element typed read took
 * 10 ms of a transformer's training step. */
typedef struct dg_job {
    const float *dy;
    const void *mask;
    otter_dtype mask_dtype;
    float scale;
    bool pass;
    float *dx;
} dg_job;

static void dg_range(void *arg, int64_t i0, int64_t i1) {
    const dg_job *j = arg;
    const float *dy = j->dy;
    float *dx = j->dx;
    if (j->pass) {
        memcpy(dx + i0, dy + i0, (size_t)(i1 - i0) * sizeof *dx);
    } else if (j->mask_dtype == OTTER_DTYPE_BOOL) {
        const uint8_t *m = j->mask;
        for (int64_t i = i0; i < i1; i++) dx[i] = m[i] ? dy[i] * j->scale : 0.0f;
    } else {
        for (int64_t i = i0; i < i1; i++)
            dx[i] = ot_get_f64(j->mask, j->mask_dtype, i) != 0.0 ? dy[i] * j->scale : 0.0f;
    }
}

/* DropoutGrad(dY, mask, ratio?, training_mode?): dX = dY * mask / (1 - ratio), ratio default 0.5.
 * As in ORT, ratio 0 passes dY through; a training_mode input that is given and false (the forward
 * Dropout dropped nothing) passes dY through as well. */
otter_status ot_kernel_dropout_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *mask;
    char s1[128], s2[128];
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "mask", &mask));
    if (otter_tensor_numel(mask) != otter_tensor_numel(dy))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "mask '%s' %s does not match dY %s", ot_ctx_input_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, mask->rank, mask->dims),
                            ot_shape_str(s2, sizeof s2, dy->rank, dy->dims));
    double ratio = 0.0;
    OT_TRY(ot_train_scalar(ctx, 2, 0.5, &ratio));
    if (!(ratio >= 0.0 && ratio < 1.0))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ratio %g must be in [0, 1)", ratio);
    bool pass = ratio == 0.0 || !bool_input(ctx, 3, true);
    int64_t n = otter_tensor_numel(dy);
    const float *DY;
    float *t0 = NULL, *ty = NULL, *DX = NULL;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, dy->rank, dy->dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        dg_job j = {DY, mask->data, mask->dtype, (float)(1.0 / (1.0 - ratio)), pass, DX};
        if (n > 0) ot_parallel_for(ctx, n, 65536, dg_range, &j);
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0);
    return s;
}

/* Scale(input, scale; scale_down): input * scale, or input / scale when scale_down. */
otter_status ot_kernel_scale(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_train_need(ctx, 0, "input", &x));
    if (!ot_ctx_input(ctx, 1)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (scale) is missing");
    double sc = 0.0;
    OT_TRY(ot_train_scalar(ctx, 1, 1.0, &sc));
    if (ot_ctx_attr_int_or(ctx, "scale_down", 0)) sc = 1.0 / sc; /* ONNX Runtime's operator: no ONNX schema */
    int64_t n = otter_tensor_numel(x);
    if (!ot_train_is_float(x->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': dtype %s, expected a float type",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(x->dtype));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (x->dtype == OTTER_DTYPE_DOUBLE) {
        for (int64_t i = 0; i < n; i++) ((double *)y->data)[i] = ((const double *)x->data)[i] * sc;
        return OTTER_OK;
    }
    for (int64_t i = 0; i < n; i++)
        ot_set_f64(y->data, y->dtype, i, (double)(float)(ot_get_f64(x->data, x->dtype, i) * sc));
    return OTTER_OK;
}

/* ReduceAllL2(X1, ..., Xn) -> sqrt(sum of every element squared), a scalar of X1's type. */
otter_status ot_kernel_reduce_all_l2(ot_kernel_ctx *ctx) {
    double sq = 0;
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) continue;
        if (!ot_train_is_float(t->dtype))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s': dtype %s, expected a float type", i,
                                ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype));
        if (dt == OTTER_DTYPE_UNDEFINED) dt = t->dtype;
        int64_t n = otter_tensor_numel(t);
        if (t->dtype == OTTER_DTYPE_FLOAT)
            for (int64_t k = 0; k < n; k++) sq += (double)((const float *)t->data)[k] * ((const float *)t->data)[k];
        else
            for (int64_t k = 0; k < n; k++) {
                double v = ot_get_f64(t->data, t->dtype, k);
                sq += v * v;
            }
    }
    if (dt == OTTER_DTYPE_UNDEFINED) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs at least one input");
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, 0, NULL);
    if (!y) return ctx->output_status;
    ot_set_f64(y->data, dt, 0, sqrt(sq));
    return OTTER_OK;
}

/* ---- FusedMatMul ------------------------------------------------------------------------------------- */

/* One FusedMatMul operand as stored: its batch dims, and the rows, columns and row stride of its
 * matrices, batch element b's at b * bstride. 1-D operands are promoted as in MatMul (A: [1, K], B:
 * [K, 1]). transBatch (rank >= 3) reads [d0, batch..., d_last] as [batch..., d0, d_last] where it
 * lies: rows d0 apart by the batch's size times d_last (what a Transpose with perm [1, ..., r-2, 0,
 * r-1] would have copied). */
typedef struct fmm_operand {
    int nb;
    int64_t bd[OTTER_MAX_RANK];
    int64_t rows, cols, ld, bstride;
} fmm_operand;

static void fmm_operand_of(const otter_tensor *t, bool is_b, bool trans_batch, fmm_operand *o) {
    const int r = t->rank;
    o->nb = r > 2 ? r - 2 : 0;
    if (r == 1) {
        o->rows = is_b ? t->dims[0] : 1, o->cols = is_b ? 1 : t->dims[0];
        o->ld = o->cols, o->bstride = 0;
    } else if (trans_batch && r > 2) {
        int64_t batch = 1;
        for (int i = 0; i < o->nb; i++) o->bd[i] = t->dims[i + 1], batch *= o->bd[i];
        o->rows = t->dims[0], o->cols = t->dims[r - 1];
        o->ld = batch * o->cols, o->bstride = o->cols;
    } else {
        for (int i = 0; i < o->nb; i++) o->bd[i] = t->dims[i];
        o->rows = t->dims[r - 2], o->cols = t->dims[r - 1];
        o->ld = o->cols, o->bstride = o->rows * o->cols;
    }
}

/* Output batch index t -> offsets of A's and B's matrices (right-aligned broadcasting). */
typedef struct fmm_batches {
    const fmm_operand *a, *b;
    int br;
    const int64_t *bdims;
} fmm_batches;

static void fmm_offsets(const void *arg, int64_t t, int64_t *a_off, int64_t *b_off) {
    const fmm_batches *j = arg;
    int64_t ai = 0, bi = 0, ast = 1, bst = 1;
    for (int i = j->br - 1; i >= 0; i--) {
        const int64_t idx = t % j->bdims[i];
        t /= j->bdims[i];
        const int ia = i - (j->br - j->a->nb), ib = i - (j->br - j->b->nb);
        if (ia >= 0) ai += (j->a->bd[ia] == 1 ? 0 : idx) * ast, ast *= j->a->bd[ia];
        if (ib >= 0) bi += (j->b->bd[ib] == 1 ? 0 : idx) * bst, bst *= j->b->bd[ib];
    }
    *a_off = ai * j->a->bstride, *b_off = bi * j->b->bstride;
}

/* Y = alpha * op(A) @ op(B) over broadcast batch dimensions; op transposes the last two axes when
 * transA / transB, after transBatchA / transBatchB moved the first axis of a rank >= 3 operand to
 * just before its last (fmm_operand); 1-D operands are never transposed, and their added axis is
 * removed from Y. What fuse.c makes of MatMuls reading Transposes, and the MatMul gradient. With
 * gated, input 2 is ReluGrad's X (Y's size): Y = X > 0 ? Y : +0, each tile as it is stored. */
static otter_status fused_matmul(ot_kernel_ctx *ctx, bool gated) {
    const otter_tensor *a, *b, *x = NULL;
    char s1[128], s2[128];
    OT_TRY(ot_train_need(ctx, 0, "A", &a));
    OT_TRY(ot_train_need(ctx, 1, "B", &b));
    if (gated) OT_TRY(ot_train_need(ctx, 2, "X", &x));
    if (a->dtype != b->dtype || !ot_train_is_float(a->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A (%s) and B (%s) must share one float type",
                            otter_dtype_name(a->dtype), otter_dtype_name(b->dtype));
    if (a->rank < 1 || b->rank < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A and B must have rank >= 1");
    /* ONNX Runtime's operator: no ONNX schema */
    const bool ta = a->rank > 1 && ot_ctx_attr_int_or(ctx, "transA", 0) != 0,
               tb = b->rank > 1 && ot_ctx_attr_int_or(ctx, "transB", 0) != 0;
    const float alpha = ot_ctx_attr_float_or(ctx, "alpha", 1.0f);
    fmm_operand oa, ob;
    fmm_operand_of(a, false, ot_ctx_attr_int_or(ctx, "transBatchA", 0) != 0, &oa);
    fmm_operand_of(b, true, ot_ctx_attr_int_or(ctx, "transBatchB", 0) != 0, &ob);
    const int64_t M = ta ? oa.cols : oa.rows, K = ta ? oa.rows : oa.cols;
    const int64_t K2 = tb ? ob.cols : ob.rows, N = tb ? ob.rows : ob.cols;
    if (K != K2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "A '%s' %s and B '%s' %s: inner dimensions %lld and %lld differ",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, a->rank, a->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, b->rank, b->dims), (long long)K,
                            (long long)K2);
    int br = 0;
    int64_t bdims[OTTER_MAX_RANK];
    if (!ot_broadcast_shape2(oa.nb, oa.bd, ob.nb, ob.bd, &br, bdims))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "batch dimensions of A %s and B %s don't broadcast",
                            ot_shape_str(s1, sizeof s1, a->rank, a->dims),
                            ot_shape_str(s2, sizeof s2, b->rank, b->dims));
    int64_t yd[OTTER_MAX_RANK];
    int yr = 0;
    for (int i = 0; i < br; i++) yd[yr++] = bdims[i];
    if (a->rank > 1) yd[yr++] = M;
    if (b->rank > 1) yd[yr++] = N;
    int64_t batch = 1, rows = M;
    for (int i = 0; i < br; i++) batch *= bdims[i];
    /* B shared by every batch of A, whose matrices lie one after another: one product of batch * M
     * rows (as MatMul folds), not a product per batch each packing B again (a transformer's
     * projections and their gradients: 128 products of 32 rows, 2x the time) */
    if (!ta && ob.nb == 0 && oa.bstride == oa.rows * oa.ld) rows = batch * M, batch = 1;
    if (x && otter_tensor_numel(x) != batch * rows * N)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s does not match the product's %lld elements",
                            ot_ctx_input_name(ctx, 2), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            (long long)(batch * rows * N));
    const float *A = NULL, *B = NULL, *X = NULL;
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL, *Y = NULL;
    otter_tensor *y = NULL;
    otter_status s = ot_train_in(ctx, 0, &A, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &B, &t1);
    if (s == OTTER_OK && x) s = ot_train_in(ctx, 2, &X, &t2);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, a->dtype, yr, yd, &y, &Y, &ty);
    const fmm_batches job = {&oa, &ob, br, bdims};
    const ot_product_batch p = {.ta = ta,
                                .tb = tb,
                                .n_batch = batch,
                                .M = rows,
                                .N = N,
                                .K = K,
                                .lda = oa.ld,
                                .ldb = ob.ld,
                                .alpha = alpha,
                                .A = A,
                                .B = B,
                                .Y = Y,
                                .gate = X,
                                .offsets = fmm_offsets,
                                .arg = &job};
    if (s == OTTER_OK && batch * rows * N > 0) s = ot_sgemm_batch(ctx, &p);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(t0), ot_free(t1), ot_free(t2);
    return s;
}

otter_status ot_kernel_fused_matmul(ot_kernel_ctx *ctx) { return fused_matmul(ctx, false); }

/* com.otter FusedMatMulReluGrad(A, B, X): ReluGrad(FusedMatMul(A, B), X), FusedMatMul's attributes
 * (fuse.c: the gradient of a Relu's input through the next layer's product, without storing it). */
otter_status ot_kernel_fused_matmul_relu_grad(ot_kernel_ctx *ctx) { return fused_matmul(ctx, true); }

/* ---- ai.onnx.preview.training optimizers ------------------------------------------------------------ */

/* Inputs R, T, then `groups` lists of n tensors each; outputs `out_groups` lists (X_new first). */
static otter_status preview_optim(ot_kernel_ctx *ctx, int groups, const char *what) {
    size_t nin = ctx->n_inputs;
    if (nin < 2 + (size_t)groups || (nin - 2) % (size_t)groups != 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%s takes R, T and %d lists of equal length; got %zu inputs", what,
                            groups, nin);
    size_t n = (nin - 2) / (size_t)groups;
    if (ctx->n_outputs > n * (size_t)groups)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%s: %zu outputs for %zu tensors (at most %zu)", what,
                            ctx->n_outputs, n, n * (size_t)groups);
    double r = 0.0, t = 0.0;
    if (!ot_ctx_input(ctx, 0) || !ot_ctx_input(ctx, 1))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs R and T are required");
    OT_TRY(ot_train_scalar(ctx, 0, 0, &r));
    OT_TRY(ot_train_scalar(ctx, 1, 0, &t));
    for (size_t i = 0; i < n; i++) {
        const otter_tensor *x = ot_ctx_input(ctx, 2 + i);
        for (int gi = 0; gi < groups; gi++) {
            const otter_tensor *o = ot_ctx_input(ctx, 2 + (size_t)gi * n + i);
            if (!o || !x || !ot_train_same_shape(o, x) || !ot_train_is_float(o->dtype))
                return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                    "input %zu '%s' must be a float tensor with the shape of X '%s'",
                                    2 + (size_t)gi * n + i, ot_ctx_input_name(ctx, 2 + (size_t)gi * n + i),
                                    ot_ctx_input_name(ctx, 2 + i));
        }
    }
    ot_onnx_adagrad_params pg = {0};
    ot_onnx_momentum_params pm = {0};
    ot_onnx_adam_params pa = {0};
    if (strcmp(what, "Adagrad") == 0) {
        OT_TRY(ot_ctx_attr_float(ctx, "decay_factor", &pg.decay_factor));
        OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &pg.epsilon));
        OT_TRY(ot_ctx_attr_float(ctx, "norm_coefficient", &pg.norm_coefficient));
    } else if (strcmp(what, "Momentum") == 0) {
        const char *mode;
        OT_TRY(ot_ctx_attr_float(ctx, "alpha", &pm.alpha));
        OT_TRY(ot_ctx_attr_float(ctx, "beta", &pm.beta));
        OT_TRY(ot_ctx_attr_float(ctx, "norm_coefficient", &pm.norm_coefficient));
        OT_TRY(ot_ctx_attr_string(ctx, "mode", &mode));
        if (strcmp(mode, "nesterov") == 0)
            pm.nesterov = true;
        else if (strcmp(mode, "standard") != 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "mode '%s' is not 'standard' or 'nesterov'", mode);
    } else {
        OT_TRY(ot_ctx_attr_float(ctx, "alpha", &pa.alpha));
        OT_TRY(ot_ctx_attr_float(ctx, "beta", &pa.beta));
        OT_TRY(ot_ctx_attr_float(ctx, "epsilon", &pa.epsilon));
        OT_TRY(ot_ctx_attr_float(ctx, "norm_coefficient", &pa.norm_coefficient));
        OT_TRY(ot_ctx_attr_float(ctx, "norm_coefficient_post", &pa.norm_coefficient_post));
    }
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < n && s == OTTER_OK; i++) {
        const float *in[4] = {0};
        float *tin[4] = {0}, *out[3] = {0}, *tout[3] = {0};
        otter_tensor *ot[3] = {0};
        const otter_tensor *x = ot_ctx_input(ctx, 2 + i);
        int64_t e = otter_tensor_numel(x);
        float *scratch = ot_malloc((size_t)(e > 0 ? e : 1) * sizeof(float) * 3);
        if (!scratch) s = OT_NOMEM();
        for (int gi = 0; gi < groups && s == OTTER_OK; gi++)
            s = ot_train_in(ctx, 2 + (size_t)gi * n + i, &in[gi], &tin[gi]);
        for (int gi = 0; gi < groups - 1 && s == OTTER_OK; gi++) {
            size_t oi = (size_t)gi * n + i;
            if (oi < ctx->n_outputs && ot_train_wanted(ctx, oi))
                s = ot_train_out(ctx, oi, x->dtype, x->rank, x->dims, &ot[gi], &out[gi], &tout[gi]);
            else
                out[gi] = scratch + (size_t)gi * (size_t)e;
        }
        if (s == OTTER_OK) {
            if (groups == 3 && strcmp(what, "Adagrad") == 0)
                ot_onnx_adagrad_update(&pg, (float)r, (int64_t)t, e, in[0], in[1], in[2], out[0], out[1]);
            else if (groups == 3)
                ot_onnx_momentum_update(&pm, (float)r, (int64_t)t, e, in[0], in[1], in[2], out[0], out[1]);
            else
                ot_onnx_adam_update(&pa, (float)r, (int64_t)t, e, in[0], in[1], in[2], in[3], out[0], out[1], out[2]);
            for (int gi = 0; gi < groups - 1; gi++)
                if (ot[gi]) ot_output_f32_done(ot[gi], tout[gi]);
        } else {
            for (int gi = 0; gi < groups - 1; gi++) ot_free(tout[gi]);
        }
        for (int gi = 0; gi < 4; gi++) ot_free(tin[gi]);
        ot_free(scratch);
    }
    return s;
}

otter_status ot_kernel_adagrad(ot_kernel_ctx *ctx) { return preview_optim(ctx, 3, "Adagrad"); }
otter_status ot_kernel_momentum(ot_kernel_ctx *ctx) { return preview_optim(ctx, 3, "Momentum"); }
otter_status ot_kernel_adam(ot_kernel_ctx *ctx) { return preview_optim(ctx, 4, "Adam"); }

typedef struct cg_job {
    const float *DY, *X;
    float *DX;
    float lo, hi;
} cg_job;

/* One run of outputs (ot_bcast_walk: operand 0 dX, 1 dY, 2 X). Less(X, min) Or Greater(X, max)
 * selects 0, so a NaN in X passes dY, as the decomposed form. Runs of both inputs go four at a time
 * through masks: the scalar loop's branches mispredict on activations around the bounds. */
static void clip_grad_row(void *arg, const int64_t *off, const int64_t *step, int64_t len) {
    const cg_job *j = arg;
    const float lo = j->lo, hi = j->hi, *restrict x = j->X + off[2], *dy = j->DY + off[1];
    float *dx = j->DX + off[0];
    int64_t i = 0;
    if (step[1] == 1 && step[2] == 1)
        for (; i + 4 <= len; i += 4) {
            const ot_v4 xv = ot_v4_load(x + i);
            const ot_i4 outside = (xv < lo) | (xv > hi);
            ot_v4_store(dx + i, (ot_v4)((ot_i4)ot_v4_load(dy + i) & ~outside));
        }
    for (; i < len; i++) {
        const float xi = x[i * step[2]];
        dx[i] = xi < lo || xi > hi ? 0.0f : dy[i * step[1]];
    }
}

/* com.otter ClipGrad(dY, X, min?, max?) -> dX: dY where min <= X <= max, else 0 (the subgradient 1 at the
 * bounds, as PyTorch's clamp); an absent bound doesn't clip; scalar bounds, dY and X broadcast as the
 * standard form's Where and Less / Greater do. runtime/fuse.c makes it from Clip's gradient in standard
 * operators (Less, Greater, Or and Where: four passes and three mask tensors, 23% of a MobileNetV2
 * training step, whose ReLU6 are Clips). dX may be dY's buffer. */
otter_status ot_kernel_clip_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "X", &x));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_broadcast_inputs(ctx, 2, (const size_t[]){0, 1}, &rank, dims));
    double lo = -INFINITY, hi = INFINITY;
    OT_TRY(ot_train_scalar(ctx, 2, -INFINITY, &lo));
    OT_TRY(ot_train_scalar(ctx, 3, INFINITY, &hi));
    cg_job j = {.lo = (float)lo, .hi = (float)hi};
    float *t0 = NULL, *t1 = NULL, *ty = NULL;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &j.DY, &t0);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &j.X, &t1);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, rank, dims, &dx, &j.DX, &ty);
    if (s == OTTER_OK) {
        ot_bcast b;
        ot_bcast_init_tensors(&b, dx, 2, (const otter_tensor *const[]){dy, x});
        if (b.numel > 0) ot_bcast_parallel(ctx, &b, OT_GRAIN_ELEMWISE, clip_grad_row, &j);
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}
