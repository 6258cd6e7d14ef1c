/* The transformer operators against naive references written here (in double), on odd sizes and the
 * combinations the ONNX suite doesn't hold:
 *   - Attention: GQA + past key/value + broadcast float mask shorter than the keys + is_causal +
 *     softcap + scale, all four outputs in each qk_matmul_output_mode; a bool mask with a fully
 *     masked row (zeros); 3D inputs with enough query rows for several row blocks on 2 threads;
 *     nonpad_kv_seqlen (opset 24) with the causal offset; error paths.
 *   - Gelu (exact, tanh), Swish, SwiGLU over [-12, 12] with a tail shorter than a vector.
 *   - RMSNormalization with a broadcast scale, RotaryEmbedding (interleaved, partial),
 *     LinearAttention (gated_delta, GQA, past state), CausalConvWithState (past state, silu). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

typedef struct attr {
    const char *name;
    char kind; /* 'i', 'f', 's' */
    int64_t i;
    float f;
    const char *s;
} attr;

/* One node "n" of op at opset (domain ""), inputs i0.. (NULL: omitted), outputs o0.. ("" where
 * want_out[k] is false); out[k] receives the tensors asked for. */
static otter_status run_node(const char *op, int opset, int threads, size_t n_in, const otter_tensor *const *in,
                             size_t n_out, const bool *want_out, const attr *attrs, size_t n_attrs,
                             otter_tensor **out) {
    static const char *const IN[] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6"};
    static const char *const OUT[] = {"o0", "o1", "o2", "o3"};
    const char *in_names[7], *out_names[4], *bound_names[7], *asked[4];
    const otter_tensor *bound[7];
    size_t n_bound = 0, n_asked = 0;
    for (size_t k = 0; k < n_in; k++) in_names[k] = in[k] ? IN[k] : "";
    for (size_t k = 0; k < n_out; k++) out_names[k] = !want_out || want_out[k] ? OUT[k] : "";
    otter_model *m = NULL;
    otter_status s = otter_model_create(&m, "g", opset);
    if (s) return s;
    otter_node *n = NULL;
    s = otter_node_create(&n, op, "n", n_in, in_names, n_out, out_names);
    for (size_t k = 0; !s && k < n_attrs; k++) {
        const attr *a = &attrs[k];
        s = a->kind == 'i'   ? otter_node_set_attr_int(n, a->name, a->i)
            : a->kind == 'f' ? otter_node_set_attr_float(n, a->name, a->f)
                             : otter_node_set_attr_string(n, a->name, a->s);
    }
    if (!s)
        s = otter_graph_add_node(m->graph, n);
    else
        otter_node_free(n);
    for (size_t k = 0; !s && k < n_in; k++)
        if (in[k]) {
            s = otter_graph_add_input(m->graph, IN[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL);
            bound_names[n_bound] = IN[k];
            bound[n_bound++] = in[k];
        }
    for (size_t k = 0; !s && k < n_out; k++)
        if (*out_names[k]) {
            s = otter_graph_add_output(m->graph, OUT[k], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
            asked[n_asked++] = OUT[k];
        }
    otter_session *sess = NULL;
    otter_session_options o = {.n_threads = threads};
    if (!s) s = otter_session_create(&sess, m, &o);
    otter_tensor *got[4] = {0};
    if (!s) s = otter_session_run(sess, n_bound, bound_names, bound, n_asked, asked, got);
    for (size_t k = 0, j = 0; k < n_out; k++) out[k] = *out_names[k] && !s ? got[j++] : NULL;
    otter_session_free(sess);
    otter_model_free(m);
    return s;
}

static unsigned seed = 12345;
static float uniform(float lo, float hi) {
    seed = seed * 1103515245u + 12345u;
    return lo + (hi - lo) * (float)((seed >> 8) & 0xffff) / 65535.0f;
}

static otter_tensor *rand_tensor(int rank, const int64_t *dims, float lo, float hi) {
    otter_tensor *t = NULL;
    otter_tensor_create(&t, NULL, OTTER_DTYPE_FLOAT, rank, dims);
    float *p = t->data;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) p[i] = uniform(lo, hi);
    return t;
}

static bool same_shape(const otter_tensor *t, int rank, const int64_t *dims) {
    if (!t || t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

/* max |got - want| / (1 + |want|) over n values; NaN-safe */
static double rel_err(const otter_tensor *got, const double *want, int64_t n) {
    double worst = 0;
    const float *g = got->data;
    for (int64_t i = 0; i < n; i++) worst = tu_worse(worst, fabs(g[i] - want[i]) / (1 + fabs(want[i])));
    return worst;
}

/* ---- Attention ------------------------------------------------------------------------------- */

typedef struct attn_case {
    int64_t batch, q_heads, kv_heads, q_len, kv_len, past, head, v_head;
    bool three_d, causal;
    float scale, softcap; /* scale 0: default */
    int mask_kind;        /* 0 none, 1 float, 2 bool */
    int mask_rank;
    int64_t mask_dims[4];
    const int64_t *nonpad;
} attn_case;

/* The reference: the 4D layout of element (b, h, s, d) of a 3D or 4D Q/K/V/Y. */
static int64_t at4(const attn_case *c, bool three_d, int64_t heads, int64_t len, int64_t width, int64_t b, int64_t h,
                   int64_t s, int64_t d) {
    return three_d ? ((b * len + s) * heads + h) * width + d : ((b * heads + h) * len + s) * width + d;
}

/* y [B, Hq, Sq, Dv] layout per c->three_d; qk [B, Hq, Sq, T] for the given mode. */
static void attention_ref(const attn_case *c, const float *q, const float *k, const float *v, const void *mask,
                          const float *pk, const float *pv, int mode, double *y, double *qk) {
    int64_t T = c->past + c->kv_len, group = c->q_heads / c->kv_heads;
    double scale = c->scale ? c->scale : 1 / sqrt((double)c->head);
    double *row = malloc((size_t)T * sizeof *row);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->q_heads; h++)
            for (int64_t i = 0; i < c->q_len; i++) {
                int64_t kh = h / group;
                int64_t offset = c->nonpad && !c->past ? c->nonpad[b] - c->q_len : c->past;
                for (int64_t j = 0; j < T; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < c->head; d++) {
                        double kv = j < c->past
                                        ? pk[((b * c->kv_heads + kh) * c->past + j) * c->head + d]
                                        : k[at4(c, c->three_d, c->kv_heads, c->kv_len, c->head, b, kh, j - c->past, d)];
                        dot += q[at4(c, c->three_d, c->q_heads, c->q_len, c->head, b, h, i, d)] * kv;
                    }
                    double sc = dot * scale;
                    if (c->softcap > 0) sc = c->softcap * tanh(sc / c->softcap);
                    double *qk_row = qk + ((b * c->q_heads + h) * c->q_len + i) * T;
                    if (mode <= 1) qk_row[j] = sc;
                    if (c->mask_kind) {
                        int64_t len = c->mask_dims[c->mask_rank - 1], idx[4] = {b, h, i, j}, off = 0, stride = 1;
                        for (int d = c->mask_rank - 1; d >= 0; d--) {
                            int64_t md = c->mask_dims[d], full = idx[4 - c->mask_rank + d];
                            off += (md == 1 ? 0 : full) * stride;
                            stride *= md;
                        }
                        if (j >= len)
                            sc = -INFINITY;
                        else if (c->mask_kind == 1)
                            sc += ((const float *)mask)[off];
                        else if (!((const unsigned char *)mask)[off])
                            sc = -INFINITY;
                    }
                    if (c->causal && j > i + offset) sc = -INFINITY;
                    if (c->nonpad && j >= c->nonpad[b]) sc = -INFINITY;
                    if (mode == 2) qk_row[j] = sc;
                    row[j] = sc;
                }
                double max = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) max = fmax(max, row[j]);
                for (int64_t j = 0; j < T; j++) sum += row[j] = max == -INFINITY ? 0 : exp(row[j] - max);
                for (int64_t j = 0; j < T; j++) row[j] = sum > 0 ? row[j] / sum : 0;
                if (mode == 3) memcpy(qk + ((b * c->q_heads + h) * c->q_len + i) * T, row, (size_t)T * sizeof *row);
                for (int64_t d = 0; d < c->v_head; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++) {
                        double vv =
                            j < c->past
                                ? pv[((b * c->kv_heads + kh) * c->past + j) * c->v_head + d]
                                : v[at4(c, c->three_d, c->kv_heads, c->kv_len, c->v_head, b, kh, j - c->past, d)];
                        acc += row[j] * vv;
                    }
                    y[at4(c, c->three_d, c->q_heads, c->q_len, c->v_head, b, h, i, d)] = acc;
                }
            }
    free(row);
}

