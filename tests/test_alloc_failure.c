/* Fail the Nth allocation for N = 1, 2, ... while loading, cloning and saving real models: every
 * run must end in OTTER_OK or OTTER_ERR_NOMEM, and leave no allocation behind. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static long g_live, g_count, g_fail_at;

static void *t_malloc(size_t n, void *u) {
    (void)u;
    if (g_fail_at && ++g_count == g_fail_at) return NULL;
    void *p = malloc(n);
    if (p) g_live++;
    return p;
}
static void *t_realloc(void *p, size_t n, void *u) {
    (void)u;
    if (g_fail_at && ++g_count == g_fail_at) return NULL;
    void *q = realloc(p, n);
    if (q && !p) g_live++;
    return q;
}
static void t_free(void *p, void *u) {
    (void)u;
    if (p) g_live--;
    free(p);
}

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
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    static char data[1 << 20];
    size_t size = fread(data, 1, sizeof data, f);
    fclose(f);

    otter_allocator a = {t_malloc, t_realloc, t_free, NULL};
    otter_set_allocator(&a);
    long n;
    int nomem = 0, other = 0, leaks = 0;
    for (n = 1;; n++) {
        g_count = 0;
        g_fail_at = n;
        g_live = 0;
        otter_status s = exercise(data, size);
        if (g_live != 0) leaks++;
        if (s == OTTER_OK) break;
        if (s == OTTER_ERR_NOMEM)
            nomem++;
        else {
            other++;
            fprintf(stderr, "%s: failing allocation %ld gave %s: %s\n", rel, n, otter_status_name(s),
                    otter_last_error());
        }
    }
    otter_set_allocator(NULL);
    printf("%s: %ld allocation points tried, %d clean NOMEM, %d other errors, %d leaking runs\n", rel, n, nomem, other,
           leaks);
    CHECK(other == 0);
    CHECK(leaks == 0);
    CHECK(nomem == n - 1);
}

int main(void) {
    run("node/test_conv_with_strides_padding");
    run("node/test_if_seq");
    run("node/test_loop11");
    run("node/test_constant");
    return tu_finish("test_alloc_failure");
}
