/* The model checker: onnx.checker.check_model (onnx/checker.cc and OpSchema::Verify in
 * onnx/defs/schema.cc, onnx 1.12) over otter's IR, plus with full_check the type checks of
 * onnx.shape_inference.infer_shapes(check_type=True, strict_mode=True) (OpSchema::CheckInputOutputType)
 * and otter's shape inference.
 *
 * Where onnx stops at the first problem, this collects all of them unless asked to stop. Each
 * problem is one line naming the node (name and op_type) or tensor at fault. */
#include "otter/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check/schema.h"
#include "core/core.h"
#include "core/strmap.h"
#include "otter/infer.h"

/* ONNX's IR_VERSION in onnx 1.12 (the highest version the checker accepts). */
#define OT_CHECK_MAX_IR_VERSION 8

/* ---- the report --------------------------------------------------------------------------- */

typedef struct ot_diag {
    char *message;
    char *node;
    char *op_type;
} ot_diag;

struct otter_check_report {
    size_t n, cap;
    ot_diag *items;
};

otter_status otter_check_report_create(otter_check_report **out) {
    if (out == NULL) return ot_error(OTTER_ERR_ARGUMENT, "otter_check_report_create: out is NULL");
    *out = ot_calloc(1, sizeof **out);
    if (*out == NULL) return OT_NOMEM();
    return OTTER_OK;
}

void otter_check_report_clear(otter_check_report *r) {
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) {
        ot_free(r->items[i].message);
        ot_free(r->items[i].node);
        ot_free(r->items[i].op_type);
    }
    r->n = 0;
}

void otter_check_report_free(otter_check_report *r) {
    if (r == NULL) return;
    otter_check_report_clear(r);
    ot_free(r->items);
    ot_free(r);
}

size_t otter_check_report_count(const otter_check_report *r) { return r ? r->n : 0; }

const char *otter_check_report_message(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].message : NULL;
}

const char *otter_check_report_node(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].node : NULL;
}

const char *otter_check_report_op_type(const otter_check_report *r, size_t i) {
    return r && i < r->n ? r->items[i].op_type : NULL;
}

/* ---- name sets and lexical scopes ---------------------------------------------------------- */

/* Name sets are ot_strmaps of borrowed strings (the model outlives the check); in the type pass the value
 * is the name's type string (NULL when unknown). */
static const char *name_type(const ot_strmap *m, const char *key) {
    intptr_t v;
    return ot_strmap_get(m, key, &v) ? (const char *)v : NULL;
}

/* A graph's names, seeing its ancestors' (LexicalScopeContext). */
typedef struct ot_scope {
    const struct ot_scope *parent;
    ot_strmap names;
} ot_scope;

static bool scope_has_any(const ot_scope *s, const char *name) {
    for (; s; s = s->parent)
        if (ot_strmap_has(&s->names, name)) return true;
    return false;
}

static const char *scope_type(const ot_scope *s, const char *name) {
    for (; s; s = s->parent) {
        intptr_t t;
        if (ot_strmap_get(&s->names, name, &t)) return (const char *)t;
    }
    return NULL;
}

/* ---- the checker's state ------------------------------------------------------------------- */

typedef struct ot_checker {
    const otter_model *m;
    const otter_check_options *opts;
    int64_t ir_version;
    /* Opset imports as onnx's checker sees them: domain strings taken literally, the last entry
     * for a domain wins. */
    size_t n_opsets;
    const char **opset_domains;
    int64_t *opset_versions;
    /* Path to the current subgraph ("node 'x' (Loop), attribute 'body': "), "" at the top. */
    char *prefix;
    size_t n_problems;
    char *first;
    otter_status fatal; /* a failure of the check itself (out of memory) */
    /* Type strings built in the type pass, freed at the end. */
    char **strings;
    size_t n_strings, cap_strings;
} ot_checker;

static bool stopped(const ot_checker *c) {
    return c->fatal != OTTER_OK || (c->n_problems > 0 && c->opts->stop_at_first);
}

static const char *node_label_name(const otter_node *n) { return n && n->name ? n->name : ""; }

