/* Kernels of runtime/ops/random.c, lp_norm.c, bitwise.c, gelu.c and group_norm.c.
 *
 * Random generators are checked by their statistics over n draws, with bounds of 5 standard
 * errors derived from n (a correct generator fails each with probability below 10^-6; the draws
 * are seeded, so a run is reproducible):
 *   - RandomNormal(mean m, scale s): sample mean within 5 s/sqrt(n) of m; sample variance within
 *     5 s^2 sqrt(2/(n-1)) of s^2; the share within one s of m within 5 sqrt(p(1-p)/n) of
 *     p = erf(1/sqrt(2)) = 0.6827 (a uniform of the same variance gives 0.577);
 *   - RandomUniform(low, high): every value in [low, high); mean and variance against
 *     (low+high)/2 and (high-low)^2/12 with the same 5-standard-error bounds (the variance's
 *     standard error from the fourth central moment (high-low)^4/80);
 *   - Bernoulli(p): p 0 and 1 exact, the share of ones for p = 0.3 within 5 sqrt(p(1-p)/n);
 *   - Multinomial: class frequencies against softmax(logits) within 5 sqrt(p(1-p)/n); a class of
 *     weight 0 (logit -inf) never drawn.
 * Seeds: one seed gives the same values in two sessions, another seed other values; a session's
 * second run continues the stream (new values: the nodes are never constant-folded); without a
 * seed two sessions differ. Shapes and element types follow the attributes and the input.
 * LpNormalization and GlobalLpPool are compared with a float64 reference written out here
 * (relative error bound 1e-6: float32 results of float64 sums), Gelu (exact, tanh) and QuickGelu
 * against their formulas in double, GroupNormalization (opsets 18 and 21) against float64 group
 * statistics, the Bitwise operators against C's operators with broadcasting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "testutil.h"

typedef struct attr {
    char kind; /* i: int, f: float, I: ints, s: string */
    const char *name;
    int64_t i;
    float f;
    size_t n;
    const int64_t *ints;
    const char *s;
} attr;

static const char *const INPUTS[] = {"x", "x1", "x2"};

/* A model of one node "the_node" reading graph inputs x, x1, x2 (typed like like[0..n_in)) into
 * output "y". */
static otter_model *node_model(const char *op, int64_t opset, size_t n_in, const otter_tensor *const *like,
                               const attr *attrs, size_t n_attrs) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", opset));
    const char *out = "y";
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, op, "the_node", n_in, INPUTS, 1, &out));
    if (strcmp(op, "QuickGelu") == 0) {
        CHECK_OK(otter_node_set_domain(n, "com.microsoft"));
        CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    }
    for (size_t k = 0; k < n_attrs; k++) {
        const attr *a = &attrs[k];
        if (a->kind == 'i') CHECK_OK(otter_node_set_attr_int(n, a->name, a->i));
        if (a->kind == 'f') CHECK_OK(otter_node_set_attr_float(n, a->name, a->f));
        if (a->kind == 'I') CHECK_OK(otter_node_set_attr_ints(n, a->name, a->n, a->ints));
        if (a->kind == 's') CHECK_OK(otter_node_set_attr_string(n, a->name, a->s));
    }
    CHECK_OK(otter_graph_add_node(m->graph, n));
    for (size_t k = 0; k < n_in; k++)
        CHECK_OK(otter_graph_add_input(m->graph, INPUTS[k], like[k]->dtype, like[k]->rank, like[k]->dims, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_UNDEFINED, -1, NULL, NULL));
    return m;
}

/* The same with at most one input x. */
static otter_model *one_node(const char *op, int64_t opset, const otter_tensor *x_like, const attr *attrs,
                             size_t n_attrs) {
    return node_model(op, opset, x_like ? 1 : 0, &x_like, attrs, n_attrs);
}

static otter_session *open_session(otter_model *m) {
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 1};
    CHECK_OK(otter_session_create(&s, m, &o));
    return s;
}

/* One run on inputs x, x1, ...; NULL (the error printed) on failure. */
static otter_tensor *run_n(otter_session *s, size_t n_in, const otter_tensor *const *in) {
    if (!s) return NULL;
    const char *out = "y";
    otter_tensor *y = NULL;
    otter_status st = otter_session_run(s, n_in, INPUTS, in, 1, &out, &y);
    if (st != OTTER_OK) fprintf(stderr, "run failed: %s\n", otter_last_error());
    CHECK(st == OTTER_OK);
    return st == OTTER_OK ? y : NULL;
}

