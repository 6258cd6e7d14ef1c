/* .npy reading and writing: files written by numpy (tests/data/npy, made by tools/make_npy_fixtures.py),
 * round trips of every dtype, and every kind of bad input. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static float half_to_float(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

/* Element i as a double. */
static double elem(const otter_tensor *t, int64_t i) {
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
        return ((const float *)t->data)[i];
    case OTTER_DTYPE_DOUBLE:
        return ((const double *)t->data)[i];
    case OTTER_DTYPE_FLOAT16:
        return half_to_float(((const uint16_t *)t->data)[i]);
    case OTTER_DTYPE_INT8:
        return ((const int8_t *)t->data)[i];
    case OTTER_DTYPE_INT16:
        return ((const int16_t *)t->data)[i];
    case OTTER_DTYPE_INT32:
        return ((const int32_t *)t->data)[i];
    case OTTER_DTYPE_INT64:
        return (double)((const int64_t *)t->data)[i];
    case OTTER_DTYPE_UINT8:
        return ((const uint8_t *)t->data)[i];
    case OTTER_DTYPE_UINT16:
        return ((const uint16_t *)t->data)[i];
    case OTTER_DTYPE_UINT32:
        return ((const uint32_t *)t->data)[i];
    case OTTER_DTYPE_UINT64:
        return (double)((const uint64_t *)t->data)[i];
    case OTTER_DTYPE_BOOL:
        return ((const uint8_t *)t->data)[i];
    default:
        return NAN;
    }
}

/* The value tools/make_npy_fixtures.py stores at flat index i. */
static double expected(otter_dtype dt, int64_t i) {
    if (otter_dtype_is_float(dt)) return (double)(i - 3) * 0.25;
    switch (dt) {
    case OTTER_DTYPE_INT8:
    case OTTER_DTYPE_INT16:
    case OTTER_DTYPE_INT32:
    case OTTER_DTYPE_INT64:
        return (double)(i - 3);
    case OTTER_DTYPE_BOOL:
        return i % 3 == 0;
    default:
        return (double)i;
    }
}

static int check_values(const char *label, const otter_tensor *t) {
    int64_t n = otter_tensor_numel(t), bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (elem(t, i) != expected(t->dtype, i)) bad++;
    printf("  %-22s %-8s rank %d numel %lld: %lld values differ from numpy's\n", label, otter_dtype_name(t->dtype),
           t->rank, (long long)n, (long long)bad);
    return bad == 0;
}

static const struct {
    const char *file;
    otter_dtype dtype;
} DTYPE_FILES[] = {
    {"f4", OTTER_DTYPE_FLOAT},  {"f8", OTTER_DTYPE_DOUBLE}, {"f2", OTTER_DTYPE_FLOAT16}, {"i1", OTTER_DTYPE_INT8},
    {"i2", OTTER_DTYPE_INT16},  {"i4", OTTER_DTYPE_INT32},  {"i8", OTTER_DTYPE_INT64},   {"u1", OTTER_DTYPE_UINT8},
    {"u2", OTTER_DTYPE_UINT16}, {"u4", OTTER_DTYPE_UINT32}, {"u8", OTTER_DTYPE_UINT64},  {"b1", OTTER_DTYPE_BOOL},
};

