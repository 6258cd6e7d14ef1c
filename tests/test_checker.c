/* otter_model_check's API: the report, stop_at_first, the callback, message wording, full_check
 * (types found only with it, model left unchanged), subgraph paths, and allocation failures. */
#include <stdlib.h>
#include <string.h>

#include "otter/check.h"
#include "testutil.h"

static const int64_t DIMS[2] = {2, 3};

/* x -> Relu -> y, opset 14, built through the editing API. */
static otter_model *relu_model(void) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 14));
    if (!m) return NULL;
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 2, DIMS, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_FLOAT, 2, DIMS, NULL));
    otter_node *n = NULL;
    const char *in[] = {"x"}, *out[] = {"y"};
    CHECK_OK(otter_node_create(&n, "Relu", "relu", 1, in, 1, out));
    if (n) CHECK_OK(otter_graph_add_node(m->graph, n));
    return m;
}

static otter_node *add_node(otter_model *m, const char *op, const char *name, size_t n_in, const char *const *in,
                            const char *out) {
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, op, name, n_in, in, 1, &out));
    if (n) CHECK_OK(otter_graph_add_node(m->graph, n));
    return n;
}

static int cb_count;
static char cb_last[512];
static void on_problem(const char *msg, void *user) {
    cb_count++;
    (*(int *)user)++;
    snprintf(cb_last, sizeof cb_last, "%s", msg);
}

static void print_report(const char *what, const otter_check_report *r) {
    printf("%s: %zu problem(s)\n", what, otter_check_report_count(r));
    for (size_t i = 0; i < otter_check_report_count(r); i++)
        printf("  [%zu] node='%s' op='%s': %s\n", i, otter_check_report_node(r, i), otter_check_report_op_type(r, i),
               otter_check_report_message(r, i));
}

/* Fail allocation n = 1, 2, ... during a full check: each run ends in NOMEM (or, once n is past
 * the last allocation, in `final`) and leaves nothing allocated. */
static void alloc_failures(const char *what, const otter_model *m, otter_status final) {
    otter_set_allocator(&tu_counting_allocator);
    int nomem = 0, other = 0, leaks = 0;
    long n;
    otter_status s = OTTER_OK;
    for (n = 1;; n++) {
        otter_check_report *rr = NULL;
        tu_alloc_live = 0;
        tu_alloc_fail_at(n);
        s = otter_check_report_create(&rr);
        if (s == OTTER_OK) {
            otter_check_options oo = {.full_check = true, .report = rr};
            s = otter_model_check(m, &oo);
        }
        otter_check_report_free(rr);
        bool reached = tu_alloc_calls >= n;
        tu_alloc_fail_at(0);
        if (tu_alloc_live != 0) leaks++;
        if (!reached) break;
        if (s == OTTER_ERR_NOMEM)
            nomem++;
        else
            other++;
    }
    otter_set_allocator(NULL);
    printf("%s: failing each of %ld allocations: %d out-of-memory, %d other statuses, %d leaking runs; "
           "final run %s (expected %s)\n",
           what, n - 1, nomem, other, leaks, otter_status_name(s), otter_status_name(final));
    CHECK(n > 10 && other == 0 && leaks == 0 && s == final);
}

