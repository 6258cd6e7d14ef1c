/* Checks of ops/rnn.c, ops/quant.c and ops/extra.c beyond the ONNX backend suite, which runs
 * each recurrent operator forward only with default activations:
 *   - RNN/GRU/LSTM: a reverse run equals a forward run on the time-reversed input; bidirectional
 *     equals the two one-way runs side by side; sequence_lens (reverse: each row from its own
 *     length, zeros past it) equals a separate run on the row's prefix; layout 1 equals layout 0
 *     transposed; one step of GRU (linear_before_reset) and LSTM (peepholes, clip, input_forget)
 *     and an RNN with Affine alpha/beta against the equations written out by hand.
 *   - QuantizeLinear: round half to even, saturation, per axis and opset-21 blocks;
 *     DequantizeLinear of int32 per axis; the narrow types: int4 blocked with zero points and
 *     back, float8e4m3fn with and without saturate, uint2 per axis, QuantizeLinear's precision.
 *   - Cast to float8e8m0 with round_mode and saturate, strings to float8; BitCast between the
 *     4-bit types (re-extended bit patterns) and a width mismatch.
 *   - Unique over an axis in first-occurrence order, Det with pivoting and a singular matrix,
 *     DFT (opset 20 axis input) against a naive sum and its inverse round trip.
 *   - Errors name the node and the operator. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/ir.h"
#include "otter/runtime.h"
#include "testutil.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

typedef struct attr {
    char kind; /* i, f, s, I (ints), F (floats), S (strings) */
    const char *name;
    int64_t i;
    float f;
    const char *s;
    size_t n;
    const int64_t *ints;
    const float *floats;
    const char *const *strs;
} attr;

/* Run one node "the_node"; in[k] NULL marks an omitted optional input. out[0..n_out) are new tensors. */
static otter_status run1(const char *op, int opset, size_t n_in, const otter_tensor *const *in, size_t n_out,
                         const attr *attrs, size_t n_attrs, otter_tensor **out) {
    static const char *const IN[] = {"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7"};
    static const char *const OUT[] = {"o0", "o1", "o2", "o3"};
    const char *names[8];
    const otter_tensor *bound[8];
    size_t n_bound = 0;
    for (size_t k = 0; k < n_in; k++) names[k] = in[k] ? IN[k] : "";
    otter_model *m = NULL;
    otter_status s = otter_model_create(&m, "g", opset);
    if (s) return s;
    otter_node *n = NULL;
    s = otter_node_create(&n, op, "the_node", n_in, names, n_out, OUT);
    for (size_t k = 0; !s && k < n_attrs; k++) {
        const attr *a = &attrs[k];
        switch (a->kind) {
        case 'i':
            s = otter_node_set_attr_int(n, a->name, a->i);
            break;
        case 'f':
            s = otter_node_set_attr_float(n, a->name, a->f);
            break;
        case 's':
            s = otter_node_set_attr_string(n, a->name, a->s);
            break;
        case 'I':
            s = otter_node_set_attr_ints(n, a->name, a->n, a->ints);
            break;
        case 'F':
            s = otter_node_set_attr_floats(n, a->name, a->n, a->floats);
            break;
        default:
            s = otter_node_set_attr_strings(n, a->name, a->n, a->strs);
            break;
        }
    }
    if (!s)
        s = otter_graph_add_node(m->graph, n);
    else
        otter_node_free(n);
    for (size_t k = 0; !s && k < n_in; k++) {
        if (!in[k]) continue;
        s = otter_graph_add_input(m->graph, IN[k], in[k]->dtype, in[k]->rank, in[k]->dims, NULL);
        names[n_bound] = IN[k];
        bound[n_bound++] = in[k];
    }
    for (size_t k = 0; !s && k < n_out; k++)
        s = otter_graph_add_output(m->graph, OUT[k], OTTER_DTYPE_UNDEFINED, -1, NULL, NULL);
    otter_session *sess = NULL;
    otter_session_options o = {.n_threads = 1};
    if (!s) s = otter_session_create(&sess, m, &o);
    for (size_t k = 0; k < n_out; k++) out[k] = NULL;
    if (!s) s = otter_session_run(sess, n_bound, names, bound, n_out, OUT, out);
    otter_session_free(sess);
    otter_model_free(m);
    return s;
}

static otter_tensor *tensor(otter_dtype t, int rank, const int64_t *dims, const void *data) {
    otter_tensor *x = NULL;
    if (data)
        otter_tensor_from_data(&x, NULL, t, rank, dims, data);
    else
        otter_tensor_create(&x, NULL, t, rank, dims);
    return x;
}

