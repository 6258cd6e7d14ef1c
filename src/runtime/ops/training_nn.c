/* Training kernels for normalization, convolution, pooling and the cross-entropy losses:
 * LayerNormalizationGrad, SimplifiedLayerNormalization(+Grad), BatchNormInternal,
 * BatchNormalizationGrad, ConvGrad, ConvTransposeGrad, MaxPoolGrad, AveragePoolGrad,
 * SoftmaxCrossEntropyLossInternal and SoftmaxCrossEntropyLoss(Internal)Grad.
 *
 * Spatial kernels treat 1-D and 2-D as 3-D with leading size-1 dimensions. The convolution
 * gradients use their own im2col / col2im over one image and group, and the shared sgemm; ConvGrad's
 * dW packs im2col on the fly into the portable sgemm (ot_sgemm_packing). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/shape_math.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/conv_geom.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/training_internal.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define OT_TN_X86 1
#endif

/* ---- LayerNormalizationGrad / SimplifiedLayerNormalization(Grad) --------------------------------- */

/* Split X at axis into outer x inner and check that scale has `inner` elements and the saved
 * statistics `outer` elements (inputs stat0, stat1; 0 to skip). */
static otter_status ln_geometry(const ot_kernel_ctx *ctx, const otter_tensor *x, size_t scale_i, size_t stat0,
                                size_t stat1, int64_t *outer, int64_t *inner) {
    int64_t axis = otter_node_attr_int(ctx->node, "axis", -1);
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for X '%s' of rank %d", (long long)axis,
                            ot_ctx_input_name(ctx, 1), x->rank);
    *outer = 1, *inner = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? outer : inner) *= x->dims[i];
    const otter_tensor *sc = ot_ctx_input(ctx, scale_i);
    if (!sc || otter_tensor_numel(sc) != *inner)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' must have %lld elements (the normalized shape)",
                            ot_ctx_input_name(ctx, scale_i), (long long)*inner);
    size_t st[2] = {stat0, stat1};
    for (int k = 0; k < 2; k++) {
        if (!st[k]) continue;
        const otter_tensor *t = ot_ctx_input(ctx, st[k]);
        if (!t || otter_tensor_numel(t) != *outer)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must have %lld elements (one per row)", st[k],
                                ot_ctx_input_name(ctx, st[k]), (long long)*outer);
    }
    return OTTER_OK;
}

/* LayerNormalizationGrad(dY, X, scale, mean, inv_std_dev) -> dX, dScale, dBias (simplified:
 * (dY, X, scale, inv_std_var) -> dX, dScale, with mean 0). With xh = (x - mean) * inv, g = dY * scale:
 * dX = inv * (g - mean(g) - xh * mean(g * xh)) (simplified: without the mean(g) term),
 * dScale = sum over rows of dY * xh, dBias = sum over rows of dY. */
static otter_status ln_grad_common(ot_kernel_ctx *ctx, bool simplified) {
    const otter_tensor *dy, *x, *sc;
    OT_TRY(tr_need(ctx, 0, "dY", &dy));
    OT_TRY(tr_need(ctx, 1, "X", &x));
    OT_TRY(tr_need(ctx, 2, "scale", &sc));
    if (!tr_same_shape(dy, x)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY and X must have one shape");
    int64_t outer, inner;
    size_t inv_i = simplified ? 3 : 4;
    OT_TRY(ln_geometry(ctx, x, 2, simplified ? 0 : 3, inv_i, &outer, &inner));
    const float *DY, *X, *S, *MEAN = NULL, *INV;
    float *tin[5] = {0}, *tout[3] = {0}, *out[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = tr_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = tr_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = tr_in(ctx, 2, &S, &tin[2]);
    if (s == OTTER_OK && !simplified) s = tr_in(ctx, 3, &MEAN, &tin[3]);
    if (s == OTTER_OK) s = tr_in(ctx, inv_i, &INV, &tin[4]);
    size_t n_out = simplified ? 2 : 3;
    for (size_t k = 0; k < n_out && s == OTTER_OK; k++) {
        if (k > 0 && !tr_wanted(ctx, k)) continue;
        const otter_tensor *shape = k == 0 ? x : sc;
        s = tr_out(ctx, k, x->dtype, shape->rank, shape->dims, &o[k], &out[k], &tout[k]);
    }
    if (s == OTTER_OK) {
        float *dX = out[0], *dS = out[1], *dB = out[2];
        if (dS) memset(dS, 0, (size_t)inner * sizeof(float));
        if (dB) memset(dB, 0, (size_t)inner * sizeof(float));
        for (int64_t r = 0; r < outer; r++) {
            const float *dy_r = DY + r * inner, *x_r = X + r * inner;
            float mu = MEAN ? MEAN[r] : 0.0f, inv = INV[r];
            double sg = 0, sgx = 0;
            for (int64_t i = 0; i < inner; i++) {
                float xh = (x_r[i] - mu) * inv, g = dy_r[i] * S[i];
                sg += g, sgx += (double)g * xh;
                if (dS) dS[i] += dy_r[i] * xh;
                if (dB) dB[i] += dy_r[i];
            }
            float mg = simplified ? 0.0f : (float)(sg / (double)inner), mgx = (float)(sgx / (double)inner);
            for (int64_t i = 0; i < inner; i++) {
                float xh = (x_r[i] - mu) * inv;
                dX[r * inner + i] = inv * (dy_r[i] * S[i] - mg - xh * mgx);
            }
        }
        for (size_t k = 0; k < n_out; k++)
            if (o[k]) tr_out_done(o[k], tout[k]);
    } else {
        for (size_t k = 0; k < 3; k++) ot_free(tout[k]);
    }
    for (int k = 0; k < 5; k++) ot_free(tin[k]);
    return s;
}

otter_status ot_kernel_layernorm_grad(ot_kernel_ctx *ctx) { return ln_grad_common(ctx, false); }
otter_status ot_kernel_simplified_layernorm_grad(ot_kernel_ctx *ctx) { return ln_grad_common(ctx, true); }

/* SimplifiedLayerNormalization(X, scale; axis, epsilon) -> Y = X * inv * scale, inv_std_var?
 * with inv = 1 / sqrt(mean(X^2 over the normalized axes) + epsilon) (RMSNorm). */
otter_status ot_kernel_simplified_layernorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *sc;
    OT_TRY(tr_need(ctx, 0, "X", &x));
    OT_TRY(tr_need(ctx, 1, "scale", &sc));
    int64_t outer, inner, axis = otter_node_attr_int(ctx->node, "axis", -1);
    OT_TRY(ln_geometry(ctx, x, 1, 0, 0, &outer, &inner));
    ot_norm_axis(&axis, x->rank);
    float eps = otter_node_attr_float(ctx->node, "epsilon", 1e-5f);
    int64_t sd[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) sd[i] = i < axis ? x->dims[i] : 1;
    const float *X, *S;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *ti = NULL, *Y, *INV = NULL;
    otter_tensor *y, *inv = NULL;
    otter_status s = tr_in(ctx, 0, &X, &t0);
    if (s == OTTER_OK) s = tr_in(ctx, 1, &S, &t1);
    if (s == OTTER_OK) s = tr_out(ctx, 0, x->dtype, x->rank, x->dims, &y, &Y, &ty);
    if (s == OTTER_OK && tr_wanted(ctx, 1)) s = tr_out(ctx, 1, OTTER_DTYPE_FLOAT, x->rank, sd, &inv, &INV, &ti);
    if (s == OTTER_OK) {
        for (int64_t r = 0; r < outer; r++) {
            const float *xr = X + r * inner;
            double sq = 0;
            for (int64_t i = 0; i < inner; i++) sq += (double)xr[i] * xr[i];
            float iv = 1.0f / sqrtf((float)(sq / (double)(inner ? inner : 1)) + eps);
            if (INV) INV[r] = iv;
            for (int64_t i = 0; i < inner; i++) Y[r * inner + i] = xr[i] * iv * S[i];
        }
        tr_out_done(y, ty);
        if (inv) tr_out_done(inv, ti);
    } else {
        ot_free(ty), ot_free(ti);
    }
    ot_free(t0), ot_free(t1);
    return s;
}

/* ---- BatchNormInternal / BatchNormalizationGrad --------------------------------------------------- */

static otter_status bn_shape(const ot_kernel_ctx *ctx, const otter_tensor *x, size_t first, size_t last, int64_t *N,
                             int64_t *C, int64_t *sp) {
    if (x->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' must have rank >= 2 (N, C, ...)",
                            ot_ctx_input_name(ctx, 1));
    *N = x->dims[0], *C = x->dims[1], *sp = 1;
    for (int i = 2; i < x->rank; i++) *sp *= x->dims[i];
    for (size_t i = first; i <= last; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
        if (otter_tensor_numel(t) != *C)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has %lld elements, expected C = %lld", i,
                                ot_ctx_input_name(ctx, i), (long long)otter_tensor_numel(t), (long long)*C);
    }
    return OTTER_OK;
}