/* Report a problem about node n (may be NULL). */
static void problem(ot_checker *c, const otter_node *n, size_t node_index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void problem(ot_checker *c, const otter_node *n, size_t node_index, const char *fmt, ...) {
    if (stopped(c)) return;
    char body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    char *msg;
    if (n == NULL)
        msg = ot_sprintf("%s%s", c->prefix, body);
    else if (!ot_str_empty(n->name))
        msg = ot_sprintf("%snode '%s' (%s): %s", c->prefix, n->name, n->op_type ? n->op_type : "", body);
    else
        msg = ot_sprintf("%snode #%zu (%s): %s", c->prefix, node_index, n->op_type ? n->op_type : "", body);
    if (msg == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return;
    }
    c->n_problems++;
    if (c->opts->callback) c->opts->callback(msg, c->opts->callback_user);
    otter_check_report *r = c->opts->report;
    if (r) {
        if (ot_grow((void **)&r->items, &r->cap, r->n + 1, sizeof *r->items) != OTTER_OK) {
            ot_free(msg);
            c->fatal = OTTER_ERR_NOMEM;
            return;
        }
        ot_diag *d = &r->items[r->n];
        d->message = ot_strdup(msg);
        d->node = ot_strdup(n ? node_label_name(n) : "");
        d->op_type = ot_strdup(n && n->op_type ? n->op_type : "");
        if (!d->message || !d->node || !d->op_type) {
            ot_free(d->message);
            ot_free(d->node);
            ot_free(d->op_type);
            ot_free(msg);
            c->fatal = OTTER_ERR_NOMEM;
            return;
        }
        r->n++;
    }
    if (c->first == NULL)
        c->first = msg;
    else
        ot_free(msg);
}

static bool opset_lookup(const ot_checker *c, const char *domain, int64_t *version) {
    if (domain == NULL) domain = "";
    bool found = false;
    for (size_t i = 0; i < c->n_opsets; i++)
        if (strcmp(c->opset_domains[i], domain) == 0) {
            *version = c->opset_versions[i];
            found = true; /* keep going: the last entry wins, as in onnx's map */
        }
    return found;
}

/* ---- values, tensors, attributes ------------------------------------------------------------ */

static const char *kind_name(otter_type_kind k) {
    switch (k) {
    case OTTER_TYPE_TENSOR:
        return "tensor";
    case OTTER_TYPE_SEQUENCE:
        return "sequence";
    case OTTER_TYPE_MAP:
        return "map";
    case OTTER_TYPE_OPTIONAL:
        return "optional";
    case OTTER_TYPE_SPARSE_TENSOR:
        return "sparse tensor";
    default:
        return "untyped";
    }
}

/* check_value_info: graph inputs and outputs. what: "input" / "output". */
static void check_value_info(ot_checker *c, const otter_value *v, const char *what, bool main_graph) {
    if (ot_str_empty(v->name)) {
        problem(c, NULL, 0, "graph %s has an empty name", what);
        return;
    }
    if (!main_graph) return; /* onnx relaxes this for subgraph inputs and outputs */
    const otter_type *t = &v->type;
    if (!v->has_type || t->kind == OTTER_TYPE_NONE) {
        problem(c, NULL, 0, "graph %s '%s' has no type", what, v->name);
        return;
    }
    switch (t->kind) {
    case OTTER_TYPE_TENSOR:
    case OTTER_TYPE_SPARSE_TENSOR:
        if (!t->has_elem_type)
            problem(c, NULL, 0, "graph %s '%s' (%s) has no element type", what, v->name, kind_name(t->kind));
        else if (t->rank < 0)
            problem(c, NULL, 0, "graph %s '%s' (%s) has no shape", what, v->name, kind_name(t->kind));
        break;
    case OTTER_TYPE_SEQUENCE:
    case OTTER_TYPE_OPTIONAL:
        if (t->elem == NULL)
            problem(c, NULL, 0, "graph %s '%s' (%s) has no element type", what, v->name, kind_name(t->kind));
        break;
    case OTTER_TYPE_MAP:
        if (!t->has_elem_type) problem(c, NULL, 0, "graph %s '%s' (map) has no key type", what, v->name);
        if (t->elem == NULL) problem(c, NULL, 0, "graph %s '%s' (map) has no value type", what, v->name);
        break;
    default:
        break;
    }
}

/* check_tensor, on what the loader kept (it already refused data that does not match dims). */
static void check_tensor(ot_checker *c, const otter_node *n, size_t ni, const otter_tensor *t, const char *what) {
    const char *name = t->name ? t->name : "";
    if (t->dtype == OTTER_DTYPE_UNDEFINED || otter_dtype_name(t->dtype) == NULL ||
        ot_type_elem_name(t->dtype) == NULL) {
        problem(c, n, ni, "%s '%s' has undefined data type %d", what, name, (int)t->dtype);
        return;
    }
    if (t->rank < 0 || t->rank > OTTER_MAX_RANK) {
        problem(c, n, ni, "%s '%s' has invalid rank %d", what, name, t->rank);
        return;
    }
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) {
            problem(c, n, ni, "%s '%s' has negative dimension %d (%lld)", what, name, i, (long long)t->dims[i]);
            return;
        }
    if (otter_tensor_numel(t) > 0 && t->data == NULL)
        problem(c, n, ni, "%s '%s' has %lld elements but no data", what, name, (long long)otter_tensor_numel(t));
}

static void check_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent, bool main_graph);

/* A copy of s that lives until the end of the check. */
static const char *keep_string(ot_checker *c, const char *s) {
    if (ot_grow((void **)&c->strings, &c->cap_strings, c->n_strings + 1, sizeof *c->strings) != OTTER_OK) {
        c->fatal = OTTER_ERR_NOMEM;
        return NULL;
    }
    char *d = ot_strdup(s);
    if (d == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return NULL;
    }
    c->strings[c->n_strings++] = d;
    return d;
}

/* Sparse initializers are kept as serialized SparseTensorProto bytes; their name is
 * values (field 1, a TensorProto).name (field 8). A minimal wire-format walk finds it. */