static otter_tensor *random_f32(int rank, const int64_t *dims, unsigned *seed) {
    otter_tensor *x = tensor(OTTER_DTYPE_FLOAT, rank, dims, NULL);
    float *p = x->data;
    for (int64_t i = 0; i < otter_tensor_numel(x); i++) {
        *seed = *seed * 1103515245u + 12345u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 65535.0f - 0.5f;
    }
    return x;
}

static double worst;
static bool near(double a, double b) {
    double e = fabs(a - b);
    worst = tu_worse(worst, e);
    return e <= 1e-5 + 1e-4 * fabs(b);
}

static float at(const otter_tensor *t, int64_t i) { return ((const float *)t->data)[i]; }

static void free_all(otter_tensor **t, size_t n) {
    for (size_t k = 0; k < n; k++) otter_tensor_free(t[k]);
}

/* ---- recurrent operators ---- */

static const char *const CELLS[] = {"RNN", "GRU", "LSTM"};
static const int GATES[] = {1, 3, 4};

/* Copy times [0, len) of batch row b from X [T, N, I] into a [len, 1, I] tensor, reversed if asked. */
static otter_tensor *slice_row(const otter_tensor *x, int64_t b, int64_t len, bool rev) {
    int64_t N = x->dims[1], I = x->dims[2];
    otter_tensor *y = tensor(OTTER_DTYPE_FLOAT, 3, (int64_t[]){len, 1, I}, NULL);
    for (int64_t t = 0; t < len; t++)
        memcpy((float *)y->data + t * I, (const float *)x->data + ((rev ? len - 1 - t : t) * N + b) * I,
               (size_t)I * sizeof(float));
    return y;
}

/* Stack a [1, ...] tensor twice along axis 0. */
static otter_tensor *twice(const otter_tensor *w) {
    int64_t dims[OTTER_MAX_RANK];
    memcpy(dims, w->dims, sizeof(int64_t) * (size_t)w->rank);
    dims[0] = 2;
    otter_tensor *y = tensor(OTTER_DTYPE_FLOAT, w->rank, dims, NULL);
    size_t nb = otter_tensor_nbytes(w);
    memcpy(y->data, w->data, nb);
    memcpy((char *)y->data + nb, w->data, nb);
    return y;
}

