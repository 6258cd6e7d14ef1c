/* Channel-blocked tensors (see channel_blocks.h) and com.otter FromChannelBlocks: channel-blocked
 * [N][C / B][H][W][B] back to planar [N][C][H][W], B x B transposes. */
#include "runtime/ops/channel_blocks.h"

#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/conv_direct.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

#include "runtime/ops/simd_transpose.h"
#define OT_CB_X86 1
#endif

int64_t ot_channel_block(void) {
    const ot_conv_isa isa = ot_conv_direct_isa();
    if (isa == OT_CONV_ISA_AVX512 && ot_conv_depthwise_isa_supported(OT_DW_AVX512)) return 16;
    return isa >= OT_CONV_ISA_AVX2 && ot_conv_depthwise_isa_supported(OT_DW_AVX2) ? 8 : 0;
}

ot_dw_isa ot_channel_block_isa(int64_t b) {
    const ot_dw_isa isa = b == 16 ? OT_DW_AVX512 : b == 8 ? OT_DW_AVX2 : OT_DW_PORTABLE;
    return ot_conv_depthwise_isa_supported(isa) ? isa : OT_DW_PORTABLE;
}

otter_status ot_channel_blocks_check(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *t) {
    char s[128];
    if (t->dtype != OTTER_DTYPE_FLOAT || t->rank != 5 || ot_channel_block_isa(t->dims[4]) == OT_DW_PORTABLE)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "input '%s' %s %s is not channel-blocked float [N, C/B, H, W, B] with a B this CPU runs "
                            "(16: AVX-512, 8: AVX2)",
                            ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype),
                            ot_shape_str(s, sizeof s, t->rank, t->dims));
    return OTTER_OK;
}

otter_tensor ot_channel_blocks_planar(const otter_tensor *t) {
    otter_tensor v = *t;
    v.rank = 4;
    v.dims[1] = t->dims[1] * t->dims[4];
    v.dims[4] = 0;
    return v;
}

/* Blocks [b0, b1) of B channels: x [P][B] -> y [B][P]. */
typedef struct cb_args {
    const float *x;
    float *y;
    int64_t P, B;
} cb_args;

#ifdef OT_CB_X86
__attribute__((target("avx512f"))) static void cb_block_avx512(const float *x, float *y, int64_t P) {
    for (int64_t p = 0; p < P; p += 16) {
        const int64_t n = P - p < 16 ? P - p : 16;
        const __mmask16 m = ot_lanes16(n);
        __m512 r[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) r[j] = j < n ? _mm512_loadu_ps(x + (p + j) * 16) : _mm512_setzero_ps();
        ot_transpose16_avx512(r);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) _mm512_mask_storeu_ps(y + c * P + p, m, r[c]);
    }
}

__attribute__((target("avx2"))) static void cb_block_avx2(const float *x, float *y, int64_t P) {
    for (int64_t p = 0; p < P; p += 8) {
        const int64_t n = P - p < 8 ? P - p : 8;
        const __m256i m = ot_lanes8(n);
        __m256 r[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) r[j] = j < n ? _mm256_loadu_ps(x + (p + j) * 8) : _mm256_setzero_ps();
        ot_transpose8_avx2(r);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) _mm256_maskstore_ps(y + c * P + p, m, r[c]);
    }
}
#endif

static void cb_blocks(void *arg, int64_t b0, int64_t b1) {
#ifdef OT_CB_X86
    const cb_args *a = arg;
    for (int64_t b = b0; b < b1; b++) {
        const float *x = a->x + b * a->B * a->P;
        float *y = a->y + b * a->B * a->P;
        if (a->B == 16)
            cb_block_avx512(x, y, a->P);
        else
            cb_block_avx2(x, y, a->P);
    }
#else
    (void)arg, (void)b0, (void)b1; /* ot_channel_blocks_check admits no block without x86's vector paths */
#endif
}

otter_status ot_kernel_from_channel_blocks(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(ot_channel_blocks_check(ctx, 0, x));
    const otter_tensor v = ot_channel_blocks_planar(x);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, 4, v.dims);
    if (!y) return ctx->output_status;
    cb_args a = {.x = x->data, .y = y->data, .P = x->dims[2] * x->dims[3], .B = x->dims[4]};
    const int64_t blocks = x->dims[0] * x->dims[1];
    if (blocks && a.P) ot_parallel_for(ctx, blocks, 1 + 4096 / (a.B * a.P), cb_blocks, &a);
    return OTTER_OK;
}
