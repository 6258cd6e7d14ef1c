/* Nodes against their operator schemas (onnx/checker.cc check_node, OpSchema::Verify). */
#include "check/check_internal.h"

#include <stdio.h>
#include <string.h>

#include "check/schema.h"
#include "core/core.h"

/* ---- nodes against their schema (OpSchema::Verify) ---------------------------------------- */

bool ot_check_experimental_op(const char *op) {
    static const char *const ops[] = {"ATen",
                                      "Affine",
                                      "ConstantFill",
                                      "Crop",
                                      "DynamicSlice",
                                      "GRUUnit",
                                      "GivenTensorFill",
                                      "ImageScaler",
                                      "ParametricSoftplus",
                                      "Scale",
                                      "ScaledTanh"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i]) == 0) return true;
    return false;
}

/* Domains for which onnx's checker requires a registered schema. */
static bool is_builtin_domain(const char *d) {
    return strcmp(d, "") == 0 || strcmp(d, "ai.onnx.ml") == 0 || strcmp(d, "ai.onnx") == 0 ||
           strcmp(d, "ai.onnx.training") == 0;
}

const char *ot_check_domain_label(const char *d) { return d[0] ? d : "ai.onnx"; }

/* Whether the attribute holds a value of its (expected) type. */
static bool attr_has_value(const otter_attr *a, otter_attr_type t) {
    switch (t) {
    case OTTER_ATTR_TENSOR:
        return a->t != NULL;
    case OTTER_ATTR_SPARSE_TENSOR:
        return a->sparse_tensor.data != NULL;
    case OTTER_ATTR_GRAPH:
        return a->g != NULL;
    case OTTER_ATTR_TYPE_PROTO:
        return a->tp.data != NULL;
    case OTTER_ATTR_FLOATS:
        return a->n_floats > 0;
    case OTTER_ATTR_INTS:
        return a->n_ints > 0;
    case OTTER_ATTR_STRINGS:
        return a->n_strings > 0;
    case OTTER_ATTR_TENSORS:
        return a->n_tensors > 0;
    case OTTER_ATTR_GRAPHS:
        return a->n_graphs > 0;
    case OTTER_ATTR_TYPE_PROTOS:
        return a->n_type_protos > 0;
    default:
        return true; /* FLOAT, INT, STRING: proto3 may omit a default value; SPARSE_TENSORS: onnx accepts empty */
    }
}

static void verify_node(ot_checker *c, const otter_node *n, size_t ni, const ot_schema *s) {
    if (!ot_schema_input_count_ok(s, n->n_inputs)) {
        if (s->max_inputs == INT32_MAX)
            ot_check_problem(c, n, ni, "has %zu inputs, expected at least %d", n->n_inputs, (int)s->min_inputs);
        else if (s->min_inputs == s->max_inputs)
            ot_check_problem(c, n, ni, "has %zu inputs, expected %d", n->n_inputs, (int)s->min_inputs);
        else
            ot_check_problem(c, n, ni, "has %zu inputs, expected %d to %d", n->n_inputs, (int)s->min_inputs,
                             (int)s->max_inputs);
        return;
    }
    if (!ot_schema_output_count_ok(s, n->n_outputs)) {
        if (s->allowed_outputs)
            ot_check_problem(c, n, ni, "has %zu outputs, which %s-%d does not allow", n->n_outputs, s->name,
                             (int)s->since_version);
        else if (s->max_outputs == INT32_MAX)
            ot_check_problem(c, n, ni, "has %zu outputs, expected at least %d", n->n_outputs, (int)s->min_outputs);
        else if (s->min_outputs == s->max_outputs)
            ot_check_problem(c, n, ni, "has %zu outputs, expected %d", n->n_outputs, (int)s->min_outputs);
        else
            ot_check_problem(c, n, ni, "has %zu outputs, expected %d to %d", n->n_outputs, (int)s->min_outputs,
                             (int)s->max_outputs);
        return;
    }
    for (size_t i = 0; i < n->n_inputs; i++) {
        const ot_schema_param *p = ot_schema_input(s, i);
        if (p == NULL) {
            ot_check_problem(c, n, ni, "has %zu inputs, %s-%d declares %u", n->n_inputs, s->name, (int)s->since_version,
                             (unsigned)s->n_inputs);
            return;
        }
        if (i >= s->n_inputs) break;
        if (ot_str_empty(n->inputs[i]) && p->option == OT_PARAM_SINGLE) {
            ot_check_problem(c, n, ni, "input %zu ('%s') is required but empty", i, p->name);
            return;
        }
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        const ot_schema_param *p = ot_schema_output(s, i);
        if (p == NULL) {
            ot_check_problem(c, n, ni, "has %zu outputs, %s-%d declares %u", n->n_outputs, s->name,
                             (int)s->since_version, (unsigned)s->n_outputs);
            return;
        }
        if (i >= s->n_outputs) break;
        if (ot_str_empty(n->outputs[i]) && p->option == OT_PARAM_SINGLE) {
            ot_check_problem(c, n, ni, "output %zu ('%s') is required but empty", i, p->name);
            return;
        }
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        const otter_attr *a = &n->attrs[i];
        const char *name = a->name ? a->name : "";
        for (size_t j = 0; j < i; j++)
            if (ot_streq(n->attrs[j].name, a->name)) {
                ot_check_problem(c, n, ni, "attribute '%s' appears more than once", name);
                return;
            }
        const ot_schema_attr *sa = ot_schema_attr_find(s, name);
        if (sa == NULL) {
            if (s->unchecked_attrs || (name[0] == '_' && name[1] == '_')) continue;
            ot_check_problem(c, n, ni, "unknown attribute '%s' for %s-%d", name, s->name, (int)s->since_version);
            return;
        }
        otter_attr_type got = a->has_type ? a->type : OTTER_ATTR_UNDEFINED;
        if (got != (otter_attr_type)sa->type) {
            ot_check_problem(c, n, ni, "attribute '%s' has type %s, expected %s", name, otter_attr_type_name(got),
                             otter_attr_type_name((otter_attr_type)sa->type));
            return;
        }
        if (!ot_str_empty(a->ref_attr_name)) continue;
        if (!attr_has_value(a, got)) {
            ot_check_problem(c, n, ni, "attribute '%s' of type %s has no value", name, otter_attr_type_name(got));
            return;
        }
    }
    for (size_t i = 0; i < s->n_attrs; i++) {
        if (!s->attrs[i].required) continue;
        if (otter_node_attr(n, s->attrs[i].name) == NULL) {
            ot_check_problem(c, n, ni, "required attribute '%s' is missing", s->attrs[i].name);
            return;
        }
    }
}

