/* The channel-blocked layout (runtime/layout.c): chains of convolutions, max pools and channel
 * Concats run on [N][C / B][H][W][B] blocks, B = 16 on AVX-512 and 8 on AVX2; every check runs at each block the
 * CPU has (an AVX-512 CPU also at 8, its direct kernel capped to AVX2).
 *
 * A SqueezeNet-like graph (a stem convolution from 3 channels, a ceil-mode max pool, fire modules of a
 * 1x1 squeeze and 1x1 / 3x3 expands concatenated, a padded stride-2 convolution, a max pool that
 * pads, a final convolution to 10 channels) runs at opt level 1 (planar, unfused) and 2 (blocked) for
 * batch 1 and 3 (the kernels' two ways of sharing work), 1 and 2 threads: every output must agree
 * within 1e-5 relative to 1e-3 + |a| (the paths sum the same products in other orders; the blocked
 * pooling and reorders are exact), a value in the middle of the chain is also a graph output (given
 * back by FromChannelBlocks), and the level-2 graph must hold the blocked nodes the pass promises
 * (with a block; none without, and the outputs still agree, within 1e-4 where Winograd runs), MaxPools joined to the
 * convolutions they read where nothing else reads those (image by image, or from scratch) and their shapes inferred.
 * Graphs the pass must leave planar: a lone convolution pair whose every value is read outside, a convolution with a
 * sum input. The blocked kernels reject what they can't run (and kernel_parts that don't fit the kernel) with errors
 * that name the tensor. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "otter/otter.h"
#include "runtime/ops/channel_blocks.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/conv_direct.h"
#include "testutil.h"

static double worst;
static int64_t block; /* the channel block the checks run at (ot_channel_block()), 0: none */

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void add_init(otter_model *m, const char *name, int rank, const int64_t *dims, unsigned seed, float scale) {
    otter_tensor *t;
    CHECK_OK(otter_tensor_create(&t, name, OTTER_DTYPE_FLOAT, rank, dims));
    float *d = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) d[i] = scale * frand(&seed);
    CHECK_OK(otter_graph_add_initializer(m->graph, t));
}

static otter_node *add_node(otter_model *m, const char *op, size_t ni, const char *const *in, const char *out) {
    otter_node *n;
    CHECK_OK(otter_node_create(&n, op, out, ni, in, 1, &out));
    CHECK_OK(otter_graph_add_node(m->graph, n));
    return n;
}

/* out = Relu(Conv(x, W_out [M, C, k, k], B_out)) with pads p, stride s. */
static void conv_relu(otter_model *m, const char *x, const char *out, int64_t C, int64_t M, int64_t k, int64_t p,
                      int64_t s, bool relu) {
    static unsigned seed = 100;
    char w[64], b[64], c[64];
    snprintf(w, sizeof w, "W_%s", out), snprintf(b, sizeof b, "B_%s", out), snprintf(c, sizeof c, "c_%s", out);
    const int64_t wd[4] = {M, C, k, k};
    add_init(m, w, 4, wd, seed++, 1.0f / sqrtf((float)(C * k * k)));
    add_init(m, b, 1, wd, seed++, 0.1f);
    otter_node *n = add_node(m, "Conv", 3, (const char *[]){x, w, b}, relu ? c : out);
    const int64_t pads[4] = {p, p, p, p}, strides[2] = {s, s};
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, strides));
    if (relu) add_node(m, "Relu", 1, (const char *[]){c}, out);
}

/* out = Relu(depthwise Conv(x, C channels, k x k, pads p, stride s)). */
static void depthwise_relu(otter_model *m, const char *x, const char *out, int64_t C, int64_t k, int64_t p, int64_t s) {
    static unsigned seed = 500;
    char w[64], b[64], c[64];
    snprintf(w, sizeof w, "W_%s", out), snprintf(b, sizeof b, "B_%s", out), snprintf(c, sizeof c, "c_%s", out);
    const int64_t wd[4] = {C, 1, k, k};
    add_init(m, w, 4, wd, seed++, 1.0f / (float)k);
    add_init(m, b, 1, wd, seed++, 0.1f);
    otter_node *n = add_node(m, "Conv", 3, (const char *[]){x, w, b}, c);
    const int64_t pads[4] = {p, p, p, p}, strides[2] = {s, s};
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, strides));
    CHECK_OK(otter_node_set_attr_int(n, "group", C));
    add_node(m, "Relu", 1, (const char *[]){c}, out);
}