/* BatchNormInternal(X, scale, B, input_mean, input_var; epsilon, momentum, training_mode = 1)
 * -> Y, running_mean, running_var, saved_mean, saved_inv_std. Training: batch statistics (biased
 * variance), running = input * momentum + batch * (1 - momentum), saved_inv_std = 1/sqrt(var + eps).
 * Inference: Y from input_mean / input_var, which the other outputs (if named) repeat.
 * In training the running statistics are also written back into input_mean / input_var (float32),
 * as ORT's kernel does (its outputs 1 and 2 alias inputs 3 and 4): the training session binds the
 * checkpoint's frozen statistics there, so training updates them. */
otter_status ot_kernel_batchnorm_internal(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(tr_need(ctx, 0, "X", &x));
    int64_t N, C, sp;
    OT_TRY(bn_shape(ctx, x, 1, 4, &N, &C, &sp));
    float eps = otter_node_attr_float(ctx->node, "epsilon", 1e-5f);
    float mom = otter_node_attr_float(ctx->node, "momentum", 0.9f);
    bool training = otter_node_attr_int(ctx->node, "training_mode", 1) != 0;
    const float *in[5];
    float *tin[5] = {0}, *tout[5] = {0}, *out[5] = {0};
    otter_tensor *o[5] = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 5 && s == OTTER_OK; i++) s = tr_in(ctx, i, &in[i], &tin[i]);
    if (s == OTTER_OK) s = tr_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    for (size_t k = 1; k < 5 && s == OTTER_OK; k++) {
        if (!tr_wanted(ctx, k)) continue;
        const otter_tensor *like = ot_ctx_input(ctx, k < 3 ? k + 2 : k);
        s = tr_out(ctx, k, like->dtype, 1, &C, &o[k], &out[k], &tout[k]);
    }
    for (int64_t c = 0; s == OTTER_OK && c < C; c++) {
        double mu = in[3][c], var = in[4][c];
        if (training) {
            double sum = 0, sq = 0, cnt = (double)(N * sp);
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < sp; i++) sum += in[0][(n * C + c) * sp + i];
            mu = cnt > 0 ? sum / cnt : 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < sp; i++) {
                    double d = in[0][(n * C + c) * sp + i] - mu;
                    sq += d * d;
                }
            var = cnt > 0 ? sq / cnt : 0;
        }
        float inv = 1.0f / sqrtf((float)var + eps), k = in[1][c] * inv, sh = in[2][c] - (float)mu * k;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < sp; i++) {
                int64_t j = (n * C + c) * sp + i;
                out[0][j] = in[0][j] * k + sh;
            }
        float run_mean = training ? in[3][c] * mom + (float)mu * (1 - mom) : in[3][c];
        float run_var = training ? in[4][c] * mom + (float)var * (1 - mom) : in[4][c];
        if (out[1]) out[1][c] = run_mean;
        if (out[2]) out[2][c] = run_var;
        if (training && !tin[3] && !tin[4]) { /* channel c's statistics are not read again */
            ((float *)ctx->inputs[3]->data)[c] = run_mean;
            ((float *)ctx->inputs[4]->data)[c] = run_var;
        }
        if (out[3]) out[3][c] = (float)mu;
        if (out[4]) out[4][c] = inv;
    }
    for (size_t k = 0; k < 5; k++) {
        if (s == OTTER_OK && o[k])
            tr_out_done(o[k], tout[k]);
        else
            ot_free(tout[k]);
        ot_free(tin[k]);
    }
    return s;
}

/* BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias:
 * dBias = sum dY, dScale = sum dY * xh, dX = scale * inv / m * (m * dY - dBias - xh * dScale),
 * xh = (X - mean) * inv, m = N * spatial (per channel). */
otter_status ot_kernel_batchnorm_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(tr_need(ctx, 0, "dY", &dy));
    OT_TRY(tr_need(ctx, 1, "X", &x));
    if (!tr_same_shape(dy, x)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY and X must have one shape");
    int64_t N, C, sp;
    OT_TRY(bn_shape(ctx, x, 2, 4, &N, &C, &sp));
    const float *in[5];
    float *tin[5] = {0}, *tout[3] = {0}, *out[3] = {0};
    otter_tensor *o[3] = {0};
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < 5 && s == OTTER_OK; i++) s = tr_in(ctx, i, &in[i], &tin[i]);
    if (s == OTTER_OK) s = tr_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    for (size_t k = 1; k < 3 && s == OTTER_OK; k++)
        if (tr_wanted(ctx, k)) s = tr_out(ctx, k, x->dtype, 1, &C, &o[k], &out[k], &tout[k]);
    double m = (double)(N * sp);
    for (int64_t c = 0; s == OTTER_OK && c < C; c++) {
        double db = 0, ds = 0;
        float mu = in[3][c], inv = in[4][c];
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < sp; i++) {
                int64_t j = (n * C + c) * sp + i;
                db += in[0][j];
                ds += (double)in[0][j] * (in[1][j] - mu) * inv;
            }
        float k = m > 0 ? (float)(in[2][c] * inv / m) : 0.0f;
        for (int64_t n = 0; n < N; n++)
            for (int64_t i = 0; i < sp; i++) {
                int64_t j = (n * C + c) * sp + i;
                out[0][j] = k * ((float)m * in[0][j] - (float)db - (in[1][j] - mu) * inv * (float)ds);
            }
        if (out[1]) out[1][c] = (float)ds;
        if (out[2]) out[2][c] = (float)db;
    }
    for (size_t k = 0; k < 3; k++) {
        if (s == OTTER_OK && o[k])
            tr_out_done(o[k], tout[k]);
        else
            ot_free(tout[k]);
    }
    for (size_t k = 0; k < 5; k++) ot_free(tin[k]);
    return s;
}

/* ---- spatial geometry (runtime/ops/conv_geom.h) ------------------------------------------------- */

/* dY's spatial dims must be the computed output dims. */
static otter_status tg_check_dy(const ot_kernel_ctx *ctx, const ot_conv_geom *g, const otter_tensor *dy,
                                const int64_t *want) {
    char s1[128];
    for (int i = 0; i < g->nd; i++)
        if (dy->dims[2 + i] != want[i]) {
            int64_t d[2 + OT_SP] = {dy->dims[0], dy->dims[1]};
            for (int j = 0; j < g->nd; j++) d[2 + j] = want[j];
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' does not have the forward output's shape %s",
                                ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, 2 + g->nd, d));
        }
    return OTTER_OK;
}

/* col[(c, kd, kh, kw)][od, oh, ow] = x[c][id][ih][iw] or 0 outside (C channels, 3-D geometry). */
static void tr_im2col(const float *x, int64_t C, const ot_conv_geom *g, float *col) {
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];
    float *dst = col;
    for (int64_t c = 0; c < C; c++)
        for (int64_t kd = 0; kd < g->k[0]; kd++)
            for (int64_t kh = 0; kh < g->k[1]; kh++)
                for (int64_t kw = 0; kw < g->k[2]; kw++)
                    for (int64_t od = 0; od < g->out[0]; od++) {
                        int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0];
                        for (int64_t oh = 0; oh < g->out[1]; oh++) {
                            int64_t ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1];
                            bool row_ok = id >= 0 && id < D && ih >= 0 && ih < H;
                            const float *src = x + ((c * D + (row_ok ? id : 0)) * H + (row_ok ? ih : 0)) * W;
                            for (int64_t ow = 0; ow < g->out[2]; ow++) {
                                int64_t iw = ow * g->stride[2] - g->pb[2] + kw * g->dil[2];
                                *dst++ = row_ok && iw >= 0 && iw < W ? src[iw] : 0.0f;
                            }
                        }
                    }
}

