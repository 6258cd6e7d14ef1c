/* Session API: graphs built with the IR editing API, run through otter_session.
 * Checks results against values computed here, the errors for bad inputs and unknown operators,
 * the memory plan (a second run with the same shapes allocates nothing, in-place reuse, a smaller
 * arena than the sum of intermediates, re-planning on new shapes), the optimizations (Identity
 * dropped, constants folded), the memory budget, and that 1 and 2 threads give identical results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/io.h"
#include "otter/runtime.h"
#include "testutil.h"

/* ---- building graphs ---- */

static void add_node(otter_graph *g, const char *op, const char *name, size_t ni, const char *const *in, size_t no,
                     const char *const *out) {
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, op, name, ni, in, no, out));
    CHECK_OK(otter_graph_add_node(g, n));
}

static void add_init(otter_graph *g, const char *name, int rank, const int64_t *dims, const float *v) {
    otter_tensor *t = NULL;
    CHECK_OK(otter_tensor_from_data(&t, name, OTTER_DTYPE_FLOAT, rank, dims, v));
    CHECK_OK(otter_graph_add_initializer(g, t));
}

static bool contains(const char *hay, const char *needle) { return strstr(hay, needle) != NULL; }

/* X[N,4] -> Add(X, B) -> Relu -> Mul(., X) -> Identity -> Sub(., C) -> Y, with C = Neg(K)
 * (K an initializer: foldable) and a Sigmoid side output Z. */
static otter_model *chain_model(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "chain", 17));
    otter_graph *g = m->graph;
    const int64_t xd[] = {-1, 4};
    const char *xp[] = {"N", NULL};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 2, xd, xp));
    const int64_t bd[] = {4};
    add_init(g, "B", 1, bd, (const float[]){0.5f, -1.0f, 2.0f, -3.0f});
    add_init(g, "K", 1, bd, (const float[]){1.0f, 2.0f, 3.0f, 4.0f});
    add_node(g, "Add", "add", 2, (const char *[]){"X", "B"}, 1, (const char *[]){"a"});
    add_node(g, "Relu", "relu", 1, (const char *[]){"a"}, 1, (const char *[]){"r"});
    add_node(g, "Mul", "mul", 2, (const char *[]){"r", "X"}, 1, (const char *[]){"m"});
    add_node(g, "Identity", "id", 1, (const char *[]){"m"}, 1, (const char *[]){"m2"});
    add_node(g, "Neg", "neg", 1, (const char *[]){"K"}, 1, (const char *[]){"C"});
    add_node(g, "Sub", "sub", 2, (const char *[]){"m2", "C"}, 1, (const char *[]){"s"});
    add_node(g, "Sigmoid", "sig", 1, (const char *[]){"s"}, 1, (const char *[]){"Z"});
    add_node(g, "Tanh", "tanh", 1, (const char *[]){"s"}, 1, (const char *[]){"t"});
    add_node(g, "Abs", "abs", 1, (const char *[]){"t"}, 1, (const char *[]){"Y"});
    const int64_t od[] = {-1, 4};
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, 2, od, xp));
    CHECK_OK(otter_graph_add_output(g, "Z", OTTER_DTYPE_FLOAT, 2, od, xp));
    return m;
}

static void chain_reference(const float *x, int64_t n, float *y, float *z) {
    const float b[] = {0.5f, -1.0f, 2.0f, -3.0f}, k[] = {1, 2, 3, 4};
    for (int64_t i = 0; i < n * 4; i++) {
        float a = x[i] + b[i % 4], r = a > 0 ? a : 0, s = r * x[i] + k[i % 4];
        z[i] = 1.0f / (1.0f + expf(-s));
        y[i] = fabsf(tanhf(s));
    }
}

static double max_err(const otter_tensor *t, const float *ref) {
    return tu_max_abs_diff(t->data, ref, (size_t)otter_tensor_numel(t));
}

static otter_tensor *make_x(int64_t n, float seed) {
    otter_tensor *x = NULL;
    const int64_t d[] = {n, 4};
    CHECK_OK(otter_tensor_create(&x, "X", OTTER_DTYPE_FLOAT, 2, d));
    for (int64_t i = 0; i < n * 4; i++) ((float *)x->data)[i] = sinf(seed + (float)i * 0.7f) * 3.0f;
    return x;
}

static void test_chain_and_plan(void) {
    otter_model *m = chain_model();
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 2}));
    if (!s) {
        otter_model_free(m);
        return;
    }
    CHECK(otter_session_input_count(s) == 1);
    CHECK(strcmp(otter_session_input_name(s, 0), "X") == 0);
    const otter_type *it = otter_session_input_type(s, 0);
    CHECK(it && it->rank == 2 && it->dims[0].value < 0 && it->dims[0].param && strcmp(it->dims[0].param, "N") == 0 &&
          it->dims[1].value == 4);
    CHECK(otter_session_output_count(s) == 2 && strcmp(otter_session_output_name(s, 1), "Z") == 0);
    otter_memory_stats st;
    CHECK_OK(otter_session_memory_stats(s, &st));
    printf("chain: %zu nodes in the model, %zu run, %zu dropped (Identity), %zu folded (Neg of an initializer)\n",
           st.n_nodes_model, st.n_nodes, st.n_dropped, st.n_folded);
    CHECK(st.n_nodes_model == 9 && st.n_dropped == 1 && st.n_folded == 1 && st.n_nodes == 7);

    int64_t n = 64;
    otter_tensor *x = make_x(n, 0.0f);
    float *yr = malloc(sizeof(float) * (size_t)n * 4), *zr = malloc(sizeof(float) * (size_t)n * 4);
    chain_reference(x->data, n, yr, zr);
    otter_tensor *out[2] = {NULL, NULL};
    const otter_tensor *in[] = {x};
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, out));
    CHECK(out[0] && out[1]);
    if (out[0] && out[1]) {
        double ey = max_err(out[0], yr), ez = max_err(out[1], zr);
        printf("chain run 1 (heap): max error Y %.3g, Z %.3g; output names '%s', '%s'\n", ey, ez, out[0]->name,
               out[1]->name);
        CHECK(ey < 1e-5 && ez < 1e-5);
        CHECK(out[0]->name && strcmp(out[0]->name, "Y") == 0);
    }
    CHECK_OK(otter_session_memory_stats(s, &st));
    CHECK(st.n_plans == 1 && st.n_runs == 1);

    /* second run, same shapes, outputs filled in place: no allocation at all */
    memset(out[0]->data, 0, otter_tensor_nbytes(out[0]));
    otter_set_allocator(&tu_counting_allocator);
    tu_alloc_fail_at(0);
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, out));
    long allocs = tu_alloc_calls;
    otter_set_allocator(NULL);
    CHECK_OK(otter_session_memory_stats(s, &st));
    printf("chain run 2 (planned): %ld allocations, %zu heap fallbacks; arena %zu bytes for %zu intermediates "
           "(%zu bytes without reuse), %zu in place, %zu plans\n",
           allocs, st.n_heap_fallbacks, st.arena_bytes, st.n_planned, st.naive_bytes, st.n_inplace, st.n_plans);
    CHECK(allocs == 0);
    CHECK(st.n_heap_fallbacks == 0 && st.n_plans == 1 && st.n_runs == 2);
    CHECK(st.n_inplace >= 3);                /* relu over a, mul over r, sigmoid/abs ... */
    CHECK(st.arena_bytes < st.naive_bytes);  /* reuse happened */
    CHECK(st.arena_bytes <= 3 * 64 * 4 * 4); /* a chain needs at most three live 64x4 floats */
    /* run 1 ran on the heap, sharing dying inputs' blocks as the plan shares their buffers: it held
     * no more than the plan's live set at once */
    printf("chain run 1 held at most %zu intermediate bytes on the heap\n", st.heap_peak_bytes);
    CHECK(st.heap_peak_bytes > 0 && st.heap_peak_bytes <= st.arena_bytes);
    CHECK(max_err(out[0], yr) < 1e-5f && max_err(out[1], zr) < 1e-5f);

    otter_tensor *keep[2] = {NULL, NULL}; /* outputs sized for N = 64, for the switch back below */
    CHECK_OK(otter_tensor_clone(&keep[0], out[0]));
    CHECK_OK(otter_tensor_clone(&keep[1], out[1]));

    /* new shape: re-plan, still right */
    otter_tensor *x2 = make_x(5, 1.0f);
    float y2[20], z2[20];
    chain_reference(x2->data, 5, y2, z2);
    const otter_tensor *in2[] = {x2};
    otter_tensor *out2[2] = {NULL, NULL};
    CHECK_OK(otter_session_run(s, 1, (const char *[]){"X"}, in2, 2, (const char *[]){"Y", "Z"}, out2));
    CHECK(out2[0] && out2[0]->dims[0] == 5 && max_err(out2[0], y2) < 1e-5f && max_err(out2[1], z2) < 1e-5f);
    CHECK_OK(otter_session_memory_stats(s, &st));
    CHECK(st.n_plans == 2);
    /* filled outputs of the wrong size that own their data are resized */
    CHECK_OK(otter_session_run(s, 1, NULL, in2, 2, NULL, out));
    CHECK(out[0]->dims[0] == 5 && max_err(out[0], y2) < 1e-5f);
    /* back to the first shape: its plan is cached, so no new plan and no allocation */
    otter_set_allocator(&tu_counting_allocator);
    tu_alloc_fail_at(0);
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, keep));
    allocs = tu_alloc_calls;
    otter_set_allocator(NULL);
    CHECK_OK(otter_session_memory_stats(s, &st));
    printf("chain, back to N=%lld after N=5: %ld allocations, %zu plans made in all\n", (long long)n, allocs,
           st.n_plans);
    CHECK(allocs == 0 && st.n_plans == 2 && st.n_heap_fallbacks == 0);
    CHECK(max_err(keep[0], yr) < 1e-5f && max_err(keep[1], zr) < 1e-5f);
    otter_tensor_free(keep[0]);
    otter_tensor_free(keep[1]);
    /* five more shapes: the cache keeps four, the least recently used goes */
    for (int64_t k = 10; k < 15; k++) {
        otter_tensor *xk = make_x(k, 0.25f), *ok[2] = {NULL, NULL};
        float *yk = malloc(sizeof(float) * (size_t)k * 4), *zk = malloc(sizeof(float) * (size_t)k * 4);
        chain_reference(xk->data, k, yk, zk);
        CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){xk}, 2, NULL, ok));
        CHECK(ok[0] && max_err(ok[0], yk) < 1e-5f && max_err(ok[1], zk) < 1e-5f);
        otter_tensor_free(ok[0]);
        otter_tensor_free(ok[1]);
        otter_tensor_free(xk);
        free(yk);
        free(zk);
    }
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, out)); /* evicted: plans again, still right */
    CHECK_OK(otter_session_memory_stats(s, &st));
    CHECK(st.n_plans == 8 && max_err(out[0], yr) < 1e-5f && max_err(out[1], zr) < 1e-5f);
    /* output selection by name, one output */
    otter_tensor *only = NULL;
    CHECK_OK(otter_session_run(s, 1, NULL, in, 1, (const char *[]){"Z"}, &only));
    CHECK(only && max_err(only, zr) < 1e-5f);
    otter_tensor_free(only);
    /* a filled output of the wrong dtype */
    otter_tensor *wrong = NULL;
    CHECK_OK(otter_tensor_create(&wrong, NULL, OTTER_DTYPE_INT64, 2, (const int64_t[]){n, 4}));
    CHECK_STATUS(otter_session_run(s, 1, NULL, in, 1, NULL, &wrong), OTTER_ERR_ARGUMENT);
    CHECK(contains(otter_last_error(), "output 'Y'"));
    otter_tensor_free(wrong);

    for (int i = 0; i < 2; i++) {
        otter_tensor_free(out[i]);
        otter_tensor_free(out2[i]);
    }
    otter_tensor_free(x);
    otter_tensor_free(x2);
    free(yr);
    free(zr);
    otter_session_free(s);
    otter_model_free(m);
}

