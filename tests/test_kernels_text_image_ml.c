/* Checks of runtime/ops/strings.c, image_decoder.c and ml.c beyond the ONNX 1.23 suite, which has
 * one or two happy-path cases per operator:
 *   - StringNormalizer: Unicode case changes and case-insensitive stopwords beyond ASCII.
 *   - StringSplit: Python's str.split corner cases (empty strings, a multi-byte delimiter,
 *     maxsplit 0, the remainder after maxsplit keeping its trailing whitespace);
 *     StringConcat broadcasting both ways; RegexFullMatch anchoring at both ends (an alternation
 *     whose first branch matches a prefix), UTF-8 subjects, invalid UTF-8, a bad pattern.
 *   - ImageDecoder: PNG and JPEG streams made here with libpng / libjpeg round-trip (PNG exactly,
 *     alpha dropped; JPEG at quality 100 within a few levels); BMP (24-bit bottom-up, 8-bit
 *     palette, 32-bit bitfields) and PNM (P1, P3, P5 16-bit) pixels against hand-written values;
 *     BGR and Grayscale (Pillow's formula); truncated, corrupt, unknown and oversized streams are
 *     errors naming the node, with no allocation of the claimed size.
 *   - TreeEnsemble: AVERAGE / MIN / MAX, NaN with missing_value_tracks_true, LOGISTIC; a cycle and
 *     out-of-range indices are errors. TreeEnsembleRegressor / Classifier (the legacy encoding:
 *     trees listed out of id order, several votes per leaf, base_values, the binary classifier's
 *     complement column, string labels); a vote on an interior node is an error.
 *     LabelEncoder: the last duplicate key wins, NaN keys match NaN, int64 -> string with
 *     default_string, two keys_* attributes are an error. LabelEncoder-1 (classes_strings) both
 *     ways, with the defaults for unknown strings and out-of-range indices.
 *     ArrayFeatureExtractor on strings and rank 1; an index out of range is an error.
 *     Binarizer on int32.
 *   - Every kernel above fails cleanly (OTTER_ERR_NOMEM, nothing leaked) at each of its allocations. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* after stdio.h and stddef.h, which jpeglib.h needs */
#include <jpeglib.h>
#include <png.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "testutil.h"

typedef void (*attr_fn)(otter_node *n, const void *arg);

static const char *const IN[] = {"i0", "i1"}, *const OUT[] = {"o0", "o1"};