static otter_tensor *run(otter_session *s, const otter_tensor *x) { return run_n(s, x ? 1 : 0, &x); }

/* One session, one run. */
static otter_tensor *run_node(const char *op, int64_t opset, size_t n_in, const otter_tensor *const *in,
                              const attr *attrs, size_t n_attrs) {
    otter_model *m = node_model(op, opset, n_in, in, attrs, n_attrs);
    otter_session *s = open_session(m);
    otter_tensor *y = run_n(s, n_in, in);
    otter_session_free(s);
    otter_model_free(m);
    return y;
}

static otter_tensor *run_once(const char *op, int64_t opset, const otter_tensor *x, const attr *attrs, size_t n_attrs) {
    return run_node(op, opset, x ? 1 : 0, &x, attrs, n_attrs);
}

static double value(const otter_tensor *t, int64_t i) {
    switch (t->dtype) {
    case OTTER_DTYPE_FLOAT:
        return ((const float *)t->data)[i];
    case OTTER_DTYPE_DOUBLE:
        return ((const double *)t->data)[i];
    case OTTER_DTYPE_INT32:
        return ((const int32_t *)t->data)[i];
    case OTTER_DTYPE_INT64:
        return (double)((const int64_t *)t->data)[i];
    case OTTER_DTYPE_BOOL:
        return ((const uint8_t *)t->data)[i];
    default:
        return NAN;
    }
}

/* |got - want| <= bound, NaN failing; printed. */
static void within(const char *what, double got, double want, double bound) {
    bool ok = fabs(got - want) <= bound;
    printf("  %-44s %.6f, expected %.6f +- %.6f%s\n", what, got, want, bound, ok ? "" : "  FAIL");
    CHECK(ok);
}

static bool same_shape(const otter_tensor *t, otter_dtype dt, int rank, const int64_t *dims) {
    if (!t || t->dtype != dt || t->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (t->dims[i] != dims[i]) return false;
    return true;
}

#define N_DRAWS 100000
static const int64_t DRAW_DIMS[2] = {200, 500};

static void random_normal(void) {
    printf("RandomNormal, mean 1.5, scale 2, %d draws\n", N_DRAWS);
    const attr a[] = {{'f', "mean", 0, 1.5f, 0, NULL},
                      {'f', "scale", 0, 2.0f, 0, NULL},
                      {'f', "seed", 0, 3.0f, 0, NULL},
                      {'I', "shape", 0, 0, 2, DRAW_DIMS}};
    otter_tensor *y = run_once("RandomNormal", 13, NULL, a, 4);
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 2, DRAW_DIMS));
    if (!y) return;
    double n = N_DRAWS, sum = 0, sq = 0, inside = 0;
    for (int64_t i = 0; i < N_DRAWS; i++) sum += value(y, i);
    double mean = sum / n;
    for (int64_t i = 0; i < N_DRAWS; i++) {
        double d = value(y, i) - mean;
        sq += d * d;
        inside += fabs(value(y, i) - 1.5) < 2.0;
    }
    double p = erf(1 / sqrt(2.0));
    within("mean", mean, 1.5, 5 * 2.0 / sqrt(n));
    within("variance", sq / (n - 1), 4.0, 5 * 4.0 * sqrt(2 / (n - 1)));
    within("share within one scale of the mean", inside / n, p, 5 * sqrt(p * (1 - p) / n));
    otter_tensor_free(y);

    const attr d[] = {{'i', "dtype", OTTER_DTYPE_DOUBLE, 0, 0, NULL}, {'I', "shape", 0, 0, 1, (int64_t[]){7}}};
    y = run_once("RandomNormal", 13, NULL, d, 2);
    printf("  dtype double, shape [7]: %s\n", y ? otter_dtype_name(y->dtype) : "(failed)");
    CHECK(same_shape(y, OTTER_DTYPE_DOUBLE, 1, (int64_t[]){7}));
    otter_tensor_free(y);
}