static void run_attention_case(const char *what, const attn_case *c, int threads) {
    int64_t T = c->past + c->kv_len;
    int64_t qd[4] = {c->batch, c->q_heads, c->q_len, c->head}, kd[4] = {c->batch, c->kv_heads, c->kv_len, c->head};
    int64_t vd[4] = {c->batch, c->kv_heads, c->kv_len, c->v_head};
    int64_t pkd[4] = {c->batch, c->kv_heads, c->past, c->head}, pvd[4] = {c->batch, c->kv_heads, c->past, c->v_head};
    int64_t q3[3] = {c->batch, c->q_len, c->q_heads * c->head}, k3[3] = {c->batch, c->kv_len, c->kv_heads * c->head};
    int64_t v3[3] = {c->batch, c->kv_len, c->kv_heads * c->v_head};
    int rank = c->three_d ? 3 : 4;
    otter_tensor *in[7] = {rand_tensor(rank, c->three_d ? q3 : qd, -1, 1),
                           rand_tensor(rank, c->three_d ? k3 : kd, -1, 1),
                           rand_tensor(rank, c->three_d ? v3 : vd, -1, 1)};
    if (c->mask_kind == 1) in[3] = rand_tensor(c->mask_rank, c->mask_dims, -2, 1);
    if (c->mask_kind == 2) {
        otter_tensor_create(&in[3], NULL, OTTER_DTYPE_BOOL, c->mask_rank, c->mask_dims);
        unsigned char *m = in[3]->data;
        for (int64_t i = 0; i < otter_tensor_numel(in[3]); i++) m[i] = uniform(0, 1) < 0.7f;
        memset(m, 0, (size_t)c->mask_dims[c->mask_rank - 1]); /* the first mask row: fully masked */
    }
    if (c->past) in[4] = rand_tensor(4, pkd, -1, 1), in[5] = rand_tensor(4, pvd, -1, 1);
    if (c->nonpad) {
        int64_t nd[1] = {c->batch};
        otter_tensor_from_data(&in[6], NULL, OTTER_DTYPE_INT64, 1, nd, c->nonpad);
    }
    attr attrs[6];
    size_t na = 0;
    if (c->three_d) {
        attrs[na++] = (attr){"q_num_heads", 'i', c->q_heads};
        attrs[na++] = (attr){"kv_num_heads", 'i', c->kv_heads};
    }
    if (c->causal) attrs[na++] = (attr){"is_causal", 'i', 1};
    if (c->scale) attrs[na++] = (attr){"scale", 'f', 0, c->scale};
    if (c->softcap) attrs[na++] = (attr){"softcap", 'f', 0, c->softcap};
    int64_t n_y = c->batch * c->q_heads * c->q_len * c->v_head, n_qk = c->batch * c->q_heads * c->q_len * T;
    double *y = malloc((size_t)n_y * sizeof *y), *qk = malloc((size_t)n_qk * sizeof *qk);
    /* modes 0-3 with qk_matmul_output; "mode" 4: without it, where keys no row attends are skipped */
    for (int mode = 0; mode <= 4; mode++) {
        attrs[na] = (attr){"qk_matmul_output_mode", 'i', mode % 4};
        otter_tensor *out[4] = {0};
        bool want[4] = {true, c->past > 0, c->past > 0, mode < 4};
        CHECK_OK(run_node("Attention", c->nonpad ? 24 : 23, threads, 7, (const otter_tensor *const *)in, 4, want, attrs,
                          na + 1, out));
        attention_ref(c, in[0]->data, in[1]->data, in[2]->data, in[3] ? in[3]->data : NULL, in[4] ? in[4]->data : NULL,
                      in[5] ? in[5]->data : NULL, mode % 4, y, qk);
        int64_t yd[4] = {c->batch, c->q_heads, c->q_len, c->v_head},
                y3[3] = {c->batch, c->q_len, c->q_heads * c->v_head};
        int64_t qkd[4] = {c->batch, c->q_heads, c->q_len, T};
        CHECK(same_shape(out[0], rank, c->three_d ? y3 : yd));
        if (mode < 4) CHECK(same_shape(out[3], 4, qkd));
        double ey = out[0] ? rel_err(out[0], y, n_y) : NAN, eq = NAN;
        if (out[3]) {
            /* masked scores are -inf on both sides in mode 2: compare where the reference is finite */
            const float *g = out[3]->data;
            eq = 0;
            for (int64_t i = 0; i < n_qk; i++)
                eq = tu_worse(eq,
                              isinf(qk[i]) ? (g[i] == qk[i] ? 0 : INFINITY) : fabs(g[i] - qk[i]) / (1 + fabs(qk[i])));
        }
        CHECK(ey < 2e-5);
        if (mode < 4) CHECK(eq < 2e-5);
        if (c->past) {
            int64_t pkd2[4] = {c->batch, c->kv_heads, T, c->head};
            CHECK(same_shape(out[1], 4, pkd2));
            /* present_key = concat(past_key, K in 4D): spot-check the first new row of head 0 */
            if (out[1] && !c->three_d)
                CHECK(memcmp((float *)out[1]->data + c->past * c->head, in[1]->data, (size_t)c->head * 4) == 0);
        }
        if (mode < 4)
            printf("%s, mode %d, %d thread(s): Y error %.2g, qk_matmul_output error %.2g\n", what, mode, threads, ey,
                   eq);
        else
            printf("%s, no qk_matmul_output, %d thread(s): Y error %.2g\n", what, threads, ey);
        for (int k = 0; k < 4; k++) otter_tensor_free(out[k]);
    }
    free(y), free(qk);
    for (int k = 0; k < 7; k++) otter_tensor_free(in[k]);
}