/* A model of one node "the_node" of (domain, op) at opset, inputs typed like in. */
static otter_status build(const char *domain, const char *op, int opset, size_t n_in, const otter_tensor *const *in,
                          size_t n_out, attr_fn attrs, const void *arg, otter_model **out) {
    otter_model *m = NULL;
    otter_status s = otter_model_create(&m, "g", domain ? 21 : opset);
    if (!s && domain) s = otter_model_set_opset(m, domain, opset);
    otter_node *n = NULL;
    if (!s) s = otter_node_create(&n, op, "the_node", n_in, IN, n_out, OUT);
    if (!s && domain) s = otter_node_set_domain(n, domain);
    if (!s && attrs) attrs(n, arg);
    if (!s)
        s = otter_graph_add_node(m->graph, n);
    else
        otter_node_free(n);
    for (size_t k = 0; !s && k < n_in; k++)
        s = otter_graph_add_input(m->graph, IN[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL);
    for (size_t k = 0; !s && k < n_out; k++)
        s = otter_graph_add_output(m->graph, OUT[k], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
    if (s) otter_model_free(m);
    *out = s ? NULL : m;
    return s;
}

/* A session over m run once on in; out[0..n_out) are new tensors. */
static otter_status run_model(const otter_model *m, size_t n_in, const otter_tensor *const *in, size_t n_out,
                              otter_tensor **out) {
    otter_session *sess = NULL;
    otter_session_options o = {.n_threads = 1};
    otter_status s = otter_session_create(&sess, m, &o);
    for (size_t k = 0; k < n_out; k++) out[k] = NULL;
    if (!s) s = otter_session_run(sess, n_in, IN, in, n_out, OUT, out);
    otter_session_free(sess);
    return s;
}

/* Run one node "the_node" of (domain, op) at opset; out[0..n_out) are new tensors. */
static otter_status run(const char *domain, const char *op, int opset, size_t n_in, const otter_tensor *const *in,
                        size_t n_out, attr_fn attrs, const void *arg, otter_tensor **out) {
    otter_model *m = NULL;
    otter_status s = build(domain, op, opset, n_in, in, n_out, attrs, arg, &m);
    for (size_t k = 0; s && k < n_out; k++) out[k] = NULL;
    if (!s) s = run_model(m, n_in, in, n_out, out);
    otter_model_free(m);
    return s;
}

static otter_tensor *strings(int rank, const int64_t *dims, const char *const *s) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    otter_bytes b[16];
    for (int64_t i = 0; i < n; i++) b[i] = (otter_bytes){(char *)s[i], strlen(s[i])};
    otter_tensor *t = NULL;
    otter_tensor_from_data(&t, NULL, OTTER_DTYPE_STRING, rank, dims, b);
    return t;
}

static bool str_is(const otter_tensor *t, int64_t i, const char *want) {
    const otter_bytes *b = (const otter_bytes *)t->data + i;
    return b->len == strlen(want) && memcmp(b->data, want, b->len) == 0;
}

static bool error_mentions(const char *a, const char *b) {
    const char *e = otter_last_error();
    return strstr(e, "the_node") && strstr(e, a) && (!b || strstr(e, b));
}

/* ---- strings ---- */

typedef struct split_args {
    const char *delimiter; /* NULL: unset */
    int64_t maxsplit;      /* -1: unset */
} split_args;

static void split_attrs(otter_node *n, const void *arg) {
    const split_args *a = arg;
    if (a->delimiter) otter_node_set_attr_string(n, "delimiter", a->delimiter);
    if (a->maxsplit != -1) otter_node_set_attr_int(n, "maxsplit", a->maxsplit);
}

/* Split the strings x with the arguments; expect width substrings per row, as listed in want
 * ("|"-separated per input element) and the counts. */
static void check_split(const char *const *x, int64_t n, split_args a, int64_t width, const char *const *want,
                        const int64_t *counts) {
    otter_tensor *in = strings(1, &n, x), *out[2];
    otter_status s = run(NULL, "StringSplit", 20, 1, (const otter_tensor *const[]){in}, 2, split_attrs, &a, out);
    CHECK_OK(s);
    if (!s) {
        CHECK(out[0]->rank == 2 && out[0]->dims[0] == n && out[0]->dims[1] == width);
        for (int64_t i = 0; i < n * width && out[0]->dims[1] == width; i++) CHECK(str_is(out[0], i, want[i]));
        for (int64_t i = 0; i < n; i++) CHECK(((const int64_t *)out[1]->data)[i] == counts[i]);
        otter_tensor_free(out[0]);
        otter_tensor_free(out[1]);
    }
    otter_tensor_free(in);
}

typedef struct normalizer_args {
    const char *action;
    int64_t case_sensitive;
    const char *stopword;
} normalizer_args;

static void normalizer_attrs(otter_node *n, const void *arg) {
    const normalizer_args *a = arg;
    otter_node_set_attr_string(n, "case_change_action", a->action);
    otter_node_set_attr_int(n, "is_case_sensitive", a->case_sensitive);
    otter_node_set_attr_strings(n, "stopwords", 1, &a->stopword);
}

/* StringNormalizer changes case per Unicode character (not per byte), keeps invalid UTF-8 bytes,
 * and matches stopwords case-insensitively beyond ASCII. */
static void test_string_normalizer(void) {
    otter_tensor *x = strings(1, (const int64_t[]){4},
                              (const char *[]){"\xc3\x84pfel Stra\xc3\x9f"
                                               "e",
                                               "\xc3\xa9t\xc3\xa9", "ok\xff", "\xc3\x89T\xc3\x89"}),
                 *y = NULL;
    CHECK_OK(run(NULL, "StringNormalizer", 10, 1, (const otter_tensor *const[]){x}, 1, normalizer_attrs,
                 &(normalizer_args){"UPPER", 0, "\xc3\x89t\xc3\xa9"}, &y));
    if (y) /* both spellings of "ete" go; sharp s has no one-character upper case */
        CHECK(y->dims[0] == 2 &&
              str_is(y, 0,
                     "\xc3\x84PFEL STRA\xc3\x9f"
                     "E") &&
              str_is(y, 1, "OK\xff"));
    otter_tensor_free(y);
    CHECK_OK(run(NULL, "StringNormalizer", 10, 1, (const otter_tensor *const[]){x}, 1, normalizer_attrs,
                 &(normalizer_args){"LOWER", 1, "\xc3\x89t\xc3\xa9"}, &y));
    if (y) /* case-sensitive: no element equals the stopword */
        CHECK(y->dims[0] == 4 &&
              str_is(y, 0,
                     "\xc3\xa4pfel stra\xc3\x9f"
                     "e") &&
              str_is(y, 3, "\xc3\xa9t\xc3\xa9"));
    otter_tensor_free(y);
    otter_tensor_free(x);
}

static void pattern_attr(otter_node *n, const void *arg) { otter_node_set_attr_string(n, "pattern", arg); }

static void test_strings(void) {
    /* Python: "".split("-") == [""], "".split() == [], "a--b".split("--") == ["a", "b"] */
    check_split((const char *[]){"", "a--b--", "x"}, 3, (split_args){"--", -1}, 3,
                (const char *[]){"", "", "", "a", "b", "", "x", "", ""}, (const int64_t[]){1, 3, 1});
    check_split((const char *[]){"", "  "}, 2, (split_args){NULL, -1}, 0, NULL, (const int64_t[]){0, 0});
    /* maxsplit 0 keeps the string; after maxsplit the whitespace remainder keeps its trailing spaces */
    check_split((const char *[]){"a-b"}, 1, (split_args){"-", 0}, 1, (const char *[]){"a-b"}, (const int64_t[]){1});
    check_split((const char *[]){" a b  c  "}, 1, (split_args){"", 1}, 2, (const char *[]){"a", "b  c  "},
                (const int64_t[]){2});
    otter_tensor *x = strings(1, (const int64_t[]){1}, (const char *[]){"a"}), *out[2];
    CHECK_STATUS(
        run(NULL, "StringSplit", 20, 1, (const otter_tensor *const[]){x}, 2, split_attrs, &(split_args){"-", -5}, out),
        OTTER_ERR_INVALID);
    CHECK(error_mentions("maxsplit", NULL));

    /* StringConcat: [2, 1] with [3] broadcasts to [2, 3] */
    otter_tensor *a = strings(2, (const int64_t[]){2, 1}, (const char *[]){"x", "yy"});
    otter_tensor *b = strings(1, (const int64_t[]){3}, (const char *[]){"1", "", "\xc3\xa9"});
    CHECK_OK(run(NULL, "StringConcat", 20, 2, (const otter_tensor *const[]){a, b}, 1, NULL, NULL, out));
    if (out[0]) {
        const char *want[] = {"x1", "x", "x\xc3\xa9", "yy1", "yy", "yy\xc3\xa9"};
        CHECK(out[0]->rank == 2 && out[0]->dims[0] == 2 && out[0]->dims[1] == 3);
        for (int i = 0; i < 6; i++) CHECK(str_is(out[0], i, want[i]));
        otter_tensor_free(out[0]);
    }
    otter_tensor *f = NULL;
    otter_tensor_create(&f, NULL, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3});
    CHECK_STATUS(run(NULL, "StringConcat", 20, 2, (const otter_tensor *const[]){a, f}, 1, NULL, NULL, out),
                 OTTER_ERR_UNSUPPORTED);
    otter_tensor_free(a);
    otter_tensor_free(b);
    otter_tensor_free(f);

    /* RegexFullMatch: the whole subject must match; "a|ab" must try its second branch on "ab" */
    struct {
        const char *pattern, *subject;
        bool want;
    } cases[] = {{"a|ab", "ab", true},
                 {"b", "abc", false},
                 {"a.c",
                  "a\xc3\xa9"
                  "c",
                  true},
                 {"\\d+", "123", true},
                 {"\\d+", "12a", false},
                 {"", "", true},
                 {"a.c",
                  "a\xff"
                  "c",
                  false},
                 {"(?i)hello", "HeLLo", true}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        otter_tensor *t = strings(1, (const int64_t[]){1}, &cases[k].subject);
        CHECK_OK(run(NULL, "RegexFullMatch", 20, 1, (const otter_tensor *const[]){t}, 1, pattern_attr, cases[k].pattern,
                     out));
        if (out[0]) CHECK(out[0]->dtype == OTTER_DTYPE_BOOL && *(const uint8_t *)out[0]->data == cases[k].want);
        otter_tensor_free(out[0]);
        otter_tensor_free(t);
    }
    CHECK_STATUS(run(NULL, "RegexFullMatch", 20, 1, (const otter_tensor *const[]){x}, 1, pattern_attr, "a(", out),
                 OTTER_ERR_INVALID);
    CHECK(error_mentions("pattern", "missing closing parenthesis"));
    otter_tensor_free(x);
}