static void random_uniform(void) {
    printf("RandomUniform, low -1, high 3, %d draws\n", N_DRAWS);
    const attr a[] = {{'f', "low", 0, -1.0f, 0, NULL},
                      {'f', "high", 0, 3.0f, 0, NULL},
                      {'f', "seed", 0, 5.0f, 0, NULL},
                      {'I', "shape", 0, 0, 2, DRAW_DIMS}};
    otter_tensor *y = run_once("RandomUniform", 13, NULL, a, 4);
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 2, DRAW_DIMS));
    if (!y) return;
    double n = N_DRAWS, sum = 0, sq = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < N_DRAWS; i++) {
        double v = value(y, i);
        sum += v;
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    double mean = sum / n;
    for (int64_t i = 0; i < N_DRAWS; i++) sq += (value(y, i) - mean) * (value(y, i) - mean);
    double width = 4, var = width * width / 12, mu4 = pow(width, 4) / 80;
    printf("  range [%.6f, %.6f]\n", lo, hi);
    CHECK(lo >= -1 && hi < 3);
    within("mean", mean, 1.0, 5 * sqrt(var / n));
    within("variance", sq / (n - 1), var, 5 * sqrt((mu4 - var * var) / n));
    otter_tensor_free(y);
}

static bool equal_values(const otter_tensor *a, const otter_tensor *b) {
    return a && b && otter_tensor_numel(a) == otter_tensor_numel(b) &&
           memcmp(a->data, b->data, otter_tensor_nbytes(a)) == 0;
}

static int64_t count_equal(const otter_tensor *a, const otter_tensor *b) {
    int64_t same = 0;
    for (int64_t i = 0; a && b && i < otter_tensor_numel(a); i++) same += value(a, i) == value(b, i);
    return same;
}

static void seeds(void) {
    printf("seeds\n");
    const int64_t shape[1] = {1000};
    const attr seed7[] = {{'f', "seed", 0, 7.0f, 0, NULL}, {'I', "shape", 0, 0, 1, shape}};
    const attr seed8[] = {{'f', "seed", 0, 8.0f, 0, NULL}, {'I', "shape", 0, 0, 1, shape}};
    const attr unseeded[] = {{'I', "shape", 0, 0, 1, shape}};
    otter_model *m7 = one_node("RandomUniform", 13, NULL, seed7, 2);
    otter_session *s1 = open_session(m7), *s2 = open_session(m7);
    otter_tensor *first = run(s1, NULL), *again = run(s2, NULL), *next = run(s1, NULL);
    otter_tensor *other = run_once("RandomUniform", 13, NULL, seed8, 2);
    otter_tensor *free1 = run_once("RandomUniform", 13, NULL, unseeded, 1);
    otter_tensor *free2 = run_once("RandomUniform", 13, NULL, unseeded, 1);
    bool same_seed = equal_values(first, again);
    int64_t with_other = count_equal(first, other), with_next = count_equal(first, next);
    int64_t unseeded_same = count_equal(free1, free2);
    printf("  seed 7 in two sessions: %s\n", same_seed ? "identical" : "DIFFERENT");
    printf("  seed 7 vs seed 8: %lld of 1000 equal\n", (long long)with_other);
    printf("  seed 7, second run of a session vs its first: %lld of 1000 equal\n", (long long)with_next);
    printf("  no seed, two sessions: %lld of 1000 equal\n", (long long)unseeded_same);
    CHECK(same_seed);
    CHECK(first && other && with_other == 0);
    CHECK(first && next && with_next == 0);
    CHECK(free1 && free2 && unseeded_same == 0);
    otter_tensor_free(first);
    otter_tensor_free(again);
    otter_tensor_free(next);
    otter_tensor_free(other);
    otter_tensor_free(free1);
    otter_tensor_free(free2);
    otter_session_free(s1);
    otter_session_free(s2);
    otter_model_free(m7);
}

