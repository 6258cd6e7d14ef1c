/* Text form of a model or graph, like onnx.helper.printable_graph (see otter/print.h). */
#include <inttypes.h>
#include <string.h>

#include "core/core.h"
#include "ir/edit_internal.h"
#include "otter/print.h"

#define SMALL_TENSOR 10 /* tensors with at most this many elements are printed with their values */

static void put_type(ot_sb *b, const otter_type *t) {
    if (!t) {
        ot_sb_puts(b, "?");
        return;
    }
    switch (t->kind) {
    case OTTER_TYPE_NONE:
        ot_sb_puts(b, "?");
        return;
    case OTTER_TYPE_SEQUENCE:
        ot_sb_puts(b, "seq(");
        put_type(b, t->elem);
        ot_sb_puts(b, ")");
        return;
    case OTTER_TYPE_OPTIONAL:
        ot_sb_puts(b, "optional(");
        put_type(b, t->elem);
        ot_sb_puts(b, ")");
        return;
    case OTTER_TYPE_MAP:
        ot_sb_printf(b, "map(%s, ", otter_dtype_name(t->elem_type));
        put_type(b, t->elem);
        ot_sb_puts(b, ")");
        return;
    case OTTER_TYPE_SPARSE_TENSOR:
        ot_sb_puts(b, "sparse "); /* fall through */
    case OTTER_TYPE_TENSOR:
        ot_sb_puts(b, t->has_elem_type ? otter_dtype_name(t->elem_type) : "?");
        if (t->rank < 0) return;
        ot_sb_puts(b, "[");
        for (int i = 0; i < t->rank; i++) {
            const otter_dim *d = &t->dims[i];
            if (i) ot_sb_puts(b, ",");
            if (d->value >= 0)
                ot_sb_printf(b, "%" PRId64, d->value);
            else if (d->param)
                ot_sb_puts(b, d->param);
            else
                ot_sb_puts(b, "?");
        }
        ot_sb_puts(b, "]");
        return;
    }
    ot_sb_puts(b, "?");
}

otter_status otter_type_to_text(const otter_type *t, char **out) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_type_to_text: out is NULL");
    ot_sb b = {0};
    put_type(&b, t);
    return ot_sb_finish(&b, out);
}

