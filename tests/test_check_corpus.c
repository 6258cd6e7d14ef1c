/* The checker over ONNX 1.23's backend node models (../shared/onnx-1.23/backend/node, IR 3-13,
 * opsets to 28), as `otter check` runs it (full_check).
 *
 * Every model must be valid except those listed in tests/check_corpus_known.txt, each with its
 * reason; a listed model that passes now is printed so the list can shrink. Then the refusal side
 * on real IR 10-13 models: for one model of each IR version, the first node is broken three ways
 * (unknown operator, unknown attribute, no inputs) and the ir_version raised to 14, and each must
 * be refused with a message naming the node and the rule. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "otter/check.h"
#include "otter/io.h"
#include "testutil.h"

#define SUITE "/../shared/onnx-1.23/backend/node"

static char **known;
static size_t n_known;

static void read_known(void) {
    size_t size = 0;
    char *text = tu_read_file(tu_src_path("tests/check_corpus_known.txt"), &size);
    CHECK(text != NULL);
    if (!text) return;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == '\0') continue;
        char *end = strpbrk(line, " \t");
        if (end) *end = '\0';
        known = realloc(known, (n_known + 1) * sizeof *known);
        known[n_known++] = strdup(line);
    }
    free(text);
}

static bool is_known(const char *name) {
    for (size_t i = 0; i < n_known; i++)
        if (strcmp(known[i], name) == 0) return true;
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* First problem of a check (full_check) as text; NULL when valid. The caller frees it. */
static char *first_problem(const otter_model *m) {
    otter_check_report *r = NULL;
    if (otter_check_report_create(&r) != OTTER_OK) return strdup("out of memory");
    otter_check_options o = {.full_check = true, .report = r};
    otter_status s = otter_model_check(m, &o);
    const char *msg = otter_check_report_message(r, 0);
    char *out = s == OTTER_OK ? NULL : strdup(msg ? msg : otter_last_error());
    otter_check_report_free(r);
    return out;
}

/* One model per IR version 10..13 with a default-domain first node, for the refusal cases. */
static char *sample[14];

static void check_corpus(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    size_t valid = 0, listed_failing = 0, unexpected = 0, listed_passing = 0, by_ir_valid[14] = {0}, by_ir[14] = {0};
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/model.onnx", dir, names[i]);
        otter_model *m = NULL;
        char *problem = NULL;
        if (otter_model_load(&m, path) != OTTER_OK)
            problem = strdup(otter_last_error());
        else
            problem = first_problem(m);
        int ir = m && m->ir_version >= 0 && m->ir_version < 14 ? (int)m->ir_version : 0;
        by_ir[ir]++;
        if (!problem) {
            valid++;
            by_ir_valid[ir]++;
            if (is_known(names[i])) {
                printf("listed but valid now (remove it from tests/check_corpus_known.txt): %s\n", names[i]);
                listed_passing++;
            }
            if (ir >= 10 && !sample[ir] && m->graph->n_nodes > 0 &&
                (!m->graph->nodes[0]->domain || !m->graph->nodes[0]->domain[0]) && m->graph->nodes[0]->n_inputs > 0)
                sample[ir] = strdup(path);
        } else if (is_known(names[i])) {
            listed_failing++;
        } else {
            printf("not valid: %s: %s\n", names[i], problem);
            unexpected++;
        }
        free(problem);
        otter_model_free(m);
        free(names[i]);
    }
    free(names);
    printf(
        "ONNX 1.23 node models: %zu, valid %zu; listed failures %zu (%zu of them valid now); unlisted failures %zu\n",
        n, valid, listed_failing + listed_passing, listed_passing, unexpected);
    for (int ir = 0; ir < 14; ir++)
        if (by_ir[ir]) printf("  IR %2d: %4zu of %4zu valid\n", ir, by_ir_valid[ir], by_ir[ir]);
    CHECK(n >= 1802);
    CHECK(unexpected == 0);
    CHECK(listed_passing == 0); /* the list is enforced both ways: a stale entry hides a regression */
}

/* Breaks a copy of the model at path with `mutate` and expects the first problem to contain want. */
static void check_refused(const char *path, const char *what, void (*mutate)(otter_model *), const char *want) {
    otter_model *m = NULL;
    CHECK_OK(otter_model_load(&m, path));
    if (!m) return;
    mutate(m);
    char *problem = first_problem(m);
    const char *base = strstr(path, "/node/");
    printf("  %-28s %-40s -> %s\n", what, base ? base + 6 : path, problem ? problem : "(accepted)");
    CHECK(problem && strstr(problem, want) != NULL);
    free(problem);
    otter_model_free(m);
}

static char want_buf[256];

static void op_unknown(otter_model *m) {
    otter_node *n = m->graph->nodes[0];
    free(n->op_type);
    n->op_type = strdup("NoSuchOp");
}
static void attr_unknown(otter_model *m) { otter_node_set_attr_int(m->graph->nodes[0], "bogus_attribute", 1); }
static void no_inputs(otter_model *m) {
    otter_node *n = m->graph->nodes[0];
    for (size_t i = 0; i < n->n_inputs; i++) free(n->inputs[i]);
    n->n_inputs = 0;
}
static void ir_14(otter_model *m) { m->ir_version = 14; }

static void check_refusals(void) {
    printf("refusals on IR 10-13 models:\n");
    for (int ir = 10; ir <= 13; ir++) {
        CHECK(sample[ir] != NULL);
        if (!sample[ir]) continue;
        otter_model *m = NULL;
        CHECK_OK(otter_model_load(&m, sample[ir]));
        if (!m) continue;
        const otter_node *n = m->graph->nodes[0];
        char label[160];
        if (n->name && n->name[0])
            snprintf(label, sizeof label, "node '%s' (%s): ", n->name, n->op_type);
        else
            snprintf(label, sizeof label, "node #0 (%s): ", n->op_type);
        snprintf(want_buf, sizeof want_buf, "%sunknown attribute 'bogus_attribute' for %s-", label, n->op_type);
        check_refused(sample[ir], "unknown attribute", attr_unknown, want_buf);
        snprintf(want_buf, sizeof want_buf, "%shas 0 inputs, expected", label);
        if (n->n_inputs > 0) check_refused(sample[ir], "no inputs", no_inputs, want_buf);
        snprintf(label, sizeof label, "(NoSuchOp): no operator NoSuchOp in domain ai.onnx at opset %lld",
                 (long long)otter_model_opset(m, ""));
        check_refused(sample[ir], "unknown operator", op_unknown, label);
        check_refused(sample[ir], "ir_version 14", ir_14, "model ir_version 14 is newer than otter knows (IR 13");
        otter_model_free(m);
        free(sample[ir]);
    }
}

int main(void) {
    read_known();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s", OTTER_SOURCE_DIR, SUITE);
    check_corpus(dir);
    check_refusals();
    for (size_t i = 0; i < n_known; i++) free(known[i]);
    free(known);
    return tu_finish("test_check_corpus");
}