static void test_directions(int cell) {
    const char *op = CELLS[cell];
    const int64_t T = 4, N = 3, I = 2, H = 3, G = GATES[cell];
    unsigned seed = 7u + (unsigned)cell;
    otter_tensor *X = random_f32(3, (int64_t[]){T, N, I}, &seed);
    otter_tensor *W = random_f32(3, (int64_t[]){1, G * H, I}, &seed);
    otter_tensor *R = random_f32(3, (int64_t[]){1, G * H, H}, &seed);
    otter_tensor *B = random_f32(2, (int64_t[]){1, 2 * G * H}, &seed);
    attr hs = {'i', "hidden_size", .i = H};
    attr rev[] = {hs, {'s', "direction", .s = "reverse"}};
    attr bi[] = {hs, {'s', "direction", .s = "bidirectional"}};
    otter_tensor *fw[2], *rv[2], *bd[2];
    const otter_tensor *in[] = {X, W, R, B};
    CHECK_OK(run1(op, 14, 4, in, 2, &hs, 1, fw));
    CHECK_OK(run1(op, 14, 4, in, 2, rev, 2, rv));
    otter_tensor *W2 = twice(W), *R2 = twice(R), *B2 = twice(B);
    const otter_tensor *in2[] = {X, W2, R2, B2};
    CHECK_OK(run1(op, 14, 4, in2, 2, bi, 2, bd));
    int bad = 0;
    if (fw[0] && rv[0] && bd[0] && bd[1]) {
        CHECK(bd[0]->rank == 4 && bd[0]->dims[1] == 2 && bd[1]->dims[0] == 2);
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < N * H; k++) {
                bad += !near(at(bd[0], (t * 2 + 0) * N * H + k), at(fw[0], t * N * H + k));
                bad += !near(at(bd[0], (t * 2 + 1) * N * H + k), at(rv[0], t * N * H + k));
            }
        for (int64_t k = 0; k < N * H; k++) {
            bad += !near(at(bd[1], k), at(fw[1], k));
            bad += !near(at(bd[1], N * H + k), at(rv[1], k));
        }
        /* reverse, row by row, equals forward over the reversed row; Y_h is the state after t = 0 */
        for (int64_t b = 0; b < N; b++) {
            otter_tensor *xr = slice_row(X, b, T, true), *f1[2];
            const otter_tensor *inr[] = {xr, W, R, B};
            CHECK_OK(run1(op, 14, 4, inr, 2, &hs, 1, f1));
            for (int64_t t = 0; t < T && f1[0]; t++)
                for (int64_t h = 0; h < H; h++)
                    bad += !near(at(rv[0], ((T - 1 - t) * N + b) * H + h), at(f1[0], t * H + h));
            for (int64_t h = 0; h < H && f1[1]; h++) bad += !near(at(rv[1], b * H + h), at(f1[1], h));
            free_all(f1, 2);
            otter_tensor_free(xr);
        }
    }
    CHECK(bad == 0);
    printf("%s: bidirectional = forward | reverse, reverse = forward on reversed rows (%d mismatches)\n", op, bad);

    /* sequence_lens with reverse: each row runs over its own prefix, zeros past it */
    int32_t lens[] = {4, 2, 3};
    otter_tensor *SL = tensor(OTTER_DTYPE_INT32, 1, &N, lens), *sl[2];
    const otter_tensor *ins[] = {X, W, R, B, SL};
    CHECK_OK(run1(op, 14, 5, ins, 2, rev, 2, sl));
    bad = 0;
    for (int64_t b = 0; b < N && sl[0]; b++) {
        otter_tensor *xr = slice_row(X, b, lens[b], false), *f1[2];
        const otter_tensor *inr[] = {xr, W, R, B};
        CHECK_OK(run1(op, 14, 4, inr, 2, rev, 2, f1));
        for (int64_t t = 0; t < T && f1[0]; t++)
            for (int64_t h = 0; h < H; h++)
                bad += !near(at(sl[0], (t * N + b) * H + h), t < lens[b] ? at(f1[0], t * H + h) : 0.0);
        for (int64_t h = 0; h < H && f1[1]; h++) bad += !near(at(sl[1], b * H + h), at(f1[1], h));
        free_all(f1, 2);
        otter_tensor_free(xr);
    }
    CHECK(bad == 0);
    printf("%s: reverse with sequence_lens [4,2,3] = runs over each row's prefix (%d mismatches)\n", op, bad);

    /* layout 1: X [N, T, I], Y [N, T, D, H], Y_h [N, D, H] */
    otter_tensor *XT = tensor(OTTER_DTYPE_FLOAT, 3, (int64_t[]){N, T, I}, NULL), *ly[2];
    for (int64_t t = 0; t < T; t++)
        for (int64_t b = 0; b < N; b++)
            memcpy((float *)XT->data + (b * T + t) * I, (float *)X->data + (t * N + b) * I, (size_t)I * sizeof(float));
    attr l1[] = {hs, {'i', "layout", .i = 1}};
    const otter_tensor *inl[] = {XT, W, R, B};
    CHECK_OK(run1(op, 14, 4, inl, 2, l1, 2, ly));
    bad = 0;
    for (int64_t t = 0; t < T && ly[0] && fw[0]; t++)
        for (int64_t b = 0; b < N; b++)
            for (int64_t h = 0; h < H; h++)
                bad += !near(at(ly[0], (b * T + t) * H + h), at(fw[0], (t * N + b) * H + h));
    for (int64_t k = 0; k < N * H && ly[1] && fw[1]; k++) bad += !near(at(ly[1], k), at(fw[1], k));
    CHECK(bad == 0);
    printf("%s: layout 1 = layout 0 transposed (%d mismatches)\n", op, bad);

    free_all(fw, 2);
    free_all(rv, 2);
    free_all(bd, 2);
    free_all(sl, 2);
    free_all(ly, 2);
    otter_tensor *all[] = {X, W, R, B, W2, R2, B2, SL, XT};
    free_all(all, sizeof all / sizeof all[0]);
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double clamp(double x, double c) { return x < -c ? -c : x > c ? c : x; }