static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* The length-delimited field `field` of the message [p, end) (the last occurrence). */
static bool wire_find(const uint8_t *p, const uint8_t *end, uint64_t field, const uint8_t **out, size_t *len) {
    bool found = false;
    while (p < end) {
        uint64_t key, v;
        if (!wire_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!wire_varint(&p, end, &v)) return false;
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        case 2:
            if (!wire_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            if ((key >> 3) == field) {
                *out = p;
                *len = (size_t)v;
                found = true;
            }
            p += v;
            break;
        default:
            return false;
        }
    }
    return found;
}

/* The varint field `field` of the message [p, end) (the last occurrence). */
static bool wire_find_varint(const uint8_t *p, const uint8_t *end, uint64_t field, uint64_t *out) {
    bool found = false;
    while (p < end) {
        uint64_t key, v;
        if (!wire_varint(&p, end, &key)) return false;
        switch (key & 7) {
        case 0:
            if (!wire_varint(&p, end, &v)) return false;
            if ((key >> 3) == field) {
                *out = v;
                found = true;
            }
            break;
        case 1:
            if (end - p < 8) return false;
            p += 8;
            break;
        case 5:
            if (end - p < 4) return false;
            p += 4;
            break;
        case 2:
            if (!wire_varint(&p, end, &v) || v > (uint64_t)(end - p)) return false;
            p += v;
            break;
        default:
            return false;
        }
    }
    return found;
}

/* The name of a sparse initializer (ot_free it; NULL when it has none or out of memory) and the
 * element type of its values (values.data_type, field 2; UNDEFINED when absent). */
static char *sparse_initializer_name(const otter_bytes *b, otter_dtype *dtype) {
    const uint8_t *values, *name;
    size_t n_values, n_name;
    const uint8_t *p = (const uint8_t *)b->data;
    uint64_t dt = 0;
    *dtype = OTTER_DTYPE_UNDEFINED;
    if (p == NULL || !wire_find(p, p + b->len, 1, &values, &n_values)) return NULL;
    if (wire_find_varint(values, values + n_values, 2, &dt) && dt < OTTER_DTYPE_COUNT_) *dtype = (otter_dtype)dt;
    if (!wire_find(values, values + n_values, 8, &name, &n_name)) return NULL;
    return ot_strndup((const char *)name, n_name);
}

static otter_status push_prefix(ot_checker *c, const otter_node *n, size_t ni, const char *attr, size_t gi, bool many,
                                char **saved) {
    char *p;
    if (!ot_str_empty(n->name))
        p = many ? ot_sprintf("%snode '%s' (%s), attribute '%s'[%zu]: ", c->prefix, n->name, n->op_type, attr, gi)
                 : ot_sprintf("%snode '%s' (%s), attribute '%s': ", c->prefix, n->name, n->op_type, attr);
    else
        p = many ? ot_sprintf("%snode #%zu (%s), attribute '%s'[%zu]: ", c->prefix, ni, n->op_type, attr, gi)
                 : ot_sprintf("%snode #%zu (%s), attribute '%s': ", c->prefix, ni, n->op_type, attr);
    if (p == NULL) {
        c->fatal = OTTER_ERR_NOMEM;
        return OTTER_ERR_NOMEM;
    }
    *saved = c->prefix;
    c->prefix = p;
    return OTTER_OK;
}

static void pop_prefix(ot_checker *c, char *saved) {
    ot_free(c->prefix);
    c->prefix = saved;
}

/* check_attribute: well-formedness, independent of any schema; recurses into subgraphs, which
 * see the names visible to the node (scope). */
