/* Graph tools: clean (dead nodes, dedup, unused initializers/value_info), topological sort and
 * cycle errors, prefixing, merge/concat (wiring, prefixes, type checks, clashes, opsets), extract,
 * the dtype list, and the text / DOT renderings. */
#include <string.h>

#include "otter/edit.h"
#include "otter/print.h"
#include "testutil.h"

static const int64_t D3[1] = {3};

static otter_status node(otter_graph *g, const char *op, const char *name, size_t ni, const char *const *ins, size_t no,
                         const char *const *outs) {
    otter_node *n = NULL;
    otter_status s = otter_node_create(&n, op, name, ni, ins, no, outs);
    if (s != OTTER_OK) return s;
    return otter_graph_add_node(g, n);
}

static otter_status unary(otter_graph *g, const char *op, const char *name, const char *x, const char *y) {
    return node(g, op, name, 1, &x, 1, &y);
}

static otter_status binary(otter_graph *g, const char *op, const char *name, const char *x, const char *y,
                           const char *z) {
    const char *ins[2] = {x, y};
    return node(g, op, name, 2, ins, 1, &z);
}

static otter_status init3(otter_graph *g, const char *name, float a, float b, float c) {
    const float v[3] = {a, b, c};
    otter_tensor *t = NULL;
    otter_status s = otter_tensor_from_data(&t, name, OTTER_DTYPE_FLOAT, 1, D3, v);
    if (s != OTTER_OK) return s;
    return otter_graph_add_initializer(g, t);
}

static const char *node_name(const otter_graph *g, size_t i) { return i < g->n_nodes ? g->nodes[i]->name : "(none)"; }

static void test_clean(void) {
    otter_graph *g = NULL;
    CHECK_OK(otter_graph_create(&g, "clean_me"));
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    /* Out of order on purpose: mul reads add's output but comes first. */
    CHECK_OK(binary(g, "Mul", "mul", "a", "c2", "y"));
    CHECK_OK(unary(g, "Neg", "dead", "x", "unused"));
    CHECK_OK(binary(g, "Add", "add", "x", "c1", "a"));
    CHECK_OK(init3(g, "c1", 1, 2, 3));
    CHECK_OK(init3(g, "c2", 1, 2, 3)); /* equal to c1 */
    CHECK_OK(init3(g, "c3", 1, 2, 4)); /* differs in one element */
    CHECK_OK(init3(g, "u", 9, 9, 9));  /* read by nobody */
    CHECK_OK(binary(g, "Sub", "sub", "y", "c3", "z"));
    otter_type t;
    otter_type_init_tensor(&t, OTTER_DTYPE_FLOAT, 1, D3);
    CHECK_OK(otter_graph_add_value_info(g, "a", &t));
    CHECK_OK(otter_graph_add_value_info(g, "unused", &t));
    CHECK_OK(otter_graph_add_value_info(g, "gone", &t));
    otter_type_clear(&t);
    CHECK_OK(otter_graph_add_output(g, "z", OTTER_DTYPE_FLOAT, 1, D3, NULL));

    otter_clean_stats st;
    CHECK_OK(otter_graph_clean(g, &st));
    printf("clean: removed %zu nodes (want 1), deduplicated %zu (want 1), removed %zu initializers (want 1), "
           "%zu value_info (want 2)\n",
           st.nodes_removed, st.initializers_deduplicated, st.initializers_removed, st.value_info_removed);
    CHECK(st.nodes_removed == 1 && st.initializers_deduplicated == 1);
    CHECK(st.initializers_removed == 1 && st.value_info_removed == 2);
    printf("clean: order %s, %s, %s (want add, mul, sub)\n", node_name(g, 0), node_name(g, 1), node_name(g, 2));
    CHECK(g->n_nodes == 3 && strcmp(node_name(g, 0), "add") == 0 && strcmp(node_name(g, 1), "mul") == 0 &&
          strcmp(node_name(g, 2), "sub") == 0);
    ptrdiff_t mul = otter_graph_find_node(g, "mul");
    CHECK(mul >= 0 && strcmp(g->nodes[mul]->inputs[1], "c1") == 0);
    printf("clean: initializers %zu (want 2: c1, c3), mul reads '%s' (want c1)\n", g->n_initializers,
           mul >= 0 ? g->nodes[mul]->inputs[1] : "?");
    CHECK(g->n_initializers == 2 && otter_graph_find_initializer(g, "c1") >= 0 &&
          otter_graph_find_initializer(g, "c3") >= 0);
    CHECK(g->n_value_info == 1 && strcmp(g->value_info[0].name, "a") == 0);

    /* Clean again: nothing to do. */
    CHECK_OK(otter_graph_clean(g, &st));
    CHECK(st.nodes_removed == 0 && st.initializers_deduplicated == 0 && st.initializers_removed == 0 &&
          st.value_info_removed == 0);
    otter_graph_free(g);
}

