/* Federated aggregation (otter/fl.h) against hand-computed results: FedAvg weighted by examples, double
 * accumulation (2^24 + 1 + 1 in float loses the ones), FedAvgM momentum over two rounds, FedAdam and FedYogi
 * (Reddi et al. 2021, Algorithm 2) over two rounds, coordinate-wise median and trimmed mean (also against a
 * sort on 2000 random columns); layouts matched by name in any order; missing/extra/reshaped/retyped
 * parameters, NaN/Inf, bad counts refused naming the parameter with the round untouched; an overflowing
 * round refused with the model unchanged; state save/load round trip, corruption and truncation refused;
 * strategy parsing; client sampling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/fl.h"
#include "otter/otter.h"
#include "testutil.h"

static double worst; /* worst |got - want| over the value checks */

static void check_vec(const char *what, const float *got, const double *want, size_t n, double tol) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = tu_worse(w, fabs((double)got[i] - want[i]));
    worst = tu_worse(worst, w);
    printf("  %-44s max |got - want| = %.3g (tol %.1g)\n", what, w, tol);
    CHECK(w <= tol);
}

static bool msg_has(const char *needle) {
    bool ok = strstr(otter_last_error(), needle) != NULL;
    if (!ok) fprintf(stderr, "  message '%s' lacks '%s'\n", otter_last_error(), needle);
    return ok;
}

/* Layout: w [2,2], b [2]. */
static otter_fl_layout *make_layout(void) {
    otter_fl_param p[2] = {{.name = "w", .dtype = OTTER_DTYPE_FLOAT, .rank = 2, .dims = {2, 2}},
                           {.name = "b", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {2}}};
    otter_fl_layout *l = NULL;
    CHECK_OK(otter_fl_layout_create(&l, 2, p));
    return l;
}

static const float X0[6] = {1, 2, 3, 4, 0.5f, -0.5f};
static const float XA[6] = {2, 2, 2, 2, 1, 1};        /* 1 example */
static const float XB[6] = {0, 4, 3, 8, 0.5f, -1.5f}; /* 3 examples */
/* (1 * XA + 3 * XB) / 4 */
static const double AVG[6] = {0.5, 3.5, 2.75, 6.5, 0.625, -0.875};

static otter_fl_aggregator *make_agg(const otter_fl_layout *l, const otter_fl_strategy *st) {
    otter_fl_aggregator *a = NULL;
    CHECK_OK(otter_fl_aggregator_create(&a, l, X0, 6, st));
    return a;
}

static void round_ab(otter_fl_aggregator *a, otter_fl_round_summary *sum) {
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(
        a, &(otter_fl_update){.params = XA, .n = 6, .num_examples = 1, .has_loss = true, .loss = 2.0}));
    CHECK_OK(otter_fl_aggregator_add_update(
        a, &(otter_fl_update){.params = XB, .n = 6, .num_examples = 3, .has_loss = true, .loss = 1.0}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, sum));
}

/* Both clients send the current global vector: delta 0. */
static void round_same(otter_fl_aggregator *a) {
    float cur[6];
    memcpy(cur, otter_fl_aggregator_global(a, NULL), sizeof cur);
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = cur, .n = 6, .num_examples = 2}));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = cur, .n = 6, .num_examples = 5}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
}

