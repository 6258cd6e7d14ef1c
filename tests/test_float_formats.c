/* core/float_formats: the narrow number formats against their definitions in ONNX's spec
 * (onnx.proto, Operators.md's Cast tables) and the OCP FP8 / MX papers it cites.
 *
 * For each of float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, float4e2m1 and
 * float8e8m0, every bit pattern is decoded and checked against:
 *   - anchors from the spec: the largest finite value, the smallest subnormal, 1.0, the NaN and
 *     infinity patterns, and the number of NaN patterns (e4m3fn 2, fnuz 1, e5m2 6, e8m0 1, e2m1 0);
 *   - order: the positive patterns decode to strictly increasing values (sign-magnitude), the
 *     negative patterns to their negation (except fnuz's 0x80, the NaN);
 *   - round trip: encode(decode(b)) == b for every non-NaN pattern, saturating or not (infinity
 *     only without saturation);
 *   - rounding: the midpoint between two neighbours encodes to the one with an even pattern (ties
 *     to even), and the next double above / below it to the upper / lower neighbour;
 *   - saturation (Cast's tables): beyond the largest value and at infinity, saturate gives the
 *     largest finite value, no saturate infinity (e5m2) or NaN (the others), and float4e2m1 always
 *     saturates; -0 and tiny negatives give 0 for the fnuz formats, -0 for the others;
 *   - float8e8m0's round modes up / down / nearest.
 * The 4- and 2-bit integers: wrap-around and TensorProto packing with odd element counts, through
 * ot_pack_elems, through .pb files in raw_data and int32_data form and through external data; otter_tensor_value's
 * decoding, which printing uses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/float_formats.h"
#include "core/proto_extra.h"
#include "otter/io.h"
#include "otter/ir.h"
#include "testutil.h"

typedef struct format_spec {
    otter_dtype t;
    int n_patterns; /* 256, or 16 for float4e2m1 */
    double max, min_subnormal;
    uint8_t one;      /* the pattern of 1.0 */
    int n_nan;        /* NaN patterns */
    int inf_pattern;  /* -1 when the format has no infinity */
    bool signed_zero; /* has -0 */
} format_spec;

static const format_spec SPECS[] = {
    {OTTER_DTYPE_FLOAT8E4M3FN, 256, 448.0, 0x1p-9, 0x38, 2, -1, true},
    {OTTER_DTYPE_FLOAT8E4M3FNUZ, 256, 240.0, 0x1p-10, 0x40, 1, -1, false},
    {OTTER_DTYPE_FLOAT8E5M2, 256, 57344.0, 0x1p-16, 0x3c, 6, 0x7c, true},
    {OTTER_DTYPE_FLOAT8E5M2FNUZ, 256, 57344.0, 0x1p-17, 0x40, 1, -1, false},
    {OTTER_DTYPE_FLOAT4E2M1, 16, 6.0, 0.5, 0x2, 0, -1, true},
};

static double dec(otter_dtype t, int b) { return ot_narrow_to_f32(t, (uint8_t)b); }
static int enc(otter_dtype t, double x, bool saturate) {
    return ot_narrow_from_f64(t, x, (ot_narrow_mode){saturate, OT_E8M0_UP});
}