static void like(void) {
    printf("RandomNormalLike, RandomUniformLike\n");
    otter_tensor *ints = NULL, *halves = NULL;
    CHECK_OK(otter_tensor_create(&ints, NULL, OTTER_DTYPE_INT32, 2, (int64_t[]){3, 4}));
    CHECK_OK(otter_tensor_create(&halves, NULL, OTTER_DTYPE_FLOAT16, 3, (int64_t[]){2, 1, 5}));
    const attr to_double[] = {{'i', "dtype", OTTER_DTYPE_DOUBLE, 0, 0, NULL}};
    otter_tensor *y = run_once("RandomNormalLike", 13, ints, to_double, 1);
    printf("  int32[3,4] with dtype double -> %s\n", y ? otter_dtype_name(y->dtype) : "(failed)");
    CHECK(same_shape(y, OTTER_DTYPE_DOUBLE, 2, (int64_t[]){3, 4}));
    otter_tensor_free(y);
    const attr range[] = {{'f', "low", 0, 2.0f, 0, NULL}, {'f', "high", 0, 2.5f, 0, NULL}};
    y = run_once("RandomUniformLike", 13, halves, range, 2);
    printf("  float16[2,1,5] -> %s\n", y ? otter_dtype_name(y->dtype) : "(failed)");
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT16, 3, (int64_t[]){2, 1, 5}));
    otter_tensor_free(y);
    /* an int32 input without dtype: no floating type to produce */
    otter_model *m = one_node("RandomUniformLike", 13, ints, NULL, 0);
    otter_session *s = open_session(m);
    const char *in = "x", *out = "y";
    otter_tensor *none = NULL;
    CHECK_STATUS(otter_session_run(s, 1, &in, (const otter_tensor *const *)&ints, 1, &out, &none), OTTER_ERR_INVALID);
    printf("  int32 input without dtype: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "the_node") != NULL);
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(ints);
    otter_tensor_free(halves);
}

static void bernoulli(void) {
    printf("Bernoulli, p in {0, 1, 0.3}, %d draws of each\n", N_DRAWS / 4);
    const int64_t n = N_DRAWS / 4;
    otter_tensor *p = NULL;
    CHECK_OK(otter_tensor_create(&p, NULL, OTTER_DTYPE_FLOAT, 2, (int64_t[]){3, n}));
    float *pd = p->data;
    for (int64_t i = 0; i < n; i++) pd[i] = 0, pd[n + i] = 1, pd[2 * n + i] = 0.3f;
    const attr a[] = {{'f', "seed", 0, 11.0f, 0, NULL}, {'i', "dtype", OTTER_DTYPE_INT64, 0, 0, NULL}};
    otter_tensor *y = run_once("Bernoulli", 15, p, a, 2);
    CHECK(same_shape(y, OTTER_DTYPE_INT64, 2, (int64_t[]){3, n}));
    if (y) {
        int64_t ones0 = 0, ones1 = 0, ones3 = 0, others = 0;
        for (int64_t i = 0; i < n; i++) {
            ones0 += value(y, i) == 1;
            ones1 += value(y, n + i) == 1;
            ones3 += value(y, 2 * n + i) == 1;
            for (int k = 0; k < 3; k++) others += value(y, k * n + i) != 0 && value(y, k * n + i) != 1;
        }
        printf("  ones at p 0: %lld, at p 1: %lld of %lld, values other than 0/1: %lld\n", (long long)ones0,
               (long long)ones1, (long long)n, (long long)others);
        CHECK(ones0 == 0 && ones1 == n && others == 0);
        within("share of ones at p 0.3", (double)ones3 / (double)n, 0.3, 5 * sqrt(0.3 * 0.7 / (double)n));
    }
    otter_tensor_free(y);
    y = run_once("Bernoulli", 15, p, NULL, 0);
    printf("  without dtype: %s\n", y ? otter_dtype_name(y->dtype) : "(failed)");
    CHECK(y && y->dtype == OTTER_DTYPE_FLOAT);
    otter_tensor_free(y);
    pd[5] = 1.5f;
    otter_model *m = one_node("Bernoulli", 15, p, NULL, 0);
    otter_session *s = open_session(m);
    const char *in = "x", *out = "y";
    otter_tensor *none = NULL;
    CHECK_STATUS(otter_session_run(s, 1, &in, (const otter_tensor *const *)&p, 1, &out, &none), OTTER_ERR_INVALID);
    printf("  p 1.5: %s\n", otter_last_error());
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(p);
}