/* ---- ImageDecoder ---- */

static void format_attr(otter_node *n, const void *arg) {
    if (arg) otter_node_set_attr_string(n, "pixel_format", arg);
}

/* Decode the n bytes with pixel_format (NULL: default RGB); the status, *y the image. */
static otter_status decode(const void *bytes, size_t n, const char *format, otter_tensor **y) {
    otter_tensor *x = NULL;
    int64_t len = (int64_t)n;
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_UINT8, 1, &len, bytes);
    otter_status s = run(NULL, "ImageDecoder", 20, 1, (const otter_tensor *const[]){x}, 1, format_attr, format, y);
    otter_tensor_free(x);
    return s;
}

/* Decoded RGB of (bytes, n) equals want [h][w][3] within tol. */
static void check_decoded(const char *what, const void *bytes, size_t n, int64_t h, int64_t w, const uint8_t *want,
                          int tol) {
    otter_tensor *y;
    otter_status s = decode(bytes, n, NULL, &y);
    CHECK_OK(s);
    if (s) return;
    CHECK(y->rank == 3 && y->dims[0] == h && y->dims[1] == w && y->dims[2] == 3);
    int worst = 0;
    for (int64_t i = 0; i < h * w * 3 && y->dims[0] == h && y->dims[1] == w; i++) {
        int d = abs((int)((const uint8_t *)y->data)[i] - want[i]);
        worst = d > worst ? d : worst;
    }
    printf("%s: %lldx%lld, worst pixel difference %d (allowed %d)\n", what, (long long)h, (long long)w, worst, tol);
    CHECK(worst <= tol);
    otter_tensor_free(y);
}

static void check_fails(const char *what, const void *bytes, size_t n, const char *reason) {
    otter_tensor *y = NULL;
    CHECK_STATUS(decode(bytes, n, NULL, &y), OTTER_ERR_INVALID);
    bool named = error_mentions(reason, NULL);
    if (!named) fprintf(stderr, "%s: error '%s' lacks '%s'\n", what, otter_last_error(), reason);
    CHECK(named);
    otter_tensor_free(y);
}