static void maxpool(otter_model *m, const char *x, const char *out, int64_t k, int64_t s, int64_t p, bool ceil) {
    otter_node *n = add_node(m, "MaxPool", 1, (const char *[]){x}, out);
    const int64_t ks[2] = {k, k}, st[2] = {s, s}, pads[4] = {p, p, p, p};
    CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, ks));
    CHECK_OK(otter_node_set_attr_ints(n, "strides", 2, st));
    CHECK_OK(otter_node_set_attr_ints(n, "pads", 4, pads));
    CHECK_OK(otter_node_set_attr_int(n, "ceil_mode", ceil));
}

/* squeeze C -> S, expands S -> E (1x1) and S -> E (3x3), concatenated: 2 E channels */
static void fire(otter_model *m, const char *x, const char *out, int64_t C, int64_t S, int64_t E) {
    char s[64], e1[64], e3[64];
    snprintf(s, sizeof s, "%s_s", out), snprintf(e1, sizeof e1, "%s_e1", out), snprintf(e3, sizeof e3, "%s_e3", out);
    conv_relu(m, x, s, C, S, 1, 0, 1, true);
    conv_relu(m, s, e1, S, E, 1, 0, 1, true);
    conv_relu(m, s, e3, S, E, 3, 1, 1, true);
    otter_node *n = add_node(m, "Concat", 2, (const char *[]){e1, e3}, out);
    CHECK_OK(otter_node_set_attr_int(n, "axis", 1));
}

static otter_model *new_model(const char *const *outs, size_t n_outs) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "blocks", 17));
    const int64_t xd[4] = {-1, 3, 21, 19};
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 4, xd, NULL));
    for (size_t i = 0; i < n_outs; i++)
        CHECK_OK(otter_graph_add_output(m->graph, outs[i], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    return m;
}

static otter_model *squeeze_model(void) {
    otter_model *m = new_model((const char *[]){"y", "f2"}, 2);
    conv_relu(m, "x", "stem", 3, 32, 3, 1, 1, true);   /* 21 x 19 */
    maxpool(m, "stem", "p1", 3, 2, 0, true);           /* 10 x 9 (ceil) */
    fire(m, "p1", "f1", 32, 16, 32);                   /* 64 channels */
    fire(m, "f1", "f2", 64, 16, 48);                   /* 96 channels, also a graph output */
    conv_relu(m, "f2", "down", 96, 64, 3, 1, 2, true); /* 5 x 5, padded, stride 2 */
    maxpool(m, "down", "p2", 2, 1, 1, false);          /* 6 x 6: pads (-inf) */
    fire(m, "p2", "f3", 64, 32, 64);                   /* 128 channels */
    conv_relu(m, "f3", "y", 128, 10, 1, 0, 1, false);  /* 10 channels: planar */
    return m;
}

/* The level-2 graph's nodes: blocked convolutions, blocked pools, reorders, Concats of blocks. */
typedef struct counts {
    size_t conv, pool, gap, back;
    size_t pooled; /* convolutions a MaxPool joined */
} counts;

static counts count_blocked(const otter_graph *g) {
    counts c = {0, 0, 0, 0, 0};
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        if (!n->domain || strcmp(n->domain, "com.otter") != 0) continue;
        c.conv += !strcmp(n->op_type, "FusedConv") && otter_node_attr_int(n, "channel_blocks", 0) == block;
        c.pool += !strcmp(n->op_type, "BlockedMaxPool");
        c.pooled += !strcmp(n->op_type, "FusedConv") && otter_node_attr(n, "maxpool_kernel_shape");
        c.gap += !strcmp(n->op_type, "BlockedGlobalAveragePool");
        c.back += !strcmp(n->op_type, "FromChannelBlocks");
    }
    return c;
}

