/* Convolution kernels: Conv (and com.otter FusedConv), ConvInteger, QLinearConv, ConvTranspose. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#define OT_CONV_X86 1
#endif

#include "core/core.h"
#include "ops/shape_math.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/channel_blocks.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/conv_lanes.h"
#include "runtime/ops/conv_small.h"
#include "runtime/ops/fused_act.h"
#include "runtime/ops/gemm.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/nn_internal.h"
#include "runtime/ops/simd_transpose.h"

/* ---- im2col / col2im (3-D) ---------------------------------------------------------------------- */

/* Valid output positions [lo, hi) along one axis for kernel tap offset off = kk*dil - pad. */

/* col[(c, kd, kh, kw)][od, oh, ow] from x[c][d][h][w] (C channels). */
static void im2col3(const float *x, int64_t C, const ot_conv_geom *g, float *col) {
    const ot_conv_window w = ot_conv_geom_window(g);
    ot_im2col(x, C, &w, col, g->out_size);
}

/* ---- Conv ---------------------------------------------------------------------------------------- */

/* Work is (image, group) tasks: each im2cols its input into a column buffer (scratch planned
 * into the arena) and runs one sgemm, then an epilogue adds the bias, the fused sum input Z
 * (com.otter FusedConv) and applies the fused activation while the output block is in cache.
 * With more tasks than threads the tasks run on the session's threads (each sgemm single-threaded,
 * never oversubscribing the cores); otherwise they run one after another with threads inside the
 * sgemm. */

typedef struct conv_args {
    const ot_kernel_ctx *ctx;
    const ot_conv_geom *g;
    const float *X, *Wt, *B, *Z; /* Z: fused sum input shaped like Y, or NULL */
    float *Y;
    int64_t M, group, Cg, Mg;
    ot_fused_act act;
    bool direct;          /* 1x1, stride 1, no pad: X is its own column matrix */
    const ot_dw_plan *dw; /* depthwise (one input channel per group): a task convolves its plane, no sgemm */
    bool dw_block;        /* depthwise by channel blocks: a task is a block of an image's channels (dw->block) */
    bool x_blocked;       /* dw_block: X channel-blocked [N][C / B][H][W][B] (runtime/ops/channel_blocks.h) */
    bool y_blocked;       /* dw_block: Y and Z channel-blocked */
    float *dw_w;          /* dw_block: every block's packed weights and bias, dw->blk_w floats a block */
    bool inner_threads;
    float *cols;       /* n_slots column buffers of col_elems */
    int64_t col_elems; /* rows x out_size */
    int64_t n_tasks, n_slots;
    atomic_int failed;
} conv_args;

/* y[m][j] = act(y[m][j] + b[m] + z[m][j]) over rows of one task's output block (contiguous rows of
 * osz), while it is in cache: the one epilogue of every Conv path that doesn't apply it as it stores. */
static void conv_epilogue(float *restrict y, const float *restrict z, const float *b, int64_t rows, int64_t osz,
                          const ot_fused_act *act) {
    /* long rows: the activation of each row right after its sums, while the row is in L1 (one pass
     * over the block instead of two); short rows (depthwise planes of 2x2 to 8x8) as one block, so
     * the vectorized activations don't run on scalar tails */
    const bool act_rows = osz >= 256 && (b || z);
    for (int64_t m = 0; (b || z) && m < rows; m++) {
        ot_add_bias_row(y + m * osz, z ? z + m * osz : NULL, b ? b[m] : 0.0f, osz);
        if (act_rows) ot_fused_act_apply(act, y + m * osz, osz);
    }
    if (!act_rows) ot_fused_act_apply(act, y, rows * osz);
}

/* Tasks [t0, t1), all of one image: each its (image, group) output block, the product's with the
 * epilogue as it stores; depthwise ones then the epilogue over them at once (consecutive groups are
 * consecutive output channels). */
static void conv_tasks(conv_args *a, int64_t t0, int64_t t1, float *col) {
    const ot_conv_geom *g = a->g;
    const int64_t rows = a->Cg * g->k_size, osz = g->out_size;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = t / a->group, gr = t % a->group;
        const float *xg = a->X + (n * g->C + gr * a->Cg) * g->in_size;
        float *yg = a->Y + (n * a->M + gr * a->Mg) * osz;
        if (a->dw) {
            ot_conv_depthwise_forward(a->dw, xg, a->Wt + gr * a->Mg * rows, a->Mg, yg, col);
        } else {
            if (!a->direct) im2col3(xg, a->Cg, g, col);
            /* conv_epilogue's sums and activation as each tile of the product is stored */
            const ot_sgemm_epilogue epi = {.row_bias = a->B ? a->B + gr * a->Mg : NULL,
                                           .z = a->Z ? a->Z + (yg - a->Y) : NULL,
                                           .ldz = osz,
                                           .act = &a->act};
            if (ot_sgemm_fused(a->inner_threads ? a->ctx : NULL, false, false, a->Mg, osz, rows, 1.0f,
                               a->Wt + gr * a->Mg * rows, rows, a->direct ? xg : col, osz, yg, osz, &epi) != OTTER_OK)
                atomic_store(&a->failed, 1);
        }
    }
    if (!a->dw) return;
    const int64_t off = (t0 / a->group * a->M + t0 % a->group * a->Mg) * osz;
    conv_epilogue(a->Y + off, a->Z ? a->Z + off : NULL, a->B ? a->B + t0 % a->group * a->Mg : NULL, (t1 - t0) * a->Mg,
                  osz, &a->act);
}

/* Slots [s0, s1) of the channel-block depthwise path: slot s runs its share of the (image, block)
 * tasks, bias, Z and activation included. Image by image, as the layers around it split their work:
 * a slot then reads the images its thread's caches hold (block by block, each thread read every
 * image, and at 2 threads the late mobilenet_v2 layers ran slower than at 1). */
static void conv_dw_blocks(conv_args *a, int64_t s0, int64_t s1) {
    const int64_t C = a->g->C, blk = a->dw->block, isz = a->g->in_size, osz = a->g->out_size;
    const int64_t blocks = (C + blk - 1) / blk;
    for (int64_t s = s0; s < s1; s++) {
        float *scratch = a->cols + s * a->col_elems;
        ot_conv_depthwise_block_init(a->dw, scratch);
        for (int64_t t = s * a->n_tasks / a->n_slots, t1 = (s + 1) * a->n_tasks / a->n_slots; t < t1; t++) {
            const int64_t n = t / blocks, c = t % blocks * blk, nc = C - c < blk ? C - c : blk, at = (n * C + c) * osz;
            /* the same offsets when blocked: a block of B channels is B planes' floats */
            const float *x = a->X + (n * C + c) * isz, *w = a->dw_w + c / blk * a->dw->blk_w;
            if (a->y_blocked)
                ot_conv_depthwise_forward_blocked(a->dw, x, a->x_blocked, a->Z ? a->Z + at : NULL, &a->act, a->Y + at,
                                                  w, scratch);
            else
                ot_conv_depthwise_forward_block(a->dw, x, a->Z ? a->Z + at : NULL, &a->act, nc, a->Y + at, w, scratch);
        }
    }
}

/* Every block's packed weights into a->dw_w (blocks * blk_w floats). */
static void conv_dw_pack_weights(conv_args *a) {
    const int64_t C = a->g->C, blk = a->dw->block;
    for (int64_t c = 0; c < C; c += blk)
        ot_conv_depthwise_block_weights(a->dw, a->Wt + c * a->g->k_size, a->B ? a->B + c : NULL,
                                        C - c < blk ? C - c : blk, a->dw_w + c / blk * a->dw->blk_w);
}

/* Slots [s0, s1): slot s runs its share of the tasks with column buffer s. A depthwise task is one
 * small plane (2x2 to 32x32 in mobile nets at 64x64 inputs): the epilogue runs over a chunk of
 * planes of up to 8K floats (in L1), not plane by plane, where a 2x2 plane left the vectorized
 * activations only their scalar tails. */