static otter_status conv_inputs(const ot_kernel_ctx *ctx, const otter_tensor **dy, const otter_tensor **x,
                                const otter_tensor **w) {
    char s1[128], s2[128];
    OT_TRY(tr_need(ctx, 0, "dY", dy));
    OT_TRY(tr_need(ctx, 1, "X", x));
    OT_TRY(tr_need(ctx, 2, "W", w));
    if ((*x)->rank < 3 || (*x)->rank > 2 + OT_SP || (*w)->rank != (*x)->rank || (*dy)->rank != (*x)->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s and W '%s' %s must have one rank in 3..5 (dY too)",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, (*x)->rank, (*x)->dims),
                            ot_ctx_input_name(ctx, 2), ot_shape_str(s2, sizeof s2, (*w)->rank, (*w)->dims));
    if ((*dy)->dtype != (*x)->dtype || (*w)->dtype != (*x)->dtype || !tr_is_float((*x)->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY, X and W must share one float type");
    return OTTER_OK;
}

/* col2im over one image for ConvGrad: per kernel tap, the valid output range along w is computed
 * once (no per-element bounds tests). Columns of image b of a chunk start at col + b * osz in rows
 * of ld elements. */

/* dst[i] += src[i] for i < n, four lanes at a time (GCC/Clang vector extension; one add per element,
 * so the same bits as the scalar loop, which GCC -O2 leaves scalar). */
static inline void tg_add_row(float *restrict dst, const float *restrict src, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) ot_v4_store(dst + i, ot_v4_load(dst + i) + ot_v4_load(src + i));
    for (; i < n; i++) dst[i] += src[i];
}

/* x[c][id][ih][iw] += col[(c, kd, kh, kw) * ld + (od, oh, ow)] for channels [c0, c1) of one image
 * (x points at channel 0; the adjoint of ot_im2col). */
static void tg_col2im_ld(const float *col, int64_t c0, int64_t c1, const ot_conv_geom *g, float *x, int64_t ld) {
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], sw = g->stride[2];
    for (int64_t c = c0; c < c1; c++) {
        int64_t r = c * g->k_size;
        for (int64_t kd = 0; kd < g->k[0]; kd++)
            for (int64_t kh = 0; kh < g->k[1]; kh++)
                for (int64_t kw = 0; kw < g->k[2]; kw++, r++) {
                    const float *src = col + r * ld;
                    int64_t offw = kw * g->dil[2] - g->pb[2], wlo, whi;
                    ot_conv_valid_range(offw, sw, W, OW, &wlo, &whi);
                    for (int64_t od = 0; od < g->out[0]; od++) {
                        int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0];
                        if (id < 0 || id >= D) continue;
                        for (int64_t oh = 0; oh < OH; oh++) {
                            int64_t ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1];
                            if (ih < 0 || ih >= H) continue;
                            const float *restrict srow = src + (od * OH + oh) * OW;
                            float *restrict dst = x + ((c * D + id) * H + ih) * W + offw;
                            if (sw == 1)
                                tg_add_row(dst + wlo, srow + wlo, whi - wlo);
                            else
                                for (int64_t ow = wlo; ow < whi; ow++) dst[ow * sw] += srow[ow];
                        }
                    }
                }
    }
}

/* One chunk of nb images [n0, n0 + nb) and one group, shared by the parallel pieces below. */
typedef struct cg_args {
    const ot_conv_geom *g;
    const float *DY;
    float *col, *dyc, *dx; /* dcol: rows x ld; dyc: Mg x ld (dY of the chunk, images side by side) */
    int64_t n0, nb, gr, C, M, Cg, Mg, ld;
} cg_args;

/* Images [b0, b1) of the chunk: dY_g into dyc. */
static void cg_gather(void *arg, int64_t b0, int64_t b1) {
    const cg_args *a = arg;
    const int64_t osz = a->g->out_size;
    for (int64_t b = b0; b < b1; b++) {
        const float *dy = a->DY + ((a->n0 + b) * a->M + a->gr * a->Mg) * osz;
        for (int64_t m = 0; m < a->Mg; m++)
            memcpy(a->dyc + m * a->ld + b * osz, dy + m * osz, (size_t)osz * sizeof(float));
    }
}

/* dW_g = dY_g col^T as one product over all positions p = (n, od, oh, ow) of the batch, with A =
 * dY_g (Mg x positions) and B = col^T (positions x taps) packed straight from dY and X: no im2col
 * matrix, no dY copy. Per tap r = (c, kd, kh, kw), tap[r] = {offset in X_g of the input read for
 * output 0 (may lie in the padding), valid output range [lo, hi) along d, h, w}. */
#define DW_TAP 7
typedef struct dw_args {
    const ot_conv_geom *g;
    const float *X, *DY;       /* group gr's first channel of image 0 */
    int64_t xstride, dystride; /* per image */
    const int64_t *tap;
    const ot_conv_pad *pad; /* dw_pack_x_avx2: X zero-padded */
    int64_t pad_group;      /* offset of group gr's first channel in a padded row */
} dw_args;

static void dw_taps(const ot_conv_geom *g, int64_t Cg, int64_t *tap) {
    const int64_t HW = g->in[1] * g->in[2], W = g->in[2];
    for (int64_t c = 0; c < Cg; c++)
        for (int64_t kd = 0; kd < g->k[0]; kd++)
            for (int64_t kh = 0; kh < g->k[1]; kh++)
                for (int64_t kw = 0; kw < g->k[2]; kw++, tap += DW_TAP) {
                    int64_t off[OT_SP] = {kd * g->dil[0] - g->pb[0], kh * g->dil[1] - g->pb[1],
                                          kw * g->dil[2] - g->pb[2]};
                    tap[0] = c * g->in_size + off[0] * HW + off[1] * W + off[2];
                    for (int i = 0; i < OT_SP; i++)
                        ot_conv_valid_range(off[i], g->stride[i], g->in[i], g->out[i], &tap[1 + 2 * i],
                                            &tap[2 + 2 * i]);
                }
}

/* A slab: dst[k][i] = dY_g[i0 + i][p0 + k]; each image's positions are contiguous. */
static void dw_pack_dy(const void *arg, int64_t i0, int64_t mr, int64_t p0, int64_t kc, float *dst) {
    const dw_args *a = arg;
    const int64_t osz = a->g->out_size;
    for (int64_t k = 0; k < kc;) {
        int64_t n = (p0 + k) / osz, q = (p0 + k) % osz, len = osz - q < kc - k ? osz - q : kc - k;
        const float *restrict src = a->DY + n * a->dystride + i0 * osz + q;
        float *restrict d = dst + k * OT_SGEMM_MR;
        if (mr == OT_SGEMM_MR) /* whole rows: the output written contiguously */
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < OT_SGEMM_MR; i++) d[j * OT_SGEMM_MR + i] = src[i * osz + j];
        else
            for (int64_t j = 0; j < len; j++)
                for (int64_t i = 0; i < OT_SGEMM_MR; i++) d[j * OT_SGEMM_MR + i] = i < mr ? src[i * osz + j] : 0.0f;
        k += len;
    }
}

/* B slab: dst[k][j] = X_g's input of tap j0 + j at position p0 + k, or 0 in the padding. Positions
 * go in runs along one output row, where each tap's valid part is one range (branch-free loops). */
static void dw_pack_x(const void *arg, int64_t j0, int64_t nr, int64_t p0, int64_t kc, float *dst) {
    const dw_args *a = arg;
    const ot_conv_geom *g = a->g;
    const int64_t OH = g->out[1], OW = g->out[2], osz = g->out_size, sw = g->stride[2];
    if (nr < OT_SGEMM_NR)
        for (int64_t k = 0; k < kc; k++)
            for (int64_t j = nr; j < OT_SGEMM_NR; j++) dst[k * OT_SGEMM_NR + j] = 0.0f;
    for (int64_t k = 0; k < kc;) {
        int64_t n = (p0 + k) / osz, q = (p0 + k) % osz, od = q / (OH * OW), oh = q / OW % OH, o0 = q % OW;
        int64_t o1 = OW - o0 < kc - k ? OW : o0 + kc - k;
        const float *row = a->X + n * a->xstride + (od * g->stride[0] * g->in[1] + oh * g->stride[1]) * g->in[2];
        for (int64_t j = 0; j < nr; j++) {
            const int64_t *t = a->tap + (j0 + j) * DW_TAP;
            float *restrict d = dst + k * OT_SGEMM_NR + j; /* d[(o - o0) * NR]: output column o */
            const float *restrict src = row + t[0];
            int64_t lo = o0, hi = o0;
            if (od >= t[1] && od < t[2] && oh >= t[3] && oh < t[4]) {
                lo = t[5] > o0 ? (t[5] < o1 ? t[5] : o1) : o0;
                hi = t[6] > lo ? (t[6] < o1 ? t[6] : o1) : lo;
            }
            int64_t o = o0;
            for (; o < lo; o++) d[(o - o0) * OT_SGEMM_NR] = 0.0f;
            for (; o < hi; o++) d[(o - o0) * OT_SGEMM_NR] = src[o * sw];
            for (; o < o1; o++) d[(o - o0) * OT_SGEMM_NR] = 0.0f;
        }
        k += o1 - o0;
    }
}

#ifdef OT_TN_X86
_Static_assert(OT_SGEMM_MR <= 8 && OT_SGEMM_NR % 8 == 0, "the AVX2 packers move 8 x 8 blocks");

/* v[i][j] becomes v[j][i]. */
__attribute__((target("avx2"), always_inline)) static inline void dw_transpose8(__m256 *v) {
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20), v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20), v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31), v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31), v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* The first n <= 8 floats at p, zeros after: a plain load, or a masked one (slow on some CPUs)
 * for a short block. */