/* In place only without broadcast: Mul(r [2,1,1], Y [2,1,8]) where r dies at the Mul. Its arena
 * block (rounded up to the alignment) fits the output, but sharing it would overwrite r[1] before
 * the second row reads it. Planned runs (the second on) must give the first run's result. */
/* A memory budget turns a shape bomb (ConstantOfShape of [1000, 1000] floats, 4 MB) into an error
 * naming the node, before the allocation; folding at create time counts too; a roomy budget runs. */
/* A small value that dies early must not leave a hole below the long-lived ones: S = Neg(XS) [64]
 * lives for one node, L = S + XL [16,64] and M = Neg(XM) [17,64] until the Concat. Placed in
 * execution order, S takes offset 0, L goes above it and M (too big for S's hole) above L; placed
 * largest first, M and L share the arena with S inside M's block before M exists: the arena is the
 * live peak, L + M + the Concat's output. */
static void test_plan_no_early_holes(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "holes", 17));
    otter_graph *g = m->graph;
    const int64_t sd[] = {64}, ld[] = {16, 64}, md[] = {17, 64}, yd[] = {33, 64};
    CHECK_OK(otter_graph_add_input(g, "XS", OTTER_DTYPE_FLOAT, 1, sd, NULL));
    CHECK_OK(otter_graph_add_input(g, "XL", OTTER_DTYPE_FLOAT, 2, ld, NULL));
    CHECK_OK(otter_graph_add_input(g, "XM", OTTER_DTYPE_FLOAT, 2, md, NULL));
    add_node(g, "Neg", "s", 1, (const char *[]){"XS"}, 1, (const char *[]){"S"});
    add_node(g, "Add", "l", 2, (const char *[]){"S", "XL"}, 1, (const char *[]){"L"});
    add_node(g, "Neg", "m", 1, (const char *[]){"XM"}, 1, (const char *[]){"M"});
    otter_node *cat = NULL;
    CHECK_OK(otter_node_create(&cat, "Concat", "cat", 2, (const char *[]){"L", "M"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_attr_int(cat, "axis", 0));
    CHECK_OK(otter_graph_add_node(g, cat));
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, 2, yd, NULL));
    otter_tensor *xs = NULL, *xl = NULL, *xm = NULL;
    CHECK_OK(otter_tensor_create(&xs, "XS", OTTER_DTYPE_FLOAT, 1, sd));
    CHECK_OK(otter_tensor_create(&xl, "XL", OTTER_DTYPE_FLOAT, 2, ld));
    CHECK_OK(otter_tensor_create(&xm, "XM", OTTER_DTYPE_FLOAT, 2, md));
    for (int i = 0; i < 64; i++) ((float *)xs->data)[i] = (float)i;
    for (int i = 0; i < 16 * 64; i++) ((float *)xl->data)[i] = 0.5f * (float)i;
    for (int i = 0; i < 17 * 64; i++) ((float *)xm->data)[i] = 2.0f * (float)i;
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1, .opt_level_set = true}));
    const otter_tensor *in[] = {xs, xl, xm};
    otter_tensor *y = NULL;
    for (int run = 0; s && run < 2; run++) { /* the second run is the planned one */
        otter_tensor_free(y);
        y = NULL;
        CHECK_OK(otter_session_run(s, 3, NULL, in, 1, NULL, &y));
    }
    int64_t bad = 0;
    for (int64_t i = 0; y && i < 33 * 64; i++) {
        float want = i < 16 * 64 ? -(float)(i % 64) + 0.5f * (float)i : -2.0f * (float)(i - 16 * 64);
        bad += ((float *)y->data)[i] != want;
    }
    otter_memory_stats st = {0};
    if (s) CHECK_OK(otter_session_memory_stats(s, &st));
    const size_t live_peak = (16 + 17 + 33) * 64 * sizeof(float);
    printf("plan without early holes: arena %zu bytes, live peak %zu; %lld wrong values\n", st.arena_bytes, live_peak,
           (long long)bad);
    CHECK(y && bad == 0 && st.arena_bytes == live_peak);
    otter_tensor_free(y);
    otter_tensor_free(xs), otter_tensor_free(xl), otter_tensor_free(xm);
    otter_session_free(s);
    otter_model_free(m);
}

static void test_memory_budget(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "budget", 17));
    otter_graph *g = m->graph;
    CHECK_OK(otter_graph_add_input(g, "S", OTTER_DTYPE_INT64, 1, (const int64_t[]){2}, NULL));
    add_node(g, "ConstantOfShape", "bomb", 1, (const char *[]){"S"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_tensor *shape = NULL;
    CHECK_OK(
        otter_tensor_from_data(&shape, "S", OTTER_DTYPE_INT64, 1, (const int64_t[]){2}, (const int64_t[]){1000, 1000}));
    const size_t budgets[] = {1000000, 8000000};
    for (int k = 0; k < 2; k++) {
        otter_session *s = NULL;
        CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1, .max_memory_bytes = budgets[k]}));
        otter_tensor *y = NULL;
        otter_status st =
            s ? otter_session_run(s, 1, NULL, (const otter_tensor *const[]){shape}, 1, NULL, &y) : OTTER_ERR_ARGUMENT;
        printf("ConstantOfShape [1000, 1000] with a %zu-byte budget -> %s%s%s\n", budgets[k], otter_status_name(st),
               st ? ": " : "", st ? otter_last_error() : "");
        if (k == 0)
            CHECK(st == OTTER_ERR_NOMEM && strstr(otter_last_error(), "'bomb'") &&
                  strstr(otter_last_error(), "needs 4.0 MB, past the session's memory budget of 1.0 MB"));
        else
            CHECK(st == OTTER_OK && y && y->dims[0] == 1000);
        otter_tensor_free(y);
        otter_session_free(s);
    }
    /* The same bomb as a constant: folding it at create time is refused, so it runs (and is
     * refused) in the run. */
    CHECK_OK(otter_graph_add_initializer(g, shape));
    CHECK_OK(otter_graph_delete_input(g, "S"));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1, .max_memory_bytes = 1000000}));
    otter_tensor *y = NULL;
    otter_status st = s ? otter_session_run(s, 0, NULL, NULL, 1, NULL, &y) : OTTER_ERR_ARGUMENT;
    printf("the same from a constant -> %s: %s\n", otter_status_name(st), otter_last_error());
    CHECK(st == OTTER_ERR_NOMEM && strstr(otter_last_error(), "memory budget") && !y);
    otter_session_free(s);
    otter_model_free(m);
}

static void test_inplace_broadcast(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "inplace_broadcast", 17));
    otter_graph *g = m->graph;
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 1, 1}, NULL));
    CHECK_OK(otter_graph_add_input(g, "Y", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 1, 8}, NULL));
    add_node(g, "Relu", "relu", 1, (const char *[]){"X"}, 1, (const char *[]){"r"});
    add_node(g, "Mul", "mul", 2, (const char *[]){"r", "Y"}, 1, (const char *[]){"Z"});
    CHECK_OK(otter_graph_add_output(g, "Z", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 1, 8}, NULL));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1}));
    otter_tensor *x = NULL, *y = NULL;
    CHECK_OK(
        otter_tensor_from_data(&x, "X", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 1, 1}, (const float[]){2.0f, 3.0f}));
    CHECK_OK(otter_tensor_create(&y, "Y", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 1, 8}));
    float want[16];
    for (int i = 0; i < 16; i++) {
        ((float *)y->data)[i] = (float)(i + 1);
        want[i] = (i < 8 ? 2.0f : 3.0f) * (float)(i + 1);
    }
    double worst = 0;
    for (int run = 0; s && run < 3; run++) {
        otter_tensor *z = NULL;
        CHECK_OK(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){x, y}, 1, NULL, &z));
        if (z) worst = tu_worse(worst, tu_max_abs_diff(z->data, want, 16));
        otter_tensor_free(z);
    }
    printf("in place with a broadcast input 0: worst error over 3 runs %g\n", worst);
    CHECK(worst == 0);
    otter_tensor_free(x);
    otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);
}

