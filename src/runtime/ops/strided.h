/* Strided element copies, shared by the data-movement kernels (shape.c, shape_index.c, resize.c).
 *
 * Most of those kernels are one strided copy: every output element comes from input offset
 * sum(index[d] * src_stride[d]). ot_copy_strided() merges dimensions that stay contiguous, copies
 * contiguous runs with memcpy, transposes the last two dimensions in cache tiles when that is
 * what the strides describe, and splits the rows over the session's threads. Any dtype works
 * (elements are moved as bytes); STRING elements are duplicated. */
#ifndef OTTER_RUNTIME_OPS_STRIDED_H
#define OTTER_RUNTIME_OPS_STRIDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/op.h"

/* Bytes per element (an otter_bytes for STRING). */
size_t ot_elem_size(otter_dtype t);
/* Copy n elements; strings are duplicated. */
void ot_copy_elems(void *dst, const void *src, int64_t n, otter_dtype dt);
/* dst (contiguous, shape dims) [i] = src[sum i_d * st_d]. ctx may be NULL (one thread). */
void ot_copy_strided(const ot_kernel_ctx *ctx, void *dst, const void *src, otter_dtype dt, int rank,
                     const int64_t *dims, const int64_t *st);
/* Row-major element strides of a contiguous tensor of these dims. */
void ot_contiguous_strides(int rank, const int64_t *dims, int64_t *st);

/* Index tensors (Gather, Scatter, ReverseSequence lengths) are int64 or int32. */
static inline bool ot_is_index_type(otter_dtype t) { return t == OTTER_DTYPE_INT64 || t == OTTER_DTYPE_INT32; }
static inline int64_t ot_index_at(const otter_tensor *t, int64_t i) {
    return t->dtype == OTTER_DTYPE_INT64 ? ((const int64_t *)t->data)[i] : ((const int32_t *)t->data)[i];
}

#endif