static void test_fedavg(const otter_fl_layout *l) {
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    otter_fl_aggregator *a = make_agg(l, &st);
    otter_fl_round_summary sum;
    round_ab(a, &sum);
    check_vec("fedavg (1*A + 3*B)/4", otter_fl_aggregator_global(a, NULL), AVG, 6, 0);
    CHECK(sum.round == 1 && sum.num_updates == 2 && sum.num_examples == 4);
    CHECK(sum.has_loss && fabs(sum.mean_loss - 1.25) < 1e-12); /* (1*2 + 3*1)/4 */
    double n2 = 0;
    for (int i = 0; i < 6; i++) n2 += (AVG[i] - X0[i]) * (AVG[i] - X0[i]);
    CHECK(fabs(sum.update_norm - sqrt(n2)) < 1e-9);
    CHECK(otter_fl_aggregator_round(a) == 1 && !otter_fl_aggregator_in_round(a));

    /* The same round with the update's parameters listed in another order (b, then w). */
    otter_fl_param p2[2] = {{.name = "b", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {2}},
                            {.name = "w", .dtype = OTTER_DTYPE_FLOAT, .rank = 2, .dims = {2, 2}}};
    otter_fl_layout *perm = NULL;
    CHECK_OK(otter_fl_layout_create(&perm, 2, p2));
    CHECK_OK(otter_fl_layout_match(l, perm));
    otter_fl_aggregator *b = make_agg(l, &st);
    float pa[6] = {XA[4], XA[5], XA[0], XA[1], XA[2], XA[3]}, pb[6] = {XB[4], XB[5], XB[0], XB[1], XB[2], XB[3]};
    CHECK_OK(otter_fl_aggregator_begin_round(b));
    CHECK_OK(
        otter_fl_aggregator_add_update(b, &(otter_fl_update){.layout = perm, .params = pa, .n = 6, .num_examples = 1}));
    CHECK_OK(
        otter_fl_aggregator_add_update(b, &(otter_fl_update){.layout = perm, .params = pb, .n = 6, .num_examples = 3}));
    otter_fl_round_summary s2;
    CHECK_OK(otter_fl_aggregator_finish_round(b, &s2));
    check_vec("fedavg, update layout in another order", otter_fl_aggregator_global(b, NULL), AVG, 6, 0);
    CHECK(!s2.has_loss);
    otter_fl_layout_free(perm);
    otter_fl_aggregator_free(b);
    otter_fl_aggregator_free(a);
}

static void test_double_accumulation(void) {
    otter_fl_param p = {.name = "x", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {1}};
    otter_fl_layout *l = NULL;
    CHECK_OK(otter_fl_layout_create(&l, 1, &p));
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    float zero = 0, big = 16777216.0f, one = 1.0f;
    otter_fl_aggregator *a = NULL;
    CHECK_OK(otter_fl_aggregator_create(&a, l, &zero, 1, &st));
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = &big, .n = 1, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = &one, .n = 1, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = &one, .n = 1, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
    /* (2^24 + 1 + 1) / 3 = 5592406 exactly; float accumulation gives 2^24 / 3 -> 5592405.5 */
    double want = 5592406.0;
    check_vec("(2^24 + 1 + 1)/3 accumulated in double", otter_fl_aggregator_global(a, NULL), &want, 1, 0);
    otter_fl_aggregator_free(a);
    otter_fl_layout_free(l);
}

static void test_fedavgm(const otter_fl_layout *l) {
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVGM);
    st.server_lr = 0.5, st.momentum = 0.9;
    otter_fl_aggregator *a = make_agg(l, &st);
    /* d = AVG - X0; round 1: v = d, x1 = X0 + 0.5 d. Round 2 (same client vectors): d2 = AVG - x1 = 0.5 d,
     * v = 0.9 d + 0.5 d = 1.4 d, x2 = x1 + 0.7 d = X0 + 1.2 d. */
    double w1[6], w2[6];
    for (int i = 0; i < 6; i++) {
        double d = AVG[i] - X0[i];
        w1[i] = X0[i] + 0.5 * d, w2[i] = X0[i] + 1.2 * d;
    }
    round_ab(a, NULL);
    check_vec("fedavgm lr 0.5 momentum 0.9, round 1", otter_fl_aggregator_global(a, NULL), w1, 6, 0);
    round_ab(a, NULL);
    check_vec("fedavgm round 2: X0 + 1.2 d", otter_fl_aggregator_global(a, NULL), w2, 6, 1e-6);
    otter_fl_aggregator_free(a);

    /* momentum 0, lr 1 is FedAvg */
    st.server_lr = 1, st.momentum = 0;
    a = make_agg(l, &st);
    round_ab(a, NULL);
    check_vec("fedavgm lr 1 momentum 0 = fedavg", otter_fl_aggregator_global(a, NULL), AVG, 6, 0);
    otter_fl_aggregator_free(a);
}

