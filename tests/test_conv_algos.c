/* Conv (the direct kernel, Winograd, im2col + sgemm, the 1x1 matrix product, small images and 1x1 maps as one product
 * with positions as rows, output channels in the lanes, images in the lanes, fused FusedConv) against
 * direct loops in this file, on many shapes: odd and even sizes, symmetric and asymmetric pads, strides,
 * groups, dilations, 1x1 and 5x5 kernels, small and large batches, with bias, and bias + residual Add + Relu and
 * Relu + MaxPool 2x2 fused, at opt level 1 (the direct kernel, unfused), 2 (fused; Winograd F(2x2, 3x3)
 * where it applies) and 3 (Winograd F(4x4, 3x3)), at 1 and 2 threads. Error: |got - want| / (1 + |want|)
 * against sums in double, below 3e-5 at levels 1 and 2 (float sums of up to 576 products) and 3e-4 at
 * level 3 (F(4x4)'s transforms amplify rounding about tenfold: Lavin and Gray 2015, Barabasz et al.
 * 2019); F(2x2)'s error must stay within twice the direct kernel's on the same case. Every case runs
 * on each path of the direct kernel the CPU has (AVX-512, AVX2), which also moves the choice of
 * Winograd and of the small-image product. New conv algorithms must pass these cases. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "runtime/ops/conv_direct.h"
#include "testutil.h"

static double worst;

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static otter_tensor *rand_tensor(const char *name, int rank, const int64_t *dims, unsigned seed) {
    otter_tensor *t;
    CHECK_OK(otter_tensor_create(&t, name, OTTER_DTYPE_FLOAT, rank, dims));
    float *d = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) d[i] = frand(&seed);
    return t;
}

typedef struct conv_case {
    int64_t N, C, H, W, M, KH, KW, group;
    int64_t pads[4], strides[2], dil[2];
    bool fused;   /* Conv + B, then Add(x) and Relu: residual (needs M == C and same spatial size) */
    bool pool;    /* then (Relu and) MaxPool 2x2 stride 2: fused into the conv at opt level 2 */
    bool relu;    /* then Relu (without the Add): fused as the conv's activation at opt level 2 */
    bool w_input; /* W a graph input (as in training), not an initializer */
} conv_case;

