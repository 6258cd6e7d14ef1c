/* Shape arithmetic shared by kernels and shape inference (src/ops/shape_math.h).
 *
 * 1. ot_window_axis / ot_window_transpose_axis against sizes worked out by hand from ONNX's
 *    formulas, the broadcast and reduction helpers on small cases.
 * 2. Inference and the kernels agree: 1-D MaxPool, Conv and ConvTranspose models over a grid of
 *    input sizes, kernels, strides, dilations, pads, auto_pad and ceil_mode are shape-inferred and
 *    run; both must succeed with the same output shape or both refuse the model. */
#include <string.h>

#include "ops/shape_math.h"
#include "testutil.h"

static void check_window(int64_t in, int64_t k, int64_t s, int64_t d, ot_auto_pad pad, bool ceil_mode, int64_t pb,
                         int64_t pe, ot_window_status want, int64_t want_out, int64_t want_pb, int64_t want_pe) {
    int64_t out = -1;
    ot_window_status ws = ot_window_axis(in, k, s, d, pad, ceil_mode, &pb, &pe, &out);
    bool ok = ws == want && (ws != OT_WINDOW_OK || (out == want_out && pb == want_pb && pe == want_pe));
    printf("  window in %lld k %lld s %lld d %lld pad %d ceil %d: status %d out %lld pads %lld,%lld%s\n", (long long)in,
           (long long)k, (long long)s, (long long)d, (int)pad, (int)ceil_mode, (int)ws, (long long)out, (long long)pb,
           (long long)pe, ok ? "" : "  WRONG");
    CHECK(ok);
}