/* One step, batch 1, hidden 2, input 1, written from the ONNX equations. */
static void test_one_step(void) {
    const float x = 0.7f, h0[2] = {0.2f, -0.4f}, c0[2] = {0.5f, -0.1f};
    unsigned seed = 99;
    /* GRU, linear_before_reset = 1: h = tanh(Wh x + Wbh + r * (Rh H + Rbh)) */
    otter_tensor *X = tensor(OTTER_DTYPE_FLOAT, 3, (int64_t[]){1, 1, 1}, &x);
    otter_tensor *H0 = tensor(OTTER_DTYPE_FLOAT, 3, (int64_t[]){1, 1, 2}, h0);
    otter_tensor *C0 = tensor(OTTER_DTYPE_FLOAT, 3, (int64_t[]){1, 1, 2}, c0);
    otter_tensor *W = random_f32(3, (int64_t[]){1, 6, 1}, &seed), *R = random_f32(3, (int64_t[]){1, 6, 2}, &seed);
    otter_tensor *B = random_f32(2, (int64_t[]){1, 12}, &seed), *out[2];
    const float *w = W->data, *r = R->data, *bb = B->data;
    attr ga[] = {{'i', "hidden_size", .i = 2}, {'i', "linear_before_reset", .i = 1}};
    const otter_tensor *gin[] = {X, W, R, B, NULL, H0};
    CHECK_OK(run1("GRU", 14, 6, gin, 2, ga, 2, out));
    int bad = 0;
    for (int k = 0; k < 2 && out[1]; k++) {
        double g[3], rh[3];
        for (int q = 0; q < 3; q++) {
            int row = q * 2 + k;
            g[q] = w[row] * x + bb[row];
            rh[q] = r[row * 2] * h0[0] + r[row * 2 + 1] * h0[1] + bb[6 + row];
        }
        double z = sigm(g[0] + rh[0]), rr = sigm(g[1] + rh[1]), hh = tanh(g[2] + rr * rh[2]);
        bad += !near(at(out[1], k), (1 - z) * hh + z * h0[k]);
    }
    free_all(out, 2);

    /* LSTM with peepholes, clip 0.3, input_forget: f = 1 - i */
    otter_tensor *W4 = random_f32(3, (int64_t[]){1, 8, 1}, &seed), *R4 = random_f32(3, (int64_t[]){1, 8, 2}, &seed);
    otter_tensor *B4 = random_f32(2, (int64_t[]){1, 16}, &seed), *P = random_f32(2, (int64_t[]){1, 6}, &seed), *lo[3];
    attr la[] = {{'i', "hidden_size", .i = 2}, {'f', "clip", .f = 0.3f}, {'i', "input_forget", .i = 1}};
    const otter_tensor *lin[] = {X, W4, R4, B4, NULL, H0, C0, P};
    CHECK_OK(run1("LSTM", 14, 8, lin, 3, la, 3, lo));
    const float *w4 = W4->data, *r4 = R4->data, *b4 = B4->data, *p = P->data;
    for (int k = 0; k < 2 && lo[2]; k++) {
        double g[4];
        for (int q = 0; q < 4; q++) { /* i, o, f, c */
            int row = q * 2 + k;
            g[q] = w4[row] * x + r4[row * 2] * h0[0] + r4[row * 2 + 1] * h0[1] + b4[row] + b4[8 + row];
        }
        double i = sigm(clamp(g[0] + p[k] * c0[k], 0.3)), f = 1 - i, c = tanh(clamp(g[3], 0.3));
        double cn = f * c0[k] + i * c;
        double o = sigm(clamp(g[1] + p[2 + k] * cn, 0.3));
        bad += !near(at(lo[2], k), cn);
        bad += !near(at(lo[1], k), o * tanh(cn));
    }
    free_all(lo, 3);

    /* RNN with Affine(0.5, 0.1) */
    otter_tensor *W1 = random_f32(3, (int64_t[]){1, 2, 1}, &seed), *R1 = random_f32(3, (int64_t[]){1, 2, 2}, &seed);
    static const char *const affine[] = {"Affine"};
    static const float alpha = 0.5f, beta = 0.1f;
    attr ra[] = {{'i', "hidden_size", .i = 2},
                 {'S', "activations", .n = 1, .strs = affine},
                 {'F', "activation_alpha", .n = 1, .floats = &alpha},
                 {'F', "activation_beta", .n = 1, .floats = &beta}};
    const otter_tensor *rin[] = {X, W1, R1, NULL, NULL, H0};
    CHECK_OK(run1("RNN", 14, 6, rin, 2, ra, 4, out));
    const float *w1 = W1->data, *r1 = R1->data;
    for (int k = 0; k < 2 && out[1]; k++)
        bad += !near(at(out[1], k), 0.5 * (w1[k] * x + r1[k * 2] * h0[0] + r1[k * 2 + 1] * h0[1]) + 0.1);
    free_all(out, 2);
    CHECK(bad == 0);
    printf("one step: GRU linear_before_reset, LSTM peepholes+clip+input_forget, RNN Affine (%d mismatches)\n", bad);

    /* a wrong W shape names the node and the operator */
    const otter_tensor *badin[] = {X, R1, R1};
    otter_tensor *none[2];
    CHECK_STATUS(run1("RNN", 14, 3, badin, 2, ra, 1, none), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "the_node") && strstr(otter_last_error(), "RNN"));
    printf("bad W shape: %s\n", otter_last_error());
    otter_tensor *all[] = {X, H0, C0, W, R, B, W4, R4, B4, P, W1, R1};
    free_all(all, sizeof all / sizeof all[0]);
}

/* ---- quantization ---- */