static void test_opt_level0(void) {
    otter_model *m = chain_model();
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1, .opt_level_set = true}));
    if (!s) {
        otter_model_free(m);
        return;
    }
    otter_memory_stats st;
    CHECK_OK(otter_session_memory_stats(s, &st));
    CHECK(st.n_nodes == 9 && st.n_dropped == 0 && st.n_folded == 0);
    otter_tensor *x = make_x(3, 2.0f), *out[2] = {NULL, NULL};
    float yr[12], zr[12];
    chain_reference(x->data, 3, yr, zr);
    CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out));
    CHECK(out[0] && max_err(out[0], yr) < 1e-5f && max_err(out[1], zr) < 1e-5f);
    printf("opt level 0: %zu nodes run, results match\n", st.n_nodes);
    otter_tensor_free(out[0]);
    otter_tensor_free(out[1]);
    otter_tensor_free(x);
    otter_session_free(s);
    otter_model_free(m);
}

static void test_input_errors(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "two", 17));
    const int64_t d[] = {-1, 3};
    const char *p[] = {"N", NULL};
    CHECK_OK(otter_graph_add_input(m->graph, "A", OTTER_DTYPE_FLOAT, 2, d, p));
    CHECK_OK(otter_graph_add_input(m->graph, "Bee", OTTER_DTYPE_FLOAT, 2, d, p));
    add_node(m->graph, "Add", "plus", 2, (const char *[]){"A", "Bee"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 2, d, p));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, NULL));
    if (!s) {
        otter_model_free(m);
        return;
    }
    otter_tensor *a = NULL, *b = NULL, *i64 = NULL, *r3 = NULL, *w = NULL, *b4 = NULL, *y = NULL;
    CHECK_OK(otter_tensor_create(&a, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){2, 3}));
    CHECK_OK(otter_tensor_create(&b, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){2, 3}));
    CHECK_OK(otter_tensor_create(&i64, NULL, OTTER_DTYPE_INT64, 2, (const int64_t[]){2, 3}));
    CHECK_OK(otter_tensor_create(&r3, NULL, OTTER_DTYPE_FLOAT, 3, (const int64_t[]){2, 3, 1}));
    CHECK_OK(otter_tensor_create(&w, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){2, 5}));
    CHECK_OK(otter_tensor_create(&b4, NULL, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){4, 3}));
    const char *names[] = {"A", "Bee"};

    CHECK_STATUS(otter_session_run(s, 1, names, (const otter_tensor *const[]){a}, 1, NULL, &y), OTTER_ERR_INVALID);
    printf("missing input: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'Bee'") && contains(otter_last_error(), "missing"));
    CHECK_STATUS(otter_session_run(s, 2, names, (const otter_tensor *const[]){a, i64}, 1, NULL, &y), OTTER_ERR_INVALID);
    printf("wrong dtype: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'Bee'") && contains(otter_last_error(), "int64"));
    CHECK_STATUS(otter_session_run(s, 2, names, (const otter_tensor *const[]){r3, b}, 1, NULL, &y), OTTER_ERR_INVALID);
    printf("wrong rank: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'A'") && contains(otter_last_error(), "rank 3"));
    CHECK_STATUS(otter_session_run(s, 2, names, (const otter_tensor *const[]){a, w}, 1, NULL, &y), OTTER_ERR_INVALID);
    printf("fixed dim: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'Bee'") && contains(otter_last_error(), "dimension 1 is 5"));
    CHECK_STATUS(otter_session_run(s, 2, names, (const otter_tensor *const[]){a, b4}, 1, NULL, &y), OTTER_ERR_INVALID);
    printf("symbolic dim: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'Bee'") && contains(otter_last_error(), "'N'"));
    CHECK_STATUS(otter_session_run(s, 1, (const char *[]){"nope"}, (const otter_tensor *const[]){a}, 1, NULL, &y),
                 OTTER_ERR_NOT_FOUND);
    CHECK(contains(otter_last_error(), "'nope'"));
    CHECK_STATUS(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){a, NULL}, 1, NULL, &y),
                 OTTER_ERR_ARGUMENT);
    CHECK(y == NULL);
    /* a good run after the failures */
    for (int i = 0; i < 6; i++) ((float *)a->data)[i] = (float)i, ((float *)b->data)[i] = 10.0f * (float)i;
    CHECK_OK(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){a, b}, 1, NULL, &y));
    CHECK(y && ((float *)y->data)[5] == 55.0f);
    otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);

    /* a kernel's error names the node: shapes that don't broadcast, inputs without declared shapes */
    CHECK_OK(otter_model_create(&m, "bcast", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "A", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_graph_add_input(m->graph, "B", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    add_node(m->graph, "Mul", "times", 2, (const char *[]){"A", "B"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_session_create(&s, m, NULL));
    y = NULL;
    if (s) {
        CHECK(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){a, w}, 1, NULL, &y) != OTTER_OK);
        printf("kernel error: %s\n", otter_last_error());
        CHECK(contains(otter_last_error(), "node 'times' (Mul)"));
        CHECK(y == NULL);
    }
    otter_session_free(s);
    otter_model_free(m);
    otter_tensor_free(a);
    otter_tensor_free(b);
    otter_tensor_free(i64);
    otter_tensor_free(r3);
    otter_tensor_free(w);
    otter_tensor_free(b4);
}

static void test_create_errors(void) {
    otter_model *m = NULL;
    otter_session *s = NULL;
    /* an operator otter doesn't know */
    CHECK_OK(otter_model_create(&m, "unknown", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    add_node(m->graph, "Relu", "first", 1, (const char *[]){"X"}, 1, (const char *[]){"r"});
    add_node(m->graph, "FrobnicateAll", "mystery", 1, (const char *[]){"r"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK_STATUS(otter_session_create(&s, m, NULL), OTTER_ERR_UNSUPPORTED);
    printf("unknown op: %s\n", otter_last_error());
    CHECK(s == NULL);
    CHECK(contains(otter_last_error(), "'mystery'") && contains(otter_last_error(), "FrobnicateAll") &&
          contains(otter_last_error(), "ai.onnx") && contains(otter_last_error(), "17"));
    otter_model_free(m);

    /* a known operator at an opset older than otter implements: HardSwish exists from opset 14 */
    CHECK_OK(otter_model_create(&m, "old", 13));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    add_node(m->graph, "HardSwish", "hs", 1, (const char *[]){"X"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK_STATUS(otter_session_create(&s, m, NULL), OTTER_ERR_UNSUPPORTED);
    printf("old opset: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'hs'") && contains(otter_last_error(), "opset 13") &&
          contains(otter_last_error(), "from opset 14"));
    otter_model_free(m);

    /* a domain the model doesn't import */
    CHECK_OK(otter_model_create(&m, "dom", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    otter_node *nd = NULL;
    CHECK_OK(otter_node_create(&nd, "Gelu", "g", 1, (const char *[]){"X"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_domain(nd, "com.example"));
    CHECK_OK(otter_graph_add_node(m->graph, nd));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK(otter_session_create(&s, m, NULL) != OTTER_OK);
    printf("domain: %s\n", otter_last_error());
    CHECK(contains(otter_last_error(), "'g'") && contains(otter_last_error(), "com.example"));
    otter_model_free(m);

    /* an input nobody defines, an output nobody produces */
    CHECK_OK(otter_model_create(&m, "undef", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    add_node(m->graph, "Add", "adder", 2, (const char *[]){"X", "ghost"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK_STATUS(otter_session_create(&s, m, NULL), OTTER_ERR_INVALID);
    CHECK(contains(otter_last_error(), "'adder'") && contains(otter_last_error(), "'ghost'"));
    otter_model_free(m);
    CHECK_OK(otter_model_create(&m, "noout", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "W", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){3}, NULL));
    CHECK_STATUS(otter_session_create(&s, m, NULL), OTTER_ERR_INVALID);
    CHECK(contains(otter_last_error(), "'W'"));
    otter_model_free(m);
}

/* Run m with 1 and 2 threads (three runs each: heap, planned, planned); outputs in y[0], y[1]. */
static void run_threads(const otter_model *m, const otter_tensor *x, otter_tensor **y) {
    for (int t = 1; t <= 2; t++) {
        otter_session *s = NULL;
        CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = t}));
        if (!s) continue;
        CHECK(otter_session_threads(s) == t);
        for (int r = 0; r < 3; r++)
            CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 1, NULL, &y[t - 1]));
        otter_session_free(s);
    }
}

/* y[0] and y[1] (1 and 2 threads' results) hold want's n floats exactly; frees them. */
static void check_placed(const char *what, otter_tensor **y, const float *want, int64_t n) {
    for (int t = 0; t < 2; t++) {
        int64_t wrong = 0;
        if (!y[t] || otter_tensor_numel(y[t]) != n)
            wrong = n;
        else
            for (int64_t i = 0; i < n; i++) wrong += ((float *)y[t]->data)[i] != want[i];
        printf("threads, %s on %d thread(s): %lld elements misplaced\n", what, t + 1, (long long)wrong);
        CHECK(wrong == 0);
        otter_tensor_free(y[t]);
    }
}

/* Elementwise kernels split by ot_parallel_for must give bitwise the same result on 1 and 2 threads;
 * MatMul (OpenBLAS, which threads itself) within rounding. */
static void test_threads(void) {
    otter_model *m = NULL;
    const char *xp[] = {"N", NULL};
    int64_t n = 300;
    otter_tensor *x = NULL;
    CHECK_OK(otter_tensor_create(&x, "X", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){n, 96}));
    for (int64_t i = 0; i < n * 96; i++) ((float *)x->data)[i] = sinf((float)i * 0.011f);

    /* elementwise: 300x96 = 28800 elements, several chunks */
    CHECK_OK(otter_model_create(&m, "ew", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 96}, xp));
    float bias[96];
    for (int i = 0; i < 96; i++) bias[i] = cosf((float)i) * 0.1f;
    add_init(m->graph, "b", 1, (const int64_t[]){96}, bias);
    add_node(m->graph, "Add", "bias", 2, (const char *[]){"X", "b"}, 1, (const char *[]){"hb"});
    add_node(m->graph, "Tanh", "act", 1, (const char *[]){"hb"}, 1, (const char *[]){"a"});
    add_node(m->graph, "Exp", "exp", 1, (const char *[]){"a"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 96}, xp));
    otter_tensor *y[2] = {NULL, NULL};
    run_threads(m, x, y);
    double worst = 0;
    for (int64_t i = 0; i < n * 96 && y[0]; i++) {
        double ref = exp(tanh((double)((float *)x->data)[i] + bias[i % 96]));
        worst = tu_worse(worst, fabs(ref - ((float *)y[0]->data)[i]));
    }
    bool same = y[0] && y[1] && memcmp(y[0]->data, y[1]->data, otter_tensor_nbytes(y[0])) == 0;
    printf("threads, elementwise: 1 vs 2 threads bitwise equal: %s; max error vs double reference %.3g\n",
           same ? "yes" : "no", worst);
    CHECK(same);
    CHECK(y[0] && worst < 1e-5);
    otter_tensor_free(y[0]);
    otter_tensor_free(y[1]);
    otter_model_free(m);

    /* MatMul */
    CHECK_OK(otter_model_create(&m, "mm", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 96}, xp));
    float *w = malloc(sizeof(float) * 96 * 80);
    for (int i = 0; i < 96 * 80; i++) w[i] = sinf((float)i * 0.37f) * 0.2f;
    add_init(m->graph, "W", 2, (const int64_t[]){96, 80}, w);
    add_node(m->graph, "MatMul", "mm", 2, (const char *[]){"X", "W"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 80}, xp));
    y[0] = y[1] = NULL;
    run_threads(m, x, y);
    worst = 0;
    double diff12 = 0;
    for (int64_t i = 0; i < n && y[0] && y[1]; i++)
        for (int j = 0; j < 80; j++) {
            double acc = 0;
            for (int k = 0; k < 96; k++) acc += (double)((float *)x->data)[i * 96 + k] * w[k * 80 + j];
            worst = tu_worse(worst, fabs(acc - ((float *)y[0]->data)[i * 80 + j]));
            diff12 = tu_worse(diff12, fabs(((float *)y[1]->data)[i * 80 + j] - ((float *)y[0]->data)[i * 80 + j]));
        }
    printf("threads, MatMul: max |1 thread - 2 threads| %.3g, max error vs double reference %.3g\n", diff12, worst);
    CHECK(y[0] && y[1] && worst < 1e-4 && diff12 < 1e-5);
    otter_tensor_free(y[0]);
    otter_tensor_free(y[1]);
    otter_model_free(m);

    /* a batch of products over computed operands (attention's Q K^T): X as [6, 50, 96] times its own
     * transpose, the six products on the threads: bitwise those of one thread */
    CHECK_OK(otter_model_create(&m, "bmm", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){300, 96}, NULL));
    otter_tensor *shape;
    CHECK_OK(otter_tensor_create(&shape, "shape", OTTER_DTYPE_INT64, 1, (const int64_t[]){3}));
    memcpy(shape->data, (const int64_t[]){6, 50, 96}, 3 * sizeof(int64_t));
    CHECK_OK(otter_graph_add_initializer(m->graph, shape));
    add_node(m->graph, "Reshape", "r", 2, (const char *[]){"X", "shape"}, 1, (const char *[]){"x3"});
    otter_node *tn;
    CHECK_OK(otter_node_create(&tn, "Transpose", "t", 1, (const char *[]){"x3"}, 1, (const char *[]){"xt"}));
    CHECK_OK(otter_node_set_attr_ints(tn, "perm", 3, (const int64_t[]){0, 2, 1}));
    CHECK_OK(otter_graph_add_node(m->graph, tn));
    add_node(m->graph, "MatMul", "bmm", 2, (const char *[]){"x3", "xt"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){6, 50, 50}, NULL));
    y[0] = y[1] = NULL;
    run_threads(m, x, y);
    worst = 0;
    const float *xd = x->data;
    for (int64_t b = 0; b < 6 && y[0]; b++)
        for (int64_t i = 0; i < 50; i++)
            for (int64_t j = 0; j < 50; j++) {
                double acc = 0;
                for (int k = 0; k < 96; k++) acc += (double)xd[(b * 50 + i) * 96 + k] * xd[(b * 50 + j) * 96 + k];
                worst = tu_worse(worst, fabs(acc - ((float *)y[0]->data)[(b * 50 + i) * 50 + j]));
            }
    same = y[0] && y[1] && memcmp(y[0]->data, y[1]->data, otter_tensor_nbytes(y[0])) == 0;
    printf("threads, batched MatMul: 1 vs 2 threads bitwise equal: %s; max error vs double reference %.3g\n",
           same ? "yes" : "no", worst);
    CHECK(same && worst < 1e-4);
    otter_tensor_free(y[0]);
    otter_tensor_free(y[1]);
    otter_model_free(m);

    /* Concat on axis 1: (row, input) copies on the threads; every element where it belongs */
    CHECK_OK(otter_model_create(&m, "cat", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 96}, xp));
    add_node(m->graph, "Neg", "neg", 1, (const char *[]){"X"}, 1, (const char *[]){"nx"});
    otter_node *cn;
    CHECK_OK(otter_node_create(&cn, "Concat", "cat", 3, (const char *[]){"X", "nx", "X"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_attr_int(cn, "axis", 1));
    CHECK_OK(otter_graph_add_node(m->graph, cn));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 288}, xp));
    y[0] = y[1] = NULL;
    run_threads(m, x, y);
    float *cat = malloc(sizeof(float) * (size_t)n * 288);
    for (int64_t i = 0; i < n * 288; i++) {
        const float v = xd[i / 288 * 96 + i % 96];
        cat[i] = i % 288 / 96 == 1 ? -v : v;
    }
    check_placed("Concat", y, cat, n * 288);
    free(cat);
    otter_tensor_free(x);
    free(w);
    otter_model_free(m);

    /* Transpose [200, 3, 100] by perm (1, 2, 0): one [300 x 200] matrix transposed in 32-row stripes
     * (partial ones at both edges) on the threads; every element where it belongs */
    CHECK_OK(otter_model_create(&m, "kt", 17));
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){200, 3, 100}, NULL));
    CHECK_OK(otter_node_create(&tn, "Transpose", "t", 1, (const char *[]){"X"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_attr_ints(tn, "perm", 3, (const int64_t[]){1, 2, 0}));
    CHECK_OK(otter_graph_add_node(m->graph, tn));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){3, 100, 200}, NULL));
    CHECK_OK(otter_tensor_create(&x, "X", OTTER_DTYPE_FLOAT, 3, (const int64_t[]){200, 3, 100}));
    for (int64_t i = 0; i < 60000; i++) ((float *)x->data)[i] = (float)i;
    y[0] = y[1] = NULL;
    run_threads(m, x, y);
    float *kt = malloc(sizeof(float) * 60000);
    for (int64_t i = 0; i < 60000; i++) /* Y[a][b][c] = X[c][a][b] */
        kt[i] = (float)((i % 200 * 3 + i / 20000) * 100 + i / 200 % 100);
    check_placed("Transpose (1, 2, 0)", y, kt, 60000);
    free(kt);
    otter_tensor_free(x);
    otter_model_free(m);

    /* Transpose [2, 19, 13, 5] by perm (0, 2, 1, 3): rows of 5 swapped across two dims (as a transformer's
     * heads), in blocks of 8 source rows (one partial) of each of the 2 outer matrices, on the threads */
    CHECK_OK(otter_model_create(&m, "heads", 17));
    const int64_t hd[4] = {2, 19, 13, 5}, hp[4] = {0, 2, 1, 3}, ho[4] = {2, 13, 19, 5};
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 4, hd, NULL));
    CHECK_OK(otter_node_create(&tn, "Transpose", "t", 1, (const char *[]){"X"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_attr_ints(tn, "perm", 4, hp));
    CHECK_OK(otter_graph_add_node(m->graph, tn));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 4, ho, NULL));
    CHECK_OK(otter_tensor_create(&x, "X", OTTER_DTYPE_FLOAT, 4, hd));
    for (int64_t i = 0; i < 2470; i++) ((float *)x->data)[i] = (float)i;
    y[0] = y[1] = NULL;
    run_threads(m, x, y);
    float *heads = malloc(sizeof(float) * 2470);
    for (int64_t a = 0, i = 0; a < 2; a++) /* Y[a][b][c][d] = X[a][c][b][d] */
        for (int64_t b = 0; b < 13; b++)
            for (int64_t c = 0; c < 19; c++)
                for (int64_t d = 0; d < 5; d++) heads[i++] = (float)(((a * 19 + c) * 13 + b) * 5 + d);
    check_placed("Transpose (0, 2, 1, 3)", y, heads, 2470);
    free(heads);
    otter_tensor_free(x);
    otter_model_free(m);
}

