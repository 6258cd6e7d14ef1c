/* Row helpers of the fused attention kernels: an in-place softmax over one contiguous row, with
 * an AVX2/FMA path chosen at run time on x86-64 and a portable one elsewhere (both the same
 * polynomial exp, within 2 ulp of expf). */
#ifndef OTTER_RUNTIME_OPS_SOFTMAX_ROW_H
#define OTTER_RUNTIME_OPS_SOFTMAX_ROW_H

#include <stdint.h>

/* row[0, n) = softmax(row): exp(x - max) / sum. A row whose every entry is -inf (fully masked)
 * becomes zeros, not NaN (ONNX 1.23's Attention rule). */
void ot_softmax_row(float *row, int64_t n);

#endif