__attribute__((target("avx2"), always_inline)) static inline __m256 dw_load_n(const float *p, int64_t n) {
    if (n == 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p,
                              _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

/* dw_pack_dy with 8 x 8 transposes: per run of positions, blocks of 8 from the MR rows of dY. */
__attribute__((target("avx2"))) static void dw_pack_dy_avx2(const void *arg, int64_t i0, int64_t mr, int64_t p0,
                                                            int64_t kc, float *dst) {
    const dw_args *a = arg;
    const int64_t osz = a->g->out_size;
    const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(OT_SGEMM_MR), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t k = 0; k < kc;) {
        int64_t n = (p0 + k) / osz, q = (p0 + k) % osz, len = osz - q < kc - k ? osz - q : kc - k;
        const float *src = a->DY + n * a->dystride + i0 * osz + q;
        for (int64_t j = 0; j < len; j += 8) {
            int64_t cols = len - j < 8 ? len - j : 8;
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = i < mr ? dw_load_n(src + i * osz + j, cols) : _mm256_setzero_ps();
            dw_transpose8(v);
            /* row i's 8-lane store spills into row i + 1, written next; the last row stores MR lanes */
            float *d = dst + (k + j) * OT_SGEMM_MR;
            for (int64_t i = 0; i + 1 < cols; i++) _mm256_storeu_ps(d + i * OT_SGEMM_MR, v[i]);
            _mm256_maskstore_ps(d + (cols - 1) * OT_SGEMM_MR, keep, v[cols - 1]);
        }
        k += len;
    }
}

/* dw_pack_x from X zero-padded (2-D, stride 1 along w): tap (c, kh, kw) at output (oh, ow) reads
 * padded row oh * sh + kh * dh, column ow + kw * dw of channel c, so a run's inputs are 8-float
 * loads at one offset per tap, without tests, and 8 x 8 transposes make the slab's rows. A run's
 * last loads may read past it (into the next channel or the buffer's slack): those lanes are not
 * stored. */
__attribute__((target("avx2"))) static void dw_pack_x_avx2(const void *arg, int64_t j0, int64_t nr, int64_t p0,
                                                           int64_t kc, float *dst) {
    const dw_args *a = arg;
    const ot_conv_geom *g = a->g;
    const ot_conv_pad *pad = a->pad;
    const int64_t OW = g->out[2], osz = g->out_size, KH = g->k[1], KW = g->k[2];
    int64_t off[OT_SGEMM_NR];
    for (int64_t j = 0; j < nr; j++) {
        int64_t r = j0 + j, c = r / (KH * KW), kh = r / KW % KH, kw = r % KW;
        off[j] = a->pad_group + kh * g->dil[1] * pad->row + c * pad->QW + kw * g->dil[2];
    }
    for (int64_t k = 0; k < kc;) {
        int64_t n = (p0 + k) / osz, q = (p0 + k) % osz, oh = q / OW, o0 = q % OW;
        int64_t o1 = OW - o0 < kc - k ? OW : o0 + kc - k;
        const float *row = pad->xp + n * pad->image + oh * g->stride[1] * pad->row;
        for (int64_t ob = o0; ob < o1; ob += 8) {
            float *d = dst + (k + ob - o0) * OT_SGEMM_NR;
            int64_t rows = o1 - ob < 8 ? o1 - ob : 8;
            for (int jg = 0; jg < OT_SGEMM_NR; jg += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++)
                    v[i] = jg + i < nr ? _mm256_loadu_ps(row + off[jg + i] + ob) : _mm256_setzero_ps();
                dw_transpose8(v);
                for (int64_t i = 0; i < rows; i++) _mm256_storeu_ps(d + i * OT_SGEMM_NR + jg, v[i]);
            }
        }
        k += o1 - o0;
    }
}

static bool tn_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* With AVX2, the AVX2 packers; for im2col(X) only in 2-D (or 1-D) at stride 1 along w, with X
 * zero-padded into pad first (scratch). */
static otter_status dw_avx2_packers(ot_kernel_ctx *ctx, const ot_conv_geom *g, const float *X, int64_t N, int64_t C,
                                    ot_conv_pad *pad, ot_sgemm_pack_fn *pack_dy, ot_sgemm_pack_fn *pack_x) {
    if (!tn_avx2()) return OTTER_OK;
    *pack_dy = dw_pack_dy_avx2;
    if (g->stride[2] != 1 || g->k[0] != 1 || g->in[0] != 1 || N <= 0 || g->out_size <= 0) return OTTER_OK;
    *pad = (ot_conv_pad){.x = X,
                         .C = C,
                         .H = g->in[1],
                         .W = g->in[2],
                         .pad_h = g->pb[1],
                         .pad_w = g->pb[2],
                         .phases = 1,
                         .PH = (g->out[1] - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1,
                         .QW = g->out[2] + (g->k[2] - 1) * g->dil[2]};
    pad->row = C * pad->QW, pad->image = pad->PH * pad->row;
    if (!(pad->xp = ot_ctx_scratch(ctx, (size_t)(N * pad->image + OT_CONV_PAD_SLACK) * sizeof(float))))
        return OTTER_ERR_NOMEM;
    memset(pad->xp + N * pad->image, 0, OT_CONV_PAD_SLACK * sizeof(float));
    ot_parallel_for(ctx, N * pad->PH, 1, ot_conv_pad_rows, pad);
    *pack_x = dw_pack_x_avx2;
    return OTTER_OK;
}
#endif

/* Tasks (image b, channel c) in [t0, t1): dX[n0 + b][gr*Cg + c] += col2im of dcol. */
static void cg_scatter(void *arg, int64_t t0, int64_t t1) {
    const cg_args *a = arg;
    const ot_conv_geom *g = a->g;
    for (int64_t t = t0; t < t1;) {
        int64_t b = t / a->Cg, c0 = t % a->Cg, c1 = a->Cg;
        if (c1 - c0 > t1 - t) c1 = c0 + (t1 - t);
        tg_col2im_ld(a->col + b * g->out_size, c0, c1, g, a->dx + ((a->n0 + b) * a->C + a->gr * a->Cg) * g->in_size,
                     a->ld);
        t += c1 - c0;
    }
}

/* dB[m] = sum of dY[n][m][i] over n and i; channels [m0, m1). Each row is summed in 16 float lanes
 * (a lane adds osz / 16 values: vectorized, no long latency chain), the rows' sums in double. */
typedef struct {
    const float *DY;
    float *db;
    int64_t N, M, osz;
} db_args;

static void db_channels(void *arg, int64_t m0, int64_t m1) {
    const db_args *d = arg;
    for (int64_t m = m0; m < m1; m++) {
        double sum = 0;
        for (int64_t n = 0; n < d->N; n++) {
            const float *r = d->DY + (n * d->M + m) * d->osz;
            ot_v4 a = {0, 0, 0, 0}, b = a, c = a, e = a;
            int64_t i = 0;
            for (; i + 16 <= d->osz; i += 16) {
                a += ot_v4_load(r + i), b += ot_v4_load(r + i + 4);
                c += ot_v4_load(r + i + 8), e += ot_v4_load(r + i + 12);
            }
            ot_v4 t = (a + b) + (c + e);
            double row = ((double)t[0] + t[1]) + ((double)t[2] + t[3]);
            for (; i < d->osz; i++) row += r[i];
            sum += row;
        }
        d->db[m] = (float)sum;
    }
}

/* dX = conv(dY, W^T flipped) over window win (see tr_conv_grad). */
static otter_status conv_grad_dx_direct(ot_kernel_ctx *ctx, const ot_conv_window *win, const float *DY, const float *W,
                                        int64_t N, int64_t C, int64_t M, int64_t group, int64_t ks, float *dx) {
    const int64_t Cg = C / group, Mg = M / group;
    float *wt = ot_ctx_scratch(ctx, (size_t)(C * Mg * ks) * sizeof(float));
    if (!wt) return OTTER_ERR_NOMEM;
    for (int64_t gr = 0; gr < group; gr++)
        for (int64_t m = 0; m < Mg; m++)
            for (int64_t c = 0; c < Cg; c++)
                for (int64_t t = 0; t < ks; t++)
                    wt[((gr * Cg + c) * Mg + m) * ks + ks - 1 - t] = W[((gr * Mg + m) * Cg + c) * ks + t];
    const ot_conv_direct d = {
        .x = DY, .w = wt, .y = dx, .N = N, .C = M, .M = C, .group = group, .win = *win, .winograd = ctx->winograd};
    return ot_conv_direct_run(ctx, &d);
}

/* ConvGrad(dY, X, W; Conv's attributes) -> dX?, dW?, dB?. dW_g = dY_g col^T per group, one product
 * over the batch with col = im2col(X_g) packed on the fly (dw_args). dX: at stride 1 the direct
 * convolution below; else over chunks of images and each group, dcol = W_g^T dY_g with the chunk's
 * dY_g side by side (one matrix of chunk x out_size columns), one sgemm, and dX_g = col2im(dcol),
 * parallel over (image, channel). dB = sum of dY over N and space. */
otter_status ot_kernel_conv_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x, *w;
    char s1[128], s2[128];
    OT_TRY(conv_inputs(ctx, &dy, &x, &w));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nd = x->rank - 2;
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0], group = otter_node_attr_int(ctx->node, "group", 1);
    for (int i = 0; i < g.nd; i++) g.in[i] = x->dims[2 + i], g.k[i] = w->dims[2 + i];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || dy->dims[0] != N || dy->dims[1] != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X %s, W %s, dY and group %lld don't agree",
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    OT_TRY(ot_conv_geom_forward(ctx, &g, false));
    OT_TRY(tg_check_dy(ctx, &g, dy, g.out));
    ot_conv_geom_to3(&g);
    int64_t Cg = C / group, Mg = M / group, rows = Cg * g.k_size, osz = g.out_size;
    bool want_dx = tr_wanted(ctx, 0), want_dw = tr_wanted(ctx, 1), want_db = tr_wanted(ctx, 2);
    const float *DY, *X, *W;
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0}, *col = NULL, *dyc = NULL;
    otter_tensor *o[3] = {0};
    otter_status s = tr_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = tr_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = tr_in(ctx, 2, &W, &tin[2]);
    if (s == OTTER_OK && want_dx) s = tr_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    if (s == OTTER_OK && want_dw) s = tr_out(ctx, 1, x->dtype, w->rank, w->dims, &o[1], &out[1], &tout[1]);
    if (s == OTTER_OK && want_db) s = tr_out(ctx, 2, x->dtype, 1, &M, &o[2], &out[2], &tout[2]);
    /* At stride 1, dX is the convolution of dY with W flipped in space and transposed in channels
     * (pads (k - 1) * dil - pad): the direct kernel computes it without col2im. */
    ot_conv_window dx_win = {.in = {0}};
    bool stride1 = true;
    for (int i = 0; i < OT_SP; i++) {
        dx_win.in[i] = g.out[i], dx_win.out[i] = g.in[i], dx_win.k[i] = g.k[i], dx_win.stride[i] = 1;
        dx_win.dil[i] = g.dil[i], dx_win.pad_begin[i] = (g.k[i] - 1) * g.dil[i] - g.pb[i];
        stride1 = stride1 && g.stride[i] == 1;
    }
    bool direct_dx = want_dx && stride1 && N > 0 && ot_conv_direct_supported(&dx_win);
    if (s == OTTER_OK && direct_dx) s = conv_grad_dx_direct(ctx, &dx_win, DY, W, N, C, M, group, g.k_size, out[0]);
    bool loop_dx = want_dx && !direct_dx;
    if (s == OTTER_OK && want_dw && rows > 0 && Mg > 0) {
        int64_t *tap = ot_ctx_scratch(ctx, (size_t)(rows * DW_TAP) * sizeof(int64_t));
        if (!tap)
            s = OTTER_ERR_NOMEM;
        else
            dw_taps(&g, Cg, tap);
        ot_sgemm_pack_fn pack_dy = dw_pack_dy, pack_x = dw_pack_x;
        ot_conv_pad pad = {.xp = NULL};
#ifdef OT_TN_X86
        if (s == OTTER_OK) s = dw_avx2_packers(ctx, &g, X, N, C, &pad, &pack_dy, &pack_x);
#endif
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            dw_args d = {.g = &g,
                         .X = X + gr * Cg * g.in_size,
                         .DY = DY + gr * Mg * osz,
                         .xstride = C * g.in_size,
                         .dystride = M * osz,
                         .tap = tap,
                         .pad = &pad,
                         .pad_group = gr * Cg * pad.QW};
            s = ot_sgemm_packing(ctx, Mg, rows, N * osz, pack_dy, pack_x, &d, 0.0f, out[1] + gr * Mg * rows, rows);
        }
    }
    /* chunk: enough images for about 4096 columns, at most N; one image (no dY copy) from 1024 columns */
    int64_t chunk = osz >= 1024 ? 1 : osz > 0 ? (4096 + osz - 1) / osz : 1;
    if (chunk > N) chunk = N;
    if (chunk < 1) chunk = 1;
    int64_t ld = chunk * osz;
    bool work = loop_dx && N > 0 && osz > 0 && rows > 0 && Mg > 0;
    if (s == OTTER_OK && work &&
        (!(col = ot_ctx_scratch(ctx, (size_t)(rows * ld) * sizeof(float))) ||
         (chunk > 1 && !(dyc = ot_ctx_scratch(ctx, (size_t)(Mg * ld) * sizeof(float))))))
        s = OTTER_ERR_NOMEM;
    if (s == OTTER_OK && loop_dx) memset(out[0], 0, (size_t)otter_tensor_numel(x) * sizeof(float));
    for (int64_t n0 = 0; s == OTTER_OK && work && n0 < N; n0 += chunk)
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            int64_t nb = N - n0 < chunk ? N - n0 : chunk, cols = nb * osz;
            cg_args a = {.g = &g,
                         .DY = DY,
                         .col = col,
                         .dyc = dyc,
                         .dx = out[0],
                         .n0 = n0,
                         .nb = nb,
                         .gr = gr,
                         .C = C,
                         .M = M,
                         .Cg = Cg,
                         .Mg = Mg,
                         .ld = ld};
            if (chunk > 1) ot_parallel_for(ctx, nb, 1, cg_gather, &a);
            const float *dyp = chunk > 1 ? dyc : DY + (n0 * M + gr * Mg) * osz; /* ld = osz when chunk is 1 */
            s = ot_sgemm(ctx, true, false, rows, cols, Mg, 1.0f, W + gr * Mg * rows, rows, dyp, ld, 0.0f, col, ld);
            if (s == OTTER_OK) ot_parallel_for(ctx, nb * Cg, 1 + 4096 / (g.k_size * osz + 1), cg_scatter, &a);
        }
    if (s == OTTER_OK && want_db) {
        db_args d = {DY, out[2], N, M, osz};
        ot_parallel_for(ctx, M, 1 + 16384 / (N * osz + 1), db_channels, &d);
    }
    for (int k = 0; k < 3; k++) {
        if (s == OTTER_OK && o[k])
            tr_out_done(o[k], tout[k]);
        else
            ot_free(tout[k]);
        ot_free(tin[k]);
    }
    return s;
}