static void check_attribute(ot_checker *c, const otter_node *n, size_t ni, const otter_attr *a, const ot_scope *scope,
                            bool main_graph) {
    if (ot_str_empty(a->name)) {
        problem(c, n, ni, "an attribute has an empty name");
        return;
    }
    if (c->ir_version >= 2 && !a->has_type) {
        problem(c, n, ni, "attribute '%s' has no type", a->name);
        return;
    }
    struct {
        bool set;
        otter_attr_type type;
    } fields[] = {
        {a->has_f, OTTER_ATTR_FLOAT},
        {a->has_i, OTTER_ATTR_INT},
        {a->has_s, OTTER_ATTR_STRING},
        {a->t != NULL, OTTER_ATTR_TENSOR},
        {a->g != NULL, OTTER_ATTR_GRAPH},
        {a->tp.data != NULL, OTTER_ATTR_TYPE_PROTO},
        {a->sparse_tensor.data != NULL, OTTER_ATTR_SPARSE_TENSOR},
        {a->n_floats > 0, OTTER_ATTR_FLOATS},
        {a->n_ints > 0, OTTER_ATTR_INTS},
        {a->n_strings > 0, OTTER_ATTR_STRINGS},
        {a->n_tensors > 0, OTTER_ATTR_TENSORS},
        {a->n_graphs > 0, OTTER_ATTR_GRAPHS},
        {a->n_sparse_tensors > 0, OTTER_ATTR_SPARSE_TENSORS},
        {a->n_type_protos > 0, OTTER_ATTR_TYPE_PROTOS},
    };
    int used = 0;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!fields[i].set) continue;
        used++;
        if (a->has_type && a->type != fields[i].type) {
            problem(c, n, ni, "attribute '%s' has type %s but holds a %s value", a->name, otter_attr_type_name(a->type),
                    otter_attr_type_name(fields[i].type));
            return;
        }
    }
    if (used > 1) {
        problem(c, n, ni, "attribute '%s' holds more than one value field", a->name);
        return;
    }
    if (!main_graph && a->ref_attr_name && used != 0) {
        problem(c, n, ni, "attribute '%s' refers to parent attribute '%s' but also holds a value", a->name,
                a->ref_attr_name);
        return;
    }
    if (a->t) {
        char what[300];
        snprintf(what, sizeof what, "attribute '%s': tensor", a->name);
        check_tensor(c, n, ni, a->t, what);
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        char what[300];
        snprintf(what, sizeof what, "attribute '%s': tensor %zu", a->name, i);
        check_tensor(c, n, ni, a->tensors[i], what);
    }
    if (a->g) {
        char *saved;
        if (push_prefix(c, n, ni, a->name, 0, false, &saved) != OTTER_OK) return;
        check_graph(c, a->g, scope, false);
        pop_prefix(c, saved);
    }
    for (size_t i = 0; i < a->n_graphs && !stopped(c); i++) {
        char *saved;
        if (push_prefix(c, n, ni, a->name, i, true, &saved) != OTTER_OK) return;
        check_graph(c, a->graphs[i], scope, false);
        pop_prefix(c, saved);
    }
}

/* ---- nodes against their schema (OpSchema::Verify) ---------------------------------------- */

static bool is_experimental_op(const char *op) {
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

static const char *domain_label(const char *d) { return d[0] ? d : "ai.onnx"; }

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
            problem(c, n, ni, "has %zu inputs, expected at least %d", n->n_inputs, (int)s->min_inputs);
        else if (s->min_inputs == s->max_inputs)
            problem(c, n, ni, "has %zu inputs, expected %d", n->n_inputs, (int)s->min_inputs);
        else
            problem(c, n, ni, "has %zu inputs, expected %d to %d", n->n_inputs, (int)s->min_inputs, (int)s->max_inputs);
        return;
    }
    if (!ot_schema_output_count_ok(s, n->n_outputs)) {
        if (s->allowed_outputs)
            problem(c, n, ni, "has %zu outputs, which %s-%d does not allow", n->n_outputs, s->name,
                    (int)s->since_version);
        else if (s->max_outputs == INT32_MAX)
            problem(c, n, ni, "has %zu outputs, expected at least %d", n->n_outputs, (int)s->min_outputs);
        else if (s->min_outputs == s->max_outputs)
            problem(c, n, ni, "has %zu outputs, expected %d", n->n_outputs, (int)s->min_outputs);
        else
            problem(c, n, ni, "has %zu outputs, expected %d to %d", n->n_outputs, (int)s->min_outputs,
                    (int)s->max_outputs);
        return;
    }
    for (size_t i = 0; i < n->n_inputs; i++) {
        const ot_schema_param *p = ot_schema_input(s, i);
        if (p == NULL) {
            problem(c, n, ni, "has %zu inputs, %s-%d declares %u", n->n_inputs, s->name, (int)s->since_version,
                    (unsigned)s->n_inputs);
            return;
        }
        if (i >= s->n_inputs) break;
        if (ot_str_empty(n->inputs[i]) && p->option == OT_PARAM_SINGLE) {
            problem(c, n, ni, "input %zu ('%s') is required but empty", i, p->name);
            return;
        }
    }
    for (size_t i = 0; i < n->n_outputs; i++) {
        const ot_schema_param *p = ot_schema_output(s, i);
        if (p == NULL) {
            problem(c, n, ni, "has %zu outputs, %s-%d declares %u", n->n_outputs, s->name, (int)s->since_version,
                    (unsigned)s->n_outputs);
            return;
        }
        if (i >= s->n_outputs) break;
        if (ot_str_empty(n->outputs[i]) && p->option == OT_PARAM_SINGLE) {
            problem(c, n, ni, "output %zu ('%s') is required but empty", i, p->name);
            return;
        }
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        const otter_attr *a = &n->attrs[i];
        const char *name = a->name ? a->name : "";
        for (size_t j = 0; j < i; j++)
            if (ot_streq(n->attrs[j].name, a->name)) {
                problem(c, n, ni, "attribute '%s' appears more than once", name);
                return;
            }
        const ot_schema_attr *sa = ot_schema_attr_find(s, name);
        if (sa == NULL) {
            if (s->unchecked_attrs || (name[0] == '_' && name[1] == '_')) continue;
            problem(c, n, ni, "unknown attribute '%s' for %s-%d", name, s->name, (int)s->since_version);
            return;
        }
        otter_attr_type got = a->has_type ? a->type : OTTER_ATTR_UNDEFINED;
        if (got != (otter_attr_type)sa->type) {
            problem(c, n, ni, "attribute '%s' has type %s, expected %s", name, otter_attr_type_name(got),
                    otter_attr_type_name((otter_attr_type)sa->type));
            return;
        }
        if (!ot_str_empty(a->ref_attr_name)) continue;
        if (!attr_has_value(a, got)) {
            problem(c, n, ni, "attribute '%s' of type %s has no value", name, otter_attr_type_name(got));
            return;
        }
    }
    for (size_t i = 0; i < s->n_attrs; i++) {
        if (!s->attrs[i].required) continue;
        if (otter_node_attr(n, s->attrs[i].name) == NULL) {
            problem(c, n, ni, "required attribute '%s' is missing", s->attrs[i].name);
            return;
        }
    }
}