static void test_cycle(void) {
    otter_graph *g = NULL;
    CHECK_OK(otter_graph_create(&g, "loopy"));
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(unary(g, "Relu", "head", "x", "h"));
    CHECK_OK(binary(g, "Add", "add_in_cycle", "h", "r", "s"));
    CHECK_OK(unary(g, "Relu", "relu_in_cycle", "s", "r"));
    CHECK_OK(unary(g, "Neg", "after", "s", "y"));
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_STATUS(otter_graph_topo_sort(g), OTTER_ERR_INVALID);
    const char *msg = otter_last_error();
    printf("cycle: \"%s\"\n", msg);
    CHECK(strstr(msg, "'add_in_cycle' (Add)") != NULL && strstr(msg, "'relu_in_cycle' (Relu)") != NULL);
    CHECK(strstr(msg, "'head'") == NULL && strstr(msg, "'after'") == NULL); /* only nodes on the cycle */
    CHECK(g->n_nodes == 4 && strcmp(node_name(g, 0), "head") == 0 && strcmp(node_name(g, 3), "after") == 0);
    CHECK_STATUS(otter_graph_clean(g, NULL), OTTER_ERR_INVALID);
    CHECK(g->n_nodes == 4);

    /* A node reading its own output is a cycle of one. */
    otter_graph *g2 = NULL;
    CHECK_OK(otter_graph_create(&g2, "self"));
    CHECK_OK(binary(g2, "Add", "selfish", "x", "q", "q"));
    CHECK_STATUS(otter_graph_topo_sort(g2), OTTER_ERR_INVALID);
    printf("self cycle: \"%s\"\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'selfish'") != NULL);
    otter_graph_free(g2);
    otter_graph_free(g);
}

/* The If's then-branch reads `a` from the outer scope: sorting must put a's producer first, and
 * clean must keep it although no node input names it. */