static void test_attention(void) {
    /* GQA 6 / 2 heads, past 3 + 4 new keys, float mask [B, 1, Sq, 6] shorter than the 7 keys, causal */
    attn_case all = {.batch = 2,
                     .q_heads = 6,
                     .kv_heads = 2,
                     .q_len = 5,
                     .kv_len = 4,
                     .past = 3,
                     .head = 8,
                     .v_head = 6,
                     .causal = true,
                     .scale = 0.3f,
                     .softcap = 2.5f,
                     .mask_kind = 1,
                     .mask_rank = 4,
                     .mask_dims = {2, 1, 5, 6}};
    run_attention_case("GQA + past + float mask [2,1,5,6] + causal + softcap", &all, 1);
    /* bool mask [Sq, T] with a fully masked first row, 3D inputs, MQA */
    attn_case boolean = {.batch = 1,
                         .q_heads = 4,
                         .kv_heads = 1,
                         .q_len = 3,
                         .kv_len = 5,
                         .head = 4,
                         .v_head = 4,
                         .three_d = true,
                         .mask_kind = 2,
                         .mask_rank = 2,
                         .mask_dims = {3, 5}};
    run_attention_case("3D MQA + bool mask with a fully masked row", &boolean, 1);
    /* 37 query rows (several row blocks), 41 keys, 3D, 2 threads, causal with past */
    attn_case blocks = {.batch = 1,
                        .q_heads = 3,
                        .kv_heads = 3,
                        .q_len = 37,
                        .kv_len = 37,
                        .past = 4,
                        .head = 9,
                        .v_head = 7,
                        .three_d = false,
                        .causal = true,
                        .mask_kind = 1,
                        .mask_rank = 3,
                        .mask_dims = {3, 1, 41}};
    run_attention_case("37 query rows, mask [3,1,41], causal over past 4", &blocks, 2);
    /* opset 24: nonpad_kv_seqlen with the bottom-right causal offset; batch 1 has fewer keys than
     * queries, so its leading rows are empty (zeros) */
    static const int64_t nonpad[2] = {6, 2};
    attn_case padded = {.batch = 2,
                        .q_heads = 2,
                        .kv_heads = 1,
                        .q_len = 4,
                        .kv_len = 7,
                        .head = 5,
                        .v_head = 3,
                        .causal = true,
                        .nonpad = nonpad};
    run_attention_case("nonpad_kv_seqlen {6, 2} + causal", &padded, 2);

    /* errors: 3D without head counts; heads that don't divide */
    int64_t d3[3] = {1, 2, 8}, d4[4] = {1, 3, 2, 4}, d4k[4] = {1, 2, 2, 4};
    otter_tensor *q = rand_tensor(3, d3, -1, 1), *q4 = rand_tensor(4, d4, -1, 1), *k4 = rand_tensor(4, d4k, -1, 1);
    const otter_tensor *in3[3] = {q, q, q}, *in4[3] = {q4, k4, k4};
    otter_tensor *out[1];
    CHECK_STATUS(run_node("Attention", 23, 1, 3, in3, 1, NULL, NULL, 0, out), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "q_num_heads") != NULL);
    CHECK_STATUS(run_node("Attention", 23, 1, 3, in4, 1, NULL, NULL, 0, out), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "multiple") != NULL);
    otter_tensor_free(q), otter_tensor_free(q4), otter_tensor_free(k4);
}

