/* otter: the library's own tensor type. Dense, row-major, contiguous. */
#ifndef OTTER_TENSOR_H
#define OTTER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, numbered as ONNX's TensorProto.DataType.
 *
 * In memory every element of the types below 8 bits and of the 8-bit float formats takes one
 * byte, so kernels index them like any other type:
 *   float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float8e8m0: the 8-bit pattern;
 *   float4e2m1: the 4-bit pattern in the low nibble (high nibble zero);
 *   int4, int2: int8_t, sign-extended (-8..7, -2..1); uint4, uint2: uint8_t (0..15, 0..3).
 * Packing (two 4-bit elements per byte, low nibble first; four 2-bit elements per byte, lowest
 * bits first) happens only where a TensorProto is read or written (raw_data, int32_data and
 * external data), as ONNX stores them. */
typedef enum otter_dtype {
    OTTER_DTYPE_UNDEFINED = 0,
    OTTER_DTYPE_FLOAT = 1,
    OTTER_DTYPE_UINT8 = 2,
    OTTER_DTYPE_INT8 = 3,
    OTTER_DTYPE_UINT16 = 4,
    OTTER_DTYPE_INT16 = 5,
    OTTER_DTYPE_INT32 = 6,
    OTTER_DTYPE_INT64 = 7,
    OTTER_DTYPE_STRING = 8,
    OTTER_DTYPE_BOOL = 9,
    OTTER_DTYPE_FLOAT16 = 10,
    OTTER_DTYPE_DOUBLE = 11,
    OTTER_DTYPE_UINT32 = 12,
    OTTER_DTYPE_UINT64 = 13,
    OTTER_DTYPE_COMPLEX64 = 14,
    OTTER_DTYPE_COMPLEX128 = 15,
    OTTER_DTYPE_BFLOAT16 = 16,
    OTTER_DTYPE_FLOAT8E4M3FN = 17,   /* 1-4-3, bias 7, no infinity, NaN 0x7F/0xFF, max 448 */
    OTTER_DTYPE_FLOAT8E4M3FNUZ = 18, /* 1-4-3, bias 8, no infinity, no -0, NaN 0x80, max 240 */
    OTTER_DTYPE_FLOAT8E5M2 = 19,     /* 1-5-2, bias 15, IEEE-like with infinity, max 57344 */
    OTTER_DTYPE_FLOAT8E5M2FNUZ = 20, /* 1-5-2, bias 16, no infinity, no -0, NaN 0x80, max 57344 */
    OTTER_DTYPE_UINT4 = 21,
    OTTER_DTYPE_INT4 = 22,
    OTTER_DTYPE_FLOAT4E2M1 = 23, /* 1-2-1, bias 1, no infinity or NaN, max 6 */
    OTTER_DTYPE_FLOAT8E8M0 = 24, /* exponent only: 2^(e-127), NaN 0xFF, no sign, no zero */
    OTTER_DTYPE_UINT2 = 25,
    OTTER_DTYPE_INT2 = 26,
    OTTER_DTYPE_COUNT_ = 27
} otter_dtype;

/* Size in bytes of one element in memory (0 for UNDEFINED and for STRING, whose elements are
 * otter_bytes); 1 for the 4- and 2-bit types, which are unpacked in memory. */
OTTER_API size_t otter_dtype_size(otter_dtype t);
/* "float32", "int64", "float8e4m3fn", ... as in numpy and ml_dtypes; "undefined" for unknown values. */
OTTER_API const char *otter_dtype_name(otter_dtype t);
/* Inverse of otter_dtype_name (also accepts ONNX's upper-case names); UNDEFINED when unknown. */
OTTER_API otter_dtype otter_dtype_from_name(const char *name);
OTTER_API bool otter_dtype_is_float(otter_dtype t); /* float16, bfloat16, float, double */
/* The float formats narrower than 16 bits: float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz,
 * float8e8m0, float4e2m1 (stored one element per byte as their bit pattern). Only Cast, CastLike,
 * QuantizeLinear, DequantizeLinear and the data-movement operators take them. */
OTTER_API bool otter_dtype_is_narrow_float(otter_dtype t);
/* Bits one element takes in a TensorProto: 4 for uint4/int4/float4e2m1, 2 for uint2/int2, else 8 *
 * otter_dtype_size (0 for UNDEFINED and STRING). */
OTTER_API int otter_dtype_bits(otter_dtype t);

#define OTTER_MAX_RANK 16

/* A byte string (ONNX strings are bytes and may hold NULs). data is NUL-terminated for convenience. */
typedef struct otter_bytes {
    char *data;
    size_t len;
} otter_bytes;

/* How a tensor was stored in its TensorProto, kept so a round trip writes it back the same way. */
typedef enum otter_tensor_storage {
    OTTER_STORAGE_RAW = 0,   /* raw_data (otter's default when writing) */
    OTTER_STORAGE_TYPED = 1, /* float_data / int32_data / int64_data / ... */
    OTTER_STORAGE_EXTERNAL = 2
} otter_tensor_storage;

struct otter_proto_extra; /* protobuf details otter keeps only to write them back (see format/) */

typedef struct otter_tensor {
    char *name; /* may be NULL */
    otter_dtype dtype;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    /* Elements; for STRING an array of otter_bytes. NULL only when the tensor has no elements. */
    void *data;
    bool owns_data; /* false for views into someone else's buffer */
    /* Protobuf round-trip details (doc_string, storage form, external-data keys, unknown fields);
     * NULL for tensors made in memory. */
    struct otter_proto_extra *extra;
} otter_tensor;

/* Element i as a double: any numeric type, bool (0/1), float16, bfloat16 and the narrow types
 * (float8 and float4 formats decoded, 4- and 2-bit integers); NaN for STRING and the complex types.
 * For printing and tests; kernels read typed data directly. */
OTTER_API double otter_tensor_value(const otter_tensor *t, int64_t i);

/* Number of elements (product of dims; 1 for rank 0). */
OTTER_API int64_t otter_tensor_numel(const otter_tensor *t);
OTTER_API size_t otter_tensor_nbytes(const otter_tensor *t);

/* New tensor with zeroed data. dims may be NULL when rank is 0. name may be NULL. */
OTTER_API otter_status otter_tensor_create(otter_tensor **out, const char *name, otter_dtype dtype, int rank,
                                           const int64_t *dims);
/* New tensor holding a copy of data (nbytes = numel * dtype size; for STRING, an otter_bytes array). */
OTTER_API otter_status otter_tensor_from_data(otter_tensor **out, const char *name, otter_dtype dtype, int rank,
                                              const int64_t *dims, const void *data);
/* Deep copy. */
OTTER_API otter_status otter_tensor_clone(otter_tensor **out, const otter_tensor *src);
OTTER_API otter_status otter_tensor_set_name(otter_tensor *t, const char *name);
/* True when dtype, dims and every element (bitwise; strings bytewise) are equal. */
OTTER_API bool otter_tensor_equal(const otter_tensor *a, const otter_tensor *b);
OTTER_API void otter_tensor_free(otter_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