static void test_subgraph_scope(void) {
    otter_graph *g = NULL, *then_g = NULL, *else_g = NULL;
    CHECK_OK(otter_graph_create(&g, "outer"));
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(otter_graph_add_input(g, "cond", OTTER_DTYPE_BOOL, 0, NULL, NULL));
    CHECK_OK(otter_graph_create(&then_g, "then"));
    CHECK_OK(unary(then_g, "Identity", "then_id", "a", "t_out"));
    CHECK_OK(otter_graph_add_output(then_g, "t_out", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(otter_graph_create(&else_g, "else"));
    CHECK_OK(unary(else_g, "Identity", "else_id", "x", "e_out"));
    CHECK_OK(otter_graph_add_output(else_g, "e_out", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    otter_node *n = NULL;
    const char *cond = "cond", *y = "y";
    CHECK_OK(otter_node_create(&n, "If", "if", 1, &cond, 1, &y));
    CHECK_OK(otter_node_set_attr_graph(n, "then_branch", then_g));
    CHECK_OK(otter_node_set_attr_graph(n, "else_branch", else_g));
    CHECK_OK(otter_graph_add_node(g, n));
    CHECK_OK(unary(g, "Relu", "make_a", "x", "a"));
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    otter_clean_stats st;
    CHECK_OK(otter_graph_clean(g, &st));
    printf("subgraph scope: order %s, %s (want make_a, if), removed %zu nodes (want 0)\n", node_name(g, 0),
           node_name(g, 1), st.nodes_removed);
    CHECK(g->n_nodes == 2 && strcmp(node_name(g, 0), "make_a") == 0 && st.nodes_removed == 0);

    /* Prefixing renames the outer read inside the subgraph too. */
    CHECK_OK(otter_graph_add_prefix(g, "p_", true));
    const otter_attr *then_attr = otter_node_attr(g->nodes[1], "then_branch");
    CHECK(then_attr && then_attr->g && strcmp(then_attr->g->nodes[0]->inputs[0], "p_a") == 0);
    CHECK(strcmp(g->nodes[0]->outputs[0], "p_a") == 0 && strcmp(g->nodes[0]->name, "p_make_a") == 0);
    CHECK(strcmp(g->inputs[0].name, "p_x") == 0 && strcmp(g->outputs[0].name, "p_y") == 0);
    printf("prefix: then-branch reads '%s' (want p_a)\n",
           then_attr && then_attr->g ? then_attr->g->nodes[0]->inputs[0] : "?");
    otter_graph_free(g);
}

/* A: x -> Relu(act) -> out.  B: in -> Neg(act) -> t -> Identity -> out. */
static otter_model *model_a(int64_t opset) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "A", opset));
    if (!m) return NULL;
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(unary(m->graph, "Relu", "act", "x", "out"));
    CHECK_OK(unary(m->graph, "Neg", "side", "x", "side_out"));
    CHECK_OK(otter_graph_add_output(m->graph, "out", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(otter_graph_add_output(m->graph, "side_out", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    return m;
}

static otter_model *model_b(int64_t opset, otter_dtype in_type) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "B", opset));
    if (!m) return NULL;
    CHECK_OK(otter_graph_add_input(m->graph, "in", in_type, 1, D3, NULL));
    CHECK_OK(unary(m->graph, "Neg", "act", "in", "t"));
    CHECK_OK(unary(m->graph, "Identity", "id", "t", "out"));
    CHECK_OK(otter_graph_add_output(m->graph, "out", in_type, 1, D3, NULL));
    return m;
}

static void test_merge(void) {
    otter_model *a = model_a(13), *b = model_b(14, OTTER_DTYPE_FLOAT), *m = NULL;
    if (!a || !b) return;
    otter_wire w = {"out", "in"};

    /* Without prefixes B's `out` clashes with A's. */
    CHECK_STATUS(otter_model_merge(&m, a, b, &w, 1, NULL), OTTER_ERR_INVALID);
    printf("merge clash: \"%s\"\n", otter_last_error());
    CHECK(m == NULL && strstr(otter_last_error(), "'out'") != NULL);

    otter_merge_options o = {.prefix_a = "a/", .prefix_b = "b/"};
    CHECK_OK(otter_model_merge(&m, a, b, &w, 1, &o));
    if (m) {
        const otter_graph *g = m->graph;
        printf("merge: %zu nodes, inputs [%s], outputs [%s], opset %lld, graph '%s'\n", g->n_nodes,
               g->n_inputs ? g->inputs[0].name : "", g->n_outputs ? g->outputs[0].name : "",
               (long long)otter_model_opset(m, ""), g->name);
        CHECK(g->n_nodes == 4 && g->n_inputs == 1 && strcmp(g->inputs[0].name, "a/x") == 0);
        CHECK(g->n_outputs == 1 && strcmp(g->outputs[0].name, "b/out") == 0);
        CHECK(otter_model_opset(m, "") == 14 && strcmp(g->name, "A_B") == 0);
        ptrdiff_t neg = otter_graph_find_node(g, "b/act");
        CHECK(neg >= 0 && strcmp(g->nodes[neg]->inputs[0], "a/out") == 0);
        CHECK(otter_graph_find_node(g, "a/act") >= 0);
        CHECK(otter_graph_find_value_info(g, "a/out") >= 0); /* the wired tensor keeps its type */
        /* Serializes and reloads. */
        void *buf = NULL;
        size_t size = 0;
        otter_model *back = NULL;
        CHECK_OK(otter_model_save_to_memory(m, &buf, &size));
        CHECK_OK(otter_model_load_from_memory(&back, buf, size, NULL));
        CHECK(back && back->graph->n_nodes == 4);
        otter_model_free(back);
        otter_free(buf);
        otter_model_free(m);
        m = NULL;
    }
    /* Inputs the caller gave are untouched. */
    CHECK(strcmp(a->graph->inputs[0].name, "x") == 0 && strcmp(b->graph->nodes[0]->inputs[0], "in") == 0);

    /* Keep A's unwired outputs. */
    o.keep_a_outputs = true;
    CHECK_OK(otter_model_merge(&m, a, b, &w, 1, &o));
    if (m) {
        printf("merge keep_a_outputs: outputs %zu (want 2: b/out, a/side_out)\n", m->graph->n_outputs);
        CHECK(m->graph->n_outputs == 2 && strcmp(m->graph->outputs[1].name, "a/side_out") == 0);
        otter_model_free(m);
        m = NULL;
    }

    /* Wrong names and types. */
    otter_wire bad = {"nope", "in"};
    CHECK_STATUS(otter_model_merge(&m, a, b, &bad, 1, &o), OTTER_ERR_NOT_FOUND);
    printf("merge unknown output: \"%s\"\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'nope'") != NULL);
    otter_wire bad2 = {"out", "nope"};
    CHECK_STATUS(otter_model_merge(&m, a, b, &bad2, 1, &o), OTTER_ERR_NOT_FOUND);
    CHECK(strstr(otter_last_error(), "'nope'") != NULL);
    otter_model *bi = model_b(14, OTTER_DTYPE_INT64);
    CHECK_STATUS(otter_model_merge(&m, a, bi, &w, 1, &o), OTTER_ERR_INVALID);
    printf("merge type mismatch: \"%s\"\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "float32[3]") != NULL && strstr(otter_last_error(), "int64[3]") != NULL);
    CHECK(m == NULL);
    otter_model_free(bi);

    /* Concat: side by side; the shared input `x` (same type) appears once. */
    otter_model *a2 = model_a(14);
    CHECK_OK(otter_model_concat(&m, a, a2, NULL, "two_"));
    if (m) {
        /* a2 is prefixed, so x is not shared: two inputs, four outputs. */
        printf("concat: %zu inputs, %zu outputs, %zu nodes (want 2, 4, 4)\n", m->graph->n_inputs, m->graph->n_outputs,
               m->graph->n_nodes);
        CHECK(m->graph->n_inputs == 2 && m->graph->n_outputs == 4 && m->graph->n_nodes == 4);
        CHECK(strcmp(m->graph->outputs[0].name, "out") == 0 && strcmp(m->graph->outputs[2].name, "two_out") == 0);
        otter_model_free(m);
        m = NULL;
    }
    CHECK_STATUS(otter_model_concat(&m, a, a2, NULL, NULL), OTTER_ERR_INVALID); /* `out` twice */
    otter_model *a3 = model_a(14);
    CHECK_OK(otter_graph_rename(a3->graph, "out", "out3"));
    CHECK_OK(otter_graph_rename(a3->graph, "side_out", "side3"));
    CHECK_OK(otter_model_concat(&m, a, a3, NULL, NULL));
    if (m) {
        printf("concat shared input: %zu inputs (want 1)\n", m->graph->n_inputs);
        CHECK(m->graph->n_inputs == 1 && m->graph->n_outputs == 4);
        otter_model_free(m);
        m = NULL;
    }
    otter_model_free(a3);
    otter_model_free(a2);
    otter_model_free(a);
    otter_model_free(b);
}

static void test_extract(void) {
    otter_model *m = NULL, *sub = NULL;
    CHECK_OK(otter_model_create(&m, "chain", 14));
    if (!m) return;
    otter_graph *g = m->graph;
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(init3(g, "w", 1, 2, 3));
    CHECK_OK(init3(g, "w_unused", 1, 2, 3));
    CHECK_OK(unary(g, "Relu", "r", "x", "r_out"));
    CHECK_OK(binary(g, "Mul", "mul", "r_out", "w", "m_out"));
    CHECK_OK(unary(g, "Neg", "neg", "m_out", "y"));
    CHECK_OK(binary(g, "Add", "other", "x", "w_unused", "y2"));
    otter_type t;
    otter_type_init_tensor(&t, OTTER_DTYPE_FLOAT, 1, D3);
    CHECK_OK(otter_graph_add_value_info(g, "r_out", &t));
    CHECK_OK(otter_graph_add_value_info(g, "m_out", &t));
    otter_type_clear(&t);
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 1, D3, NULL));
    CHECK_OK(otter_graph_add_output(g, "y2", OTTER_DTYPE_FLOAT, 1, D3, NULL));

    const char *ins[] = {"r_out"}, *outs[] = {"m_out"};
    CHECK_OK(otter_model_extract(&sub, m, 1, ins, 1, outs));
    if (sub) {
        const otter_graph *s = sub->graph;
        printf("extract r_out -> m_out: %zu nodes (want 1: mul), %zu initializers (want 1: w), input typed %d\n",
               s->n_nodes, s->n_initializers, (int)(s->n_inputs == 1 && s->inputs[0].has_type));
        CHECK(s->n_nodes == 1 && strcmp(s->nodes[0]->name, "mul") == 0);
        CHECK(s->n_initializers == 1 && strcmp(s->initializers[0]->name, "w") == 0);
        CHECK(s->n_inputs == 1 && s->inputs[0].has_type && s->inputs[0].type.rank == 1);
        CHECK(s->n_outputs == 1 && strcmp(s->outputs[0].name, "m_out") == 0 && s->outputs[0].has_type);
        CHECK(s->n_value_info == 0);
        otter_model_free(sub);
        sub = NULL;
    }
    const char *outs2[] = {"y"};
    CHECK_OK(otter_model_extract(&sub, m, 1, (const char *const[]){"x"}, 1, outs2));
    if (sub) {
        printf("extract x -> y: %zu nodes (want 3)\n", sub->graph->n_nodes);
        CHECK(sub->graph->n_nodes == 3 && sub->graph->n_value_info == 2);
        otter_model_free(sub);
        sub = NULL;
    }
    /* y needs x, which is not among the inputs. */
    CHECK_STATUS(otter_model_extract(&sub, m, 1, (const char *const[]){"w"}, 1, outs2), OTTER_ERR_INVALID);
    printf("extract unreachable: \"%s\"\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "'y'") != NULL && strstr(otter_last_error(), "'x'") != NULL);
    CHECK_STATUS(otter_model_extract(&sub, m, 1, ins, 1, (const char *const[]){"nope"}), OTTER_ERR_NOT_FOUND);
    CHECK(strstr(otter_last_error(), "'nope'") != NULL);
    CHECK(sub == NULL && m->graph->n_nodes == 4);
    otter_model_free(m);
}

static void test_dtypes_and_text(void) {
    size_t n = 0;
    const otter_dtype *list = otter_dtype_list(&n);
    int distinct = 1, has_float = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(otter_dtype_name(list[i]), "float32") == 0) has_float = 1;
        for (size_t k = 0; k < i; k++) distinct &= strcmp(otter_dtype_name(list[i]), otter_dtype_name(list[k])) != 0;
        if (list[i] == OTTER_DTYPE_UNDEFINED) distinct = 0;
    }
    printf("dtype list: %zu types (want 26), distinct %d, has float32 %d\n", n, distinct, has_float);
    CHECK(n == 26 && distinct && has_float);

    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "txt", 14));
    if (!m) return;
    const int64_t d2[2] = {-1, 4};
    const char *params[2] = {"batch", NULL};
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 2, d2, params));
    CHECK_OK(init3(m->graph, "c", 1.5f, 2, 3));
    otter_node *nd = NULL;
    const char *ins[2] = {"x", "c"}, *y = "y";
    CHECK_OK(otter_node_create(&nd, "Gemm", "fc", 2, ins, 1, &y));
    CHECK_OK(otter_node_set_attr_int(nd, "transB", 1));
    CHECK_OK(otter_node_set_attr_float(nd, "alpha", 0.5f));
    CHECK_OK(otter_graph_add_node(m->graph, nd));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_FLOAT, 2, d2, params));
    char *text = NULL, *dot = NULL;
    CHECK_OK(otter_model_to_text(m, &text));
    if (text) {
        printf("text:\n%s", text);
        CHECK(strstr(text, "%y = Gemm[transB = 1, alpha = 0.5](%x, %c)    # fc") != NULL);
        CHECK(strstr(text, "%x: float32[batch,4]") != NULL);
        CHECK(strstr(text, "%c: float32[3] = [1.5, 2, 3]") != NULL);
        CHECK(strstr(text, "opset_import: ai.onnx 14") != NULL);
    }
    CHECK_OK(otter_graph_to_dot(m->graph, NULL, &dot));
    if (dot) {
        CHECK(strncmp(dot, "digraph \"txt\" {", 15) == 0);
        CHECK(strstr(dot, "label=\"Gemm\\nfc\"") != NULL);
        CHECK(strstr(dot, "\"in:x\" -> \"n0\"") != NULL && strstr(dot, "\"init:c\" -> \"n0\"") != NULL);
        CHECK(strstr(dot, "\"n0\" -> \"out:y\"") != NULL);
        CHECK(strstr(dot, "label=\"y\\nfloat32[batch,4]\"") != NULL);
        printf("dot: %zu bytes, ends with '}': %d\n", strlen(dot), dot[strlen(dot) - 2] == '}');
    }
    otter_dot_options o = {.rankdir = "sideways"};
    char *bad = NULL;
    CHECK_STATUS(otter_graph_to_dot(m->graph, &o, &bad), OTTER_ERR_ARGUMENT);
    otter_free(text);
    otter_free(dot);
    otter_model_free(m);
}

