/* The operator registry (src/ops/table.c) against itself and its lookups.
 *
 * Fails when the table is out of order, when an operator has a kernel but no shape rule or a shape
 * rule but no kernel without a reason in its row (or keeps a reason once it has both), when a
 * gradient rule has no kernel to run the forward node or no differentiable input, and when a
 * lookup (runtime, shape inference, gradient builder, otter_ops_get) disagrees with the table, and
 * when a default-domain kernel version up to the schema table's opset 17 starts where ONNX's
 * operator did not change (a since-version typo).
 * Every gradient rule's finite-difference case is checked by tests/test_grad.c, which walks the
 * registry for rules it has no case for. */
#include <string.h>

#include "check/schema.h"
#include "ops/registry.h"
#include "testutil.h"

static int compare_rows(const ot_op_entry *a, const ot_op_entry *b) {
    int c = strcmp(a->domain, b->domain);
    return c ? c : strcmp(a->op_type, b->op_type);
}

static void check_order(void) {
    size_t misplaced = 0;
    for (size_t i = 1; i < ot_op_table_count; i++)
        if (compare_rows(&ot_op_table[i - 1], &ot_op_table[i]) >= 0) {
            fprintf(stderr, "row %zu (%s %s) is not after row %zu (%s %s): the table must be sorted, no duplicates\n",
                    i, ot_op_table[i].domain, ot_op_table[i].op_type, i - 1, ot_op_table[i - 1].domain,
                    ot_op_table[i - 1].op_type);
            misplaced++;
        }
    CHECK(misplaced == 0);
    CHECK(ot_op_table_count > 200);
    printf("%zu rows in (domain, op_type) order: %zu misplaced\n", ot_op_table_count, misplaced);
}

/* Kernel versions ascending, each found by the runtime's lookup at its own opset and not before. */
static size_t check_kernels(const ot_op_entry *e) {
    size_t bad = 0, n = 0;
    for (const ot_op_def *k = e->kernels; k && k->run; k++, n++) {
        if (n > 0 && k[-1].since_version >= k->since_version) bad++;
        if (ot_op_lookup(e->domain, e->op_type, k->since_version) != k) bad++;
        const ot_op_def *before = ot_op_lookup(e->domain, e->op_type, k->since_version - 1);
        if (before != (n > 0 ? &k[-1] : NULL)) bad++;
    }
    if (e->kernels && n == 0) bad++;
    if (n > OTTER_OP_MAX_VERSIONS) bad++; /* otter_ops_get would cut the list */
    if (bad)
        fprintf(stderr, "%s %s: kernel versions out of order or not found by ot_op_lookup\n", e->domain, e->op_type);
    return bad;
}

static void check_rows(void) {
    size_t kernel_no_shape = 0, shape_no_kernel = 0, unexplained = 0, stale = 0, empty = 0, bad_grad = 0,
           bad_kernels = 0, bad_lookup = 0;
    for (size_t i = 0; i < ot_op_table_count; i++) {
        const ot_op_entry *e = &ot_op_table[i];
        bool kernel = e->kernels != NULL, shape = e->infer != NULL;
        if (!kernel && !shape && !e->grad) empty++;
        if (kernel != shape) {
            kernel_no_shape += kernel;
            shape_no_kernel += shape;
            if (!e->gap || !e->gap[0]) {
                fprintf(stderr, "%s %s has a %s but no %s, and its row gives no reason\n", e->domain, e->op_type,
                        kernel ? "kernel" : "shape rule", kernel ? "shape rule" : "kernel");
                unexplained++;
            }
        } else if (e->gap) {
            fprintf(stderr, "%s %s: the reason '%s' is stale (it has both a kernel and a shape rule)\n", e->domain,
                    e->op_type, e->gap);
            stale++;
        }
        if (e->grad && (!kernel || e->diff_inputs == 0)) {
            fprintf(stderr, "%s %s: a gradient rule needs a forward kernel and a differentiable input\n", e->domain,
                    e->op_type);
            bad_grad++;
        }
        bad_kernels += check_kernels(e);
        /* Every lookup returns this row's functions, default domain by any of its names. */
        const char *aliases[] = {e->domain, e->domain[0] ? e->domain : "ai.onnx", e->domain[0] ? e->domain : NULL};
        for (size_t a = 0; a < 3; a++) {
            if (ot_op_find(aliases[a], e->op_type) != e) bad_lookup++;
            if (ot_op_infer_rule(aliases[a], e->op_type) != e->infer) bad_lookup++;
            if (ot_op_grad_rule(aliases[a], e->op_type) != (e->grad ? e : NULL)) bad_lookup++;
            if ((otter_has_gradient_rule(aliases[a] ? aliases[a] : "", e->op_type) != 0) != (e->grad != NULL))
                bad_lookup++;
        }
    }
    CHECK(empty == 0);
    CHECK(unexplained == 0);
    CHECK(stale == 0);
    CHECK(bad_grad == 0);
    CHECK(bad_kernels == 0);
    CHECK(bad_lookup == 0);
    printf("kernel without shape rule: %zu, shape rule without kernel: %zu (each with its reason; %zu without), "
           "stale reasons: %zu\n",
           kernel_no_shape, shape_no_kernel, unexplained, stale);
    printf("empty rows: %zu, gradient rules without kernel or input: %zu, kernel version errors: %zu, lookup "
           "mismatches: %zu\n",
           empty, bad_grad, bad_kernels, bad_lookup);
    CHECK(ot_op_find("", "NoSuchOp") == NULL);
    CHECK(ot_op_find("com.example", "Conv") == NULL);
    CHECK(ot_op_lookup("", "Conv", 0) == NULL);
    CHECK(ot_op_find(NULL, NULL) == NULL);
}

