/* Helpers shared by the CPU kernels: multidirectional (numpy) broadcasting, a strided walker over
 * broadcast operands, dtype dispatch macros, float16/bfloat16 conversion and element conversion.
 *
 * Broadcasting: ot_bcast_init() takes the output shape and each input's shape, gives every operand
 * element strides in the output's index space (0 along broadcast dimensions) and merges adjacent
 * dimensions that are contiguous for every operand, so same-shape operands become one flat row and
 * a scalar operand a row with stride 0. ot_bcast_walk() then calls a row function for each run of
 * the innermost dimension inside an output range [begin, end), so kernels write one tight loop per
 * row (specialised for strides 0/1 so the compiler vectorises it) and parallelise over the range. */
#ifndef OTTER_RUNTIME_OPS_BROADCAST_H
#define OTTER_RUNTIME_OPS_BROADCAST_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "core/float_formats.h"
#include "runtime/op.h"

/* ---- broadcasting ------------------------------------------------------------------------ */

/* Result shape of broadcasting the given inputs of the node (indices into ctx inputs; NULL
 * entries skipped). On mismatch fails with a message such as
 * "node 'n' (Add): input 1 'B' shape [3,4] does not broadcast with [2,5]". */
otter_status ot_broadcast_inputs(const ot_kernel_ctx *ctx, size_t n, const size_t *input_idx, int *rank, int64_t *dims);
/* Broadcast two shapes (no context, for helpers and tests); false when they don't broadcast. */
bool ot_broadcast_shape2(int ra, const int64_t *da, int rb, const int64_t *db, int *rank, int64_t *dims);
/* "[3,4]" into buf (returns buf). */
const char *ot_shape_str(char *buf, size_t size, int rank, const int64_t *dims);

#define OT_BCAST_MAX_OPERANDS 5

typedef struct ot_bcast {
    int n;    /* operands: 0 is the output, 1..n-1 the inputs */
    int rank; /* after merging dimensions; >= 1 */
    int64_t dims[OTTER_MAX_RANK];
    int64_t strides[OT_BCAST_MAX_OPERANDS][OTTER_MAX_RANK]; /* elements; 0 where broadcast */
    int64_t numel;                                          /* output elements */
} ot_bcast;

/* Operand 0 is the output shape (out_rank, out_dims); the inputs must broadcast to it
 * (checked by the caller, e.g. with ot_broadcast_inputs). n_in <= OT_BCAST_MAX_OPERANDS - 1. */
void ot_bcast_init(ot_bcast *b, int out_rank, const int64_t *out_dims, int n_in, const int *in_ranks,
                   const int64_t *const *in_dims);
/* Convenience: inputs given as tensors. */
void ot_bcast_init_tensors(ot_bcast *b, const otter_tensor *out, int n_in, const otter_tensor *const *in);

/* Row callback: off[k] is operand k's element offset at the row start, step[k] its stride along
 * the row (0 or 1 in the common cases), len the row length. */
typedef void (*ot_bcast_row_fn)(void *arg, const int64_t *off, const int64_t *step, int64_t len);
/* Call row() for every run of output elements in [begin, end). */
void ot_bcast_walk(const ot_bcast *b, int64_t begin, int64_t end, ot_bcast_row_fn row, void *arg);
/* Walk the whole output on the session's threads (grain: minimum elements per chunk). */
void ot_bcast_parallel(const ot_kernel_ctx *ctx, const ot_bcast *b, int64_t grain, ot_bcast_row_fn row, void *arg);

/* Default parallel grain for cheap elementwise loops. */
#define OT_GRAIN_ELEMWISE 32768

/* ---- dtype dispatch -------------------------------------------------------------------- */

/* X(dtype enum, C type, suffix) for each type of a class. Use as
 *   #define CASE(E, T, S) case E: run_##S(...); break;
 *   switch (dtype) { OT_FOR_NUMERIC(CASE) default: ... } */
#define OT_FOR_FLOATS(X) X(OTTER_DTYPE_FLOAT, float, f32) X(OTTER_DTYPE_DOUBLE, double, f64)
#define OT_FOR_SIGNED_INTS(X)                                                                                          \
    X(OTTER_DTYPE_INT8, int8_t, i8)                                                                                    \
    X(OTTER_DTYPE_INT16, int16_t, i16) X(OTTER_DTYPE_INT32, int32_t, i32) X(OTTER_DTYPE_INT64, int64_t, i64)