static void test_png_jpeg(void) {
    enum { W = 16, H = 8 };
    uint8_t rgba[H * W * 4], rgb[H * W * 3];
    for (int i = 0; i < H * W; i++) { /* smooth gradients: JPEG keeps them within a few levels */
        int x = i % W, y = i / W;
        rgb[3 * i] = rgba[4 * i] = (uint8_t)(x * 15);
        rgb[3 * i + 1] = rgba[4 * i + 1] = (uint8_t)(y * 30);
        rgb[3 * i + 2] = rgba[4 * i + 2] = (uint8_t)(200 - x * 5);
        rgba[4 * i + 3] = (uint8_t)(i * 7); /* alpha: dropped, not composited */
    }
    png_image img = {.version = PNG_IMAGE_VERSION, .width = W, .height = H, .format = PNG_FORMAT_RGBA};
    png_alloc_size_t png_n = 0;
    CHECK(png_image_write_to_memory(&img, NULL, &png_n, 0, rgba, 0, NULL));
    uint8_t *png = malloc(png_n);
    CHECK(png && png_image_write_to_memory(&img, png, &png_n, 0, rgba, 0, NULL));
    check_decoded("PNG RGBA", png, png_n, H, W, rgb, 0);
    check_fails("PNG truncated", png, png_n / 2, "PNG");
    png[20] ^= 0x40; /* inside IHDR: its CRC no longer matches */
    check_fails("PNG bad CRC", png, png_n, "CRC");
    free(png);

    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    unsigned char *jpg = NULL;
    unsigned long jpg_n = 0;
    jpeg_mem_dest(&c, &jpg, &jpg_n);
    c.image_width = W;
    c.image_height = H;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 1; /* 4:4:4: no chroma subsampling error */
    jpeg_start_compress(&c, TRUE);
    for (int y = 0; y < H; y++) {
        JSAMPROW row = rgb + y * W * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    check_decoded("JPEG q100 4:4:4", jpg, jpg_n, H, W, rgb, 3);
    check_fails("JPEG truncated", jpg, jpg_n - 40, "Premature end");
    check_fails("JPEG header only", jpg, 20, "JPEG");
    free(jpg);
}

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v & 0xffff), put16(p + 2, v >> 16); }

/* A BMP with a 40-byte header: w x h (negative: top-down), bpp, compression, n_colors palette
 * entries (BGRx) and rows; returns its size. */
static size_t make_bmp(uint8_t *out, int32_t w, int32_t h, int bpp, int compression, const uint8_t *extra,
                       size_t n_extra, const uint8_t *rows, size_t n_rows, uint32_t n_colors) {
    memset(out, 0, 54);
    out[0] = 'B', out[1] = 'M';
    put32(out + 10, (uint32_t)(54 + n_extra));
    put32(out + 14, 40);
    put32(out + 18, (uint32_t)w);
    put32(out + 22, (uint32_t)h);
    put16(out + 26, 1);
    put16(out + 28, (uint32_t)bpp);
    put32(out + 30, (uint32_t)compression);
    put32(out + 46, n_colors);
    if (n_extra) memcpy(out + 54, extra, n_extra);
    memcpy(out + 54 + n_extra, rows, n_rows);
    put32(out + 2, (uint32_t)(54 + n_extra + n_rows));
    return 54 + n_extra + n_rows;
}

static void test_bmp_pnm(void) {
    uint8_t buf[512];
    /* 24-bit, 2x2, bottom-up: the first row in the file is the image's last; rows pad to 4 bytes */
    const uint8_t rows24[] = {1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0};
    const uint8_t want24[] = {9, 8, 7, 12, 11, 10, 3, 2, 1, 6, 5, 4};
    size_t n = make_bmp(buf, 2, 2, 24, 0, NULL, 0, rows24, sizeof rows24, 0);
    check_decoded("BMP 24-bit bottom-up", buf, n, 2, 2, want24, 0);
    check_fails("BMP truncated rows", buf, n - 5, "truncated");
    /* 8-bit palette, top-down 3x1 */
    const uint8_t palette[] = {10, 20, 30, 0, 40, 50, 60, 0};
    const uint8_t rows8[] = {1, 0, 1, 0};
    const uint8_t want8[] = {60, 50, 40, 30, 20, 10, 60, 50, 40};
    n = make_bmp(buf, 3, -1, 8, 0, palette, sizeof palette, rows8, sizeof rows8, 2);
    check_decoded("BMP 8-bit palette top-down", buf, n, 1, 3, want8, 0);
    /* 32-bit BI_BITFIELDS with masks R 0xff0000, G 0xff00, B 0xff */
    uint8_t masks[12], px[4];
    put32(masks, 0xff0000), put32(masks + 4, 0xff00), put32(masks + 8, 0xff);
    put32(px, 0x00112233);
    n = make_bmp(buf, 1, 1, 32, 3, masks, sizeof masks, px, sizeof px, 0);
    check_decoded("BMP 32-bit bitfields", buf, n, 1, 1, (const uint8_t[]){0x11, 0x22, 0x33}, 0);
    n = make_bmp(buf, 1, 1, 8, 1, NULL, 0, px, sizeof px, 0);
    check_fails("BMP RLE", buf, n, "compressed BMP");

    const char p3[] = "P3\n# comment\n2 1\n15\n15 0 0  0 15 7\n";
    check_decoded("PNM P3 maxval 15", p3, strlen(p3), 1, 2, (const uint8_t[]){255, 0, 0, 0, 255, 119}, 0);
    const char p1[] = "P1 3 1 101";
    check_decoded("PNM P1", p1, strlen(p1), 1, 3, (const uint8_t[]){0, 0, 0, 255, 255, 255, 0, 0, 0}, 0);
    const uint8_t p5[] = {'P', '5', ' ', '1', ' ', '1', ' ', '6', '5', '5', '3', '5', '\n', 0x80, 0x00};
    check_decoded("PNM P5 16-bit", p5, sizeof p5, 1, 1, (const uint8_t[]){128, 128, 128}, 0);
    check_fails("PNM P5 truncated", p5, sizeof p5 - 1, "truncated");
    const char huge[] = "P6 100000 100000 255\n\x01\x02\x03";
    check_fails("PNM 10^10 pixels", huge, strlen(huge), "above the limit");
    check_fails("unknown format", "GIF89a", 6, "not a BMP");
    check_fails("empty stream", "", 0, "not a BMP");

    /* BGR swaps, Grayscale is Pillow's L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 */
    otter_tensor *y;
    CHECK_OK(decode(p3, strlen(p3), "BGR", &y));
    if (y) CHECK(memcmp(y->data, (const uint8_t[]){0, 0, 255, 119, 255, 0}, 6) == 0);
    otter_tensor_free(y);
    CHECK_OK(decode(p3, strlen(p3), "Grayscale", &y));
    if (y) {
        const uint8_t *g = y->data;
        CHECK(y->rank == 3 && y->dims[2] == 1);
        CHECK(g[0] == (255 * 19595 + 0x8000) >> 16 && g[1] == (255 * 38470 + 119 * 7471 + 0x8000) >> 16);
    }
    otter_tensor_free(y);
    CHECK_STATUS(decode(p3, strlen(p3), "CMYK", &y), OTTER_ERR_INVALID);
    CHECK(error_mentions("pixel_format", NULL));
}

