/* Helpers shared by the graph tools: see edit_internal.h. Also otter_dtype_list and
 * otter_graph_add_prefix from otter/edit.h. */
#include <string.h>

#include "core/core.h"
#include "core/proto_extra.h"
#include "ir/edit_internal.h"
#include "otter/edit.h"

/* ---- names read through subgraphs ---- */

static otter_status graph_outer_reads(const otter_graph *g, ot_name_fn fn, void *user);

struct outer_ctx {
    const ot_strmap *defined;
    ot_name_fn fn;
    void *user;
};

static otter_status outer_filter(const char *name, void *user) {
    struct outer_ctx *c = user;
    if (ot_strmap_has(c->defined, name)) return OTTER_OK;
    return c->fn(name, c->user);
}

static otter_status graph_outer_reads(const otter_graph *g, ot_name_fn fn, void *user) {
    ot_strmap defined = {0};
    OT_TRY(ot_strmap_reserve(&defined, g->n_inputs + g->n_initializers + g->n_nodes));
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < g->n_inputs && s == OTTER_OK; i++) s = ot_strmap_put(&defined, g->inputs[i].name, 0);
    for (size_t i = 0; i < g->n_initializers && s == OTTER_OK; i++)
        if (g->initializers[i]->name) s = ot_strmap_put(&defined, g->initializers[i]->name, 0);
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
            if (!ot_str_empty(g->nodes[i]->outputs[j])) s = ot_strmap_put(&defined, g->nodes[i]->outputs[j], 0);
    struct outer_ctx c = {&defined, fn, user};
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++) s = ot_node_reads(g->nodes[i], outer_filter, &c);
    /* Graph outputs may name an outer tensor directly. */
    for (size_t i = 0; i < g->n_outputs && s == OTTER_OK; i++)
        if (!ot_str_empty(g->outputs[i].name)) s = outer_filter(g->outputs[i].name, &c);
    ot_strmap_free(&defined);
    return s;
}

otter_status ot_node_reads(const otter_node *n, ot_name_fn fn, void *user) {
    for (size_t i = 0; i < n->n_inputs; i++)
        if (!ot_str_empty(n->inputs[i])) OT_TRY(fn(n->inputs[i], user));
    for (size_t a = 0; a < n->n_attrs; a++) {
        const otter_attr *at = &n->attrs[a];
        if (at->g) OT_TRY(graph_outer_reads(at->g, fn, user));
        for (size_t k = 0; k < at->n_graphs; k++)
            if (at->graphs[k]) OT_TRY(graph_outer_reads(at->graphs[k], fn, user));
    }
    return OTTER_OK;
}

/* ---- renaming reads ---- */

static bool graph_defines(const otter_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_inputs; i++)
        if (ot_streq(g->inputs[i].name, name)) return true;
    for (size_t i = 0; i < g->n_initializers; i++)
        if (ot_streq(g->initializers[i]->name, name)) return true;
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs; j++)
            if (ot_streq(g->nodes[i]->outputs[j], name)) return true;
    return false;
}

static otter_status subgraph_rename_reads(otter_graph *g, const char *old_name, const char *new_name) {
    if (graph_defines(g, old_name)) return OTTER_OK; /* shadowed: reads inside mean the local one */
    OT_TRY(ot_graph_rename_reads(g, old_name, new_name));
    for (size_t i = 0; i < g->n_outputs; i++) {
        if (!ot_streq(g->outputs[i].name, old_name)) continue;
        char *s = ot_strdup(new_name);
        if (!s) return OT_NOMEM();
        ot_free(g->outputs[i].name);
        g->outputs[i].name = s;
    }
    return OTTER_OK;
}

otter_status ot_graph_rename_reads(otter_graph *g, const char *old_name, const char *new_name) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (!ot_streq(n->inputs[j], old_name)) continue;
            char *s = ot_strdup(new_name);
            if (!s) return OT_NOMEM();
            ot_free(n->inputs[j]);
            n->inputs[j] = s;
        }
        for (size_t a = 0; a < n->n_attrs; a++) {
            otter_attr *at = &n->attrs[a];
            if (at->g) OT_TRY(subgraph_rename_reads(at->g, old_name, new_name));
            for (size_t k = 0; k < at->n_graphs; k++)
                if (at->graphs[k]) OT_TRY(subgraph_rename_reads(at->graphs[k], old_name, new_name));
        }
    }
    return OTTER_OK;
}

/* ---- values ---- */

otter_status ot_values_push(otter_value **arr, size_t *n, size_t *cap, otter_value v) {
    OT_TRY(ot_grow((void **)arr, cap, *n + 1, sizeof **arr));
    (*arr)[(*n)++] = v;
    return OTTER_OK;
}

void ot_value_clear(otter_value *v) {
    ot_free(v->name);
    ot_free(v->doc_string);
    otter_type_clear(&v->type);
    ot_proto_extra_free(v->extra);
    memset(v, 0, sizeof *v);
}