static void test_adaptive(const otter_fl_layout *l) {
    /* Reference values: Reddi et al. Algorithm 2 in double, float32 rounding of x after each round, lr 0.1,
     * beta1 0.9, beta2 0.99, tau 1e-3, m_{-1} = 0, v_{-1} = tau^2; round 2's delta is 0. Printed by
     * tools/fl_adaptive_reference.py; tests/test_generated.py checks these lines are what it prints. */
    static const double adam1[6] = {0.901979804, 2.09933567, 2.90391922, 4.09960079, 0.59232223, -0.597369194};
    static const double adam2[6] = {0.813325942, 2.18918514, 2.81702781, 4.18969107, 0.675799727, -0.685431421};
    static const double yogi1[6] = {0.901979983, 2.09933567, 2.90391994, 4.09960079, 0.592319489, -0.597368896};
    static const double yogi2[6] = {0.813762009, 2.18873763, 2.8174479, 4.18924141, 0.675407052, -0.685000896};
    for (int k = 0; k < 2; k++) {
        otter_fl_strategy st;
        CHECK_OK(otter_fl_strategy_parse(
            k ? "fedyogi:lr=0.1,beta1=0.9,beta2=0.99,tau=1e-3" : "fedadam:lr=0.1,beta1=0.9,beta2=0.99,tau=1e-3", &st));
        otter_fl_aggregator *a = make_agg(l, &st);
        round_ab(a, NULL);
        check_vec(k ? "fedyogi round 1" : "fedadam round 1", otter_fl_aggregator_global(a, NULL), k ? yogi1 : adam1, 6,
                  5e-8);
        round_same(a);
        check_vec(k ? "fedyogi round 2 (v kept: sign(v - 0) d^2 = 0)" : "fedadam round 2 (v decays)",
                  otter_fl_aggregator_global(a, NULL), k ? yogi2 : adam2, 6, 5e-8);
        otter_fl_aggregator_free(a);
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void test_robust(void) {
    otter_fl_param p = {.name = "x", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {3}};
    otter_fl_layout *l = NULL;
    CHECK_OK(otter_fl_layout_create(&l, 1, &p));
    const float g[3] = {0, 0, 0};
    /* 5 clients, columns: {1,5,3,10,-100}, {2,2,2,2,2}, {-1,7,7,0,7} */
    const float u[5][3] = {{1, 2, -1}, {5, 2, 7}, {3, 2, 7}, {10, 2, 0}, {-100, 2, 7}};
    struct {
        const char *spec;
        int m;
        double want[3];
    } cases[] = {
        {"median", 5, {3, 2, 7}},
        {"median", 4, {4, 2, 3.5}},                          /* {1,5,3,10} -> (3+5)/2, {-1,7,7,0} -> (0+7)/2 */
        {"trimmed-mean:fraction=0.2", 5, {3, 2, 14.0 / 3}},  /* k = 1: drop -100 and 10; {-1,7,7,0,7} -> 0,7,7 */
        {"trimmed-mean:fraction=0.25", 4, {4, 2, 3.5}},      /* k = 1 of 4 */
        {"trimmed-mean:fraction=0.1", 5, {-81.0 / 5, 2, 4}}, /* k = 0: the plain mean */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        otter_fl_strategy st;
        CHECK_OK(otter_fl_strategy_parse(cases[c].spec, &st));
        otter_fl_aggregator *a = NULL;
        CHECK_OK(otter_fl_aggregator_create(&a, l, g, 3, &st));
        CHECK_OK(otter_fl_aggregator_begin_round(a));
        for (int i = 0; i < cases[c].m; i++)
            CHECK_OK(otter_fl_aggregator_add_update(
                a, &(otter_fl_update){.params = u[i], .n = 3, .num_examples = 1 + 100 * i}));
        CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
        char what[80];
        snprintf(what, sizeof what, "%s of %d clients", cases[c].spec, cases[c].m);
        check_vec(what, otter_fl_aggregator_global(a, NULL), cases[c].want, 3, 1e-6);
        otter_fl_aggregator_free(a);
    }
    otter_fl_layout_free(l);

    /* 2000 coordinates with many ties, 7 and 8 clients: against sorting each column. */
    enum { N = 2000 };
    p.dims[0] = N;
    CHECK_OK(otter_fl_layout_create(&l, 1, &p));
    float *zero = calloc(N, sizeof *zero), *rows = malloc(8 * N * sizeof *rows);
    double *want = malloc(N * sizeof *want);
    unsigned s = 12345;
    for (int i = 0; i < 8 * N; i++) {
        s = s * 1103515245u + 12345u;
        rows[i] = (float)((s >> 16) % 9) - 4.0f;
    }
    for (int kind = 0; kind < 2; kind++)
        for (int m = 7; m <= 8; m++) {
            otter_fl_strategy st;
            CHECK_OK(otter_fl_strategy_parse(kind ? "trimmed-mean:fraction=0.3" : "median", &st));
            otter_fl_aggregator *a = NULL;
            CHECK_OK(otter_fl_aggregator_create(&a, l, zero, N, &st));
            CHECK_OK(otter_fl_aggregator_begin_round(a));
            for (int i = 0; i < m; i++)
                CHECK_OK(otter_fl_aggregator_add_update(
                    a, &(otter_fl_update){.params = rows + i * N, .n = N, .num_examples = 1}));
            CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
            int k = kind ? (int)floor(0.3 * m) : 0;
            for (int j = 0; j < N; j++) {
                float col[8];
                for (int i = 0; i < m; i++) col[i] = rows[i * N + j];
                qsort(col, (size_t)m, sizeof col[0], cmp_float);
                if (kind) {
                    double sum = 0;
                    for (int i = k; i < m - k; i++) sum += col[i];
                    want[j] = sum / (m - 2 * k);
                } else
                    want[j] = m % 2 ? col[m / 2] : 0.5 * ((double)col[m / 2 - 1] + col[m / 2]);
            }
            char what[80];
            snprintf(what, sizeof what, "%s, %d clients, 2000 columns vs qsort", kind ? "trimmed 0.3" : "median", m);
            check_vec(what, otter_fl_aggregator_global(a, NULL), want, N, 1e-6);
            otter_fl_aggregator_free(a);
        }
    free(zero), free(rows), free(want);
    otter_fl_layout_free(l);
}

static void test_refusals(const otter_fl_layout *l) {
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    otter_fl_aggregator *a = make_agg(l, &st);
    CHECK_STATUS(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = XA, .n = 6, .num_examples = 1}),
                 OTTER_ERR_INVALID); /* no round open */
    CHECK_STATUS(otter_fl_aggregator_finish_round(a, NULL), OTTER_ERR_INVALID);
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_STATUS(otter_fl_aggregator_begin_round(a), OTTER_ERR_INVALID);
    CHECK_STATUS(otter_fl_aggregator_finish_round(a, NULL), OTTER_ERR_INVALID); /* no updates: stays open */
    CHECK(otter_fl_aggregator_in_round(a) && msg_has("no updates"));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = XA, .n = 6, .num_examples = 1}));

    struct {
        const char *what, *needle;
        otter_fl_param p[3];
        size_t np;
    } bad[] = {
        {"reshaped w", "'w'", {{"w", OTTER_DTYPE_FLOAT, 1, {4}}, {"b", OTTER_DTYPE_FLOAT, 1, {2}}}, 2},
        {"b as a matrix", "'b'", {{"w", OTTER_DTYPE_FLOAT, 2, {2, 2}}, {"b", OTTER_DTYPE_FLOAT, 2, {1, 2}}}, 2},
        {"b as double", "'b'", {{"w", OTTER_DTYPE_FLOAT, 2, {2, 2}}, {"b", OTTER_DTYPE_DOUBLE, 1, {2}}}, 2},
        {"b missing", "'b' of the global model is missing", {{"w", OTTER_DTYPE_FLOAT, 2, {2, 2}}}, 1},
        {"extra c",
         "'c' of the update is not in the global model",
         {{"w", OTTER_DTYPE_FLOAT, 2, {2, 2}}, {"c", OTTER_DTYPE_FLOAT, 0, {0}}, {"b", OTTER_DTYPE_FLOAT, 1, {2}}},
         3},
    };
    float buf[8] = {0};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        otter_fl_layout *ul = NULL;
        CHECK_OK(otter_fl_layout_create(&ul, bad[i].np, bad[i].p));
        otter_fl_update u = {
            .layout = ul, .params = buf, .n = otter_fl_layout_numel(ul), .num_examples = 5, .client = "client 7"};
        CHECK_STATUS(otter_fl_aggregator_check_update(a, &u), OTTER_ERR_INVALID);
        CHECK_STATUS(otter_fl_aggregator_add_update(a, &u), OTTER_ERR_INVALID);
        CHECK(msg_has(bad[i].needle) && msg_has("update from client 7: "));
        CHECK_STATUS(otter_fl_layout_match(l, ul), OTTER_ERR_INVALID);
        printf("  refused %-20s: %s\n", bad[i].what, otter_last_error());
        otter_fl_layout_free(ul);
    }
    float nan_b[6], inf_w[6];
    memcpy(nan_b, XB, sizeof nan_b), memcpy(inf_w, XB, sizeof inf_w);
    nan_b[5] = NAN, inf_w[2] = -INFINITY;
    CHECK_STATUS(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = nan_b, .n = 6, .num_examples = 3}),
                 OTTER_ERR_INVALID);
    CHECK(msg_has("'b' element 1 is NaN"));
    printf("  refused NaN: %s\n", otter_last_error());
    CHECK_STATUS(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = inf_w, .n = 6, .num_examples = 3}),
                 OTTER_ERR_INVALID);
    CHECK(msg_has("'w' element 2 is infinite"));
    CHECK_STATUS(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = XB, .n = 5, .num_examples = 3}),
                 OTTER_ERR_INVALID);
    CHECK(msg_has("5 values"));
    CHECK_STATUS(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = XB, .n = 6, .num_examples = 0}),
                 OTTER_ERR_INVALID);
    CHECK_STATUS(otter_fl_aggregator_add_update(
                     a, &(otter_fl_update){.params = XB, .n = 6, .num_examples = 3, .has_loss = true, .loss = NAN}),
                 OTTER_ERR_INVALID);
    CHECK(otter_fl_aggregator_num_updates(a) == 1);
    /* After the refusals the round holds A alone; add B: the result is exactly FedAvg of A and B. */
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = XB, .n = 6, .num_examples = 3}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
    check_vec("fedavg after 11 refused updates", otter_fl_aggregator_global(a, NULL), AVG, 6, 0);

    /* Aborting a round keeps the model. */
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = X0, .n = 6, .num_examples = 3}));
    otter_fl_aggregator_abort_round(a);
    check_vec("abort keeps the model", otter_fl_aggregator_global(a, NULL), AVG, 6, 0);
    CHECK(otter_fl_aggregator_round(a) == 1);
    otter_fl_aggregator_free(a);

    /* NaN in the initial model, non-float layout */
    float g[6];
    memcpy(g, X0, sizeof g);
    g[0] = NAN;
    CHECK_STATUS(otter_fl_aggregator_create(&a, l, g, 6, &st), OTTER_ERR_INVALID);
    otter_fl_param pi = {"steps", OTTER_DTYPE_INT64, 1, {2}};
    otter_fl_layout *il = NULL;
    CHECK_OK(otter_fl_layout_create(&il, 1, &pi));
    CHECK_STATUS(otter_fl_aggregator_create(&a, il, X0, 2, &st), OTTER_ERR_UNSUPPORTED);
    CHECK(msg_has("'steps'"));
    otter_fl_layout_free(il);
    otter_fl_param dup[2] = {{"w", OTTER_DTYPE_FLOAT, 1, {1}}, {"w", OTTER_DTYPE_FLOAT, 1, {1}}};
    CHECK_STATUS(otter_fl_layout_create(&il, 2, dup), OTTER_ERR_INVALID);
    CHECK(msg_has("'w' appears twice"));

    /* A round whose velocity leaves float range: FedAvgM lr 1 momentum 0.9 from -3e38 towards 3e38 gives
     * m = 6e38 (x itself lands on 3e38); kept, it would overflow every later round, honest ones included.
     * Refused, the round's updates dropped, model and state unchanged, and an honest round still passes. */
    otter_fl_param p1 = {"x", OTTER_DTYPE_FLOAT, 1, {1}};
    otter_fl_layout *l1 = NULL;
    CHECK_OK(otter_fl_layout_create(&l1, 1, &p1));
    st = otter_fl_strategy_default(OTTER_FL_FEDAVGM);
    float lo = -3e38f, hi = 3e38f, honest = -2.9e38f;
    CHECK_OK(otter_fl_aggregator_create(&a, l1, &lo, 1, &st));
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = &hi, .n = 1, .num_examples = 1}));
    CHECK_STATUS(otter_fl_aggregator_finish_round(a, NULL), OTTER_ERR_INVALID);
    CHECK(msg_has("'x' element 0 is not finite (momentum 6e+38)") && msg_has("1 updates are dropped"));
    CHECK(otter_fl_aggregator_global(a, NULL)[0] == lo && !otter_fl_aggregator_in_round(a));
    CHECK(otter_fl_aggregator_round(a) == 0);
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = &honest, .n = 1, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, NULL));
    CHECK(otter_fl_aggregator_global(a, NULL)[0] == honest && otter_fl_aggregator_round(a) == 1);
    /* huge finite values with 2^62 examples: the value overflows; refused the same way */
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(
        a, &(otter_fl_update){.params = &hi, .n = 1, .num_examples = (int64_t)1 << 62, .client = "mallory"}));
    CHECK_STATUS(otter_fl_aggregator_finish_round(a, NULL), OTTER_ERR_INVALID);
    CHECK(otter_fl_aggregator_global(a, NULL)[0] == honest && otter_fl_aggregator_round(a) == 1);
    printf("  refused overflow: %s\n", otter_last_error());
    otter_fl_aggregator_free(a);
    otter_fl_layout_free(l1);
}

