/* vec_math's float activations (the Sigmoid, Tanh, HardSwish, Gelu and Swish kernels) and softmax rows against
 * double-precision libm, on every path this CPU runs (portable, AVX2 + FMA, AVX-512); the two vector paths run the
 * same FMAs lane by lane, so their activations must agree bit for bit.
 *
 * Tolerance: an error within 16 float ulp of the true value (16 * 2^-24 relative, the polynomial exp is within 2
 * ulp of expf and each activation adds a few roundings), or within 1e-35 absolute where the result is that small
 * (e^x underflows to 0 below -87.3, and Swish or Gelu multiply that by x). Where the float code computes exp's
 * argument (Swish's alpha x, Gelu's), the argument's rounding adds |arg| 2^-22 relative (see reference()). Gelu
 * (erf) is 0.5 x erfc(-x / sqrt 2) with Numerical Recipes' erfcc (fractional error 1.2e-7): 4e-6 for both Gelus. NaN
 * must stay NaN; +-inf must saturate for Sigmoid, Tanh and HardSwish (x sigmoid(x) at -inf is -inf * 0, left out). Rows
 * of every length from 1 to 40 cover the 8-wide loop and its scalar tail. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops/vec_math.h"
#include "testutil.h"

/* The activation in double; *arg = the argument its float version computes before calling exp (0 when that is x
 * itself or there is no exp): float rounds it to within |arg| 2^-23 or so, and exp turns that into a relative
 * error of the same size, which no implementation in float avoids. */
static double reference(ot_vec_act act, double alpha, double x, double *arg) {
    *arg = 0;
    switch (act) {
    case OT_VEC_GELU_ERF:
        *arg = x * x / 2;
        return 0.5 * x * erfc(-x * M_SQRT1_2);
    case OT_VEC_GELU_TANH:
        /* 0.5 x (1 + tanh(u)) as x / (1 + e^-2u): 1 + tanh(u) cancels to 0 in double for u < -19 */
        *arg = 2 * 0.7978845608028654 * (x + 0.044715 * x * x * x);
        return x / (1.0 + exp(-*arg));
    case OT_VEC_SWISH:
        *arg = alpha * x;
        return x / (1.0 + exp(-alpha * x));
    case OT_VEC_SIGMOID:
        return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case OT_VEC_TANH:
        return tanh(x);
    case OT_VEC_HARDSWISH:
        return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
    }
    return NAN;
}

static const struct {
    ot_vec_act act;
    const char *name;
    double rel_tol;
} ACTS[] = {
    {OT_VEC_SIGMOID, "sigmoid", 16 * 0x1p-24},    {OT_VEC_TANH, "tanh", 16 * 0x1p-24},
    {OT_VEC_HARDSWISH, "hardswish", 4 * 0x1p-24}, {OT_VEC_SWISH, "swish", 16 * 0x1p-24},
    {OT_VEC_GELU_ERF, "gelu_erf", 4e-6},          {OT_VEC_GELU_TANH, "gelu_tanh", 4e-6},
};

/* Points that matter: zeros, tiny values (tanh's and sigmoid's relative accuracy near 0), the polynomial/exp switch
 * at 0.625, exp's overflow and underflow edges, +-inf, and a dense sweep of [-100, 100]. */
static size_t make_inputs(float *x, size_t cap) {
    static const float special[] = {0.0f,   -0.0f,    1e-30f, -1e-30f, 1e-6f,   -1e-6f, 0.3f,    -0.3f,    0.6249f,
                                    0.625f, -0.6251f, 3.0f,   -3.0f,   -6.0f,   6.0f,   43.9f,   44.5f,    -44.5f,
                                    87.0f,  -87.0f,   88.5f,  -88.5f,  -103.0f, 120.0f, -120.0f, INFINITY, -INFINITY};
    size_t n = 0;
    for (size_t i = 0; i < sizeof special / sizeof *special && n < cap; i++) x[n++] = special[i];
    for (int i = -20000; i <= 20000 && n < cap; i++) x[n++] = (float)i * 0.005f; /* x[27 + 20000] = 0 */
    for (int e = -40; e <= 6 && n + 1 < cap; e++) x[n++] = ldexpf(1.3f, e), x[n++] = -ldexpf(1.3f, e);
    return n;
}

static double error_of(double got, double want, double arg, double rel_tol) {
    rel_tol += fabs(arg) * 0x1p-22;
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isinf(want)) return got == want ? 0 : INFINITY;
    double err = fabs(got - want);
    if (fabs(want) < 1e-35 && err <= 1e-35) return 0; /* e^x underflowed, then times x */
    return err / (rel_tol * fmax(fabs(want), 1e-37)); /* <= 1 passes */
}

static const char *const ISA_NAMES[] = {"portable", "avx2", "avx512"};

