/* Lookups over the operator registry (table.c). */
#include "ops/registry.h"

#include <stdint.h>
#include <string.h>

#include "check/schema.h"
#include "core/core.h"
#include "otter/ops.h"

static const char *canonical_domain(const char *domain) {
    return !domain || strcmp(domain, "ai.onnx") == 0 ? "" : domain;
}

/* Binary search: the table is sorted by (domain, op_type), which tests/test_registry.c checks. */
const ot_op_entry *ot_op_find(const char *domain, const char *op_type) {
    if (!op_type) return NULL;
    domain = canonical_domain(domain);
    size_t lo = 0, hi = ot_op_table_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ot_op_entry *e = &ot_op_table[mid];
        int c = strcmp(e->domain, domain);
        if (c == 0) c = strcmp(e->op_type, op_type);
        if (c == 0) return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const ot_op_def *ot_op_lookup(const char *domain, const char *op_type, int64_t opset) {
    const ot_op_entry *e = ot_op_find(domain, op_type);
    const ot_op_def *best = NULL;
    for (const ot_op_def *k = e ? e->kernels : NULL; k && k->run && k->since_version <= opset; k++) best = k;
    return best;
}

ot_infer_fn ot_op_infer_rule(const char *domain, const char *op_type) {
    const ot_op_entry *e = ot_op_find(domain, op_type);
    return e ? e->infer : NULL;
}

const ot_op_entry *ot_op_grad_rule(const char *domain, const char *op_type) {
    const ot_op_entry *e = ot_op_find(domain, op_type);
    return e && e->grad ? e : NULL;
}

/* ---- public API (otter/ops.h) ------------------------------------------------------------------ */

size_t otter_ops_count(void) { return ot_op_table_count; }

otter_status otter_ops_get(size_t index, otter_op_info *out) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_ops_get: out is NULL");
    if (index >= ot_op_table_count)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_ops_get: index %zu is beyond the %zu operators", index,
                        ot_op_table_count);
    const ot_op_entry *e = &ot_op_table[index];
    *out = (otter_op_info){.domain = e->domain[0] ? e->domain : "ai.onnx",
                           .op_type = e->op_type,
                           .kernel = e->kernels != NULL,
                           .shape_inference = e->infer != NULL,
                           .gradient = e->grad != NULL || e->grad_by_unrolling,
                           .note = e->gap ? e->gap
                                   : e->grad_by_unrolling
                                       ? "gradient by unrolling: the trip count must be known when artifacts are made"
                                       : NULL};
    /* The versions a user looks up: ONNX's since-versions of the operator from the oldest one a
     * kernel runs (all of them without a kernel), merged with the kernels' own (an op without a
     * schema has only those). Both lists are ascending. */
    size_t n_schema = 0, i = 0;
    const ot_schema *v = ot_schema_versions(e->domain, e->op_type, &n_schema);
    const ot_op_def *k = e->kernels;
    int first = k && k->run ? k->since_version : 0;
    while (i < n_schema && v[i].since_version < first) i++;
    while ((i < n_schema || (k && k->run)) && out->n_since_versions < OTTER_OP_MAX_VERSIONS) {
        int sv = i < n_schema ? v[i].since_version : INT32_MAX;
        int kv = k && k->run ? k->since_version : INT32_MAX;
        int next = sv < kv ? sv : kv;
        if (sv == next) i++;
        if (kv == next) k++;
        out->since_versions[out->n_since_versions++] = next;
    }
    return OTTER_OK;
}