static void test_state(const otter_fl_layout *l) {
    otter_fl_strategy st;
    CHECK_OK(otter_fl_strategy_parse("fedyogi:lr=0.1", &st));
    otter_fl_aggregator *a = make_agg(l, &st), *b = NULL;
    round_ab(a, NULL);
    const char *path = tu_tmp_path("fl_state.bin");
    CHECK_OK(otter_fl_aggregator_save(a, path));
    CHECK_OK(otter_fl_aggregator_load(&b, path));
    if (!b) {
        otter_fl_aggregator_free(a);
        return;
    }
    CHECK(otter_fl_aggregator_round(b) == 1);
    CHECK(otter_fl_aggregator_strategy(b)->kind == OTTER_FL_FEDYOGI &&
          otter_fl_aggregator_strategy(b)->server_lr == 0.1);
    CHECK_OK(otter_fl_layout_match(l, otter_fl_aggregator_layout(b)));
    /* One more round in each: bit-identical (the moments came back). */
    round_same(a);
    round_same(b);
    CHECK(memcmp(otter_fl_aggregator_global(a, NULL), otter_fl_aggregator_global(b, NULL), 6 * sizeof(float)) == 0);
    void *d1 = NULL, *d2 = NULL;
    size_t s1 = 0, s2 = 0;
    CHECK_OK(otter_fl_aggregator_save_to_memory(a, &d1, &s1));
    CHECK_OK(otter_fl_aggregator_save_to_memory(b, &d2, &s2));
    CHECK(s1 == s2 && memcmp(d1, d2, s1) == 0);
    printf("  state file: %zu bytes; saved, loaded, one more round: identical\n", s1);
    otter_fl_aggregator *c = NULL;
    size_t n_refused = 0, n_bad_msg = 0;
    for (size_t i = 0; i < s1; i += 7) { /* flip a bit every 7 bytes: each refused, named once */
        ((unsigned char *)d1)[i] ^= 0x10;
        if (otter_fl_aggregator_load_from_memory(&c, d1, s1) != OTTER_OK) {
            const char *e = otter_last_error();
            n_refused++;
            const char *f = strstr(e, "federated state");
            bool bad = !f || strstr(f + 1, "federated state") != NULL;
            if (bad) fprintf(stderr, "  badly named refusal: %s\n", e);
            n_bad_msg += bad;
        }
        otter_fl_aggregator_free(c), c = NULL;
        ((unsigned char *)d1)[i] ^= 0x10;
    }
    CHECK(n_refused == (s1 + 6) / 7);
    CHECK(n_bad_msg == 0); /* each names the federated state once */
    size_t n_trunc = 0;
    for (size_t len = 0; len < s1; len += 5) {
        n_trunc += otter_fl_aggregator_load_from_memory(&c, d1, len) != OTTER_OK;
        otter_fl_aggregator_free(c), c = NULL;
    }
    CHECK(n_trunc == (s1 + 4) / 5);
    printf("  %zu bit flips and %zu truncations refused\n", n_refused, n_trunc);
    CHECK_STATUS(otter_fl_aggregator_load(&c, tu_tmp_path("no_such_state.bin")), OTTER_ERR_NOT_FOUND);
    otter_free(d1), otter_free(d2);
    otter_fl_aggregator_free(a);
    otter_fl_aggregator_free(b);
}

