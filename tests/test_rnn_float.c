/* The recurrent kernels' float path against their double path on long sequences.
 *
 * runtime/ops/rnn.c and rnn_train.c compute in float for float tensors (one packed sgemm per step,
 * vec_math's sigmoid / tanh) and in double for double tensors (dgemm, libm): the double run of the
 * same values is the reference. Each case is a two-node model, the training forward op (com.microsoft
 * LSTMTraining / GRUTraining, or RNN) feeding its gradient op (LSTMGrad / GRUGrad / com.otter RNNGrad)
 * with a random dY, built once per type and run on 2 threads (rows are split over them). Every output,
 * forward and gradient, is compared as max|float - double| / max|double|.
 *
 * Tolerance 2e-5 (measured worst 1.8e-6): float's rounding (6e-8 per operation) and vec_math's
 * activations (within a few ulp) enter at every one of the 300 steps, but the recurrences here contract
 * (weights in +-0.3), so the error stays at a few hundred ulp instead of growing with the length; the
 * weight gradients sum T * N = 3600 float products. A float path that drifted (a wrong gate, a lost
 * step, double rounding of a recorded value, a missed clip) is off by far more. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define MS "com.microsoft"

typedef struct rnn_case {
    const char *label;
    const char *cell; /* "LSTM", "GRU", "RNN" */
    const char *direction;
    int64_t T, N, I, H;
    bool ragged; /* sequence_lens below T in some rows */
    bool peep;   /* LSTM: peepholes */
    int lbr;     /* GRU: linear_before_reset */
    double clip; /* 0: none */
} rnn_case;

static const rnn_case CASES[] = {
    {"LSTM forward", "LSTM", "forward", 300, 12, 7, 16, false, false, 0, 0},
    {"LSTM bidirectional ragged peepholes", "LSTM", "bidirectional", 300, 12, 5, 9, true, true, 0, 0},
    {"LSTM reverse clip", "LSTM", "reverse", 300, 12, 5, 8, false, false, 0, 0.6},
    {"GRU linear_before_reset", "GRU", "forward", 300, 12, 7, 16, false, false, 1, 0},
    {"GRU bidirectional ragged", "GRU", "bidirectional", 300, 12, 5, 9, true, false, 0, 0},
    {"GRU reverse clip linear_before_reset", "GRU", "reverse", 300, 12, 5, 8, false, false, 1, 0.6},
    {"RNN bidirectional ragged", "RNN", "bidirectional", 300, 12, 6, 10, true, false, 0, 0},
};

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static float urand(float lo, float hi) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((double)(rng_state >> 11) / 9007199254740992.0);
}

/* A named input: float values, and their double copies. */
typedef struct value {
    const char *name;
    int rank;
    int64_t dims[4];
    float *f;
    double *d;
} value;

static int64_t numel(const value *v) {
    int64_t n = 1;
    for (int k = 0; k < v->rank; k++) n *= v->dims[k];
    return n;
}

static void fill(value *v, float lo, float hi) {
    int64_t n = numel(v);
    v->f = malloc((size_t)n * sizeof *v->f);
    v->d = malloc((size_t)n * sizeof *v->d);
    if (!v->f || !v->d) abort();
    for (int64_t i = 0; i < n; i++) v->d[i] = v->f[i] = urand(lo, hi);
}

static void set_attrs(otter_node *n, const rnn_case *c) {
    CHECK_OK(otter_node_set_attr_int(n, "hidden_size", c->H));
    CHECK_OK(otter_node_set_attr_string(n, "direction", c->direction));
    if (c->clip > 0) CHECK_OK(otter_node_set_attr_float(n, "clip", (float)c->clip));
    if (c->lbr) CHECK_OK(otter_node_set_attr_int(n, "linear_before_reset", c->lbr));
}