/* ConvTransposeGrad(dY, X, W; ConvTranspose's attributes) -> dX?, dW?, dB?. ConvTranspose is the
 * adjoint of a conv from its output (image: dY's spatial size) to its input (columns: X's), so
 * with col = im2col(dY_g): dX_g = W_g col, dW_g += X_g col^T, dB = sum of dY. */
otter_status ot_kernel_conv_transpose_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x, *w;
    char s1[128], s2[128];
    OT_TRY(conv_inputs(ctx, &dy, &x, &w));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nd = x->rank - 2;
    int64_t N = x->dims[0], C = x->dims[1], group = otter_node_attr_int(ctx->node, "group", 1);
    if (group < 1 || C % group || w->dims[0] != C || dy->dims[0] != N || dy->dims[1] != w->dims[1] * group)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X %s, W %s, dY and group %lld don't agree",
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    int64_t Mg = w->dims[1], M = Mg * group, Cg = C / group;
    bool has, has_pads;
    int64_t pads[2 * OT_SP] = {0}, opad[OT_SP] = {0};
    for (int i = 0; i < g.nd; i++) {
        g.k[i] = w->dims[2 + i], g.stride[i] = 1, g.dil[i] = 1;
        g.out[i] = x->dims[2 + i], g.in[i] = dy->dims[2 + i];
    }
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", g.nd, g.stride, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "dilations", g.nd, g.dil, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "output_padding", g.nd, opad, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * g.nd, pads, &has_pads));
    const otter_attr *osa = otter_node_attr(ctx->node, "output_shape");
    bool has_os = osa && osa->n_ints > 0;
    ot_auto_pad pad = ot_auto_pad_from(otter_node_attr_string(ctx->node, "auto_pad", "NOTSET"));
    for (int i = 0; i < g.nd; i++) {
        int64_t want = -1;
        g.pb[i] = pads[i], g.pe[i] = pads[g.nd + i];
        ot_window_status ws = ot_window_transpose_axis(g.out[i], g.k[i], g.stride[i], g.dil[i], opad[i], pad,
                                                       has_os ? osa->ints[osa->n_ints - (size_t)g.nd + (size_t)i] : -1,
                                                       has_pads, &g.pb[i], &g.pe[i], &want);
        if (ws == OT_WINDOW_BAD_PARAM)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "invalid stride/dilation along spatial axis %d", i);
        if (ws != OT_WINDOW_OK || dy->dims[2 + i] != want)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' spatial axis %d is %lld, the forward output has %lld",
                                ot_ctx_input_name(ctx, 0), i, (long long)dy->dims[2 + i], (long long)want);
    }
    ot_conv_geom_to3(&g);
    int64_t rows = Mg * g.k_size, isz = g.out_size, osz = g.in_size;
    bool want_dx = tr_wanted(ctx, 0), want_dw = tr_wanted(ctx, 1), want_db = tr_wanted(ctx, 2);
    const float *DY, *X, *W;
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0}, *col = NULL;
    otter_tensor *o[3] = {0};
    otter_status s = tr_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = tr_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = tr_in(ctx, 2, &W, &tin[2]);
    if (s == OTTER_OK && want_dx) s = tr_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    if (s == OTTER_OK && want_dw) s = tr_out(ctx, 1, x->dtype, w->rank, w->dims, &o[1], &out[1], &tout[1]);
    if (s == OTTER_OK && want_db) s = tr_out(ctx, 2, x->dtype, 1, &M, &o[2], &out[2], &tout[2]);
    if (s == OTTER_OK && (want_dx || want_dw) &&
        !(col = ot_malloc((size_t)(rows * isz > 0 ? rows * isz : 1) * sizeof(float))))
        s = OT_NOMEM();
    if (s == OTTER_OK && out[1]) memset(out[1], 0, (size_t)otter_tensor_numel(w) * sizeof(float));
    for (int64_t n = 0; s == OTTER_OK && n < N && (want_dx || want_dw); n++)
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            const float *dyg = DY + (n * M + gr * Mg) * osz, *xg = X + (n * C + gr * Cg) * isz;
            const float *wg = W + gr * Cg * rows;
            tr_im2col(dyg, Mg, &g, col);
            if (want_dx)
                s = ot_sgemm(ctx, false, false, Cg, isz, rows, 1.0f, wg, rows, col, isz, 0.0f,
                             out[0] + (n * C + gr * Cg) * isz, isz);
            if (s == OTTER_OK && want_dw)
                s = ot_sgemm(ctx, false, true, Cg, rows, isz, 1.0f, xg, isz, col, isz, 1.0f, out[1] + gr * Cg * rows,
                             rows);
        }
    if (s == OTTER_OK && want_db)
        for (int64_t m = 0; m < M; m++) {
            double sum = 0;
            for (int64_t n = 0; n < N; n++)
                for (int64_t i = 0; i < osz; i++) sum += DY[(n * M + m) * osz + i];
            out[2][m] = (float)sum;
        }
    ot_free(col);
    for (int k = 0; k < 3; k++) {
        if (s == OTTER_OK && o[k])
            tr_out_done(o[k], tout[k]);
        else
            ot_free(tout[k]);
        ot_free(tin[k]);
    }
    return s;
}