/* Every dtype file numpy wrote: values, then save and compare the bytes with numpy's file. */
static void test_numpy_files(void) {
    printf("files written by numpy:\n");
    char rel[256];
    for (size_t k = 0; k < sizeof DTYPE_FILES / sizeof DTYPE_FILES[0]; k++) {
        snprintf(rel, sizeof rel, "tests/data/npy/%s.npy", DTYPE_FILES[k].file);
        char path[4096];
        snprintf(path, sizeof path, "%s", tu_src_path(rel));
        otter_tensor *t = NULL;
        CHECK_OK(otter_tensor_load_npy(&t, path));
        if (!t) continue;
        CHECK(t->dtype == DTYPE_FILES[k].dtype);
        CHECK(t->rank == 2 && t->dims[0] == 2 && t->dims[1] == 3);
        CHECK(check_values(DTYPE_FILES[k].file, t));
        /* otter writes the same header layout as numpy 1.24: the files must be byte-identical */
        char out[4096];
        snprintf(out, sizeof out, "%s", tu_tmp_path(DTYPE_FILES[k].file));
        strcat(out, ".npy");
        CHECK_OK(otter_tensor_save_npy(t, out));
        size_t na = 0, nb = 0;
        void *a = tu_read_file(path, &na), *b = tu_read_file(out, &nb);
        CHECK(a && b && na == nb && memcmp(a, b, na) == 0);
        printf("  %-22s saved %zu bytes, numpy's file %zu bytes, %s\n", "", nb, na,
               a && b && na == nb && memcmp(a, b, na) == 0 ? "identical" : "DIFFERENT");
        free(a);
        free(b);
        otter_tensor *u = NULL;
        CHECK_OK(otter_tensor_load(&u, out)); /* by extension */
        CHECK(u && otter_tensor_equal(t, u));
        otter_tensor_free(u);
        otter_tensor_free(t);
    }

    struct {
        const char *file;
        otter_dtype dtype;
        int rank;
        int64_t dims[5];
    } shapes[] = {
        {"scalar_f8", OTTER_DTYPE_DOUBLE, 0, {0}},     {"empty_f4", OTTER_DTYPE_FLOAT, 2, {0, 4}},
        {"vec_i8", OTTER_DTYPE_INT64, 1, {5}},         {"rank5_u1", OTTER_DTYPE_UINT8, 5, {1, 2, 1, 3, 2}},
        {"v2_f4", OTTER_DTYPE_FLOAT, 2, {2, 3}},       {"v3_f4", OTTER_DTYPE_FLOAT, 2, {2, 3}},
        {"fortran_vec_f4", OTTER_DTYPE_FLOAT, 1, {4}},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        snprintf(rel, sizeof rel, "tests/data/npy/%s.npy", shapes[k].file);
        otter_tensor *t = NULL;
        CHECK_OK(otter_tensor_load_npy(&t, tu_src_path(rel)));
        if (!t) continue;
        CHECK(t->dtype == shapes[k].dtype);
        CHECK(t->rank == shapes[k].rank);
        for (int i = 0; i < t->rank && i < 5; i++) CHECK(t->dims[i] == shapes[k].dims[i]);
        if (shapes[k].rank == 0) {
            CHECK(elem(t, 0) == 1.5);
            printf("  %-22s float64  rank 0: value %g (numpy: 1.5)\n", shapes[k].file, elem(t, 0));
        } else {
            CHECK(check_values(shapes[k].file, t));
        }
        otter_tensor_free(t);
    }
}

