/* The model checker: onnx.checker.check_model (onnx/checker.cc and OpSchema::Verify in
 * onnx/defs/schema.cc, onnx 1.12) over otter's IR, plus with full_check the type checks of
 * onnx.shape_inference.infer_shapes(check_type=True, strict_mode=True) (OpSchema::CheckInputOutputType)
 * and otter's shape inference.
 *
 * Where onnx stops at the first problem, this collects all of them unless asked to stop. Each
 * problem is one line naming the node (name and op_type) or tensor at fault. */
#include "check/check_internal.h"

#include <string.h>

#include "check/schema.h"
#include "core/core.h"
#include "format/function.h"
#include "otter/infer.h"

bool ot_check_opset_lookup(const ot_checker *c, const char *domain, int64_t *version) {
    if (domain == NULL) domain = "";
    bool found = false;
    for (size_t i = 0; i < c->n_opsets; i++)
        if (strcmp(c->opset_domains[i], domain) == 0) {
            *version = c->opset_versions[i];
            found = true; /* keep going: the last entry wins, as in onnx's map */
        }
    return found;
}

const char *ot_check_keep_string(ot_checker *c, const char *s) { return ot_check_keep_bytes(c, s, strlen(s)); }

const char *ot_check_keep_bytes(ot_checker *c, const char *s, size_t len) {
    if (ot_grow((void **)&c->strings, &c->cap_strings, c->n_strings + 1, sizeof *c->strings) != OTTER_OK) {
        c->fatal = OTTER_ERR_NOMEM;
        return NULL;
    }
    char *d = ot_strndup(s, len);
    if (d == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return NULL;
    }
    c->strings[c->n_strings++] = d;
    return d;
}

/* ---- model-local functions ------------------------------------------------------------------ */