static bool blocks_possible(void) { return block > 0; }

/* Levels 1 and 2 agree on every output; the level-2 graph's counts into *c. Without AVX-512, level 2
 * runs the 3x3 convolutions it leaves planar by Winograd F(2x2, 3x3) where it pays off, whose transforms
 * round otherwise than the direct kernel's sums (test_conv_algos bounds it against float64): 4.0e-5
 * measured here (AVX2, "two convolutions read outside"), against 1e-5 for the same products summed in
 * other orders. */
static void compare(const char *what, const otter_model *m, int64_t batch, int threads, counts *c) {
    const double tol = ot_conv_direct_isa() == OT_CONV_ISA_AVX512 ? 1e-5 : 1e-4;
    const int64_t xd[4] = {batch, 3, 21, 19};
    otter_tensor *x;
    CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, 4, xd));
    unsigned seed = 7;
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) ((float *)x->data)[i] = frand(&seed);
    const size_t n_out = m->graph->n_outputs;
    otter_tensor *y[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int lvl = 1; lvl <= 2; lvl++) {
        otter_session *s = NULL;
        const otter_session_options o = {.n_threads = threads, .opt_level = lvl, .opt_level_set = true};
        CHECK_OK(otter_session_create(&s, m, &o));
        if (!s) return;
        const otter_tensor *in[1] = {x};
        /* twice: the second run is on the planned arena */
        for (int r = 0; r < 2; r++) {
            for (size_t i = 0; i < n_out; i++) otter_tensor_free(y[lvl - 1][i]), y[lvl - 1][i] = NULL;
            CHECK_OK(otter_session_run(s, 1, NULL, in, n_out, NULL, y[lvl - 1]));
        }
        if (lvl == 2) *c = count_blocked(otter_session_model(s)->graph);
        otter_session_free(s);
    }
    double err = 0;
    for (size_t i = 0; i < n_out; i++) {
        const otter_tensor *a = y[0][i], *b = y[1][i];
        const bool same = a && b && a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
        CHECK(same);
        for (int64_t k = 0; same && k < otter_tensor_numel(a); k++) {
            const double u = ((const float *)a->data)[k], v = ((const float *)b->data)[k];
            err = tu_worse(err, fabs(u - v) / (1e-3 + fabs(u)));
        }
        otter_tensor_free(y[0][i]), otter_tensor_free(y[1][i]);
    }
    CHECK(err < tol);
    worst = tu_worse(worst, err);
    printf("  %-34s batch %lld, %d thread(s): %zu blocked convolutions, %zu blocked pools, %zu blocked "
           "GlobalAveragePools, %zu reorders, %zu pools joined; worst relative difference %.2e\n",
           what, (long long)batch, threads, c->conv, c->pool, c->gap, c->back, c->pooled, err);
    otter_tensor_free(x);
}

/* compare at batch 1 and 3 (the kernels' two ways of sharing work), 1 and 2 threads; each level-2 graph must hold
 * the nodes `want` counts with a block, none without */
static void compare_each(const char *what, const otter_model *m, counts want) {
    const bool on = blocks_possible();
    for (int64_t batch = 1; batch <= 3; batch += 2)
        for (int threads = 1; threads <= 2; threads++) {
            counts c;
            compare(what, m, batch, threads, &c);
            CHECK(c.conv == (on ? want.conv : 0u) && c.pool == (on ? want.pool : 0u) && c.gap == (on ? want.gap : 0u) &&
                  c.back == (on ? want.back : 0u) && c.pooled == (on ? want.pooled : 0u));
        }
}

static void check_squeeze(void) {
    otter_model *m = squeeze_model();
    /* the 12 convolutions but the last (10 channels), each fire's two expands as one (fuse.c); both pools joined to
     * the convolutions they read (the stem's, padded, image by image at batch 3); f2 back, and f3 for the 10-channel
     * convolution */
    compare_each("squeeze chain", m, (counts){.conv = 8, .back = 2, .pooled = 2});
    otter_model_free(m);
}