static void multinomial(void) {
    const int64_t samples = 40000;
    printf("Multinomial, %lld draws from two rows of logits\n", (long long)samples);
    float logits[6] = {logf(0.2f), logf(0.3f), logf(0.5f), 1.0f, -INFINITY, 1.0f};
    otter_tensor *x = NULL;
    CHECK_OK(otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 3}, logits));
    const attr a[] = {{'f', "seed", 0, 13.0f, 0, NULL},
                      {'i', "sample_size", samples, 0, 0, NULL},
                      {'i', "dtype", OTTER_DTYPE_INT64, 0, 0, NULL}};
    otter_tensor *y = run_once("Multinomial", 13, x, a, 3);
    CHECK(same_shape(y, OTTER_DTYPE_INT64, 2, (int64_t[]){2, samples}));
    if (y) {
        const double want[2][3] = {{0.2, 0.3, 0.5}, {0.5, 0.0, 0.5}};
        for (int b = 0; b < 2; b++) {
            int64_t count[3] = {0, 0, 0}, bad = 0;
            for (int64_t s = 0; s < samples; s++) {
                double c = value(y, b * samples + s);
                if (c >= 0 && c < 3)
                    count[(int)c]++;
                else
                    bad++;
            }
            CHECK(bad == 0);
            for (int c = 0; c < 3; c++) {
                char what[64];
                snprintf(what, sizeof what, "row %d: share of class %d", b, c);
                double p = want[b][c];
                within(what, (double)count[c] / (double)samples, p,
                       p > 0 ? 5 * sqrt(p * (1 - p) / (double)samples) : 0);
            }
        }
    }
    otter_tensor_free(y);
    otter_tensor_free(x);
}

/* ---- LpNormalization, GlobalLpPool ---- */

static otter_tensor *filled(int rank, const int64_t *dims) {
    otter_tensor *x = NULL;
    CHECK_OK(otter_tensor_create(&x, NULL, OTTER_DTYPE_FLOAT, rank, dims));
    float *p = x->data;
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) p[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
    return x;
}

/* worst |got - want| / max(|want|, 1e-30) over the elements, NaN-safe (a NaN makes it infinite) */
static double rel_error(const otter_tensor *got, const double *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(value(got, i) - want[i]) / fmax(fabs(want[i]), 1e-30);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    return worst;
}

static void lp_normalization(int64_t axis, int64_t p) {
    const int64_t dims[3] = {2, 3, 4};
    otter_tensor *x = filled(3, dims);
    float *xd = x->data;
    int64_t ax = axis < 0 ? axis + 3 : axis, len = dims[ax], inner = 1, outer = 1;
    for (int i = 0; i < ax; i++) outer *= dims[i];
    for (int i = (int)ax + 1; i < 3; i++) inner *= dims[i];
    for (int64_t k = 0; k < len; k++) xd[k * inner] = 0; /* the first line is all zeros: zeros out */
    double want[24];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double norm = 0;
            for (int64_t k = 0; k < len; k++) {
                double v = xd[(o * len + k) * inner + in];
                norm += p == 1 ? fabs(v) : v * v;
            }
            norm = p == 1 ? norm : sqrt(norm);
            for (int64_t k = 0; k < len; k++) {
                int64_t e = (o * len + k) * inner + in;
                want[e] = norm > 0 ? xd[e] / norm : 0;
            }
        }
    const attr a[] = {{'i', "axis", axis, 0, 0, NULL}, {'i', "p", p, 0, 0, NULL}};
    otter_tensor *y = run_once("LpNormalization", 13, x, a, 2);
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 3, dims));
    double e = y ? rel_error(y, want, 24) : INFINITY;
    printf("LpNormalization axis %lld p %lld on [2,3,4] (one zero line): worst relative error %.3g (bound 1e-6)\n",
           (long long)axis, (long long)p, e);
    CHECK(e <= 1e-6);
    otter_tensor_free(y);
    otter_tensor_free(x);
}

static void lp_normalization_bad_p(void) {
    otter_tensor *x = filled(2, (int64_t[]){2, 2});
    otter_model *m = one_node("LpNormalization", 13, x, (attr[]){{'i', "p", 3, 0, 0, NULL}}, 1);
    otter_session *s = open_session(m);
    const char *in = "x", *out = "y";
    otter_tensor *none = NULL;
    CHECK_STATUS(otter_session_run(s, 1, &in, (const otter_tensor *const *)&x, 1, &out, &none), OTTER_ERR_INVALID);
    printf("LpNormalization p 3: %s\n", otter_last_error());
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(x);
}