static void test_format(const format_spec *f) {
    int half = f->n_patterns / 2, sign = half, nan = 0, order_bad = 0, neg_bad = 0, trip_bad = 0, tie_bad = 0;
    for (int b = 0; b < f->n_patterns; b++)
        if (isnan(dec(f->t, b))) nan++;
    /* the positive patterns in order; the largest finite one is the last before NaN / infinity */
    int max_pat = 0;
    for (int b = 1; b < half; b++) {
        double v = dec(f->t, b), prev = dec(f->t, b - 1);
        if (isnan(v) || isinf(v)) break;
        if (!(v > prev)) order_bad++;
        max_pat = b;
    }
    for (int b = 0; b < half; b++) {
        double p = dec(f->t, b), m = dec(f->t, b | sign);
        if (!f->signed_zero && b == 0) continue; /* 0x80 is the fnuz NaN */
        if (isnan(p) ? !isnan(m) : !(m == -p && signbit(m))) neg_bad++;
    }
    for (int b = 0; b < f->n_patterns; b++) {
        double v = dec(f->t, b);
        if (isnan(v)) continue;
        /* infinity comes back only without saturation (saturate turns it into the largest value) */
        if ((!isinf(v) && enc(f->t, v, true) != b) || enc(f->t, v, false) != b) trip_bad++;
    }
    for (int b = 0; b < max_pat; b++) { /* ties between neighbours b and b+1, both signs */
        double lo = dec(f->t, b), hi = dec(f->t, b + 1), mid = (lo + hi) / 2;
        int even = (b & 1) ? b + 1 : b;
        for (int s = 0; s < 2; s++) {
            double k = s ? -1 : 1;
            int off = s && (f->signed_zero || b > 0) ? sign : 0, off1 = s ? sign : 0;
            if (enc(f->t, k * mid, true) != (even | ((even == 0) ? off : off1))) tie_bad++;
            if (enc(f->t, k * nextafter(mid, INFINITY), true) != ((b + 1) | off1)) tie_bad++;
            if (enc(f->t, k * nextafter(mid, 0), true) != (b | off)) tie_bad++;
        }
    }
    printf("%-15s max %-8g (pattern 0x%02x) min subnormal %g, NaN patterns %d; order %d, sign %d, round trip %d, "
           "ties %d mismatches\n",
           otter_dtype_name(f->t), dec(f->t, max_pat), max_pat, dec(f->t, 1), nan, order_bad, neg_bad, trip_bad,
           tie_bad);
    CHECK(dec(f->t, max_pat) == f->max && dec(f->t, 1) == f->min_subnormal && dec(f->t, f->one) == 1.0);
    CHECK(nan == f->n_nan && order_bad == 0 && neg_bad == 0 && trip_bad == 0 && tie_bad == 0);
    if (f->inf_pattern >= 0) CHECK(isinf(dec(f->t, f->inf_pattern)) && dec(f->t, f->inf_pattern) > 0);

    /* saturation: just past the largest value's rounding range, and infinity */
    double over = f->max + (f->max - dec(f->t, max_pat - 1)); /* the value the next pattern would have */
    int max_neg = max_pat | sign;
    CHECK(enc(f->t, over, true) == max_pat && enc(f->t, -over, true) == max_neg);
    CHECK(enc(f->t, INFINITY, true) == max_pat && enc(f->t, -INFINITY, true) == max_neg);
    /* halfway between the largest value and the next: ties to even, so an odd largest pattern overflows */
    double top_mid = (f->max + over) / 2;
    CHECK(enc(f->t, top_mid, true) == max_pat);
    CHECK(enc(f->t, top_mid, false) == ((max_pat & 1) ? enc(f->t, over, false) : max_pat));
    if (f->t == OTTER_DTYPE_FLOAT4E2M1) { /* no infinity or NaN: always saturates */
        CHECK(enc(f->t, INFINITY, false) == max_pat && enc(f->t, over, false) == max_pat);
    } else if (f->inf_pattern >= 0) {
        CHECK(enc(f->t, over, false) == f->inf_pattern && enc(f->t, -INFINITY, false) == (f->inf_pattern | sign));
    } else {
        CHECK(isnan(dec(f->t, enc(f->t, over, false))) && isnan(dec(f->t, enc(f->t, INFINITY, false))));
        CHECK(isnan(dec(f->t, enc(f->t, -over, false))));
    }
    CHECK(isnan(dec(f->t, enc(f->t, NAN, true))) || f->n_nan == 0);
    /* zeros: fnuz has no -0 */
    int negzero = f->signed_zero ? sign : 0;
    CHECK(enc(f->t, -0.0, true) == negzero && enc(f->t, -1e-30, true) == negzero && enc(f->t, 1e-30, true) == 0);
}

static void test_e8m0(void) {
    const otter_dtype t = OTTER_DTYPE_FLOAT8E8M0;
    int nan = 0, bad = 0;
    for (int b = 0; b < 256; b++) {
        double v = dec(t, b);
        if (isnan(v)) {
            nan++;
            continue;
        }
        if (v != ldexp(1.0, b - 127)) bad++;
        for (int r = OT_E8M0_UP; r <= OT_E8M0_NEAREST; r++)
            if (ot_narrow_from_f64(t, v, (ot_narrow_mode){true, (ot_e8m0_round)r}) != b) bad++;
    }
    ot_narrow_mode up = {true, OT_E8M0_UP}, down = {true, OT_E8M0_DOWN}, near = {true, OT_E8M0_NEAREST};
    ot_narrow_mode up_nosat = {false, OT_E8M0_UP};
    printf("float8e8m0: %d NaN patterns, %d mismatches of 2^(b-127) and its round trip\n", nan, bad);
    CHECK(nan == 1 && dec(t, 0xff) != dec(t, 0xff) && bad == 0 && dec(t, 0x7f) == 1.0);
    /* 3.0: up 4, down 2, nearest 4 (1.5 * 2 is the tie, which goes up); 2.9: nearest 2 */
    CHECK(ot_narrow_from_f64(t, 3.0, up) == 0x81 && ot_narrow_from_f64(t, 3.0, down) == 0x80);
    CHECK(ot_narrow_from_f64(t, 3.0, near) == 0x81 && ot_narrow_from_f64(t, 2.9, near) == 0x80);
    CHECK(ot_narrow_from_f64(t, 0.124, up) == 0x7c && ot_narrow_from_f64(t, 1.1, up) == 0x80); /* the suite's */
    /* saturation: 0 and infinity */
    CHECK(ot_narrow_from_f64(t, 0.0, up) == 0x00 && ot_narrow_from_f64(t, 0.0, up_nosat) == 0xff);
    CHECK(ot_narrow_from_f64(t, INFINITY, up) == 0xfe && ot_narrow_from_f64(t, INFINITY, up_nosat) == 0xff);
    CHECK(ot_narrow_from_f64(t, 0x1.8p127, up) == 0xfe && ot_narrow_from_f64(t, NAN, up) == 0xff);
}