/* ---- ai.onnx.ml ---- */

/* Two trees over feature 0, two targets:
 *   tree A, node 0: x <= 1 (NaN goes true)  ? leaf 0 (target 0, 1)  : leaf 1 (target 1, 10)
 *   tree B, node 1: x < 5                   ? leaf 2 (target 0, 3)  : leaf 3 (target 0, -2) */
typedef struct forest_args {
    int aggregate, post;
    int64_t true_ids[2], true_leafs[2];
} forest_args;

static void forest_attrs(otter_node *n, const void *arg) {
    const forest_args *a = arg;
    otter_tensor *splits = NULL, *weights = NULL, *modes = NULL;
    otter_tensor_from_data(&splits, NULL, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){2}, (const float[]){1, 5});
    otter_tensor_from_data(&weights, NULL, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){4}, (const float[]){1, 10, 3, -2});
    otter_tensor_from_data(&modes, NULL, OTTER_DTYPE_UINT8, 1, (const int64_t[]){2}, (const uint8_t[]){0, 1});
    otter_node_set_attr_tensor(n, "nodes_splits", splits);
    otter_node_set_attr_tensor(n, "leaf_weights", weights);
    otter_node_set_attr_tensor(n, "nodes_modes", modes);
    otter_node_set_attr_ints(n, "nodes_featureids", 2, (const int64_t[]){0, 0});
    otter_node_set_attr_ints(n, "nodes_truenodeids", 2, a->true_ids);
    otter_node_set_attr_ints(n, "nodes_trueleafs", 2, a->true_leafs);
    otter_node_set_attr_ints(n, "nodes_falsenodeids", 2, (const int64_t[]){1, 3});
    otter_node_set_attr_ints(n, "nodes_falseleafs", 2, (const int64_t[]){1, 1});
    otter_node_set_attr_ints(n, "nodes_missing_value_tracks_true", 2, (const int64_t[]){1, 0});
    otter_node_set_attr_ints(n, "leaf_targetids", 4, (const int64_t[]){0, 1, 0, 0});
    otter_node_set_attr_ints(n, "tree_roots", 2, (const int64_t[]){0, 1});
    otter_node_set_attr_int(n, "n_targets", 2);
    otter_node_set_attr_int(n, "aggregate_function", a->aggregate);
    otter_node_set_attr_int(n, "post_transform", a->post);
}

static otter_status run_forest(const forest_args *a, otter_tensor **y) {
    otter_tensor *x = NULL;
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){4, 1}, (const float[]){0.5f, 2, 7, NAN});
    otter_status s = run("ai.onnx.ml", "TreeEnsemble", 5, 1, (const otter_tensor *const[]){x}, 1, forest_attrs, a, y);
    otter_tensor_free(x);
    return s;
}

static void test_tree_ensemble(void) {
    const float M = 3.40282347e38f; /* float's largest: MIN / MAX of a target no leaf voted for */
    const float want[4][8] = {
        {2, 0, 1.5f, 5, -1, 5, -0.5f, 0}, /* AVERAGE */
        {4, 0, 3, 10, -2, 10, -1, 0},     /* SUM */
        {1, M, 3, 10, -2, 10, -2, M},     /* MIN */
        {3, -M, 3, 10, -2, 10, 1, -M},    /* MAX */
    };
    double worst = 0;
    for (int agg = 0; agg < 4; agg++) {
        for (int post = 0; post <= 2; post += 2) { /* NONE, LOGISTIC */
            if (post && agg != 1) continue;
            otter_tensor *y;
            forest_args a = {agg, post, {0, 2}, {1, 1}};
            CHECK_OK(run_forest(&a, &y));
            if (!y) continue;
            CHECK(y->rank == 2 && y->dims[0] == 4 && y->dims[1] == 2);
            for (int i = 0; i < 8; i++) {
                double w = post ? 1 / (1 + exp(-(double)want[agg][i])) : want[agg][i];
                worst = tu_worse(worst, fabs(((const float *)y->data)[i] - w) / (1 + fabs(w)));
            }
            otter_tensor_free(y);
        }
    }
    printf("TreeEnsemble: aggregates and LOGISTIC, worst relative difference %.3g\n", worst);
    CHECK(worst <= 1e-6);
    otter_tensor *y = NULL;
    forest_args cycle = {1, 0, {1, 0}, {0, 0}}; /* node 0 true -> node 1 true -> node 0 */
    CHECK_STATUS(run_forest(&cycle, &y), OTTER_ERR_INVALID);
    CHECK(error_mentions("cycle", NULL));
    forest_args outside = {1, 0, {9, 2}, {1, 1}};
    CHECK_STATUS(run_forest(&outside, &y), OTTER_ERR_INVALID);
    CHECK(error_mentions("outside", NULL));
}