static void run_case(const conv_case *k) {
    const int64_t xd[4] = {k->N, k->C, k->H, k->W}, wd[4] = {k->M, k->C / k->group, k->KH, k->KW}, bd[1] = {k->M};
    const int64_t OH = (k->H + k->pads[0] + k->pads[2] - (k->KH - 1) * k->dil[0] - 1) / k->strides[0] + 1;
    const int64_t OW = (k->W + k->pads[1] + k->pads[3] - (k->KW - 1) * k->dil[1] - 1) / k->strides[1] + 1;
    otter_tensor *x = rand_tensor("x", 4, xd, 11), *w = rand_tensor("W", 4, wd, 12), *b = rand_tensor("B", 1, bd, 13);
    /* reference */
    const int64_t Cg = k->C / k->group, Mg = k->M / k->group;
    int64_t ysz = k->N * k->M * OH * OW;
    float *want = malloc((size_t)ysz * sizeof(float));
    const float *X = x->data, *Wt = w->data, *B = b->data;
    for (int64_t n = 0; n < k->N; n++)
        for (int64_t m = 0; m < k->M; m++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = B[m];
                    for (int64_t c = 0; c < Cg; c++)
                        for (int64_t i = 0; i < k->KH; i++)
                            for (int64_t j = 0; j < k->KW; j++) {
                                int64_t ih = oh * k->strides[0] - k->pads[0] + i * k->dil[0];
                                int64_t iw = ow * k->strides[1] - k->pads[1] + j * k->dil[1];
                                if (ih < 0 || ih >= k->H || iw < 0 || iw >= k->W) continue;
                                acc += (double)Wt[((m * Cg + c) * k->KH + i) * k->KW + j] *
                                       X[((n * k->C + (m / Mg) * Cg + c) * k->H + ih) * k->W + iw];
                            }
                    int64_t o = ((n * k->M + m) * OH + oh) * OW + ow;
                    if (k->fused) acc += X[o];
                    if (k->fused || k->relu) acc = acc > 0 ? acc : 0;
                    want[o] = (float)acc;
                }
    if (k->pool) { /* Relu, MaxPool 2x2 stride 2 (floor), in place */
        const int64_t PH = OH / 2, PW = OW / 2;
        for (int64_t p = 0; p < k->N * k->M; p++)
            for (int64_t i = 0; i < PH; i++)
                for (int64_t j = 0; j < PW; j++) {
                    float v = 0;
                    for (int64_t di = 0; di < 2; di++)
                        for (int64_t dj = 0; dj < 2; dj++) {
                            float e = want[(p * OH + 2 * i + di) * OW + 2 * j + dj];
                            if (e > v) v = e;
                        }
                    want[(p * PH + i) * PW + j] = v;
                }
        ysz = k->N * k->M * PH * PW;
    }
    /* model */
    otter_model *mod;
    CHECK_OK(otter_model_create(&mod, "conv", 17));
    CHECK_OK(otter_graph_add_input(mod->graph, "x", OTTER_DTYPE_FLOAT, 4, xd, NULL));
    CHECK_OK(otter_graph_add_output(mod->graph,
                                    k->pool               ? "p"
                                    : k->fused || k->relu ? "r"
                                                          : "y",
                                    OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_tensor *wc, *bc;
    CHECK_OK(otter_tensor_clone(&wc, w));
    CHECK_OK(otter_tensor_clone(&bc, b));
    if (k->w_input) {
        CHECK_OK(otter_graph_add_input(mod->graph, "W", OTTER_DTYPE_FLOAT, 4, wd, NULL));
        otter_tensor_free(wc);
    } else {
        CHECK_OK(otter_graph_add_initializer(mod->graph, wc));
    }
    CHECK_OK(otter_graph_add_initializer(mod->graph, bc));
    otter_node *n;
    const char *cin[3] = {"x", "W", "B"}, *cout[1] = {"y"};
    CHECK_OK(otter_node_create(&n, "Conv", "conv", 3, cin, 1, cout));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, k->pads));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, k->strides));
    CHECK_OK(otter_node_set_attr_ints(n, "dilations", 2, k->dil));
    CHECK_OK(otter_node_set_attr_int(n, "group", k->group));
    CHECK_OK(otter_graph_add_node(mod->graph, n));
    if (k->fused || k->pool || k->relu) {
        const char *ain[2] = {"y", "x"}, *aout[1] = {"s"}, *rin[1] = {k->fused ? "s" : "y"}, *rout[1] = {"r"};
        if (k->fused) {
            CHECK_OK(otter_node_create(&n, "Add", "add", 2, ain, 1, aout));
            CHECK_OK(otter_graph_add_node(mod->graph, n));
        }
        CHECK_OK(otter_node_create(&n, "Relu", "relu", 1, rin, 1, rout));
        CHECK_OK(otter_graph_add_node(mod->graph, n));
    }
    if (k->pool) {
        const char *pin[1] = {"r"}, *pout[1] = {"p"};
        const int64_t two[2] = {2, 2};
        CHECK_OK(otter_node_create(&n, "MaxPool", "pool", 1, pin, 1, pout));
        CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, two));
        CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, two));
        CHECK_OK(otter_graph_add_node(mod->graph, n));
    }
    double level_err[4] = {0};
    for (int run = 0; run < 6; run++) {
        /* opt level 1 (the direct kernel, unfused), 2 (also Winograd F(2x2, 3x3)) and 3 (F(4x4, 3x3)), where they
         * apply, at 1 and 2 threads */
        const int threads = 1 + run % 2, level = 1 + run / 2;
        otter_session *s = NULL;
        otter_session_options o = {.n_threads = threads, .opt_level = level, .opt_level_set = true};
        CHECK_OK(otter_session_create(&s, mod, &o));
        if (!s) break;
        const otter_tensor *in[2] = {x, w};
        otter_tensor *y = NULL;
        CHECK_OK(otter_session_run(s, k->w_input ? 2 : 1, NULL, in, 1, NULL, &y));
        double err = 0;
        bool ok = y && otter_tensor_numel(y) == ysz;
        CHECK(ok);
        for (int64_t i = 0; ok && i < ysz; i++) {
            err = tu_worse(err, fabs((double)((float *)y->data)[i] - want[i]) / (1 + fabs((double)want[i])));
        }
        CHECK(err < (level == 3 ? 3e-4 : 3e-5));
        worst = tu_worse(worst, err);
        level_err[level] = tu_worse(level_err[level], err);
        printf(
            "  N %lld C %3lld %3lldx%-3lld M %3lld k %lldx%lld pads %lld,%lld,%lld,%lld stride %lld,%lld dil %lld,%lld "
            "group %lld%s%s, level %d, threads %d: worst rel err %.2e\n",
            (long long)k->N, (long long)k->C, (long long)k->H, (long long)k->W, (long long)k->M, (long long)k->KH,
            (long long)k->KW, (long long)k->pads[0], (long long)k->pads[1], (long long)k->pads[2],
            (long long)k->pads[3], (long long)k->strides[0], (long long)k->strides[1], (long long)k->dil[0],
            (long long)k->dil[1], (long long)k->group, k->fused ? " +residual+Relu" : "",
            k->pool ? " +Relu+MaxPool" : "", level, threads, err);
        otter_tensor_free(y);
        otter_session_free(s);
    }
    /* F(2x2, 3x3) only adds, subtracts and halves in its transforms: its error stays the direct kernel's */
    CHECK(level_err[2] <= 2 * level_err[1] + 1e-7);
    otter_model_free(mod);
    otter_tensor_free(x), otter_tensor_free(w), otter_tensor_free(b);
    free(want);
}

