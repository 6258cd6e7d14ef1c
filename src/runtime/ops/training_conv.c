/* Convolution gradients: ConvGrad, ConvTransposeGrad. Spatial kernels treat 1-D and 2-D as 3-D with
 * leading size-1 dimensions. They use their own im2col / col2im over one image and group, and the
 * shared sgemm; ConvGrad's dW packs im2col on the fly into the portable sgemm (ot_sgemm_packing). */
#include <stdatomic.h>
#include <string.h>

#include "ops/shape_math.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/conv_geom.h"
#include "runtime/ops/conv_small.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/simd_transpose.h"
#include "runtime/ops/training_internal.h"

/* ---- spatial geometry (runtime/ops/conv_geom.h) ------------------------------------------------- */

otter_status ot_train_check_dy(const ot_kernel_ctx *ctx, const ot_conv_geom *g, const otter_tensor *dy,
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
static void ot_train_im2col(const float *x, int64_t C, const ot_conv_geom *g, float *col) {
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
    OT_TRY(ot_train_need(ctx, 0, "dY", dy));
    OT_TRY(ot_train_need(ctx, 1, "X", x));
    OT_TRY(ot_train_need(ctx, 2, "W", w));
    if ((*x)->rank < 3 || (*x)->rank > 2 + OT_SP || (*w)->rank != (*x)->rank || (*dy)->rank != (*x)->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s and W '%s' %s must have one rank in 3..5 (dY too)",
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, (*x)->rank, (*x)->dims),
                            ot_ctx_input_name(ctx, 2), ot_shape_str(s2, sizeof s2, (*w)->rank, (*w)->dims));
    if ((*dy)->dtype != (*x)->dtype || (*w)->dtype != (*x)->dtype || !ot_train_is_float((*x)->dtype))
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
    const int32_t *pairs; /* small images (cg_tap_pairs), or NULL */
} cg_args;

/* Small images: col2im's runs along w are a few floats, so its per-run bookkeeping costs more than the
 * adds (ResNet-18's 4x4 and 2x2 stages at 64x64 inputs). Per tap t, its (output, input) position pairs
 * once per call instead: pairs[t * (2 * osz + 1) ..] holds n_t, then n_t output positions in order, then
 * (osz after them) their inputs; col2im over them adds into each input in tg_col2im_ld's order (the
 * same bits). At 16x16 inputs (stride 2) the runs are long enough that this was slower. */
static bool cg_use_pairs(const ot_conv_geom *g) { return g->in_size < 64; }

static void cg_tap_pairs(const ot_conv_geom *g, int32_t *pairs) {
    const int64_t osz = g->out_size;
    for (int64_t kd = 0, t = 0; kd < g->k[0]; kd++)
        for (int64_t kh = 0; kh < g->k[1]; kh++)
            for (int64_t kw = 0; kw < g->k[2]; kw++, t++) {
                int32_t *n = pairs + t * (2 * osz + 1), *po = n + 1, *pi = po + osz;
                *n = 0;
                for (int64_t od = 0, o = 0; od < g->out[0]; od++)
                    for (int64_t oh = 0; oh < g->out[1]; oh++)
                        for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                            const int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0],
                                          ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1],
                                          iw = ow * g->stride[2] - g->pb[2] + kw * g->dil[2];
                            if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1] || iw < 0 || iw >= g->in[2])
                                continue;
                            po[*n] = (int32_t)o, pi[*n] = (int32_t)((id * g->in[1] + ih) * g->in[2] + iw);
                            (*n)++;
                        }
            }
}

/* tg_col2im_ld through the pairs. */
static void cg_col2im_pairs(const float *col, int64_t c0, int64_t c1, const ot_conv_geom *g, const int32_t *pairs,
                            float *x, int64_t ld) {
    const int64_t osz = g->out_size;
    for (int64_t c = c0; c < c1; c++) {
        float *restrict xc = x + c * g->in_size;
        for (int64_t t = 0; t < g->k_size; t++) {
            const int32_t *n = pairs + t * (2 * osz + 1), *po = n + 1, *pi = po + osz;
            const float *restrict src = col + (c * g->k_size + t) * ld;
            for (int32_t k = 0; k < *n; k++) xc[pi[k]] += src[po[k]];
        }
    }
}

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
        if (mr == OT_SGEMM_MR) { /* whole rows: the output written contiguously */
            int64_t j = 0;
#if defined(__wasm_simd128__)
            j = ot_sgemm_pack_rows_wasm(src, osz, len, 1.0f, d);
#endif
            for (; j < len; j++)
                for (int64_t i = 0; i < OT_SGEMM_MR; i++) d[j * OT_SGEMM_MR + i] = src[i * osz + j];
        } else
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

