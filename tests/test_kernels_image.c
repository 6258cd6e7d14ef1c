/* Kernels of opsets 18-26 beyond what ONNX's backend cases cover: CenterCropPad, Col2Im, AffineGrid,
 * DeformConv, GridSample, CumProd, Resize-18, DFT's IRFFT and Dropout's seeded masks.
 *
 * Each check compares with values derived by hand in the comments, or with another operator that
 * computes the same thing (DeformConv with zero offsets and unit mask against Conv; Col2Im of
 * Conv's im2col of ones counts the windows covering each pixel; IRFFT of an RFFT gives the signal
 * back), plus the error paths that name the tensor at fault. */
#include <math.h>
#include <string.h>

#include "otter/infer.h"
#include "otter/ir.h"
#include "otter/runtime.h"
#include "testutil.h"

typedef struct attr {
    char kind; /* i: int, I: ints, s: string */
    const char *name;
    int64_t i;
    size_t n;
    const int64_t *ints;
    const char *s;
} attr;

#define MAX_IN 5
static const char *const NAMES[MAX_IN] = {"i0", "i1", "i2", "i3", "i4"};

/* Run one node op (ai.onnx at opset) on inputs in[0..n_in) (NULL: omitted; bit k of consts: input k is an
 * initializer) into *y; the status. With `inferred`, the shape rule's type of y as text first (outputs
 * untyped). */
static otter_status run_op_ex(const char *op, int64_t opset, size_t n_in, const otter_tensor *const *in,
                              unsigned consts, const attr *attrs, size_t n_attrs, otter_tensor **y, char *inferred,
                              size_t inferred_size) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", opset));
    char ins[64] = "";
    const char *given[MAX_IN];
    const otter_tensor *vals[MAX_IN];
    size_t n_given = 0;
    for (size_t k = 0; k < n_in; k++) {
        strcat(ins, k ? " " : "");
        strcat(ins, in[k] ? NAMES[k] : "-");
        if (!in[k]) continue;
        if (consts >> k & 1) {
            otter_tensor *c = NULL;
            CHECK_OK(otter_tensor_clone(&c, in[k]));
            CHECK_OK(otter_tensor_set_name(c, NAMES[k]));
            CHECK_OK(otter_graph_add_initializer(m->graph, c));
            continue;
        }
        CHECK_OK(otter_graph_add_input(m->graph, NAMES[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL));
        given[n_given] = NAMES[k], vals[n_given++] = in[k];
    }
    otter_node *n = tu_add_node(m->graph, op, "the_node", ins, "y");
    for (size_t k = 0; k < n_attrs; k++) {
        const attr *a = &attrs[k];
        if (a->kind == 'i') CHECK_OK(otter_node_set_attr_int(n, a->name, a->i));
        if (a->kind == 'I') CHECK_OK(otter_node_set_attr_ints(n, a->name, a->n, a->ints));
        if (a->kind == 's') CHECK_OK(otter_node_set_attr_string(n, a->name, a->s));
    }
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    if (inferred) {
        otter_type_clear(&m->graph->outputs[0].type);
        m->graph->outputs[0].has_type = false;
        CHECK_OK(otter_model_infer_shapes(m, NULL));
        tu_type_text(&m->graph->outputs[0].type, inferred, inferred_size);
    }
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 1};
    otter_status st = otter_session_create(&s, m, &o);
    const char *out = "y";
    *y = NULL;
    if (st == OTTER_OK) st = otter_session_run(s, n_given, given, vals, 1, &out, y);
    otter_session_free(s);
    otter_model_free(m);
    return st;
}

static otter_status run_op(const char *op, int64_t opset, size_t n_in, const otter_tensor *const *in, const attr *attrs,
                           size_t n_attrs, otter_tensor **y) {
    return run_op_ex(op, opset, n_in, in, 0, attrs, n_attrs, y, NULL, 0);
}

static otter_tensor *tensor(otter_dtype dt, int rank, const int64_t *dims, const void *data) {
    otter_tensor *t = NULL;
    CHECK_OK(otter_tensor_from_data(&t, NULL, dt, rank, dims, data));
    return t;
}
static otter_tensor *ints1(size_t n, const int64_t *v) {
    int64_t d = (int64_t)n;
    return tensor(OTTER_DTYPE_INT64, 1, &d, v);
}

static bool same_dims(const otter_tensor *t, int rank, const int64_t *dims) {
    return t && t->rank == rank && memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank) == 0;
}

