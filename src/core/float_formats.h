/* The one reference for otter's narrow number formats, element by element: float16, bfloat16, the
 * float8 formats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0), float4e2m1, the 4- and 2-bit integers,
 * and the packing of the sub-byte types in a TensorProto. Cast, QuantizeLinear/DequantizeLinear,
 * the TensorProto reader and writer and printing all convert through here.
 *
 * Rounding is to nearest, ties to even, at the target's mantissa width (subnormals included), as
 * ONNX's Cast specifies; float8e8m0 has its own rounding modes (Cast's round_mode). */
#ifndef OTTER_CORE_FLOAT_FORMATS_H
#define OTTER_CORE_FLOAT_FORMATS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "otter/tensor.h"

/* float16 and bfloat16 are stored as uint16_t bit patterns. */
static inline float ot_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ffu;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
/* Round to nearest even; overflow to infinity; NaN stays NaN. */
uint16_t ot_f32_to_f16(float f);
static inline float ot_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
/* Round to nearest even (as ONNX's Cast from opset 19 and ONNX Runtime); NaN stays a quiet NaN. */
static inline uint16_t ot_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);                                           /* round to nearest even */
    return (uint16_t)(bits >> 16);
}

/* Rounding of a value into float8e8m0 (Cast's round_mode): up = away from zero to the next power
 * of two, down = towards zero, nearest = to the nearer power of two in linear terms, ties up. */
typedef enum ot_e8m0_round { OT_E8M0_UP = 0, OT_E8M0_DOWN, OT_E8M0_NEAREST } ot_e8m0_round;

/* How a value is narrowed into a float8 / float4 format. saturate (Cast's attribute, default true):
 * out-of-range values and infinities become the largest finite value; when false they become
 * infinity (float8e5m2) or NaN (the others). float4e2m1 has neither, so it always saturates. */
typedef struct ot_narrow_mode {
    bool saturate;
    ot_e8m0_round e8m0_round;
} ot_narrow_mode;
#define OT_NARROW_DEFAULT ((ot_narrow_mode){true, OT_E8M0_UP})

/* The value of a narrow-float bit pattern (t: otter_dtype_is_narrow_float). Exact. */
float ot_narrow_to_f32(otter_dtype t, uint8_t bits);
/* x in narrow-float format t, rounded to nearest even (e8m0: per mode.e8m0_round). */
uint8_t ot_narrow_from_f64(otter_dtype t, double x, ot_narrow_mode mode);

/* Element i of data (of type t) as a double: numeric types, bool, float16, bfloat16 and the narrow
 * types; NaN for strings and the complex types. The one reader behind otter_tensor_value and the
 * kernels' ot_get_f64. */
double ot_elem_f64(const void *data, otter_dtype t, int64_t i);

/* v wrapped into int4/int2 (two's complement, sign-extended) or uint4/uint2 (low bits), as ONNX
 * casts between integers: the bits that don't fit are dropped. */
int64_t ot_subbyte_wrap(otter_dtype t, int64_t v);
/* Range of the 4- and 2-bit integers, for saturating (QuantizeLinear). */
void ot_subbyte_range(otter_dtype t, int64_t *lo, int64_t *hi);

/* True for the 4- and 2-bit types, whose TensorProto form packs several elements per byte. */
static inline bool ot_dtype_packed(otter_dtype t) {
    int bits = otter_dtype_bits(t);
    return bits == 4 || bits == 2;
}
/* Bytes that n elements of t take packed as in a TensorProto (otter_dtype_bits per element,
 * rounded up to whole bytes). */
size_t ot_packed_size(otter_dtype t, size_t n);
/* Pack n one-byte elements of a 4- or 2-bit type (otter's in-memory form) into TensorProto form
 * (first element in the lowest bits; unused high bits of the last byte zero), and back (sign-
 * extending int4/int2). Other types are copied. */
void ot_pack_elems(otter_dtype t, const uint8_t *src, size_t n, uint8_t *dst);
void ot_unpack_elems(otter_dtype t, const uint8_t *src, size_t n, uint8_t *dst);

#endif