/* Two convolutions whose values are both read outside: 1 edge, 2 reorders: left planar. */
static void check_left_planar(void) {
    otter_model *m = new_model((const char *[]){"a", "b"}, 2);
    conv_relu(m, "x", "a", 3, 16, 3, 1, 1, true);
    conv_relu(m, "a", "b", 16, 16, 3, 1, 1, true);
    counts c;
    compare("two convolutions read outside", m, 2, 1, &c);
    CHECK(c.conv == 0 && c.pool == 0 && c.back == 0);
    otter_model_free(m);
}

/* Residual sums (an Add fused into the convolution as its sum input Z): Z of the result's shape, Z
 * of [N, 32, 1, 1] (a convolution striding past the map) broadcast over it, an Add of two blocked values
 * that stays an Add, a GlobalAveragePool ending the chain; Z from a planar value leaves that
 * convolution planar. */
static void check_residuals(void) {
    const bool on = blocks_possible();
    otter_model *m = new_model((const char *[]){"y", "g"}, 2);
    conv_relu(m, "x", "a", 3, 16, 3, 1, 1, true);
    conv_relu(m, "a", "b", 16, 16, 3, 1, 1, false);
    add_node(m, "Add", 2, (const char *[]){"b", "a"}, "s"); /* Z: a */
    conv_relu(m, "s", "whole", 16, 32, 1, 0, 1, false);
    const int64_t wd[4] = {32, 16, 3, 3}, strides[2] = {21, 21};
    add_init(m, "W_z1", 4, wd, 9, 0.1f);
    otter_node *z1 = add_node(m, "Conv", 2, (const char *[]){"s", "W_z1"}, "z1"); /* [N, 32, 1, 1] */
    CHECK_OK(otter_node_set_attr_ints(z1, "strides", 2, strides));
    add_node(m, "Add", 2, (const char *[]){"whole", "z1"}, "t"); /* Z: z1, broadcast */
    add_node(m, "Relu", 1, (const char *[]){"t"}, "u");
    conv_relu(m, "u", "v", 32, 32, 3, 1, 1, true);
    add_node(m, "Add", 2, (const char *[]){"v", "u"}, "w"); /* both read elsewhere: a plain Add of blocks */
    conv_relu(m, "w", "y", 32, 16, 1, 0, 1, true);
    add_node(m, "GlobalAveragePool", 1, (const char *[]){"w"}, "g");
    counts c;
    for (int threads = 1; threads <= 2; threads++) {
        compare("residual sums", m, 3, threads, &c);
        CHECK(c.conv == (on ? 6u : 0u));
        CHECK(c.gap == (on ? 1u : 0u));
        CHECK(c.back == (on ? 1u : 0u)); /* y, a graph output */
    }
    otter_model_free(m);

    m = new_model((const char *[]){"y"}, 1);
    conv_relu(m, "x", "a", 3, 16, 3, 1, 1, true);
    conv_relu(m, "a", "b", 16, 16, 3, 1, 1, true);
    conv_relu(m, "b", "d", 16, 16, 3, 1, 1, true);
    conv_relu(m, "d", "e", 16, 16, 3, 1, 1, true);
    add_node(m, "Neg", 1, (const char *[]){"e"}, "ne"); /* planar */
    conv_relu(m, "e", "c", 16, 16, 1, 0, 1, false);
    add_node(m, "Add", 2, (const char *[]){"c", "ne"}, "y"); /* Z planar: c stays planar */
    compare("a sum input from a planar value", m, 2, 1, &c);
    CHECK(c.conv == (on ? 4u : 0u) && c.back == (on ? 1u : 0u));
    otter_model_free(m);
}

/* A mobile-net chain: depthwise layers (stride 1, which the planar code runs without a padded copy,
 * and stride 2), a squeeze-excitation (GlobalAveragePool,
 * a planar 8-channel layer, a blocked one with Sigmoid, Mul broadcast over the map), an Add and a
 * HardSwish of blocks. */
