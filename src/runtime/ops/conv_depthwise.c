/* Depthwise convolution and its gradients over stride-phase padded planes (see conv_depthwise.h). */
#include "runtime/ops/conv_depthwise.h"

#include <math.h>
#include <string.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/fused_act.h"
#include "runtime/ops/simd_transpose.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define OT_DW_X86 1
#endif

/* The row copies below are short (a plane's width): GCC would turn their loops into memmove calls,
 * which cost more than the copies (measured: memmove 22% of a batch of depthwise layers). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif

#define DW_VEC 16 /* floats the wide grids are rounded to: a whole vector on every path */

static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

ot_dw_isa ot_conv_depthwise_isa(void) {
#ifdef OT_DW_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return OT_DW_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return OT_DW_AVX2;
#endif
    return OT_DW_PORTABLE;
}

bool ot_conv_depthwise_isa_supported(ot_dw_isa isa) { return isa <= ot_conv_depthwise_isa(); }

/* ---- the vector loops ----------------------------------------------------------------------------
 * correlate: out[j] = (add ? out[j] : 0) + sum over taps t of w[t] * in[j + off[t]], j in [0, n).
 * dots:      lanes[t] += dy[j] * in[j + off[t]] over j in [0, n), in DW_VEC float lanes per tap (summed
 *            once at the end: per plane, a horizontal sum would cost as much as a small plane's products).
 * n is a multiple of DW_VEC. */

static void correlate_portable(float *restrict out, int64_t n, const float *in, const int64_t *off, const float *w,
                               int64_t taps, bool add) {
    const ot_v4 zero = {0, 0, 0, 0};
    for (int64_t j = 0; j < n; j += DW_VEC) {
        ot_v4 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
        if (add)
            a0 = ot_v4_load(out + j), a1 = ot_v4_load(out + j + 4), a2 = ot_v4_load(out + j + 8),
            a3 = ot_v4_load(out + j + 12);
        for (int64_t t = 0; t < taps; t++) {
            const float *s = in + j + off[t];
            const ot_v4 wv = {w[t], w[t], w[t], w[t]};
            a0 += wv * ot_v4_load(s), a1 += wv * ot_v4_load(s + 4);
            a2 += wv * ot_v4_load(s + 8), a3 += wv * ot_v4_load(s + 12);
        }
        ot_v4_store(out + j, a0), ot_v4_store(out + j + 4, a1);
        ot_v4_store(out + j + 8, a2), ot_v4_store(out + j + 12, a3);
    }
}

static void dots_portable(const float *dy, int64_t n, const float *in, const int64_t *off, int64_t taps, float *lanes) {
    for (int64_t t = 0; t < taps; t++) {
        const float *s = in + off[t];
        float *l = lanes + t * DW_VEC;
        ot_v4 a0 = ot_v4_load(l), a1 = ot_v4_load(l + 4), a2 = ot_v4_load(l + 8), a3 = ot_v4_load(l + 12);
        for (int64_t j = 0; j < n; j += DW_VEC) {
            a0 += ot_v4_load(dy + j) * ot_v4_load(s + j), a1 += ot_v4_load(dy + j + 4) * ot_v4_load(s + j + 4);
            a2 += ot_v4_load(dy + j + 8) * ot_v4_load(s + j + 8),
                a3 += ot_v4_load(dy + j + 12) * ot_v4_load(s + j + 12);
        }
        ot_v4_store(l, a0), ot_v4_store(l + 4, a1), ot_v4_store(l + 8, a2), ot_v4_store(l + 12, a3);
    }
}

#ifdef OT_DW_X86
/* NV vectors of 8 outputs from j (NV a constant after inlining: the accumulators stay in registers). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
correlate_avx2_block(float *restrict out, const float *in, const int64_t *off, const float *w, int64_t taps, bool add,
                     int nv) {
    __m256 acc[8];
    for (int v = 0; v < nv; v++) acc[v] = add ? _mm256_loadu_ps(out + 8 * v) : _mm256_setzero_ps();
    for (int64_t t = 0; t < taps; t++) {
        const float *s = in + off[t];
        const __m256 wv = _mm256_broadcast_ss(w + t);
        for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(s + 8 * v), acc[v]);
    }
    for (int v = 0; v < nv; v++) _mm256_storeu_ps(out + 8 * v, acc[v]);
}

__attribute__((target("avx2,fma"))) static void correlate_avx2(float *restrict out, int64_t n, const float *in,
                                                               const int64_t *off, const float *w, int64_t taps,
                                                               bool add) {
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) correlate_avx2_block(out + j, in + j, off, w, taps, add, 8);
    for (; j < n; j += 16) correlate_avx2_block(out + j, in + j, off, w, taps, add, 2);
}

/* dots over NT (a constant after inlining) taps at once: one dY load feeds NT independent sums. */
__attribute__((target("avx2,fma"), always_inline)) static inline void
dots_avx2_taps(const float *dy, int64_t n, const float *in, const int64_t *off, float *lanes, int nt) {
    __m256 a[8];
    for (int i = 0; i < nt; i++)
        a[2 * i] = _mm256_loadu_ps(lanes + i * DW_VEC), a[2 * i + 1] = _mm256_loadu_ps(lanes + i * DW_VEC + 8);
    for (int64_t j = 0; j < n; j += 16) {
        const __m256 d0 = _mm256_loadu_ps(dy + j), d1 = _mm256_loadu_ps(dy + j + 8);
        for (int i = 0; i < nt; i++) {
            a[2 * i] = _mm256_fmadd_ps(d0, _mm256_loadu_ps(in + off[i] + j), a[2 * i]);
            a[2 * i + 1] = _mm256_fmadd_ps(d1, _mm256_loadu_ps(in + off[i] + j + 8), a[2 * i + 1]);
        }
    }
    for (int i = 0; i < nt; i++)
        _mm256_storeu_ps(lanes + i * DW_VEC, a[2 * i]), _mm256_storeu_ps(lanes + i * DW_VEC + 8, a[2 * i + 1]);
}