static void test_quant(void) {
    const float xs[] = {-1000, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 1000};
    const int64_t n = 8;
    const float one = 1;
    const int8_t zp = 0;
    otter_tensor *X = tensor(OTTER_DTYPE_FLOAT, 1, &n, xs), *S = tensor(OTTER_DTYPE_FLOAT, 0, NULL, &one);
    otter_tensor *Z = tensor(OTTER_DTYPE_INT8, 0, NULL, &zp), *y;
    const otter_tensor *in[] = {X, S, Z};
    CHECK_OK(run1("QuantizeLinear", 13, 3, in, 1, NULL, 0, &y));
    static const int8_t want[] = {-128, -2, -2, 0, 0, 2, 2, 127};
    CHECK(y && y->dtype == OTTER_DTYPE_INT8 && memcmp(y->data, want, 8) == 0);
    printf("QuantizeLinear int8: round half to even and saturation\n");
    otter_tensor_free(y);

    /* per axis: x [2, 3], axis 0, scales [2, 4], uint8 zero points [10, 20] */
    const float x2[] = {1, 2, 3, 4, 8, 12}, s2[] = {2, 4};
    const uint8_t z2[] = {10, 20};
    otter_tensor *X2 = tensor(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 3}, x2);
    otter_tensor *S2 = tensor(OTTER_DTYPE_FLOAT, 1, (int64_t[]){2}, s2),
                 *Z2 = tensor(OTTER_DTYPE_UINT8, 1, (int64_t[]){2}, z2);
    const otter_tensor *in2[] = {X2, S2, Z2};
    attr ax0 = {'i', "axis", .i = 0};
    CHECK_OK(run1("QuantizeLinear", 13, 3, in2, 1, &ax0, 1, &y));
    static const uint8_t want2[] = {10, 11, 12, 21, 22, 23}; /* 0.5 -> 0, 1.5 -> 2 */
    CHECK(y && memcmp(y->data, want2, 6) == 0);
    otter_tensor_free(y);

    /* blocks (opset 21): x [1, 4], block_size 2 along axis 1, scales [1, 2] */
    const float x3[] = {2, 4, 30, 60}, s3[] = {2, 30};
    otter_tensor *X3 = tensor(OTTER_DTYPE_FLOAT, 2, (int64_t[]){1, 4}, x3),
                 *S3 = tensor(OTTER_DTYPE_FLOAT, 2, (int64_t[]){1, 2}, s3);
    const otter_tensor *in3[] = {X3, S3};
    attr blk[] = {{'i', "axis", .i = 1}, {'i', "block_size", .i = 2}};
    CHECK_OK(run1("QuantizeLinear", 21, 2, in3, 1, blk, 2, &y));
    static const uint8_t want3[] = {1, 2, 1, 2};
    CHECK(y && y->dtype == OTTER_DTYPE_UINT8 && memcmp(y->data, want3, 4) == 0);
    otter_tensor_free(y);

    /* DequantizeLinear int32 per axis (axis 1 of [2, 2]) */
    const int32_t q4[] = {5, -5, 7, 9}, z4[] = {1, -1};
    const float s4[] = {0.5f, 2};
    otter_tensor *Q4 = tensor(OTTER_DTYPE_INT32, 2, (int64_t[]){2, 2}, q4),
                 *S4 = tensor(OTTER_DTYPE_FLOAT, 1, (int64_t[]){2}, s4);
    otter_tensor *Z4 = tensor(OTTER_DTYPE_INT32, 1, (int64_t[]){2}, z4);
    const otter_tensor *in4[] = {Q4, S4, Z4};
    CHECK_OK(run1("DequantizeLinear", 13, 3, in4, 1, NULL, 0, &y));
    CHECK(y && at(y, 0) == 2.0f && at(y, 1) == -8.0f && at(y, 2) == 3.0f && at(y, 3) == 20.0f);
    otter_tensor_free(y);
    printf("QuantizeLinear per axis and blocked, DequantizeLinear int32 per axis\n");
    otter_tensor *all[] = {X, S, Z, X2, S2, Z2, X3, S3, Q4, S4, Z4};
    free_all(all, sizeof all / sizeof all[0]);
}

/* The narrow types (opset 21+): blocked int4 with zero points and saturation, back through
 * DequantizeLinear; float8e4m3fn with and without saturate; uint2 per axis. */