/* Outputs that are inputs or initializers directly; an overridable initializer. */
static void test_passthrough(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "pass", 17));
    const int64_t d[] = {2};
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, d, NULL));
    CHECK_OK(otter_graph_add_input(m->graph, "S", OTTER_DTYPE_FLOAT, 1, d, NULL));
    add_init(m->graph, "S", 1, d, (const float[]){2.0f, 3.0f});
    add_node(m->graph, "Identity", "copy", 1, (const char *[]){"X"}, 1, (const char *[]){"Xc"});
    add_node(m->graph, "Mul", "scale", 2, (const char *[]){"X", "S"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Xc", OTTER_DTYPE_FLOAT, 1, d, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, d, NULL));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, NULL));
    if (!s) {
        otter_model_free(m);
        return;
    }
    CHECK(otter_session_input_count(s) == 1); /* S has a default */
    otter_tensor *x = NULL, *sv = NULL, *o[2] = {NULL, NULL};
    CHECK_OK(otter_tensor_from_data(&x, NULL, OTTER_DTYPE_FLOAT, 1, d, (const float[]){1.0f, -1.0f}));
    CHECK_OK(otter_tensor_from_data(&sv, NULL, OTTER_DTYPE_FLOAT, 1, d, (const float[]){10.0f, 100.0f}));
    CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, o));
    CHECK(o[0] && o[1] && ((float *)o[0]->data)[1] == -1.0f && ((float *)o[1]->data)[1] == -3.0f);
    CHECK(o[0] && o[0]->data != x->data);
    CHECK_OK(otter_session_run(s, 2, (const char *[]){"X", "S"}, (const otter_tensor *const[]){x, sv}, 2, NULL, o));
    CHECK(o[1] && ((float *)o[1]->data)[0] == 10.0f && ((float *)o[1]->data)[1] == -100.0f);
    CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, o));
    CHECK(o[1] && ((float *)o[1]->data)[1] == -3.0f); /* default again */
    printf("passthrough: output of a dropped Identity is a copy of the input; initializer override works\n");
    otter_tensor_free(o[0]);
    otter_tensor_free(o[1]);
    otter_tensor_free(x);
    otter_tensor_free(sv);
    otter_session_free(s);
    otter_model_free(m);
}