/* The model in one type; outputs: the forward pass's Y, Y_h (, Y_c), then the gradients. */
static otter_model *build(const rnn_case *c, otter_dtype dt, const value *in, int n_in, const char **outs,
                          int *n_outs) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "rnn", 14));
    CHECK_OK(otter_model_set_opset(m, MS, 1));
    CHECK_OK(otter_model_set_opset(m, "com.otter", 1));
    otter_graph *g = m->graph;
    for (int k = 0; k < n_in; k++)
        CHECK_OK(otter_graph_add_input(g, in[k].name, strcmp(in[k].name, "L") ? dt : OTTER_DTYPE_INT32, in[k].rank,
                                       in[k].dims, NULL));
    otter_node *fwd, *bwd;
    const char *sl = c->ragged ? "L" : "-";
    char ins[256];
    if (!strcmp(c->cell, "LSTM")) {
        snprintf(ins, sizeof ins, "X W R B %s H0 C0 %s", sl, c->peep ? "P" : "-");
        fwd = tu_add_node(g, "LSTMTraining", "fwd", ins, "Y Yh Yc CAll IOFC");
        snprintf(ins, sizeof ins, "X W R B %s H0 C0 %s Y CAll IOFC dY", sl, c->peep ? "P" : "-");
        bwd = tu_add_node(g, "LSTMGrad", "bwd", ins, "dX dW dR dB dH0 dC0 dP");
        static const char *names[] = {"Y", "Yh", "Yc", "dX", "dW", "dR", "dB", "dH0", "dC0", "dP"};
        *n_outs = c->peep ? 10 : 9;
        memcpy(outs, names, sizeof names);
    } else if (!strcmp(c->cell, "GRU")) {
        snprintf(ins, sizeof ins, "X W R B %s H0", sl);
        fwd = tu_add_node(g, "GRUTraining", "fwd", ins, "Y Yh ZRH");
        snprintf(ins, sizeof ins, "X W R B %s H0 Y ZRH dY", sl);
        bwd = tu_add_node(g, "GRUGrad", "bwd", ins, "dX dW dR dB dH0");
        static const char *names[] = {"Y", "Yh", "dX", "dW", "dR", "dB", "dH0"};
        *n_outs = 7;
        memcpy(outs, names, sizeof names);
    } else {
        snprintf(ins, sizeof ins, "X W R B %s H0", sl);
        fwd = tu_add_node(g, "RNN", "fwd", ins, "Y Yh");
        snprintf(ins, sizeof ins, "X W R B %s H0 Y dY", sl);
        bwd = tu_add_node(g, "RNNGrad", "bwd", ins, "dX dW dR dB dH0");
        static const char *names[] = {"Y", "Yh", "dX", "dW", "dR", "dB", "dH0"};
        *n_outs = 7;
        memcpy(outs, names, sizeof names);
    }
    if (strcmp(c->cell, "RNN")) otter_node_set_domain(fwd, MS);
    otter_node_set_domain(bwd, strcmp(c->cell, "RNN") ? MS : "com.otter");
    set_attrs(fwd, c);
    set_attrs(bwd, c);
    for (int k = 0; k < *n_outs; k++)
        CHECK_OK(otter_graph_add_output(g, outs[k], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    return m;
}

static void run(otter_model *m, otter_dtype dt, const value *in, int n_in, const char **outs, int n_outs,
                otter_tensor **res) {
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 2};
    CHECK_OK(otter_session_create(&s, m, &o));
    otter_tensor *t[16];
    const char *names[16];
    for (int k = 0; k < n_in; k++) {
        bool lens = !strcmp(in[k].name, "L");
        CHECK_OK(otter_tensor_create(&t[k], in[k].name, lens ? OTTER_DTYPE_INT32 : dt, in[k].rank, in[k].dims));
        for (int64_t i = 0; i < numel(&in[k]); i++)
            if (lens)
                ((int32_t *)t[k]->data)[i] = (int32_t)in[k].d[i];
            else if (dt == OTTER_DTYPE_FLOAT)
                ((float *)t[k]->data)[i] = in[k].f[i];
            else
                ((double *)t[k]->data)[i] = in[k].d[i];
        names[k] = in[k].name;
    }
    CHECK_OK(otter_session_run(s, (size_t)n_in, names, (const otter_tensor *const *)t, (size_t)n_outs, outs, res));
    for (int k = 0; k < n_in; k++) otter_tensor_free(t[k]);
    otter_session_free(s);
}