#ifdef OT_TR_X86
_Static_assert(OT_SGEMM_MR <= 8 && OT_SGEMM_NR % 8 == 0, "the AVX2 packers move 8 x 8 blocks");

/* The first n <= 8 floats at p, zeros after: a plain load, or a masked one (slow on some CPUs)
 * for a short block. */
__attribute__((target("avx2"), always_inline)) static inline __m256 dw_load_n(const float *p, int64_t n) {
    if (n == 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, ot_lanes8(n));
}

/* dw_pack_dy with 8 x 8 transposes: per run of positions, blocks of 8 from the MR rows of dY. */
__attribute__((target("avx2"))) static void dw_pack_dy_avx2(const void *arg, int64_t i0, int64_t mr, int64_t p0,
                                                            int64_t kc, float *dst) {
    const dw_args *a = arg;
    const int64_t osz = a->g->out_size;
    const __m256i keep = ot_lanes8(OT_SGEMM_MR);
    for (int64_t k = 0; k < kc;) {
        int64_t n = (p0 + k) / osz, q = (p0 + k) % osz, len = osz - q < kc - k ? osz - q : kc - k;
        const float *src = a->DY + n * a->dystride + i0 * osz + q;
        for (int64_t j = 0; j < len; j += 8) {
            int64_t cols = len - j < 8 ? len - j : 8;
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = i < mr ? dw_load_n(src + i * osz + j, cols) : _mm256_setzero_ps();
            ot_transpose8_avx2(v);
            /* row i's 8-lane store spills into row i + 1, written next; the last row stores MR lanes */
            float *d = dst + (k + j) * OT_SGEMM_MR;
            for (int64_t i = 0; i + 1 < cols; i++) _mm256_storeu_ps(d + i * OT_SGEMM_MR, v[i]);
            _mm256_maskstore_ps(d + (cols - 1) * OT_SGEMM_MR, keep, v[cols - 1]);
        }
        k += len;
    }
}

/* dw_pack_x from X zero-padded (2-D) and split into sw = stride-along-w column phases: tap (c, kh, kw)
 * at output (oh, ow) reads padded row oh * sh + kh * dh, column ow * sw + kw * dw of channel c, which is
 * column ow + kw * dw / sw of its phase kw * dw % sw, so a run's inputs are 8-float loads at one
 * offset per tap, without tests, and 8 x 8 transposes make the slab's rows. A run's last loads may
 * read past it (into the next phase or channel or the buffer's slack): those lanes are not stored. */
__attribute__((target("avx2"))) static void dw_pack_x_avx2(const void *arg, int64_t j0, int64_t nr, int64_t p0,
                                                           int64_t kc, float *dst) {
    const dw_args *a = arg;
    const ot_conv_geom *g = a->g;
    const ot_conv_pad *pad = a->pad;
    const int64_t OW = g->out[2], osz = g->out_size, KH = g->k[1], KW = g->k[2], sw = pad->phases;
    int64_t off[OT_SGEMM_NR];
    for (int64_t j = 0; j < nr; j++) {
        int64_t r = j0 + j, c = r / (KH * KW), kh = r / KW % KH, kw = r % KW, col = kw * g->dil[2];
        off[j] = a->pad_group + kh * g->dil[1] * pad->row + (c * sw + col % sw) * pad->QW + col / sw;
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
                ot_transpose8_avx2(v);
                for (int64_t i = 0; i < rows; i++) _mm256_storeu_ps(d + i * OT_SGEMM_NR + jg, v[i]);
            }
        }
        k += o1 - o0;
    }
}

bool ot_train_cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* With AVX2, the AVX2 packers; for im2col(X) only in 2-D (or 1-D), with X zero-padded into pad first
 * (scratch), strided along w too (the 7x7 stride-2 stems of ResNet-18 and SqueezeNet: their dW 1.2x
 * faster than with the scalar packer). */