/* Taps per pass of the multi-tap dots: 4, but 3 + 2 rather than 4 + 1 for the last five. */
static int dots_group(int64_t left) { return left >= 4 && left != 5 ? 4 : left == 5 ? 3 : (int)left; }

__attribute__((target("avx2,fma"))) static void dots_avx2(const float *dy, int64_t n, const float *in,
                                                          const int64_t *off, int64_t taps, float *lanes) {
    for (int64_t t = 0; t < taps;) {
        const int nt = dots_group(taps - t);
        if (nt == 4)
            dots_avx2_taps(dy, n, in, off + t, lanes + t * DW_VEC, 4);
        else if (nt == 3)
            dots_avx2_taps(dy, n, in, off + t, lanes + t * DW_VEC, 3);
        else if (nt == 2)
            dots_avx2_taps(dy, n, in, off + t, lanes + t * DW_VEC, 2);
        else
            dots_avx2_taps(dy, n, in, off + t, lanes + t * DW_VEC, 1);
        t += nt;
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
correlate_avx512_block(float *restrict out, const float *in, const int64_t *off, const float *w, int64_t taps, bool add,
                       int nv) {
    __m512 acc[8];
    for (int v = 0; v < nv; v++) acc[v] = add ? _mm512_loadu_ps(out + 16 * v) : _mm512_setzero_ps();
    for (int64_t t = 0; t < taps; t++) {
        const float *s = in + off[t];
        const __m512 wv = _mm512_set1_ps(w[t]);
        for (int v = 0; v < nv; v++) acc[v] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(s + 16 * v), acc[v]);
    }
    for (int v = 0; v < nv; v++) _mm512_storeu_ps(out + 16 * v, acc[v]);
}

__attribute__((target("avx512f"))) static void correlate_avx512(float *restrict out, int64_t n, const float *in,
                                                                const int64_t *off, const float *w, int64_t taps,
                                                                bool add) {
    int64_t j = 0;
    for (; j + 128 <= n; j += 128) correlate_avx512_block(out + j, in + j, off, w, taps, add, 8);
    for (; j + 64 <= n; j += 64) correlate_avx512_block(out + j, in + j, off, w, taps, add, 4);
    for (; j < n; j += 16) correlate_avx512_block(out + j, in + j, off, w, taps, add, 1);
}

__attribute__((target("avx512f"), always_inline)) static inline void
dots_avx512_taps(const float *dy, int64_t n, const float *in, const int64_t *off, float *lanes, int nt) {
    __m512 a[4];
    for (int i = 0; i < nt; i++) a[i] = _mm512_loadu_ps(lanes + i * DW_VEC);
    for (int64_t j = 0; j < n; j += 16) {
        const __m512 d = _mm512_loadu_ps(dy + j);
        for (int i = 0; i < nt; i++) a[i] = _mm512_fmadd_ps(d, _mm512_loadu_ps(in + off[i] + j), a[i]);
    }
    for (int i = 0; i < nt; i++) _mm512_storeu_ps(lanes + i * DW_VEC, a[i]);
}

__attribute__((target("avx512f"))) static void dots_avx512(const float *dy, int64_t n, const float *in,
                                                           const int64_t *off, int64_t taps, float *lanes) {
    for (int64_t t = 0; t < taps;) {
        const int nt = dots_group(taps - t);
        if (nt == 4)
            dots_avx512_taps(dy, n, in, off + t, lanes + t * DW_VEC, 4);
        else if (nt == 3)
            dots_avx512_taps(dy, n, in, off + t, lanes + t * DW_VEC, 3);
        else if (nt == 2)
            dots_avx512_taps(dy, n, in, off + t, lanes + t * DW_VEC, 2);
        else
            dots_avx512_taps(dy, n, in, off + t, lanes + t * DW_VEC, 1);
        t += nt;
    }
}

/* dst[q] = src[2 * q] for q < n: two loads and one permute per 16 floats; masked at the end, so it
 * reads nothing past src[2 * n - 2]. */
__attribute__((target("avx512f"))) static void gather_stride2_avx512(float *restrict dst, const float *restrict src,
                                                                     int64_t n) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    int64_t q = 0;
    for (; q + 16 < n; q += 16)
        _mm512_storeu_ps(dst + q,
                         _mm512_permutex2var_ps(_mm512_loadu_ps(src + 2 * q), even, _mm512_loadu_ps(src + 2 * q + 16)));
    const int64_t left = n - q, reads = 2 * left - 1; /* 1..16 outputs from 1..31 inputs */
    const __mmask16 lo = (__mmask16)(reads >= 16 ? 0xffff : (1u << reads) - 1);
    const __mmask16 hi = (__mmask16)(reads > 16 ? (1u << (reads - 16)) - 1 : 0);
    const __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, src + 2 * q), even,
                                            _mm512_maskz_loadu_ps(hi, src + 2 * q + 16));
    _mm512_mask_storeu_ps(dst + q, ot_lanes16(left), v);
}
#endif