/* ---- activations ----------------------------------------------------------------------------- */

static void test_activations(void) {
    int64_t n = 1003; /* a tail after the last full vector */
    int64_t dims[1] = {n};
    otter_tensor *x = rand_tensor(1, dims, -12, 12), *g = rand_tensor(1, dims, -2, 2);
    float *xv = x->data;
    xv[0] = 0, xv[1] = -0.0f, xv[2] = 12, xv[3] = -12, xv[4] = 1e-4f, xv[5] = -30;
    double *want = malloc((size_t)n * sizeof *want);
    const char *names[] = {"Gelu (exact)", "Gelu (tanh)", "Swish (alpha 0.7)", "SwiGLU (alpha 1.3)"};
    for (int which = 0; which < 4; which++) {
        attr a[1];
        size_t na = 0;
        const char *op = which < 2 ? "Gelu" : which == 2 ? "Swish" : "SwiGLU";
        int opset = which < 2 ? 20 : which == 2 ? 24 : 28;
        if (which == 1) a[na++] = (attr){"approximate", 's', 0, 0, "tanh"};
        if (which >= 2) a[na++] = (attr){"alpha", 'f', 0, which == 2 ? 0.7f : 1.3f};
        const otter_tensor *in[2] = {x, g};
        otter_tensor *out[1] = {0};
        CHECK_OK(run_node(op, opset, 2, which == 3 ? 2 : 1, in, 1, NULL, a, na, out));
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = xv[i];
            want[i] =
                which == 0 ? 0.5 * v * erfc(-v / sqrt(2.0))
                : which == 1
                    ? v / (1 + exp(-2 * sqrt(2 / M_PI) *
                                   (v + 0.044715 * v * v * v))) /* = 0.5 v (1 + tanh(u)), without tanh's cancellation */
                : which == 2 ? v / (1 + exp(-0.7 * v))
                             : v / (1 + exp(-1.3 * v)) * ((const float *)g->data)[i];
            /* relative where the value is not tiny: the negative tails stay accurate */
            if (out[0]) worst = tu_worse(worst, fabs(((float *)out[0]->data)[i] - want[i]) / (1e-30 + fabs(want[i])));
        }
        CHECK(out[0] && worst < 2e-5);
        printf("%s over [-12, 12] and -30, %lld values: worst relative error %.2g\n", names[which], (long long)n,
               worst);
        otter_tensor_free(out[0]);
    }
    free(want);
    otter_tensor_free(x), otter_tensor_free(g);
}

