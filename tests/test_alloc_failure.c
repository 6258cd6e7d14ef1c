/* Fail the Nth allocation for N = 1, 2, ... while loading, cloning and saving real models: every
 * run must end in OTTER_OK or OTTER_ERR_NOMEM, and leave no allocation behind. The out-of-memory
 * message names the source file relative to the project, never the build machine's path. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* One full exercise of the I/O and IR paths; returns the first non-OK status. */
static otter_status exercise(const void *data, size_t size) {
    otter_model *m = NULL, *c = NULL;
    void *buf = NULL;
    size_t n;
    otter_status s = otter_model_load_from_memory(&m, data, size, NULL);
    if (s == OTTER_OK) s = otter_model_clone(&c, m);
    if (s == OTTER_OK) s = otter_model_save_to_memory(c, &buf, &n);
    if (s == OTTER_OK) s = otter_graph_rename(c->graph, c->graph->outputs[0].name, "renamed_output");
    otter_free(buf);
    otter_model_free(c);
    otter_model_free(m);
    return s;
}

static void run(const char *rel) {
    char path[4096];
    snprintf(path, sizeof path, "/usr/share/libonnx-testdata/data/%s/model.onnx", rel);
    size_t size;
    char *data = tu_read_file(path, &size);
    CHECK(data != NULL);
    if (!data) return;

    otter_set_allocator(&tu_counting_allocator);
    long n;
    int nomem = 0, other = 0, leaks = 0, build_paths = 0;
    for (n = 1;; n++) {
        tu_alloc_fail_at(n);
        tu_alloc_live = 0;
        otter_status s = exercise(data, size);
        if (tu_alloc_live != 0) leaks++;
        if (s == OTTER_OK) break;
        if (s == OTTER_ERR_NOMEM) {
            nomem++;
            if (strstr(otter_last_error(), " at /")) build_paths++;
        } else {
            other++;
            fprintf(stderr, "%s: failing allocation %ld gave %s: %s\n", rel, n, otter_status_name(s),
                    otter_last_error());
        }
    }
    otter_set_allocator(NULL);
    tu_alloc_fail_at(0);
    free(data);
    printf("%s: %ld allocation points tried, %d clean NOMEM, %d other errors, %d leaking runs\n", rel, n, nomem, other,
           leaks);
    CHECK(other == 0);
    CHECK(leaks == 0);
    CHECK(nomem == n - 1);
    CHECK(build_paths == 0);
}

int main(void) {
    run("node/test_conv_with_strides_padding");
    run("node/test_if_seq");
    run("node/test_loop11");
    run("node/test_constant");
    return tu_finish("test_alloc_failure");
}