static void test_formulas(void) {
    printf("window arithmetic:\n");
    /* floor((in + pads - ((k - 1) * d + 1)) / s) + 1 */
    check_window(5, 3, 1, 1, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_OK, 3, 0, 0);
    check_window(5, 3, 2, 1, OT_AUTO_PAD_NOTSET, false, 1, 1, OT_WINDOW_OK, 3, 1, 1);
    check_window(7, 3, 1, 2, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_OK, 3, 0, 0);
    /* ceil_mode: ceil(...) + 1, less a last window that would start in the end padding */
    check_window(6, 3, 2, 1, OT_AUTO_PAD_NOTSET, true, 0, 0, OT_WINDOW_OK, 3, 0, 0);
    check_window(5, 2, 2, 1, OT_AUTO_PAD_NOTSET, true, 0, 1, OT_WINDOW_OK, 3, 0, 1);
    check_window(4, 1, 3, 1, OT_AUTO_PAD_NOTSET, true, 0, 2, OT_WINDOW_OK, 2, 0, 2);
    /* SAME: ceil(in / s), total pad (out - 1) * s + k - in, the odd one at the end (UPPER) or start */
    check_window(5, 2, 2, 1, OT_AUTO_PAD_SAME_UPPER, false, 0, 0, OT_WINDOW_OK, 3, 0, 1);
    check_window(5, 2, 2, 1, OT_AUTO_PAD_SAME_LOWER, false, 0, 0, OT_WINDOW_OK, 3, 1, 0);
    check_window(5, 4, 1, 1, OT_AUTO_PAD_SAME_UPPER, false, 0, 0, OT_WINDOW_OK, 5, 1, 2);
    /* VALID ignores explicit pads */
    check_window(5, 3, 1, 1, OT_AUTO_PAD_VALID, false, 2, 2, OT_WINDOW_OK, 3, 0, 0);
    /* refused: input smaller than the dilated kernel, bad parameters */
    check_window(2, 3, 1, 1, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_TOO_SMALL, 0, 0, 0);
    check_window(4, 3, 1, 2, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_TOO_SMALL, 0, 0, 0);
    check_window(5, 3, 0, 1, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_BAD_PARAM, 0, 0, 0);
    check_window(5, 0, 1, 1, OT_AUTO_PAD_NOTSET, false, 0, 0, OT_WINDOW_BAD_PARAM, 0, 0, 0);
    check_window(5, 3, 1, 1, OT_AUTO_PAD_NOTSET, false, -1, 0, OT_WINDOW_BAD_PARAM, 0, 0, 0);

    printf("transposed window arithmetic:\n");
    /* s * (in - 1) + output_padding + (k - 1) * d + 1 - pads */
    int64_t pb = 1, pe = 0, out = -1;
    CHECK(ot_window_transpose_axis(3, 3, 2, 1, 1, OT_AUTO_PAD_NOTSET, -1, true, &pb, &pe, &out) == OT_WINDOW_OK);
    printf("  in 3 k 3 s 2 output_padding 1 pads 1,0: out %lld (expected 7)\n", (long long)out);
    CHECK(out == 7);
    pb = pe = 0;
    CHECK(ot_window_transpose_axis(3, 3, 2, 1, 0, OT_AUTO_PAD_SAME_UPPER, -1, false, &pb, &pe, &out) == OT_WINDOW_OK);
    printf("  in 3 k 3 s 2 SAME_UPPER: out %lld pads %lld,%lld (expected 6, 0,1)\n", (long long)out, (long long)pb,
           (long long)pe);
    CHECK(out == 6 && pb == 0 && pe == 1);
    pb = pe = 0;
    CHECK(ot_window_transpose_axis(3, 3, 2, 1, 0, OT_AUTO_PAD_NOTSET, 5, false, &pb, &pe, &out) == OT_WINDOW_OK);
    printf("  in 3 k 3 s 2 output_shape 5: out %lld pads %lld,%lld (expected 5, 1,1)\n", (long long)out, (long long)pb,
           (long long)pe);
    CHECK(out == 5 && pb == 1 && pe == 1);
    pb = 3, pe = 3;
    CHECK(ot_window_transpose_axis(1, 2, 1, 1, 0, OT_AUTO_PAD_NOTSET, -1, true, &pb, &pe, &out) == OT_WINDOW_TOO_SMALL);

    printf("broadcast and reduction helpers:\n");
    int64_t b = 0;
    CHECK(ot_broadcast_dim(3, 1, &b) && b == 3);
    CHECK(ot_broadcast_dim(1, 4, &b) && b == 4);
    CHECK(ot_broadcast_dim(0, 1, &b) && b == 0);
    CHECK(!ot_broadcast_dim(2, 3, &b));
    bool red[4];
    int src[4];
    int64_t axes[2] = {-1, 1};
    CHECK(ot_reduce_mask(4, axes, 2, false, red) == -1 && !red[0] && red[1] && !red[2] && red[3]);
    CHECK(ot_reduce_out_axes(4, red, false, src) == 2 && src[0] == 0 && src[1] == 2);
    CHECK(ot_reduce_out_axes(4, red, true, src) == 4 && src[1] == -1 && src[2] == 2 && src[3] == -1);
    CHECK(ot_reduce_mask(3, NULL, 0, false, red) == -1 && red[0] && red[1] && red[2]);
    CHECK(ot_reduce_mask(3, NULL, 0, true, red) == -1 && !red[0] && !red[1] && !red[2]);
    int64_t bad[2] = {0, 3};
    CHECK(ot_reduce_mask(3, bad, 2, false, red) == 1);
}

typedef struct window_case {
    const char *op;
    int64_t in, k, s, d, pb, pe;
    const char *auto_pad;
    int64_t ceil_mode;
} window_case;

/* X [1, 1, in] -> op -> Y; Conv and ConvTranspose get W [1, 1, k] of ones. */
static otter_model *window_model(const window_case *c) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 17));
    otter_graph *g = m->graph;
    int64_t xd[3] = {1, 1, c->in};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 3, xd, NULL));
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    bool pool = strcmp(c->op, "MaxPool") == 0;
    if (!pool) {
        float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        int64_t wd[3] = {1, 1, c->k};
        otter_tensor *w;
        CHECK_OK(otter_tensor_from_data(&w, "W", OTTER_DTYPE_FLOAT, 3, wd, ones));
        CHECK_OK(otter_graph_add_initializer(g, w));
    }
    const char *ins[2] = {"X", "W"}, *outs[1] = {"Y"};
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, c->op, "op", pool ? 1 : 2, ins, 1, outs));
    CHECK_OK(otter_graph_add_node(g, n));
    int64_t pads[2] = {c->pb, c->pe};
    if (pool) {
        CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 1, &c->k));
        CHECK_OK(otter_node_set_attr_int(n, "ceil_mode", c->ceil_mode));
    }
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 1, &c->s));
    CHECK_OK(otter_node_set_attr_ints(n, "dilations", 1, &c->d));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 2, pads));
    CHECK_OK(otter_node_set_attr_string(n, "auto_pad", c->auto_pad));
    return m;
}