/* max |y - want| over n floats of y (NaN or 1e30 when y is missing). */
static double max_err(const otter_tensor *y, const float *want, size_t n) {
    if (!y || y->dtype != OTTER_DTYPE_FLOAT || (size_t)otter_tensor_numel(y) != n) return 1e30;
    return tu_max_abs_diff(y->data, want, n);
}

static void free_all(otter_tensor **t, size_t n) {
    for (size_t i = 0; i < n; i++) otter_tensor_free(t[i]);
}

/* ---- CenterCropPad ---- */
static void center_crop_pad(void) {
    /* x [3, 4] int32 = 0..11; shape [2, 7]: rows cropped from start (3 - 2) / 2 = 0, columns padded
     * 1 left, 2 right (the odd pixel on the right) */
    int32_t xv[12];
    for (int i = 0; i < 12; i++) xv[i] = i;
    int64_t xd[2] = {3, 4}, sh[2] = {2, 7};
    otter_tensor *in[2] = {tensor(OTTER_DTYPE_INT32, 2, xd, xv), ints1(2, sh)}, *y = NULL;
    CHECK_OK(run_op("CenterCropPad", 18, 2, (const otter_tensor *const *)in, NULL, 0, &y));
    const int32_t want[14] = {0, 0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 7, 0, 0};
    int64_t yd[2] = {2, 7};
    CHECK(same_dims(y, 2, yd) && y->dtype == OTTER_DTYPE_INT32 && memcmp(y->data, want, sizeof want) == 0);
    otter_tensor_free(y);
    /* axes [-1]: only the last axis, cropped to 1 from start (4 - 1) / 2 = 1 */
    int64_t one = 1, axes = -1;
    otter_tensor *s1 = ints1(1, &one);
    const otter_tensor *in2[2] = {in[0], s1};
    attr a = {'I', "axes", .n = 1, .ints = &axes};
    CHECK_OK(run_op("CenterCropPad", 18, 2, in2, &a, 1, &y));
    const int32_t want2[3] = {1, 5, 9};
    int64_t yd2[2] = {3, 1};
    CHECK(same_dims(y, 2, yd2) && memcmp(y->data, want2, sizeof want2) == 0);
    otter_tensor_free(y);
    /* shape with one value for two axes: an error */
    const otter_tensor *bad[2] = {in[0], s1};
    CHECK_STATUS(run_op("CenterCropPad", 18, 2, bad, NULL, 0, &y), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "i1") != NULL);
    otter_tensor_free(s1);
    free_all(in, 2);
    printf("CenterCropPad: crop + pad with the odd pixel right, axes, count mismatch error\n");
}

/* ---- Col2Im ---- */
static void col2im(void) {
    /* columns of ones: each output pixel holds the number of 2x2 windows (stride 1, pad 1 on all sides)
     * covering it; image 3x3 padded to 5x5 gives 4x4 = 16 windows, and every pixel lies in 4 of them */
    int64_t img[2] = {3, 3}, blk[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    int64_t xd[3] = {1, 2 * 4, 16};
    float ones[2 * 4 * 16];
    for (int i = 0; i < 2 * 4 * 16; i++) ones[i] = 1;
    otter_tensor *in[3] = {tensor(OTTER_DTYPE_FLOAT, 3, xd, ones), ints1(2, img), ints1(2, blk)}, *y = NULL;
    attr a = {'I', "pads", .n = 4, .ints = pads};
    CHECK_OK(run_op("Col2Im", 18, 3, (const otter_tensor *const *)in, &a, 1, &y));
    float want[18];
    for (int i = 0; i < 18; i++) want[i] = 4;
    int64_t yd[4] = {1, 2, 3, 3};
    double err = max_err(y, want, 18);
    CHECK(same_dims(y, 4, yd) && err == 0);
    otter_tensor_free(y);
    /* strides 2 without pads: 2x2 blocks tile a 4x4 image, each pixel exactly once: the columns in order */
    int64_t img4[2] = {4, 4}, st[2] = {2, 2}, xd4[3] = {1, 4, 4};
    float v[16], w4[16];
    for (int i = 0; i < 16; i++) v[i] = (float)i;
    /* column block l = (bh, bw), row r = (kh, kw): pixel (2 bh + kh, 2 bw + kw) */
    for (int r = 0; r < 4; r++)
        for (int l = 0; l < 4; l++) w4[(2 * (l / 2) + r / 2) * 4 + 2 * (l % 2) + r % 2] = v[r * 4 + l];
    otter_tensor *in4[3] = {tensor(OTTER_DTYPE_FLOAT, 3, xd4, v), ints1(2, img4), ints1(2, blk)};
    attr a4 = {'I', "strides", .n = 2, .ints = st};
    CHECK_OK(run_op("Col2Im", 18, 3, (const otter_tensor *const *)in4, &a4, 1, &y));
    double err4 = max_err(y, w4, 16);
    CHECK(err4 == 0);
    otter_tensor_free(y);
    /* L that the geometry doesn't give: an error naming the input */
    CHECK_STATUS(run_op("Col2Im", 18, 3, (const otter_tensor *const *)in4, NULL, 0, &y), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "i0") != NULL);
    free_all(in, 3);
    free_all(in4, 3);
    printf("Col2Im: window counts (max err %g), strided tiling (max err %g), block count error\n", err, err4);
}