/* ---- the channel-block forward's vector paths (conv_depthwise_block.inc) ---------------------- */

#define DWB_ATTR
#define DWB_SUFFIX        _portable
#define V                 ot_v4
#define VL                4
#define V_ZERO()          ((ot_v4){0, 0, 0, 0})
#define V_SET1(f)         ((ot_v4){f, f, f, f})
#define V_LOAD(p)         ot_v4_load(p)
#define V_STORE(p, v)     ot_v4_store(p, v)
#define V_ADD(a, b)       ((a) + (b))
#define V_FMA(a, b, c)    ((a) * (b) + (c))
#define V_RELU(v)         relu_v4(v)
#define V_CLIP(v, lo, hi) clip_v4(v, lo, hi)
#define V_MAX(a, b)       max_v4(a, b)
#define V_SET1_BITS(i)    ((ot_v4)(ot_i4){i, i, i, i})
#define V_ARGMAX(acc, best, v, i)                                                                                      \
    do {                                                                                                               \
        const ot_v4 v_ = (v);                                                                                          \
        const ot_i4 gt_ = v_ > (acc);                                                                                  \
        (acc) = (ot_v4)((gt_ & (ot_i4)v_) | (~gt_ & (ot_i4)(acc)));                                                    \
        (best) = (ot_v4)((gt_ & (ot_i4)(i)) | (~gt_ & (ot_i4)(best)));                                                 \
    } while (0)
#define V_LOADN(p, n)     loadn_v4(p, n)
#define V_STOREN(p, v, n) storen_v4(p, v, n)
#define V_TRANSPOSE(r)    transpose_v4(r)

/* As fused_act.c's loops: Relu makes NaN 0, Clip keeps it. */
static inline ot_v4 relu_v4(ot_v4 v) { return (ot_v4)((ot_i4)v & (v > V_ZERO())); }
static inline ot_v4 clip_v4(ot_v4 v, ot_v4 lo, ot_v4 hi) {
    const ot_i4 below = v < lo;
    const ot_v4 w = (ot_v4)((below & (ot_i4)lo) | (~below & (ot_i4)v));
    const ot_i4 above = w > hi;
    return (ot_v4)((above & (ot_i4)hi) | (~above & (ot_i4)w));
}
static inline ot_v4 max_v4(ot_v4 a, ot_v4 b) {
    const ot_i4 gt = a > b;
    return (ot_v4)((gt & (ot_i4)a) | (~gt & (ot_i4)b));
}
static inline ot_v4 loadn_v4(const float *p, int64_t n) {
    if (n == 4) return ot_v4_load(p);
    ot_v4 v = V_ZERO();
    for (int64_t i = 0; i < n; i++) v[i] = p[i];
    return v;
}
static inline void storen_v4(float *p, ot_v4 v, int64_t n) {
    if (n == 4) {
        ot_v4_store(p, v);
        return;
    }
    for (int64_t i = 0; i < n; i++) p[i] = v[i];
}
static inline void transpose_v4(ot_v4 *r) {
    const ot_v4 a = r[0], b = r[1], c = r[2], d = r[3];
    for (int i = 0; i < 4; i++) r[i] = (ot_v4){a[i], b[i], c[i], d[i]};
}

#include "runtime/ops/conv_depthwise_block.inc"
#include "runtime/ops/conv_depthwise_block_undef.inc"