/* ---- allocation failures: fail the Nth allocation for N = 1, 2, ... and expect a clean error,
 * no crash and no leak (live block count back to where it was). ---- */

#include <stdlib.h>

typedef otter_status (*tool_fn)(otter_model *m, const otter_model *b, otter_model **out);

static otter_status run_merge(otter_model *m, const otter_model *b, otter_model **out) {
    otter_wire w = {"out", "in"};
    otter_merge_options o = {.prefix_a = "a/", .prefix_b = "b/", .keep_a_outputs = true};
    return otter_model_merge(out, m, b, &w, 1, &o);
}
static otter_status run_concat(otter_model *m, const otter_model *b, otter_model **out) {
    return otter_model_concat(out, m, b, "p", "q");
}
static otter_status run_extract(otter_model *m, const otter_model *b, otter_model **out) {
    const char *ins[] = {"x"}, *outs[] = {"out"};
    return otter_model_extract(out, m, 1, ins, 1, outs);
}
static otter_status run_clean(otter_model *m, const otter_model *b, otter_model **out) {
    *out = NULL;
    return otter_graph_clean(m->graph, NULL);
}
static otter_status run_text(otter_model *m, const otter_model *b, otter_model **out) {
    char *t = NULL, *d = NULL;
    *out = NULL;
    otter_status s = otter_model_to_text(m, &t);
    if (s == OTTER_OK) s = otter_graph_to_dot(m->graph, NULL, &d);
    otter_free(t);
    otter_free(d);
    return s;
}