static void conv_slots(void *arg, int64_t s0, int64_t s1) {
    conv_args *a = arg;
    if (a->dw_block) {
        conv_dw_blocks(a, s0, s1);
        return;
    }
    const int64_t block = a->Mg * a->g->out_size, chunk = a->dw && block < 8192 ? 8192 / block : 1;
    for (int64_t s = s0; s < s1; s++) {
        float *col = a->direct ? NULL : a->cols + s * a->col_elems;
        if (a->dw) ot_conv_depthwise_init(col, a->col_elems);
        const int64_t t1 = (s + 1) * a->n_tasks / a->n_slots;
        for (int64_t t = s * a->n_tasks / a->n_slots; t < t1;) {
            int64_t end = (t / a->group + 1) * a->group; /* the image's last task */
            if (end > t + chunk) end = t + chunk;
            if (end > t1) end = t1;
            conv_tasks(a, t, end, col);
            t = end;
        }
    }
}

/* A com.otter fused node (sum input, pooling attributes), not a plain ONNX one. */
static bool is_fused_node(const ot_kernel_ctx *ctx) {
    return ctx->node->domain && strcmp(ctx->node->domain, "com.otter") == 0;
}

/* y[p][i][j] = max of x[p][2i .. 2i + 1][2j .. 2j + 1] (MaxPool 2x2, stride 2, floor), planes p. */
static void maxpool_2x2(const float *x, int64_t planes, int64_t H, int64_t W, float *y) {
    const int64_t PH = H / 2, PW = W / 2;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < PH; i++) {
            const float *r0 = x + (p * H + 2 * i) * W, *r1 = r0 + W;
            float *yr = y + (p * PH + i) * PW;
            for (int64_t j = 0; j < PW; j++) {
                float a = r0[2 * j] > r0[2 * j + 1] ? r0[2 * j] : r0[2 * j + 1];
                float b = r1[2 * j] > r1[2 * j + 1] ? r1[2 * j] : r1[2 * j + 1];
                yr[j] = a > b ? a : b;
            }
        }
}

/* Conv's inputs X, W, B (and FusedConv's sum input Z) agree: one float dtype, ranks, kernel_shape,
 * group and bias size; fills the forward geometry g and *group. */
static otter_status conv_check(const ot_kernel_ctx *ctx, const otter_tensor *x, const otter_tensor *w,
                               const otter_tensor *b, const otter_tensor *z, ot_conv_geom *g, int64_t *group) {
    char s1[128], s2[128];
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of X %s", ot_ctx_input_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims));
    if (!ot_nn_float_like(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and B must share one float dtype (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    if (z && (z->dtype != OTTER_DTYPE_FLOAT || x->dtype != OTTER_DTYPE_FLOAT))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' needs float X and Z (got %s, %s)",
                            ot_ctx_input_name(ctx, 3), otter_dtype_name(x->dtype), otter_dtype_name(z->dtype));
    memset(g, 0, sizeof *g);
    int nd = x->rank - 2;
    bool has;
    for (int i = 0; i < nd; i++) g->k[i] = w->dims[2 + i];
    int64_t ks[OT_SP];
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, ks, &has));
    if (has)
        for (int i = 0; i < nd; i++)
            if (ks[i] != g->k[i])
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "kernel_shape disagrees with weight '%s' %s",
                                    ot_ctx_input_name(ctx, 1), ot_shape_str(s1, sizeof s1, w->rank, w->dims));
    OT_TRY(ot_nn_geom_forward(ctx, x, g, false));
    int64_t M = w->dims[0];
    OT_TRY(ot_ctx_attr_int(ctx, "group", group));
    if (*group < 1 || g->C % *group != 0 || M % *group != 0 || w->dims[1] * *group != g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s, weight '%s' %s and group %lld don't agree",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, w->rank, w->dims),
                            (long long)*group);
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld",
                            ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(b), (long long)M);
    return OTTER_OK;
}

/* The (image, group) tasks of the im2col + sgemm path (conv_args filled but the task split). */
static otter_status conv_run_tasks(ot_kernel_ctx *ctx, conv_args *a) {
    a->n_tasks = a->dw_block ? a->g->N * ((a->g->C + a->dw->block - 1) / a->dw->block) : a->g->N * a->group;
    a->inner_threads = !(ctx->n_threads > 1 && a->n_tasks >= ctx->n_threads);
    /* slots with small scratch (channel blocks, or none) OT_PARALLEL_CHUNKS_PER_THREAD a thread; two
     * with im2col's column buffers */
    const int64_t most = (a->dw_block || a->direct ? OT_PARALLEL_CHUNKS_PER_THREAD : 2) * ctx->n_threads;
    a->n_slots = a->inner_threads ? 1 : (a->n_tasks < most ? a->n_tasks : most);
    a->col_elems = a->dw_block ? ot_conv_depthwise_block_scratch(a->dw)
                   : a->dw     ? ot_conv_depthwise_forward_scratch(a->dw)
                               : a->Cg * a->g->k_size * a->g->out_size;
    if (!a->direct && !(a->cols = ot_ctx_scratch(ctx, (size_t)(a->n_slots * a->col_elems) * sizeof(float))))
        return OTTER_ERR_NOMEM;
    if (a->dw_block) { /* packed once for constant weights (mobilenet_v2 at batch 1: 3% of a run, packing) */
        const ot_conv_direct wd = {.constant_w =
                                       ot_ctx_input_constant(ctx, 1) && (!a->B || ot_ctx_input_constant(ctx, 2))};
        const size_t n = (size_t)((a->g->C + a->dw->block - 1) / a->dw->block * a->dw->blk_w);
        bool fill;
        if (!(a->dw_w = ot_conv_packed_weights(ctx, &wd, OT_CONV_FORM_DEPTHWISE, n, &fill))) return OTTER_ERR_NOMEM;
        if (fill) conv_dw_pack_weights(a);
    }
    if (a->inner_threads)
        conv_slots(a, 0, 1);
    else
        ot_parallel_for(ctx, a->n_slots, 1, conv_slots, a);
    return atomic_load(&a->failed) ? OT_NOMEM() : OTTER_OK;
}

/* ---- small images: the positions of a batch as the rows of one product --------------------------- */

/* Few output positions and many channels (ResNet's later stages, 4x4 and 2x2 at 64x64 inputs; the
 * 1x1 convolutions of mobile nets there): the direct kernel's 16-position tiles and the im2col
 * product's 32-column tiles (columns = positions) run mostly empty, and the 1x1 product repacks W
 * for every image. Here Y^T [images x positions][M] = col^T W^T: the rows of col^T are the
 * positions of a chunk of images (ot_im2col_rows), W^T is packed once (the node's cache, for
 * constant W) as the B of ot_sgemm_prepacked, so its 6 x 32 tiles run full and the weights stream
 * once a chunk; then per image the transpose back to [M][positions] and the epilogue, in cache.
 * Below 64 positions an image, measured on 8 chained 3x3 and 1x1 convolutions of 64-256 channels
 * (one run, alternating, medians, 1 thread): batch 32 at 4x4 1.6-1.8x faster than the direct
 * kernel or the 1x1 product, at 2x2 3-4x; at 8x8 (64) the direct kernel stays ahead (0.7-0.9x).
 * The direct kernel's AVX-512 tiles (12 channels x 32 positions) move the line for kernels larger
 * than 1x1 to 32 positions: at 7x7 (SqueezeNet's 32 -> 128 and 64 -> 256 3x3 convolutions) they
 * took 0.66-0.8x this product's time at batch 32 and 0.8-0.95x at batch 1, at 4x4 (ResNet-18's
 * 256 channels) 1.4-1.6x (one run, alternating, minima, 1 thread). */
static bool conv_rows_pays_off(const ot_conv_geom *g, int64_t group) {
    const bool direct_avx512 = g->k_size > 1 && ot_conv_direct_isa() == OT_CONV_ISA_AVX512;
    return group == 1 && g->out_size < (direct_avx512 ? 32 : 64);
}

#ifdef OT_CONV_X86
/* planes_to_rows with 16 x 16 transposes (a store is a position's 16 channels). */
__attribute__((target("avx512f"))) static void planes_to_rows_avx512(const float *x, int64_t C, int64_t P, float *rows,
                                                                     int64_t ldr) {
    for (int64_t c = 0; c < C; c += 16) {
        const int64_t nc = C - c < 16 ? C - c : 16;
        const __mmask16 cm = ot_lanes16(nc);
        for (int64_t p = 0; p < P; p += 16) {
            const int64_t np = P - p < 16 ? P - p : 16;
            const __mmask16 pm = ot_lanes16(np);
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = i < nc ? _mm512_maskz_loadu_ps(pm, x + (c + i) * P + p) : _mm512_setzero_ps();
            ot_transpose16_avx512(r);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) {
                if (j >= np) break;
                _mm512_mask_storeu_ps(rows + (p + j) * ldr + c, cm, r[j]);
            }
        }
    }
}
#endif