#ifdef OT_DW_X86
#include "runtime/ops/simd_v_avx2.inc"
#define DWB_ATTR          __attribute__((target("avx2,fma")))
#define DWB_SUFFIX        _avx2
#define V_RELU(v)         _mm256_max_ps(v, _mm256_setzero_ps()) /* max_ps gives its second operand for NaN */
#define V_CLIP(v, lo, hi) _mm256_min_ps(hi, _mm256_max_ps(lo, v))
#define V_SET1_BITS(i)    _mm256_castsi256_ps(_mm256_set1_epi32(i))
#define V_ARGMAX(acc, best, v, i)                                                                                      \
    do {                                                                                                               \
        const __m256 v_ = (v), gt_ = _mm256_cmp_ps(v_, (acc), _CMP_GT_OQ);                                             \
        (acc) = _mm256_blendv_ps((acc), v_, gt_);                                                                      \
        (best) = _mm256_blendv_ps((best), (i), gt_);                                                                   \
    } while (0)

#include "runtime/ops/conv_depthwise_block.inc"
#include "runtime/ops/conv_depthwise_block_undef.inc"

#include "runtime/ops/simd_v_avx512.inc"
#define DWB_ATTR          __attribute__((target("avx512f")))
#define DWB_SUFFIX        _avx512
#define V_RELU(v)         _mm512_max_ps(v, _mm512_setzero_ps())
#define V_CLIP(v, lo, hi) _mm512_min_ps(hi, _mm512_max_ps(lo, v))
#define V_SET1_BITS(i)    _mm512_castsi512_ps(_mm512_set1_epi32(i))
#define V_ARGMAX(acc, best, v, i)                                                                                      \
    do {                                                                                                               \
        const __m512 v_ = (v);                                                                                         \
        const __mmask16 gt_ = _mm512_cmp_ps_mask(v_, (acc), _CMP_GT_OQ);                                               \
        (acc) = _mm512_mask_mov_ps((acc), gt_, v_);                                                                    \
        (best) = _mm512_mask_mov_ps((best), gt_, (i));                                                                 \
    } while (0)

#include "runtime/ops/conv_depthwise_block.inc"
#include "runtime/ops/conv_depthwise_block_undef.inc"

/* R chunks (a constant after inlining) of channel c's plane from output chunk v: bias + the taps
 * (wb: the packed weights [taps][16] and bias [16]), + z, the activation in registers (mode as
 * outputs' above), stored under the chunks' masks (tap t's masks at masks + t * chunks). */
__attribute__((target("avx512f"), always_inline)) static inline void
flat_chunks(const ot_dw_plan *p, const float *x, const float *wb, int64_t c, const uint16_t *masks, int64_t v,
            const float *z, int mode, __m512 lo, __m512 hi, float *y, int R) {
    __m512 acc[4];
    const __m512 bias = _mm512_set1_ps(wb[p->taps * 16 + c]);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) acc[r] = bias;
    for (int64_t t = 0; t < p->taps; t++) {
        const __m512 wv = _mm512_set1_ps(wb[t * 16 + c]);
        const float *s = x + v * 16 + p->foff[t];
        const uint16_t *m = masks + t * p->chunks + v;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps((__mmask16)m[r], s + 16 * r), acc[r]);
    }
    /* stored: the outputs that exist (all but past the plane's end) */
    const int64_t P = p->OH * p->OW;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const int64_t j = (v + r) * 16, left = P - j;
        const __mmask16 out = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        if (z) acc[r] = _mm512_add_ps(acc[r], _mm512_maskz_loadu_ps(out, z + j));
        if (mode == 1) acc[r] = _mm512_max_ps(acc[r], _mm512_setzero_ps());
        if (mode == 2) acc[r] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[r]));
        _mm512_mask_storeu_ps(y + j, out, acc[r]);
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
flat_planes(const ot_dw_plan *p, const float *x, const float *z, int mode, __m512 lo, __m512 hi, int64_t nc, float *y,
            const float *wb, const uint16_t *masks) {
    const int64_t P = p->OH * p->OW, isz = p->H * p->W;
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * isz, *zc = z ? z + c * P : NULL;
        float *yc = y + c * P;
        int64_t v = 0;
        for (; v + 4 <= p->chunks; v += 4) flat_chunks(p, xc, wb, c, masks, v, zc, mode, lo, hi, yc, 4);
        for (; v < p->chunks; v++) flat_chunks(p, xc, wb, c, masks, v, zc, mode, lo, hi, yc, 1);
    }
}

/* The flat channel-block forward (conv_depthwise.h): y = act(conv(x) + b (+ z)) for the nc channels
 * whose weights wb holds; the activations but Relu and Clip over the block's planes afterwards (in
 * cache; y + c * P are consecutive planes). */
__attribute__((target("avx512f"))) static void forward_flat_avx512(const ot_dw_plan *p, const float *x, const float *z,
                                                                   const ot_fused_act *act, int64_t nc, float *y,
                                                                   const float *wb, const uint16_t *masks) {
    const int mode = z || !act ? 0 : act->kind == OT_FUSED_RELU ? 1 : act->kind == OT_FUSED_CLIP ? 2 : 0;
    const __m512 lo = _mm512_set1_ps(act ? act->p0 : 0.0f), hi = _mm512_set1_ps(act ? act->p1 : 0.0f);
    if (mode == 1)
        flat_planes(p, x, z, 1, lo, hi, nc, y, wb, masks);
    else if (mode == 2)
        flat_planes(p, x, z, 2, lo, hi, nc, y, wb, masks);
    else
        flat_planes(p, x, z, 0, lo, hi, nc, y, wb, masks);
    if (mode == 0 && act && act->kind != OT_FUSED_NONE) ot_fused_act_apply(act, y, nc * p->OH * p->OW);
}
#endif