/* ---- MaxPoolGrad / AveragePoolGrad ------------------------------------------------------------------- */

/* dX's shape is not derivable from dY and the attributes (floor division loses it): take it from
 * the declared type of output 0 in the model's graph (value_info, inputs, outputs), or else of the
 * forward input it is the gradient of ("<X>_grad" -> "<X>"). Fixed dims as declared; a symbolic or
 * unknown dim takes dY's dim at the same axis (batch and channel). */
/* A declared tensor type with a shape for name: value_info first, then outputs, then inputs. */
static const otter_type *declared_shape(const otter_graph *g, const char *name) {
    const otter_value *lists[3] = {g->value_info, g->outputs, g->inputs};
    size_t counts[3] = {g->n_value_info, g->n_outputs, g->n_inputs};
    for (int l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l]; i++) {
            const otter_value *v = &lists[l][i];
            if (v->has_type && v->type.kind == OTTER_TYPE_TENSOR && v->type.rank >= 0 && ot_streq(v->name, name))
                return &v->type;
        }
    return NULL;
}

static otter_status pool_grad_shape(const ot_kernel_ctx *ctx, const otter_tensor *dy, int *rank, int64_t *dims) {
    const char *name = ctx->node->n_outputs ? ctx->node->outputs[0] : "";
    const otter_type *t = NULL;
    const otter_graph *gr = ctx->model ? ctx->model->graph : NULL;
    if (gr && !ot_str_empty(name)) {
        t = declared_shape(gr, name);
        size_t len = strlen(name);
        if (!t && len > 5 && strcmp(name + len - 5, "_grad") == 0) {
            char *fwd = ot_strndup(name, len - 5);
            if (!fwd) return OT_NOMEM();
            t = declared_shape(gr, fwd);
            ot_free(fwd);
        }
    }
    if (!t || t->kind != OTTER_TYPE_TENSOR || t->rank < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "the shape of output '%s' (the pooled input X) is not derivable from dY; declare it in the "
                            "graph's value_info",
                            name);
    if (t->rank != dy->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output '%s' is declared with rank %d, dY '%s' has rank %d", name,
                            t->rank, ot_ctx_input_name(ctx, 0), dy->rank);
    *rank = t->rank;
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i].value >= 0 ? t->dims[i].value : dy->dims[i];
    return OTTER_OK;
}

/* dX = 0, then dX[Indices[i]] += dY[i] (only where y[i] > 0 with y) over a range of (n, c) planes
 * [b, e). Each plane has px elements of dX and py of dY / Indices; an index outside its own plane
 * (another chunk may be writing there) records its position in `stray` and stops the chunk; the
 * caller then redoes the whole tensor as one plane. */
typedef struct pool_scatter {
    const float *dy, *y; /* y: MaxPool's output for a ReluGrad after the scatter, or NULL */
    const int64_t *i64;  /* the indices: one of the two */
    const int32_t *i32;
    float *dx;
    int64_t px, py;
    int64_t W; /* planes are H x W and dY's (H / 2) x (W / 2), else 0 */
    bool avx2;
    atomic_llong stray; /* -1, or the position of an index outside its plane */
} pool_scatter;

/* The value plane element i adds: 0 + dY[i] (the scatter's sum into zeros, also for a -0 dY). */
static inline float scatter_value(const pool_scatter *a, int64_t i) {
    return 0.0f + (a->y && !(a->y[i] > 0.0f) ? 0.0f : a->dy[i]);
}

/* 2x2 blocks [ow0, ow1) of block row oh of plane p (see scatter_plane_2x2); false when an index is
 * not in its block. */
static bool scatter_blocks_2x2(const pool_scatter *a, int64_t p, int64_t oh, int64_t ow0, int64_t ow1) {
    const int64_t W = a->W, lo = p * a->px;
    float *restrict d0 = a->dx + lo + 2 * oh * W, *restrict d1 = d0 + W;
    bool bad = false;
    for (int64_t ow = ow0; ow < ow1; ow++) {
        int64_t i = p * a->py + oh * (W / 2) + ow;
        int64_t k = (a->i64 ? a->i64[i] : a->i32[i]) - lo - 2 * (oh * W + ow);
        bad |= (uint64_t)k > 1 && (uint64_t)(k - W) > 1;
        float v = scatter_value(a, i);
        d0[2 * ow] = k == 0 ? v : 0.0f, d0[2 * ow + 1] = k == 1 ? v : 0.0f;
        d1[2 * ow] = k == W ? v : 0.0f, d1[2 * ow + 1] = k == W + 1 ? v : 0.0f;
    }
    return !bad;
}

#ifdef OT_TN_X86
/* scatter_blocks_2x2 for 4 blocks at a time from block 0; returns the blocks done, or -1. */
__attribute__((target("avx2"))) static int64_t scatter_blocks_2x2_avx2(const pool_scatter *a, int64_t p, int64_t oh) {
    const int64_t W = a->W, OW = W / 2, lo = p * a->px;
    float *d0 = a->dx + lo + 2 * oh * W, *d1 = d0 + W;
    const __m256i w0 = _mm256_set1_epi64x(W), w1 = _mm256_set1_epi64x(W + 1), one = _mm256_set1_epi64x(1);
    const __m256i step = _mm256_set1_epi64x(8), dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    __m256i base = _mm256_add_epi64(_mm256_set1_epi64x(lo + 2 * oh * W), _mm256_setr_epi64x(0, 2, 4, 6));
    __m256i bad = _mm256_setzero_si256();
    int64_t ow = 0;
    for (; ow + 4 <= OW; ow += 4, base = _mm256_add_epi64(base, step)) {
        int64_t i = p * a->py + oh * OW + ow;
        __m256i k = a->i64 ? _mm256_loadu_si256((const __m256i *)(a->i64 + i))
                           : _mm256_cvtepi32_epi64(_mm_loadu_si128((const __m128i *)(a->i32 + i)));
        k = _mm256_sub_epi64(k, base);
        __m256i e0 = _mm256_cmpeq_epi64(k, _mm256_setzero_si256()), e1 = _mm256_cmpeq_epi64(k, one);
        __m256i eW = _mm256_cmpeq_epi64(k, w0), eW1 = _mm256_cmpeq_epi64(k, w1);
        bad =
            _mm256_or_si256(bad, _mm256_cmpeq_epi64(_mm256_or_si256(_mm256_or_si256(e0, e1), _mm256_or_si256(eW, eW1)),
                                                    _mm256_setzero_si256()));
        __m128 v = _mm_loadu_ps(a->dy + i);
        if (a->y) v = _mm_and_ps(v, _mm_cmpgt_ps(_mm_loadu_ps(a->y + i), _mm_setzero_ps()));
        __m256 v2 = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_add_ps(_mm_setzero_ps(), v)), dup);
        _mm256_storeu_ps(d0 + 2 * ow, _mm256_and_ps(_mm256_castsi256_ps(_mm256_blend_epi32(e0, e1, 0xAA)), v2));
        _mm256_storeu_ps(d1 + 2 * ow, _mm256_and_ps(_mm256_castsi256_ps(_mm256_blend_epi32(eW, eW1, 0xAA)), v2));
    }
    return _mm256_testz_si256(bad, bad) ? ow : -1;
}
#endif

/* Plane p when every index lies in its own 2x2 block (2x2 stride-2 pooling): dX written row by row
 * without the zero fill and the scattered read-modify-writes. False when an index lies elsewhere
 * (the plane is then redone by the scatter). */