/* ---- AffineGrid ---- */
static void affine_grid(void) {
    /* identity theta over size (1, 1, 2, 3): x = -1 + (2i + 1) / 3 = -2/3, 0, 2/3; y = -1/2, 1/2;
     * align_corners: x = -1, 0, 1 and y = -1, 1. A translation adds t to every point. */
    float theta[6] = {1, 0, 0.25f, 0, 1, -0.5f};
    int64_t td[3] = {1, 2, 3}, size[4] = {1, 1, 2, 3};
    otter_tensor *in[2] = {tensor(OTTER_DTYPE_FLOAT, 3, td, theta), ints1(4, size)}, *y = NULL;
    CHECK_OK(run_op("AffineGrid", 20, 2, (const otter_tensor *const *)in, NULL, 0, &y));
    float want[12];
    for (int h = 0; h < 2; h++)
        for (int w = 0; w < 3; w++) {
            want[(h * 3 + w) * 2] = -1 + (2.0f * (float)w + 1) / 3 + 0.25f;
            want[(h * 3 + w) * 2 + 1] = -1 + (2.0f * (float)h + 1) / 2 - 0.5f;
        }
    int64_t yd[4] = {1, 2, 3, 2};
    double err = max_err(y, want, 12);
    CHECK(same_dims(y, 4, yd) && err < 1e-6);
    otter_tensor_free(y);
    attr a = {'i', "align_corners", .i = 1};
    CHECK_OK(run_op("AffineGrid", 20, 2, (const otter_tensor *const *)in, &a, 1, &y));
    for (int h = 0; h < 2; h++)
        for (int w = 0; w < 3; w++)
            want[(h * 3 + w) * 2] = (float)w - 1 + 0.25f, want[(h * 3 + w) * 2 + 1] = 2.0f * (float)h - 1 - 0.5f;
    double err_a = max_err(y, want, 12);
    CHECK(err_a < 1e-6);
    otter_tensor_free(y);
    /* a 2-D theta with a 5-value size: an error */
    int64_t size5[5] = {1, 1, 2, 2, 2};
    otter_tensor *s5 = ints1(5, size5);
    const otter_tensor *bad[2] = {in[0], s5};
    CHECK_STATUS(run_op("AffineGrid", 20, 2, bad, NULL, 0, &y), OTTER_ERR_INVALID);
    otter_tensor_free(s5);
    free_all(in, 2);
    printf("AffineGrid: translation, align_corners (max err %g, %g), rank mismatch error\n", err, err_a);
}

