/* Session API: graphs built with the IR editing API, run through otter_session.
 * Checks results against values computed here, the errors for bad inputs and unknown operators,
 * the memory plan (a second run with the same shapes allocates nothing, in-place reuse, a smaller
 * arena than the sum of intermediates, re-planning on new shapes), the optimizations (Identity
 * dropped, constants folded) and that 1 and 2 threads give identical results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/io.h"
#include "otter/runtime.h"
#include "testutil.h"

/* ---- counting allocator ---- */

static long g_allocs;
static void *count_malloc(size_t n, void *u) {
    (void)u;
    g_allocs++;
    return malloc(n);
}
static void *count_realloc(void *p, size_t n, void *u) {
    (void)u;
    g_allocs++;
    return realloc(p, n);
}
static void count_free(void *p, void *u) {
    (void)u;
    free(p);
}
static const otter_allocator COUNTING = {count_malloc, count_realloc, count_free, NULL};

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

static float max_err(const otter_tensor *t, const float *ref) {
    float w = 0;
    for (int64_t i = 0; i < otter_tensor_numel(t); i++) {
        float d = fabsf(((const float *)t->data)[i] - ref[i]);
        if (d > w || d != d) w = d != d ? INFINITY : d;
    }
    return w;
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
        float ey = max_err(out[0], yr), ez = max_err(out[1], zr);
        printf("chain run 1 (heap): max error Y %.3g, Z %.3g; output names '%s', '%s'\n", ey, ez, out[0]->name,
               out[1]->name);
        CHECK(ey < 1e-5f && ez < 1e-5f);
        CHECK(out[0]->name && strcmp(out[0]->name, "Y") == 0);
    }
    CHECK_OK(otter_session_memory_stats(s, &st));
    CHECK(st.n_plans == 1 && st.n_runs == 1);

    /* second run, same shapes, outputs filled in place: no allocation at all */
    memset(out[0]->data, 0, otter_tensor_nbytes(out[0]));
    otter_set_allocator(&COUNTING);
    g_allocs = 0;
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, out));
    long allocs = g_allocs;
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
    otter_set_allocator(&COUNTING);
    g_allocs = 0;
    CHECK_OK(otter_session_run(s, 1, NULL, in, 2, NULL, keep));
    allocs = g_allocs;
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
        double d = fabs(ref - ((float *)y[0]->data)[i]);
        if (d > worst) worst = d;
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
            double d = fabs(acc - ((float *)y[0]->data)[i * 80 + j]);
            double d12 = fabs(((float *)y[1]->data)[i * 80 + j] - ((float *)y[0]->data)[i * 80 + j]);
            if (d > worst) worst = d;
            if (d12 > diff12) diff12 = d12;
        }
    printf("threads, MatMul: max |1 thread - 2 threads| %.3g, max error vs double reference %.3g\n", diff12, worst);
    CHECK(y[0] && y[1] && worst < 1e-4 && diff12 < 1e-5);
    otter_tensor_free(y[0]);
    otter_tensor_free(y[1]);
    otter_tensor_free(x);
    free(w);
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
    float worst = 0;
    for (int r = 0; r < 4; r++) {
        bool then = r % 2 == 0;
        *(uint8_t *)c->data = then;
        CHECK_OK(otter_session_run(s, 2, NULL, (const otter_tensor *const[]){x, c}, 1, NULL, &y));
        for (int i = 0; y && i < 256; i++) {
            float xv = ((float *)x->data)[i], t2 = tanhf(expf(xv));
            float ref = then ? -xv + t2 : -xv * t2;
            float e = fabsf(((float *)y->data)[i] - ref);
            if (e > worst || e != e) worst = e != e ? INFINITY : e;
        }
    }
    otter_memory_stats st;
    CHECK_OK(otter_session_memory_stats(s, &st));
    printf("subgraph: If reading outer values, 4 runs (2 planned per branch): max error %.3g, %zu plans\n", worst,
           st.n_plans);
    CHECK(worst < 1e-5f);
    otter_tensor_free(x);
    otter_tensor_free(c);
    otter_tensor_free(y);
    otter_session_free(s);
    otter_model_free(m);
}

/* Allocation failures at create and run: a clean error, never a crash (leaks show under ASan). */
static long g_fail_at;
static void *failing_malloc(size_t n, void *u) {
    (void)u;
    if (g_fail_at > 0 && --g_fail_at == 0) return NULL;
    return malloc(n);
}
static void *failing_realloc(void *p, size_t n, void *u) {
    (void)u;
    if (g_fail_at > 0 && --g_fail_at == 0) return NULL;
    return realloc(p, n);
}

static void test_alloc_failures(void) {
    const otter_allocator failing = {failing_malloc, failing_realloc, count_free, NULL};
    otter_model *m = chain_model();
    otter_tensor *x = make_x(8, 0.5f);
    int nomem = 0, ok = 0;
    for (long k = 1; k < 400; k++) {
        otter_session *s = NULL;
        otter_tensor *out[2] = {NULL, NULL};
        otter_set_allocator(&failing);
        g_fail_at = k;
        otter_status st = otter_session_create(&s, m, &(otter_session_options){.n_threads = 1});
        if (st == OTTER_OK) st = otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out);
        if (st == OTTER_OK) st = otter_session_run(s, 1, NULL, (const otter_tensor *const[]){x}, 2, NULL, out);
        bool reached = g_fail_at > 0;
        g_fail_at = 0;
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
        if (reached) break; /* the failure point is past everything: done */
    }
    printf("allocation failures: %d injected failures gave a clean error, then success\n", nomem);
    CHECK(nomem > 10 && ok >= 1);
    otter_tensor_free(x);
    otter_model_free(m);
}

int main(void) {
    test_chain_and_plan();
    test_opt_level0();
    test_input_errors();
    test_create_errors();
    test_threads();
    test_passthrough();
    test_subgraph();
    test_alloc_failures();
    return tu_finish("test_runtime");
}