/* If whose branches read outer values: q is read only inside the branches, so it must stay alive
 * (not be overwritten by t1/t2 from the arena) until the If node runs. */
static otter_graph *branch(const char *name, const char *op) {
    otter_graph *g = NULL;
    CHECK_OK(otter_graph_create(&g, name));
    add_node(g, op, name, 2, (const char *[]){"q", "t2"}, 1, (const char *[]){"bo"});
    CHECK_OK(otter_graph_add_output(g, "bo", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    return g;
}

static void test_subgraph(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "ifm", 17));
    const int64_t d[] = {256};
    CHECK_OK(otter_graph_add_input(m->graph, "X", OTTER_DTYPE_FLOAT, 1, d, NULL));
    CHECK_OK(otter_graph_add_input(m->graph, "cond", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    add_node(m->graph, "Neg", "neg", 1, (const char *[]){"X"}, 1, (const char *[]){"q"});
    add_node(m->graph, "Exp", "exp", 1, (const char *[]){"X"}, 1, (const char *[]){"t1"});
    add_node(m->graph, "Tanh", "tanh", 1, (const char *[]){"t1"}, 1, (const char *[]){"t2"});
    otter_node *nd = NULL;
    CHECK_OK(otter_node_create(&nd, "If", "branchy", 1, (const char *[]){"cond"}, 1, (const char *[]){"Y"}));
    CHECK_OK(otter_node_set_attr_graph(nd, "then_branch", branch("then", "Add")));
    CHECK_OK(otter_node_set_attr_graph(nd, "else_branch", branch("else", "Mul")));
    CHECK_OK(otter_graph_add_node(m->graph, nd));
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, 1, d, NULL));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, NULL));
    if (!s) {
        otter_model_free(m);
        return;
    }
    otter_tensor *x = NULL, *c = NULL, *y = NULL;
    CHECK_OK(otter_tensor_create(&x, NULL, OTTER_DTYPE_FLOAT, 1, d));
    CHECK_OK(otter_tensor_create(&c, NULL, OTTER_DTYPE_BOOL, 0, NULL));
    for (int i = 0; i < 256; i++) ((float *)x->data)[i] = (float)i / 64.0f - 2.0f;
    double worst = 0;
    for (int r = 0; r < 4; r++) {
        bool then = r % 2 == 0;
        *(uint8_t *)c->data = then;
        CHECK_OK(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){x, c}, 1, NULL, &y));
        for (int i = 0; y && i < 256; i++) {
            float xv = ((float *)x->data)[i], t2 = tanhf(expf(xv));
            float ref = then ? -xv + t2 : -xv * t2;
            worst = tu_worse(worst, fabsf(((float *)y->data)[i] - ref));
        }
    }
    otter_memory_stats st;
    CHECK_OK(otter_session_memory_stats(s, &st));
    printf("subgraph: If reading outer values, 4 runs (2 planned per branch): max error %.3g, %zu plans\n", worst,
           st.n_plans);
    CHECK(worst < 1e-5);
    otter_tensor_free(x);
    otter_tensor_free(c);
    otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);
}

/* Allocation failures at create and run: a clean error, never a crash (leaks show under ASan). */

static void test_alloc_failures(void) {
    otter_model *m = chain_model();
    otter_tensor *x = make_x(8, 0.5f);
    int nomem = 0, ok = 0;
    for (long k = 1; k < 400; k++) {
        otter_session *s = NULL;
        otter_tensor *out[2] = {NULL, NULL};
        otter_set_allocator(&tu_counting_allocator);
        tu_alloc_fail_at(k);
        otter_status st = otter_session_create(&s, m, &(otter_session_options){.n_threads = 1});
        if (st == OTTER_OK) st = otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out);
        if (st == OTTER_OK) st = otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out);
        bool past_end = tu_alloc_calls < k; /* fewer calls than k: the failure point is past the end */
        tu_alloc_fail_at(0);
        otter_set_allocator(NULL);
        if (st != OTTER_OK) {
            nomem++;
            CHECK(st == OTTER_ERR_NOMEM);
        } else {
            ok++;
        }
        otter_tensor_free(out[0]);
        otter_tensor_free(out[1]);
        otter_session_free(s);
        if (past_end) break; /* the failure point is past everything: done */
    }
    printf("allocation failures: %d injected failures gave a clean error, then success\n", nomem);
    CHECK(nomem > 10 && ok >= 1);
    otter_tensor_free(x);
    otter_model_free(m);
}

/* ---- sequences and optionals ---- */

static otter_tensor *vec(const char *name, int64_t n, float base, float step) {
    otter_tensor *t = NULL;
    CHECK_OK(otter_tensor_create(&t, name, OTTER_DTYPE_FLOAT, 1, &n));
    for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = base + step * (float)i;
    return t;
}