/* ---- DeformConv ---- */
static void deform_conv(void) {
    /* X (1, 2, 4, 5), W (4, 1, 2, 2), group 2, pads 1, stride 1: zero offsets and a mask of ones give
     * Conv's result; without pads, offsets of exactly +1 along w give Conv of X shifted left by one
     * (zero-filled: the taps past the right edge read zero) */
    int64_t xd[4] = {1, 2, 4, 5}, wd[4] = {4, 1, 2, 2}, pads[4] = {1, 1, 1, 1};
    float xv[40], wv[16], bv[4] = {0.5f, -1, 2, 0}, xs[40];
    for (int i = 0; i < 40; i++) xv[i] = sinf((float)i * 0.7f);
    for (int i = 0; i < 16; i++) wv[i] = cosf((float)i * 1.3f);
    for (int c = 0; c < 2; c++)
        for (int h = 0; h < 4; h++)
            for (int w = 0; w < 5; w++) xs[(c * 4 + h) * 5 + w] = w + 1 < 5 ? xv[(c * 4 + h) * 5 + w + 1] : 0;
    int64_t od[4] = {1, 2 * 2 * 2 * 2, 5, 6}, md[4] = {1, 2 * 4, 5, 6}, bd = 4;
    int64_t od1[4] = {1, 16, 3, 4};
    float off[16 * 30] = {0}, off1[16 * 12] = {0}, mask[8 * 30];
    for (int i = 0; i < 8 * 30; i++) mask[i] = 1;
    for (int og = 0; og < 2; og++)
        for (int tap = 0; tap < 4; tap++)
            for (int p = 0; p < 12; p++) off1[((og * 4 + tap) * 2 + 1) * 12 + p] = 1;
    otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, 4, xd, xv), *xsh = tensor(OTTER_DTYPE_FLOAT, 4, xd, xs);
    otter_tensor *w = tensor(OTTER_DTYPE_FLOAT, 4, wd, wv), *b = tensor(OTTER_DTYPE_FLOAT, 1, &bd, bv);
    otter_tensor *o0 = tensor(OTTER_DTYPE_FLOAT, 4, od, off), *o1 = tensor(OTTER_DTYPE_FLOAT, 4, od1, off1);
    otter_tensor *m = tensor(OTTER_DTYPE_FLOAT, 4, md, mask);
    attr a[3] = {{'i', "group", .i = 2}, {'I', "pads", .n = 4, .ints = pads}, {'i', "offset_group", .i = 2}};
    attr nopad[2] = {{'i', "group", .i = 2}, {'i', "offset_group", .i = 2}};
    otter_tensor *conv = NULL, *conv_sh = NULL, *y0 = NULL, *y1 = NULL, *yh = NULL;
    const otter_tensor *cin[3] = {x, w, b}, *csh[3] = {xsh, w, b};
    CHECK_OK(run_op("Conv", 11, 3, cin, a, 2, &conv));
    CHECK_OK(run_op("Conv", 11, 3, csh, nopad, 1, &conv_sh));
    const otter_tensor *d0[5] = {x, w, o0, b, m}, *d1[5] = {x, w, o1, b, NULL};
    CHECK_OK(run_op("DeformConv", 19, 5, d0, a, 3, &y0));
    CHECK_OK(run_op("DeformConv", 22, 5, d1, nopad, 2, &y1));
    double e0 = conv ? max_err(y0, conv->data, 120) : 1e30, e1 = conv_sh ? max_err(y1, conv_sh->data, 48) : 1e30;
    CHECK(e0 < 1e-5 && e1 < 1e-5);
    /* a mask of 0.5 halves the convolution (before the bias) */
    for (int i = 0; i < 8 * 30; i++) mask[i] = 0.5f;
    otter_tensor *mh = tensor(OTTER_DTYPE_FLOAT, 4, md, mask);
    const otter_tensor *dh[5] = {x, w, o0, NULL, mh};
    CHECK_OK(run_op("DeformConv", 22, 5, dh, a, 3, &yh));
    double eh = 0;
    for (int oc = 0; oc < 4 && conv && yh; oc++)
        for (int p = 0; p < 30; p++)
            eh = tu_worse(eh, fabs(((const float *)yh->data)[oc * 30 + p] -
                                   0.5 * (((const float *)conv->data)[oc * 30 + p] - bv[oc])));
    CHECK(yh && eh < 1e-5);
    /* an offset of the wrong shape: an error naming it */
    otter_tensor *ybad = NULL;
    const otter_tensor *dbad[3] = {x, w, m};
    CHECK_STATUS(run_op("DeformConv", 22, 3, dbad, a, 3, &ybad), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "i2") != NULL);
    otter_tensor *all[] = {x, xsh, w, b, o0, o1, m, mh, conv, conv_sh, y0, y1, yh};
    free_all(all, sizeof all / sizeof *all);
    printf("DeformConv vs Conv: zero offsets %g, unit shift %g, half mask %g; offset shape error\n", e0, e1, eh);
}