static void test_quant_narrow(void) {
    /* x [2, 4], blocks of 2 along axis 1: scales [[1, 2], [0.5, 4]], int4 zero points [[0, 1], [-1, 2]] */
    const float x[] = {3, -20, 5, 7, 1.25f, 1.75f, -40, 100}, sc[] = {1, 2, 0.5f, 4};
    const int8_t zp[] = {0, 1, -1, 2};
    otter_tensor *X = tensor(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 4}, x),
                 *S = tensor(OTTER_DTYPE_FLOAT, 2, (int64_t[]){2, 2}, sc);
    otter_tensor *Z = tensor(OTTER_DTYPE_INT4, 2, (int64_t[]){2, 2}, zp), *y = NULL, *back = NULL;
    const otter_tensor *in[] = {X, S, Z};
    attr blk[] = {{'i', "axis", .i = 1}, {'i', "block_size", .i = 2}};
    CHECK_OK(run1("QuantizeLinear", 21, 3, in, 1, blk, 2, &y));
    /* 3 -> 3; -20 -> -8 (saturated); 5/2 = 2.5 -> 2, +1 = 3; 7/2 = 3.5 -> 4, +1 = 5;
     * 1.25/0.5 = 2.5 -> 2, -1 = 1; 1.75/0.5 = 3.5 -> 4, -1 = 3; -40/4 = -10 -> -8; 100/4 = 25 -> 7 */
    static const int8_t want[] = {3, -8, 3, 5, 1, 3, -8, 7};
    CHECK(y && y->dtype == OTTER_DTYPE_INT4 && memcmp(y->data, want, 8) == 0);
    if (y) {
        const otter_tensor *din[] = {y, S, Z};
        CHECK_OK(run1("DequantizeLinear", 21, 3, din, 1, blk, 2, &back));
        static const float wantd[] = {3, -8, 4, 8, 1, 2, -40, 20}; /* (q - zp) * scale */
        CHECK(back && back->dtype == OTTER_DTYPE_FLOAT && memcmp(back->data, wantd, sizeof wantd) == 0);
    }
    printf("QuantizeLinear int4 blocked with zero points (saturating at -8 and 7), DequantizeLinear back\n");
    otter_tensor_free(y);
    otter_tensor_free(back);

    /* float8e4m3fn: 500 saturates to 448 (0x7E) by default and is NaN (0x7F) with saturate 0 */
    const float xf[] = {1, 500, -0.3f}, one = 1;
    const uint8_t zf = 0;
    otter_tensor *XF = tensor(OTTER_DTYPE_FLOAT, 1, (int64_t[]){3}, xf), *S1 = tensor(OTTER_DTYPE_FLOAT, 0, NULL, &one);
    otter_tensor *ZF = tensor(OTTER_DTYPE_FLOAT8E4M3FN, 0, NULL, &zf);
    const otter_tensor *inf[] = {XF, S1, ZF};
    CHECK_OK(run1("QuantizeLinear", 21, 3, inf, 1, NULL, 0, &y));
    CHECK(y && y->dtype == OTTER_DTYPE_FLOAT8E4M3FN && ((uint8_t *)y->data)[0] == 0x38 &&
          ((uint8_t *)y->data)[1] == 0x7e && ((uint8_t *)y->data)[2] == 0xaa); /* -0.3 -> -0.3125 */
    otter_tensor_free(y);
    attr nosat = {'i', "saturate", .i = 0};
    CHECK_OK(run1("QuantizeLinear", 21, 3, inf, 1, &nosat, 1, &y));
    CHECK(y && ((uint8_t *)y->data)[1] == 0x7f);
    printf("QuantizeLinear float8e4m3fn: 500 -> 0x%02x without saturation (448 = 0x7e with)\n",
           y ? ((uint8_t *)y->data)[1] : 0);
    otter_tensor_free(y);

    /* DequantizeLinear uint2 per axis: x [2, 2] axis 0, scales [0.5, 3], zero points [1, 2] */
    const uint8_t q2[] = {0, 3, 2, 1}, z2[] = {1, 2};
    const float s2[] = {0.5f, 3};
    otter_tensor *Q2 = tensor(OTTER_DTYPE_UINT2, 2, (int64_t[]){2, 2}, q2),
                 *S2 = tensor(OTTER_DTYPE_FLOAT, 1, (int64_t[]){2}, s2),
                 *Z2 = tensor(OTTER_DTYPE_UINT2, 1, (int64_t[]){2}, z2);
    const otter_tensor *in2[] = {Q2, S2, Z2};
    attr ax0 = {'i', "axis", .i = 0};
    CHECK_OK(run1("DequantizeLinear", 21, 3, in2, 1, &ax0, 1, &y));
    CHECK(y && at(y, 0) == -0.5f && at(y, 1) == 1.0f && at(y, 2) == 0.0f && at(y, 3) == -3.0f);
    otter_tensor_free(y);
    printf("DequantizeLinear uint2 per axis\n");

    /* precision (opset 23): 1001.3 is 1001.5 in float16, which rounds (half to even) to 1002 */
    const float xp = 1001.3f;
    const int16_t zp16 = 0;
    otter_tensor *XP = tensor(OTTER_DTYPE_FLOAT, 0, NULL, &xp), *Z16 = tensor(OTTER_DTYPE_INT16, 0, NULL, &zp16);
    const otter_tensor *inp[] = {XP, S1, Z16};
    attr half = {'i', "precision", .i = OTTER_DTYPE_FLOAT16};
    int16_t got_single = 0, got_half = 0;
    CHECK_OK(run1("QuantizeLinear", 23, 3, inp, 1, NULL, 0, &y));
    if (y) got_single = *(int16_t *)y->data;
    otter_tensor_free(y);
    CHECK_OK(run1("QuantizeLinear", 23, 3, inp, 1, &half, 1, &y));
    if (y) got_half = *(int16_t *)y->data;
    otter_tensor_free(y);
    CHECK(got_single == 1001 && got_half == 1002);
    printf("QuantizeLinear 1001.3 / 1: %d in the scale's float, %d with precision float16\n", got_single, got_half);
    otter_tensor *all[] = {X, S, Z, XF, S1, ZF, Q2, S2, Z2, XP, Z16};
    free_all(all, sizeof all / sizeof all[0]);
}