/* Packed weights are kept across runs only for constant weights: with W a graph input, a second run
 * with 2 W gives exactly 2 y (scaling by 2 is exact through every algorithm), at levels 2 and 3;
 * with W an initializer, a second run gives the same bits. */
static void weight_cache_case(void) {
    const int64_t xd[4] = {2, 16, 16, 16}, wd[4] = {16, 16, 3, 3}, pads[4] = {1, 1, 1, 1};
    otter_tensor *x = rand_tensor("x", 4, xd, 21), *w = rand_tensor("W", 4, wd, 22), *w2;
    CHECK_OK(otter_tensor_clone(&w2, w));
    for (int64_t i = 0; i < otter_tensor_numel(w2); i++) ((float *)w2->data)[i] *= 2.0f;
    for (int as_input = 0; as_input < 2; as_input++)
        for (int level = 2; level <= 3; level++) {
            otter_model *mod;
            CHECK_OK(otter_model_create(&mod, "conv", 17));
            CHECK_OK(otter_graph_add_input(mod->graph, "x", OTTER_DTYPE_FLOAT, 4, xd, NULL));
            if (as_input) {
                CHECK_OK(otter_graph_add_input(mod->graph, "W", OTTER_DTYPE_FLOAT, 4, wd, NULL));
            } else {
                otter_tensor *wc;
                CHECK_OK(otter_tensor_clone(&wc, w));
                CHECK_OK(otter_graph_add_initializer(mod->graph, wc));
            }
            CHECK_OK(otter_graph_add_output(mod->graph, "y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
            otter_node *n;
            const char *cin[2] = {"x", "W"}, *cout[1] = {"y"};
            CHECK_OK(otter_node_create(&n, "Conv", "conv", 2, cin, 1, cout));
            CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
            CHECK_OK(otter_graph_add_node(mod->graph, n));
            otter_session *s = NULL;
            otter_session_options o = {.n_threads = 1, .opt_level = level, .opt_level_set = true};
            CHECK_OK(otter_session_create(&s, mod, &o));
            const otter_tensor *in1[2] = {x, w}, *in2[2] = {x, w2};
            otter_tensor *y1 = NULL, *y2 = NULL;
            if (s) CHECK_OK(otter_session_run(s, (size_t)(1 + as_input), NULL, in1, 1, NULL, &y1));
            if (s) CHECK_OK(otter_session_run(s, (size_t)(1 + as_input), NULL, as_input ? in2 : in1, 1, NULL, &y2));
            bool ok = y1 && y2 && otter_tensor_numel(y1) == otter_tensor_numel(y2);
            for (int64_t i = 0; ok && i < otter_tensor_numel(y1); i++)
                ok = ((float *)y2->data)[i] == (as_input ? 2.0f : 1.0f) * ((float *)y1->data)[i];
            CHECK(ok);
            printf("  W %s, level %d: second run %s\n", as_input ? "a graph input" : "an initializer", level,
                   ok ? (as_input ? "sees the new weights" : "gives the same bits") : "WRONG");
            otter_tensor_free(y1), otter_tensor_free(y2);
            otter_session_free(s);
            otter_model_free(mod);
        }
    otter_tensor_free(x), otter_tensor_free(w), otter_tensor_free(w2);
}

int main(void) {
    weight_cache_case();
    printf("Conv vs direct loops:\n");
    const conv_case cases[] = {
        /* 3x3 stride 1 */
        {2, 8, 8, 8, 8, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {3, 16, 7, 9, 12, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {1, 9, 5, 6, 17, 3, 3, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {2, 8, 11, 4, 8, 3, 3, 1, {2, 0, 1, 2}, {1, 1}, {1, 1}, false},
        {5, 32, 16, 16, 64, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* Winograd (16+ channels; F(2x2): rows of 8+ tiles, 64+ tiles a thread; F(4x4): rows of 4+, 32+ tiles):
         * partial tiles, asymmetric pads, residual, pooling with whole and partial tiles, 64 channels */
        {2, 16, 20, 18, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {3, 16, 15, 17, 20, 3, 3, 1, {2, 0, 1, 2}, {1, 1}, {1, 1}, false},
        {2, 16, 32, 32, 24, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {2, 24, 22, 26, 17, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {2, 64, 32, 32, 64, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* F(2x2) image by image at 1 thread (a batch of 4 chunks a thread or more), two images a chunk
         * (16 and 24 tiles an image: a block holds 32), an odd last chunk, partial tiles, pooling */
        {9, 16, 4, 16, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {9, 16, 5, 15, 20, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {40, 8, 3, 3, 8, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 16, 9, 9, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {3, 8, 2, 2, 8, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        /* + Relu + MaxPool 2x2: even and odd sizes (floor), rows narrower than 8, a residual, 5x5 */
        {2, 3, 32, 32, 32, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {3, 8, 9, 13, 10, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {2, 16, 6, 4, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true, true},
        {2, 4, 11, 12, 6, 5, 5, 1, {2, 2, 2, 2}, {1, 1}, {1, 1}, false, true},
        {2, 4, 11, 12, 6, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false, true},
        {2, 4, 7, 10, 6, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false, true}, /* 1x1: pooled after the product */
        /* C < 8, strides, groups, dilations, 1x1, 5x5 */
        {2, 4, 8, 8, 8, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 16, 9, 10, 8, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
        {2, 16, 9, 10, 8, 3, 3, 2, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 16, 9, 10, 8, 3, 3, 1, {2, 2, 2, 2}, {1, 1}, {2, 2}, false},
        {2, 16, 9, 10, 8, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {2, 8, 9, 10, 8, 5, 5, 1, {2, 2, 2, 2}, {1, 1}, {1, 1}, false},
        /* batches of 4+ images a thread: padded and convolved image by image per thread, an image
         * count the threads don't divide; residual, pooling, stride 2, groups */
        {9, 16, 10, 12, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {9, 8, 12, 10, 12, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {9, 16, 9, 10, 8, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
        {8, 16, 9, 10, 8, 3, 3, 2, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* depthwise (group == C: conv_depthwise.c): 3x3 and 5x5, strides 1 and 2, a channel multiplier of 2,
         * dilations, residual + Relu and Relu + MaxPool fused, a 4x4 plane */
        {3, 16, 9, 11, 16, 3, 3, 16, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {2, 12, 13, 10, 12, 5, 5, 12, {2, 2, 2, 2}, {2, 2}, {1, 1}, false},
        {2, 6, 9, 7, 12, 3, 3, 6, {1, 0, 2, 1}, {1, 2}, {2, 1}, false},
        {2, 8, 10, 12, 8, 3, 3, 8, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {1, 32, 4, 4, 32, 3, 3, 32, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
        /* channel blocks of 16 + 16 + 5 over 5 images: the threads' shares start inside a block */
        {5, 37, 6, 7, 37, 3, 3, 37, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        /* small images in groups: the direct kernel (one group goes to the product below) with rows
         * narrower than 8, pooled, residual, many images */
        {3, 8, 2, 2, 8, 3, 3, 2, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {2, 16, 6, 4, 16, 3, 3, 2, {1, 1, 1, 1}, {1, 1}, {1, 1}, true, true},
        {40, 8, 3, 3, 8, 3, 3, 2, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* fewer than 64 positions an image, one group: the positions of the batch as the rows of one
         * product with W^T packed once (nn_conv.c); 3x3 and 1x1, stride 2 (ResNet's downsampling),
         * residual, pooling, 2x2 outputs, a batch cut into chunks (40 x 49 positions x 592 columns) */
        {1, 64, 4, 4, 64, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {3, 32, 2, 2, 40, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 24, 8, 8, 36, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
        {5, 32, 8, 7, 20, 1, 1, 1, {0, 0, 0, 0}, {2, 2}, {1, 1}, false},
        {2, 48, 5, 5, 48, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true},
        {2, 16, 6, 6, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true, true},
        {40, 64, 7, 7, 16, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* one image, 5 MFLOP or more (less runs on one thread): its columns made in channel ranges on
         * the threads, ranges the channels don't divide evenly (3x3 and 1x1) */
        {1, 130, 4, 4, 130, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {1, 130, 4, 4, 260, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {1, 601, 5, 5, 200, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        /* output channels and positions off the 4 x 4 transposes back to planes, residual; off the
         * AVX-512 16 x 16 ones both ways (1x1: 40 = 16 + 16 + 8 channels, 36 = 16 + 16 + 4 positions) */
        {2, 18, 3, 3, 18, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true},
        {3, 40, 6, 6, 40, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true},
        /* the AVX-512 tiles (12 channels x two tiles of 16): ResNet's 7x7 stride-2 stem (rows of 4 x 8 positions in
         * one load), blocks of 12 + 1 and 12 + 12 + 5 channels (zero-padded weights), an odd tile count, rows
         * of 8 + 3 */
        {2, 3, 40, 38, 64, 7, 7, 1, {3, 3, 3, 3}, {2, 2}, {1, 1}, false},
        {3, 8, 5, 11, 13, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false, true},
        {2, 29, 9, 11, 29, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        /* output channels in the lanes (conv_lanes.c, AVX-512; 16+ positions, channels a multiple of 16):
         * 7x7 (tiles of 6 positions across rows, 8 x 6 + 1), blocks of 64 + 16 channels, 48 (3 vectors),
         * 14x14 (3 chunks of positions), taps in passes of 128 (32 x 3 x 3 = 288), residual, one image on 2
         * threads (its items shared: 8 MFLOP), stride 2, dilation 2, a pad at the end only (a padded copy),
         * 1x1 read in place at strides 1 and 2, 1x1 to few channels at 8x8; 1x1 to channels a multiple of
         * 8 (the last vector half empty): 96 -> 40 and 64 -> 24 */
        {3, 32, 7, 7, 80, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 32, 14, 14, 32, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {1, 48, 14, 14, 48, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true},
        {2, 16, 15, 13, 48, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false},
        {2, 16, 11, 12, 16, 3, 3, 1, {2, 2, 2, 2}, {1, 1}, {2, 2}, false},
        {2, 8, 8, 7, 32, 3, 3, 1, {0, 0, 1, 1}, {1, 1}, {1, 1}, false},
        {2, 64, 7, 7, 128, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {2, 64, 13, 13, 32, 1, 1, 1, {0, 0, 0, 0}, {2, 2}, {1, 1}, false},
        {2, 144, 8, 8, 32, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {2, 96, 7, 7, 40, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {3, 64, 6, 6, 24, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        /* small maps under more than 512 KB of weights: items of whole images (1x1 at 6x5 in runs of 2 and 3 of 5
         * images, residual; 3x3 at 4x4 with 4 blocks of channels), the taps of a pass in two streams (57 x 3 x 3
         * = 513: passes of 128 and a last one of 1 tap; one image at 2x2, tiles of 4 positions) */
        {5, 384, 6, 5, 384, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true},
        {5, 64, 4, 4, 256, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {1, 57, 4, 4, 256, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        {1, 57, 2, 2, 256, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, false},
        /* 1x1 maps (squeeze-excitation's fully connected layers): one product straight into Y with the
         * bias and Relu; with a residual, the small-image product's way */
        {32, 48, 1, 1, 96, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false, false, true},
        {5, 601, 1, 1, 37, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, false},
        {3, 20, 1, 1, 20, 1, 1, 1, {0, 0, 0, 0}, {1, 1}, {1, 1}, true},
        /* weights an input, 16+ images, maps of up to 64 positions: the images in the lanes, only the
         * taps inside the maps (conv_small.c, AVX-512 and AVX2): ResNet-18's 2x2 layer with a residual; stride
         * 2 over a partial block of 20 images (AVX2: 16 + 4), 40 channels (AVX2: 6 x 6 + 4); 6x7 outputs, pads
         * (0,1,2,1), dilation 2, 29 = 12 + 12 + 5 channels (AVX2: 6 x 4 + 5), 17 summed (a pass of 16 and 1), 40
         * images (32 + 8; AVX2: 16 + 16 + 8), Relu; 1x1 stride 2 (AVX-512 only) */
        {32, 64, 2, 2, 64, 3, 3, 1, {1, 1, 1, 1}, {1, 1}, {1, 1}, true, false, false, true},
        {20, 24, 8, 8, 40, 3, 3, 1, {1, 1, 1, 1}, {2, 2}, {1, 1}, false, false, false, true},
        {40, 17, 8, 7, 29, 3, 3, 1, {0, 1, 2, 1}, {1, 1}, {2, 2}, false, false, true, true},
        {16, 16, 9, 9, 16, 1, 1, 1, {0, 0, 0, 0}, {2, 2}, {1, 1}, false, false, false, true},
    };
    /* every path the direct kernel has on this CPU (its choice of Winograd and of the small-image
     * product follows the path) */
    const int best = (int)ot_conv_direct_isa();
    for (int isa = best; isa == best || isa >= (int)OT_CONV_ISA_AVX2; isa--) {
        ot_conv_direct_cap_isa((ot_conv_isa)isa);
        printf("direct kernel path %s:\n", isa == OT_CONV_ISA_AVX512 ? "avx512"
                                           : isa == OT_CONV_ISA_AVX2 ? "avx2"
                                                                     : "none");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    }
    ot_conv_direct_cap_isa(OT_CONV_ISA_AVX512);
    printf("worst relative error %.2e\n", worst);
    return tu_finish("test_conv_algos");
}