static void check_mobile(void) {
    otter_model *m = new_model((const char *[]){"y"}, 1);
    conv_relu(m, "x", "stem", 3, 16, 3, 1, 2, true); /* 11 x 10 */
    depthwise_relu(m, "stem", "dw1", 16, 3, 1, 1);
    conv_relu(m, "dw1", "pw1", 16, 32, 1, 0, 1, false);
    conv_relu(m, "pw1", "ex", 32, 96, 1, 0, 1, true);
    depthwise_relu(m, "ex", "dw2", 96, 3, 1, 2); /* 6 x 5 */
    conv_relu(m, "dw2", "pr", 96, 32, 1, 0, 1, false);
    add_node(m, "GlobalAveragePool", 1, (const char *[]){"pr"}, "se_g");
    conv_relu(m, "se_g", "se1", 32, 8, 1, 0, 1, true);
    conv_relu(m, "se1", "se2", 8, 32, 1, 0, 1, false);
    add_node(m, "Sigmoid", 1, (const char *[]){"se2"}, "se_s");
    add_node(m, "Mul", 2, (const char *[]){"pr", "se_s"}, "se");
    add_node(m, "Add", 2, (const char *[]){"se", "pr"}, "sum");
    add_node(m, "HardSwish", 1, (const char *[]){"sum"}, "hs");
    conv_relu(m, "hs", "y", 32, 10, 1, 0, 1, false);
    /* all but the 10-channel layer and, in blocks of 16, the 8-channel one; hs back for the last */
    compare_each("mobile chain", m, (counts){.conv = block == 8 ? 8 : 7, .gap = 1, .back = 1});
    otter_model_free(m);
}

/* Small maps under weights that don't stay in L2 (conv_lanes.c runs whole images an item): 64 -> 256 channels,
 * 3x3 (590 KB of weights) at 6x5 positions, blocked in and out, with a residual sum and without; batch 5 on 1
 * and 2 threads (runs of 2 and 3 images), batch 1 image by image. */
static void check_small_maps(void) {
    const bool on = blocks_possible();
    otter_model *m = new_model((const char *[]){"y"}, 1);
    conv_relu(m, "x", "stem", 3, 32, 3, 1, 2, true);     /* 11 x 10 */
    conv_relu(m, "stem", "down", 32, 64, 3, 1, 2, true); /* 6 x 5 */
    conv_relu(m, "down", "wide", 64, 256, 3, 1, 1, true);
    conv_relu(m, "wide", "wide2", 256, 256, 3, 1, 1, false);
    add_node(m, "Add", 2, (const char *[]){"wide2", "wide"}, "res");
    add_node(m, "Relu", 1, (const char *[]){"res"}, "r");
    conv_relu(m, "r", "y", 256, 10, 1, 0, 1, false);
    counts c;
    for (int64_t batch = 1; batch <= 5; batch += 4)
        for (int threads = 1; threads <= 2; threads++) {
            compare("small maps, large weights", m, batch, threads, &c);
            CHECK(c.conv == (on ? 4u : 0u) && c.back == (on ? 1u : 0u));
        }
    otter_model_free(m);
}

/* One com.otter node on x [2, 32, 5, 5] (or what shape says): its first run's status and error. */
static otter_status run_one(const char *op, size_t ni, const int64_t *xd, int xr, const int64_t *wd, int wr,
                            const int64_t *parts, size_t n_parts, char *err, size_t size) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "bad", 17));
    CHECK_OK(otter_model_set_opset(m, "com.otter", 1));
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, xr, xd, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    if (wd) add_init(m, "W", wr, wd, 3, 0.1f);
    otter_node *n = add_node(m, op, ni, (const char *[]){"x", "W"}, "y");
    CHECK_OK(otter_node_set_domain(n, "com.otter"));
    const int64_t ks[2] = {2, 2};
    if (!strcmp(op, "BlockedMaxPool")) CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, ks));
    if (!strcmp(op, "FusedConv")) CHECK_OK(otter_node_set_attr_int(n, "channel_blocks", block));
    const int64_t k3[2] = {3, 3};
    if (parts) CHECK_OK(otter_node_set_attr_ints(n, "kernel_parts", n_parts, parts));
    if (parts) CHECK_OK(otter_node_set_attr_ints(n, "kernel_shape", 2, k3));
    otter_session *s = NULL;
    otter_status st = otter_session_create(&s, m, NULL);
    otter_tensor *x = NULL, *y = NULL;
    if (st == OTTER_OK) st = otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, xr, xd);
    if (st == OTTER_OK) st = otter_session_run(s, 1, NULL, (const otter_tensor *[]){x}, 1, NULL, &y);
    snprintf(err, size, "%s", st == OTTER_OK ? "" : otter_last_error());
    otter_tensor_free(x), otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);
    return st;
}