/* Cast's attributes for the narrow types and BitCast's re-extension of the 4-bit types, which the
 * suite doesn't reach: float8e8m0 with round_mode nearest and no saturation, strings to
 * float8e4m3fn, int4 <-> uint4 <-> float4e2m1 bit patterns, and a width mismatch refused. */
static void test_cast_narrow(void) {
    const float xs[] = {3.0f, 2.9f, 0.0f};
    otter_tensor *X = tensor(OTTER_DTYPE_FLOAT, 1, (int64_t[]){3}, xs), *y = NULL;
    const otter_tensor *in[] = {X};
    attr e8m0[] = {
        {'i', "to", .i = OTTER_DTYPE_FLOAT8E8M0}, {'s', "round_mode", .s = "nearest"}, {'i', "saturate", .i = 0}};
    CHECK_OK(run1("Cast", 25, 1, in, 1, e8m0, 3, &y));
    const uint8_t *b = y ? y->data : NULL;
    CHECK(b && b[0] == 0x81 && b[1] == 0x80 && b[2] == 0xff); /* 4, 2, NaN (0 without saturation) */
    printf("Cast to float8e8m0 (nearest, no saturate): 3 2.9 0 -> %02x %02x %02x\n", b ? b[0] : 0, b ? b[1] : 0,
           b ? b[2] : 0);
    otter_tensor_free(y);

    otter_bytes strs[] = {{"1.5", 3}, {"-INF", 4}, {"500", 3}};
    otter_tensor *S = tensor(OTTER_DTYPE_STRING, 1, (int64_t[]){3}, strs);
    const otter_tensor *sin[] = {S};
    attr f8 = {'i', "to", .i = OTTER_DTYPE_FLOAT8E4M3FN};
    CHECK_OK(run1("Cast", 21, 1, sin, 1, &f8, 1, &y));
    b = y ? y->data : NULL;
    CHECK(b && b[0] == 0x3c && b[1] == 0xfe && b[2] == 0x7e); /* 1.5, -448, 448 (saturated) */
    otter_tensor_free(y);

    const int8_t i4[] = {-1, 7, -8};
    otter_tensor *I4 = tensor(OTTER_DTYPE_INT4, 1, (int64_t[]){3}, i4), *back = NULL;
    const otter_tensor *bin[] = {I4};
    attr to_u4 = {'i', "to", .i = OTTER_DTYPE_UINT4}, to_f4 = {'i', "to", .i = OTTER_DTYPE_FLOAT4E2M1},
         to_i4 = {'i', "to", .i = OTTER_DTYPE_INT4}, to_i8 = {'i', "to", .i = OTTER_DTYPE_INT8};
    CHECK_OK(run1("BitCast", 26, 1, bin, 1, &to_u4, 1, &y));
    b = y ? y->data : NULL;
    CHECK(b && y->dtype == OTTER_DTYPE_UINT4 && b[0] == 15 && b[1] == 7 && b[2] == 8);
    otter_tensor_free(y);
    CHECK_OK(run1("BitCast", 26, 1, bin, 1, &to_f4, 1, &y));
    if (y) {
        const otter_tensor *fin[] = {y};
        CHECK_OK(run1("BitCast", 26, 1, fin, 1, &to_i4, 1, &back));
        CHECK(otter_tensor_value(y, 0) == -6 && otter_tensor_value(y, 2) == -0.0); /* 0xf, 0x8 */
        CHECK(back && memcmp(back->data, i4, 3) == 0);
    }
    otter_tensor_free(y);
    otter_tensor_free(back);
    CHECK_STATUS(run1("BitCast", 26, 1, bin, 1, &to_i8, 1, &y), OTTER_ERR_INVALID);
    printf("BitCast int4 -1 7 -8 -> uint4 15 7 8, through float4e2m1 and back; int4 to int8 refused\n");
    otter_tensor *all[] = {X, S, I4};
    free_all(all, sizeof all / sizeof all[0]);
}

/* ---- Unique, Det, DFT ---- */