static bool scatter_plane_2x2(const pool_scatter *a, int64_t p) {
    const int64_t W = a->W, H = a->px / W;
    float *dx = a->dx + p * a->px;
    for (int64_t oh = 0; oh < H / 2; oh++) {
        int64_t ow = 0;
#ifdef OT_TN_X86
        if (a->avx2 && (ow = scatter_blocks_2x2_avx2(a, p, oh)) < 0) return false;
#endif
        if (!scatter_blocks_2x2(a, p, oh, ow, W / 2)) return false;
        if (W & 1) dx[2 * oh * W + W - 1] = dx[(2 * oh + 1) * W + W - 1] = 0.0f;
    }
    if (H & 1) memset(dx + (H - 1) * W, 0, (size_t)W * sizeof(float));
    return true;
}

static void scatter_planes(void *arg, int64_t b, int64_t e) {
    pool_scatter *a = arg;
    for (int64_t p = b; p < e; p++) {
        if (a->W && scatter_plane_2x2(a, p)) continue;
        int64_t lo = p * a->px, hi = lo + a->px;
        memset(a->dx + lo, 0, (size_t)a->px * sizeof(float)); /* plane by plane: still in cache for the scatter */
        for (int64_t i = p * a->py; i < (p + 1) * a->py; i++) {
            int64_t k = a->i64 ? a->i64[i] : a->i32[i];
            if (k < lo || k >= hi) {
                atomic_store_explicit(&a->stray, i, memory_order_relaxed);
                return;
            }
            a->dx[k] += scatter_value(a, i);
        }
    }
}

/* MaxPoolGrad(dY, Indices[, X_shape[, Y]]) -> dX: dX[Indices[i]] += dY[i] (flat row-major indices
 * into X). X_shape (com.otter's form, from runtime/fuse.c) gives dX's shape; without it, the model's
 * declarations do. With MaxPool's output Y (fuse.c's MaxPoolGrad + ReluGrad), dY[i] counts only
 * where Y[i] > 0: ReluGrad(dX, X), as X[Indices[i]] is Y[i]. MaxPool's indices stay inside their
 * (n, c) plane, so planes go to threads in parallel, each in dY's order (the serial loop's sums,
 * same bits). */
otter_status ot_kernel_maxpool_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *ind;
    OT_TRY(tr_need(ctx, 0, "dY", &dy));
    OT_TRY(tr_need(ctx, 1, "Indices", &ind));
    if (otter_tensor_numel(ind) != otter_tensor_numel(dy) ||
        (ind->dtype != OTTER_DTYPE_INT64 && ind->dtype != OTTER_DTYPE_INT32))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Indices '%s' must be int64 with dY's shape",
                            ot_ctx_input_name(ctx, 1));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    if (ot_ctx_input(ctx, 2))
        OT_TRY(tr_shape_input(ctx, 2, &rank, dims));
    else
        OT_TRY(pool_grad_shape(ctx, dy, &rank, dims));
    const otter_tensor *y = ot_ctx_input(ctx, 3);
    if (y && otter_tensor_numel(y) != otter_tensor_numel(dy))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Y '%s' must have dY's shape", ot_ctx_input_name(ctx, 3));
    const float *DY, *Y = NULL;
    float *t0 = NULL, *t3 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = tr_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK && y) s = tr_in(ctx, 3, &Y, &t3);
    if (s == OTTER_OK) s = tr_out(ctx, 0, dy->dtype, rank, dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        int64_t nx = otter_tensor_numel(dx), n = otter_tensor_numel(dy);
        pool_scatter a = {.dy = DY,
                          .y = Y,
                          .i64 = ind->dtype == OTTER_DTYPE_INT64 ? ind->data : NULL,
                          .i32 = ind->dtype == OTTER_DTYPE_INT32 ? ind->data : NULL,
                          .dx = DX};
        atomic_init(&a.stray, -1);
        int64_t planes =
            rank >= 2 && dy->rank == rank && dy->dims[0] == dims[0] && dy->dims[1] == dims[1] ? dims[0] * dims[1] : 0;
        if (planes > 0) {
            a.px = nx / planes, a.py = n / planes;
            if (rank == 4 && dims[3] > 0 && dy->dims[2] == dims[2] / 2 && dy->dims[3] == dims[3] / 2) a.W = dims[3];
#ifdef OT_TN_X86
            a.avx2 = tn_avx2();
#endif
            ot_parallel_for(ctx, planes, 1 + 16384 / (a.px + a.py + 1), scatter_planes, &a);
        }
        if (planes <= 0 || atomic_load(&a.stray) >= 0) {
            a.px = nx, a.py = n, a.W = 0;
            atomic_store(&a.stray, -1);
            scatter_planes(&a, 0, 1);
        }
        int64_t bad = atomic_load(&a.stray);
        if (bad >= 0)
            s = ot_ctx_error(ctx, OTTER_ERR_INVALID, "Indices '%s' value %lld out of range for dX of %lld elements",
                             ot_ctx_input_name(ctx, 1), (long long)(a.i64 ? a.i64[bad] : a.i32[bad]), (long long)nx);
    }
    if (s == OTTER_OK)
        tr_out_done(dx, ty);
    else
        ot_free(ty);
    ot_free(t0);
    ot_free(t3);
    return s;
}

/* AveragePoolGrad(dY; AveragePool's attributes) -> dX: each dY element spread evenly over its
 * window (divided by the window's count: positions inside X, or inside the padded X with
 * count_include_pad), as the forward kernel averages. */
otter_status ot_kernel_avgpool_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy;
    OT_TRY(tr_need(ctx, 0, "dY", &dy));
    if (dy->rank < 3 || dy->rank > 2 + OT_SP)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' must have rank 3..5", ot_ctx_input_name(ctx, 0));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(pool_grad_shape(ctx, dy, &rank, dims));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nd = rank - 2;
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", g.nd, g.k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    for (int i = 0; i < g.nd; i++) g.in[i] = dims[2 + i];
    OT_TRY(ot_conv_geom_forward(ctx, &g, otter_node_attr_int(ctx->node, "ceil_mode", 0) != 0));
    OT_TRY(tg_check_dy(ctx, &g, dy, g.out));
    if (dims[0] != dy->dims[0] || dims[1] != dy->dims[1])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "declared dX batch/channel dims differ from dY's");
    ot_conv_geom_to3(&g);
    bool incl = otter_node_attr_int(ctx->node, "count_include_pad", 0) != 0;
    const float *DY;
    float *t0 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = tr_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK) s = tr_out(ctx, 0, dy->dtype, rank, dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        const int64_t D = g.in[0], H = g.in[1], W = g.in[2], planes = dims[0] * dims[1];
        memset(DX, 0, (size_t)(planes * g.in_size) * sizeof(float));
        for (int64_t p = 0; p < planes; p++)
            for (int64_t od = 0; od < g.out[0]; od++)
                for (int64_t oh = 0; oh < g.out[1]; oh++)
                    for (int64_t ow = 0; ow < g.out[2]; ow++) {
                        int64_t s0 = od * g.stride[0] - g.pb[0], s1 = oh * g.stride[1] - g.pb[1],
                                s2 = ow * g.stride[2] - g.pb[2];
                        int64_t cnt = 0, cnt_pad = 0;
                        for (int pass = 0; pass < 2; pass++) {
                            float v = 0.0f;
                            if (pass == 1) {
                                int64_t c = incl ? cnt_pad : cnt;
                                if (!c) break;
                                v = DY[p * g.out_size + (od * g.out[1] + oh) * g.out[2] + ow] / (float)c;
                            }
                            for (int64_t kd = 0; kd < g.k[0]; kd++) {
                                int64_t id = s0 + kd * g.dil[0];
                                if (id >= D + g.pe[0]) continue;
                                for (int64_t kh = 0; kh < g.k[1]; kh++) {
                                    int64_t ih = s1 + kh * g.dil[1];
                                    if (ih >= H + g.pe[1]) continue;
                                    for (int64_t kw = 0; kw < g.k[2]; kw++) {
                                        int64_t iw = s2 + kw * g.dil[2];
                                        if (iw >= W + g.pe[2]) continue;
                                        bool in = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
                                        if (pass == 0) {
                                            cnt_pad++;
                                            cnt += in;
                                        } else if (in) {
                                            DX[p * g.in_size + (id * H + ih) * W + iw] += v;
                                        }
                                    }
                                }
                            }
                        }
                    }
        tr_out_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0);
    return s;
}

/* ---- SoftmaxCrossEntropyLoss: Internal forward and the gradients --------------------------------------- */

typedef struct sce_geom {
    int64_t N, C, D; /* log_prob (N, C, D...), labels (N, D...) */
    int red;         /* 0 none, 1 sum, 2 mean */
    bool has_ii;
    int64_t ii;
} sce_geom;