static void correlate(const ot_dw_plan *p, float *out, int64_t n, const float *in, const int64_t *off, const float *w,
                      int64_t taps, bool add) {
#ifdef OT_DW_X86
    if (p->isa == OT_DW_AVX512)
        correlate_avx512(out, n, in, off, w, taps, add);
    else if (p->isa == OT_DW_AVX2)
        correlate_avx2(out, n, in, off, w, taps, add);
    else
#endif
        correlate_portable(out, n, in, off, w, taps, add);
}

static void dots(const ot_dw_plan *p, const float *dy, int64_t n, const float *in, const int64_t *off, int64_t taps,
                 float *lanes) {
#ifdef OT_DW_X86
    if (p->isa == OT_DW_AVX512)
        dots_avx512(dy, n, in, off, taps, lanes);
    else if (p->isa == OT_DW_AVX2)
        dots_avx2(dy, n, in, off, taps, lanes);
    else
#endif
        dots_portable(dy, n, in, off, taps, lanes);
}

/* ---- planning and the phase buffers ---------------------------------------------------------- */

/* Whether a tap reads phase ph (phases nobody reads stay zero).*/
static bool phase_used(const ot_dw_plan *p, int64_t ph) { return p->first[ph + 1] > p->first[ph]; }

bool ot_conv_depthwise_plan(ot_dw_plan *p, const ot_conv_window *w, ot_dw_isa isa) {
    if (w->in[0] != 1 || w->out[0] != 1 || w->k[0] != 1 || w->k[1] * w->k[2] > OT_DW_MAX_TAPS ||
        w->stride[1] * w->stride[2] > OT_DW_MAX_TAPS || w->pad_begin[1] < 0 || w->pad_begin[2] < 0 ||
        !ot_conv_depthwise_isa_supported(isa))
        return false;
    memset(p, 0, sizeof *p);
    const int64_t KH = w->k[1], KW = w->k[2], dh = w->dil[1], dw = w->dil[2];
    p->isa = isa;
    p->H = w->in[1], p->W = w->in[2], p->OH = w->out[1], p->OW = w->out[2];
    p->sh = w->stride[1], p->sw = w->stride[2], p->ph = w->pad_begin[1], p->pw = w->pad_begin[2];
    p->QH = p->OH + (KH - 1) * dh / p->sh, p->QW = p->OW + (KW - 1) * dw / p->sw;
    p->phases = p->sh * p->sw, p->grid = p->QH * p->QW;
    p->wide = round_up(p->OH * p->QW, DW_VEC);
    p->taps = KH * KW;
    int64_t max_off = 0, phase_of[OT_DW_MAX_TAPS];
    for (int64_t kh = 0, t = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++, t++) {
            const int64_t ph = (kh * dh) % p->sh * p->sw + (kw * dw) % p->sw;
            p->off[t] = ph * p->grid + (kh * dh / p->sh) * p->QW + kw * dw / p->sw;
            if (p->off[t] > max_off) max_off = p->off[t];
            phase_of[t] = ph;
        }
    for (int64_t ph = 0, i = 0; ph < p->phases; ph++) {
        p->first[ph] = i;
        for (int64_t t = 0; t < p->taps; t++)
            if (phase_of[t] == ph) p->order[i++] = t;
        p->first[ph + 1] = i;
    }
    /* per row phase a, the rows r whose input row r * sh + a - ph lies in [0, H); per column phase b, the columns */
    for (int64_t a = 0; a < p->sh; a++)
        ot_conv_valid_range(a - p->ph, p->sh, p->H, p->QH, &p->row_lo[a], &p->row_hi[a]);
    for (int64_t b = 0; b < p->sw; b++)
        ot_conv_valid_range(b - p->pw, p->sw, p->W, p->QW, &p->col_lo[b], &p->col_hi[b]);
    bool all_used = true;
    for (int64_t ph = 0; ph < p->phases; ph++) all_used = all_used && phase_used(p, ph);
    p->dx_covered = all_used && (p->H - 1 + p->ph) / p->sh < p->QH && (p->W - 1 + p->pw) / p->sw < p->QW;
    p->Hp = (p->OH - 1) * p->sh + (KH - 1) * dh + 1, p->Wp = (p->OW - 1) * p->sw + (KW - 1) * dw + 1;
    for (int64_t kh = 0, t = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++, t++) p->boff[t] = kh * dh * p->Wp + kw * dw;
    p->block = isa == OT_DW_AVX512 ? 16 : isa == OT_DW_AVX2 ? 8 : 4;
    p->blk_in = round_up(p->Hp * p->Wp * p->block, DW_VEC), p->blk_w = round_up((p->taps + 1) * p->block, DW_VEC);
    /* measured against the transposing path (batch 32, 1 thread, minima of 3 alternating runs): 3x3
     * at 32x32 to 8x8 1.1-1.3x faster; at 4x4 (one chunk a plane, nothing amortizes the weights' and
     * masks' loads) 0.6x, 5x5 at 8x8 (25 taps of unaligned loads) 0.7x */
    p->flat =
        isa == OT_DW_AVX512 && p->sh == 1 && p->sw == 1 && p->OW == p->W && p->OH * p->OW >= 4 * DW_VEC && p->taps <= 9;
    if (p->flat) { /* blk_in keeps its size: max pooling over the same plan packs the planes there */
        p->chunks = (p->OH * p->OW + DW_VEC - 1) / DW_VEC;
        for (int64_t t = 0; t < p->taps; t++)
            p->foff[t] = (p->boff[t] / p->Wp - p->ph) * p->W + p->boff[t] % p->Wp - p->pw;
        p->blk_masks = round_up((p->taps * p->chunks + 1) / 2, DW_VEC);
    }
    /* the last vector of the wide grid reads up to max_off + wide: past the phases into slack */
    p->in_floats = round_up(p->phases * p->grid > max_off + p->wide ? p->phases * p->grid : max_off + p->wide, DW_VEC);
    return true;
}