static void put_quoted(ot_sb *b, const char *s, size_t len) {
    ot_sb_puts(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            ot_sb_printf(b, "\\%c", c);
        else if (c == '\n')
            ot_sb_puts(b, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            ot_sb_printf(b, "\\x%02x", c);
        else
            ot_sb_printf(b, "%c", c);
    }
    ot_sb_puts(b, "\"");
}

static void put_tensor_shape(ot_sb *b, const otter_tensor *t) {
    ot_sb_printf(b, "%s[", otter_dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++) ot_sb_printf(b, "%s%" PRId64, i ? "," : "", t->dims[i]);
    ot_sb_puts(b, "]");
}

static void put_tensor_values(ot_sb *b, const otter_tensor *t) {
    int64_t n = otter_tensor_numel(t);
    ot_sb_puts(b, " = [");
    for (int64_t i = 0; i < n; i++) {
        if (i) ot_sb_puts(b, ", ");
        switch (t->dtype) {
        case OTTER_DTYPE_FLOAT:
            ot_sb_printf(b, "%g", (double)((const float *)t->data)[i]);
            break;
        case OTTER_DTYPE_DOUBLE:
            ot_sb_printf(b, "%g", ((const double *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT8:
            ot_sb_printf(b, "%d", ((const int8_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_UINT8:
            ot_sb_printf(b, "%u", ((const uint8_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT16:
            ot_sb_printf(b, "%d", ((const int16_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_UINT16:
            ot_sb_printf(b, "%u", ((const uint16_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT32:
            ot_sb_printf(b, "%" PRId32, ((const int32_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_UINT32:
            ot_sb_printf(b, "%" PRIu32, ((const uint32_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_INT64:
            ot_sb_printf(b, "%" PRId64, ((const int64_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_UINT64:
            ot_sb_printf(b, "%" PRIu64, ((const uint64_t *)t->data)[i]);
            break;
        case OTTER_DTYPE_BOOL:
            ot_sb_puts(b, ((const uint8_t *)t->data)[i] ? "true" : "false");
            break;
        case OTTER_DTYPE_STRING: {
            const otter_bytes *s = &((const otter_bytes *)t->data)[i];
            put_quoted(b, s->data ? s->data : "", s->len);
            break;
        }
        case OTTER_DTYPE_COMPLEX64:
        case OTTER_DTYPE_COMPLEX128:
            ot_sb_puts(b, "...");
            i = n;
            break;
        default: /* float16, bfloat16, the float8 / float4 formats, 4- and 2-bit integers */
            ot_sb_printf(b, "%g", otter_tensor_value(t, i));
            break;
        }
    }
    ot_sb_puts(b, "]");
}

static void put_tensor(ot_sb *b, const otter_tensor *t) {
    ot_sb_puts(b, "<");
    put_tensor_shape(b, t);
    int64_t n = otter_tensor_numel(t);
    if (t->data && n > 0 && n <= SMALL_TENSOR) put_tensor_values(b, t);
    ot_sb_puts(b, ">");
}

static void put_attr_value(ot_sb *b, const otter_attr *a) {
    if (a->ref_attr_name) {
        ot_sb_printf(b, "@%s", a->ref_attr_name);
        return;
    }
    switch (a->type) {
    case OTTER_ATTR_FLOAT:
        ot_sb_printf(b, "%.9g", (double)a->f);
        break;
    case OTTER_ATTR_INT:
        ot_sb_printf(b, "%" PRId64, a->i);
        break;
    case OTTER_ATTR_STRING:
        put_quoted(b, a->s.data ? a->s.data : "", a->s.len);
        break;
    case OTTER_ATTR_TENSOR:
        if (a->t)
            put_tensor(b, a->t);
        else
            ot_sb_puts(b, "<tensor>");
        break;
    case OTTER_ATTR_GRAPH:
        ot_sb_printf(b, "<graph %s>", a->g && a->g->name ? a->g->name : "");
        break;
    case OTTER_ATTR_FLOATS:
        ot_sb_puts(b, "[");
        for (size_t i = 0; i < a->n_floats; i++) ot_sb_printf(b, "%s%.9g", i ? ", " : "", (double)a->floats[i]);
        ot_sb_puts(b, "]");
        break;
    case OTTER_ATTR_INTS:
        ot_sb_puts(b, "[");
        for (size_t i = 0; i < a->n_ints; i++) ot_sb_printf(b, "%s%" PRId64, i ? ", " : "", a->ints[i]);
        ot_sb_puts(b, "]");
        break;
    case OTTER_ATTR_STRINGS:
        ot_sb_puts(b, "[");
        for (size_t i = 0; i < a->n_strings; i++) {
            if (i) ot_sb_puts(b, ", ");
            put_quoted(b, a->strings[i].data ? a->strings[i].data : "", a->strings[i].len);
        }
        ot_sb_puts(b, "]");
        break;
    case OTTER_ATTR_TENSORS:
        ot_sb_puts(b, "[");
        for (size_t i = 0; i < a->n_tensors; i++) {
            if (i) ot_sb_puts(b, ", ");
            put_tensor(b, a->tensors[i]);
        }
        ot_sb_puts(b, "]");
        break;
    case OTTER_ATTR_GRAPHS:
        ot_sb_puts(b, "[");
        for (size_t i = 0; i < a->n_graphs; i++)
            ot_sb_printf(b, "%s<graph %s>", i ? ", " : "",
                         a->graphs[i] && a->graphs[i]->name ? a->graphs[i]->name : "");
        ot_sb_puts(b, "]");
        break;
    case OTTER_ATTR_SPARSE_TENSOR:
        ot_sb_puts(b, "<sparse tensor>");
        break;
    case OTTER_ATTR_SPARSE_TENSORS:
        ot_sb_printf(b, "[%zu sparse tensors]", a->n_sparse_tensors);
        break;
    case OTTER_ATTR_TYPE_PROTO:
        ot_sb_puts(b, "<type>");
        break;
    case OTTER_ATTR_TYPE_PROTOS:
        ot_sb_printf(b, "[%zu types]", a->n_type_protos);
        break;
    default:
        ot_sb_puts(b, "<undefined>");
        break;
    }
}

static void indent(ot_sb *b, int n) {
    for (int i = 0; i < n; i++) ot_sb_puts(b, " ");
}

static void put_value_line(ot_sb *b, const otter_value *v, int ind) {
    indent(b, ind);
    ot_sb_printf(b, "%%%s: ", v->name ? v->name : "");
    put_type(b, v->has_type ? &v->type : NULL);
    ot_sb_puts(b, "\n");
}

static void put_graph(ot_sb *b, const otter_graph *g, int ind);

static void put_node(ot_sb *b, const otter_node *n, int ind) {
    indent(b, ind);
    for (size_t i = 0; i < n->n_outputs; i++)
        ot_sb_printf(b, "%s%%%s", i ? ", " : "", n->outputs[i] ? n->outputs[i] : "");
    ot_sb_puts(b, n->n_outputs ? " = " : "");
    if (!ot_str_empty(n->domain)) ot_sb_printf(b, "%s.", n->domain);
    ot_sb_puts(b, n->op_type ? n->op_type : "?");
    if (n->n_attrs) {
        ot_sb_puts(b, "[");
        for (size_t a = 0; a < n->n_attrs; a++) {
            ot_sb_printf(b, "%s%s = ", a ? ", " : "", n->attrs[a].name ? n->attrs[a].name : "");
            put_attr_value(b, &n->attrs[a]);
        }
        ot_sb_puts(b, "]");
    }
    ot_sb_puts(b, "(");
    for (size_t i = 0; i < n->n_inputs; i++) {
        if (ot_str_empty(n->inputs[i]))
            ot_sb_printf(b, "%s_", i ? ", " : "");
        else
            ot_sb_printf(b, "%s%%%s", i ? ", " : "", n->inputs[i]);
    }
    ot_sb_puts(b, ")");
    if (!ot_str_empty(n->name)) ot_sb_printf(b, "    # %s", n->name);
    ot_sb_puts(b, "\n");
    for (size_t a = 0; a < n->n_attrs; a++) {
        const otter_attr *at = &n->attrs[a];
        if (at->g) {
            indent(b, ind + 2);
            ot_sb_printf(b, "%s:\n", at->name ? at->name : "");
            put_graph(b, at->g, ind + 4);
        }
        for (size_t k = 0; k < at->n_graphs; k++) {
            if (!at->graphs[k]) continue;
            indent(b, ind + 2);
            ot_sb_printf(b, "%s[%zu]:\n", at->name ? at->name : "", k);
            put_graph(b, at->graphs[k], ind + 4);
        }
    }
}

static void put_graph(ot_sb *b, const otter_graph *g, int ind) {
    indent(b, ind);
    ot_sb_printf(b, "graph %s (\n", g->name ? g->name : "");
    for (size_t i = 0; i < g->n_inputs; i++) put_value_line(b, &g->inputs[i], ind + 2);
    indent(b, ind);
    ot_sb_puts(b, ")");
    if (g->n_initializers) {
        ot_sb_puts(b, " initializers (\n");
        for (size_t i = 0; i < g->n_initializers; i++) {
            const otter_tensor *t = g->initializers[i];
            indent(b, ind + 2);
            ot_sb_printf(b, "%%%s: ", t->name ? t->name : "");
            put_tensor_shape(b, t);
            int64_t n = otter_tensor_numel(t);
            if (t->data && n > 0 && n <= SMALL_TENSOR) put_tensor_values(b, t);
            ot_sb_puts(b, "\n");
        }
        indent(b, ind);
        ot_sb_puts(b, ")");
    }
    ot_sb_puts(b, " {\n");
    for (size_t i = 0; i < g->n_nodes; i++) put_node(b, g->nodes[i], ind + 2);
    indent(b, ind + 2);
    ot_sb_puts(b, "return ");
    for (size_t i = 0; i < g->n_outputs; i++) {
        const otter_value *v = &g->outputs[i];
        ot_sb_printf(b, "%s%%%s: ", i ? ", " : "", v->name ? v->name : "");
        put_type(b, v->has_type ? &v->type : NULL);
    }
    ot_sb_puts(b, "\n");
    indent(b, ind);
    ot_sb_puts(b, "}\n");
}

otter_status otter_graph_to_text(const otter_graph *g, char **out) {
    if (!g || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_to_text: graph or out is NULL");
    ot_sb b = {0};
    put_graph(&b, g, 0);
    return ot_sb_finish(&b, out);
}

otter_status otter_model_to_text(const otter_model *m, char **out) {
    if (!m || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_model_to_text: model or out is NULL");
    ot_sb b = {0};
    if (m->has_ir_version) ot_sb_printf(&b, "ir_version: %" PRId64 "\n", m->ir_version);
    ot_sb_puts(&b, "opset_import:");
    for (size_t i = 0; i < m->n_opsets; i++)
        ot_sb_printf(&b, " %s %" PRId64 "%s", ot_str_empty(m->opsets[i].domain) ? "ai.onnx" : m->opsets[i].domain,
                     m->opsets[i].version, i + 1 < m->n_opsets ? "," : "");
    ot_sb_puts(&b, "\n");
    if (m->producer_name || m->producer_version)
        ot_sb_printf(&b, "producer: %s %s\n", m->producer_name ? m->producer_name : "",
                     m->producer_version ? m->producer_version : "");
    if (!ot_str_empty(m->domain)) ot_sb_printf(&b, "domain: %s\n", m->domain);
    if (m->has_model_version) ot_sb_printf(&b, "model_version: %" PRId64 "\n", m->model_version);
    for (size_t i = 0; i < m->n_metadata; i++)
        ot_sb_printf(&b, "metadata: %s = %s\n", m->metadata[i].key ? m->metadata[i].key : "",
                     m->metadata[i].value ? m->metadata[i].value : "");
    if (m->n_functions) ot_sb_printf(&b, "functions: %zu (not shown)\n", m->n_functions);
    if (m->graph) put_graph(&b, m->graph, 0);
    return ot_sb_finish(&b, out);
}