#define OT_FOR_UNSIGNED_INTS(X)                                                                                        \
    X(OTTER_DTYPE_UINT8, uint8_t, u8)                                                                                  \
    X(OTTER_DTYPE_UINT16, uint16_t, u16) X(OTTER_DTYPE_UINT32, uint32_t, u32) X(OTTER_DTYPE_UINT64, uint64_t, u64)
#define OT_FOR_INTS(X)    OT_FOR_SIGNED_INTS(X) OT_FOR_UNSIGNED_INTS(X)
#define OT_FOR_NUMERIC(X) OT_FOR_FLOATS(X) OT_FOR_INTS(X)
#define OT_FOR_SIGNED(X)  OT_FOR_FLOATS(X) OT_FOR_SIGNED_INTS(X)
/* Numeric plus bool (stored as uint8_t 0/1). */
#define OT_FOR_NUMERIC_BOOL(X) OT_FOR_NUMERIC(X) X(OTTER_DTYPE_BOOL, uint8_t, b8)

/* Scalar float16 / bfloat16 / float8 conversions: core/float_formats.h. */
void ot_f16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void ot_f32_to_f16_n(const float *src, uint16_t *dst, int64_t n);
void ot_bf16_to_f32_n(const uint16_t *src, float *dst, int64_t n);
void ot_f32_to_bf16_n(const float *src, uint16_t *dst, int64_t n);

/* Convert n elements between any two numeric/bool types, float16/bfloat16 and the narrow types
 * (float8, float4, 4- and 2-bit integers): C conversion rules (float to int truncates; to bool:
 * != 0), integers narrowing into 4/2 bits wrap, floats narrowing into float8/float4 round to nearest
 * even and saturate (ONNX Cast's defaults). false for unsupported types (strings, complex). */
bool ot_convert(void *dst, otter_dtype dst_type, const void *src, otter_dtype src_type, int64_t n);
/* ot_convert with Cast's saturate / round_mode for float8 / float4 destinations. */
bool ot_convert_narrow(void *dst, otter_dtype dst_type, const void *src, otter_dtype src_type, int64_t n,
                       ot_narrow_mode mode);
/* One element as double / int64 (numeric, bool, float16, bfloat16, the narrow types). */
static inline double ot_get_f64(const void *data, otter_dtype t, int64_t i) { return ot_elem_f64(data, t, i); }
int64_t ot_get_i64(const void *data, otter_dtype t, int64_t i);
/* Store v converted to t at element i. */
void ot_set_f64(void *data, otter_dtype t, int64_t i, double v);

/* Read an integer tensor (int32/int64, any rank) into out (up to max values); count is set to its
 * element count. Fails (naming input `which`) for other dtypes or more than max elements. */
otter_status ot_ctx_input_ints(const ot_kernel_ctx *ctx, size_t which, int64_t *out, int64_t max, int64_t *count);
/* An INTS attribute of ctx's node into out (n values expected); *present false when absent or
 * empty. Fails when the count differs. */
otter_status ot_ctx_ints_attr(const ot_kernel_ctx *ctx, const char *name, int64_t n, int64_t *out, bool *present);

/* Four floats (or int32s) as one value (GCC/Clang vector extension: SSE2 on x86-64, NEON on
 * arm64). Elementwise arithmetic in it rounds like the scalar code, so a loop written with it gives
 * the same bits as the plain loop, which GCC -O2 leaves scalar (and branchy for compares). */
typedef float ot_v4 __attribute__((vector_size(16)));
typedef int32_t ot_i4 __attribute__((vector_size(16)));
static inline ot_v4 ot_v4_load(const float *p) {
    ot_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void ot_v4_store(float *p, ot_v4 v) { memcpy(p, &v, sizeof v); }

/* Normalise axis into [0, rank) (accepting [-rank, rank)); false when out of range. */
static inline bool ot_norm_axis(int64_t *axis, int rank) {
    if (*axis < -rank || *axis >= rank) return false;
    if (*axis < 0) *axis += rank;
    return true;
}

#endif