static void test_alloc_failures(void) {
    const struct {
        const char *name;
        tool_fn fn;
    } tools[] = {{"merge", run_merge},
                 {"concat", run_concat},
                 {"extract", run_extract},
                 {"clean", run_clean},
                 {"text+dot", run_text}};
    otter_set_allocator(&tu_counting_allocator);
    for (size_t t = 0; t < sizeof tools / sizeof tools[0]; t++) {
        long n = 1, bad = 0, leaks = 0;
        for (;; n++) {
            otter_model *m = model_a(14), *b = model_b(14, OTTER_DTYPE_FLOAT), *out = NULL;
            if (!m || !b) break;
            tu_alloc_fail_at(n);
            otter_status s = tools[t].fn(m, b, &out);
            bool failed_alloc = tu_alloc_calls >= n;
            tu_alloc_fail_at(0);
            otter_model_free(out);
            otter_model_free(m);
            otter_model_free(b);
            if (s != OTTER_OK && s != OTTER_ERR_NOMEM) bad++;
            if (s == OTTER_OK && failed_alloc) bad++; /* a failed allocation went unreported */
            if (tu_alloc_live != 0) leaks++;
            tu_alloc_live = 0;
            if (!failed_alloc) break; /* ran to the end without reaching allocation n */
        }
        printf("alloc failures: %s: failed allocation 1..%ld, %ld wrong statuses, %ld runs leaked\n", tools[t].name,
               n - 1, bad, leaks);
        CHECK(bad == 0 && leaks == 0 && n > 1);
    }
    otter_set_allocator(NULL);
}

int main(void) {
    test_clean();
    test_cycle();
    test_subgraph_scope();
    test_merge();
    test_extract();
    test_dtypes_and_text();
    test_alloc_failures();
    return tu_finish("test_edit");
}