static void test_extra(void) {
    /* Unique columns of [[1, 3, 1, 3, 2], [0, 5, 0, 5, 0]], first-occurrence order */
    const int64_t u[] = {1, 3, 1, 3, 2, 0, 5, 0, 5, 0};
    otter_tensor *U = tensor(OTTER_DTYPE_INT64, 2, (int64_t[]){2, 5}, u), *uo[4];
    attr ua[] = {{'i', "axis", .i = 1}, {'i', "sorted", .i = 0}};
    const otter_tensor *uin[] = {U};
    CHECK_OK(run1("Unique", 11, 1, uin, 4, ua, 2, uo));
    if (uo[0] && uo[3]) {
        static const int64_t y[] = {1, 3, 2, 0, 5, 0}, idx[] = {0, 1, 4}, inv[] = {0, 1, 0, 1, 2}, cnt[] = {2, 2, 1};
        CHECK(uo[0]->dims[0] == 2 && uo[0]->dims[1] == 3 && memcmp(uo[0]->data, y, sizeof y) == 0);
        CHECK(memcmp(uo[1]->data, idx, sizeof idx) == 0 && memcmp(uo[2]->data, inv, sizeof inv) == 0);
        CHECK(memcmp(uo[3]->data, cnt, sizeof cnt) == 0);
    }
    free_all(uo, 4);
    otter_tensor_free(U);
    printf("Unique axis 1, unsorted: columns, first indices, inverse, counts\n");

    /* Det: pivoting needed, a 3x3 with det 1, a singular matrix */
    const double d[] = {0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 0, 1, 4, 5, 6, 0, 1, 2, 0, 2, 4, 0, 0, 0, 1};
    otter_tensor *D = tensor(OTTER_DTYPE_DOUBLE, 3, (int64_t[]){3, 3, 3}, d), *dy;
    /* first matrix [[0,1,1],[0,0,0],[0,0,0]] is singular too; use its 3x3 as is */
    const otter_tensor *din[] = {D};
    CHECK_OK(run1("Det", 11, 1, din, 1, NULL, 0, &dy));
    if (dy) {
        const double *v = dy->data;
        CHECK(v[0] == 0 && fabs(v[1] - 1) < 1e-12 && v[2] == 0);
        printf("Det: [%g, %g, %g] (expected 0, 1, 0)\n", v[0], v[1], v[2]);
    }
    otter_tensor_free(dy);
    const double p2[] = {0, 1, 1, 0};
    otter_tensor *P2 = tensor(OTTER_DTYPE_DOUBLE, 2, (int64_t[]){2, 2}, p2);
    const otter_tensor *pin[] = {P2};
    CHECK_OK(run1("Det", 11, 1, pin, 1, NULL, 0, &dy));
    CHECK(dy && ((double *)dy->data)[0] == -1);
    otter_tensor_free(dy);
    otter_tensor_free(D);
    otter_tensor_free(P2);

    /* DFT opset 20, axis input -2, real x [2, 5, 1] (axis 1), then inverse back */
    unsigned seed = 3;
    otter_tensor *X = random_f32(3, (int64_t[]){2, 5, 1}, &seed), *F, *B;
    const int64_t axis = -2;
    otter_tensor *A = tensor(OTTER_DTYPE_INT64, 0, NULL, &axis);
    const otter_tensor *fin[] = {X, NULL, A};
    CHECK_OK(run1("DFT", 20, 3, fin, 1, NULL, 0, &F));
    int bad = 0;
    for (int64_t b = 0; b < 2 && F; b++)
        for (int64_t k = 0; k < 5; k++) {
            double re = 0, im = 0;
            for (int64_t n = 0; n < 5; n++) {
                re += at(X, b * 5 + n) * cos(-2 * M_PI * (double)(k * n) / 5);
                im += at(X, b * 5 + n) * sin(-2 * M_PI * (double)(k * n) / 5);
            }
            bad += !near(at(F, (b * 5 + k) * 2), re) + !near(at(F, (b * 5 + k) * 2 + 1), im);
        }
    attr inv = {'i', "inverse", .i = 1};
    const otter_tensor *bin[] = {F, NULL, A};
    CHECK_OK(run1("DFT", 20, 3, bin, 1, &inv, 1, &B));
    for (int64_t i = 0; i < 10 && B; i++) bad += !near(at(B, 2 * i), at(X, i)) + !near(at(B, 2 * i + 1), 0);
    CHECK(bad == 0);
    printf("DFT opset 20: naive sum and inverse round trip (%d mismatches)\n", bad);
    otter_tensor *all[] = {X, F, B, A};
    free_all(all, 4);
}

int main(void) {
    for (int c = 0; c < 3; c++) test_directions(c);
    test_one_step();
    test_quant();
    test_quant_narrow();
    test_cast_narrow();
    test_extra();
    printf("worst absolute difference: %.3g\n", worst);
    return tu_finish("test_kernels_extra");
}