static void run_case(const rnn_case *c) {
    const int64_t D = strcmp(c->direction, "bidirectional") ? 1 : 2, H = c->H, T = c->T, N = c->N, I = c->I;
    const int64_t G = !strcmp(c->cell, "LSTM") ? 4 : !strcmp(c->cell, "GRU") ? 3 : 1;
    value in[12] = {
        {"X", 3, {T, N, I}},      {"W", 3, {D, G * H, I}}, {"R", 3, {D, G * H, H}},
        {"B", 2, {D, 2 * G * H}}, {"H0", 3, {D, N, H}},    {"dY", 4, {T, D, N, H}},
    };
    int n_in = 6;
    fill(&in[0], -1, 1);
    fill(&in[1], -0.3f, 0.3f);
    fill(&in[2], -0.3f, 0.3f);
    fill(&in[3], -0.3f, 0.3f);
    fill(&in[4], -0.5f, 0.5f);
    fill(&in[5], -1, 1);
    if (!strcmp(c->cell, "LSTM")) {
        in[n_in] = (value){"C0", 3, {D, N, H}};
        fill(&in[n_in++], -0.5f, 0.5f);
        if (c->peep) {
            in[n_in] = (value){"P", 2, {D, 3 * H}};
            fill(&in[n_in++], -0.3f, 0.3f);
        }
    }
    if (c->ragged) { /* lengths T, T - 1, ..., 1 row apart, and an empty row */
        in[n_in] = (value){"L", 1, {N}};
        fill(&in[n_in], 0, 0);
        for (int64_t b = 0; b < N; b++) in[n_in].d[b] = b == N - 1 ? 0 : (double)(T - 23 * b);
        n_in++;
    }
    const char *outs[10];
    int n_outs = 0;
    otter_model *mf = build(c, OTTER_DTYPE_FLOAT, in, n_in, outs, &n_outs);
    otter_model *md = build(c, OTTER_DTYPE_DOUBLE, in, n_in, outs, &n_outs);
    otter_tensor *rf[10] = {0}, *rd[10] = {0};
    run(mf, OTTER_DTYPE_FLOAT, in, n_in, outs, n_outs, rf);
    run(md, OTTER_DTYPE_DOUBLE, in, n_in, outs, n_outs, rd);
    double worst = 0;
    const char *worst_name = "";
    for (int k = 0; k < n_outs; k++) {
        CHECK(rf[k] && rd[k] && rf[k]->dtype == OTTER_DTYPE_FLOAT && rd[k]->dtype == OTTER_DTYPE_DOUBLE);
        if (!rf[k] || !rd[k]) continue;
        int64_t n = otter_tensor_numel(rd[k]);
        CHECK(otter_tensor_numel(rf[k]) == n);
        double scale = 0, diff = 0;
        for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(((double *)rd[k]->data)[i]));
        for (int64_t i = 0; i < n; i++)
            diff = tu_worse(diff, fabs(((float *)rf[k]->data)[i] - ((double *)rd[k]->data)[i]));
        double err = diff / (scale > 0 ? scale : 1);
        CHECK(scale > 0 || !strcmp(outs[k], "dX")); /* every output holds something to compare */
        if (!(err <= worst)) worst = err, worst_name = outs[k];
        if (!(err <= 2e-5))
            fprintf(stderr, "%s: %s off by %.3g of its largest value %.3g\n", c->label, outs[k], err, scale);
        CHECK(err <= 2e-5);
    }
    printf("ok   %-40s %d outputs, worst %.2e (%s), T %lld\n", c->label, n_outs, worst, worst_name, (long long)T);
    for (int k = 0; k < n_outs; k++) otter_tensor_free(rf[k]), otter_tensor_free(rd[k]);
    otter_model_free(mf);
    otter_model_free(md);
    for (int k = 0; k < n_in; k++) free(in[k].f), free(in[k].d);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i]);
    return tu_finish("test_rnn_float");
}