/* ---- RMSNormalization, RotaryEmbedding ------------------------------------------------------- */

static void test_rms_rotary(void) {
    int64_t xd[3] = {2, 3, 5}, sd[2] = {1, 5};
    otter_tensor *x = rand_tensor(3, xd, -2, 2), *sc = rand_tensor(2, sd, 0.5f, 1.5f), *out[1] = {0};
    attr a[2] = {{"axis", 'i', -2}, {"epsilon", 'f', 0, 0.01f}};
    const otter_tensor *in[2] = {x, sc};
    CHECK_OK(run_node("RMSNormalization", 23, 1, 2, in, 1, NULL, a, 2, out));
    double want[30];
    const float *xv = x->data, *sv = sc->data;
    for (int b = 0; b < 2; b++) {
        double ss = 0;
        for (int i = 0; i < 15; i++) ss += (double)xv[b * 15 + i] * xv[b * 15 + i];
        double inv = 1 / sqrt(ss / 15 + 0.01);
        for (int i = 0; i < 15; i++) want[b * 15 + i] = xv[b * 15 + i] * inv * sv[i % 5];
    }
    double e = out[0] ? rel_err(out[0], want, 30) : NAN;
    CHECK(e < 1e-6);
    printf("RMSNormalization axis -2, scale [1, 5] broadcast: error %.2g\n", e);
    otter_tensor_free(out[0]), otter_tensor_free(x), otter_tensor_free(sc);

    /* RotaryEmbedding, 4D [B=2, H=3, S=4, D=10], rotary dim 6, interleaved, position_ids */
    int64_t rd[4] = {2, 3, 4, 10}, cd[2] = {9, 3}, pd[2] = {2, 4};
    static const int64_t pos[8] = {8, 0, 3, 3, 1, 2, 7, 5};
    otter_tensor *r = rand_tensor(4, rd, -1, 1), *cs = rand_tensor(2, cd, -1, 1), *sn = rand_tensor(2, cd, -1, 1), *p;
    otter_tensor_from_data(&p, NULL, OTTER_DTYPE_INT64, 2, pd, pos);
    for (int inter = 0; inter <= 1; inter++) {
        attr ra[2] = {{"rotary_embedding_dim", 'i', 6}, {"interleaved", 'i', inter}};
        const otter_tensor *rin[4] = {r, cs, sn, p};
        CHECK_OK(run_node("RotaryEmbedding", 23, 2, 4, rin, 1, NULL, ra, 2, out));
        double w[240];
        const float *rv = r->data, *cv = cs->data, *snv = sn->data;
        for (int b = 0; b < 2; b++)
            for (int h = 0; h < 3; h++)
                for (int s = 0; s < 4; s++) {
                    const float *xr = rv + ((b * 3 + h) * 4 + s) * 10;
                    double *wr = w + ((b * 3 + h) * 4 + s) * 10;
                    int64_t row = pos[b * 4 + s];
                    for (int i = 0; i < 10; i++) wr[i] = xr[i];
                    for (int i = 0; i < 3; i++) {
                        int i1 = inter ? 2 * i : i, i2 = inter ? 2 * i + 1 : i + 3;
                        double c = cv[row * 3 + i], sv2 = snv[row * 3 + i];
                        wr[i1] = c * xr[i1] - sv2 * xr[i2];
                        wr[i2] = sv2 * xr[i1] + c * xr[i2];
                    }
                }
        e = out[0] ? rel_err(out[0], w, 240) : NAN;
        CHECK(e < 1e-6);
        printf("RotaryEmbedding rotary_embedding_dim 6 of 10, interleaved %d: error %.2g\n", inter, e);
        otter_tensor_free(out[0]);
    }
    otter_tensor_free(r), otter_tensor_free(cs), otter_tensor_free(sn), otter_tensor_free(p);
}