static otter_status dw_avx2_packers(ot_kernel_ctx *ctx, const ot_conv_geom *g, const float *X, int64_t N, int64_t C,
                                    ot_conv_pad *pad, ot_sgemm_pack_fn *pack_dy, ot_sgemm_pack_fn *pack_x) {
    if (!ot_train_cpu_has_avx2()) return OTTER_OK;
    *pack_dy = dw_pack_dy_avx2;
    if (g->k[0] != 1 || g->in[0] != 1 || N <= 0 || g->out_size <= 0) return OTTER_OK;
    const int64_t sw = g->stride[2], padded_w = (g->out[2] - 1) * sw + (g->k[2] - 1) * g->dil[2] + 1;
    *pad = (ot_conv_pad){.x = X,
                         .C = C,
                         .H = g->in[1],
                         .W = g->in[2],
                         .pad_h = g->pb[1],
                         .pad_w = g->pb[2],
                         .phases = sw,
                         .PH = (g->out[1] - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1,
                         .QW = (padded_w + sw - 1) / sw};
    pad->row = C * sw * pad->QW, pad->image = pad->PH * pad->row;
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
        float *dx = a->dx + ((a->n0 + b) * a->C + a->gr * a->Cg) * g->in_size;
        if (a->pairs)
            cg_col2im_pairs(a->col + b * g->out_size, c0, c1, g, a->pairs, dx, a->ld);
        else
            tg_col2im_ld(a->col + b * g->out_size, c0, c1, g, dx, a->ld);
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

/* dX = conv(dY, W^T flipped) over window win (see ot_train_conv_grad). */
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

/* Depthwise dX and dW (conv_depthwise.h): slot s of n_slots takes its share of the input channels,
 * each over the whole batch, with its own scratch. */
typedef struct dwg_args {
    const ot_dw_plan *plan;
    const float *X, *DY, *W;
    float *dx, *dw, *scratch; /* dx, dw: NULL when not wanted */
    int64_t N, C, M, Mg, in_size, out_size, scratch_floats, n_slots;
} dwg_args;

static void dwg_slots(void *arg, int64_t s0, int64_t s1) {
    const dwg_args *a = arg;
    const int64_t taps = a->plan->taps;
    for (int64_t s = s0; s < s1; s++) {
        float *scratch = a->scratch + s * a->scratch_floats;
        ot_conv_depthwise_init(scratch, a->scratch_floats);
        for (int64_t c = s * a->C / a->n_slots; c < (s + 1) * a->C / a->n_slots; c++)
            ot_conv_depthwise_backward(a->plan, a->N, a->X + c * a->in_size, a->C * a->in_size,
                                       a->DY + c * a->Mg * a->out_size, a->M * a->out_size, a->W + c * a->Mg * taps,
                                       a->Mg, a->dx ? a->dx + c * a->in_size : NULL,
                                       a->dw ? a->dw + c * a->Mg * taps : NULL, scratch);
    }
}

static otter_status conv_grad_depthwise(ot_kernel_ctx *ctx, dwg_args *a) {
    a->n_slots = ctx->n_threads > 1 ? (a->C < 2 * ctx->n_threads ? a->C : 2 * ctx->n_threads) : 1;
    a->scratch_floats = ot_conv_depthwise_backward_scratch(a->plan, a->Mg);
    if (!(a->scratch = ot_ctx_scratch(ctx, (size_t)(a->n_slots * a->scratch_floats) * sizeof(float))))
        return OTTER_ERR_NOMEM;
    ot_parallel_for(ctx, a->n_slots, 1, dwg_slots, a);
    return OTTER_OK;
}

/* Pointwise (1x1, stride 1, no pad, one group): dW = the sum over images n of dY_n X_n^T, a plain product
 * per image on the planes as they lie, without the padded copy of X and the packing callbacks of the
 * batch-wide product below: dW 1.7-2.1x faster on MobileNetV2's and SqueezeNet's 1x1 layers at 64x64
 * inputs, except at 2x2 (1.08x). dX stays with the direct kernel: per-image products were slower for
 * small images (0.24x at 2x2) and at 32x32. dW's rows go over the threads, each summing the images in
 * order. */
typedef struct pw_args {
    const float *DY, *X;
    float *dw;
    int64_t N, C, M, P;
    atomic_int failed;
} pw_args;

static void pw_dw_rows(void *arg, int64_t m0, int64_t m1) {
    pw_args *a = arg;
    for (int64_t n = 0; n < a->N; n++)
        if (ot_sgemm(NULL, false, true, m1 - m0, a->C, a->P, 1.0f, a->DY + (n * a->M + m0) * a->P, a->P,
                     a->X + n * a->C * a->P, a->P, n ? 1.0f : 0.0f, a->dw + m0 * a->C, a->C) != OTTER_OK) {
            atomic_store(&a->failed, 1);
            return;
        }
}

/* ConvGrad(dY, X, W; Conv's attributes) -> dX?, dW?, dB?. Depthwise convolutions (one input channel
 * per group) take conv_depthwise.c's kernels, batches of small maps (and dX of strided ones)
 * conv_small.c's, which skip the taps in the padding. dW_g = dY_g col^T per group, one product
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
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0], group;
    OT_TRY(ot_ctx_attr_int(ctx, "group", &group)); /* Conv's (the registry's attrs_of) */
    for (int i = 0; i < g.nd; i++) g.in[i] = x->dims[2 + i], g.k[i] = w->dims[2 + i];
    if (group < 1 || C % group || M % group || w->dims[1] * group != C || dy->dims[0] != N || dy->dims[1] != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X %s, W %s, dY and group %lld don't agree",
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    OT_TRY(ot_conv_geom_forward(ctx, &g, false));
    OT_TRY(ot_train_check_dy(ctx, &g, dy, g.out));
    ot_conv_geom_to3(&g);
    int64_t Cg = C / group, Mg = M / group, rows = Cg * g.k_size, osz = g.out_size;
    bool want_dx = ot_train_wanted(ctx, 0), want_dw = ot_train_wanted(ctx, 1), want_db = ot_train_wanted(ctx, 2);
    const float *DY, *X, *W;
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0}, *col = NULL, *dyc = NULL;
    otter_tensor *o[3] = {0};
    otter_status s = ot_train_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 2, &W, &tin[2]);
    if (s == OTTER_OK && want_dx) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    if (s == OTTER_OK && want_dw) s = ot_train_out(ctx, 1, x->dtype, w->rank, w->dims, &o[1], &out[1], &tout[1]);
    if (s == OTTER_OK && want_db) s = ot_train_out(ctx, 2, x->dtype, 1, &M, &o[2], &out[2], &tout[2]);
    /* At stride 1, dX is the convolution of dY with W flipped in space and transposed in channels
     * (pads (k - 1) * dil - pad): the direct kernel computes it without col2im. */
    ot_conv_window dx_win = {.in = {0}};
    bool stride1 = true;
    for (int i = 0; i < OT_SP; i++) {
        dx_win.in[i] = g.out[i], dx_win.out[i] = g.in[i], dx_win.k[i] = g.k[i], dx_win.stride[i] = 1;
        dx_win.dil[i] = g.dil[i], dx_win.pad_begin[i] = (g.k[i] - 1) * g.dil[i] - g.pb[i];
        stride1 = stride1 && g.stride[i] == 1;
    }
    const ot_conv_window win = ot_conv_geom_window(&g);
    ot_dw_plan plan;
    const bool depthwise = group > 1 && Cg == 1 && N > 0 && (want_dx || want_dw) &&
                           ot_conv_depthwise_plan(&plan, &win, ot_conv_depthwise_isa());
    if (s == OTTER_OK && depthwise) {
        dwg_args a = {.plan = &plan,
                      .X = X,
                      .DY = DY,
                      .W = W,
                      .dx = out[0],
                      .dw = out[1],
                      .N = N,
                      .C = C,
                      .M = M,
                      .Mg = Mg,
                      .in_size = g.in_size,
                      .out_size = osz};
        s = conv_grad_depthwise(ctx, &a);
    }
    const bool pointwise_dw = want_dw && !depthwise && group == 1 && g.k_size == 1 && stride1 && N > 0 &&
                              g.in_size == osz && g.pb[0] + g.pb[1] + g.pb[2] == 0;
    if (s == OTTER_OK && pointwise_dw) {
        pw_args a = {.DY = DY, .X = X, .dw = out[1], .N = N, .C = C, .M = M, .P = osz};
        atomic_init(&a.failed, 0);
        ot_parallel_for(ctx, M, 8, pw_dw_rows, &a);
        if (atomic_load(&a.failed)) s = OT_NOMEM();
    }
    const bool small_dx =
        want_dx && !depthwise && group == 1 && ot_conv_small_pays_off(&win, N, C, M, OT_CONV_SMALL_INPUT_GRAD);
    /* Except for images under 32 positions, which leave the direct kernel's tiles mostly empty (AVX-512:
     * halves of 8 positions over rows of 4 or 2): the product and col2im below took 0.9x a ResNet-18
     * training step's time there (64x64 images, batch 32, 1 thread, 4 alternating runs); on AVX2
     * (Zen 3, 1 thread, alternating medians) resnet18 540 -> 455 ms, efficientnet_b0 365 -> 300,
     * mobilenet_v2 226 -> 202. */
    bool direct_dx =
        want_dx && !small_dx && !depthwise && stride1 && N > 0 && ot_conv_direct_supported(&dx_win) && g.in_size >= 32;
    if (s == OTTER_OK && direct_dx) s = conv_grad_dx_direct(ctx, &dx_win, DY, W, N, C, M, group, g.k_size, out[0]);
    if (s == OTTER_OK && small_dx) s = ot_conv_small_input_grad(ctx, &win, N, C, M, DY, W, out[0]);
    bool loop_dx = want_dx && !direct_dx && !depthwise && !small_dx;
    const bool small_dw = want_dw && !depthwise && !pointwise_dw && group == 1 &&
                          ot_conv_small_pays_off(&win, N, C, M, OT_CONV_SMALL_WEIGHT_GRAD);
    if (s == OTTER_OK && small_dw) s = ot_conv_small_weight_grad(ctx, &win, N, C, M, DY, X, out[1]);
    if (s == OTTER_OK && want_dw && !depthwise && !pointwise_dw && !small_dw && rows > 0 && Mg > 0) {
        int64_t *tap = ot_ctx_scratch(ctx, (size_t)(rows * DW_TAP) * sizeof(int64_t));
        if (!tap)
            s = OTTER_ERR_NOMEM;
        else
            dw_taps(&g, Cg, tap);
        ot_sgemm_pack_fn pack_dy = dw_pack_dy, pack_x = dw_pack_x;
        ot_conv_pad pad = {.xp = NULL};
#ifdef OT_TR_X86
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
                         .pad_group = gr * Cg * pad.phases * pad.QW};
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
    int32_t *pairs = NULL;
    if (s == OTTER_OK && work && cg_use_pairs(&g)) {
        if (!(pairs = ot_ctx_scratch(ctx, (size_t)(g.k_size * (2 * osz + 1)) * sizeof(int32_t))))
            s = OTTER_ERR_NOMEM;
        else
            cg_tap_pairs(&g, pairs);
    }
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
                         .ld = ld,
                         .pairs = pairs};
            if (chunk > 1) ot_parallel_for(ctx, nb, 1, cg_gather, &a);
            const float *dyp = chunk > 1 ? dyc : DY + (n0 * M + gr * Mg) * osz; /* ld = osz when chunk is 1 */
            s = ot_sgemm(ctx, true, false, rows, cols, Mg, 1.0f, W + gr * Mg * rows, rows, dyp, ld, 0.0f, col, ld);
            if (s == OTTER_OK) ot_parallel_for(ctx, nb * Cg, 1 + 4096 / (g.k_size * osz + 1), cg_scatter, &a);
        }
    if (s == OTTER_OK && want_db) {
        db_args d = {DY, out[2], N, M, osz};
        ot_parallel_for(ctx, M, 1 + 16384 / (N * osz + 1), db_channels, &d);
    }
    return ot_train_finish(s, 3, o, tout, 3, tin);
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
    int64_t N = x->dims[0], C = x->dims[1], group;
    OT_TRY(ot_ctx_attr_int(ctx, "group", &group)); /* ConvTranspose's (the registry's attrs_of) */
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
    const char *auto_pad;
    OT_TRY(ot_ctx_attr_string(ctx, "auto_pad", &auto_pad));
    ot_auto_pad pad = ot_auto_pad_from(auto_pad);
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
    bool want_dx = ot_train_wanted(ctx, 0), want_dw = ot_train_wanted(ctx, 1), want_db = ot_train_wanted(ctx, 2);
    const float *DY, *X, *W;
    float *tin[3] = {0}, *tout[3] = {0}, *out[3] = {0}, *col = NULL;
    otter_tensor *o[3] = {0};
    otter_status s = ot_train_in(ctx, 0, &DY, &tin[0]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 1, &X, &tin[1]);
    if (s == OTTER_OK) s = ot_train_in(ctx, 2, &W, &tin[2]);
    if (s == OTTER_OK && want_dx) s = ot_train_out(ctx, 0, x->dtype, x->rank, x->dims, &o[0], &out[0], &tout[0]);
    if (s == OTTER_OK && want_dw) s = ot_train_out(ctx, 1, x->dtype, w->rank, w->dims, &o[1], &out[1], &tout[1]);
    if (s == OTTER_OK && want_db) s = ot_train_out(ctx, 2, x->dtype, 1, &M, &o[2], &out[2], &tout[2]);
    if (s == OTTER_OK && (want_dx || want_dw) &&
        !(col = ot_malloc((size_t)(rows * isz > 0 ? rows * isz : 1) * sizeof(float))))
        s = OT_NOMEM();
    if (s == OTTER_OK && out[1]) memset(out[1], 0, (size_t)otter_tensor_numel(w) * sizeof(float));
    for (int64_t n = 0; s == OTTER_OK && n < N && (want_dx || want_dw); n++)
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            const float *dyg = DY + (n * M + gr * Mg) * osz, *xg = X + (n * C + gr * Cg) * isz;
            const float *wg = W + gr * Cg * rows;
            ot_train_im2col(dyg, Mg, &g, col);
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
    return ot_train_finish(s, 3, o, tout, 3, tin);
}