/* Shapes, reduction and ignore_index (attribute, or the scalar input ii_input when given). */
static otter_status sce_setup(const ot_kernel_ctx *ctx, const otter_tensor *lp, const otter_tensor *lab,
                              size_t weight_i, size_t ii_input, sce_geom *g) {
    char s1[128], s2[128];
    if (lp->rank < 2 || !tr_is_float(lp->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scores/log_prob must be a float tensor of rank >= 2 (N, C, ...)");
    g->N = lp->dims[0], g->C = lp->dims[1], g->D = 1;
    for (int i = 2; i < lp->rank; i++) g->D *= lp->dims[i];
    bool ok = lab->rank == lp->rank - 1 && lab->dims[0] == g->N;
    for (int i = 2; ok && i < lp->rank; i++) ok = lab->dims[i - 1] == lp->dims[i];
    if (!ok || (lab->dtype != OTTER_DTYPE_INT64 && lab->dtype != OTTER_DTYPE_INT32))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "labels '%s' %s must be int32/int64 shaped like %s without axis 1",
                            ot_ctx_input_name(ctx, weight_i - 1), ot_shape_str(s1, sizeof s1, lab->rank, lab->dims),
                            ot_shape_str(s2, sizeof s2, lp->rank, lp->dims));
    const otter_tensor *w = ot_ctx_input(ctx, weight_i);
    if (w && otter_tensor_numel(w) != g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' has %lld elements, expected C = %lld",
                            ot_ctx_input_name(ctx, weight_i), (long long)otter_tensor_numel(w), (long long)g->C);
    const char *red = otter_node_attr_string(ctx->node, "reduction", "mean");
    g->red = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : strcmp(red, "mean") == 0 ? 2 : -1;
    if (g->red < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown reduction '%s'", red);
    const otter_attr *a = otter_node_attr(ctx->node, "ignore_index");
    g->has_ii = a != NULL;
    g->ii = a ? a->i : 0;
    const otter_tensor *iit = ii_input ? ot_ctx_input(ctx, ii_input) : NULL;
    if (iit) {
        if (otter_tensor_numel(iit) != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ignore_index '%s' must hold one value",
                                ot_ctx_input_name(ctx, ii_input));
        g->has_ii = true;
        g->ii = ot_get_i64(iit->data, iit->dtype, 0);
    }
    return OTTER_OK;
}

/* Label at (n, d): -1 when ignored; error when out of range. */
static otter_status sce_label(const ot_kernel_ctx *ctx, const otter_tensor *lab, const sce_geom *g, int64_t k,
                              int64_t *t) {
    int64_t v = ot_get_i64(lab->data, lab->dtype, k);
    if (g->has_ii && v == g->ii) {
        *t = -1;
        return OTTER_OK;
    }
    if (v < 0 || v >= g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "label value %lld out of range [0, %lld)", (long long)v,
                            (long long)g->C);
    *t = v;
    return OTTER_OK;
}

/* SoftmaxCrossEntropyLossInternal(scores, labels, weight?, ignore_index?) -> output, log_prob?:
 * SoftmaxCrossEntropyLoss with ignore_index optionally given as an input. */
otter_status ot_kernel_sce_loss_internal(ot_kernel_ctx *ctx) {
    const otter_tensor *sc, *lab;
    OT_TRY(tr_need(ctx, 0, "scores", &sc));
    OT_TRY(tr_need(ctx, 1, "labels", &lab));
    sce_geom g;
    OT_TRY(sce_setup(ctx, sc, lab, 2, 3, &g));
    const otter_tensor *w = ot_ctx_input(ctx, 2);
    int64_t n = otter_tensor_numel(sc), nt = g.N * g.D;
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    double *l = ot_malloc((size_t)(nt > 0 ? nt : 1) * sizeof(double));
    otter_status s = lp && l ? OTTER_OK : OT_NOMEM();
    if (s == OTTER_OK) ot_convert(lp, OTTER_DTYPE_DOUBLE, sc->data, sc->dtype, n);
    for (int64_t i = 0; s == OTTER_OK && i < g.N; i++)
        for (int64_t d = 0; d < g.D; d++) {
            double *p = lp + i * g.C * g.D + d, m = -INFINITY, sum = 0;
            for (int64_t c = 0; c < g.C; c++) m = p[c * g.D] > m ? p[c * g.D] : m;
            for (int64_t c = 0; c < g.C; c++) sum += exp(p[c * g.D] - m);
            double ls = m + log(sum);
            for (int64_t c = 0; c < g.C; c++) p[c * g.D] -= ls;
        }
    double wsum = 0, lsum = 0;
    for (int64_t i = 0; s == OTTER_OK && i < g.N; i++)
        for (int64_t d = 0; d < g.D && s == OTTER_OK; d++) {
            int64_t t = 0;
            s = sce_label(ctx, lab, &g, i * g.D + d, &t);
            if (s != OTTER_OK) break;
            if (t < 0) {
                l[i * g.D + d] = 0;
                continue;
            }
            double wt = w ? ot_get_f64(w->data, w->dtype, t) : 1.0;
            l[i * g.D + d] = -lp[(i * g.C + t) * g.D + d] * wt;
            wsum += wt, lsum += l[i * g.D + d];
        }
    otter_tensor *y = NULL;
    if (s == OTTER_OK) {
        y = g.red == 0 ? ot_ctx_output(ctx, 0, sc->dtype, lab->rank, lab->dims)
                       : ot_ctx_output(ctx, 0, sc->dtype, 0, NULL);
        if (!y) s = ctx->output_status;
    }
    if (s == OTTER_OK) {
        if (g.red == 0)
            ot_convert(y->data, y->dtype, l, OTTER_DTYPE_DOUBLE, nt);
        else
            ot_set_f64(y->data, y->dtype, 0, g.red == 1 ? lsum : (wsum != 0 ? lsum / wsum : 0.0));
        if (tr_wanted(ctx, 1)) {
            otter_tensor *o = ot_ctx_output(ctx, 1, sc->dtype, sc->rank, sc->dims);
            if (!o)
                s = ctx->output_status;
            else
                ot_convert(o->data, o->dtype, lp, OTTER_DTYPE_DOUBLE, n);
        }
    }
    ot_free(lp), ot_free(l);
    return s;
}

/* SoftmaxCrossEntropyLossGrad(dY, log_prob, label, weight?) and
 * SoftmaxCrossEntropyLossInternalGrad(dY, log_prob, label, weight?, ignore_index?, bias?) -> dX:
 * dX[n,c,d] = (exp(log_prob) - [c == label]) * w[label] * g, g = dY[n,d] (none), dY (sum) or
 * dY / (sum of w over labels not ignored) (mean); ignored positions get 0; bias is added. */
otter_status ot_kernel_sce_loss_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *lp, *lab;
    OT_TRY(tr_need(ctx, 0, "dY", &dy));
    OT_TRY(tr_need(ctx, 1, "log_prob", &lp));
    OT_TRY(tr_need(ctx, 2, "label", &lab));
    bool internal = strcmp(ctx->node->op_type, "SoftmaxCrossEntropyLossInternalGrad") == 0;
    sce_geom g;
    OT_TRY(sce_setup(ctx, lp, lab, 3, internal ? 4 : 0, &g));
    const otter_tensor *w = ot_ctx_input(ctx, 3), *bias = internal ? ot_ctx_input(ctx, 5) : NULL;
    int64_t nt = g.N * g.D;
    if (otter_tensor_numel(dy) != (g.red == 0 ? nt : 1))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' has %lld elements, expected %lld",
                            ot_ctx_input_name(ctx, 0), (long long)otter_tensor_numel(dy),
                            (long long)(g.red == 0 ? nt : 1));
    if (bias && otter_tensor_numel(bias) != otter_tensor_numel(lp))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' must have log_prob's size", ot_ctx_input_name(ctx, 5));
    double wsum = 0;
    for (int64_t k = 0; k < nt; k++) {
        int64_t t = 0;
        OT_TRY(sce_label(ctx, lab, &g, k, &t));
        if (t >= 0) wsum += w ? ot_get_f64(w->data, w->dtype, t) : 1.0;
    }
    const float *LP, *B = NULL;
    float *t0 = NULL, *t1 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = tr_in(ctx, 1, &LP, &t0);
    if (s == OTTER_OK && bias) s = tr_in(ctx, 5, &B, &t1);
    if (s == OTTER_OK) s = tr_out(ctx, 0, lp->dtype, lp->rank, lp->dims, &dx, &DX, &ty);
    if (s == OTTER_OK) {
        for (int64_t i = 0; i < g.N; i++)
            for (int64_t d = 0; d < g.D; d++) {
                int64_t k = i * g.D + d, t = 0;
                sce_label(ctx, lab, &g, k, &t);
                double gd = g.red == 0 ? ot_get_f64(dy->data, dy->dtype, k) : ot_get_f64(dy->data, dy->dtype, 0);
                if (g.red == 2) gd = wsum != 0 ? gd / wsum : 0.0;
                double f = t < 0 ? 0.0 : (w ? ot_get_f64(w->data, w->dtype, t) : 1.0) * gd;
                for (int64_t c = 0; c < g.C; c++) {
                    int64_t j = (i * g.C + c) * g.D + d;
                    double v = f == 0.0 ? 0.0 : (exp((double)LP[j]) - (c == t ? 1.0 : 0.0)) * f;
                    DX[j] = (float)v + (B ? B[j] : 0.0f);
                }
            }
        tr_out_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0), ot_free(t1);
    return s;
}