/* Legacy encoding, two trees listed tree 1 first (roots are each tree's first node):
 *   tree 1: node 0: x1 > 0 ? node 1 (LEAF) : node 2 (LEAF)
 *   tree 0: node 0: x0 <= 1 ? node 1 (LEAF) : node 2 (LEAF) */
static void legacy_nodes(otter_node *n) {
    otter_node_set_attr_ints(n, "nodes_treeids", 6, (const int64_t[]){1, 1, 1, 0, 0, 0});
    otter_node_set_attr_ints(n, "nodes_nodeids", 6, (const int64_t[]){0, 1, 2, 0, 1, 2});
    otter_node_set_attr_ints(n, "nodes_featureids", 6, (const int64_t[]){1, 0, 0, 0, 0, 0});
    otter_node_set_attr_strings(n, "nodes_modes", 6,
                                (const char *[]){"BRANCH_GT", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"});
    otter_node_set_attr_floats(n, "nodes_values", 6, (const float[]){0, 0, 0, 1, 0, 0});
    otter_node_set_attr_ints(n, "nodes_truenodeids", 6, (const int64_t[]){1, 0, 0, 1, 0, 0});
    otter_node_set_attr_ints(n, "nodes_falsenodeids", 6, (const int64_t[]){2, 0, 0, 2, 0, 0});
}

/* votes: tree 0 leaf 1: target 0 +1; leaf 2: target 0 +10 and target 1 +5; tree 1 leaf 1: target 1 +2;
 * leaf 2: target 0 -3 */
static void regressor_attrs(otter_node *n, const void *arg) {
    legacy_nodes(n);
    otter_node_set_attr_ints(n, "target_treeids", 5, (const int64_t[]){0, 0, 0, 1, 1});
    otter_node_set_attr_ints(n, "target_nodeids", 5, (const int64_t[]){1, 2, 2, 1, arg ? 0 : 2});
    otter_node_set_attr_ints(n, "target_ids", 5, (const int64_t[]){0, 0, 1, 1, 0});
    otter_node_set_attr_floats(n, "target_weights", 5, (const float[]){1, 10, 5, 2, -3});
    otter_node_set_attr_floats(n, "base_values", 2, (const float[]){100, 200});
    otter_node_set_attr_int(n, "n_targets", 2);
}

/* binary: every vote for class 0 (tree 0 leaf 1: 0.3, leaf 2: 0.8; tree 1 leaves: 0) */
static void classifier_attrs(otter_node *n, const void *arg) {
    legacy_nodes(n);
    otter_node_set_attr_ints(n, "class_treeids", 4, (const int64_t[]){0, 0, 1, 1});
    otter_node_set_attr_ints(n, "class_nodeids", 4, (const int64_t[]){1, 2, 1, 2});
    otter_node_set_attr_ints(n, "class_ids", 4, (const int64_t[]){0, 0, 0, 0});
    otter_node_set_attr_floats(n, "class_weights", 4, (const float[]){0.3f, 0.8f, 0, 0});
    otter_node_set_attr_strings(n, "classlabels_strings", 2, (const char *[]){"no", "yes"});
}

static void test_legacy_trees(void) {
    otter_tensor *x = NULL, *y[2] = {NULL, NULL};
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){2, 2}, (const float[]){0, 1, 2, -1});
    CHECK_OK(run("ai.onnx.ml", "TreeEnsembleRegressor", 3, 1, (const otter_tensor *const[]){x}, 1, regressor_attrs,
                 NULL, y));
    if (y[0]) CHECK(memcmp(y[0]->data, (const float[]){101, 202, 107, 205}, 16) == 0);
    otter_tensor_free(y[0]);
    CHECK_STATUS(run("ai.onnx.ml", "TreeEnsembleRegressor", 3, 1, (const otter_tensor *const[]){x}, 1, regressor_attrs,
                     "vote on an interior node", y),
                 OTTER_ERR_INVALID);
    CHECK(error_mentions("not a LEAF", NULL));
    CHECK_OK(run("ai.onnx.ml", "TreeEnsembleClassifier", 3, 1, (const otter_tensor *const[]){x}, 2, classifier_attrs,
                 NULL, y));
    if (y[0] && y[1]) {
        const float *z = y[1]->data;
        CHECK(str_is(y[0], 0, "no") && str_is(y[0], 1, "yes"));
        CHECK(y[1]->dims[1] == 2 && fabsf(z[0] - 0.7f) < 1e-6f && fabsf(z[1] - 0.3f) < 1e-6f &&
              fabsf(z[2] - 0.2f) < 1e-6f && fabsf(z[3] - 0.8f) < 1e-6f);
    }
    otter_tensor_free(y[0]);
    otter_tensor_free(y[1]);
    otter_tensor_free(x);
}

static void encoder_int_to_string(otter_node *n, const void *arg) {
    otter_node_set_attr_ints(n, "keys_int64s", 3, (const int64_t[]){1, 2, 1});
    otter_node_set_attr_strings(n, "values_strings", 3, (const char *[]){"a", "b", "c"});
    otter_node_set_attr_string(n, "default_string", "zz");
    if (arg) otter_node_set_attr_strings(n, "keys_strings", 1, (const char *[]){"x"});
}