/* The allocator hook records the largest request: a state file must not ask for more than it holds. */
static size_t largest_request;
static void *rec_malloc(size_t n, void *user) {
    (void)user;
    if (n > largest_request) largest_request = n;
    return malloc(n);
}
static void *rec_realloc(void *p, size_t n, void *user) {
    (void)user;
    if (n > largest_request) largest_request = n;
    return realloc(p, n);
}
static void rec_free(void *p, void *user) {
    (void)user;
    free(p);
}

/* A small state file whose layout claims 2^34 elements (64 GiB of float32, 128 GiB of momentum): refused
 * before anything that size is allocated. */
static void test_state_sizes(void) {
    otter_fl_param p1 = {"x", OTTER_DTYPE_FLOAT, 1, {1}};
    otter_fl_layout *l1 = NULL;
    CHECK_OK(otter_fl_layout_create(&l1, 1, &p1));
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVGM);
    float x = 0.5f;
    otter_fl_aggregator *a = NULL, *b = NULL;
    CHECK_OK(otter_fl_aggregator_create(&a, l1, &x, 1, &st));
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(otter_fl_aggregator_save_to_memory(a, &data, &size));
    /* magic 8, version 4, kind 4, 7 hyperparameters 8, round 8, count 8 | name length 4, "x", dtype 4, rank 4 */
    unsigned char *bytes = data;
    size_t dim_at = 8 + 4 + 4 + 56 + 8 + 8 + 4 + 1 + 4 + 4;
    CHECK(size > dim_at + 8 && bytes[dim_at] == 1);
    uint64_t huge = (uint64_t)1 << 34, sum = 1469598103934665603ull; /* core.h OT_FNV1A_OFFSET */
    for (int i = 0; i < 8; i++) bytes[dim_at + (size_t)i] = (unsigned char)(huge >> (8 * i));
    for (size_t i = 0; i + 8 < size; i++) sum = (sum ^ bytes[i]) * 1099511628211ull;
    for (int i = 0; i < 8; i++) bytes[size - 8 + (size_t)i] = (unsigned char)(sum >> (8 * i));
    largest_request = 0;
    otter_set_allocator(&(otter_allocator){rec_malloc, rec_realloc, rec_free, NULL});
    otter_status rc = otter_fl_aggregator_load_from_memory(&b, data, size);
    otter_set_allocator(NULL);
    CHECK_STATUS(rc, OTTER_ERR_INVALID);
    CHECK(msg_has("doesn't fit in the file"));
    printf("  %zu-byte state claiming 2^34 values: largest allocation %zu bytes: %s\n", size, largest_request,
           otter_last_error());
    CHECK(largest_request < 4096);
    otter_fl_aggregator_free(b);
    otter_free(data);
    otter_fl_aggregator_free(a);
    otter_fl_layout_free(l1);
}