static void check_node(ot_checker *c, const otter_node *n, size_t ni, const ot_scope *scope, bool main_graph) {
    if (ot_str_empty(n->op_type)) {
        problem(c, n, ni, "node has no op_type");
        return;
    }
    if (n->n_inputs == 0 && n->n_outputs == 0) {
        problem(c, n, ni, "node has neither inputs nor outputs");
        return;
    }
    /* onnx's checker skips experimental ops entirely (with a warning). */
    if (is_experimental_op(n->op_type)) {
        ot_log(OTTER_LOG_WARN, "checker: node '%s' (%s): experimental operator, not checked", node_label_name(n),
               n->op_type);
        return;
    }
    const char *domain = n->domain ? n->domain : "";
    int64_t version = 0;
    if (!opset_lookup(c, domain, &version)) {
        problem(c, n, ni, "domain '%s' is not imported by the model (no opset_import for it)", domain);
        return;
    }
    size_t before = c->n_problems;
    for (size_t i = 0; i < n->n_attrs && !stopped(c); i++) check_attribute(c, n, ni, &n->attrs[i], scope, main_graph);
    if (c->n_problems != before) return;
    /* onnx looks the domain up literally: "ai.onnx" is not the default domain's registered name. */
    const ot_schema *s = strcmp(domain, "ai.onnx") == 0 ? NULL : ot_schema_find(domain, n->op_type, version);
    if (s == NULL) {
        if (is_builtin_domain(domain))
            problem(c, n, ni, "no operator %s in domain %s at opset %lld", n->op_type, domain_label(domain),
                    (long long)version);
        /* Other domains: onnx skips the schema check (it cannot know custom operators). */
        return;
    }
    if (s->deprecated) {
        problem(c, n, ni, "operator %s is deprecated at %s opset %lld (since version %d)", n->op_type,
                domain_label(domain), (long long)version, (int)s->since_version);
        return;
    }
    verify_node(c, n, ni, s);
}

/* ---- graphs (check_graph) ------------------------------------------------------------------ */