static void check_errors(void) {
    char err[512];
    const int64_t planar[4] = {2, 32, 5, 5}, odd[5] = {2, 8, 5, 5, 4};
    CHECK(run_one("BlockedMaxPool", 1, planar, 4, NULL, 0, NULL, 0, err, sizeof err) == OTTER_ERR_INVALID);
    CHECK(strstr(err, "'x'") && strstr(err, "channel-blocked"));
    /* blocks of 4 channels: no vector path runs them */
    CHECK(run_one("FromChannelBlocks", 1, odd, 5, NULL, 0, NULL, 0, err, sizeof err) == OTTER_ERR_INVALID);
    CHECK(strstr(err, "'x'") && strstr(err, "[2,8,5,5,4]"));
    if (!blocks_possible()) return;
    const int64_t blocked[5] = {2, 32 / block, 5, 5, block};
    char multiple[32];
    snprintf(multiple, sizeof multiple, "multiple of %lld", (long long)block);
    /* 20 output channels are not whole blocks */
    const int64_t w20[4] = {20, 32, 3, 3};
    const otter_status st = run_one("FusedConv", 2, blocked, 5, w20, 4, NULL, 0, err, sizeof err);
    CHECK(st == OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(err, "'W'") && strstr(err, multiple));
    printf("  errors: %s\n", err);
    /* a 1-D convolution is neither planar [N, C, H, W] nor blocked */
    const int64_t x1[3] = {2, 32, 9}, w1[3] = {16, 32, 3};
    CHECK(run_one("FusedConv", 2, x1, 3, w1, 3, NULL, 0, err, sizeof err) == OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(err, "'x'") && strstr(err, "[2,32,9]"));
    printf("  errors: %s\n", err);
    /* kernel_parts (fuse.c's Concat of convolutions) whose part disagrees with its weight W, whose window
     * leaves the 3x3 kernel, or whose second part has no weight */
    const int64_t w32[4] = {32, 32, 3, 3}, half[5] = {16, 3, 3, 0, 0}, outside[5] = {32, 3, 3, 1, 0},
                  two[10] = {32, 3, 3, 0, 0, 16, 1, 1, 1, 1};
    CHECK(run_one("FusedConv", 2, blocked, 5, w32, 4, half, 5, err, sizeof err) == OTTER_ERR_INVALID);
    CHECK(strstr(err, "'W'") && strstr(err, "kernel_parts") && strstr(err, "[32,32,3,3]"));
    CHECK(run_one("FusedConv", 2, blocked, 5, w32, 4, outside, 5, err, sizeof err) == OTTER_ERR_INVALID);
    CHECK(strstr(err, "'W'") && strstr(err, "(1, 0)"));
    CHECK(run_one("FusedConv", 2, blocked, 5, w32, 4, two, 10, err, sizeof err) == OTTER_ERR_INVALID);
    CHECK(strstr(err, "part 1"));
    printf("  errors: %s\n", err);
    /* a blocked pool and reorder that work */
    CHECK(run_one("BlockedMaxPool", 1, blocked, 5, NULL, 0, NULL, 0, err, sizeof err) == OTTER_OK);
    CHECK(run_one("FromChannelBlocks", 1, blocked, 5, NULL, 0, NULL, 0, err, sizeof err) == OTTER_OK);
    /* a convolution asking for blocks this CPU doesn't run */
    const int64_t keep = block;
    block = 4;
    CHECK(run_one("FusedConv", 2, planar, 4, w32, 4, NULL, 0, err, sizeof err) == OTTER_ERR_UNSUPPORTED);
    CHECK(strstr(err, "channel_blocks 4"));
    block = keep;
    printf("  errors: %s\n", err);
}

