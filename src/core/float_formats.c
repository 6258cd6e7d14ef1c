#include "core/float_formats.h"

#include <math.h>

#include "core/core.h"

uint16_t ot_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                        /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                /* below the smallest normal 2^-14 */
        if (ax < 0x33000000u) return sign; /* below half the smallest subnormal */
        int e = (int)(ax >> 23);
        uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        /* value in units of 2^-24 (the subnormal step): man * 2^(e-150+24) = man >> (126 - e) */
        int shift = 126 - e;
        uint32_t q = man >> shift, remb = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (remb > half || (remb == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((ax >> 13) - ((127u - 15u) << 10));
    uint32_t remb = ax & 0x1fffu;
    if (remb > 0x1000u || (remb == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* A sign-exponent-mantissa format of at most 8 bits (all but e8m0, which has neither sign nor
 * mantissa). Exponent fields that are all ones are ordinary numbers unless has_inf says so. */
typedef struct minifloat {
    int bits;        /* 8 or 4 */
    int man_bits;    /* mantissa bits */
    int bias;        /* exponent bias */
    double max;      /* largest finite value */
    bool has_inf;    /* e5m2: exponent all ones with mantissa 0 is infinity, the rest NaN */
    bool uz;         /* "unsigned zero": no -0; the -0 pattern (sign bit alone) is the one NaN */
    bool has_nan;    /* float4e2m1 has none */
    uint8_t nan;     /* the positive NaN pattern when not uz (ml_dtypes' quiet NaN) */
    uint8_t inf;     /* the positive infinity pattern when has_inf */
    uint8_t max_pat; /* the largest finite value's pattern */
} minifloat;

static const minifloat *minifloat_of(otter_dtype t) {
    static const minifloat E4M3FN = {8, 3, 7, 448.0, false, false, true, 0x7f, 0, 0x7e};
    static const minifloat E4M3FNUZ = {8, 3, 8, 240.0, false, true, true, 0x80, 0, 0x7f};
    static const minifloat E5M2 = {8, 2, 15, 57344.0, true, false, true, 0x7e, 0x7c, 0x7b};
    static const minifloat E5M2FNUZ = {8, 2, 16, 57344.0, false, true, true, 0x80, 0, 0x7f};
    static const minifloat E2M1 = {4, 1, 1, 6.0, false, false, false, 0, 0, 0x7};
    switch (t) {
    case OTTER_DTYPE_FLOAT8E4M3FN:
        return &E4M3FN;
    case OTTER_DTYPE_FLOAT8E4M3FNUZ:
        return &E4M3FNUZ;
    case OTTER_DTYPE_FLOAT8E5M2:
        return &E5M2;
    case OTTER_DTYPE_FLOAT8E5M2FNUZ:
        return &E5M2FNUZ;
    case OTTER_DTYPE_FLOAT4E2M1:
        return &E2M1;
    default:
        return NULL;
    }
}

float ot_narrow_to_f32(otter_dtype t, uint8_t bits) {
    if (t == OTTER_DTYPE_FLOAT8E8M0) return bits == 0xff ? NAN : ldexpf(1.0f, (int)bits - 127);
    const minifloat *f = minifloat_of(t);
    OT_ASSERT(f != NULL);
    uint8_t sign_bit = (uint8_t)(1u << (f->bits - 1)), mag = bits & (uint8_t)(sign_bit - 1);
    int exp_bits = f->bits - 1 - f->man_bits;
    int e = mag >> f->man_bits, m = mag & ((1 << f->man_bits) - 1);
    if (f->uz && bits == sign_bit) return NAN;
    if (!f->uz && f->has_nan && mag == f->nan) return (bits & sign_bit) ? -NAN : NAN;
    if (f->has_inf && e == (1 << exp_bits) - 1) {
        if (m) return (bits & sign_bit) ? -NAN : NAN;
        return (bits & sign_bit) ? -INFINITY : INFINITY;
    }
    /* e4m3fn's NaN is only 0x7F: the other all-ones exponents are numbers; fnuz has no NaN there. */
    float v = e == 0 ? ldexpf((float)m, 1 - f->bias - f->man_bits)
                     : ldexpf((float)((1 << f->man_bits) | m), e - f->bias - f->man_bits);
    return (bits & sign_bit) ? -v : v;
}

static uint8_t e8m0_from_f64(double x, ot_narrow_mode mode) {
    if (isnan(x)) return 0xff;
    double a = fabs(x); /* negative inputs are undefined in ONNX; otter uses their magnitude */
    if (isinf(a)) return mode.saturate ? 0xfe : 0xff;
    if (a == 0) return mode.saturate ? 0x00 : 0xff;
    int e;
    double frac = 2 * frexp(a, &e); /* a = frac * 2^(e-1), frac in [1, 2) */
    int k = e - 1;
    if ((mode.e8m0_round == OT_E8M0_UP && frac > 1) || (mode.e8m0_round == OT_E8M0_NEAREST && frac >= 1.5)) k++;
    int biased = k + 127;
    if (biased > 254) return mode.saturate ? 0xfe : 0xff;
    if (biased < 0) return mode.saturate ? 0x00 : 0xff;
    return (uint8_t)biased;
}

uint8_t ot_narrow_from_f64(otter_dtype t, double x, ot_narrow_mode mode) {
    if (t == OTTER_DTYPE_FLOAT8E8M0) return e8m0_from_f64(x, mode);
    const minifloat *f = minifloat_of(t);
    OT_ASSERT(f != NULL);
    uint8_t sign = signbit(x) ? (uint8_t)(1u << (f->bits - 1)) : 0;
    if (isnan(x)) {
        if (!f->has_nan) return (uint8_t)(1u << (f->bits - 1)); /* e2m1 has no NaN: -0, as ml_dtypes */
        return f->uz ? f->nan : (uint8_t)(f->nan | sign);
    }
    bool saturate = mode.saturate || !f->has_nan;
    uint8_t overflow = saturate     ? (uint8_t)(f->max_pat | sign)
                       : f->has_inf ? (uint8_t)(f->inf | sign)
                       : f->uz      ? f->nan
                                    : (uint8_t)(f->nan | sign);
    double a = fabs(x);
    if (isinf(a)) return overflow;
    int emin = 1 - f->bias; /* exponent of the smallest normal */
    int lead = emin;        /* exponent of a's leading bit, at least emin (subnormals share its step) */
    if (a != 0) {
        int e;
        frexp(a, &e);
        if (e - 1 > lead) lead = e - 1;
    }
    /* nearbyint rounds ties to even in the default rounding mode; scaling by powers of two is exact. */
    double q = ldexp(nearbyint(ldexp(a, f->man_bits - lead)), lead - f->man_bits);
    if (q > f->max) return overflow;
    if (q == 0) return f->uz ? 0 : sign;
    int e;
    frexp(q, &e);
    int qe = e - 1; /* q's exponent after rounding (one more than lead when it rounded up a binade) */
    uint8_t pat;
    if (qe < emin) /* subnormal: exponent field 0 */
        pat = (uint8_t)ldexp(q, f->man_bits - emin);
    else
        pat = (uint8_t)(((qe + f->bias) << f->man_bits) | ((int)ldexp(q, f->man_bits - qe) - (1 << f->man_bits)));
    return (uint8_t)(pat | sign);
}

double ot_elem_f64(const void *data, otter_dtype t, int64_t i) {
    switch (t) {
    case OTTER_DTYPE_FLOAT:
        return ((const float *)data)[i];
    case OTTER_DTYPE_DOUBLE:
        return ((const double *)data)[i];
    case OTTER_DTYPE_INT8:
    case OTTER_DTYPE_INT4:
    case OTTER_DTYPE_INT2:
        return ((const int8_t *)data)[i];
    case OTTER_DTYPE_UINT8:
    case OTTER_DTYPE_BOOL:
    case OTTER_DTYPE_UINT4:
    case OTTER_DTYPE_UINT2:
        return ((const uint8_t *)data)[i];
    case OTTER_DTYPE_INT16:
        return ((const int16_t *)data)[i];
    case OTTER_DTYPE_UINT16:
        return ((const uint16_t *)data)[i];
    case OTTER_DTYPE_INT32:
        return ((const int32_t *)data)[i];
    case OTTER_DTYPE_UINT32:
        return ((const uint32_t *)data)[i];
    case OTTER_DTYPE_INT64:
        return (double)((const int64_t *)data)[i];
    case OTTER_DTYPE_UINT64:
        return (double)((const uint64_t *)data)[i];
    case OTTER_DTYPE_FLOAT16:
        return ot_f16_to_f32(((const uint16_t *)data)[i]);
    case OTTER_DTYPE_BFLOAT16:
        return ot_bf16_to_f32(((const uint16_t *)data)[i]);
    default:
        return otter_dtype_is_narrow_float(t) ? ot_narrow_to_f32(t, ((const uint8_t *)data)[i]) : NAN;
    }
}

int64_t ot_subbyte_wrap(otter_dtype t, int64_t v) {
    switch (t) {
    case OTTER_DTYPE_INT4:
        return (int64_t)((((uint64_t)v & 0xfu) ^ 0x8u)) - 8;
    case OTTER_DTYPE_UINT4:
        return (int64_t)((uint64_t)v & 0xfu);
    case OTTER_DTYPE_INT2:
        return (int64_t)((((uint64_t)v & 0x3u) ^ 0x2u)) - 2;
    case OTTER_DTYPE_UINT2:
        return (int64_t)((uint64_t)v & 0x3u);
    default:
        return v;
    }
}

void ot_subbyte_range(otter_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case OTTER_DTYPE_INT4:
        *lo = -8, *hi = 7;
        break;
    case OTTER_DTYPE_UINT4:
        *lo = 0, *hi = 15;
        break;
    case OTTER_DTYPE_INT2:
        *lo = -2, *hi = 1;
        break;
    default: /* uint2 */
        *lo = 0, *hi = 3;
        break;
    }
}

size_t ot_packed_size(otter_dtype t, size_t n) {
    int bits = otter_dtype_bits(t);
    return bits >= 8 ? n * (size_t)(bits / 8) : (n * (size_t)bits + 7) / 8;
}

void ot_pack_elems(otter_dtype t, const uint8_t *src, size_t n, uint8_t *dst) {
    int bits = otter_dtype_bits(t);
    if (bits >= 8) {
        memcpy(dst, src, ot_packed_size(t, n));
        return;
    }
    unsigned per = 8u / (unsigned)bits, mask = (1u << bits) - 1;
    memset(dst, 0, ot_packed_size(t, n));
    for (size_t i = 0; i < n; i++) dst[i / per] |= (uint8_t)((src[i] & mask) << (bits * (int)(i % per)));
}

void ot_unpack_elems(otter_dtype t, const uint8_t *src, size_t n, uint8_t *dst) {
    int bits = otter_dtype_bits(t);
    if (bits >= 8) {
        memcpy(dst, src, ot_packed_size(t, n));
        return;
    }
    unsigned per = 8u / (unsigned)bits, mask = (1u << bits) - 1;
    bool is_signed = t == OTTER_DTYPE_INT4 || t == OTTER_DTYPE_INT2;
    for (size_t i = 0; i < n; i++) {
        unsigned v = (src[i / per] >> (bits * (int)(i % per))) & mask;
        dst[i] = is_signed ? (uint8_t)(int8_t)ot_subbyte_wrap(t, (int64_t)v) : (uint8_t)v;
    }
}
