/* Kernels return the status ot_ctx_output set, not OTTER_ERR_NOMEM for every failed output: an
 * output whose size overflows is INVALID, with the runtime's message naming the node. */
#include <string.h>

#include "testutil.h"

/* One node `op` reading graph inputs X (float [2, 3]) and S (int64 [k]) into Y. */
static void expect_status(const char *op, size_t n_in, int64_t k, const int64_t *s_values, otter_status want,
                          const char *want_msg) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 17));
    otter_graph *g = m->graph;
    int64_t xd[2] = {2, 3};
    CHECK_OK(otter_graph_add_input(g, "X", OTTER_DTYPE_FLOAT, 2, xd, NULL));
    CHECK_OK(otter_graph_add_input(g, "S", OTTER_DTYPE_INT64, 1, &k, NULL));
    CHECK_OK(otter_graph_add_output(g, "Y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    const char *ins2[2] = {"X", "S"}, *ins1[1] = {"S"}, *outs[1] = {"Y"};
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, op, "n1", n_in, n_in == 2 ? ins2 : ins1, 1, outs));
    CHECK_OK(otter_graph_add_node(g, n));
    otter_session *s = NULL;
    otter_session_options o = {.n_threads = 1};
    CHECK_OK(otter_session_create(&s, m, &o));
    float x[6] = {0};
    otter_tensor *xt = NULL, *st = NULL, *y = NULL;
    CHECK_OK(otter_tensor_from_data(&xt, "X", OTTER_DTYPE_FLOAT, 2, xd, x));
    CHECK_OK(otter_tensor_from_data(&st, "S", OTTER_DTYPE_INT64, 1, &k, s_values));
    const otter_tensor *in[2] = {xt, st};
    const char *names[2] = {"X", "S"};
    otter_status got = s ? otter_session_run(s, 2, names, in, 1, NULL, &y) : OTTER_ERR_INVALID;
    const char *msg = otter_last_error();
    printf("%-16s status %s (expected %s): %s\n", op, otter_status_name(got), otter_status_name(want), msg);
    CHECK(got == want);
    CHECK(strstr(msg, want_msg) != NULL && strstr(msg, "n1") != NULL);
    otter_tensor_free(y);
    otter_tensor_free(st);
    otter_tensor_free(xt);
    otter_session_free(s);
    otter_model_free(m);
}

int main(void) {
    const int64_t huge[2] = {INT64_C(1) << 31, INT64_C(1) << 31};
    expect_status("ConstantOfShape", 1, 2, huge, OTTER_ERR_INVALID, "size overflows");
    expect_status("Tile", 2, 2, huge, OTTER_ERR_INVALID, "size overflows");
    return tu_finish("test_kernel_status");
}