/* y[m][p] = act(yt[p][m] + b[m] (+ z[m][p])), m < M, p < P (b NULL: + 0, as the other paths'
 * epilogue): 4 x 4 blocks through SSE transposes where there is SSE (the scalar transpose, strided
 * loads, was 3-5% of the mobile nets' inference at batch 32), the edges scalar; the activation on
 * runs of planes of at least 256 floats as they are written (in L1; shorter runs, as 4 planes of
 * 1x1 in squeeze-excitation blocks, would be all calls). Each element of z is read just before the
 * same element of y is written. */
static void rows_to_planes(const float *yt, int64_t M, int64_t P, const float *b, const float *z,
                           const ot_fused_act *act, float *y) {
#ifdef OT_CONV_X86
    if (ot_conv_direct_isa() == OT_CONV_ISA_AVX512) {
        ot_conv_rows_to_planes_avx512(yt, M, M, P, b, z, act, y, P);
        return;
    }
#endif
    int64_t m = 0, m_act = 0; /* planes [m_act, m) written, not yet activated */
#if defined(__SSE2__)
    for (; m + 4 <= M; m += 4) {
        int64_t p = 0;
        for (; p + 4 <= P; p += 4) {
            __m128 c[4] = {_mm_loadu_ps(yt + p * M + m), _mm_loadu_ps(yt + (p + 1) * M + m),
                           _mm_loadu_ps(yt + (p + 2) * M + m), _mm_loadu_ps(yt + (p + 3) * M + m)};
            _MM_TRANSPOSE4_PS(c[0], c[1], c[2], c[3]);
            for (int j = 0; j < 4; j++) {
                __m128 v = _mm_add_ps(c[j], _mm_set1_ps(b ? b[m + j] : 0.0f));
                if (z) v = _mm_add_ps(v, _mm_loadu_ps(z + (m + j) * P + p));
                _mm_storeu_ps(y + (m + j) * P + p, v);
            }
        }
        for (int64_t j = m; j < m + 4; j++)
            for (int64_t q = p; q < P; q++) {
                const float v = yt[q * M + j] + (b ? b[j] : 0.0f);
                y[j * P + q] = z ? v + z[j * P + q] : v;
            }
        if ((m + 4 - m_act) * P >= 256) {
            ot_fused_act_apply(act, y + m_act * P, (m + 4 - m_act) * P);
            m_act = m + 4;
        }
    }
#endif
    for (; m < M; m++)
        for (int64_t q = 0; q < P; q++) {
            const float v = yt[q * M + m] + (b ? b[m] : 0.0f);
            y[m * P + q] = z ? v + z[m * P + q] : v;
        }
    ot_fused_act_apply(act, y + m_act * P, (M - m_act) * P);
}

/* One chunk of images of conv_run_rows: their columns (col) and the product's rows (yt). */
typedef struct rows_chunk {
    const conv_args *a;
    const ot_conv_window *win;
    int64_t n0, K;
    int64_t parts; /* channel ranges an image's columns are made in (more than 1: fewer images than threads) */
    float *col, *yt;
} rows_chunk;

/* rows[p * ldr + c] = x[c * P + p], c < C, p < P: a 1x1 convolution's columns as rows (what
 * ot_im2col_rows makes of it element by element: 4.7% of mobilenet_v2's inference at batch 32),
 * 4 x 4 blocks through SSE transposes where there is SSE, the edges scalar. */
static void planes_to_rows(const float *x, int64_t C, int64_t P, float *rows, int64_t ldr) {
#ifdef OT_CONV_X86
    if (ot_conv_direct_isa() == OT_CONV_ISA_AVX512) {
        planes_to_rows_avx512(x, C, P, rows, ldr);
        return;
    }
#endif
    int64_t c = 0;
#if defined(__SSE2__)
    for (; c + 4 <= C; c += 4) {
        int64_t p = 0;
        for (; p + 4 <= P; p += 4) {
            __m128 v[4] = {_mm_loadu_ps(x + c * P + p), _mm_loadu_ps(x + (c + 1) * P + p),
                           _mm_loadu_ps(x + (c + 2) * P + p), _mm_loadu_ps(x + (c + 3) * P + p)};
            _MM_TRANSPOSE4_PS(v[0], v[1], v[2], v[3]);
            for (int j = 0; j < 4; j++) _mm_storeu_ps(rows + (p + j) * ldr + c, v[j]);
        }
        for (; p < P; p++)
            for (int64_t j = c; j < c + 4; j++) rows[p * ldr + j] = x[j * P + p];
    }
#endif
    for (; c < C; c++)
        for (int64_t p = 0; p < P; p++) rows[p * ldr + c] = x[c * P + p];
}

/* Items [i0, i1) of (image, channel range): the range's columns of the image's rows. */
static void rows_im2col(void *arg, int64_t i0, int64_t i1) {
    const rows_chunk *r = arg;
    const ot_conv_geom *g = r->a->g;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t n = i / r->parts, part = i % r->parts;
        const int64_t c0 = part * g->C / r->parts, c1 = (part + 1) * g->C / r->parts;
        const float *x = r->a->X + ((r->n0 + n) * g->C + c0) * g->in_size;
        float *rows = r->col + n * g->out_size * r->K + c0 * g->k_size;
        if (r->a->direct) /* 1x1, stride 1, unpadded: a transpose */
            planes_to_rows(x, c1 - c0, g->out_size, rows, r->K);
        else
            ot_im2col_rows(x, c1 - c0, r->win, rows, r->K);
    }
}

static void rows_back_to_planes(void *arg, int64_t i0, int64_t i1) {
    const rows_chunk *r = arg;
    const conv_args *a = r->a;
    const int64_t M = a->M, P = a->g->out_size;
    for (int64_t i = i0; i < i1; i++) {
        float *y = a->Y + (r->n0 + i) * M * P;
        rows_to_planes(r->yt + i * P * M, M, P, a->B, a->Z ? a->Z + (r->n0 + i) * M * P : NULL, &a->act, y);
    }
}

static otter_status conv_run_rows(ot_kernel_ctx *ctx, conv_args *a) {
    const ot_conv_geom *g = a->g;
    const int64_t N = g->N, M = a->M, P = g->out_size, K = g->C * g->k_size;
    const ot_conv_direct wd = {.constant_w = ot_ctx_input_constant(ctx, 1)};
    bool fill;
    float *wp = ot_conv_packed_weights(ctx, &wd, OT_CONV_FORM_GEMM_B, ot_sgemm_packed_b_size(K, M), &fill);
    if (!wp) return OTTER_ERR_NOMEM;
    if (fill) ot_sgemm_pack_b(ctx, true, K, M, a->Wt, K, wp);
    /* 1x1 maps (squeeze-excitation's fully connected layers): X [N][C] is already the rows and Y
     * [N][M] the product's, so one product with the bias and activation as it stores; the columns and
     * the transposes back (16 x 16 for one position) were two thirds of those layers' time in perf */
    if (P == 1 && a->direct && !a->Z)
        return ot_sgemm_prepacked(ctx, false, N, M, K, 1.0f, a->X, K, wp, a->B ? 1.0f : 0.0f, a->Y, M, a->B, &a->act);
    /* images a chunk: their columns and product within ~4 MB */
    int64_t per = ((int64_t)1 << 20) / (P * (K + M));
    per = per < 1 ? 1 : per > N ? N : per;
    float *col = ot_ctx_scratch(ctx, (size_t)(per * P * (K + M)) * sizeof(float)), *yt = col + per * P * K;
    if (!col) return OTTER_ERR_NOMEM;
    const ot_conv_window win = ot_conv_geom_window(g);
    for (int64_t n0 = 0; n0 < N; n0 += per) {
        const int64_t nb = N - n0 < per ? N - n0 : per;
        /* the columns and the way back per image on the threads, as the product between them; the
         * columns of fewer images than threads in channel ranges (at batch 1 they were a quarter of
         * ResNet-18's 4x4 layers, made on one thread while the other waited) */
        rows_chunk r = {a, &win, n0, K, nb < ctx->n_threads ? 2 * ctx->n_threads : 1, col, yt};
        if (r.parts > g->C) r.parts = g->C;
        ot_parallel_for(ctx, nb * r.parts, 1, rows_im2col, &r);
        OT_TRY(ot_sgemm_prepacked(ctx, false, nb * P, M, K, 1.0f, col, K, wp, 0.0f, yt, M, NULL, NULL));
        /* conv_epilogue's sums while transposing; each element of Z is read just before the same
         * element of Y is written, so Y may be Z's buffer */
        ot_parallel_for(ctx, nb, 1, rows_back_to_planes, &r);
    }
    return OTTER_OK;
}