static void encoder_strings(otter_node *n, const void *arg) {
    otter_node_set_attr_strings(n, "keys_strings", 2, (const char *[]){"c", "a b"});
    otter_node_set_attr_strings(n, "values_strings", 2, (const char *[]){"C", "AB"});
}

static void encoder_nan(otter_node *n, const void *arg) {
    otter_node_set_attr_floats(n, "keys_floats", 2, (const float[]){NAN, 0.5f});
    otter_node_set_attr_ints(n, "values_int64s", 2, (const int64_t[]){7, 8});
}

static void encoder_classes(otter_node *n, const void *arg) {
    otter_node_set_attr_strings(n, "classes_strings", 3, (const char *[]){"cat", "dog", "cat"});
    if (arg) otter_node_set_attr_string(n, "default_string", arg);
}

/* LabelEncoder-1: string -> first index (default_int64 -1), int64 -> label (default_string "_Unused"). */
static void test_label_encoder_v1(void) {
    otter_tensor *x = strings(1, (const int64_t[]){3}, (const char *[]){"dog", "cat", "cow"}), *y = NULL;
    CHECK_OK(run("ai.onnx.ml", "LabelEncoder", 1, 1, (const otter_tensor *const[]){x}, 1, encoder_classes, NULL, &y));
    if (y) CHECK(y->dtype == OTTER_DTYPE_INT64 && memcmp(y->data, (const int64_t[]){1, 0, -1}, 24) == 0);
    otter_tensor_free(y);
    otter_tensor_free(x);
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_INT64, 1, (const int64_t[]){4}, (const int64_t[]){2, 1, 3, -1});
    CHECK_OK(run("ai.onnx.ml", "LabelEncoder", 1, 1, (const otter_tensor *const[]){x}, 1, encoder_classes, NULL, &y));
    if (y) CHECK(str_is(y, 0, "cat") && str_is(y, 1, "dog") && str_is(y, 2, "_Unused") && str_is(y, 3, "_Unused"));
    otter_tensor_free(y);
    CHECK_OK(run("ai.onnx.ml", "LabelEncoder", 1, 1, (const otter_tensor *const[]){x}, 1, encoder_classes, "?", &y));
    if (y) CHECK(str_is(y, 2, "?"));
    otter_tensor_free(y);
    otter_tensor_free(x);
}

static void threshold_attr(otter_node *n, const void *arg) { otter_node_set_attr_float(n, "threshold", 0.5f); }

static void test_ml_small(void) {
    otter_tensor *x = NULL, *y = NULL;
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_INT64, 1, (const int64_t[]){3}, (const int64_t[]){1, 2, 3});
    CHECK_OK(
        run("ai.onnx.ml", "LabelEncoder", 2, 1, (const otter_tensor *const[]){x}, 1, encoder_int_to_string, NULL, &y));
    if (y) CHECK(str_is(y, 0, "c") && str_is(y, 1, "b") && str_is(y, 2, "zz")); /* the last key 1 wins */
    otter_tensor_free(y);
    CHECK_STATUS(
        run("ai.onnx.ml", "LabelEncoder", 2, 1, (const otter_tensor *const[]){x}, 1, encoder_int_to_string, "both", &y),
        OTTER_ERR_INVALID);
    CHECK(error_mentions("exactly one keys_*", NULL));
    otter_tensor_free(x);

    uint32_t other_nan_bits = 0x7fc12345;
    float other_nan;
    memcpy(&other_nan, &other_nan_bits, 4);
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, (const float[]){other_nan, 0.5f, 1});
    CHECK_OK(run("ai.onnx.ml", "LabelEncoder", 4, 1, (const otter_tensor *const[]){x}, 1, encoder_nan, NULL, &y));
    if (y) CHECK(memcmp(y->data, (const int64_t[]){7, 8, -1}, 24) == 0);
    otter_tensor_free(y);
    otter_tensor_free(x);

    /* ArrayFeatureExtractor: strings [2, 3] at [2, 0]; a rank-1 input gives [1, K]; out of range fails */
    otter_tensor *s = strings(2, (const int64_t[]){2, 3}, (const char *[]){"a", "b", "c", "d", "e", "f"}), *idx = NULL;
    otter_tensor_from_data(&idx, NULL, OTTER_DTYPE_INT64, 1, (const int64_t[]){2}, (const int64_t[]){2, 0});
    CHECK_OK(
        run("ai.onnx.ml", "ArrayFeatureExtractor", 1, 2, (const otter_tensor *const[]){s, idx}, 1, NULL, NULL, &y));
    if (y)
        CHECK(y->rank == 2 && y->dims[1] == 2 && str_is(y, 0, "c") && str_is(y, 1, "a") && str_is(y, 2, "f") &&
              str_is(y, 3, "d"));
    otter_tensor_free(y);
    otter_tensor_free(idx);
    otter_tensor_from_data(&idx, NULL, OTTER_DTYPE_INT64, 1, (const int64_t[]){1}, (const int64_t[]){3});
    CHECK_STATUS(
        run("ai.onnx.ml", "ArrayFeatureExtractor", 1, 2, (const otter_tensor *const[]){s, idx}, 1, NULL, NULL, &y),
        OTTER_ERR_INVALID);
    CHECK(error_mentions("outside [0, 3)", NULL));
    otter_tensor_free(s);
    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 1, (const int64_t[]){4}, (const float[]){1, 2, 3, 4});
    CHECK_OK(
        run("ai.onnx.ml", "ArrayFeatureExtractor", 1, 2, (const otter_tensor *const[]){x, idx}, 1, NULL, NULL, &y));
    if (y) CHECK(y->rank == 2 && y->dims[0] == 1 && y->dims[1] == 1 && ((const float *)y->data)[0] == 4);
    otter_tensor_free(y);
    otter_tensor_free(x);
    otter_tensor_free(idx);

    otter_tensor_from_data(&x, NULL, OTTER_DTYPE_INT32, 1, (const int64_t[]){4}, (const int32_t[]){-1, 0, 1, 5});
    CHECK_OK(run("ai.onnx.ml", "Binarizer", 1, 1, (const otter_tensor *const[]){x}, 1, threshold_attr, NULL, &y));
    if (y) CHECK(y->dtype == OTTER_DTYPE_INT32 && memcmp(y->data, (const int32_t[]){0, 0, 1, 1}, 16) == 0);
    otter_tensor_free(y);
    otter_tensor_free(x);
}

