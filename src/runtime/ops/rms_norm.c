/* RMSNormalization (ai.onnx 23): Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * scale,
 * in float (stash_type 1; double and the half types convert), one row per normalized slice, rows
 * split over the session's threads. scale broadcasts (right-aligned) to the normalized shape. */
#include <math.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef struct rms_args {
    const float *x, *scale;
    float *y;
    int64_t inner;
    float eps;
} rms_args;

/* Sum of squares with 8 running sums: a fixed order the compiler can keep in one vector register. */
static float sum_squares(const float *x, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[i + l] * x[i + l];
    float s = 0;
    for (; i < n; i++) s += x[i] * x[i];
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

static void rms_rows(void *arg, int64_t begin, int64_t end) {
    const rms_args *a = arg;
    for (int64_t r = begin; r < end; r++) {
        const float *x = a->x + r * a->inner;
        float *y = a->y + r * a->inner;
        const float inv = 1.0f / sqrtf(sum_squares(x, a->inner) / (float)a->inner + a->eps);
        const ot_v4 vinv = {inv, inv, inv, inv};
        int64_t i = 0;
        for (; i + 4 <= a->inner; i += 4) ot_v4_store(y + i, ot_v4_load(x + i) * vinv * ot_v4_load(a->scale + i));
        for (; i < a->inner; i++) y[i] = x[i] * inv * a->scale[i];
    }
}

/* scale broadcast to the normalized dims nd[0, nr) as `inner` contiguous floats. */
static otter_status expand_scale(const ot_kernel_ctx *ctx, const otter_tensor *sc, const float *data, int nr,
                                 const int64_t *nd, int64_t inner, float *out) {
    bool ok = sc->rank <= nr;
    for (int i = 0; ok && i < sc->rank; i++) {
        int64_t d = sc->dims[sc->rank - 1 - i];
        ok = d == 1 || d == nd[nr - 1 - i];
    }
    if (!ok) {
        char b[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' %s does not broadcast to the normalized shape",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(b, sizeof b, sc->rank, sc->dims));
    }
    for (int64_t e = 0; e < inner; e++) {
        int64_t rest = e, off = 0, stride = 1;
        for (int i = 0; i < sc->rank; i++) {
            int64_t d = nd[nr - 1 - i], sd = sc->dims[sc->rank - 1 - i];
            off += (sd == 1 ? 0 : rest % d) * stride;
            rest /= d;
            stride *= sd;
        }
        out[e] = data[off];
    }
    return OTTER_OK;
}

otter_status ot_kernel_rms_normalization(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *sc;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    OT_TRY(ot_ctx_float_input(ctx, 1, &sc));
    int64_t axis = ot_ctx_attr_int_or(ctx, "axis", -1); /* RMSNormalization-23: after ONNX 1.12 */
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d", (long long)axis,
                            ot_ctx_input_name(ctx, 0), x->rank);
    rms_args a = {.eps = ot_ctx_attr_float_or(ctx, "epsilon", 1e-5f), .inner = 1};
    int64_t outer = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? &outer : &a.inner) *= x->dims[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, sc->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    if (outer * a.inner == 0) return OTTER_OK;
    float *tx = NULL, *tsc = NULL, *ty = NULL, *scale = ot_malloc((size_t)a.inner * sizeof(float));
    const float *sc_data = NULL;
    otter_status s = scale ? OTTER_OK : OT_NOMEM();
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, sc, &sc_data, &tsc);
    if (s == OTTER_OK) s = expand_scale(ctx, sc, sc_data, x->rank - (int)axis, x->dims + axis, a.inner, scale);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 0, x, &a.x, &tx);
    if (s == OTTER_OK) s = ot_output_f32(y, &a.y, &ty);
    if (s == OTTER_OK) {
        a.scale = scale;
        ot_parallel_for(ctx, outer, 1 + 8192 / (a.inner + 1), rms_rows, &a);
        ot_output_f32_done(y, ty);
    } else {
        ot_free(ty);
    }
    ot_free(tx), ot_free(tsc), ot_free(scale);
    return s;
}