/* ---- GridSample on a volume ---- */
static void gridsample_3d(void) {
    /* X (1, 1, 2, 3, 4); the grid of every voxel center (align_corners 0: (2i + 1) / n - 1) reads X back
     * in linear and nearest modes; a point beyond the border reads 0 (zeros), the edge (border). */
    int64_t xd[5] = {1, 1, 2, 3, 4}, gd[5] = {1, 2, 3, 4, 3};
    float xv[24], g[72];
    for (int i = 0; i < 24; i++) xv[i] = (float)i * 0.5f - 3;
    for (int d = 0; d < 2; d++)
        for (int h = 0; h < 3; h++)
            for (int w = 0; w < 4; w++) {
                float *p = g + ((d * 3 + h) * 4 + w) * 3;
                p[0] = (2.0f * (float)w + 1) / 4 - 1, p[1] = (2.0f * (float)h + 1) / 3 - 1,
                p[2] = (2.0f * (float)d + 1) / 2 - 1;
            }
    otter_tensor *in[2] = {tensor(OTTER_DTYPE_FLOAT, 5, xd, xv), tensor(OTTER_DTYPE_FLOAT, 5, gd, g)}, *y = NULL;
    double err[2];
    const char *modes[2] = {"linear", "nearest"};
    for (int k = 0; k < 2; k++) {
        attr a = {'s', "mode", .s = modes[k]};
        CHECK_OK(run_op("GridSample", 22, 2, (const otter_tensor *const *)in, &a, 1, &y));
        err[k] = max_err(y, xv, 24);
        CHECK(same_dims(y, 5, xd) && err[k] < 1e-5);
        otter_tensor_free(y);
    }
    /* one point at x = 3 (far right): zeros padding reads 0, border the last column */
    int64_t g1d[5] = {1, 1, 1, 1, 3};
    float p[3] = {3, (2.0f * 1 + 1) / 3 - 1, (2.0f * 0 + 1) / 2 - 1};
    otter_tensor *gp = tensor(OTTER_DTYPE_FLOAT, 5, g1d, p);
    const otter_tensor *pin[2] = {in[0], gp};
    attr zeros = {'s', "padding_mode", .s = "zeros"}, border = {'s', "padding_mode", .s = "border"};
    otter_tensor *yz = NULL, *yb = NULL;
    CHECK_OK(run_op("GridSample", 22, 2, pin, &zeros, 1, &yz));
    CHECK_OK(run_op("GridSample", 22, 2, pin, &border, 1, &yb));
    CHECK(yz && ((const float *)yz->data)[0] == 0);
    CHECK(yb && ((const float *)yb->data)[0] == xv[(0 * 3 + 1) * 4 + 3]);
    /* cubic on a volume: an error; a volume before opset 20: an error */
    attr cubic = {'s', "mode", .s = "cubic"};
    CHECK_STATUS(run_op("GridSample", 22, 2, (const otter_tensor *const *)in, &cubic, 1, &y), OTTER_ERR_INVALID);
    CHECK_STATUS(run_op("GridSample", 16, 2, (const otter_tensor *const *)in, NULL, 0, &y), OTTER_ERR_INVALID);
    otter_tensor *all[] = {in[0], in[1], gp, yz, yb};
    free_all(all, 5);
    printf("GridSample 3-D: voxel centers read back (linear %g, nearest %g), zeros/border outside, cubic and "
           "opset-16 volume errors\n",
           err[0], err[1]);
}

/* ---- CumProd ---- */
static void cumprod(void) {
    /* int64 [2, 3] = {1, 2, 3, 4, 5, 6} along axis 1: inclusive 1 2 6 | 4 20 120; exclusive reverse
     * 6 3 1 | 30 6 1 */
    int64_t xv[6] = {1, 2, 3, 4, 5, 6}, xd[2] = {2, 3}, axis = 1;
    otter_tensor *in[2] = {tensor(OTTER_DTYPE_INT64, 2, xd, xv), tensor(OTTER_DTYPE_INT64, 0, NULL, &axis)}, *y = NULL;
    CHECK_OK(run_op("CumProd", 26, 2, (const otter_tensor *const *)in, NULL, 0, &y));
    const int64_t want[6] = {1, 2, 6, 4, 20, 120}, want_er[6] = {6, 3, 1, 30, 6, 1};
    CHECK(same_dims(y, 2, xd) && memcmp(y->data, want, sizeof want) == 0);
    otter_tensor_free(y);
    attr a[2] = {{'i', "exclusive", .i = 1}, {'i', "reverse", .i = 1}};
    CHECK_OK(run_op("CumProd", 26, 2, (const otter_tensor *const *)in, a, 2, &y));
    CHECK(y && memcmp(y->data, want_er, sizeof want_er) == 0);
    otter_tensor_free(y);
    /* axis 2 of a rank-2 input: an error */
    int64_t bad_axis = 2;
    otter_tensor *ba = tensor(OTTER_DTYPE_INT64, 0, NULL, &bad_axis);
    const otter_tensor *bad[2] = {in[0], ba};
    CHECK_STATUS(run_op("CumProd", 26, 2, bad, NULL, 0, &y), OTTER_ERR_INVALID);
    otter_tensor_free(ba);
    free_all(in, 2);
    printf("CumProd: inclusive, exclusive reverse, axis error\n");
}