/* otter_ops_get reports each row as the table holds it. */
static void check_public_api(void) {
    CHECK(otter_ops_count() == ot_op_table_count);
    size_t mismatches = 0;
    for (size_t i = 0; i < otter_ops_count(); i++) {
        const ot_op_entry *e = &ot_op_table[i];
        otter_op_info op;
        CHECK_OK(otter_ops_get(i, &op));
        /* since_versions: ascending, starting at the oldest kernel version, listing every kernel version */
        for (size_t v = 1; v < op.n_since_versions; v++)
            if (op.since_versions[v] <= op.since_versions[v - 1]) mismatches++;
        for (const ot_op_def *k = e->kernels; k && k->run; k++) {
            bool listed = false;
            for (size_t v = 0; v < op.n_since_versions; v++) listed |= op.since_versions[v] == k->since_version;
            if (!listed) mismatches++;
        }
        if (e->kernels && e->kernels[0].run &&
            (op.n_since_versions == 0 || op.since_versions[0] != e->kernels[0].since_version))
            mismatches++;
        if (strcmp(op.domain, e->domain[0] ? e->domain : "ai.onnx") != 0 || strcmp(op.op_type, e->op_type) != 0 ||
            op.kernel != (e->kernels != NULL) || op.shape_inference != (e->infer != NULL) ||
            op.gradient != (e->grad != NULL || e->grad_by_unrolling) ||
            (e->gap ? op.note != e->gap : (op.note != NULL) != e->grad_by_unrolling))
            mismatches++;
    }
    CHECK(mismatches == 0);
    otter_op_info op;
    CHECK_STATUS(otter_ops_get(otter_ops_count(), &op), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_ops_get(0, NULL), OTTER_ERR_ARGUMENT);
    printf("otter_ops_get: %zu operators, %zu mismatches with the table\n", otter_ops_count(), mismatches);
}

/* Each ai.onnx kernel version up to opset 17 starts at one of the op's ONNX since-versions (ORT's
 * legacy default-domain training ops have no ONNX schema and are skipped). */
static void check_schema_versions(void) {
    size_t checked = 0, no_schema = 0, typos = 0;
    for (size_t i = 0; i < ot_op_table_count; i++) {
        const ot_op_entry *e = &ot_op_table[i];
        if (e->domain[0] || !e->kernels) continue;
        size_t n = 0;
        const ot_schema *v = ot_schema_versions("", e->op_type, &n);
        if (!v) {
            no_schema++;
            continue;
        }
        for (const ot_op_def *k = e->kernels; k->run; k++) {
            if (k->since_version > ot_schema_domain_max_opset("")) continue;
            bool found = false;
            for (size_t j = 0; j < n; j++) found = found || v[j].since_version == k->since_version;
            if (!found) {
                fprintf(stderr, "%s kernel since %d: ONNX has no %s version %d\n", e->op_type, k->since_version,
                        e->op_type, k->since_version);
                typos++;
            }
            checked++;
        }
    }
    CHECK(checked > 150 && typos == 0);
    printf("ai.onnx kernel versions against the schemas: %zu checked, %zu not an ONNX since-version, %zu ops "
           "without a schema\n",
           checked, typos, no_schema);
}

int main(void) {
    check_order();
    check_rows();
    check_public_api();
    check_schema_versions();
    return tu_finish("test_registry");
}