static void check_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent, bool main_graph) {
    if (ot_str_empty(g->name)) problem(c, NULL, 0, "graph has no name");
    for (size_t i = 0; i < g->n_inputs && !stopped(c); i++) check_value_info(c, &g->inputs[i], "input", main_graph);
    for (size_t i = 0; i < g->n_outputs && !stopped(c); i++) check_value_info(c, &g->outputs[i], "output", main_graph);
    if (stopped(c)) return;

    ot_scope scope = {parent, {0}};
    ot_strmap inits = {0};
    for (size_t i = 0; i < g->n_inputs && !stopped(c); i++) {
        const char *name = g->inputs[i].name;
        if (ot_str_empty(name)) continue;
        if (ot_strmap_has(&scope.names, name)) {
            problem(c, NULL, 0, "graph input '%s' is declared more than once", name);
            continue;
        }
        if (ot_strmap_put(&scope.names, name, 0) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t i = 0; i < g->n_initializers && !stopped(c); i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) {
            problem(c, NULL, 0, "initializer %zu has no name", i);
            continue;
        }
        if (ot_strmap_has(&inits, t->name)) {
            problem(c, NULL, 0, "initializer '%s' is defined more than once", t->name);
            continue;
        }
        if (ot_strmap_put(&inits, t->name, 0) != OTTER_OK) {
            c->fatal = OTTER_ERR_NOMEM;
            break;
        }
        check_tensor(c, NULL, 0, t, "initializer");
        if (c->ir_version <= 3) {
            /* Initializers are a subset of the graph inputs up to IR version 3. */
            if (!ot_strmap_has(&scope.names, t->name))
                problem(c, NULL, 0, "initializer '%s' is not a graph input (required for ir_version %lld <= 3)",
                        t->name, (long long)c->ir_version);
        } else if (ot_strmap_put(&scope.names, t->name, 0) != OTTER_OK) {
            c->fatal = OTTER_ERR_NOMEM;
        }
    }
    for (size_t i = 0; i < g->n_sparse_initializers && !stopped(c); i++) {
        otter_dtype dt;
        char *name = sparse_initializer_name(&g->sparse_initializers[i], &dt);
        const char *kept = name ? keep_string(c, name) : NULL;
        ot_free(name);
        if (stopped(c)) break;
        if (ot_str_empty(kept)) {
            problem(c, NULL, 0, "sparse initializer %zu has no name", i);
            continue;
        }
        if (ot_strmap_has(&inits, kept)) {
            problem(c, NULL, 0, "sparse initializer '%s' has the name of another initializer", kept);
            continue;
        }
        if (ot_strmap_put(&inits, kept, 0) != OTTER_OK || ot_strmap_put(&scope.names, kept, 0) != OTTER_OK)
            c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t ni = 0; ni < g->n_nodes && !stopped(c); ni++) {
        const otter_node *n = g->nodes[ni];
        for (size_t i = 0; i < n->n_inputs; i++) {
            const char *in = n->inputs[i];
            if (ot_str_empty(in)) continue; /* an omitted optional input */
            if (!scope_has_any(&scope, in)) {
                ptrdiff_t later = otter_graph_find_producer(g, in);
                if (later > (ptrdiff_t)ni)
                    problem(c, n, ni,
                            "input '%s' is used before it is produced (by node %zd; nodes must be in "
                            "topological order)",
                            in, later);
                else if (later == (ptrdiff_t)ni)
                    problem(c, n, ni, "input '%s' is the node's own output (a cycle)", in);
                else
                    problem(c, n, ni,
                            "input '%s' is not defined (not a graph input, initializer or output of an "
                            "earlier node)",
                            in);
            }
        }
        if (stopped(c)) break;
        check_node(c, n, ni, &scope, main_graph);
        for (size_t i = 0; i < n->n_outputs && !stopped(c); i++) {
            const char *out = n->outputs[i];
            if (ot_str_empty(out)) continue; /* an omitted optional output */
            if (scope_has_any(&scope, out)) {
                problem(c, n, ni, "output '%s' is already defined (each tensor must be defined once)", out);
                continue;
            }
            if (ot_strmap_put(&scope.names, out, 0) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
        }
    }
    ot_strmap_free(&inits);
    ot_strmap_free(&scope.names);
}

/* ---- the type pass (full_check): OpSchema::CheckInputOutputType ---------------------------- */

/* The type string of a declared type, kept; NULL when incomplete. */
static const char *declared_type(ot_checker *c, const otter_type *t) {
    char buf[256];
    if (t == NULL || !ot_type_string(t, buf, sizeof buf)) return NULL;
    return keep_string(c, buf);
}

static const char *tensor_type(ot_checker *c, const otter_tensor *t) {
    const char *e = ot_type_elem_name(t->dtype);
    if (e == NULL) return NULL;
    char buf[64];
    snprintf(buf, sizeof buf, "tensor(%s)", e);
    return keep_string(c, buf);
}

static void type_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent);

/* The output type of a Constant node, from its value attribute (as onnx's inference gives it). */
static const char *constant_type(ot_checker *c, const otter_node *n) {
    for (size_t i = 0; i < n->n_attrs; i++) {
        const otter_attr *a = &n->attrs[i];
        if (ot_streq(a->name, "value") && a->t) return tensor_type(c, a->t);
        if (ot_streq(a->name, "value_float") || ot_streq(a->name, "value_floats")) return "tensor(float)";
        if (ot_streq(a->name, "value_int") || ot_streq(a->name, "value_ints")) return "tensor(int64)";
        if (ot_streq(a->name, "value_string") || ot_streq(a->name, "value_strings")) return "tensor(string)";
    }
    return NULL;
}