static void test_bf16(void) {
    /* round to nearest even, the same for every converter (ONNX's Cast from opset 19) */
    CHECK(ot_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);            /* tie, even below */
    CHECK(ot_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);        /* tie, even above */
    CHECK(ot_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81); /* above the tie */
    printf("bfloat16: ties to even\n");
}

static void test_subbyte(void) {
    CHECK(ot_subbyte_wrap(OTTER_DTYPE_INT4, -9) == 7 && ot_subbyte_wrap(OTTER_DTYPE_INT4, 8) == -8);
    CHECK(ot_subbyte_wrap(OTTER_DTYPE_UINT4, -1) == 15 && ot_subbyte_wrap(OTTER_DTYPE_UINT4, 16) == 0);
    CHECK(ot_subbyte_wrap(OTTER_DTYPE_INT2, -3) == 1 && ot_subbyte_wrap(OTTER_DTYPE_INT2, 2) == -2);
    CHECK(ot_subbyte_wrap(OTTER_DTYPE_UINT2, 5) == 1);
    /* int4 [-8, 7, 1, -1, 3]: low nibble first, the last byte's high nibble zero */
    const int8_t i4[] = {-8, 7, 1, -1, 3};
    uint8_t packed[3], back[5];
    ot_pack_elems(OTTER_DTYPE_INT4, (const uint8_t *)i4, 5, packed);
    CHECK(ot_packed_size(OTTER_DTYPE_INT4, 5) == 3 && packed[0] == 0x78 && packed[1] == 0xf1 && packed[2] == 0x03);
    ot_unpack_elems(OTTER_DTYPE_INT4, packed, 5, back);
    CHECK(memcmp(back, i4, 5) == 0);
    /* int2 [-2, -1, 0, 1, -2, 1, 0]: four per byte, lowest bits first (the suite's 0x39 pattern) */
    const int8_t i2[] = {-2, -1, 0, 1, -2, 1, 0};
    uint8_t p2[2], b2[7];
    ot_pack_elems(OTTER_DTYPE_INT2, (const uint8_t *)i2, 7, p2);
    CHECK(ot_packed_size(OTTER_DTYPE_INT2, 7) == 2 && p2[0] == 0x4e && p2[1] == 0x06);
    ot_unpack_elems(OTTER_DTYPE_INT2, p2, 7, b2);
    CHECK(memcmp(b2, i2, 7) == 0);
    printf("int4/int2 wrap and packing: [-8 7 1 -1 3] -> %02x %02x %02x\n", packed[0], packed[1], packed[2]);
}

/* A tensor of type t with n elements through a .pb file, as raw_data and as int32_data. */
static void pb_round_trip(otter_dtype t, const uint8_t *elems, int64_t n) {
    for (int typed = 0; typed < 2; typed++) {
        otter_tensor *x = NULL, *y = NULL;
        CHECK_OK(otter_tensor_from_data(&x, "x", t, 1, &n, elems));
        if (!x) return;
        if (typed) {
            x->extra = ot_proto_extra_new();
            x->extra->storage = OTTER_STORAGE_TYPED;
            x->extra->has_data_type = true;
        }
        const char *path = tu_tmp_path("float_formats.pb");
        CHECK_OK(otter_tensor_save_pb(x, path));
        size_t size = 0;
        void *file = tu_read_file(path, &size);
        CHECK_OK(otter_tensor_load_pb(&y, path));
        bool same = y && otter_tensor_equal(x, y);
        printf("%-14s %lld elements as %-10s: %zu-byte file, read back %s\n", otter_dtype_name(t), (long long)n,
               typed ? "int32_data" : "raw_data", size, same ? "equal" : "DIFFERENT");
        CHECK(same);
        free(file);
        otter_tensor_free(x);
        otter_tensor_free(y);
    }
}