static void global_lp_pool(int64_t opset, double p) {
    const int64_t dims[4] = {2, 3, 4, 5};
    otter_tensor *x = filled(4, dims);
    const float *xd = x->data;
    double want[6];
    for (int c = 0; c < 6; c++) {
        double sum = 0;
        for (int k = 0; k < 20; k++) sum += pow(fabs(xd[c * 20 + k]), p);
        want[c] = pow(sum, 1 / p);
    }
    attr a = opset < 2 ? (attr){'f', "p", 0, (float)p, 0, NULL} : (attr){'i', "p", (int64_t)p, 0, 0, NULL};
    otter_model *m = one_node("GlobalLpPool", opset, x, &a, 1);
    otter_session *s = open_session(m);
    otter_tensor *y = run(s, x);
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 4, (int64_t[]){2, 3, 1, 1}));
    double e = y ? rel_error(y, want, 6) : INFINITY;
    printf("GlobalLpPool-%lld p %g on [2,3,4,5]: worst relative error %.3g (bound 1e-6)\n", (long long)opset, p, e);
    CHECK(e <= 1e-6);
    otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(x);
}

/* ---- BitwiseAnd/Or/Xor/Not, Gelu, QuickGelu, GroupNormalization ---- */

static void bitwise(void) {
    int16_t a[6] = {0x0f0f, -1, 0, 12345, -32768, 255}, b[2] = {0x00ff, -256};
    otter_tensor *ta = NULL, *tb = NULL;
    CHECK_OK(otter_tensor_from_data(&ta, NULL, OTTER_DTYPE_INT16, 2, (int64_t[]){3, 2}, a));
    CHECK_OK(otter_tensor_from_data(&tb, NULL, OTTER_DTYPE_INT16, 1, (int64_t[]){2}, b));
    const char *ops[3] = {"BitwiseAnd", "BitwiseOr", "BitwiseXor"};
    for (int op = 0; op < 3; op++) {
        otter_tensor *y = run_node(ops[op], 18, 2, (const otter_tensor *const[]){ta, tb}, NULL, 0);
        CHECK(same_shape(y, OTTER_DTYPE_INT16, 2, (int64_t[]){3, 2}));
        int wrong = 0;
        for (int i = 0; y && i < 6; i++) {
            int16_t x = a[i], z = b[i % 2];
            int16_t want = (int16_t)(op == 0 ? x & z : op == 1 ? x | z : x ^ z);
            wrong += ((const int16_t *)y->data)[i] != want;
        }
        printf("%s int16 [3,2] with [2] broadcast: %d of 6 wrong\n", ops[op], wrong);
        CHECK(y && wrong == 0);
        otter_tensor_free(y);
    }
    uint8_t u[4] = {0, 1, 0x80, 0xff};
    otter_tensor *tu = NULL;
    CHECK_OK(otter_tensor_from_data(&tu, NULL, OTTER_DTYPE_UINT8, 1, (int64_t[]){4}, u));
    otter_tensor *y = run_once("BitwiseNot", 18, tu, NULL, 0);
    int wrong = 0;
    for (int i = 0; y && i < 4; i++) wrong += ((const uint8_t *)y->data)[i] != 255 - u[i];
    printf("BitwiseNot uint8 [4]: %d of 4 wrong\n", wrong);
    CHECK(same_shape(y, OTTER_DTYPE_UINT8, 1, (int64_t[]){4}) && wrong == 0);
    otter_tensor_free(y);
    otter_model *m = node_model("BitwiseAnd", 18, 2, (const otter_tensor *const[]){ta, tu}, NULL, 0);
    otter_session *s = open_session(m);
    const char *out = "y";
    otter_tensor *none = NULL;
    CHECK_STATUS(otter_session_run(s, 2, INPUTS, (const otter_tensor *const[]){ta, tu}, 1, &out, &none),
                 OTTER_ERR_INVALID);
    printf("BitwiseAnd int16 with uint8: %s\n", otter_last_error());
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(ta);
    otter_tensor_free(tb);
    otter_tensor_free(tu);
}