/* Declare input `name` of g untyped (the IR helpers make tensor inputs). */
static void add_untyped_input(otter_graph *g, const char *name) {
    CHECK_OK(otter_graph_add_input(g, name, OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_value *v = &g->inputs[g->n_inputs - 1];
    otter_type_clear(&v->type);
    v->has_type = false;
}

/* SplitToSequence -> SequenceInsert / SequenceErase / SequenceAt / SequenceLength / ConcatFromSequence
 * and Optional / OptionalHasElement / OptionalGetElement on a sequence given by the caller; kinds of
 * inputs checked; a tensor kernel given a sequence refuses it. */
static void test_sequence_values(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "seq", 18));
    otter_graph *g = m->graph;
    const int64_t xd[] = {6};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 1, xd, NULL));
    add_untyped_input(g, "S"); /* a sequence from the caller */
    otter_tensor *two = NULL, *m1 = NULL;
    int64_t v2 = 2, vm1 = -1;
    CHECK_OK(otter_tensor_from_data(&two, "two", OTTER_DTYPE_INT64, 0, NULL, &v2));
    CHECK_OK(otter_tensor_from_data(&m1, "m1", OTTER_DTYPE_INT64, 0, NULL, &vm1));
    CHECK_OK(otter_graph_add_initializer(g, two));
    CHECK_OK(otter_graph_add_initializer(g, m1));
    add_node(g, "SplitToSequence", "split", 2, (const char *[]){"X", "two"}, 1, (const char *[]){"parts"});
    add_node(g, "SequenceAt", "at", 2, (const char *[]){"S", "m1"}, 1, (const char *[]){"last"});
    add_node(g, "SequenceInsert", "ins", 2, (const char *[]){"parts", "last"}, 1, (const char *[]){"parts2"});
    add_node(g, "SequenceErase", "era", 2, (const char *[]){"parts2", "m1"}, 1, (const char *[]){"parts3"});
    add_node(g, "SequenceInsert", "ins2", 3, (const char *[]){"parts3", "last", "m1"}, 1, (const char *[]){"P"});
    add_node(g, "SequenceLength", "len", 1, (const char *[]){"P"}, 1, (const char *[]){"N"});
    add_node(g, "ConcatFromSequence", "cat", 1, (const char *[]){"P"}, 1, (const char *[]){"C"});
    CHECK_OK(otter_node_set_attr_int(g->nodes[g->n_nodes - 1], "axis", 0));
    add_node(g, "Optional", "opt", 1, (const char *[]){"S"}, 1, (const char *[]){"O"});
    add_node(g, "OptionalHasElement", "has", 1, (const char *[]){"O"}, 1, (const char *[]){"H"});
    add_node(g, "OptionalGetElement", "get", 1, (const char *[]){"O"}, 1, (const char *[]){"G"});
    add_node(g, "Relu", "relu", 1, (const char *[]){"C"}, 1, (const char *[]){"R"});
    const char *outs[] = {"P", "N", "R", "H", "G"};
    for (size_t i = 0; i < 5; i++) CHECK_OK(otter_graph_add_output(g, outs[i], OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    for (size_t i = 0; i < 5; i++) {
        otter_type_clear(&g->outputs[i].type);
        g->outputs[i].has_type = false;
    }
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, NULL));
    otter_tensor *x = vec("X", 6, -2, 1); /* -2 -1 0 1 2 3 */
    otter_tensor *a = vec("a", 2, 10, 1), *b = vec("b", 3, 20, 1);
    otter_sequence *q = NULL;
    CHECK_OK(otter_sequence_create(&q, OTTER_DTYPE_FLOAT));
    CHECK_OK(otter_sequence_append_view(q, a));
    CHECK_OK(otter_sequence_append(q, b)); /* owned by q */
    otter_arg in[2] = {otter_arg_of_tensor(x), otter_arg_of_sequence(q)};
    otter_arg out[5] = {{0}};
    for (int run = 0; run < 2; run++) {
        CHECK_OK(otter_session_run_args(s, 2, NULL, in, 5, NULL, out));
        /* parts = [-2,-1] [0,1] [2,3]; insert b at end; erase it; insert b before the last:
         * P = [-2,-1] [0,1] [20,21,22] [2,3] */
        CHECK(out[0].kind == OTTER_ARG_SEQUENCE && otter_sequence_length(out[0].sequence) == 4);
        const float want_c[] = {-2, -1, 0, 1, 20, 21, 22, 2, 3};
        bool ok = out[2].kind == OTTER_ARG_TENSOR && otter_tensor_numel(out[2].tensor) == 9;
        for (int i = 0; ok && i < 9; i++) ok = ((float *)out[2].tensor->data)[i] == (want_c[i] > 0 ? want_c[i] : 0);
        CHECK(ok);
        CHECK(out[1].kind == OTTER_ARG_TENSOR && *(int64_t *)out[1].tensor->data == 4);
        CHECK(out[3].kind == OTTER_ARG_TENSOR && *(uint8_t *)out[3].tensor->data == 1);
        CHECK(out[4].kind == OTTER_ARG_SEQUENCE && otter_sequence_length(out[4].sequence) == 2 &&
              otter_sequence_at(out[4].sequence, 0) != a &&
              otter_tensor_equal(otter_sequence_at(out[4].sequence, 0), a));
        printf("sequences: run %d: |P| = %zu, concat of 9 checked, optional of a sequence kept its 2 tensors\n", run,
               out[0].kind == OTTER_ARG_SEQUENCE ? otter_sequence_length(out[0].sequence) : 0);
    }
    /* the tensor API refuses a sequence output and names it */
    otter_tensor *t_out = NULL;
    const char *pname[] = {"P"};
    otter_status st = otter_session_run_args(s, 2, NULL, in, 0, NULL, NULL);
    CHECK_OK(st);
    CHECK_STATUS(otter_session_run(s, 0, NULL, NULL, 0, NULL, NULL), OTTER_ERR_INVALID); /* inputs missing */
    const otter_tensor *tin[] = {x};
    CHECK_STATUS(otter_session_run(s, 1, NULL, tin, 1, pname, &t_out), OTTER_ERR_INVALID); /* S missing */
    /* a tensor where the graph reads a sequence: SequenceAt refuses it, naming the input */
    otter_arg wrong[2] = {otter_arg_of_tensor(x), otter_arg_of_tensor(x)};
    CHECK_STATUS(otter_session_run_args(s, 2, NULL, wrong, 1, pname, out), OTTER_ERR_INVALID);
    CHECK(contains(otter_last_error(), "must be a sequence") && contains(otter_last_error(), "'S'"));
    for (int i = 0; i < 5; i++) otter_arg_free(&out[i]);
    otter_session_free(s);
    otter_model_free(m);

    /* a tensor operator fed a sequence fails before it runs */
    CHECK_OK(otter_model_create(&m, "bad", 18));
    add_untyped_input(m->graph, "S");
    add_node(m->graph, "Relu", "relu", 1, (const char *[]){"S"}, 1, (const char *[]){"Y"});
    CHECK_OK(otter_graph_add_output(m->graph, "Y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_session_create(&s, m, NULL));
    otter_arg in1 = otter_arg_of_sequence(q);
    otter_arg o1 = {0};
    CHECK_STATUS(otter_session_run_args(s, 1, NULL, &in1, 1, NULL, &o1), OTTER_ERR_INVALID);
    CHECK(contains(otter_last_error(), "'relu'") && contains(otter_last_error(), "is a sequence"));
    otter_session_free(s);
    otter_model_free(m);
    otter_sequence_free(q);
    otter_tensor_free(a);
    otter_tensor_free(x);
}

/* ---- optimizer graphs over sequences ---- */

#define N_PARAMS 3
static const int64_t PARAM_N[N_PARAMS] = {6, 3, 5};

typedef struct opt_state {
    otter_tensor *w[N_PARAMS], *g[N_PARAMS], *m[N_PARAMS], *v[N_PARAMS];
    double rw[N_PARAMS][8], rg[N_PARAMS][8], rm[N_PARAMS][8], rv[N_PARAMS][8]; /* reference copies */
    otter_sequence *sw, *sg, *sm, *sv;                                         /* views of the tensors */
} opt_state;

static void opt_state_init(opt_state *o) {
    memset(o, 0, sizeof *o);
    CHECK_OK(otter_sequence_create(&o->sw, OTTER_DTYPE_FLOAT));
    CHECK_OK(otter_sequence_create(&o->sg, OTTER_DTYPE_FLOAT));
    CHECK_OK(otter_sequence_create(&o->sm, OTTER_DTYPE_FLOAT));
    CHECK_OK(otter_sequence_create(&o->sv, OTTER_DTYPE_FLOAT));
    for (int p = 0; p < N_PARAMS; p++) {
        int64_t n = PARAM_N[p];
        o->w[p] = vec("w", n, 0.5f - 0.1f * (float)p, -0.13f);
        o->g[p] = vec("g", n, -0.4f + 0.05f * (float)p, 0.17f);
        o->m[p] = vec("m", n, 0.01f, 0.002f);
        o->v[p] = vec("v", n, 0.003f, 0.001f);
        for (int64_t i = 0; i < n; i++) {
            o->rw[p][i] = ((float *)o->w[p]->data)[i];
            o->rg[p][i] = ((float *)o->g[p]->data)[i];
            o->rm[p][i] = ((float *)o->m[p]->data)[i];
            o->rv[p][i] = ((float *)o->v[p]->data)[i];
        }
        CHECK_OK(otter_sequence_append_view(o->sw, o->w[p]));
        CHECK_OK(otter_sequence_append_view(o->sg, o->g[p]));
        CHECK_OK(otter_sequence_append_view(o->sm, o->m[p]));
        CHECK_OK(otter_sequence_append_view(o->sv, o->v[p]));
    }
}

static void opt_state_free(opt_state *o) {
    otter_sequence_free(o->sw);
    otter_sequence_free(o->sg);
    otter_sequence_free(o->sm);
    otter_sequence_free(o->sv);
    for (int p = 0; p < N_PARAMS; p++) {
        otter_tensor_free(o->w[p]);
        otter_tensor_free(o->g[p]);
        otter_tensor_free(o->m[p]);
        otter_tensor_free(o->v[p]);
    }
}

/* The update rules of specs/ort-training-format.md ("Optimizer model"), in double. */
static void ref_adamw(opt_state *o, const otter_node *nd, double lr, int64_t t) {
    double a = otter_node_attr_float(nd, "alpha", 0.9f), b = otter_node_attr_float(nd, "beta", 0.999f);
    double eps = otter_node_attr_float(nd, "epsilon", 1e-8f), wd = otter_node_attr_float(nd, "weight_decay", 1e-2f);
    bool corr = otter_node_attr_int(nd, "correct_bias", 1) != 0;
    int64_t mode = otter_node_attr_int(nd, "adam_mode", 0);
    double bc1 = corr ? 1 - pow(a, (double)t) : 1, bc2 = corr ? 1 - pow(b, (double)t) : 1;
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) {
            double *w = &o->rw[p][i], *m = &o->rm[p][i], *v = &o->rv[p][i], g = o->rg[p][i];
            if (mode == 0) *w -= lr * wd * *w;
            *m = a * *m + (1 - a) * g;
            *v = b * *v + (1 - b) * g * g;
            if (mode == 0)
                *w -= lr * *m / (bc1 * (sqrt(*v / bc2) + eps));
            else {
                *w -= (lr * sqrt(bc2) / bc1) * *m / (sqrt(*v) + eps);
                *w -= lr * wd * *w;
            }
        }
}

static void ref_sgd(opt_state *o, double lr) {
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) o->rw[p][i] -= lr * o->rg[p][i];
}