/* Tensors made in memory: every dtype otter can write, several ranks, through a file and back. */
static void test_round_trip(void) {
    printf("round trips through otter_tensor_save_npy / otter_tensor_load_npy:\n");
    const otter_dtype dts[] = {OTTER_DTYPE_FLOAT,     OTTER_DTYPE_DOUBLE,    OTTER_DTYPE_FLOAT16, OTTER_DTYPE_INT8,
                               OTTER_DTYPE_INT16,     OTTER_DTYPE_INT32,     OTTER_DTYPE_INT64,   OTTER_DTYPE_UINT8,
                               OTTER_DTYPE_UINT16,    OTTER_DTYPE_UINT32,    OTTER_DTYPE_UINT64,  OTTER_DTYPE_BOOL,
                               OTTER_DTYPE_COMPLEX64, OTTER_DTYPE_COMPLEX128};
    const int64_t dims16[16] = {1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1};
    const struct {
        int rank;
        int64_t dims[16];
    } shapes[] = {{0, {0}}, {1, {7}}, {2, {3, 5}}, {3, {0, 2, 2}}, {16, {0}}};
    int n_ok = 0, n = 0;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int64_t *dims = shapes[s].rank == 16 ? dims16 : shapes[s].dims;
            otter_tensor *t = NULL;
            CHECK_OK(otter_tensor_create(&t, "x", dts[d], shapes[s].rank, dims));
            if (!t) continue;
            uint8_t *p = t->data;
            size_t nb = otter_tensor_nbytes(t);
            for (size_t i = 0; i < nb; i++) p[i] = (uint8_t)(i * 37 + d);
            if (dts[d] == OTTER_DTYPE_BOOL)
                for (size_t i = 0; i < nb; i++) p[i] &= 1;
            const char *path = tu_tmp_path("rt.npy");
            otter_tensor *u = NULL;
            CHECK_OK(otter_tensor_save_npy(t, path));
            CHECK_OK(otter_tensor_load_npy(&u, path));
            bool eq = u && otter_tensor_equal(t, u);
            CHECK(eq);
            n++;
            n_ok += eq;
            otter_tensor_free(u);
            otter_tensor_free(t);
        }
    }
    printf("  %d of %d (dtype, shape) pairs read back bitwise equal\n", n_ok, n);

    /* A header longer than 65535 bytes is not possible at rank <= 16, so format 2.0 is only read;
     * check that writing stays 1.0 with a 64-byte aligned data offset. */
    otter_tensor *t = NULL;
    int64_t big[16];
    for (int i = 0; i < 16; i++) big[i] = 1;
    CHECK_OK(otter_tensor_create(&t, NULL, OTTER_DTYPE_FLOAT, 16, big));
    const char *path = tu_tmp_path("rank16.npy");
    CHECK_OK(otter_tensor_save_npy(t, path));
    size_t sz = 0;
    uint8_t *raw = tu_read_file(path, &sz);
    CHECK(raw && sz > 10 && raw[6] == 1 && raw[7] == 0);
    size_t hl = raw ? (size_t)raw[8] | (size_t)raw[9] << 8 : 0;
    CHECK((10 + hl) % 64 == 0 && raw[10 + hl - 1] == '\n' && sz == 10 + hl + 4);
    printf("  rank-16 file: version %u.%u, data offset %zu (multiple of 64), %zu bytes\n", raw ? raw[6] : 0,
           raw ? raw[7] : 0, 10 + hl, sz);
    free(raw);
    otter_tensor_free(t);

    /* Element types .npy cannot hold. */
    otter_bytes strs[2] = {{"a", 1}, {"bc", 2}};
    int64_t two = 2;
    CHECK_OK(otter_tensor_from_data(&t, "names", OTTER_DTYPE_STRING, 1, &two, strs));
    CHECK_STATUS(otter_tensor_save_npy(t, tu_tmp_path("str.npy")), OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(otter_last_error(), "string") && strstr(otter_last_error(), "names"));
    printf("  string tensor: %s\n", otter_last_error());
    otter_tensor_free(t);
    CHECK_OK(otter_tensor_create(&t, "bf", OTTER_DTYPE_BFLOAT16, 1, &two));
    CHECK_STATUS(otter_tensor_save_npy(t, tu_tmp_path("bf.npy")), OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(otter_last_error(), "bfloat16") != NULL);
    /* a folder that does not exist */
    CHECK_STATUS(otter_tensor_save_npy(t, "/nonexistent-otter-dir/x.npy"), OTTER_ERR_UNSUPPORTED);
    otter_tensor_free(t);
    CHECK_OK(otter_tensor_create(&t, "f", OTTER_DTYPE_FLOAT, 1, &two));
    CHECK_STATUS(otter_tensor_save_npy(t, "/nonexistent-otter-dir/x.npy"), OTTER_ERR_IO);
    CHECK(strstr(otter_last_error(), "/nonexistent-otter-dir/x.npy") != NULL);
    CHECK_STATUS(otter_tensor_save(t, tu_tmp_path("x.txt")), OTTER_ERR_ARGUMENT);
    CHECK(strstr(otter_last_error(), "x.txt") != NULL);
    otter_tensor_free(t);
    CHECK_STATUS(otter_tensor_load_npy(&t, tu_tmp_path("does-not-exist.npy")), OTTER_ERR_NOT_FOUND);
    CHECK(t == NULL && strstr(otter_last_error(), "does-not-exist.npy"));
}

/* Build a .npy image: magic, version, header (padded to 64 with '\n' unless raw), data. */
static size_t make_npy(uint8_t *buf, int major, const char *header, const void *data, size_t n) {
    size_t pre = major == 1 ? 10 : 12, hl = strlen(header);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (uint8_t)hl;
        buf[9] = (uint8_t)(hl >> 8);
    } else {
        for (int i = 0; i < 4; i++) buf[8 + i] = (uint8_t)(hl >> (8 * i));
    }
    memcpy(buf + pre, header, hl);
    if (n) memcpy(buf + pre + hl, data, n);
    return pre + hl + n;
}

/* Expect failure with `want` and a message holding `needle`. */
static void expect_bad(const char *label, const void *img, size_t n, otter_status want, const char *needle) {
    otter_tensor *t = (otter_tensor *)1;
    otter_status s = otter_tensor_load_npy_from_memory(&t, img, n);
    bool ok = s == want && t == NULL && strstr(otter_last_error(), needle) != NULL;
    CHECK(ok);
    printf("  %-28s -> %s: %s%s\n", label, otter_status_name(s), otter_last_error(), ok ? "" : "   <-- UNEXPECTED");
    if (s == OTTER_OK) otter_tensor_free(t);
}