/* ---- LinearAttention, CausalConvWithState ---------------------------------------------------- */

static void test_recurrent(void) {
    enum { B = 2, T = 3, HQ = 4, HKV = 2, DK = 3, DV = 5 };
    int64_t qd[3] = {B, T, HQ * DK}, kd[3] = {B, T, HKV * DK}, vd[3] = {B, T, HKV * DV}, gd[3] = {B, T, HKV},
            bd[3] = {B, T, HKV}, sd[4] = {B, HKV, DK, DV};
    otter_tensor *in[6] = {rand_tensor(3, qd, -1, 1),       rand_tensor(3, kd, -0.5f, 0.5f), rand_tensor(3, vd, -1, 1),
                           rand_tensor(4, sd, -0.3f, 0.3f), rand_tensor(3, gd, -0.5f, 0),    rand_tensor(3, bd, 0, 1)};
    attr a[2] = {{"q_num_heads", 'i', HQ}, {"kv_num_heads", 'i', HKV}};
    otter_tensor *out[2] = {0};
    CHECK_OK(run_node("LinearAttention", 27, 2, 6, (const otter_tensor *const *)in, 2, NULL, a, 2, out));
    const float *q = in[0]->data, *k = in[1]->data, *v = in[2]->data, *g = in[4]->data, *beta = in[5]->data;
    double S[B][HKV][DK][DV], y[B * T * HQ * DV];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < HKV; h++)
            for (int d = 0; d < DK; d++)
                for (int m = 0; m < DV; m++)
                    S[b][h][d][m] = ((const float *)in[3]->data)[((b * HKV + h) * DK + d) * DV + m];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < HKV; h++) {
                const float *kt = k + ((b * T + t) * HKV + h) * DK, *vt = v + ((b * T + t) * HKV + h) * DV;
                double decay = exp(g[(b * T + t) * HKV + h]), bt = beta[(b * T + t) * HKV + h], u[DV];
                for (int d = 0; d < DK; d++)
                    for (int m = 0; m < DV; m++) S[b][h][d][m] *= decay;
                for (int m = 0; m < DV; m++) {
                    double r = 0;
                    for (int d = 0; d < DK; d++) r += S[b][h][d][m] * kt[d];
                    u[m] = bt * (vt[m] - r);
                }
                for (int d = 0; d < DK; d++)
                    for (int m = 0; m < DV; m++) S[b][h][d][m] += kt[d] * u[m];
                for (int qh = h * 2; qh < h * 2 + 2; qh++)
                    for (int m = 0; m < DV; m++) {
                        double o = 0;
                        for (int d = 0; d < DK; d++) o += q[((b * T + t) * HQ + qh) * DK + d] * S[b][h][d][m];
                        y[((b * T + t) * HQ + qh) * DV + m] = o / sqrt((double)DK);
                    }
            }
    double ey = out[0] ? rel_err(out[0], y, B * T * HQ * DV) : NAN,
           es = out[1] ? rel_err(out[1], &S[0][0][0][0], B * HKV * DK * DV) : NAN;
    CHECK(ey < 1e-5 && es < 1e-5);
    printf("LinearAttention gated_delta, GQA 4 / 2, per-head decay, past state: output error %.2g, state %.2g\n", ey,
           es);
    otter_tensor_free(out[0]), otter_tensor_free(out[1]);
    for (int i = 0; i < 6; i++) otter_tensor_free(in[i]);

    /* CausalConvWithState: k = 4, length 2 (shorter than the carry), past state, bias, silu */
    enum { C = 3, L = 2, K = 4 };
    int64_t xd[3] = {B, C, L}, wd[3] = {C, 1, K}, bsd[1] = {C}, psd[3] = {B, C, K - 1};
    otter_tensor *cin[4] = {rand_tensor(3, xd, -1, 1), rand_tensor(3, wd, -1, 1), rand_tensor(1, bsd, -1, 1),
                            rand_tensor(3, psd, -1, 1)};
    attr ca[1] = {{"activation", 's', 0, 0, "silu"}};
    CHECK_OK(run_node("CausalConvWithState", 27, 1, 4, (const otter_tensor *const *)cin, 2, NULL, ca, 1, out));
    double wy[B * C * L], wst[B * C * (K - 1)];
    for (int bc = 0; bc < B * C; bc++) {
        double P[K - 1 + L];
        for (int i = 0; i < K - 1; i++) P[i] = ((const float *)cin[3]->data)[bc * (K - 1) + i];
        for (int i = 0; i < L; i++) P[K - 1 + i] = ((const float *)cin[0]->data)[bc * L + i];
        for (int t = 0; t < L; t++) {
            double acc = ((const float *)cin[2]->data)[bc % C];
            for (int i = 0; i < K; i++) acc += ((const float *)cin[1]->data)[(bc % C) * K + i] * P[t + i];
            wy[bc * L + t] = acc / (1 + exp(-acc));
        }
        for (int i = 0; i < K - 1; i++) wst[bc * (K - 1) + i] = P[L + i];
    }
    ey = out[0] ? rel_err(out[0], wy, B * C * L) : NAN, es = out[1] ? rel_err(out[1], wst, B * C * (K - 1)) : NAN;
    CHECK(ey < 1e-6 && es == 0);
    printf("CausalConvWithState k 4, length 2 < carry, past state, silu: output error %.2g, state error %.2g\n", ey,
           es);
    otter_tensor_free(out[0]), otter_tensor_free(out[1]);
    for (int i = 0; i < 4; i++) otter_tensor_free(cin[i]);
}

int main(void) {
    test_attention();
    test_activations();
    test_rms_rotary();
    test_recurrent();
    return tu_finish("test_transformer_ops");
}