/* yo = act(conv + z) with z broadcast to the output shape od (rank ord) like Add. */
static void conv_add_broadcast_sum(const float *conv, const otter_tensor *z, const float *zc, int x_rank,
                                   const int64_t *yd, int ord, const int64_t *od, const ot_fused_act *act, float *yo) {
    ot_bcast bc;
    const int ranks[2] = {x_rank, z->rank};
    const int64_t *dims[2] = {yd, z->dims};
    ot_bcast_init(&bc, ord, od, 2, ranks, dims);
    int64_t idx[OTTER_MAX_RANK] = {0};
    for (int64_t i = 0; i < bc.numel; i++) {
        int64_t o1 = 0, o2 = 0;
        for (int d = 0; d < bc.rank; d++) o1 += idx[d] * bc.strides[1][d], o2 += idx[d] * bc.strides[2][d];
        yo[i] = conv[o1] + zc[o2];
        for (int d = bc.rank - 1; d >= 0 && ++idx[d] == bc.dims[d]; d--) idx[d] = 0;
    }
    ot_fused_act_apply(act, yo, bc.numel);
}

/* A convolution of fewer images than threads, fewer FLOPs than this and weights of at most
 * CONV_SERIAL_WEIGHTS bytes runs on the calling thread: at batch 1 a layer split over 2 threads reads
 * half its input from the other core's cache and writes half its output into it (no split of one
 * image's work matches the next layer's), which cost more than the split saved below ~5 MFLOP (25 us)
 * on a Zen 5 EPYC: one process alternating runs, medians, batch 1, 2 threads, mobilenet_v3_small
 * 2.03x, shufflenet_v2_x0_5 2.25x, mobilenet_v2 1.32x, efficientnet_b0 1.34x, squeezenet1_0 1.10x,
 * ResNet-18 unchanged (at 12 MFLOP it lost 8%). With as many images as threads, every path splits by
 * image, and a layer run on one thread would break that (mobilenet_v3_small batch 32 lost 19% when
 * its small depthwise layers did). */
#define CONV_SERIAL_FLOPS 5e6
/* ... but a layer with more weights than this splits all the same: at batch 1 the late 1x1 layers
 * (mobilenet_v2's 320 -> 1280 at 2x2, 1.6 MB; efficientnet_b0's squeeze-excitation 1x1s) stream
 * their weights from L3 for a few positions, and split by output channels each core streams half
 * while the input they share is a few KB. On a Sapphire Rapids Xeon (batch 1, 2 threads, medians of
 * alternating runs): mobilenet_v2 0.79 -> 0.62 ms, efficientnet_b0 1.41 -> 1.15, mobilenet_v3_small
 * 0.30 -> 0.28, shufflenet_v2_x0_5 0.206 -> 0.188 (64 KB; at 32 KB and 16 KB within 5%). */
#define CONV_SERIAL_WEIGHTS (64 << 10)
/* In blocks of 8 channels (AVX2) the layers of a chain split their work alike and the threshold is
 * lower: on a Zen 3 EPYC (batch 1, 2 threads, 5 alternating rounds of 300-run medians, threshold 5e6 /
 * none / 3e5) mobilenet_v2 0.835 / 0.708 / 0.711 ms, efficientnet_b0 1.89 / 1.60 / 1.65, squeezenet1_0
 * 0.89 / 0.77 / 0.79, mobilenet_v3_small 0.378 / 0.367 / 0.365, but shufflenet_v2_x0_5 (layers of
 * 0.1-1 MFLOP) 0.277 / 0.294 / 0.270. */
#define CONV_SERIAL_FLOPS_BLOCKS8 3e5

/* Whether a convolution of geometry g (after ot_conv_geom_to3) to M channels in `group` groups runs on
 * the calling thread alone: under `flops` (CONV_SERIAL_FLOPS, or CONV_SERIAL_FLOPS_BLOCKS8). */
static bool conv_serial(const ot_conv_geom *g, int64_t M, int64_t group, int threads, double flops) {
    const double taps = (double)(g->C / group * g->k_size);
    return g->N < threads && (double)sizeof(float) * (double)M * taps <= CONV_SERIAL_WEIGHTS &&
           2.0 * (double)(g->N * M * g->out_size) * taps < flops;
}

/* The channel-block depthwise path on channel-blocked tensors (d: X, W, B, Z, Y, the activation). */
static otter_status conv_blocked_depthwise(ot_kernel_ctx *ctx, const ot_conv_direct *d, const ot_conv_geom *g,
                                           const ot_dw_plan *plan) {
    conv_args a = {.ctx = ctx,
                   .g = g,
                   .X = d->x,
                   .Wt = d->w,
                   .B = d->bias,
                   .Z = d->sum,
                   .Y = d->y,
                   .M = d->M,
                   .group = d->group,
                   .Cg = 1,
                   .Mg = 1,
                   .act = d->act,
                   .dw = plan,
                   .dw_block = true,
                   .x_blocked = d->x_blocked,
                   .y_blocked = true};
    atomic_init(&a.failed, 0);
    return conv_run_tasks(ctx, &a);
}

/* A com.otter FusedConv with kernel_parts (fuse.c: a Concat of convolutions of one input; see
 * ot_conv_direct.parts): part 0's weight and bias are inputs 1 and 2, part q's inputs 2 + 2q and 3 + 2q
 * (no sum input), each part at its window of the kernel_shape kernel. */
typedef struct conv_parts_in {
    const int64_t *parts; /* NULL: not a kernel_parts node */
    int64_t n;
    const float *w[OT_CONV_MAX_PARTS], *b[OT_CONV_MAX_PARTS];
    bool constant_w; /* every part's weights the same every run */
    otter_tensor wv; /* the whole kernel's shape [M, C, KH, KW], for the geometry (no data) */
} conv_parts_in;

/* Read and check kernel_parts into *pi (pi->parts NULL when the node has none): every part's weights
 * [channels, C, rows, columns] (float, C the same), its bias [channels] or none, its window inside
 * kernel_shape, all parts but the last a multiple of 16 channels. */