static bool same_text(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

const ot_check_function *ot_check_find_function(const ot_checker *c, const char *domain, const char *name,
                                                const char *overload) {
    for (size_t i = 0; i < c->n_functions; i++) {
        const ot_check_function *f = &c->functions[i];
        if (same_text(f->domain, domain) && same_text(f->name, name) && same_text(f->overload, overload)) return f;
    }
    return NULL;
}

/* A FunctionProto string field (name 1, domain 10, overload 13), kept; "" when absent. */
static const char *function_field(ot_checker *c, const otter_bytes *b, uint64_t field) {
    const char *s;
    size_t len;
    return ot_check_wire_string(b, field, &s, &len) ? ot_check_keep_bytes(c, s, len) : "";
}

/* Nodes call a model-local function by (domain, name, overload): each key must be defined once. */
static void collect_functions(ot_checker *c) {
    const otter_model *m = c->m;
    if (m->n_functions == 0) return;
    if (!(c->functions = ot_calloc(m->n_functions, sizeof *c->functions))) {
        c->fatal = OTTER_ERR_NOMEM;
        return;
    }
    for (size_t i = 0; i < m->n_functions && !ot_check_stopped(c); i++) {
        ot_check_function f = {function_field(c, &m->functions[i], 10), function_field(c, &m->functions[i], 1),
                               function_field(c, &m->functions[i], 13)};
        if (c->fatal != OTTER_OK) return;
        if (f.name[0] == '\0') {
            ot_check_problem(c, NULL, 0, "model-local function %zu has no name", i);
            continue;
        }
        if (ot_check_find_function(c, f.domain, f.name, f.overload)) {
            ot_check_problem(c, NULL, 0,
                             "model-local function '%s' (domain '%s', overload '%s') is defined more than once", f.name,
                             f.domain, f.overload);
            continue;
        }
        c->functions[c->n_functions++] = f;
    }
}

/* A function's body as onnx's check_function sees it: its nodes against the schemas of the function's
 * own opset imports, each input defined (a function input or an earlier node's output) and each output
 * defined once; attributes may refer to the function's (ref_attr_name). */
static void check_function_body(ot_checker *c, size_t index) {
    otter_model *f = NULL;
    otter_status s = ot_function_as_model(&c->m->functions[index], &f);
    if (s == OTTER_ERR_NOMEM) {
        c->fatal = s;
        return;
    }
    if (s != OTTER_OK) {
        ot_check_problem(c, NULL, 0, "model-local function %zu: %s", index, otter_last_error());
        return;
    }
    if (f->graph->name[0] == '\0') { /* reported by collect_functions */
        otter_model_free(f);
        return;
    }
    const char **domains = ot_calloc(f->n_opsets ? f->n_opsets : 1, sizeof *domains);
    int64_t *versions = ot_calloc(f->n_opsets ? f->n_opsets : 1, sizeof *versions);
    char *prefix = ot_sprintf("%smodel-local function '%s' (domain '%s'): ", c->prefix, f->graph->name, f->domain);
    if (domains == NULL || versions == NULL || prefix == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
    } else {
        for (size_t i = 0; i < f->n_opsets; i++) {
            domains[i] = f->opsets[i].domain ? f->opsets[i].domain : "";
            versions[i] = f->opsets[i].version;
        }
        ot_checker saved = *c;
        c->n_opsets = f->n_opsets;
        c->opset_domains = domains;
        c->opset_versions = versions;
        c->prefix = prefix;
        ot_check_graph(c, f->graph, NULL, false);
        c->n_opsets = saved.n_opsets;
        c->opset_domains = saved.opset_domains;
        c->opset_versions = saved.opset_versions;
        c->prefix = saved.prefix;
    }
    ot_free(prefix);
    ot_free(domains);
    ot_free(versions);
    otter_model_free(f);
}

/* ---- the model ----------------------------------------------------------------------------- */

/* Opsets newer than the schema table: nodes are checked against the newest schemas otter has, as
 * onnx's checker does for an opset newer than its registry, with a warning. */
static void warn_new_opsets(const ot_checker *c) {
    for (size_t i = 0; i < c->n_opsets; i++) {
        int64_t newest = ot_schema_domain_max_opset(c->opset_domains[i]);
        if (strcmp(c->opset_domains[i], "ai.onnx") == 0 || newest == 0 || c->opset_versions[i] <= newest) continue;
        ot_log(OTTER_LOG_WARN,
               "checker: the model imports %s opset %lld, newer than the newest otter knows (%lld, ONNX %s): its "
               "nodes are checked against opset %lld's schemas",
               ot_check_domain_label(c->opset_domains[i]), (long long)c->opset_versions[i], (long long)newest,
               ot_schema_onnx_version, (long long)newest);
    }
}

static void check_model(ot_checker *c) {
    const otter_model *m = c->m;
    if (!m->has_ir_version || m->ir_version == 0) {
        ot_check_problem(c, NULL, 0, "model has no ir_version");
        return;
    }
    if (m->ir_version < 0 || m->ir_version > OT_CHECK_MAX_IR_VERSION) {
        ot_check_problem(c, NULL, 0,
                         "model ir_version %lld is newer than otter knows (IR %d, ONNX %s): upgrade otter to check "
                         "or run it",
                         (long long)m->ir_version, OT_CHECK_MAX_IR_VERSION, ot_schema_onnx_version);
        return;
    }
    for (size_t i = 0; i < m->n_metadata; i++)
        for (size_t j = 0; j < i; j++)
            if (ot_streq(m->metadata[i].key, m->metadata[j].key)) {
                ot_check_problem(c, NULL, 0, "metadata key '%s' appears more than once",
                                 m->metadata[i].key ? m->metadata[i].key : "");
                return;
            }
    c->n_opsets = m->n_opsets;
    c->opset_domains = ot_calloc(m->n_opsets ? m->n_opsets : 1, sizeof *c->opset_domains);
    c->opset_versions = ot_calloc(m->n_opsets ? m->n_opsets : 1, sizeof *c->opset_versions);
    if (c->opset_domains == NULL || c->opset_versions == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return;
    }
    for (size_t i = 0; i < m->n_opsets; i++) {
        c->opset_domains[i] = m->opsets[i].domain ? m->opsets[i].domain : "";
        c->opset_versions[i] = m->opsets[i].version;
    }
    /* Stricter than onnx (which keeps the last entry silently): a domain imported twice is
     * ambiguous, and otter_model_opset would answer with the first entry. */
    for (size_t i = 0; i < m->n_opsets; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(c->opset_domains[i], c->opset_domains[j]) == 0) {
                ot_check_problem(c, NULL, 0, "domain '%s' is imported more than once (versions %lld and %lld)",
                                 ot_check_domain_label(c->opset_domains[i]), (long long)c->opset_versions[j],
                                 (long long)c->opset_versions[i]);
                return;
            }
    if (m->ir_version >= 3) {
        if (m->n_opsets == 0) {
            ot_check_problem(c, NULL, 0, "model has no opset_import (required for ir_version >= 3)");
            return;
        }
    } else if (m->n_opsets != 0) {
        ot_check_problem(c, NULL, 0, "model with ir_version %lld < 3 cannot have opset_import",
                         (long long)m->ir_version);
        return;
    } else {
        static const char *const def_domain[] = {""};
        static int64_t one = 1;
        c->n_opsets = 1;
        c->opset_domains[0] = def_domain[0];
        c->opset_versions[0] = one;
    }
    warn_new_opsets(c);
    collect_functions(c);
    if (m->graph == NULL) {
        ot_check_problem(c, NULL, 0, "model has no graph");
        return;
    }
    if (!ot_check_stopped(c)) ot_check_graph(c, m->graph, NULL, true);
    for (size_t i = 0; i < m->n_functions && !ot_check_stopped(c); i++) check_function_body(c, i);
}

/* full_check: otter's shape inference on a copy, then the schema type checks over its result. */
static void full_check(ot_checker *c) {
    otter_model *copy = NULL;
    otter_status s = otter_model_clone(&copy, c->m);
    if (s != OTTER_OK) {
        c->fatal = s;
        return;
    }
    otter_infer_options io = {0};
    s = otter_model_infer_shapes(copy, &io);
    if (s == OTTER_ERR_INVALID) {
        size_t before = c->n_problems;
        ot_check_problem(c, NULL, 0, "%s", otter_last_error());
        if (c->n_problems != before) ot_check_name_node_from_message(c->opts->report);
    } else if (s == OTTER_ERR_UNSUPPORTED) {
        /* Not a problem of the model: check types against what is declared. */
        ot_log(OTTER_LOG_WARN, "checker: shape inference skipped: %s", otter_last_error());
        ot_check_type_graph(c, c->m->graph, NULL);
    } else if (s != OTTER_OK) {
        c->fatal = s;
    } else {
        const otter_model *saved = c->m;
        c->m = copy;
        ot_check_type_graph(c, copy->graph, NULL);
        c->m = saved;
    }
    otter_model_free(copy);
}

otter_status otter_model_check(const otter_model *m, const otter_check_options *opts) {
    if (m == NULL) return ot_error(OTTER_ERR_ARGUMENT, "otter_model_check: model is NULL");
    otter_check_options defaults = {0};
    if (opts == NULL) opts = &defaults;
    otter_check_report_clear(opts->report);
    ot_checker c = {0};
    c.m = m;
    c.opts = opts;
    c.ir_version = m->ir_version;
    c.prefix = ot_strdup("");
    if (c.prefix == NULL) return OT_NOMEM();
    check_model(&c);
    if (opts->full_check && c.n_problems == 0 && c.fatal == OTTER_OK) full_check(&c);

    otter_status result = OTTER_OK;
    if (c.fatal != OTTER_OK) {
        result = c.fatal == OTTER_ERR_NOMEM ? OT_NOMEM() : c.fatal;
    } else if (c.n_problems > 0) {
        if (c.n_problems == 1 || opts->stop_at_first)
            result = ot_error(OTTER_ERR_INVALID, "%s", c.first);
        else
            result = ot_error(OTTER_ERR_INVALID, "%s (and %zu more problem%s)", c.first, c.n_problems - 1,
                              c.n_problems == 2 ? "" : "s");
    }
    ot_free(c.first);
    ot_free(c.prefix);
    ot_free(c.opset_domains);
    ot_free(c.opset_versions);
    ot_free(c.functions);
    for (size_t i = 0; i < c.n_strings; i++) ot_free(c.strings[i]);
    ot_free(c.strings);
    return result;
}