/* dst[i] = src[i] for i < n, inline (rows here are short: a libc call per row would cost more). */
static inline void copy_floats(float *restrict dst, const float *restrict src, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) ot_v4_store(dst + i, ot_v4_load(src + i));
    for (; i < n; i++) dst[i] = src[i];
}

/* xp = x [H][W] split into the plan's phases (layout in conv_depthwise.h). Writes only the pixels that
 * come from x: the padding, the phases no tap reads and the slack keep the zeros ot_conv_depthwise_init
 * wrote, as every plane puts its pixels at the same places. */
static void pad_plane(const ot_dw_plan *p, const float *x, float *xp) {
    for (int64_t a = 0; a < p->sh; a++)
        for (int64_t b = 0; b < p->sw; b++) {
            const int64_t lo = p->col_lo[b], hi = p->col_hi[b];
            if (!phase_used(p, a * p->sw + b) || hi <= lo) continue;
            float *g = xp + (a * p->sw + b) * p->grid;
            for (int64_t r = p->row_lo[a]; r < p->row_hi[a]; r++) {
                float *restrict row = g + r * p->QW;
                const float *restrict src = x + (r * p->sh + a - p->ph) * p->W + b - p->pw;
                if (p->sw == 1) copy_floats(row + lo, src + lo, hi - lo);
#ifdef OT_DW_X86
                else if (p->sw == 2 && p->isa == OT_DW_AVX512)
                    gather_stride2_avx512(row + lo, src + 2 * lo, hi - lo);
#endif
                else
                    for (int64_t q = lo; q < hi; q++) row[q] = src[q * p->sw];
            }
        }
}

void ot_conv_depthwise_init(float *scratch, int64_t floats) { memset(scratch, 0, (size_t)floats * sizeof(float)); }

/* ---- forward ----------------------------------------------------------------------------------- */

int64_t ot_conv_depthwise_forward_scratch(const ot_dw_plan *p) { return p->in_floats + p->wide; }

void ot_conv_depthwise_forward(const ot_dw_plan *p, const float *x, const float *w, int64_t Mg, float *y,
                               float *scratch) {
    float *xp = scratch, *wide = scratch + p->in_floats;
    pad_plane(p, x, xp);
    for (int64_t m = 0; m < Mg; m++) {
        correlate(p, wide, p->wide, xp, p->off, w + m * p->taps, p->taps, false);
        float *ym = y + m * p->OH * p->OW;
        for (int64_t oh = 0; oh < p->OH; oh++) copy_floats(ym + oh * p->OW, wide + oh * p->QW, p->OW);
    }
}

int64_t ot_conv_depthwise_block_scratch(const ot_dw_plan *p) { return p->blk_in + p->blk_masks; }

/* masks[t * chunks + v]: the lanes of outputs 16 v .. 16 v + 15 of a plane that exist and whose tap t
 * input lies in the plane (the flat forward's loads and stores). */
static void flat_masks(const ot_dw_plan *p, uint16_t *masks) {
    const int64_t P = p->OH * p->OW;
    for (int64_t t = 0; t < p->taps; t++) {
        const int64_t dy = p->boff[t] / p->Wp - p->ph, dx = p->boff[t] % p->Wp - p->pw;
        for (int64_t v = 0; v < p->chunks; v++) {
            unsigned m = 0;
            for (int64_t l = 0; l < DW_VEC; l++) {
                const int64_t j = v * DW_VEC + l, ih = j / p->OW + dy, iw = j % p->OW + dx;
                if (j < P && ih >= 0 && ih < p->H && iw >= 0 && iw < p->W) m |= 1u << l;
            }
            masks[t * p->chunks + v] = (uint16_t)m;
        }
    }
}