static otter_status conv_parts_read(ot_kernel_ctx *ctx, conv_parts_in *pi) {
    pi->parts = NULL, pi->n = 0, pi->constant_w = true;
    const otter_attr *at = is_fused_node(ctx) ? otter_node_attr(ctx->node, "kernel_parts") : NULL;
    if (!at || at->n_ints == 0) return OTTER_OK;
    const otter_attr *ks = otter_node_attr(ctx->node, "kernel_shape");
    const size_t n = at->n_ints / OT_CONV_PART_INTS;
    if (at->n_ints % OT_CONV_PART_INTS || n > OT_CONV_MAX_PARTS || !ks || ks->n_ints != 2 || ks->ints[0] <= 0 ||
        ks->ints[1] <= 0 || ot_ctx_input(ctx, 3))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "kernel_parts needs up to %d parts of %d ints, a 2-D kernel_shape and no sum input",
                            OT_CONV_MAX_PARTS, OT_CONV_PART_INTS);
    int64_t M = 0, C = -1;
    for (size_t q = 0; q < n; q++) {
        const int64_t *pt = at->ints + q * OT_CONV_PART_INTS;
        const size_t wi = q ? 2 + 2 * q : 1;
        const otter_tensor *w = ot_ctx_input(ctx, wi), *b = ot_ctx_input(ctx, wi + 1);
        if (C < 0 && w && w->rank == 4) C = w->dims[1];
        const bool ok = w && w->dtype == OTTER_DTYPE_FLOAT && w->rank == 4 && w->dims[0] == pt[0] && pt[0] > 0 &&
                        w->dims[1] == C && w->dims[2] == pt[1] && w->dims[3] == pt[2] && pt[3] >= 0 && pt[4] >= 0 &&
                        pt[3] + pt[1] <= ks->ints[0] && pt[4] + pt[2] <= ks->ints[1] &&
                        (q + 1 == n || pt[0] % 16 == 0) &&
                        (!b || (b->dtype == OTTER_DTYPE_FLOAT && b->rank == 1 && b->dims[0] == pt[0]));
        if (!ok) {
            char s1[128];
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "kernel_parts: part %zu's weight '%s' %s must be float [%lld, C, %lld, %lld] at "
                                "(%lld, %lld) inside the %lldx%lld kernel (a bias [%lld] or none, all parts but the "
                                "last in 16s of channels)",
                                q, ot_ctx_input_name(ctx, wi), w ? ot_shape_str(s1, sizeof s1, w->rank, w->dims) : "",
                                (long long)pt[0], (long long)pt[1], (long long)pt[2], (long long)pt[3],
                                (long long)pt[4], (long long)ks->ints[0], (long long)ks->ints[1], (long long)pt[0]);
        }
        pi->w[q] = w->data, pi->b[q] = b ? b->data : NULL;
        pi->constant_w = pi->constant_w && ot_ctx_input_constant(ctx, wi);
        M += pt[0];
    }
    pi->wv = *ot_ctx_input(ctx, 1);
    pi->wv.dims[0] = M, pi->wv.dims[2] = ks->ints[0], pi->wv.dims[3] = ks->ints[1], pi->wv.data = NULL;
    pi->parts = at->ints, pi->n = (int64_t)n;
    return OTTER_OK;
}

/* The parts zero-padded into the whole kernel [M][C][KH][KW] and bias [M] (scratch) for the paths other
 * than the channel-lane kernel, which compute the zeros (the same sums but where an input is infinite or NaN). */
static otter_status conv_parts_expand(ot_kernel_ctx *ctx, const conv_parts_in *pi, const float **w, const float **b) {
    const int64_t M = pi->wv.dims[0], C = pi->wv.dims[1], KH = pi->wv.dims[2], KW = pi->wv.dims[3];
    float *we = ot_ctx_scratch(ctx, (size_t)(M * C * KH * KW) * sizeof(float)),
          *be = ot_ctx_scratch(ctx, (size_t)M * sizeof(float));
    if (!we || !be) return OTTER_ERR_NOMEM;
    memset(we, 0, (size_t)(M * C * KH * KW) * sizeof(float));
    for (int64_t q = 0, m0 = 0; q < pi->n; m0 += pi->parts[q * OT_CONV_PART_INTS], q++) {
        const int64_t *pt = pi->parts + q * OT_CONV_PART_INTS;
        for (int64_t m = 0; m < pt[0]; m++) {
            be[m0 + m] = pi->b[q] ? pi->b[q][m] : 0.0f;
            for (int64_t c = 0; c < C; c++)
                for (int64_t r = 0; r < pt[1]; r++)
                    memcpy(we + (((m0 + m) * C + c) * KH + pt[3] + r) * KW + pt[4],
                           pi->w[q] + ((m * C + c) * pt[1] + r) * pt[2], (size_t)pt[2] * sizeof(float));
        }
    }
    *w = we, *b = be;
    return OTTER_OK;
}

/* The channel-block plan of the MaxPool fused after a blocked convolution (its maxpool_ attributes, runtime/layout.c)
 * over the convolution's result, of geometry g (2-D, after ot_conv_geom_to3), M channels in blocks of B. */
static otter_status conv_blocked_pool_plan(ot_kernel_ctx *ctx, const ot_conv_geom *g, int64_t M, int64_t B,
                                           ot_dw_plan *plan) {
    ot_conv_geom pg = {.nd = 2, .N = g->N, .C = M, .in = {g->out[1], g->out[2]}};
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "maxpool_kernel_shape", 2, pg.k, &has));
    if (has)
        OT_TRY(ot_conv_geom_forward_named(ctx, &pg, ot_ctx_attr_int_or(ctx, "maxpool_ceil_mode", 0) != 0, "maxpool_"));
    ot_conv_geom_to3(&pg);
    const ot_conv_window w = ot_conv_geom_window(&pg);
    if (!has || !ot_conv_depthwise_plan(plan, &w, ot_channel_block_isa(B)) || plan->block != B)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "the fused MaxPool needs a 2-D maxpool_kernel_shape and a window of at most %d taps",
                            OT_DW_MAX_TAPS);
    return OTTER_OK;
}

/* com.otter FusedConv with channel_blocks = B (runtime/layout.c): Y and Z in blocks of B channels
 * [N][M / B][OH][OW][B], X planar or blocked (rank 4 or 5), W and B as Conv's; the channel-lane
 * kernel (one group) or the channel-block depthwise code (one channel a group) stores the blocks as
 * it computes them. */