int main(void) {
    otter_check_report *r = NULL;
    CHECK_OK(otter_check_report_create(&r));

    /* A valid model. */
    otter_model *m = relu_model();
    otter_check_options o = {.full_check = true, .report = r};
    CHECK_OK(otter_model_check(m, &o));
    print_report("valid Relu model", r);
    CHECK(otter_check_report_count(r) == 0);
    CHECK(otter_check_report_message(r, 0) == NULL);
    CHECK_OK(otter_model_check(m, NULL));

    /* Three independent problems: all collected, in graph order, each naming its node. */
    const char *dangling[] = {"y", "nowhere"};
    add_node(m, "Add", "add1", 2, dangling, "z1");
    const char *xin[] = {"x"};
    add_node(m, "FooBar", "foo", 1, xin, "z2");
    const char *conv_in[] = {"x", "x"};
    otter_node *conv = add_node(m, "Conv", "conv1", 2, conv_in, "z3");
    if (conv) CHECK_OK(otter_node_set_attr_float(conv, "kernel_shape", 3.0f));
    int user_count = 0;
    cb_count = 0;
    o = (otter_check_options){.report = r, .callback = on_problem, .callback_user = &user_count};
    CHECK_STATUS(otter_model_check(m, &o), OTTER_ERR_INVALID);
    print_report("three problems, collect all", r);
    printf("last error: %s\n", otter_last_error());
    CHECK(otter_check_report_count(r) == 3);
    CHECK(cb_count == 3 && user_count == 3);
    const char *want0 = "node 'add1' (Add): input 'nowhere' is not defined (not a graph input, initializer or "
                        "output of an earlier node)";
    const char *want1 = "node 'foo' (FooBar): no operator FooBar in domain ai.onnx at opset 14";
    const char *want2 = "node 'conv1' (Conv): attribute 'kernel_shape' has type FLOAT, expected INTS";
    CHECK(otter_check_report_count(r) == 3 && strcmp(otter_check_report_message(r, 0), want0) == 0);
    CHECK(otter_check_report_count(r) == 3 && strcmp(otter_check_report_message(r, 1), want1) == 0);
    CHECK(otter_check_report_count(r) == 3 && strcmp(otter_check_report_message(r, 2), want2) == 0);
    CHECK(otter_check_report_count(r) == 3 && strcmp(otter_check_report_node(r, 2), "conv1") == 0 &&
          strcmp(otter_check_report_op_type(r, 2), "Conv") == 0);
    CHECK(strcmp(cb_last, want2) == 0);
    CHECK(strstr(otter_last_error(), want0) == otter_last_error() &&
          strstr(otter_last_error(), "(and 2 more problems)") != NULL);

    /* stop_at_first: one problem, the first. */
    o = (otter_check_options){.report = r, .stop_at_first = true};
    CHECK_STATUS(otter_model_check(m, &o), OTTER_ERR_INVALID);
    print_report("three problems, stop at first", r);
    CHECK(otter_check_report_count(r) == 1 && strcmp(otter_check_report_message(r, 0), want0) == 0);
    CHECK(strcmp(otter_last_error(), want0) == 0);
    otter_model_free(m);

    /* A type problem shows only with full_check; the model is not changed by the check. */
    m = relu_model();
    if (m) {
        CHECK_OK(otter_graph_add_input(m->graph, "i", OTTER_DTYPE_INT64, 2, DIMS, NULL));
        const char *in2[] = {"y", "i"};
        add_node(m, "Add", "mixed", 2, in2, "z");
        CHECK_OK(otter_graph_add_output(m->graph, "z", OTTER_DTYPE_FLOAT, 2, DIMS, NULL));
        size_t vi_before = m->graph->n_value_info;
        o = (otter_check_options){.report = r};
        CHECK_OK(otter_model_check(m, &o));
        printf("float + int64 Add without full_check: %zu problems\n", otter_check_report_count(r));
        o.full_check = true;
        CHECK_STATUS(otter_model_check(m, &o), OTTER_ERR_INVALID);
        print_report("float + int64 Add with full_check", r);
        CHECK(otter_check_report_count(r) >= 1);
        CHECK(strstr(otter_last_error(), "mixed") != NULL);
        CHECK(otter_check_report_count(r) >= 1 && strcmp(otter_check_report_node(r, 0), "mixed") == 0 &&
              strcmp(otter_check_report_op_type(r, 0), "Add") == 0);
        printf("value_info entries before %zu, after %zu\n", vi_before, m->graph->n_value_info);
        CHECK(m->graph->n_value_info == vi_before);
    }
    otter_model_free(m);

    /* Problems inside a subgraph carry the path to it. */
    m = relu_model();
    if (m) {
        otter_graph *then_g = NULL, *else_g = NULL;
        CHECK_OK(otter_graph_create(&then_g, "then"));
        CHECK_OK(otter_graph_create(&else_g, "else"));
        const char *nowhere[] = {"nowhere"}, *yin[] = {"y"};
        otter_node *a = NULL, *b = NULL;
        CHECK_OK(otter_node_create(&a, "Relu", "inner", 1, nowhere, 1, (const char *[]){"t"}));
        CHECK_OK(otter_node_create(&b, "Identity", "inner2", 1, yin, 1, (const char *[]){"e"}));
        CHECK_OK(otter_graph_add_node(then_g, a));
        CHECK_OK(otter_graph_add_node(else_g, b));
        CHECK_OK(otter_graph_add_output(then_g, "t", OTTER_DTYPE_FLOAT, 2, DIMS, NULL));
        CHECK_OK(otter_graph_add_output(else_g, "e", OTTER_DTYPE_FLOAT, 2, DIMS, NULL));
        CHECK_OK(otter_graph_add_input(m->graph, "cond", OTTER_DTYPE_BOOL, 0, NULL, NULL));
        otter_node *iff = NULL;
        CHECK_OK(otter_node_create(&iff, "If", "if", 1, (const char *[]){"cond"}, 1, (const char *[]){"w"}));
        CHECK_OK(otter_node_set_attr_graph(iff, "then_branch", then_g));
        CHECK_OK(otter_node_set_attr_graph(iff, "else_branch", else_g));
        CHECK_OK(otter_graph_add_node(m->graph, iff));
        o = (otter_check_options){.report = r, .full_check = true};
        CHECK_STATUS(otter_model_check(m, &o), OTTER_ERR_INVALID);
        print_report("If with a dangling input in then_branch", r);
        const char *want = "node 'if' (If), attribute 'then_branch': node 'inner' (Relu): input 'nowhere' is not "
                           "defined (not a graph input, initializer or output of an earlier node)";
        CHECK(otter_check_report_count(r) == 1 && strcmp(otter_check_report_message(r, 0), want) == 0);
    }
    otter_model_free(m);

    CHECK_STATUS(otter_model_check(NULL, NULL), OTTER_ERR_ARGUMENT);
    otter_check_report_free(r);

    /* Every allocation failing in turn: on a model with problems (report, prefixes, messages) and
     * on a valid one (full_check's copy and shape inference). */
    m = relu_model();
    alloc_failures("valid model, full_check", m, OTTER_OK);
    add_node(m, "Add", "add1", 2, dangling, "z1");
    add_node(m, "FooBar", "foo", 1, xin, "z2");
    alloc_failures("model with 2 problems", m, OTTER_ERR_INVALID);
    otter_model_free(m);
    return tu_finish("test_checker");
}