/* Gelu exact and tanh, QuickGelu, against the formulas in double; relative error bound 1e-6 */
static void gelu(void) {
    otter_tensor *x = filled(2, (int64_t[]){4, 6});
    const float *xd = x->data;
    double exact[24], approx[24], quick[24];
    for (int i = 0; i < 24; i++) {
        double v = xd[i];
        exact[i] = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        approx[i] = 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        quick[i] = v / (1 + exp(-1.5 * v));
    }
    struct {
        const char *op, *label;
        attr a;
        const double *want;
    } cases[] = {{"Gelu", "Gelu", {'s', "approximate", 0, 0, 0, NULL, "none"}, exact},
                 {"Gelu", "Gelu tanh", {'s', "approximate", 0, 0, 0, NULL, "tanh"}, approx},
                 {"QuickGelu", "QuickGelu alpha 1.5", {'f', "alpha", 0, 1.5f, 0, NULL, NULL}, quick}};
    for (int c = 0; c < 3; c++) {
        otter_tensor *y = run_node(cases[c].op, 20, 1, (const otter_tensor *const[]){x}, &cases[c].a, 1);
        CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 2, (int64_t[]){4, 6}));
        double e = y ? rel_error(y, cases[c].want, 24) : INFINITY;
        printf("%s on [4,6]: worst relative error %.3g (bound 1e-6)\n", cases[c].label, e);
        CHECK(e <= 1e-6);
        otter_tensor_free(y);
    }
    otter_tensor_free(x);
}

/* GroupNormalization-18 (scale per group) and -21 (per channel) against a float64 reference */
static void group_normalization(int64_t opset) {
    const int64_t dims[4] = {2, 6, 2, 3}, groups = 3, per = 6 / 3, spatial = 6;
    otter_tensor *x = filled(4, dims);
    int64_t n_affine = opset >= 21 ? 6 : groups;
    float scale[6], bias[6];
    for (int i = 0; i < 6; i++) scale[i] = 0.5f + 0.25f * (float)i, bias[i] = 0.1f * (float)i - 0.2f;
    otter_tensor *ts = NULL, *tb = NULL;
    CHECK_OK(otter_tensor_from_data(&ts, NULL, OTTER_DTYPE_FLOAT, 1, &n_affine, scale));
    CHECK_OK(otter_tensor_from_data(&tb, NULL, OTTER_DTYPE_FLOAT, 1, &n_affine, bias));
    const float *xd = x->data;
    double want[72];
    for (int64_t n = 0; n < 2; n++)
        for (int64_t g = 0; g < groups; g++) {
            int64_t start = (n * 6 + g * per) * spatial, size = per * spatial;
            double mean = 0, var = 0;
            for (int64_t k = 0; k < size; k++) mean += xd[start + k] / (double)size;
            for (int64_t k = 0; k < size; k++) var += (xd[start + k] - mean) * (xd[start + k] - mean) / (double)size;
            for (int64_t k = 0; k < size; k++) {
                int64_t at = opset >= 21 ? g * per + k / spatial : g;
                want[start + k] = (xd[start + k] - mean) / sqrt(var + 1e-3) * scale[at] + bias[at];
            }
        }
    const attr a[] = {{'i', "num_groups", groups, 0, 0, NULL, NULL}, {'f', "epsilon", 0, 1e-3f, 0, NULL, NULL}};
    otter_tensor *y = run_node("GroupNormalization", opset, 3, (const otter_tensor *const[]){x, ts, tb}, a, 2);
    CHECK(same_shape(y, OTTER_DTYPE_FLOAT, 4, dims));
    double e = y ? rel_error(y, want, 72) : INFINITY;
    printf("GroupNormalization-%lld, 3 groups of [2,6,2,3]: worst relative error %.3g (bound 1e-6)\n", (long long)opset,
           e);
    CHECK(e <= 1e-6);
    otter_tensor_free(y);
    otter_tensor_free(x);
    otter_tensor_free(ts);
    otter_tensor_free(tb);
}

int main(void) {
    random_normal();
    random_uniform();
    seeds();
    like();
    bernoulli();
    multinomial();
    lp_normalization(1, 2);
    lp_normalization(-1, 1);
    lp_normalization(0, 2);
    lp_normalization_bad_p();
    global_lp_pool(2, 2);
    global_lp_pool(2, 3);
    global_lp_pool(1, 1);
    bitwise();
    gelu();
    group_normalization(18);
    group_normalization(21);
    return tu_finish("test_kernels_gaps");
}