static otter_status conv_blocked(ot_kernel_ctx *ctx, const ot_fused_act *act) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2),
                       *z = ot_ctx_input(ctx, 3);
    conv_parts_in pi;
    OT_TRY(conv_parts_read(ctx, &pi));
    if (pi.parts) w = &pi.wv, b = NULL;
    char s1[128], s2[128];
    const int64_t B = ot_ctx_attr_int_or(ctx, "channel_blocks", 0);
    if (ot_channel_block_isa(B) == OT_DW_PORTABLE)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "channel_blocks %lld: this CPU runs blocks of 16 channels with AVX-512, 8 with AVX2",
                            (long long)B);
    const bool x_blocked = x->rank == 5;
    if (x_blocked) OT_TRY(ot_channel_blocks_check(ctx, 0, x));
    if ((!x_blocked && x->rank != 4) || (x_blocked && x->dims[4] != B))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "channel-blocked convolution of '%s' %s needs planar [N, C, H, W] or blocked "
                            "[N, C/%lld, H, W, %lld]",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims), (long long)B,
                            (long long)B);
    if (z) OT_TRY(ot_channel_blocks_check(ctx, 3, z));
    if (z && z->dims[4] != B)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' %s is not in blocks of %lld channels",
                            ot_ctx_input_name(ctx, 3), ot_shape_str(s1, sizeof s1, z->rank, z->dims), (long long)B);
    const otter_tensor xv = x_blocked ? ot_channel_blocks_planar(x) : *x, zv = z ? ot_channel_blocks_planar(z) : xv;
    ot_conv_geom g;
    int64_t group = 1;
    OT_TRY(conv_check(ctx, &xv, w, b, z ? &zv : NULL, &g, &group));
    const int64_t M = w->dims[0], yd[5] = {g.N, M / B, g.out[0], g.out[1], B};
    ot_conv_geom_to3(&g);
    ot_conv_direct d = {.N = g.N,
                        .C = g.C,
                        .M = M,
                        .group = group,
                        .win = ot_conv_geom_window(&g),
                        .act = *act,
                        .constant_w = pi.parts ? pi.constant_w : ot_ctx_input_constant(ctx, 1),
                        .x_blocked = x_blocked,
                        .y_blocked = true,
                        .block = B,
                        .parts = pi.parts,
                        .n_parts = pi.n,
                        .part_w = pi.w,
                        .part_b = pi.b};
    ot_dw_plan plan;
    const bool depthwise = group > 1 && group == g.C && M == g.C &&
                           ot_conv_depthwise_plan(&plan, &d.win, ot_channel_block_isa(B)) && plan.block == B;
    if (x->dtype != OTTER_DTYPE_FLOAT || M % B != 0 || (!depthwise && !ot_conv_lanes_supported(&d)))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "channel-blocked convolution of '%s' with weight '%s' %s needs float, one group or one "
                            "channel a group, 2-D, a multiple of %lld output channels and no negative pads",
                            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, w->rank, w->dims), (long long)B);
    /* a sum input of another shape broadcasts like Add: the blocks of both line up, as the planar
     * shapes' channels are the same multiple of B */
    int ord = 5;
    int64_t od[OTTER_MAX_RANK];
    memcpy(od, yd, sizeof yd);
    const bool z_bcast = z && memcmp(z->dims, yd, sizeof yd) != 0;
    if (z_bcast && !ot_broadcast_shape2(5, yd, 5, z->dims, &ord, od))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' %s does not broadcast with %s",
                            ot_ctx_input_name(ctx, 3), ot_shape_str(s1, sizeof s1, z->rank, z->dims),
                            ot_shape_str(s2, sizeof s2, 5, yd));
    /* a MaxPool fused after it (runtime/layout.c: the maxpool_ attributes): the result pooled */
    ot_dw_plan pool;
    const bool pooled = ot_ctx_attr_set(ctx, "maxpool_kernel_shape");
    if (pooled) {
        OT_TRY(conv_blocked_pool_plan(ctx, &g, M, B, &pool));
        if (z) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "a fused MaxPool after a fused sum is not supported");
        od[2] = pool.OH, od[3] = pool.OW;
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, ord, od);
    if (!y) return ctx->output_status;
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    d.x = x->data, d.w = w->data, d.bias = b ? b->data : NULL, d.sum = z_bcast || !z ? NULL : z->data, d.y = y->data;
    /* the channel-lane kernel pools each image as it is done; the other paths convolve into scratch first */
    const bool one_product = group == 1 && g.in_size == 1 && g.out_size == 1 && g.k_size == 1 && !d.sum && !d.parts;
    if (pooled && !depthwise && !one_product) {
        d.pool = &pool, d.pooled = y->data;
    } else if (pooled && !(d.y = ot_ctx_scratch(ctx, (size_t)(g.N * M * g.out_size) * sizeof(float)))) {
        return OTTER_ERR_NOMEM;
    }
    /* with a broadcast sum: conv + bias into scratch, then the sum and the activation as it broadcasts */
    if (z_bcast) {
        if (!(d.y = ot_ctx_scratch(ctx, (size_t)(g.N * M * g.out_size) * sizeof(float)))) return OTTER_ERR_NOMEM;
        d.act = (ot_fused_act){OT_FUSED_NONE, 0, 0};
    }
    plan.flat = false; /* the blocked forward always reads a padded block (its scratch zeroed for that) */
    /* 1x1 on 1x1 maps (squeeze-excitation's fully connected layers): blocked [N][C / B][1][1][B] is
     * planar [N][C], so the planar path's one product (a tile of one position in the lanes kernel
     * streamed the weights once an image: mobilenet_v3_small's 0.04 ms layers took 0.10) */
    const int threads = ctx->n_threads;
    if (conv_serial(&g, M, group, threads, B == 8 ? CONV_SERIAL_FLOPS_BLOCKS8 : CONV_SERIAL_FLOPS)) ctx->n_threads = 1;
    otter_status st;
    if (one_product) {
        conv_args a = {.ctx = ctx,
                       .g = &g,
                       .X = d.x,
                       .Wt = d.w,
                       .B = d.bias,
                       .Y = d.y,
                       .M = M,
                       .group = 1,
                       .Cg = g.C,
                       .Mg = M,
                       .act = d.act,
                       .direct = true};
        st = conv_run_rows(ctx, &a);
    } else {
        st = depthwise ? conv_blocked_depthwise(ctx, &d, &g, &plan) : ot_conv_lanes_run(ctx, &d);
    }
    ctx->n_threads = threads;
    OT_TRY(st);
    if (z_bcast) conv_add_broadcast_sum(d.y, z, z->data, 5, yd, ord, od, act, y->data);
    if (pooled && !d.pool)
        return ot_nn_blocked_maxpool(ctx, &pool, d.y, y->data, g.N * M / B, g.out_size, pool.OH * pool.OW);
    return OTTER_OK;
}

/* Conv's outputs for the result shape od (rank ord): Y, pooled 2x2 with pool; with pooling in a
 * training graph (fuse.c) also MaxPool's Indices (*ind) and the unpooled shape. */
static otter_status conv_outputs(ot_kernel_ctx *ctx, otter_dtype dtype, int ord, const int64_t *od, bool pool,
                                 otter_tensor **y, otter_tensor **ind) {
    *ind = NULL;
    int64_t pd[OTTER_MAX_RANK];
    memcpy(pd, od, sizeof(int64_t) * (size_t)ord);
    if (pool) pd[2] = od[2] / 2, pd[3] = od[3] / 2;
    *y = ot_ctx_output(ctx, 0, dtype, ord, pd);
    if (!*y) return ctx->output_status;
    /* outputs 1 and 2 with pooling (fuse.c, from a training graph): MaxPool's Indices, the unpooled shape */
    if (pool && ctx->n_outputs > 1 && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) &&
        !(*ind = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, ord, pd)))
        return ctx->output_status;
    if (pool && ctx->n_outputs > 2 && ctx->node->n_outputs > 2 && !ot_str_empty(ctx->node->outputs[2])) {
        int64_t r = ord;
        otter_tensor *sh = ot_ctx_output(ctx, 2, OTTER_DTYPE_INT64, 1, &r);
        if (!sh) return ctx->output_status;
        memcpy(sh->data, od, sizeof(int64_t) * (size_t)ord);
    }
    return OTTER_OK;
}

