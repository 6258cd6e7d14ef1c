#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int tu_failures;
int tu_checks;

int tu_finish(const char *name) {
    printf("%s: %d checks, %d failed\n", name, tu_checks, tu_failures);
    if (tu_checks == 0) fprintf(stderr, "%s: no check ran\n", name);
    return tu_failures || tu_checks == 0 ? 1 : 0;
}

double tu_worse(double worst, double err) {
    if (isnan(worst) || isnan(err)) return NAN;
    return err > worst ? err : worst;
}

double tu_max_abs_diff(const float *got, const float *want, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = tu_worse(worst, fabs((double)got[i] - (double)want[i]));
    return worst;
}

const char *tu_src_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", OTTER_SOURCE_DIR, rel);
    return buf;
}

const char *tu_tmp_path(const char *name) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tests/tmp", OTTER_BINARY_DIR);
    mkdir(buf, 0755);
    snprintf(buf, sizeof buf, "%s/tests/tmp/%s", OTTER_BINARY_DIR, name);
    return buf;
}

void *tu_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    unsigned char *b = len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
    if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

long tu_alloc_live, tu_alloc_calls;
size_t tu_alloc_biggest;
static long tu_alloc_fail;

void tu_alloc_fail_at(long n) {
    tu_alloc_calls = 0;
    tu_alloc_fail = n;
}

static void *tu_malloc(size_t n, void *u) {
    (void)u;
    if (n > tu_alloc_biggest) tu_alloc_biggest = n;
    if (++tu_alloc_calls == tu_alloc_fail) return NULL;
    void *p = malloc(n);
    if (p) tu_alloc_live++;
    return p;
}
static void *tu_realloc(void *p, size_t n, void *u) {
    (void)u;
    if (n > tu_alloc_biggest) tu_alloc_biggest = n;
    if (++tu_alloc_calls == tu_alloc_fail) return NULL;
    void *q = realloc(p, n);
    if (q && !p) tu_alloc_live++;
    return q;
}
static void tu_free(void *p, void *u) {
    (void)u;
    if (p) tu_alloc_live--;
    free(p);
}
const otter_allocator tu_counting_allocator = {tu_malloc, tu_realloc, tu_free, NULL};

const char *tu_type_text(const otter_type *t, char *buf, size_t size) {
    char *text = NULL;
    if (otter_type_to_text(t, &text) != OTTER_OK) text = NULL;
    snprintf(buf, size, "%s", text ? text : "(out of memory)");
    otter_free(text);
    return buf;
}

otter_node *tu_add_node(otter_graph *g, const char *op, const char *name, const char *ins, const char *outs) {
    char buf[2][256];
    const char *in[16], *out[16];
    size_t ni = 0, no = 0;
    snprintf(buf[0], sizeof buf[0], "%s", ins);
    snprintf(buf[1], sizeof buf[1], "%s", outs);
    for (char *t = strtok(buf[0], " "); t && ni < 16; t = strtok(NULL, " ")) in[ni++] = strcmp(t, "-") == 0 ? "" : t;
    for (char *t = strtok(buf[1], " "); t && no < 16; t = strtok(NULL, " ")) out[no++] = t;
    otter_node *n = NULL;
    CHECK_OK(otter_node_create(&n, op, name, ni, in, no, out));
    CHECK_OK(otter_graph_add_node(g, n));
    return n;
}
