/* Pooling gradients: MaxPoolGrad (and com.otter's fused MaxPoolGrad), AveragePoolGrad. */
#include <stdatomic.h>
#include <string.h>

#include "runtime/ops/conv_geom.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/training_internal.h"

#if defined(__wasm_simd128__)
#include <wasm_simd128.h>
#endif

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

#ifdef OT_TR_X86
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

#if defined(__wasm_simd128__)
/* scatter_blocks_2x2 for 4 blocks at a time from block 0 in SIMD128 (the AVX2 version's scheme: index offsets
 * compared with the four taps as 64-bit lanes, the masks narrowed to 32 bits to select dY); returns the blocks
 * done, or -1. */
static int64_t scatter_blocks_2x2_wasm(const pool_scatter *a, int64_t p, int64_t oh) {
    const int64_t W = a->W, OW = W / 2, lo = p * a->px;
    float *d0 = a->dx + lo + 2 * oh * W, *d1 = d0 + W;
    const v128_t zero = wasm_i64x2_splat(0), one = wasm_i64x2_splat(1), w0 = wasm_i64x2_splat(W),
                 w1 = wasm_i64x2_splat(W + 1);
    v128_t bad = wasm_i32x4_splat(0);
    int64_t ow = 0;
    for (; ow + 4 <= OW; ow += 4) {
        const int64_t i = p * a->py + oh * OW + ow, block0 = lo + 2 * (oh * W + ow);
        v128_t k01 = a->i64 ? wasm_v128_load(a->i64 + i) : wasm_i64x2_load32x2(a->i32 + i);
        v128_t k23 = a->i64 ? wasm_v128_load(a->i64 + i + 2) : wasm_i64x2_load32x2(a->i32 + i + 2);
        k01 = wasm_i64x2_sub(k01, wasm_i64x2_make(block0, block0 + 2));
        k23 = wasm_i64x2_sub(k23, wasm_i64x2_make(block0 + 4, block0 + 6));
        /* all-ones or all-zeros 64-bit masks: their low halves are the 32-bit ones */
#define WS_TAP(t) wasm_i32x4_shuffle(wasm_i64x2_eq(k01, t), wasm_i64x2_eq(k23, t), 0, 2, 4, 6)
        const v128_t e0 = WS_TAP(zero), e1 = WS_TAP(one), eW = WS_TAP(w0), eW1 = WS_TAP(w1);
#undef WS_TAP
        bad = wasm_v128_or(bad, wasm_v128_not(wasm_v128_or(wasm_v128_or(e0, e1), wasm_v128_or(eW, eW1))));
        v128_t v = wasm_v128_load(a->dy + i);
        if (a->y) v = wasm_v128_and(v, wasm_f32x4_gt(wasm_v128_load(a->y + i), wasm_f32x4_splat(0.0f)));
        v = wasm_f32x4_add(wasm_f32x4_splat(0.0f), v); /* scatter_value's 0 + dY */
        const v128_t t0 = wasm_v128_and(e0, v), t1 = wasm_v128_and(e1, v), tW = wasm_v128_and(eW, v),
                     tW1 = wasm_v128_and(eW1, v);
        wasm_v128_store(d0 + 2 * ow, wasm_i32x4_shuffle(t0, t1, 0, 4, 1, 5));
        wasm_v128_store(d0 + 2 * ow + 4, wasm_i32x4_shuffle(t0, t1, 2, 6, 3, 7));
        wasm_v128_store(d1 + 2 * ow, wasm_i32x4_shuffle(tW, tW1, 0, 4, 1, 5));
        wasm_v128_store(d1 + 2 * ow + 4, wasm_i32x4_shuffle(tW, tW1, 2, 6, 3, 7));
    }
    return wasm_v128_any_true(bad) ? -1 : ow;
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
#ifdef OT_TR_X86
        if (a->avx2 && (ow = scatter_blocks_2x2_avx2(a, p, oh)) < 0) return false;
#endif
#if defined(__wasm_simd128__)
        if ((ow = scatter_blocks_2x2_wasm(a, p, oh)) < 0) return false;
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
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
    OT_TRY(ot_train_need(ctx, 1, "Indices", &ind));
    if (otter_tensor_numel(ind) != otter_tensor_numel(dy) ||
        (ind->dtype != OTTER_DTYPE_INT64 && ind->dtype != OTTER_DTYPE_INT32))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Indices '%s' must be int64 with dY's shape",
                            ot_ctx_input_name(ctx, 1));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    if (ot_ctx_input(ctx, 2))
        OT_TRY(ot_train_shape_input(ctx, 2, &rank, dims));
    else
        OT_TRY(pool_grad_shape(ctx, dy, &rank, dims));
    const otter_tensor *y = ot_ctx_input(ctx, 3);
    if (y && otter_tensor_numel(y) != otter_tensor_numel(dy))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "Y '%s' must have dY's shape", ot_ctx_input_name(ctx, 3));
    const float *DY, *Y = NULL;
    float *t0 = NULL, *t3 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK && y) s = ot_train_in(ctx, 3, &Y, &t3);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, rank, dims, &dx, &DX, &ty);
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
#ifdef OT_TR_X86
            a.avx2 = ot_train_cpu_has_avx2();
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
        ot_output_f32_done(dx, ty);
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
    OT_TRY(ot_train_need(ctx, 0, "dY", &dy));
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
    int64_t ceil_mode, incl;
    OT_TRY(ot_ctx_attr_int(ctx, "ceil_mode", &ceil_mode)); /* AveragePool's (the registry's attrs_of) */
    OT_TRY(ot_ctx_attr_int(ctx, "count_include_pad", &incl));
    OT_TRY(ot_conv_geom_forward(ctx, &g, ceil_mode != 0));
    OT_TRY(ot_train_check_dy(ctx, &g, dy, g.out));
    if (dims[0] != dy->dims[0] || dims[1] != dy->dims[1])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "declared dX batch/channel dims differ from dY's");
    ot_conv_geom_to3(&g);
    const float *DY;
    float *t0 = NULL, *ty = NULL, *DX;
    otter_tensor *dx;
    otter_status s = ot_train_in(ctx, 0, &DY, &t0);
    if (s == OTTER_OK) s = ot_train_out(ctx, 0, dy->dtype, rank, dims, &dx, &DX, &ty);
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
        ot_output_f32_done(dx, ty);
    } else {
        ot_free(ty);
    }
    ot_free(t0);
    return s;
}