otter_status ot_kernel_conv(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    char s1[128], s2[128];
    ot_fused_act act;
    OT_TRY(ot_fused_act_read(ctx, &act));
    if (is_fused_node(ctx) && ot_ctx_attr_int_or(ctx, "channel_blocks", 0)) return conv_blocked(ctx, &act);
    const otter_tensor *z = is_fused_node(ctx) ? ot_ctx_input(ctx, 3) : NULL;
    conv_parts_in pi;
    OT_TRY(conv_parts_read(ctx, &pi));
    if (pi.parts) w = &pi.wv, b = NULL;
    ot_conv_geom g;
    int64_t group = 1;
    OT_TRY(conv_check(ctx, x, w, b, z, &g, &group));
    int nd = x->rank - 2;
    int64_t M = w->dims[0];
    int64_t yd[2 + OT_SP] = {g.N, M};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.out[i];
    /* A fused sum input of another shape: broadcast like Add, after the conv (into scratch). */
    bool z_bcast = z && (z->rank != x->rank || memcmp(z->dims, yd, sizeof(int64_t) * (size_t)x->rank) != 0);
    int ord = x->rank;
    int64_t od[OTTER_MAX_RANK];
    memcpy(od, yd, sizeof(int64_t) * (size_t)x->rank);
    if (z_bcast && !ot_broadcast_shape2(x->rank, yd, z->rank, z->dims, &ord, od))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' %s does not broadcast with %s",
                            ot_ctx_input_name(ctx, 3), ot_shape_str(s1, sizeof s1, z->rank, z->dims),
                            ot_shape_str(s2, sizeof s2, x->rank, yd));
    /* com.otter FusedConv with maxpool_2x2: the result is max-pooled 2x2, stride 2 (fuse.c) */
    bool pool = is_fused_node(ctx) && ot_ctx_attr_int_or(ctx, "maxpool_2x2", 0) != 0;
    if (pool && (ord != 4 || x->dtype != OTTER_DTYPE_FLOAT))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "maxpool_2x2 needs a float 2-D convolution");
    /* pooling follows the activation: only Relu's place is fused (fuse.c) */
    if (pool && act.kind != OT_FUSED_NONE && act.kind != OT_FUSED_RELU)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "maxpool_2x2 with fused activation '%s' is not supported",
                            ot_ctx_attr_string_or(ctx, "activation", ""));
    otter_tensor *y, *ind;
    OT_TRY(conv_outputs(ctx, x->dtype, ord, od, pool, &y, &ind));
    ot_conv_geom_to3(&g);
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    conv_args a = {.ctx = ctx, .g = &g, .M = M, .group = group, .Cg = g.C / group, .Mg = M / group, .act = act};
    atomic_init(&a.failed, 0);
    const ot_conv_window win = ot_conv_geom_window(&g);
    ot_dw_plan dw;
    if (group > 1 && a.Cg == 1 && ot_conv_depthwise_plan(&dw, &win, ot_conv_depthwise_isa())) a.dw = &dw;
    a.dw_block = a.dw && a.Mg == 1 && ot_conv_depthwise_block_pays_off(&dw);
    a.direct = !a.dw && g.k_size == 1 && g.pb[0] + g.pb[1] + g.pb[2] == 0 &&
               g.stride[0] * g.stride[1] * g.stride[2] == 1 && g.in_size == g.out_size;
    float *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK && !pi.parts) s = ot_ctx_input_f32(ctx, 1, w, &a.Wt, &tw);
    if (s == OTTER_OK && b) s = ot_ctx_input_f32(ctx, 2, b, &a.B, &tb);
    const ot_conv_direct shape = {.N = g.N, .C = g.C, .M = M, .group = group, .win = win, .maxpool_2x2 = pool};
    /* weights that change every run (training) over 16+ images of small maps: the images in the lanes
     * (conv_small.c); kernel_parts: the channel-lane kernel where it runs, else the parts padded into
     * one kernel */
    const bool small = group == 1 && !pool && !pi.parts && !ot_ctx_input_constant(ctx, 1) &&
                       ot_conv_small_pays_off(&win, g.N, g.C, M, OT_CONV_SMALL_FORWARD),
               lanes = !small && (pi.parts ? ot_conv_lanes_supported(&shape) : ot_conv_lanes_pays_off(&shape)),
               rows = !lanes && !small && conv_rows_pays_off(&g, group),
               direct = !lanes && !small && !rows && !a.direct && !a.dw && ot_conv_direct_supported(&win);
    /* Y may be Z's buffer (OT_OP_INPLACE3). The direct kernels (conv_direct.c, conv_lanes.c) and the
     * small-image product without pooling read each element of Z just before they write that element
     * of Y; the other paths write Y first and get a copy of Z. */
    if (s == OTTER_OK && pi.parts && !lanes) s = conv_parts_expand(ctx, &pi, &a.Wt, &a.B);
    const float *zdata = z ? z->data : NULL;
    if (s == OTTER_OK && z && z->data == y->data && !((direct || rows || lanes) && !pool && !z_bcast)) {
        float *copy = ot_ctx_scratch(ctx, otter_tensor_nbytes(z));
        if (!copy)
            s = OTTER_ERR_NOMEM;
        else
            zdata = memcpy(copy, z->data, otter_tensor_nbytes(z));
    }
    /* the unpooled result, when the direct kernel doesn't pool as it stores */
    float *full = NULL;
    if (s == OTTER_OK && pool && (!direct || z_bcast) &&
        !(full = ot_ctx_scratch(ctx, (size_t)(od[0] * od[1] * od[2] * od[3]) * sizeof(float))))
        s = OTTER_ERR_NOMEM;
    if (s == OTTER_OK && z_bcast) {
        /* conv (+ bias) into scratch; sum and activation below */
        if (!(a.Y = ot_ctx_scratch(ctx, (size_t)(g.N * M * g.out_size) * sizeof(float)))) s = OTTER_ERR_NOMEM;
        a.act = (ot_fused_act){OT_FUSED_NONE, 0, 0};
    } else if (s == OTTER_OK) {
        if (full)
            a.Y = full;
        else
            s = ot_output_f32(y, &a.Y, &ty);
        a.Z = zdata;
    }
    /* small convolutions on the calling thread alone (CONV_SERIAL_FLOPS) */
    const int threads = ctx->n_threads;
    if (conv_serial(&g, M, group, threads, CONV_SERIAL_FLOPS)) ctx->n_threads = 1;
    if (s == OTTER_OK && (direct || lanes)) {
        const ot_conv_direct d = {.x = a.X,
                                  .w = a.Wt,
                                  .bias = a.B,
                                  .sum = a.Z,
                                  .y = a.Y,
                                  .N = g.N,
                                  .C = g.C,
                                  .M = M,
                                  .group = group,
                                  .win = win,
                                  .act = a.act,
                                  .maxpool_2x2 = pool && !full,
                                  .indices = ind && !full ? ind->data : NULL,
                                  .winograd = ctx->winograd,
                                  .constant_w = pi.parts ? pi.constant_w : ot_ctx_input_constant(ctx, 1),
                                  .parts = lanes ? pi.parts : NULL,
                                  .n_parts = pi.n,
                                  .part_w = pi.w,
                                  .part_b = pi.b};
        s = lanes ? ot_conv_lanes_run(ctx, &d) : ot_conv_direct_run(ctx, &d);
    } else if (s == OTTER_OK && small) {
        s = ot_conv_small_forward(ctx, &win, g.N, g.C, M, a.X, a.Wt, a.Y);
        for (int64_t n = 0; s == OTTER_OK && n < g.N && (a.B || a.Z || a.act.kind != OT_FUSED_NONE); n++)
            conv_epilogue(a.Y + n * M * g.out_size, a.Z ? a.Z + n * M * g.out_size : NULL, a.B, M, g.out_size, &a.act);
    } else if (s == OTTER_OK && rows) {
        s = conv_run_rows(ctx, &a);
    } else if (s == OTTER_OK) {
        s = conv_run_tasks(ctx, &a);
    }
    ctx->n_threads = threads;
    if (s == OTTER_OK && z_bcast) /* y = act(conv + z), broadcast */
        conv_add_broadcast_sum(a.Y, z, zdata, x->rank, yd, ord, od, &act, full ? full : y->data);
    if (s == OTTER_OK && full && ind)
        ot_nn_maxpool_2x2_indices(ctx, full, od[0] * od[1], od[2], od[3], y->data, ind->data);
    else if (s == OTTER_OK && full)
        maxpool_2x2(full, od[0] * od[1], od[2], od[3], y->data);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tw), ot_free(tb);
    return s;
}

/* ---- ConvInteger / QLinearConv: direct integer convolution ------------------------------------- */

/* acc[n][m][out] = sum (x - xzp) * (w - wzp[m]) over the receptive field, in int32. */
static void int_conv(const ot_conv_geom *g, const otter_tensor *x, const otter_tensor *w, int32_t xzp,
                     const otter_tensor *wzp, int64_t M, int64_t group, int32_t *acc) {
    int64_t Cg = g->C / group, Mg = M / group, nw = wzp ? otter_tensor_numel(wzp) : 0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t gr = m / Mg;
            int32_t zw = nw == 0 ? 0 : (int32_t)ot_get_i64(wzp->data, wzp->dtype, nw == 1 ? 0 : m);
            for (int64_t od = 0; od < g->out[0]; od++)
                for (int64_t oh = 0; oh < g->out[1]; oh++)
                    for (int64_t ow = 0; ow < g->out[2]; ow++) {
                        int32_t sum = 0;
                        for (int64_t c = 0; c < Cg; c++)
                            for (int64_t kd = 0; kd < g->k[0]; kd++) {
                                int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0];
                                if (id < 0 || id >= g->in[0]) continue;
                                for (int64_t kh = 0; kh < g->k[1]; kh++) {
                                    int64_t ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1];
                                    if (ih < 0 || ih >= g->in[1]) continue;
                                    for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                        int64_t iw = ow * g->stride[2] - g->pb[2] + kw * g->dil[2];
                                        if (iw < 0 || iw >= g->in[2]) continue;
                                        int64_t xi =
                                            (((n * g->C + gr * Cg + c) * g->in[0] + id) * g->in[1] + ih) * g->in[2] +
                                            iw;
                                        int64_t wi = (((m * Cg + c) * g->k[0] + kd) * g->k[1] + kh) * g->k[2] + kw;
                                        sum += ((int32_t)ot_get_i64(x->data, x->dtype, xi) - xzp) *
                                               ((int32_t)ot_get_i64(w->data, w->dtype, wi) - zw);
                                    }
                                }
                            }
                        acc[((n * M + m) * g->out[0] + od) * g->out[1] * g->out[2] + oh * g->out[2] + ow] = sum;
                    }
        }
}

/* Shared setup: x at input 0, w at input wi; output dims into yd. */
static otter_status int_conv_setup(ot_kernel_ctx *ctx, size_t wi, ot_conv_geom *g, int64_t *group, int64_t *M,
                                   int64_t *yd) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, wi);
    char s1[128], s2[128];
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of x", ot_ctx_input_name(ctx, wi));
    if ((x->dtype != OTTER_DTYPE_UINT8 && x->dtype != OTTER_DTYPE_INT8) ||
        (w->dtype != OTTER_DTYPE_UINT8 && w->dtype != OTTER_DTYPE_INT8))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "x and w must be int8 or uint8 (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    memset(g, 0, sizeof *g);
    int nd = x->rank - 2;
    for (int i = 0; i < nd; i++) g->k[i] = w->dims[2 + i];
    OT_TRY(ot_nn_geom_forward(ctx, x, g, false));
    OT_TRY(ot_ctx_attr_int(ctx, "group", group));
    *M = w->dims[0];
    if (*group < 1 || g->C % *group != 0 || *M % *group != 0 || w->dims[1] * *group != g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "x '%s' %s, w '%s' %s and group %lld don't agree",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_ctx_input_name(ctx, wi), ot_shape_str(s2, sizeof s2, w->rank, w->dims),
                            (long long)*group);
    yd[0] = g->N, yd[1] = *M;
    for (int i = 0; i < nd; i++) yd[2 + i] = g->out[i];
    ot_conv_geom_to3(g);
    return OTTER_OK;
}