static void test_pb(void) {
    const int8_t i4[] = {-8, 7, 1, -1, 3}, i2[] = {-2, -1, 0, 1, -2, 1, 0};
    const uint8_t u4[] = {0, 15, 9}, u2[] = {3, 2, 1}, f4[] = {0x1, 0xf, 0x8, 0x7, 0x0};
    const uint8_t f8[] = {0x00, 0x7e, 0x80, 0x7f, 0x01};
    pb_round_trip(OTTER_DTYPE_INT4, (const uint8_t *)i4, 5);
    pb_round_trip(OTTER_DTYPE_UINT4, u4, 3);
    pb_round_trip(OTTER_DTYPE_INT2, (const uint8_t *)i2, 7);
    pb_round_trip(OTTER_DTYPE_UINT2, u2, 3);
    pb_round_trip(OTTER_DTYPE_FLOAT4E2M1, f4, 5);
    pb_round_trip(OTTER_DTYPE_FLOAT8E4M3FN, f8, 5);
    pb_round_trip(OTTER_DTYPE_FLOAT8E8M0, f8, 5);

    /* a hand-made TensorProto: dims [5], data_type INT4 (22), raw_data of 3 packed bytes; the
     * unpacked size (5 bytes) is refused */
    const uint8_t pb3[] = {0x08, 0x05, 0x10, 22, 0x4a, 3, 0x78, 0xf1, 0x03};
    const uint8_t pb5[] = {0x08, 0x05, 0x10, 22, 0x4a, 5, 0xf8, 0x07, 0x01, 0xff, 0x03};
    otter_tensor *y = NULL;
    CHECK_OK(otter_tensor_load_pb_from_memory(&y, pb3, sizeof pb3));
    CHECK(y && y->dtype == OTTER_DTYPE_INT4 && otter_tensor_numel(y) == 5 && memcmp(y->data, i4, 5) == 0);
    otter_tensor_free(y);
    y = NULL;
    CHECK_STATUS(otter_tensor_load_pb_from_memory(&y, pb5, sizeof pb5), OTTER_ERR_INVALID);
    printf("int4 raw_data of 5 bytes for 5 elements: refused (%s)\n", otter_last_error());
}

/* A model whose int4 and uint2 initializers go to external data: packed in the data file (3 and 1
 * bytes for 5 and 3 elements), unpacked again when read. */
static void test_external(void) {
    const int8_t i4[] = {-8, 7, 1, -1, 3};
    const uint8_t u2[] = {3, 0, 2};
    otter_model *m = NULL, *back = NULL;
    otter_tensor *a = NULL, *b = NULL;
    CHECK_OK(otter_model_create(&m, "g", 21));
    CHECK_OK(otter_tensor_from_data(&a, "a", OTTER_DTYPE_INT4, 1, (int64_t[]){5}, i4));
    CHECK_OK(otter_tensor_from_data(&b, "b", OTTER_DTYPE_UINT2, 1, (int64_t[]){3}, u2));
    if (!m || !a || !b) return;
    CHECK_OK(otter_graph_add_initializer(m->graph, a));
    CHECK_OK(otter_graph_add_initializer(m->graph, b));
    char path[1024];
    snprintf(path, sizeof path, "%s", tu_tmp_path("packed_external.onnx")); /* tu_tmp_path's buffer is reused */
    /* a previous run's files out of the way: over an existing model, the save writes its data under a
     * fresh alternate name (the old model may still be read) and then drops the old data file */
    remove(path);
    remove(tu_tmp_path("packed_external.data"));
    otter_save_options o = {.external_threshold = 1, .external_file = "packed_external.data"};
    CHECK_OK(otter_model_save(m, path, &o));
    size_t data_size = 0;
    void *data = tu_read_file(tu_tmp_path("packed_external.data"), &data_size);
    /* after otter's 64-byte header: a at offset 64 (3 bytes), b 64-byte aligned at offset 128 (1 byte) */
    const uint8_t *d = data;
    CHECK(data && data_size == 129 && d[64] == 0x78 && d[65] == 0xf1 && d[66] == 0x03 && d[128] == 0x23);
    CHECK_OK(otter_model_load(&back, path));
    bool same = back && back->graph->n_initializers == 2 && otter_tensor_equal(back->graph->initializers[0], a) &&
                otter_tensor_equal(back->graph->initializers[1], b);
    printf("int4 [5] and uint2 [3] as external data: %zu-byte data file, read back %s\n", data_size,
           same ? "equal" : "DIFFERENT");
    CHECK(same);
    free(data);
    otter_model_free(back);
    otter_model_free(m);
}