/* Worst |otter - reference| / (1e-3 + |reference|) over weights and moments. */
static double opt_error(const opt_state *o, bool moments) {
    double worst = 0;
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) {
            const double got[4] = {((float *)o->w[p]->data)[i], ((float *)o->m[p]->data)[i],
                                   ((float *)o->v[p]->data)[i], ((float *)o->g[p]->data)[i]};
            const double ref[4] = {o->rw[p][i], o->rm[p][i], o->rv[p][i], o->rg[p][i]};
            for (int k = 0; k < 4; k++) {
                if (!moments && (k == 1 || k == 2)) continue;
                worst = tu_worse(worst, fabs(got[k] - ref[k]) / (1e-3 + fabs(ref[k])));
            }
        }
    return worst;
}

static const otter_node *find_op(const otter_model *m, const char *op) {
    for (size_t i = 0; i < m->graph->n_nodes; i++)
        if (strcmp(m->graph->nodes[i]->op_type, op) == 0) return m->graph->nodes[i];
    return NULL;
}

/* Run an optimizer model (ORT's layout: learning_rate, step, params, gradients,
 * first_order_moments[, second_order_moments]) for `steps` steps from step t0, checking the
 * caller's tensors against the reference after each. */
static void run_optimizer_model(const char *label, const otter_model *model, bool adamw, int steps) {
    const otter_node *nd = find_op(model, adamw ? "AdamWOptimizer" : "SGDOptimizerV2");
    CHECK(nd != NULL);
    if (!nd) return;
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, model, NULL));
    if (!s) return;
    opt_state o;
    opt_state_init(&o);
    const int64_t one = 1;
    otter_tensor *lr = NULL, *step = NULL;
    CHECK_OK(otter_tensor_create(&lr, "learning_rate", OTTER_DTYPE_FLOAT, 1, &one));
    CHECK_OK(otter_tensor_create(&step, "step", OTTER_DTYPE_INT64, 1, &one));
    const char *names[] = {"learning_rate",       "step", "params", "gradients", "first_order_moments",
                           "second_order_moments"};
    otter_arg in[6] = {otter_arg_of_tensor(lr),     otter_arg_of_tensor(step),   otter_arg_of_sequence(o.sw),
                       otter_arg_of_sequence(o.sg), otter_arg_of_sequence(o.sm), otter_arg_of_sequence(o.sv)};
    size_t n_in = adamw ? 6 : 5;
    otter_arg flag = {0};
    double worst = 0;
    bool flags_ok = true;
    for (int k = 0; k < steps; k++) {
        float rate = 1e-2f * (float)(k + 1);
        int64_t t = 3 + k;
        *(float *)lr->data = rate;
        *(int64_t *)step->data = t;
        CHECK_OK(otter_session_run_args(s, n_in, names, in, 1, NULL, &flag));
        flags_ok = flags_ok && flag.kind == OTTER_ARG_TENSOR && otter_tensor_numel(flag.tensor) == 1 &&
                   ((flag.tensor->dtype == OTTER_DTYPE_BOOL && *(uint8_t *)flag.tensor->data == 1) ||
                    (flag.tensor->dtype == OTTER_DTYPE_INT64 && *(int64_t *)flag.tensor->data == 1));
        if (adamw)
            ref_adamw(&o, nd, rate, t);
        else
            ref_sgd(&o, rate);
        worst = tu_worse(worst, opt_error(&o, adamw));
    }
    printf("%s: %d steps over %d tensors updated in place, worst relative error %.3g vs the spec's formulas, flag %s\n",
           label, steps, N_PARAMS, worst, flags_ok ? "true each step" : "WRONG");
    CHECK(worst < 2e-6);
    CHECK(flags_ok);
    otter_memory_stats ms;
    CHECK_OK(otter_session_memory_stats(s, &ms));
    CHECK(ms.n_runs == (size_t)steps);
    otter_arg_free(&flag);
    otter_tensor_free(lr);
    otter_tensor_free(step);
    opt_state_free(&o);
    otter_session_free(s);
}

/* ORT's optimizer model (the fixture), otter's artifacts (AdamW mode 0 with weight decay, mode 1,
 * SGD), and a graph with InplaceClipGradNorm before SGDOptimizerV2 and an update_signal. */