/* ---- Resize-18 ---- */
static void resize(void) {
    /* linear antialias 4 -> 2 (scale 0.5, half_pixel): the filter stretches to 4 taps of weights
     * 1/8, 3/8, 3/8, 1/8 around x = 0.5 and 2.5, edge pixels repeated: [1,2,3,4] -> 1.625, 3.375 */
    float xv[4] = {1, 2, 3, 4}, sc = 0.5f;
    int64_t xd[4] = {1, 1, 1, 4}, one = 1, axes = 3;
    otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, 4, xd, xv), *s = tensor(OTTER_DTYPE_FLOAT, 1, &one, &sc), *y = NULL;
    attr a[3] = {{'s', "mode", .s = "linear"}, {'i', "antialias", .i = 1}, {'I', "axes", .n = 1, .ints = &axes}};
    const otter_tensor *in[3] = {x, NULL, s};
    CHECK_OK(run_op("Resize", 18, 3, in, a, 3, &y));
    const float want[2] = {1.625f, 3.375f};
    double err = max_err(y, want, 2);
    CHECK(err < 1e-6);
    otter_tensor_free(y);
    /* keep_aspect_ratio_policy on (1, 1, 4, 6) with sizes [3, 3] over axes 2, 3: not_larger takes
     * scale min(3/4, 3/6) = 0.5 -> (2, 3); not_smaller 0.75 -> (3, round half up 4.5 = 5) */
    int64_t bd[4] = {1, 1, 4, 6}, sizes[2] = {3, 3}, ax2[2] = {2, 3};
    float big[24] = {0};
    otter_tensor *xb = tensor(OTTER_DTYPE_FLOAT, 4, bd, big), *sz = ints1(2, sizes);
    const otter_tensor *in2[4] = {xb, NULL, NULL, sz};
    const char *policy[2] = {"not_larger", "not_smaller"};
    const int64_t want_dims[2][4] = {{1, 1, 2, 3}, {1, 1, 3, 5}};
    for (int k = 0; k < 2; k++) {
        attr p[2] = {{'s', "keep_aspect_ratio_policy", .s = policy[k]}, {'I', "axes", .n = 2, .ints = ax2}};
        CHECK_OK(run_op("Resize", 18, 4, in2, p, 2, &y));
        CHECK(same_dims(y, 4, want_dims[k]));
        otter_tensor_free(y);
    }
    /* sizes for two axes without axes: an error naming sizes */
    CHECK_STATUS(run_op("Resize", 18, 4, in2, NULL, 0, &y), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "sizes 'i3'") != NULL);
    otter_tensor *all[] = {x, s, xb, sz};
    free_all(all, 4);
    printf("Resize-18: antialias taps (max err %g), aspect-ratio policies, sizes count error\n", err);
}

/* ---- DFT: IRFFT of an RFFT ---- */
static void irfft(void) {
    /* x (1, 5, 1) real; DFT onesided gives 3 bins; the inverse onesided DFT with dft_length 5 (odd, not
     * the default 2 * (3 - 1) = 4) gives x back */
    float xv[5] = {0.5f, -1, 2, 3.25f, -0.75f};
    int64_t xd[3] = {1, 5, 1}, len = 5, axis = 1;
    otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, 3, xd, xv), *l = tensor(OTTER_DTYPE_INT64, 0, NULL, &len);
    otter_tensor *ax = tensor(OTTER_DTYPE_INT64, 0, NULL, &axis), *spec = NULL, *back = NULL, *back4 = NULL;
    attr fwd = {'i', "onesided", .i = 1}, inv[2] = {{'i', "onesided", .i = 1}, {'i', "inverse", .i = 1}};
    const otter_tensor *in[3] = {x, NULL, ax};
    CHECK_OK(run_op("DFT", 20, 3, in, &fwd, 1, &spec));
    int64_t sd[3] = {1, 3, 2};
    CHECK(same_dims(spec, 3, sd));
    const otter_tensor *in2[3] = {spec, l, ax}, *in3[3] = {spec, NULL, ax};
    CHECK_OK(run_op("DFT", 20, 3, in2, inv, 2, &back));
    double err = max_err(back, xv, 5);
    CHECK(same_dims(back, 3, xd) && err < 1e-5);
    CHECK_OK(run_op("DFT", 20, 3, in3, inv, 2, &back4));
    int64_t d4[3] = {1, 4, 1};
    CHECK(same_dims(back4, 3, d4));
    /* a real input to the inverse one-sided DFT: an error */
    otter_tensor *ybad = NULL;
    CHECK_STATUS(run_op("DFT", 20, 3, in, inv, 2, &ybad), OTTER_ERR_INVALID);
    otter_tensor *all[] = {x, l, ax, spec, back, back4};
    free_all(all, 6);
    printf("DFT IRFFT: RFFT round trip of length 5 (max err %g), default length 4, real input error\n", err);
}