otter_status ot_kernel_convinteger(ot_kernel_ctx *ctx) {
    ot_conv_geom g;
    int64_t group = 1, M = 0, yd[2 + OT_SP];
    OT_TRY(int_conv_setup(ctx, 1, &g, &group, &M, yd));
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *xz = ot_ctx_input(ctx, 2),
                       *wz = ot_ctx_input(ctx, 3);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT32, x->rank, yd);
    if (!y) return ctx->output_status;
    int32_t xzp = xz && otter_tensor_numel(xz) > 0 ? (int32_t)ot_get_i64(xz->data, xz->dtype, 0) : 0;
    int_conv(&g, x, w, xzp, wz, M, group, y->data);
    return OTTER_OK;
}

otter_status ot_kernel_qlinearconv(ot_kernel_ctx *ctx) {
    for (size_t i = 0; i < 8; i++)
        if (!ot_ctx_input(ctx, i)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    ot_conv_geom g;
    int64_t group = 1, M = 0, yd[2 + OT_SP];
    OT_TRY(int_conv_setup(ctx, 3, &g, &group, &M, yd));
    const otter_tensor *x = ot_ctx_input(ctx, 0), *xs = ot_ctx_input(ctx, 1), *xz = ot_ctx_input(ctx, 2),
                       *w = ot_ctx_input(ctx, 3), *ws = ot_ctx_input(ctx, 4), *wz = ot_ctx_input(ctx, 5),
                       *ys = ot_ctx_input(ctx, 6), *yz = ot_ctx_input(ctx, 7), *b = ot_ctx_input(ctx, 8);
    int64_t nws = otter_tensor_numel(ws);
    if (nws != 1 && nws != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "w_scale '%s' must have 1 or %lld elements",
                            ot_ctx_input_name(ctx, 4), (long long)M);
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "B '%s' must have %lld elements", ot_ctx_input_name(ctx, 8),
                            (long long)M);
    otter_tensor *y = ot_ctx_output(ctx, 0, yz->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(y), osz = g.out_size;
    int32_t *acc = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!acc) return OT_NOMEM();
    int_conv(&g, x, w, (int32_t)ot_get_i64(xz->data, xz->dtype, 0), wz, M, group, acc);
    double xsc = ot_get_f64(xs->data, xs->dtype, 0), ysc = ot_get_f64(ys->data, ys->dtype, 0);
    double yzp = (double)ot_get_i64(yz->data, yz->dtype, 0);
    double lo = yz->dtype == OTTER_DTYPE_UINT8 ? 0 : -128, hi = yz->dtype == OTTER_DTYPE_UINT8 ? 255 : 127;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = (i / osz) % M;
        double v = (double)acc[i] + (b ? (double)ot_get_i64(b->data, b->dtype, m) : 0.0);
        v = nearbyint(v * xsc * ot_get_f64(ws->data, ws->dtype, nws == 1 ? 0 : m) / ysc) + yzp;
        ot_set_f64(y->data, y->dtype, i, v < lo ? lo : v > hi ? hi : v);
    }
    ot_free(acc);
    return OTTER_OK;
}

/* ---- ConvTranspose ---------------------------------------------------------------------------- */

otter_status ot_kernel_convtranspose(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    char s1[128], s2[128];
    OT_TRY(ot_nn_check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of X %s", ot_ctx_input_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims));
    if (!ot_nn_float_like(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and B must share one float dtype (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    int nd = x->rank - 2;
    int64_t group, C = x->dims[1], N = x->dims[0];
    OT_TRY(ot_ctx_attr_int(ctx, "group", &group));
    if (group < 1 || C % group != 0 || w->dims[0] != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s, weight '%s' %s and group %lld don't agree",
                            ot_ctx_input_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims),
                            ot_ctx_input_name(ctx, 1), ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    int64_t Mg = w->dims[1], M = Mg * group, Cg = C / group;
    /* g describes the equivalent forward conv: g.in = our output (image), g.out = our input. */
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nd = nd;
    bool has;
    int64_t pads[2 * OT_SP] = {0}, oshape[OT_SP];
    for (int i = 0; i < nd; i++) {
        g.k[i] = w->dims[2 + i], g.stride[i] = 1, g.dil[i] = 1, g.opad[i] = 0;
        g.out[i] = x->dims[2 + i];
    }
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", nd, g.stride, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "dilations", nd, g.dil, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "output_padding", nd, g.opad, &has));
    bool has_pads;
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * nd, pads, &has_pads));
    bool has_oshape;
    const otter_attr *osa = otter_node_attr(ctx->node, "output_shape");
    has_oshape = osa && osa->n_ints > 0;
    if (has_oshape) {
        if ((int)osa->n_ints != nd && (int)osa->n_ints != nd + 2)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'output_shape' has %zu values, expected %d",
                                osa->n_ints, nd);
        for (int i = 0; i < nd; i++) oshape[i] = osa->ints[osa->n_ints - (size_t)nd + (size_t)i];
    }
    const char *auto_pad;
    OT_TRY(ot_ctx_attr_string(ctx, "auto_pad", &auto_pad));
    ot_auto_pad pad = ot_auto_pad_from(auto_pad);
    for (int i = 0; i < nd; i++) {
        g.pb[i] = pads[i], g.pe[i] = pads[nd + i];
        ot_window_status ws =
            ot_window_transpose_axis(g.out[i], g.k[i], g.stride[i], g.dil[i], g.opad[i], pad,
                                     has_oshape ? oshape[i] : -1, has_pads, &g.pb[i], &g.pe[i], &g.in[i]);
        if (ws == OT_WINDOW_BAD_PARAM)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "invalid stride/dilation along spatial axis %d", i);
        if (ws == OT_WINDOW_TOO_SMALL)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative output size along spatial axis %d", i);
    }
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld",
                            ot_ctx_input_name(ctx, 2), (long long)otter_tensor_numel(b), (long long)M);
    int64_t yd[2 + OT_SP] = {N, M};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.in[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    ot_conv_geom_to3(&g);
    const float *X, *Wt, *B = NULL;
    float *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL, *Y, *col = NULL;
    otter_status s = ot_ctx_input_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = ot_ctx_input_f32(ctx, 1, w, &Wt, &tw);
    if (s == OTTER_OK && b) s = ot_ctx_input_f32(ctx, 2, b, &B, &tb);
    if (s == OTTER_OK) s = ot_output_f32(y, &Y, &ty);
    int64_t rows = Mg * g.k_size, isz = g.out_size, osz = g.in_size;
    if (s == OTTER_OK && !(col = ot_malloc((size_t)(rows * isz > 0 ? rows * isz : 1) * sizeof(float)))) s = OT_NOMEM();
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            float *yg = Y + (n * M + gr * Mg) * osz;
            for (int64_t m = 0; m < Mg; m++) {
                float bv = B ? B[gr * Mg + m] : 0.0f;
                for (int64_t j = 0; j < osz; j++) yg[m * osz + j] = bv;
            }
            /* col (Mg*k x isz) = W_g^T (Mg*k x Cg) * X_g (Cg x isz) */
            s = ot_sgemm(ctx, true, false, rows, isz, Cg, 1.0f, Wt + gr * Cg * rows, rows, X + (n * C + gr * Cg) * isz,
                         isz, 0.0f, col, isz);
            if (s == OTTER_OK) {
                /* the window of the forward conv ConvTranspose inverts: g.in is its image, g.out its columns */
                const ot_conv_window w = ot_conv_geom_window(&g);
                ot_col2im(col, Mg, &w, yg, g.out_size);
            }
        }
    ot_free(col);
    if (s == OTTER_OK)
        ot_output_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tw), ot_free(tb);
    return s;
}