/* otter_tensor_value, which printing uses: decoded values of the narrow types */
static void test_values(void) {
    const uint8_t f8[] = {0x38, 0xaa, 0x7f}, u4[] = {15};
    const int8_t i4[] = {-8};
    const uint16_t h[] = {0x3c00};
    otter_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    CHECK_OK(otter_tensor_from_data(&a, NULL, OTTER_DTYPE_FLOAT8E4M3FN, 1, (int64_t[]){3}, f8));
    CHECK_OK(otter_tensor_from_data(&b, NULL, OTTER_DTYPE_INT4, 1, (int64_t[]){1}, i4));
    CHECK_OK(otter_tensor_from_data(&c, NULL, OTTER_DTYPE_UINT4, 1, (int64_t[]){1}, u4));
    CHECK_OK(otter_tensor_from_data(&d, NULL, OTTER_DTYPE_BFLOAT16, 1, (int64_t[]){1}, h));
    CHECK(otter_tensor_value(a, 0) == 1.0 && otter_tensor_value(a, 1) == -0.3125 && isnan(otter_tensor_value(a, 2)));
    CHECK(otter_tensor_value(b, 0) == -8 && otter_tensor_value(c, 0) == 15 && otter_tensor_value(d, 0) == 0x1p-7);
    CHECK(isnan(otter_tensor_value(a, 3))); /* out of range */
    printf("otter_tensor_value: float8e4m3fn 0x38 0xaa 0x7f = %g %g %g, int4 %g, uint4 %g\n", otter_tensor_value(a, 0),
           otter_tensor_value(a, 1), otter_tensor_value(a, 2), otter_tensor_value(b, 0), otter_tensor_value(c, 0));
    otter_tensor_free(a);
    otter_tensor_free(b);
    otter_tensor_free(c);
    otter_tensor_free(d);
}

/* Names (ml_dtypes' lower case and ONNX's upper case), sizes in memory and bits in a TensorProto. */
static void test_names(void) {
    static const struct {
        otter_dtype t;
        const char *name, *onnx;
        int bits;
        bool narrow_float;
    } want[] = {
        {OTTER_DTYPE_FLOAT8E4M3FN, "float8e4m3fn", "FLOAT8E4M3FN", 8, true},
        {OTTER_DTYPE_FLOAT8E4M3FNUZ, "float8e4m3fnuz", "FLOAT8E4M3FNUZ", 8, true},
        {OTTER_DTYPE_FLOAT8E5M2, "float8e5m2", "FLOAT8E5M2", 8, true},
        {OTTER_DTYPE_FLOAT8E5M2FNUZ, "float8e5m2fnuz", "FLOAT8E5M2FNUZ", 8, true},
        {OTTER_DTYPE_UINT4, "uint4", "UINT4", 4, false},
        {OTTER_DTYPE_INT4, "int4", "INT4", 4, false},
        {OTTER_DTYPE_FLOAT4E2M1, "float4e2m1", "FLOAT4E2M1", 4, true},
        {OTTER_DTYPE_FLOAT8E8M0, "float8e8m0", "FLOAT8E8M0", 8, true},
        {OTTER_DTYPE_UINT2, "uint2", "UINT2", 2, false},
        {OTTER_DTYPE_INT2, "int2", "INT2", 2, false},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        otter_dtype t = want[i].t;
        if (strcmp(otter_dtype_name(t), want[i].name) != 0 || otter_dtype_from_name(want[i].name) != t ||
            otter_dtype_from_name(want[i].onnx) != t || otter_dtype_size(t) != 1 ||
            otter_dtype_bits(t) != want[i].bits || otter_dtype_is_narrow_float(t) != want[i].narrow_float ||
            otter_dtype_is_float(t))
            bad++;
    }
    printf("names, sizes and bits of the ten new types: %d mismatches\n", bad);
    CHECK(bad == 0 && otter_dtype_bits(OTTER_DTYPE_FLOAT) == 32 && !otter_dtype_is_narrow_float(OTTER_DTYPE_UINT8));
}

int main(void) {
    test_names();
    for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++) test_format(&SPECS[i]);
    test_e8m0();
    test_bf16();
    test_subbyte();
    test_pb();
    test_values();
    test_external();
    return tu_finish("test_float_formats");
}