void ot_check_node(ot_checker *c, const otter_node *n, size_t ni, const ot_scope *scope, bool main_graph) {
    if (ot_str_empty(n->op_type)) {
        ot_check_problem(c, n, ni, "node has no op_type");
        return;
    }
    if (n->n_inputs == 0 && n->n_outputs == 0) {
        ot_check_problem(c, n, ni, "node has neither inputs nor outputs");
        return;
    }
    /* onnx's checker skips experimental ops entirely (with a warning). */
    if (ot_check_experimental_op(n->op_type)) {
        ot_log(OTTER_LOG_WARN, "checker: node '%s' (%s): experimental operator, not checked", ot_check_node_name(n),
               n->op_type);
        return;
    }
    const char *domain = n->domain ? n->domain : "";
    int64_t version = 0;
    if (!ot_check_opset_lookup(c, domain, &version)) {
        ot_check_problem(c, n, ni, "domain '%s' is not imported (no opset_import for it)", domain);
        return;
    }
    size_t before = c->n_problems;
    for (size_t i = 0; i < n->n_attrs && !ot_check_stopped(c); i++)
        ot_check_attribute(c, n, ni, &n->attrs[i], scope, main_graph);
    if (c->n_problems != before) return;
    /* An overload names a model-local function, never an operator. (Function bodies are kept as
     * serialized bytes and not checked.) */
    if (!ot_str_empty(n->overload)) {
        if (ot_check_find_function(c, domain, n->op_type, n->overload) == NULL)
            ot_check_problem(
                c, n, ni, "calls model-local function %s (domain '%s', overload '%s'), which the model does not define",
                n->op_type, domain, n->overload);
        return;
    }
    /* onnx looks the domain up literally: "ai.onnx" is not the default domain's registered name. */
    const ot_schema *s = strcmp(domain, "ai.onnx") == 0 ? NULL : ot_schema_find(domain, n->op_type, version);
    if (s == NULL && ot_check_find_function(c, domain, n->op_type, NULL)) return;
    if (s == NULL) {
        if (is_builtin_domain(domain))
            ot_check_problem(c, n, ni, "no operator %s in domain %s at opset %lld", n->op_type,
                             ot_check_domain_label(domain), (long long)version);
        /* Other domains: onnx skips the schema check (it cannot know custom operators). */
        return;
    }
    if (s->deprecated) {
        ot_check_problem(c, n, ni, "operator %s is deprecated at %s opset %lld (since version %d)", n->op_type,
                         ot_check_domain_label(domain), (long long)version, (int)s->since_version);
        return;
    }
    verify_node(c, n, ni, s);
}