/* The output size inference gives (-1: refused or unknown) and the one a run gives (-1: refused). */
static void infer_and_run(const window_case *c, int64_t *inferred, int64_t *ran) {
    *inferred = *ran = -1;
    otter_model *m = window_model(c);
    if (otter_model_infer_shapes(m, NULL) == OTTER_OK) {
        const otter_type *t = otter_graph_value_type(m->graph, "Y");
        if (t && t->rank == 3) *inferred = t->dims[2].value;
    }
    otter_model_free(m);
    m = window_model(c);
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 1};
    float x[16] = {0};
    int64_t xd[3] = {1, 1, c->in};
    otter_tensor *xt = NULL, *y = NULL;
    CHECK_OK(otter_tensor_from_data(&xt, "X", OTTER_DTYPE_FLOAT, 3, xd, x));
    if (otter_session_create(&s, m, &o) == OTTER_OK &&
        otter_session_run(s, 1, NULL, (const otter_tensor *const *)&xt, 1, NULL, &y) == OTTER_OK && y->rank == 3)
        *ran = y->dims[2];
    otter_tensor_free(y);
    otter_tensor_free(xt);
    otter_session_free(s);
    otter_model_free(m);
}

static void test_agreement(void) {
    static const char *const ops[] = {"MaxPool", "Conv", "ConvTranspose"};
    static const char *const pads[] = {"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"};
    static const int64_t pad_pairs[][2] = {{0, 0}, {1, 0}, {1, 2}};
    long cases = 0, refused = 0, disagree = 0;
    for (size_t o = 0; o < 3; o++)
        for (int64_t in = 1; in <= 6; in++)
            for (int64_t k = 1; k <= 4; k++)
                for (int64_t s = 1; s <= 3; s++)
                    for (int64_t d = 1; d <= 2; d++)
                        for (size_t p = 0; p < 3; p++)
                            for (size_t a = 0; a < 4; a++)
                                for (int64_t ceil_mode = 0; ceil_mode <= (o == 0); ceil_mode++) {
                                    /* ConvTranspose with SAME and dilation, and MaxPool with dilation, are legal;
                                     * the grid keeps every combination */
                                    window_case c = {ops[o],          in,      k,        s, d, pad_pairs[p][0],
                                                     pad_pairs[p][1], pads[a], ceil_mode};
                                    int64_t inferred, ran;
                                    infer_and_run(&c, &inferred, &ran);
                                    cases++;
                                    refused += ran < 0;
                                    if (inferred != ran) {
                                        if (disagree < 10)
                                            printf("  DISAGREE %s in %lld k %lld s %lld d %lld pads %lld,%lld %s "
                                                   "ceil %lld: inferred %lld, ran %lld\n",
                                                   c.op, (long long)in, (long long)k, (long long)s, (long long)d,
                                                   (long long)c.pb, (long long)c.pe, c.auto_pad, (long long)ceil_mode,
                                                   (long long)inferred, (long long)ran);
                                        disagree++;
                                    }
                                }
    printf("inference vs kernels: %ld models (MaxPool, Conv, ConvTranspose), %ld refused by both, %ld disagree\n",
           cases, refused - disagree, disagree);
    CHECK(cases > 1000 && refused > 0 && disagree == 0);
}

int main(void) {
    test_formulas();
    test_agreement();
    return tu_finish("test_shape_math");
}