otter_status ot_value_copy(otter_value *dst, const otter_value *src) {
    memset(dst, 0, sizeof *dst);
    dst->has_type = src->has_type;
    dst->name = ot_strdup(src->name);
    dst->doc_string = ot_strdup(src->doc_string);
    if (src->extra) dst->extra = ot_proto_extra_clone(src->extra);
    if ((src->name && !dst->name) || (src->doc_string && !dst->doc_string) || (src->extra && !dst->extra)) {
        ot_value_clear(dst);
        return OT_NOMEM();
    }
    otter_status s = otter_type_copy(&dst->type, &src->type);
    if (s != OTTER_OK) ot_value_clear(dst);
    return s;
}

otter_status ot_prefix_string(char **s, const char *prefix) {
    if (ot_str_empty(*s) || ot_str_empty(prefix)) return OTTER_OK;
    char *p = ot_sprintf("%s%s", prefix, *s);
    if (!p) return OT_NOMEM();
    ot_free(*s);
    *s = p;
    return OTTER_OK;
}

/* ---- public: prefixing, dtype list ---- */

otter_status otter_graph_add_prefix(otter_graph *g, const char *prefix, bool rename_nodes) {
    if (!g) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_add_prefix: graph is NULL");
    if (ot_str_empty(prefix)) return OTTER_OK;
    for (size_t i = 0; i < g->n_inputs; i++) OT_TRY(ot_prefix_string(&g->inputs[i].name, prefix));
    for (size_t i = 0; i < g->n_outputs; i++) OT_TRY(ot_prefix_string(&g->outputs[i].name, prefix));
    for (size_t i = 0; i < g->n_value_info; i++) OT_TRY(ot_prefix_string(&g->value_info[i].name, prefix));
    for (size_t i = 0; i < g->n_initializers; i++) OT_TRY(ot_prefix_string(&g->initializers[i]->name, prefix));
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        if (rename_nodes) OT_TRY(ot_prefix_string(&n->name, prefix));
        for (size_t j = 0; j < n->n_inputs; j++) OT_TRY(ot_prefix_string(&n->inputs[j], prefix));
        for (size_t j = 0; j < n->n_outputs; j++) OT_TRY(ot_prefix_string(&n->outputs[j], prefix));
        /* Subgraphs: renaming every name consistently keeps both their own names and the names
         * they read from this scope right. */
        for (size_t a = 0; a < n->n_attrs; a++) {
            otter_attr *at = &n->attrs[a];
            if (at->g) OT_TRY(otter_graph_add_prefix(at->g, prefix, rename_nodes));
            for (size_t k = 0; k < at->n_graphs; k++)
                if (at->graphs[k]) OT_TRY(otter_graph_add_prefix(at->graphs[k], prefix, rename_nodes));
        }
    }
    return OTTER_OK;
}

static const otter_dtype DTYPE_LIST[] = {OTTER_DTYPE_FLOAT,        OTTER_DTYPE_UINT8,
                                         OTTER_DTYPE_INT8,         OTTER_DTYPE_UINT16,
                                         OTTER_DTYPE_INT16,        OTTER_DTYPE_INT32,
                                         OTTER_DTYPE_INT64,        OTTER_DTYPE_STRING,
                                         OTTER_DTYPE_BOOL,         OTTER_DTYPE_FLOAT16,
                                         OTTER_DTYPE_DOUBLE,       OTTER_DTYPE_UINT32,
                                         OTTER_DTYPE_UINT64,       OTTER_DTYPE_COMPLEX64,
                                         OTTER_DTYPE_COMPLEX128,   OTTER_DTYPE_BFLOAT16,
                                         OTTER_DTYPE_FLOAT8E4M3FN, OTTER_DTYPE_FLOAT8E4M3FNUZ,
                                         OTTER_DTYPE_FLOAT8E5M2,   OTTER_DTYPE_FLOAT8E5M2FNUZ,
                                         OTTER_DTYPE_UINT4,        OTTER_DTYPE_INT4,
                                         OTTER_DTYPE_FLOAT4E2M1,   OTTER_DTYPE_FLOAT8E8M0,
                                         OTTER_DTYPE_UINT2,        OTTER_DTYPE_INT2};
_Static_assert(sizeof DTYPE_LIST / sizeof DTYPE_LIST[0] == OTTER_DTYPE_COUNT_ - 1, "every dtype listed once");

const otter_dtype *otter_dtype_list(size_t *count) {
    if (count) *count = sizeof DTYPE_LIST / sizeof DTYPE_LIST[0];
    return DTYPE_LIST;
}

/* ---- growable strings ---- */

void ot_sb_printf(ot_sb *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || ot_grow((void **)&b->data, &b->cap, b->len + (size_t)n + 1, 1) != OTTER_OK) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ot_sb_puts(ot_sb *b, const char *s) {
    if (b->failed) return;
    size_t n = strlen(s);
    if (ot_grow((void **)&b->data, &b->cap, b->len + n + 1, 1) != OTTER_OK) {
        b->failed = true;
        return;
    }
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

otter_status ot_sb_finish(ot_sb *b, char **out) {
    *out = NULL;
    if (!b->failed && !b->data) ot_sb_puts(b, "");
    if (b->failed) {
        ot_free(b->data);
        memset(b, 0, sizeof *b);
        return OT_NOMEM();
    }
    *out = b->data;
    memset(b, 0, sizeof *b);
    return OTTER_OK;
}