static void expect_good(const char *label, const void *img, size_t n, int rank, const int64_t *dims) {
    otter_tensor *t = NULL;
    otter_status s = otter_tensor_load_npy_from_memory(&t, img, n);
    bool ok = s == OTTER_OK && t && t->rank == rank;
    for (int i = 0; ok && i < rank; i++) ok = t->dims[i] == dims[i];
    CHECK(ok);
    printf("  %-28s -> %s rank %d%s\n", label, s == OTTER_OK ? "ok" : otter_last_error(), t ? t->rank : -1,
           ok ? "" : "   <-- UNEXPECTED");
    otter_tensor_free(t);
}

static void test_headers(void) {
    printf("header parsing (tolerated variants):\n");
    static uint8_t buf[1 << 17];
    float data[6] = {1, 2, 3, 4, 5, 6};
    int64_t d23[2] = {2, 3}, d6[1] = {6};
    size_t n;
    n = make_npy(buf, 1, "{\"shape\": (2, 3), \"fortran_order\": False, \"descr\": \"<f4\"}\n", data, 24);
    expect_good("double quotes, other order", buf, n, 2, d23);
    n = make_npy(buf, 1, "{ 'descr' :'<f4','fortran_order':False,'shape':( 2 ,3 , ) ,}   \n", data, 24);
    expect_good("odd spacing, trailing commas", buf, n, 2, d23);
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6L,)}", data, 24);
    expect_good("python 2 long, no newline", buf, n, 1, d6);
    n = make_npy(buf, 1, "{'descr': 'f4', 'fortran_order': False, 'shape': (6,)}\n", data, 24);
    expect_good("descr without byte order", buf, n, 1, d6);
    n = make_npy(buf, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 24);
    expect_good("format 2.0", buf, n, 2, d23);
    n = make_npy(buf, 1, "{'descr': '>u1', 'fortran_order': False, 'shape': (6,), }\n", data, 6);
    expect_good("'>u1' (one byte: no order)", buf, n, 1, d6);

    printf("bad input (each must fail and say why):\n");
    expect_bad("empty", "", 0, OTTER_ERR_INVALID, "truncated");
    expect_bad("bad magic", "\x93NUMPX\x01\x00\x00\x00", 10, OTTER_ERR_INVALID, "bad magic");
    expect_bad("text file", "hello world, not numpy", 22, OTTER_ERR_INVALID, "not a npy file");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 24);
    buf[6] = 4;
    expect_bad("version 4.0", buf, n, OTTER_ERR_UNSUPPORTED, "version 4.0");
    buf[6] = 1;
    buf[7] = 1;
    expect_bad("version 1.1", buf, n, OTTER_ERR_UNSUPPORTED, "version 1.1");
    buf[7] = 0;
    buf[8] = 0xff;
    buf[9] = 0x7f;
    expect_bad("header length past the end", buf, n, OTTER_ERR_INVALID, "header of 32767 bytes");

    const struct {
        const char *label, *header, *needle;
        otter_status want;
    } bad[] = {
        {"not a dict", "['descr', '<f4']\n", "expected '{'", OTTER_ERR_INVALID},
        {"missing shape", "{'descr': '<f4', 'fortran_order': False}\n", "missing key 'shape'", OTTER_ERR_INVALID},
        {"missing descr", "{'fortran_order': False, 'shape': (6,)}\n", "missing key 'descr'", OTTER_ERR_INVALID},
        {"unknown key", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}\n", "unexpected key 'x'",
         OTTER_ERR_INVALID},
        {"duplicate key", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}\n",
         "duplicate key 'descr'", OTTER_ERR_INVALID},
        {"unterminated string", "{'descr: '<f4', 'fortran_order': False, 'shape': (6,)}\n", "expected ':'",
         OTTER_ERR_INVALID},
        {"fortran_order not bool", "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}\n", "True or False",
         OTTER_ERR_INVALID},
        {"shape not a tuple", "{'descr': '<f4', 'fortran_order': False, 'shape': [6]}\n", "expected a tuple",
         OTTER_ERR_INVALID},
        {"shape (6) not a tuple", "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}\n", "trailing comma",
         OTTER_ERR_INVALID},
        {"negative dim", "{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}\n", "negative dimension",
         OTTER_ERR_INVALID},
        {"dim not a number", "{'descr': '<f4', 'fortran_order': False, 'shape': (six,)}\n", "expected an integer",
         OTTER_ERR_INVALID},
        {"dim over int64", "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,)}\n",
         "does not fit in int64", OTTER_ERR_INVALID},
        {"shape product overflows", "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2)}\n",
         "overflows", OTTER_ERR_INVALID},
        {"bytes overflow", "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}\n", "overflows",
         OTTER_ERR_INVALID},
        {"huge, little data", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000, 1000)}\n",
         "should hold 4000000000000 bytes", OTTER_ERR_INVALID},
        {"rank 17", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,6)}\n",
         "more than 16 dimensions", OTTER_ERR_UNSUPPORTED},
        {"big-endian", "{'descr': '>f4', 'fortran_order': False, 'shape': (6,)}\n", "big-endian",
         OTTER_ERR_UNSUPPORTED},
        {"unicode dtype", "{'descr': '<U3', 'fortran_order': False, 'shape': (2,)}\n", "'<U3' is not supported",
         OTTER_ERR_UNSUPPORTED},
        {"object dtype", "{'descr': '|O', 'fortran_order': False, 'shape': (3,)}\n", "'|O' is not supported",
         OTTER_ERR_UNSUPPORTED},
        {"structured dtype", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}\n", "structured",
         OTTER_ERR_UNSUPPORTED},
        {"fortran order", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}\n", "Fortran order",
         OTTER_ERR_UNSUPPORTED},
        {"text after dict", "{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x\n", "after the dict",
         OTTER_ERR_INVALID},
        {"NUL in header", "{'descr': '<f4',\0 'fortran_order': False, 'shape': (6,)}\n", "header", OTTER_ERR_INVALID},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        n = make_npy(buf, 1, bad[k].header, data, 24);
        if (k == sizeof bad / sizeof bad[0] - 1) { /* make_npy used strlen: restore the real header with its NUL */
            const char h[] = "{'descr': '<f4',\0 'fortran_order': False, 'shape': (6,)}\n";
            n = make_npy(buf, 1, "{'descr': '<f4',X 'fortran_order': False, 'shape': (6,)}\n", data, 24);
            memcpy(buf + 10, h, sizeof h - 1);
        }
        expect_bad(bad[k].label, buf, n, bad[k].want, bad[k].needle);
    }

    /* Data length must match exactly. */
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 20);
    expect_bad("data 4 bytes short", buf, n, OTTER_ERR_INVALID,
               "should hold 24 bytes (6 elements of 4 bytes), file has 20");
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 24);
    buf[n++] = 0;
    expect_bad("one trailing byte", buf, n, OTTER_ERR_INVALID, "25 bytes of data");

    /* Every prefix of a real file fails cleanly; the whole file loads. */
    size_t fsz = 0;
    uint8_t *file = tu_read_file(tu_src_path("tests/data/npy/f8.npy"), &fsz);
    CHECK(file != NULL);
    size_t failed = 0, mentioned = 0;
    for (size_t len = 0; file && len < fsz; len++) {
        uint8_t *copy = malloc(len ? len : 1); /* exact size so ASan sees any over-read */
        memcpy(copy, file, len);
        otter_tensor *t = NULL;
        otter_status s = otter_tensor_load_npy_from_memory(&t, copy, len);
        failed += s != OTTER_OK && t == NULL;
        mentioned +=
            strstr(otter_last_error(), "truncated") != NULL || strstr(otter_last_error(), "npy header") != NULL;
        if (s == OTTER_OK) otter_tensor_free(t);
        free(copy);
    }
    CHECK(failed == fsz && mentioned == fsz);
    printf("  every prefix of f8.npy (%zu lengths): %zu failed, %zu said 'truncated' or named the header problem\n",
           fsz, failed, mentioned);
    free(file);

    /* numpy's own refused files. */
    otter_tensor *t = NULL;
    CHECK_STATUS(otter_tensor_load_npy(&t, tu_src_path("tests/data/npy/bigendian_f4.npy")), OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(otter_last_error(), "bigendian_f4.npy") && strstr(otter_last_error(), "big-endian"));
    printf("  numpy '>f4' file: %s\n", otter_last_error());
    CHECK_STATUS(otter_tensor_load_npy(&t, tu_src_path("tests/data/npy/fortran_f4.npy")), OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(otter_last_error(), "fortran_f4.npy") && strstr(otter_last_error(), "Fortran order"));
    printf("  numpy Fortran-order file: %s\n", otter_last_error());
}

int main(void) {
    test_numpy_files();
    test_round_trip();
    test_headers();
    return tu_finish("test_npy");
}