/* MaxPools joined to the convolution they read (runtime/layout.c) where that convolution's result lands in scratch
 * first: after a depthwise layer, and after whole-image items of small maps under 590 KB of weights (64 -> 256 at
 * 6x5, batch 3); and one that stays a BlockedMaxPool because its convolution's result is also a graph output. */
static void check_pools(void) {
    const bool on = blocks_possible();
    otter_model *m = new_model((const char *[]){"y", "a"}, 2);
    conv_relu(m, "x", "a", 3, 16, 3, 1, 1, true); /* 21 x 19, a graph output too */
    maxpool(m, "a", "pa", 2, 2, 0, false);        /* 10 x 9 */
    depthwise_relu(m, "pa", "dw", 16, 3, 1, 1);
    maxpool(m, "dw", "pdw", 3, 2, 1, true); /* 6 x 5 */
    conv_relu(m, "pdw", "up", 16, 64, 1, 0, 1, true);
    conv_relu(m, "up", "wide", 64, 256, 3, 1, 1, true);
    maxpool(m, "wide", "pw", 2, 1, 0, false); /* 5 x 4 */
    conv_relu(m, "pw", "y", 256, 10, 1, 0, 1, false);
    /* a back, and pw for the 10-channel convolution */
    compare_each("pools joined and not", m, (counts){.conv = 4, .pool = 1, .back = 2, .pooled = 2});
    /* shape inference over the blocked graph: a joined convolution's result is the pooled blocks */
    otter_session *s = NULL;
    const otter_session_options o = {.n_threads = 1, .opt_level = 2, .opt_level_set = true};
    CHECK_OK(otter_session_create(&s, m, &o));
    otter_model *opt = NULL;
    if (s) CHECK_OK(otter_model_clone(&opt, otter_session_model(s)));
    if (opt) CHECK_OK(otter_model_infer_shapes(opt, NULL));
    size_t shaped = 0;
    for (size_t k = 0; opt && k < opt->graph->n_nodes; k++) {
        const otter_node *n = opt->graph->nodes[k];
        if (!otter_node_attr(n, "maxpool_kernel_shape")) continue;
        const int64_t want[2][3] = {{16 / block, 6, 5}, {256 / block, 5, 4}}; /* blocks, rows, columns: pdw's, pw's */
        const bool deep = otter_node_attr_int(n, "group", 1) == 1;
        for (size_t v = 0; v < opt->graph->n_value_info; v++) {
            const otter_type *t = &opt->graph->value_info[v].type;
            if (strcmp(opt->graph->value_info[v].name, n->outputs[0]) || t->rank != 5) continue;
            CHECK(t->dims[1].value == want[deep][0] && t->dims[2].value == want[deep][1] &&
                  t->dims[3].value == want[deep][2] && t->dims[4].value == block);
            shaped++;
        }
    }
    CHECK(shaped == (on ? 2u : 0u));
    otter_model_free(opt);
    otter_session_free(s);
    otter_model_free(m);
}

int main(void) {
    /* each block the CPU has: AVX-512's 16, then 8 with the direct kernel capped to AVX2 */
    for (bool capped = false;; capped = true) {
        block = ot_channel_block();
        printf("channel-blocked layout: %s\n", block == 16  ? "blocks of 16 (AVX-512)"
                                               : block == 8 ? "blocks of 8 (AVX2)"
                                                            : "no blocks, planar");
        check_squeeze();
        check_left_planar();
        check_residuals();
        check_mobile();
        check_small_maps();
        check_pools();
        check_errors();
        if (capped || block != 16) break;
        ot_conv_direct_cap_isa(OT_CONV_ISA_AVX2);
    }
    ot_conv_direct_cap_isa(OT_CONV_ISA_AVX512);
    printf("worst relative difference %.2e\n", worst);
    return tu_finish("test_channel_blocks");
}