/* the padded input's zeros, or the flat path's masks */
void ot_conv_depthwise_block_init(const ot_dw_plan *p, float *scratch) {
    ot_conv_depthwise_init(scratch, p->flat ? 0 : p->blk_in); /* the flat forward reads no padded copy */
    if (p->flat) flat_masks(p, (uint16_t *)(scratch + p->blk_in));
}

/* Single layers, batch 32, 1 thread (minima of 8 in one process, plane path vs channel blocks): with
 * AVX-512 and AVX2 the blocks won on every mobile-net shape tried (3x3, 32-960 channels, 32x32 down
 * to 2x2, strides 1 and 2; 1.4-6x), cold caches too. The portable path's 4 x 4 transposes are element
 * moves: it wins only on planes up to 4 x 4 (576 channels 4x4 0.91 -> 0.68 ms, 960 at 2x2 0.87 ->
 * 0.34; at 8x8 0.69 -> 0.94, at 16x16 1.9 -> 2.9). */
bool ot_conv_depthwise_block_pays_off(const ot_dw_plan *p) { return p->isa != OT_DW_PORTABLE || p->OH * p->OW <= 16; }

/* Calls the instantiation of conv_depthwise_block.inc's function name for p's vector path. */
#ifdef OT_DW_X86
#define DWB_DISPATCH(p, name, ...)                                                                                     \
    ((p)->isa == OT_DW_AVX512 ? name##_avx512(__VA_ARGS__)                                                             \
     : (p)->isa == OT_DW_AVX2 ? name##_avx2(__VA_ARGS__)                                                               \
                              : name##_portable(__VA_ARGS__))
#else
#define DWB_DISPATCH(p, name, ...) name##_portable(__VA_ARGS__)
#endif

void ot_conv_depthwise_block_weights(const ot_dw_plan *p, const float *w, const float *b, int64_t nc, float *wb) {
    DWB_DISPATCH(p, pack_weights, p, w, b, nc, wb);
}

void ot_conv_depthwise_forward_block(const ot_dw_plan *p, const float *x, const float *z, const ot_fused_act *act,
                                     int64_t nc, float *y, const float *wb, float *scratch) {
#ifdef OT_DW_X86
    if (p->flat) {
        forward_flat_avx512(p, x, z, act, nc, y, wb, (const uint16_t *)(scratch + p->blk_in));
        return;
    }
#endif
    DWB_DISPATCH(p, forward_block, p, x, z, act, nc, y, wb, scratch);
}

void ot_conv_depthwise_block_max_init(const ot_dw_plan *p, float *scratch) {
    for (int64_t i = 0; i < p->blk_in; i++) scratch[i] = -INFINITY;
}

void ot_conv_depthwise_block_maxpool(const ot_dw_plan *p, const float *x, int64_t nc, float *y, float *scratch) {
    DWB_DISPATCH(p, maxpool_block, p, x, nc, y, scratch);
}

void ot_conv_depthwise_forward_blocked(const ot_dw_plan *p, const float *x, bool x_blocked, const float *z,
                                       const ot_fused_act *act, float *y, const float *wb, float *scratch) {
    DWB_DISPATCH(p, forward_blocked, p, x, x_blocked, z, act, y, wb, scratch);
}

void ot_conv_depthwise_block_maxpool_blocked(const ot_dw_plan *p, const float *x, float *y, float *scratch) {
    DWB_DISPATCH(p, maxpool_blocked, p, x, y, scratch);
}

void ot_conv_depthwise_block_maxpool_indices(const ot_dw_plan *p, const float *x, int64_t nc, int64_t plane0, float *y,
                                             int64_t *ind, float *scratch) {
    DWB_DISPATCH(p, maxpool_indices_block, p, x, nc, plane0, y, ind, scratch);
}

/* ---- gradients --------------------------------------------------------------------------------
 * dY of output channel m is widened into dyw_m: pre zeros, then the OH x QW wide grid (columns past
 * OW zero), then zeros to span floats. dW[m][t] = dots of dyw_m with the padded input at off[t].
 * dX in phase ph: dxp[j] = sum over m and the phase's taps t of w[m][t] * dyw_m[j - (off[t] - ph *
 * grid)], the forward correlation with negated offsets; then dxp's pixels go back to dX. */

typedef struct dw_back_layout {
    int64_t pre, span;         /* per widened dY: leading zeros, floats in all */
    int64_t grid_r;            /* one phase's grid rounded up to whole vectors */
    int64_t xp, dyw, dxp, wph; /* float offsets into scratch; wph: weights in phase order [Mg][taps] */
    int64_t lanes;             /* float offset of the dW sums: DW_VEC float lanes per (m, tap) */
    int64_t floats;
} dw_back_layout;

static dw_back_layout back_layout(const ot_dw_plan *p, int64_t Mg) {
    dw_back_layout l;
    int64_t max_in_phase = 0;
    for (int64_t t = 0; t < p->taps; t++) {
        const int64_t o = p->off[t] % p->grid;
        if (o > max_in_phase) max_in_phase = o;
    }
    l.pre = round_up(max_in_phase, DW_VEC);
    l.grid_r = round_up(p->grid, DW_VEC);
    l.span = l.pre + (l.grid_r > p->wide ? l.grid_r : p->wide);
    l.xp = 0;
    l.dyw = p->in_floats;
    l.dxp = l.dyw + Mg * l.span;
    l.wph = l.dxp + l.grid_r;
    l.lanes = round_up(l.wph + Mg * p->taps, DW_VEC);
    l.floats = l.lanes + DW_VEC * Mg * p->taps;
    return l;
}

int64_t ot_conv_depthwise_backward_scratch(const ot_dw_plan *p, int64_t Mg) { return back_layout(p, Mg).floats; }

/* dyw = dy [OH][OW] widened (see above); its zeros stay from ot_conv_depthwise_init. */
static void widen_dy(const ot_dw_plan *p, const dw_back_layout *l, const float *dy, float *dyw) {
    float *g = dyw + l->pre;
    for (int64_t oh = 0; oh < p->OH; oh++) copy_floats(g + oh * p->QW, dy + oh * p->OW, p->OW);
}

/* dx [H][W] gets phase (a, b) of the padded-plane gradient dxp: the adjoint of pad_plane's copy. */
static void unpad_phase(const ot_dw_plan *p, const float *dxp, int64_t a, int64_t b, float *dx) {
    const int64_t lo = p->col_lo[b], hi = p->col_hi[b];
    for (int64_t r = p->row_lo[a]; r < p->row_hi[a]; r++) {
        float *dst = dx + (r * p->sh + a - p->ph) * p->W + b - p->pw;
        const float *src = dxp + r * p->QW;
        if (p->sw == 1)
            copy_floats(dst + lo, src + lo, hi - lo);
        else
            for (int64_t q = lo; q < hi; q++) dst[q * p->sw] = src[q];
    }
}

void ot_conv_depthwise_backward(const ot_dw_plan *p, int64_t N, const float *x, int64_t xstride, const float *dy,
                                int64_t dystride, const float *w, int64_t Mg, float *dx, float *dw, float *scratch) {
    const dw_back_layout l = back_layout(p, Mg);
    float *xp = scratch + l.xp, *dyw = scratch + l.dyw, *dxp = scratch + l.dxp, *wph = scratch + l.wph;
    float *lanes = scratch + l.lanes;
    const int64_t osz = p->OH * p->OW, isz = p->H * p->W;
    int64_t neg[OT_DW_MAX_TAPS]; /* phase-ordered taps: offset back from an input pixel to its output */
    for (int64_t i = 0; i < p->taps; i++) {
        const int64_t t = p->order[i];
        neg[i] = -(p->off[t] % p->grid);
        for (int64_t m = 0; m < Mg; m++) wph[m * p->taps + i] = w[m * p->taps + t];
    }
    if (dw) memset(lanes, 0, (size_t)(DW_VEC * Mg * p->taps) * sizeof(float));
    for (int64_t n = 0; n < N; n++) {
        for (int64_t m = 0; m < Mg; m++) widen_dy(p, &l, dy + n * dystride + m * osz, dyw + m * l.span);
        if (dw) {
            pad_plane(p, x + n * xstride, xp);
            for (int64_t m = 0; m < Mg; m++)
                dots(p, dyw + m * l.span + l.pre, p->wide, xp, p->off, p->taps, lanes + m * p->taps * DW_VEC);
        }
        if (!dx) continue;
        float *dxn = dx + n * xstride;
        if (!p->dx_covered) memset(dxn, 0, (size_t)isz * sizeof(float)); /* pixels no tap reads get 0 */
        for (int64_t a = 0; a < p->sh; a++)
            for (int64_t b = 0; b < p->sw; b++) {
                const int64_t ph = a * p->sw + b;
                if (!phase_used(p, ph)) continue;
                const int64_t i0 = p->first[ph], nt = p->first[ph + 1] - i0;
                for (int64_t m = 0; m < Mg; m++)
                    correlate(p, dxp, l.grid_r, dyw + m * l.span + l.pre, neg + i0, wph + m * p->taps + i0, nt, m > 0);
                unpad_phase(p, dxp, a, b, dxn);
            }
    }
    if (dw)
        for (int64_t i = 0; i < Mg * p->taps; i++) {
            double sum = 0;
            for (int k = 0; k < DW_VEC; k++) sum += lanes[i * DW_VEC + k];
            dw[i] = (float)sum;
        }
}