/* --clip-norm: each update's change scaled to norm <= C before the weighted mean; a client sending 1e30
 * with 2^62 examples moves the model by at most C. */
static void test_clip(const otter_fl_layout *l) {
    otter_fl_strategy st;
    CHECK_OK(otter_fl_strategy_parse("fedavg:clip_norm=1", &st));
    CHECK(st.kind == OTTER_FL_FEDAVG && st.clip_norm == 1);
    otter_fl_aggregator *a = make_agg(l, &st);
    otter_fl_round_summary sum;
    round_ab(a, &sum);
    double na = 0, nb = 0, want[6];
    for (int i = 0; i < 6; i++) na += (XA[i] - X0[i]) * (XA[i] - X0[i]), nb += (XB[i] - X0[i]) * (XB[i] - X0[i]);
    for (int i = 0; i < 6; i++) want[i] = X0[i] + (1 * (XA[i] - X0[i]) / sqrt(na) + 3 * (XB[i] - X0[i]) / sqrt(nb)) / 4;
    check_vec("fedavg clip_norm 1: (1*A/|A| + 3*B/|B|)/4", otter_fl_aggregator_global(a, NULL), want, 6, 1e-6);
    CHECK(sum.clipped == 2 && sum.update_norm <= 1 + 1e-6);
    float huge[6] = {1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f}, before[6];
    memcpy(before, otter_fl_aggregator_global(a, NULL), sizeof before);
    CHECK_OK(otter_fl_aggregator_begin_round(a));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = huge, .n = 6, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_add_update(a, &(otter_fl_update){.params = before, .n = 6, .num_examples = 1}));
    CHECK_OK(otter_fl_aggregator_finish_round(a, &sum));
    printf("  clip_norm 1, one client of two sends 1e30: the model moves by %.6g\n", sum.update_norm);
    CHECK(sum.clipped == 1 && fabs(sum.update_norm - 0.5) < 1e-6);
    /* the bound survives a restart and reads back from its text form */
    void *data = NULL;
    size_t size = 0;
    otter_fl_aggregator *b = NULL;
    CHECK_OK(otter_fl_aggregator_save_to_memory(a, &data, &size));
    CHECK_OK(otter_fl_aggregator_load_from_memory(&b, data, size));
    CHECK(b && otter_fl_aggregator_strategy(b)->clip_norm == 1);
    char text[256];
    otter_fl_strategy back;
    CHECK_OK(otter_fl_strategy_parse("fedavgm:lr=0.5,clip_norm=2.5", &st));
    otter_fl_strategy_format(&st, text, sizeof text);
    CHECK_OK(otter_fl_strategy_parse(text, &back));
    CHECK(back.clip_norm == 2.5 && back.server_lr == 0.5 && strstr(text, "clip_norm=2.5"));
    CHECK_STATUS(otter_fl_strategy_parse("median:clip_norm=1", &back), OTTER_ERR_ARGUMENT);
    st = otter_fl_strategy_default(OTTER_FL_TRIMMED_MEAN);
    st.clip_norm = 1;
    CHECK_STATUS(otter_fl_strategy_check(&st), OTTER_ERR_ARGUMENT);
    CHECK(msg_has("for fedavg and fedavgm"));
    otter_free(data);
    otter_fl_aggregator_free(b);
    otter_fl_aggregator_free(a);
}