/* ---- allocation failures ---- */

typedef struct scenario {
    const char *what, *domain, *op;
    int opset;
    size_t n_in, n_out;
    attr_fn attrs;
    const void *arg;
} scenario;

/* Fail otter's Nth allocation for N = 1, 2, ... while a session over the node is made and run: every
 * run ends in OTTER_OK or OTTER_ERR_NOMEM and leaves no allocation behind. The model and the inputs
 * exist before counting starts. */
static void check_alloc_failures(const scenario *sc, const otter_tensor *const *in) {
    long n, nomem = 0, other = 0, leaks = 0;
    otter_model *m = NULL;
    CHECK_OK(build(sc->domain, sc->op, sc->opset, sc->n_in, in, sc->n_out, sc->attrs, sc->arg, &m));
    for (n = 1; m; n++) {
        long live = tu_alloc_live;
        otter_tensor *out[2] = {NULL, NULL};
        tu_alloc_fail_at(n);
        otter_status s = run_model(m, sc->n_in, in, sc->n_out, out);
        tu_alloc_fail_at(0);
        for (size_t k = 0; k < sc->n_out; k++) otter_tensor_free(out[k]);
        if (tu_alloc_live != live) leaks++;
        if (s == OTTER_OK) break;
        if (s == OTTER_ERR_NOMEM) {
            nomem++;
        } else {
            other++;
            fprintf(stderr, "%s: failing allocation %ld gave %s: %s\n", sc->what, n, otter_status_name(s),
                    otter_last_error());
        }
    }
    otter_model_free(m);
    printf("%s: %ld allocation points, %ld clean NOMEM, %ld other errors, %ld leaking runs\n", sc->what, n, nomem,
           other, leaks);
    CHECK(other == 0 && leaks == 0 && nomem == n - 1);
}

static void test_alloc_failures(void) {
    otter_set_allocator(&tu_counting_allocator);
    otter_tensor *words = strings(1, (const int64_t[]){3}, (const char *[]){"a b", "\xc3\xa9t\xc3\xa9", "c"});
    const otter_tensor *one[] = {words}, *two[] = {words, words};
    check_alloc_failures(&(scenario){"StringSplit", NULL, "StringSplit", 20, 1, 2, split_attrs, &(split_args){" ", -1}},
                         one);
    check_alloc_failures(&(scenario){"StringConcat", NULL, "StringConcat", 20, 2, 1, NULL, NULL}, two);
    check_alloc_failures(&(scenario){"RegexFullMatch", NULL, "RegexFullMatch", 20, 1, 1, pattern_attr, "\\w+ \\w"},
                         one);
    check_alloc_failures(&(scenario){"StringNormalizer", NULL, "StringNormalizer", 10, 1, 1, normalizer_attrs,
                                     &(normalizer_args){"UPPER", 0, "C"}},
                         one);
    check_alloc_failures(&(scenario){"LabelEncoder", "ai.onnx.ml", "LabelEncoder", 4, 1, 1, encoder_strings, NULL},
                         one);
    otter_tensor_free(words);

    const char p3[] = "P3 2 1 255 1 2 3 4 5 6";
    otter_tensor *image = NULL, *features = NULL;
    otter_tensor_from_data(&image, NULL, OTTER_DTYPE_UINT8, 1, (const int64_t[]){(int64_t)strlen(p3)}, p3);
    check_alloc_failures(&(scenario){"ImageDecoder PNM", NULL, "ImageDecoder", 20, 1, 1, format_attr, "BGR"},
                         (const otter_tensor *const[]){image});
    otter_tensor_free(image);
    otter_tensor_from_data(&features, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){2, 2},
                           (const float[]){0, 1, 2, -1});
    check_alloc_failures(
        &(scenario){"TreeEnsembleClassifier", "ai.onnx.ml", "TreeEnsembleClassifier", 3, 1, 2, classifier_attrs, NULL},
        (const otter_tensor *const[]){features});
    otter_tensor_free(features);
    otter_set_allocator(NULL);
}

int main(void) {
    test_label_encoder_v1();
    test_strings();
    test_string_normalizer();
    test_png_jpeg();
    test_bmp_pnm();
    test_tree_ensemble();
    test_legacy_trees();
    test_ml_small();
    test_alloc_failures();
    return tu_finish("test_kernels_text_image_ml");
}