/* ---- Dropout with a seed ---- */
static void dropout_seeded(void) {
    /* the mask is numpy's RandomState(seed).uniform(0, 1, 8) >= ratio, as ONNX's reference draws it:
     * seed 0 gives 0.5488 0.7152 0.6028 0.5449 0.4237 0.6459 0.4376 0.8918 (ratio 0.5: 1 1 1 1 0 1 0 1), seed 7
     * with ratio 0.3 gives 0 1 1 1 1 1 1 0; kept values are scaled by 1 / (1 - ratio) */
    const float ratios[2] = {0.5f, 0.3f};
    const int64_t seeds[2] = {0, 7};
    const uint8_t masks[2][8] = {{1, 1, 1, 1, 0, 1, 0, 1}, {0, 1, 1, 1, 1, 1, 1, 0}};
    float xv[8];
    for (int i = 0; i < 8; i++) xv[i] = (float)i + 1;
    int64_t d = 8;
    uint8_t train = 1;
    for (int k = 0; k < 2; k++) {
        otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, 1, &d, xv), *r = tensor(OTTER_DTYPE_FLOAT, 0, NULL, &ratios[k]);
        otter_tensor *t = tensor(OTTER_DTYPE_BOOL, 0, NULL, &train), *y = NULL;
        const otter_tensor *in[3] = {x, r, t};
        attr a = {'i', "seed", .i = seeds[k]};
        CHECK_OK(run_op("Dropout", 13, 3, in, &a, 1, &y));
        float want[8];
        for (int i = 0; i < 8; i++) want[i] = masks[k][i] ? xv[i] / (1 - ratios[k]) : 0;
        CHECK(max_err(y, want, 8) < 1e-6);
        otter_tensor *all[] = {x, r, t, y};
        free_all(all, 4);
    }
    printf("Dropout with a seed: numpy RandomState masks for seeds 0 and 7\n");
}

/* ---- shape rules ---- */

/* The rule's output type for op on `in` (constants per `consts`) must read want_rule, the kernel's output
 * want_run (the same type with every dimension fixed). */
static void check_rule(const char *op, int64_t opset, size_t n_in, const otter_tensor *const *in, unsigned consts,
                       const attr *attrs, size_t n_attrs, const char *want_rule, const char *want_run) {
    char got[128] = "", ran[128] = "";
    otter_tensor *y = NULL;
    CHECK_OK(run_op_ex(op, opset, n_in, in, consts, attrs, n_attrs, &y, got, sizeof got));
    if (y) {
        otter_dim dims[8] = {{0}};
        otter_type t = {.kind = OTTER_TYPE_TENSOR, .has_elem_type = true, .elem_type = y->dtype, .rank = y->rank};
        for (int k = 0; k < y->rank && k < 8; k++) dims[k].value = y->dims[k];
        t.dims = dims;
        tu_type_text(&t, ran, sizeof ran);
    }
    if (strcmp(got, want_rule) != 0 || strcmp(ran, want_run) != 0)
        fprintf(stderr, "%s: the rule infers %s, expected %s; the kernel gives %s, expected %s\n", op, got, want_rule,
                ran, want_run);
    CHECK(strcmp(got, want_rule) == 0);
    CHECK(strcmp(ran, want_run) == 0);
    otter_tensor_free(y);
}