/* Types of one node's inputs against its schema; binds output types where the schema fixes them. */
static void type_node(ot_checker *c, const otter_node *n, size_t ni, ot_scope *scope) {
    const char *domain = n->domain ? n->domain : "";
    int64_t version = 0;
    const ot_schema *s = NULL;
    if (!is_experimental_op(n->op_type) && strcmp(domain, "ai.onnx") != 0 && opset_lookup(c, domain, &version))
        s = ot_schema_find(domain, n->op_type, version);
    /* Subgraphs see the names (and types) visible to the node. */
    for (size_t i = 0; i < n->n_attrs && !stopped(c); i++) {
        const otter_attr *a = &n->attrs[i];
        if (a->g) type_graph(c, a->g, scope);
        for (size_t j = 0; j < a->n_graphs && !stopped(c); j++) type_graph(c, a->graphs[j], scope);
    }
    if (s == NULL || s->deprecated) return;

    /* type parameter -> bound type string; at most a handful per schema */
    const char *bound_param[16];
    const char *bound_type[16];
    size_t n_bound = 0;
    for (size_t i = 0; i < n->n_inputs && i < s->n_inputs; i++) {
        const char *in = n->inputs[i];
        if (ot_str_empty(in)) continue;
        const char *t = scope_type(scope, in);
        if (t == NULL) continue;
        const ot_schema_param *p = &s->inputs[i];
        if (!ot_schema_param_allows(p, t)) {
            problem(c, n, ni, "input %zu ('%s', tensor '%s') has type %s, which %s-%d does not allow for %s", i,
                    p->name, in, t, s->name, (int)s->since_version, p->type_str);
            return;
        }
        if (!p->homogeneous) continue;
        size_t k = 0;
        while (k < n_bound && strcmp(bound_param[k], p->type_str) != 0) k++;
        if (k < n_bound) {
            if (strcmp(bound_type[k], t) != 0) {
                problem(c, n, ni, "input %zu ('%s', tensor '%s') has type %s but %s is already bound to %s", i, p->name,
                        in, t, p->type_str, bound_type[k]);
                return;
            }
        } else if (n_bound < sizeof bound_param / sizeof bound_param[0]) {
            bound_param[n_bound] = p->type_str;
            bound_type[n_bound++] = t;
        }
    }
    for (size_t i = 0; i < n->n_outputs && i < s->n_outputs; i++) {
        const char *out = n->outputs[i];
        if (ot_str_empty(out)) continue;
        const ot_schema_param *p = &s->outputs[i];
        /* As onnx: the inferred type (here: declared, or written by otter's inference), else the
         * one the schema fixes (a single allowed type, or a type parameter bound by the inputs). */
        const char *t = name_type(&scope->names, out);
        if (t == NULL && strcmp(s->name, "Constant") == 0 && s->domain[0] == '\0') t = constant_type(c, n);
        if (t == NULL) {
            if (p->n_types == 1)
                t = p->types[0];
            else
                for (size_t k = 0; k < n_bound; k++)
                    if (strcmp(bound_param[k], p->type_str) == 0) t = bound_type[k];
            if (t == NULL) continue;
        }
        if (!ot_schema_param_allows(p, t)) {
            problem(c, n, ni, "output %zu ('%s', tensor '%s') has type %s, which %s-%d does not allow for %s", i,
                    p->name, out, t, s->name, (int)s->since_version, p->type_str);
            return;
        }
        if (p->homogeneous) {
            size_t k = 0;
            while (k < n_bound && strcmp(bound_param[k], p->type_str) != 0) k++;
            if (k < n_bound && strcmp(bound_type[k], t) != 0) {
                problem(c, n, ni, "output %zu ('%s', tensor '%s') has type %s but %s is bound to %s", i, p->name, out,
                        t, p->type_str, bound_type[k]);
                return;
            }
            if (k == n_bound && n_bound < sizeof bound_param / sizeof bound_param[0]) {
                bound_param[n_bound] = p->type_str;
                bound_type[n_bound++] = t;
            }
        }
        if (ot_strmap_put(&scope->names, out, (intptr_t)t) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
}

/* The type onnx's inference holds for a name before visiting nodes: typed value_info, then graph
 * inputs, then graph outputs, the later overriding the earlier. */
static const otter_type *declared_otter_type(const otter_graph *g, const char *name) {
    for (size_t i = g->n_outputs; i-- > 0;)
        if (g->outputs[i].has_type && ot_streq(g->outputs[i].name, name)) return &g->outputs[i].type;
    for (size_t i = g->n_inputs; i-- > 0;)
        if (g->inputs[i].has_type && ot_streq(g->inputs[i].name, name)) return &g->inputs[i].type;
    for (size_t i = g->n_value_info; i-- > 0;)
        if (g->value_info[i].has_type && ot_streq(g->value_info[i].name, name)) return &g->value_info[i].type;
    return NULL;
}

/* An initializer against the declared type of the same name (checkShapesAndTypes). */
static void check_initializer_type(ot_checker *c, const otter_tensor *t, const otter_type *d) {
    if (d->kind == OTTER_TYPE_NONE) return;
    if (d->kind != OTTER_TYPE_TENSOR) {
        problem(c, NULL, 0, "initializer '%s' is a tensor but is declared as a %s", t->name, kind_name(d->kind));
        return;
    }
    if (d->has_elem_type && d->elem_type != OTTER_DTYPE_UNDEFINED && d->elem_type != t->dtype) {
        const char *a = ot_type_elem_name(t->dtype), *b = ot_type_elem_name(d->elem_type);
        problem(c, NULL, 0, "initializer '%s' has element type %s but is declared as %s", t->name, a ? a : "?",
                b ? b : "?");
        return;
    }
    if (d->rank < 0) return;
    if (d->rank != t->rank) {
        problem(c, NULL, 0, "initializer '%s' has rank %d but is declared with rank %d", t->name, t->rank, d->rank);
        return;
    }
    for (int i = 0; i < t->rank; i++)
        if (d->dims[i].value >= 0 && d->dims[i].param == NULL && d->dims[i].value != t->dims[i]) {
            problem(c, NULL, 0, "initializer '%s' has dimension %d of size %lld but is declared as %lld", t->name, i,
                    (long long)t->dims[i], (long long)d->dims[i].value);
            return;
        }
}

static void type_graph(ot_checker *c, const otter_graph *g, const ot_scope *parent) {
    ot_scope scope = {parent, {0}};
    const otter_value *lists[3] = {g->value_info, g->inputs, g->outputs};
    size_t counts[3] = {g->n_value_info, g->n_inputs, g->n_outputs};
    for (size_t l = 0; l < 3; l++)
        for (size_t i = 0; i < counts[l] && !stopped(c); i++) {
            const otter_value *v = &lists[l][i];
            if (ot_str_empty(v->name) || !v->has_type) continue;
            if (ot_strmap_put(&scope.names, v->name, (intptr_t)declared_type(c, &v->type)) != OTTER_OK)
                c->fatal = OTTER_ERR_NOMEM;
        }
    for (size_t i = 0; i < g->n_initializers && !stopped(c); i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) continue;
        const otter_type *d = declared_otter_type(g, t->name);
        if (d != NULL)
            check_initializer_type(c, t, d);
        else if (c->ir_version >= 4 && ot_strmap_put(&scope.names, t->name, (intptr_t)tensor_type(c, t)) != OTTER_OK)
            c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t i = 0; i < g->n_sparse_initializers && !stopped(c); i++) {
        otter_dtype dt;
        char *name = sparse_initializer_name(&g->sparse_initializers[i], &dt);
        const char *kept = name ? keep_string(c, name) : NULL;
        ot_free(name);
        const char *e = ot_type_elem_name(dt);
        if (kept == NULL || e == NULL || declared_otter_type(g, kept) != NULL) continue;
        char buf[64];
        snprintf(buf, sizeof buf, "sparse_tensor(%s)", e);
        const char *t = keep_string(c, buf);
        if (t && ot_strmap_put(&scope.names, kept, (intptr_t)t) != OTTER_OK) c->fatal = OTTER_ERR_NOMEM;
    }
    for (size_t ni = 0; ni < g->n_nodes && !stopped(c); ni++) type_node(c, g->nodes[ni], ni, &scope);
    ot_strmap_free(&scope.names);
}

/* ---- the model ----------------------------------------------------------------------------- */

static void check_model(ot_checker *c) {
    const otter_model *m = c->m;
    if (!m->has_ir_version || m->ir_version == 0) {
        problem(c, NULL, 0, "model has no ir_version");
        return;
    }
    if (m->ir_version > OT_CHECK_MAX_IR_VERSION) {
        problem(c, NULL, 0, "model ir_version %lld is newer than the checker's (%d)", (long long)m->ir_version,
                OT_CHECK_MAX_IR_VERSION);
        return;
    }
    for (size_t i = 0; i < m->n_metadata; i++)
        for (size_t j = 0; j < i; j++)
            if (ot_streq(m->metadata[i].key, m->metadata[j].key)) {
                problem(c, NULL, 0, "metadata key '%s' appears more than once",
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
                problem(c, NULL, 0, "domain '%s' is imported more than once (versions %lld and %lld)",
                        domain_label(c->opset_domains[i]), (long long)c->opset_versions[j],
                        (long long)c->opset_versions[i]);
                return;
            }
    if (m->ir_version >= 3) {
        if (m->n_opsets == 0) {
            problem(c, NULL, 0, "model has no opset_import (required for ir_version >= 3)");
            return;
        }
    } else if (m->n_opsets != 0) {
        problem(c, NULL, 0, "model with ir_version %lld < 3 cannot have opset_import", (long long)m->ir_version);
        return;
    } else {
        static const char *const def_domain[] = {""};
        static int64_t one = 1;
        c->n_opsets = 1;
        c->opset_domains[0] = def_domain[0];
        c->opset_versions[0] = one;
    }
    if (m->graph == NULL) {
        problem(c, NULL, 0, "model has no graph");
        return;
    }
    check_graph(c, m->graph, NULL, true);
}

/* Shape inference names the node at fault in its message ("... node 'name' (Op): ..."): fill the
 * last report entry's node and op_type from it. */
static void name_node_from_message(otter_check_report *r) {
    if (r == NULL || r->n == 0) return;
    ot_diag *d = &r->items[r->n - 1];
    const char *p = strstr(d->message, "node '");
    if (p == NULL) return;
    p += 6;
    const char *q = strstr(p, "' (");
    if (q == NULL) return;
    const char *e = strchr(q + 3, ')');
    if (e == NULL) return;
    char *name = ot_strndup(p, (size_t)(q - p));
    char *op = ot_strndup(q + 3, (size_t)(e - (q + 3)));
    if (name == NULL || op == NULL) { /* keep the empty ones */
        ot_free(name);
        ot_free(op);
        return;
    }
    ot_free(d->node);
    ot_free(d->op_type);
    d->node = name;
    d->op_type = op;
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
        problem(c, NULL, 0, "%s", otter_last_error());
        if (c->n_problems != before) name_node_from_message(c->opts->report);
    } else if (s == OTTER_ERR_UNSUPPORTED) {
        /* Not a problem of the model: check types against what is declared. */
        ot_log(OTTER_LOG_WARN, "checker: shape inference skipped: %s", otter_last_error());
        type_graph(c, c->m->graph, NULL);
    } else if (s != OTTER_OK) {
        c->fatal = s;
    } else {
        const otter_model *saved = c->m;
        c->m = copy;
        type_graph(c, copy->graph, NULL);
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
    for (size_t i = 0; i < c.n_strings; i++) ot_free(c.strings[i]);
    ot_free(c.strings);
    return result;
}