static void test_parse_and_sample(void) {
    otter_fl_strategy st;
    CHECK_OK(otter_fl_strategy_parse("fedadam:lr=0.03,tau=1e-4", &st));
    CHECK(st.kind == OTTER_FL_FEDADAM && st.server_lr == 0.03 && st.tau == 1e-4 && st.beta1 == 0.9 && st.beta2 == 0.99);
    char buf[200];
    otter_fl_strategy back;
    otter_fl_strategy_format(&st, buf, sizeof buf);
    CHECK_OK(otter_fl_strategy_parse(buf, &back));
    /* field by field: the padding after kind is indeterminate */
    CHECK(st.kind == back.kind && st.server_lr == back.server_lr && st.momentum == back.momentum &&
          st.beta1 == back.beta1 && st.beta2 == back.beta2 && st.tau == back.tau &&
          st.trim_fraction == back.trim_fraction && st.clip_norm == back.clip_norm);
    const char *bad[] = {"fedprox",
                         "fedavg:lr=1",
                         "median:x=1",
                         "trimmed-mean:fraction=0.5",
                         "fedavgm:momentum=1",
                         "fedyogi:tau=0",
                         "fedadam:lr",
                         "fedadam:lr=abc",
                         "fedavgm:lr=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_STATUS(otter_fl_strategy_parse(bad[i], &st), OTTER_ERR_ARGUMENT);

    size_t out[100], out2[100];
    size_t m = otter_fl_sample_clients(100, 0.1, 42, 3, out);
    CHECK(m == 10);
    bool sorted = true;
    for (size_t i = 1; i < m; i++) sorted = sorted && out[i - 1] < out[i] && out[i] < 100;
    CHECK(sorted);
    CHECK(otter_fl_sample_clients(100, 0.1, 42, 3, out2) == 10 && memcmp(out, out2, 10 * sizeof out[0]) == 0);
    CHECK(otter_fl_sample_clients(100, 0.1, 42, 4, out2) == 10 && memcmp(out, out2, 10 * sizeof out[0]) != 0);
    CHECK(otter_fl_sample_clients(100, 0.001, 42, 1, out2) == 1);
    CHECK(otter_fl_sample_clients(7, 1.0, 1, 1, out2) == 7);
    /* every client picked about equally often over 2000 rounds (10 of 100 each: 200 expected) */
    int hits[100] = {0};
    for (int r = 0; r < 2000; r++) {
        m = otter_fl_sample_clients(100, 0.1, 7, r, out);
        for (size_t i = 0; i < m; i++) hits[out[i]]++;
    }
    int lo = 1 << 30, hi = 0;
    for (int i = 0; i < 100; i++) lo = hits[i] < lo ? hits[i] : lo, hi = hits[i] > hi ? hits[i] : hi;
    printf("  client sampling, 2000 rounds of 10/100: picks per client in [%d, %d] (expected 200)\n", lo, hi);
    CHECK(lo > 140 && hi < 260);
}

int main(void) {
    otter_fl_layout *l = make_layout();
    if (!l) return tu_finish("test_fl_aggregate");
    CHECK(otter_fl_layout_numel(l) == 6 && otter_fl_layout_offset(l, 1) == 4 && otter_fl_layout_count(l) == 2);
    test_fedavg(l);
    test_double_accumulation();
    test_fedavgm(l);
    test_adaptive(l);
    test_robust();
    test_refusals(l);
    test_state(l);
    test_state_sizes();
    test_clip(l);
    test_parse_and_sample();
    otter_fl_layout_free(l);
    printf("worst value error %.3g\n", worst);
    return tu_finish("test_fl_aggregate");
}