static void test_optimizer_graphs(void) {
    otter_model *fx = NULL;
    CHECK_OK(otter_model_load(&fx, tu_src_path("tests/data/ort-flat-mnist/optimizer_model.onnx")));
    if (fx) run_optimizer_model("ORT fixture optimizer_model.onnx (AdamW mode 1)", fx, true, 3);

    otter_model *dnn = NULL;
    CHECK_OK(otter_model_mnist_dnn(&dnn, 1));
    struct {
        const char *label;
        otter_optimizer_kind kind;
        bool set;
        float wd;
        int64_t mode;
    } cases[] = {{"otter artifacts, AdamW defaults (mode 1)", OTTER_OPTIM_ADAMW, false, 0, 1},
                 {"otter artifacts, AdamW mode 0, weight_decay 0.05", OTTER_OPTIM_ADAMW, true, 0.05f, 0},
                 {"otter artifacts, AdamW mode 1, weight_decay 0.05", OTTER_OPTIM_ADAMW, true, 0.05f, 1},
                 {"otter artifacts, SGD", OTTER_OPTIM_SGD, false, 0, 0}};
    for (size_t c = 0; dnn && c < sizeof cases / sizeof cases[0]; c++) {
        otter_artifacts_options ao = {0};
        ao.loss = OTTER_LOSS_CROSS_ENTROPY;
        ao.optimizer = cases[c].kind;
        if (cases[c].set) {
            ao.adamw_set = true;
            ao.beta1 = 0.8f;
            ao.beta2 = 0.99f;
            ao.epsilon = 1e-5f;
            ao.weight_decay = cases[c].wd;
            ao.correct_bias = 1;
            ao.adam_mode = cases[c].mode;
        }
        otter_artifacts a = {0};
        CHECK_OK(otter_artifacts_build(&a, dnn, &ao));
        if (a.optimizer) run_optimizer_model(cases[c].label, a.optimizer, cases[c].kind == OTTER_OPTIM_ADAMW, 3);
        otter_artifacts_free(&a);
    }
    otter_model_free(dnn);

    /* clipped = InplaceClipGradNorm(gradients); flag, updated = SGDOptimizerV2(lr, params, clipped, signal) */
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "clip_sgd", 17));
    CHECK_OK(otter_model_set_opset(m, "com.microsoft", 1));
    otter_graph *g = m->graph;
    const int64_t one = 1;
    CHECK_OK(otter_graph_add_input(g, "learning_rate", OTTER_DTYPE_FLOAT, 1, &one, NULL));
    CHECK_OK(otter_graph_add_input(g, "params", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_graph_add_input(g, "gradients", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_graph_add_input(g, "signal", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    if (fx) /* seq(tensor(float)), as ORT declares them */
        for (size_t i = 1; i <= 2; i++) {
            otter_type_clear(&g->inputs[i].type);
            CHECK_OK(otter_type_copy(&g->inputs[i].type, &fx->graph->inputs[2].type));
        }
    add_node(g, "InplaceClipGradNorm", "clip", 1, (const char *[]){"gradients"}, 1, (const char *[]){"clipped"});
    CHECK_OK(otter_node_set_domain(g->nodes[0], "com.microsoft"));
    CHECK_OK(otter_node_set_attr_float(g->nodes[0], "max_norm", 0.5f));
    add_node(g, "SGDOptimizerV2", "sgd", 4, (const char *[]){"learning_rate", "params", "clipped", "signal"}, 2,
             (const char *[]){"done", "updated"});
    CHECK_OK(otter_node_set_domain(g->nodes[1], "com.microsoft"));
    CHECK_OK(otter_graph_add_output(g, "done", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_add_output(g, "updated", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK_OK(otter_graph_add_output(g, "clipped", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    for (size_t i = 1; fx && i <= 2; i++) {
        otter_type_clear(&g->outputs[i].type);
        CHECK_OK(otter_type_copy(&g->outputs[i].type, &fx->graph->inputs[2].type));
    }
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, NULL));
    opt_state o;
    opt_state_init(&o);
    otter_tensor *lr = NULL, *sig = NULL;
    CHECK_OK(otter_tensor_create(&lr, "learning_rate", OTTER_DTYPE_FLOAT, 1, &one));
    CHECK_OK(otter_tensor_create(&sig, "signal", OTTER_DTYPE_BOOL, 0, NULL));
    *(float *)lr->data = 0.1f;
    otter_arg in[4] = {otter_arg_of_tensor(lr), otter_arg_of_sequence(o.sw), otter_arg_of_sequence(o.sg),
                       otter_arg_of_tensor(sig)};
    otter_arg out[3] = {{0}};
    /* signal false: nothing changes, the flag is false */
    *(uint8_t *)sig->data = 0;
    double norm = 0;
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) norm += o.rg[p][i] * o.rg[p][i];
    norm = sqrt(norm);
    const double norm0 = norm;
    double scale = norm > 0.5 ? 0.5 / (norm + 1e-6) : 1;
    if (s) CHECK_OK(otter_session_run_args(s, 4, NULL, in, 3, NULL, out));
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) o.rg[p][i] *= scale; /* clipping happens either way */
    double e_skip = opt_error(&o, false);
    bool flag_false = out[0].kind == OTTER_ARG_TENSOR && out[0].tensor->dtype == OTTER_DTYPE_BOOL &&
                      otter_tensor_numel(out[0].tensor) == 1 && *(uint8_t *)out[0].tensor->data == 0;
    CHECK(flag_false);
    CHECK(e_skip < 1e-6);
    /* signal true: w -= lr * clipped g; the outputs are copies of the updated / clipped sequences */
    *(uint8_t *)sig->data = 1;
    if (s) CHECK_OK(otter_session_run_args(s, 4, NULL, in, 3, NULL, out));
    norm *= scale;
    scale = norm > 0.5 ? 0.5 / (norm + 1e-6) : 1;
    for (int p = 0; p < N_PARAMS; p++)
        for (int64_t i = 0; i < PARAM_N[p]; i++) o.rg[p][i] *= scale;
    ref_sgd(&o, 0.1);
    double e_step = opt_error(&o, false);
    bool flag_true = out[0].kind == OTTER_ARG_TENSOR && *(uint8_t *)out[0].tensor->data == 1;
    bool copies = out[1].kind == OTTER_ARG_SEQUENCE && out[2].kind == OTTER_ARG_SEQUENCE &&
                  otter_sequence_length(out[1].sequence) == N_PARAMS &&
                  otter_sequence_length(out[2].sequence) == N_PARAMS;
    for (int p = 0; copies && p < N_PARAMS; p++)
        copies = otter_tensor_equal(otter_sequence_at(out[1].sequence, (size_t)p), o.w[p]) &&
                 otter_tensor_equal(otter_sequence_at(out[2].sequence, (size_t)p), o.g[p]) &&
                 otter_sequence_at(out[1].sequence, (size_t)p) != o.w[p];
    printf("InplaceClipGradNorm(max_norm 0.5, gradient norm %.4f) + SGDOptimizerV2: update_signal false kept the "
           "weights, clipped the gradients (error %.3g, flag false: %s), true updated them (worst relative error "
           "%.3g), outputs equal the caller's "
           "tensors: %s\n",
           norm0, e_skip, flag_false ? "yes" : "no", e_step, copies ? "yes" : "no");
    CHECK(flag_true);
    CHECK(e_step < 2e-6);
    CHECK(copies);
    for (int i = 0; i < 3; i++) otter_arg_free(&out[i]);
    otter_tensor_free(lr);
    otter_tensor_free(sig);
    opt_state_free(&o);
    otter_session_free(s);
    otter_model_free(m);
    otter_model_free(fx);
}

/* X[6] -> SplitToSequence(2) -> SequenceInsert(SequenceAt(S, -1)) -> ConcatFromSequence -> C; the
 * sequence P is an output too. Every allocation failure gives OTTER_ERR_NOMEM and no leak. */
static void test_sequence_alloc_failures(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "seq_nomem", 18));
    otter_graph *g = m->graph;
    const int64_t xd[] = {6};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 1, xd, NULL));
    add_untyped_input(g, "S");
    otter_tensor *two = NULL, *m1 = NULL;
    int64_t v2 = 2, vm1 = -1;
    CHECK_OK(otter_tensor_from_data(&two, "two", OTTER_DTYPE_INT64, 0, NULL, &v2));
    CHECK_OK(otter_tensor_from_data(&m1, "m1", OTTER_DTYPE_INT64, 0, NULL, &vm1));
    CHECK_OK(otter_graph_add_initializer(g, two));
    CHECK_OK(otter_graph_add_initializer(g, m1));
    add_node(g, "SplitToSequence", "split", 2, (const char *[]){"X", "two"}, 1, (const char *[]){"parts"});
    add_node(g, "SequenceAt", "at", 2, (const char *[]){"S", "m1"}, 1, (const char *[]){"last"});
    add_node(g, "SequenceInsert", "ins", 2, (const char *[]){"parts", "last"}, 1, (const char *[]){"P"});
    add_node(g, "ConcatFromSequence", "cat", 1, (const char *[]){"P"}, 1, (const char *[]){"C"});
    CHECK_OK(otter_node_set_attr_int(g->nodes[g->n_nodes - 1], "axis", 0));
    CHECK_OK(otter_graph_add_output(g, "C", OTTER_DTYPE_FLOAT, 1, NULL, NULL));
    CHECK_OK(otter_graph_add_output(g, "P", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    otter_type_clear(&g->outputs[1].type);
    g->outputs[1].has_type = false;
    otter_tensor *x = vec("X", 6, 1, 1), *a = vec("a", 3, 7, 1);
    otter_sequence *q = NULL;
    CHECK_OK(otter_sequence_create(&q, OTTER_DTYPE_FLOAT));
    CHECK_OK(otter_sequence_append_view(q, a));
    otter_arg in[2] = {otter_arg_of_tensor(x), otter_arg_of_sequence(q)};
    int nomem = 0, ok = 0, bad = 0;
    for (long k = 1; k < 600; k++) {
        otter_session *s = NULL;
        otter_arg out[2] = {{0}};
        otter_set_allocator(&tu_counting_allocator);
        tu_alloc_fail_at(k);
        otter_status st = otter_session_create(&s, m, &(otter_session_options){.n_threads = 1});
        if (st == OTTER_OK) st = otter_session_run_args(s, 2, NULL, in, 2, NULL, out);
        if (st == OTTER_OK) st = otter_session_run_args(s, 2, NULL, in, 2, NULL, out);
        bool past_end = tu_alloc_calls < k; /* fewer calls than k: the failure point is past the end */
        tu_alloc_fail_at(0);
        otter_set_allocator(NULL);
        if (st != OTTER_OK) {
            nomem++;
            if (st != OTTER_ERR_NOMEM) {
                bad++;
                fprintf(stderr, "failure %ld: %s: %s\n", k, otter_status_name(st), otter_last_error());
            }
        } else {
            ok++;
            CHECK(out[0].kind == OTTER_ARG_TENSOR && otter_tensor_numel(out[0].tensor) == 9 &&
                  ((float *)out[0].tensor->data)[8] == 9.0f);
            CHECK(out[1].kind == OTTER_ARG_SEQUENCE && otter_sequence_length(out[1].sequence) == 4);
        }
        otter_arg_free(&out[0]);
        otter_arg_free(&out[1]);
        otter_session_free(s);
        if (past_end) break;
    }
    printf("sequence allocation failures: %d injected failures gave a clean error (%d not NOMEM), then success\n",
           nomem, bad);
    CHECK(nomem > 10 && ok >= 1 && bad == 0);
    otter_sequence_free(q);
    otter_tensor_free(a);
    otter_tensor_free(x);
    otter_model_free(m);
}

/* X -> Relu -> a [-> Identity -> b] -> Reshape -> Neg -> Y, and Abs(a or b) -> Z after the Reshape:
 * the memory plan sees through an Identity's alias, so the Reshape is a view of a either way (as many
 * outputs sharing a buffer with and without the Identity), and the view keeps a's block alive for
 * the Abs after it (Neg does not write over it). */
static size_t view_through_identity(bool identity) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "view_through_identity", 17));
    otter_graph *g = m->graph;
    const int64_t xd[] = {8, 4}, yd[] = {32}, sd[] = {1};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 2, xd, NULL));
    otter_tensor *shape = NULL;
    CHECK_OK(otter_tensor_create(&shape, "shape", OTTER_DTYPE_INT64, 1, sd));
    ((int64_t *)shape->data)[0] = -1;
    CHECK_OK(otter_graph_add_initializer(g, shape));
    add_node(g, "Relu", "relu", 1, (const char *[]){"X"}, 1, (const char *[]){"a"});
    if (identity) add_node(g, "Identity", "id", 1, (const char *[]){"a"}, 1, (const char *[]){"b"});
    const char *v = identity ? "b" : "a";
    add_node(g, "Reshape", "flat", 2, (const char *[]){v, "shape"}, 1, (const char *[]){"c"});
    add_node(g, "Neg", "neg", 1, (const char *[]){"c"}, 1, (const char *[]){"Y"});
    add_node(g, "Abs", "abs", 1, (const char *[]){v}, 1, (const char *[]){"Z"});
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, 1, yd, NULL));
    CHECK_OK(otter_graph_add_output(g, "Z", OTTER_DTYPE_FLOAT, 2, xd, NULL));
    otter_session *s = NULL;
    CHECK_OK(otter_session_create(&s, m, &(otter_session_options){.n_threads = 1}));
    otter_tensor *x = NULL;
    CHECK_OK(otter_tensor_create(&x, "X", OTTER_DTYPE_FLOAT, 2, xd));
    float wy[32], wz[32];
    for (int i = 0; i < 32; i++) {
        float xv = (float)(i % 7) - 3.0f;
        ((float *)x->data)[i] = xv;
        wz[i] = xv > 0 ? xv : 0.0f;
        wy[i] = -wz[i];
    }
    double worst = 0;
    for (int run = 0; s && run < 3; run++) {
        otter_tensor *out[2] = {NULL, NULL};
        CHECK_OK(otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out));
        if (out[0] && out[1])
            worst =
                tu_worse(worst, tu_worse(tu_max_abs_diff(out[0]->data, wy, 32), tu_max_abs_diff(out[1]->data, wz, 32)));
        otter_tensor_free(out[0]), otter_tensor_free(out[1]);
    }
    otter_memory_stats st = {0};
    if (s) CHECK_OK(otter_session_memory_stats(s, &st));
    printf("Reshape %s an Identity: worst error over 3 runs %g, %zu outputs sharing a buffer\n",
           identity ? "behind" : "without", worst, st.n_inplace);
    CHECK(worst == 0);
    otter_tensor_free(x);
    otter_session_free(s);
    otter_model_free(m);
    return st.n_inplace;
}

static void test_view_through_identity(void) {
    size_t plain = view_through_identity(false), aliased = view_through_identity(true);
    CHECK(plain >= 1 && aliased == plain);
}

int main(void) {
    test_chain_and_plan();
    test_view_through_identity();
    test_plan_no_early_holes();
    test_opt_level0();
    test_inplace_broadcast();
    test_memory_budget();
    test_input_errors();
    test_create_errors();
    test_threads();
    test_passthrough();
    test_subgraph();
    test_alloc_failures();
    test_sequence_values();
    test_optimizer_graphs();
    test_sequence_alloc_failures();
    return tu_finish("test_runtime");
}