static void check_path(ot_vec_isa isa, const float *x, size_t n, float *y) {
    const char *path = ISA_NAMES[isa];
#define run(...) ot_vec_activation_isa(isa, __VA_ARGS__)
    for (size_t a = 0; a < sizeof ACTS / sizeof *ACTS; a++) {
        float alpha = ACTS[a].act == OT_VEC_SWISH ? 1.702f : 0.0f;
        run(ACTS[a].act, alpha, x, NULL, y, (int64_t)n);
        double worst = 0;
        size_t worst_i = 0;
        bool gated = ACTS[a].act == OT_VEC_SWISH || ACTS[a].act == OT_VEC_GELU_ERF || ACTS[a].act == OT_VEC_GELU_TANH;
        for (size_t i = 0; i < n; i++) {
            if (gated && isinf(x[i])) continue;
            double arg, want = reference(ACTS[a].act, alpha, x[i], &arg);
            double e = error_of(y[i], want, arg, ACTS[a].rel_tol);
            if (!(e <= worst)) worst = e, worst_i = i;
        }
        printf("%-9s %-9s worst error %.3g of the tolerance (x = %g)\n", path, ACTS[a].name, worst, x[worst_i]);
        CHECK(worst <= 1.0);
        /* NaN in, NaN out, in the vector body and in the tail */
        float nan_row[11], out[11];
        for (int i = 0; i < 11; i++) nan_row[i] = i % 4 == 1 ? NAN : 0.5f;
        run(ACTS[a].act, alpha, nan_row, NULL, out, 11);
        for (int i = 0; i < 11; i++) CHECK(isnan(out[i]) == (i % 4 == 1));
        /* every row length up to 40 (vector body and scalar tail), in place (y == x) */
        double worst_len = 0;
        for (int64_t len = 1; len <= 40; len++) {
            float row[40];
            const float *src = x + 27 + 20000 - 150; /* -0.75 .. -0.55: both of tanh's branches */
            memcpy(row, src, (size_t)len * sizeof *row);
            run(ACTS[a].act, alpha, row, NULL, row, len);
            for (int64_t i = 0; i < len; i++) {
                double arg, want = reference(ACTS[a].act, alpha, src[i], &arg);
                worst_len = tu_worse(worst_len, error_of(row[i], want, arg, ACTS[a].rel_tol));
            }
        }
        CHECK(worst_len <= 1.0);
    }
#undef run
}

/* Softmax rows of every length up to 70 (vector bodies and tails), against double; a fully masked row gives zeros. */
static void check_softmax(ot_vec_isa isa) {
    double worst = 0;
    for (int64_t len = 1; len <= 70; len++) {
        float row[70];
        double want[70], max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < len; j++) row[j] = (float)((j * 37 % 23) - 11) * 0.7f, max = fmax(max, row[j]);
        if (len > 3) row[2] = -INFINITY; /* a masked entry */
        for (int64_t j = 0; j < len; j++) sum += want[j] = exp((double)row[j] - max);
        ot_softmax_row_isa(isa, row, len);
        for (int64_t j = 0; j < len; j++)
            worst = tu_worse(worst, fabs(row[j] - want[j] / sum) / (want[j] / sum + 1e-30));
    }
    printf("%-9s softmax   worst relative error %.3g\n", ISA_NAMES[isa], worst);
    CHECK(worst <= 8 * 0x1p-24 * 70); /* 2-ulp exps, a sum of up to 70 terms and one product each */
    float masked[19];
    for (int j = 0; j < 19; j++) masked[j] = -INFINITY;
    ot_softmax_row_isa(isa, masked, 19);
    for (int j = 0; j < 19; j++) CHECK(masked[j] == 0.0f);
}

/* The vector paths against each other: the same bits for every input. */
static void check_same_bits(ot_vec_isa a, ot_vec_isa b, const float *x, size_t n, float *ya, float *yb) {
    for (size_t k = 0; k < sizeof ACTS / sizeof *ACTS; k++) {
        ot_vec_activation_isa(a, ACTS[k].act, 1.702f, x, x, ya, (int64_t)n); /* gated too */
        ot_vec_activation_isa(b, ACTS[k].act, 1.702f, x, x, yb, (int64_t)n);
        size_t differ = 0;
        for (size_t i = 0; i < n; i++) differ += memcmp(&ya[i], &yb[i], sizeof *ya) != 0;
        if (differ)
            printf("%s and %s differ on %zu of %zu %s values\n", ISA_NAMES[a], ISA_NAMES[b], differ, n, ACTS[k].name);
        CHECK(differ == 0);
    }
}

int main(void) {
    enum { CAP = 50000 };
    float *x = malloc(CAP * sizeof *x), *y = malloc(CAP * sizeof *y), *y2 = malloc(CAP * sizeof *y2);
    if (!x || !y || !y2) return 1;
    size_t n = make_inputs(x, CAP);
    for (int isa = OT_VEC_PORTABLE; isa <= (int)ot_vec_isa_best(); isa++) {
        check_path((ot_vec_isa)isa, x, n, y);
        check_softmax((ot_vec_isa)isa);
    }
    if (ot_vec_isa_best() == OT_VEC_AVX512) check_same_bits(OT_VEC_AVX2, OT_VEC_AVX512, x, n, y, y2);
    /* the dispatcher runs the best path */
    ot_vec_activation(OT_VEC_GELU_TANH, 0, x, NULL, y, (int64_t)n);
    ot_vec_activation_isa(ot_vec_isa_best(), OT_VEC_GELU_TANH, 0, x, NULL, y2, (int64_t)n);
    CHECK(memcmp(y, y2, n * sizeof *y) == 0);
    free(x), free(y), free(y2);
    return tu_finish("test_vec_math");
}