static void shape_rules(void) {
    float fx[64] = {0};
    int64_t d34[2] = {3, 4}, sh[2] = {2, 7};
    otter_tensor *x34 = tensor(OTTER_DTYPE_FLOAT, 2, d34, fx), *s27 = ints1(2, sh);
    const otter_tensor *ccp[2] = {x34, s27};
    check_rule("CenterCropPad", 18, 2, ccp, 0x2, NULL, 0, "float32[2,7]", "float32[2,7]");
    check_rule("CenterCropPad", 18, 2, ccp, 0x0, NULL, 0, "float32[?,?]", "float32[2,7]");

    int64_t cd[3] = {1, 8, 16}, img[2] = {3, 3}, blk[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    float cv[128] = {0};
    otter_tensor *cols = tensor(OTTER_DTYPE_FLOAT, 3, cd, cv), *im = ints1(2, img), *bk = ints1(2, blk);
    const otter_tensor *c2i[3] = {cols, im, bk};
    attr pa = {'I', "pads", .n = 4, .ints = pads};
    check_rule("Col2Im", 18, 3, c2i, 0x6, &pa, 1, "float32[1,2,3,3]", "float32[1,2,3,3]");

    float th[6] = {1, 0, 0, 0, 1, 0};
    int64_t td[3] = {1, 2, 3}, size[4] = {1, 1, 2, 3};
    otter_tensor *theta = tensor(OTTER_DTYPE_FLOAT, 3, td, th), *sz = ints1(4, size);
    const otter_tensor *ag[2] = {theta, sz};
    check_rule("AffineGrid", 20, 2, ag, 0x2, NULL, 0, "float32[1,2,3,2]", "float32[1,2,3,2]");
    check_rule("AffineGrid", 20, 2, ag, 0x0, NULL, 0, "float32[1,?,?,2]", "float32[1,2,3,2]");

    int64_t xd[4] = {1, 2, 4, 5}, wd[4] = {4, 1, 2, 2}, od[4] = {1, 16, 5, 6};
    float big[512] = {0};
    otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, 4, xd, big), *w = tensor(OTTER_DTYPE_FLOAT, 4, wd, big);
    otter_tensor *off = tensor(OTTER_DTYPE_FLOAT, 4, od, big);
    const otter_tensor *dc[3] = {x, w, off};
    attr da[3] = {{'i', "group", .i = 2}, {'I', "pads", .n = 4, .ints = pads}, {'i', "offset_group", .i = 2}};
    check_rule("DeformConv", 22, 3, dc, 0x0, da, 3, "float32[1,4,5,6]", "float32[1,4,5,6]");

    int64_t sd[3] = {1, 3, 2}, axis = 1, len = 5;
    otter_tensor *spec = tensor(OTTER_DTYPE_FLOAT, 3, sd, big), *ax = tensor(OTTER_DTYPE_INT64, 0, NULL, &axis);
    otter_tensor *l5 = tensor(OTTER_DTYPE_INT64, 0, NULL, &len);
    attr inv[2] = {{'i', "onesided", .i = 1}, {'i', "inverse", .i = 1}};
    const otter_tensor *dft[3] = {spec, NULL, ax}, *dft5[3] = {spec, l5, ax};
    check_rule("DFT", 20, 3, dft, 0x4, inv, 2, "float32[1,4,1]", "float32[1,4,1]");
    check_rule("DFT", 20, 3, dft5, 0x6, inv, 2, "float32[1,5,1]", "float32[1,5,1]");

    int64_t rd[4] = {1, 1, 4, 6}, sizes[2] = {3, 3}, axes[2] = {2, 3};
    otter_tensor *rx = tensor(OTTER_DTYPE_FLOAT, 4, rd, big), *rs = ints1(2, sizes);
    const otter_tensor *rz[4] = {rx, NULL, NULL, rs};
    attr ra[2] = {{'s', "keep_aspect_ratio_policy", .s = "not_smaller"}, {'I', "axes", .n = 2, .ints = axes}};
    check_rule("Resize", 19, 4, rz, 0x8, ra, 2, "float32[1,1,3,5]", "float32[1,1,3,5]");

    int64_t gx[5] = {1, 1, 2, 3, 4}, gg[5] = {1, 2, 3, 4, 3};
    otter_tensor *vx = tensor(OTTER_DTYPE_FLOAT, 5, gx, big), *vg = tensor(OTTER_DTYPE_FLOAT, 5, gg, big);
    const otter_tensor *gs[2] = {vx, vg};
    check_rule("GridSample", 20, 2, gs, 0x0, NULL, 0, "float32[1,1,2,3,4]", "float32[1,1,2,3,4]");

    otter_tensor *all[] = {x34, s27, cols, im, bk, theta, sz, x, w, off, spec, ax, l5, rx, rs, vx, vg};
    free_all(all, sizeof all / sizeof *all);
    printf("shape rules of CenterCropPad, Col2Im, AffineGrid, DeformConv, DFT (IRFFT), Resize-19, GridSample 3-D "
           "agree with the ONNX definitions and the kernels' outputs\n");
}

int main(void) {
    center_crop_pad();
    col2im();
    affine_grid();
    deform_conv();
    gridsample_3d();
    cumprod();
    resize();
    irfft();
    dropout_seeded();
    shape_rules();
    return tu_finish("test_kernels_image");
}
