/* otter_graph_topo_sort and otter_graph_clean: dead-node elimination, topological order,
 * deduplication of equal initializers, removal of unused initializers and value_info. */
#include <string.h>

#include "core/core.h"
#include "ir/edit_internal.h"
#include "otter/edit.h"

/* "'name' (Op)" or, for an unnamed node, "#i (Op) producing 'out'", in a buffer. */
static void node_label(char *buf, size_t cap, const otter_graph *g, size_t i) {
    const otter_node *n = g->nodes[i];
    if (!ot_str_empty(n->name))
        snprintf(buf, cap, "'%s' (%s)", n->name, n->op_type ? n->op_type : "?");
    else if (n->n_outputs > 0 && n->outputs[0])
        snprintf(buf, cap, "#%zu (%s) producing '%s'", i, n->op_type ? n->op_type : "?", n->outputs[0]);
    else
        snprintf(buf, cap, "#%zu (%s)", i, n->op_type ? n->op_type : "?");
}

/* ---- dependency edges between nodes ---- */

typedef struct deps {
    size_t n;
    size_t *pred_start, *pred; /* CSR: producers of the names node i reads (with repeats) */
    size_t *succ_start, *succ; /* CSR: readers of node i's outputs */
} deps;

static void deps_free(deps *d) {
    ot_free(d->pred_start);
    ot_free(d->pred);
    ot_free(d->succ_start);
    ot_free(d->succ);
    memset(d, 0, sizeof *d);
}

struct edge_ctx {
    const ot_strmap *producer;
    size_t reader;
    size_t *edges; /* pairs (from, to) */
    size_t n_edges, cap_edges;
};

static otter_status collect_edge(const char *name, void *user) {
    struct edge_ctx *c = user;
    intptr_t p;
    if (!ot_strmap_get(c->producer, name, &p)) return OTTER_OK; /* input, initializer or outer scope */
    OT_TRY(ot_grow((void **)&c->edges, &c->cap_edges, 2 * (c->n_edges + 1), sizeof *c->edges));
    c->edges[2 * c->n_edges] = p;
    c->edges[2 * c->n_edges + 1] = c->reader;
    c->n_edges++;
    return OTTER_OK;
}

/* Edges among the nodes with include[i] (all when include is NULL). */
static otter_status deps_build(deps *d, const otter_graph *g, const bool *include) {
    memset(d, 0, sizeof *d);
    size_t n = g->n_nodes;
    ot_strmap producer = {0};
    OT_TRY(ot_strmap_reserve(&producer, n));
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < n && s == OTTER_OK; i++) {
        if (include && !include[i]) continue;
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++) {
            const char *o = g->nodes[i]->outputs[j];
            if (!ot_str_empty(o) && !ot_strmap_has(&producer, o)) s = ot_strmap_put(&producer, o, i);
        }
    }
    struct edge_ctx c = {&producer, 0, NULL, 0, 0};
    for (size_t i = 0; i < n && s == OTTER_OK; i++) {
        if (include && !include[i]) continue;
        c.reader = i;
        s = ot_node_reads(g->nodes[i], collect_edge, &c);
    }
    ot_strmap_free(&producer);
    if (s == OTTER_OK) {
        d->n = n;
        d->pred_start = ot_calloc(n + 1, sizeof(size_t));
        d->succ_start = ot_calloc(n + 1, sizeof(size_t));
        d->pred = ot_calloc(c.n_edges, sizeof(size_t));
        d->succ = ot_calloc(c.n_edges, sizeof(size_t));
        if (!d->pred_start || !d->succ_start || !d->pred || !d->succ) s = OT_NOMEM();
    }
    if (s == OTTER_OK) {
        for (size_t e = 0; e < c.n_edges; e++) {
            d->succ_start[c.edges[2 * e] + 1]++;
            d->pred_start[c.edges[2 * e + 1] + 1]++;
        }
        for (size_t i = 0; i < n; i++) {
            d->succ_start[i + 1] += d->succ_start[i];
            d->pred_start[i + 1] += d->pred_start[i];
        }
        size_t *fill_s = ot_calloc(n + 1, sizeof(size_t)), *fill_p = ot_calloc(n + 1, sizeof(size_t));
        if (!fill_s || !fill_p)
            s = OT_NOMEM();
        else {
            for (size_t e = 0; e < c.n_edges; e++) {
                size_t from = c.edges[2 * e], to = c.edges[2 * e + 1];
                d->succ[d->succ_start[from] + fill_s[from]++] = to;
                d->pred[d->pred_start[to] + fill_p[to]++] = from;
            }
        }
        ot_free(fill_s);
        ot_free(fill_p);
    }
    ot_free(c.edges);
    if (s != OTTER_OK) deps_free(d);
    return s;
}

/* ---- a min-heap of node indices, so a sorted graph keeps its order ---- */

static void heap_push(size_t *h, size_t *n, size_t v) {
    size_t i = (*n)++;
    h[i] = v;
    while (i > 0 && h[(i - 1) / 2] > h[i]) {
        size_t p = (i - 1) / 2, t = h[p];
        h[p] = h[i];
        h[i] = t;
        i = p;
    }
}

static size_t heap_pop(size_t *h, size_t *n) {
    size_t top = h[0];
    h[0] = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && h[l] < h[m]) m = l;
        if (r < *n && h[r] < h[m]) m = r;
        if (m == i) break;
        size_t t = h[m];
        h[m] = h[i];
        h[i] = t;
        i = m;
    }
    return top;
}

/* The error for a cycle among the nodes not emitted: walk from one of them to a producer not
 * emitted until a node repeats; the nodes from its first visit on form the cycle. */
static otter_status cycle_error(const otter_graph *g, const deps *d, const bool *emitted, const bool *include) {
    size_t n = g->n_nodes, start = n;
    for (size_t i = 0; i < n && start == n; i++)
        if ((!include || include[i]) && !emitted[i]) start = i;
    OT_ASSERT(start < n);
    size_t *visit_pos = ot_malloc(n * sizeof(size_t));
    size_t *path = ot_malloc((n + 1) * sizeof(size_t));
    if (!visit_pos || !path) {
        ot_free(visit_pos);
        ot_free(path);
        return OT_NOMEM();
    }
    for (size_t i = 0; i < n; i++) visit_pos[i] = SIZE_MAX;
    size_t len = 0, u = start;
    while (visit_pos[u] == SIZE_MAX) {
        visit_pos[u] = len;
        path[len++] = u;
        size_t next = n;
        for (size_t k = d->pred_start[u]; k < d->pred_start[u + 1] && next == n; k++)
            if (!emitted[d->pred[k]]) next = d->pred[k];
        OT_ASSERT(next < n); /* a node left over has a producer left over */
        u = next;
    }
    /* path[visit_pos[u] ..] is the cycle, each node reading from the next; print it in data-flow
     * order (producer first). */
    char msg[768] = "", label[200];
    size_t first = visit_pos[u];
    for (size_t k = len; k-- > first;) {
        node_label(label, sizeof label, g, path[k]);
        size_t used = strlen(msg);
        snprintf(msg + used, sizeof msg - used, "%s -> ", label);
    }
    node_label(label, sizeof label, g, path[len - 1]);
    size_t used = strlen(msg);
    snprintf(msg + used, sizeof msg - used, "%s", label);
    ot_free(visit_pos);
    ot_free(path);
    return ot_error(OTTER_ERR_INVALID, "graph '%s': nodes form a cycle: %s", g->name ? g->name : "", msg);
}

/* Topological order of the nodes with include[i] into order[] (count in *n_order). */
static otter_status compute_order(const otter_graph *g, const bool *include, size_t *order, size_t *n_order) {
    size_t n = g->n_nodes;
    deps d;
    OT_TRY(deps_build(&d, g, include));
    size_t *indeg = ot_calloc(n + 1, sizeof(size_t));
    size_t *heap = ot_calloc(n + 1, sizeof(size_t));
    bool *emitted = ot_calloc(n + 1, sizeof(bool));
    otter_status s = OTTER_OK;
    if (!indeg || !heap || !emitted) s = OT_NOMEM();
    size_t nh = 0, count = 0, want = 0;
    if (s == OTTER_OK) {
        for (size_t i = 0; i < n; i++) {
            if (include && !include[i]) continue;
            want++;
            indeg[i] = d.pred_start[i + 1] - d.pred_start[i];
            if (indeg[i] == 0) heap_push(heap, &nh, i);
        }
        while (nh > 0) {
            size_t u = heap_pop(heap, &nh);
            emitted[u] = true;
            order[count++] = u;
            for (size_t k = d.succ_start[u]; k < d.succ_start[u + 1]; k++)
                if (--indeg[d.succ[k]] == 0) heap_push(heap, &nh, d.succ[k]);
        }
        if (count < want) s = cycle_error(g, &d, emitted, include);
    }
    *n_order = count;
    ot_free(indeg);
    ot_free(heap);
    ot_free(emitted);
    deps_free(&d);
    return s;
}

static otter_status sort_subgraphs(otter_graph *g) {
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        for (size_t a = 0; a < n->n_attrs; a++) {
            otter_attr *at = &n->attrs[a];
            if (at->g) OT_TRY(otter_graph_topo_sort(at->g));
            for (size_t k = 0; k < at->n_graphs; k++)
                if (at->graphs[k]) OT_TRY(otter_graph_topo_sort(at->graphs[k]));
        }
    }
    return OTTER_OK;
}

/* Keep the nodes listed in order[] (in that order) and free the others. */
static otter_status apply_order(otter_graph *g, const size_t *order, size_t n_order) {
    size_t n = g->n_nodes;
    otter_node **nodes = ot_calloc(n + 1, sizeof *nodes);
    bool *kept = ot_calloc(n + 1, sizeof(bool));
    if (!nodes || !kept) {
        ot_free(nodes);
        ot_free(kept);
        return OT_NOMEM();
    }
    for (size_t k = 0; k < n_order; k++) {
        nodes[k] = g->nodes[order[k]];
        kept[order[k]] = true;
    }
    for (size_t i = 0; i < n; i++)
        if (!kept[i]) otter_node_free(g->nodes[i]);
    memcpy(g->nodes, nodes, n_order * sizeof *nodes);
    g->n_nodes = n_order;
    ot_free(nodes);
    ot_free(kept);
    return OTTER_OK;
}

otter_status otter_graph_topo_sort(otter_graph *g) {
    if (!g) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_topo_sort: graph is NULL");
    OT_TRY(sort_subgraphs(g));
    size_t *order = ot_calloc(g->n_nodes + 1, sizeof(size_t));
    if (!order) return OT_NOMEM();
    size_t n_order = 0;
    otter_status s = compute_order(g, NULL, order, &n_order);
    if (s == OTTER_OK) s = apply_order(g, order, n_order);
    ot_free(order);
    return s;
}

/* ---- clean ---- */

struct live_ctx {
    const ot_strmap *producer;
    bool *live;
    size_t *stack;
    size_t n_stack;
};

static otter_status mark_needed(const char *name, void *user) {
    struct live_ctx *c = user;
    intptr_t p;
    if (!ot_strmap_get(c->producer, name, &p) || c->live[p]) return OTTER_OK;
    c->live[p] = true;
    c->stack[c->n_stack++] = p; /* each node pushed at most once: stack holds n entries */
    return OTTER_OK;
}

/* live[i]: some graph output depends on node i. */
static otter_status find_live(const otter_graph *g, bool *live) {
    ot_strmap producer = {0};
    OT_TRY(ot_strmap_reserve(&producer, g->n_nodes));
    otter_status s = OTTER_OK;
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++)
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++) {
            const char *o = g->nodes[i]->outputs[j];
            if (!ot_str_empty(o) && !ot_strmap_has(&producer, o)) s = ot_strmap_put(&producer, o, i);
        }
    struct live_ctx c = {&producer, live, ot_calloc(g->n_nodes + 1, sizeof(size_t)), 0};
    if (s == OTTER_OK && !c.stack) s = OT_NOMEM();
    for (size_t i = 0; i < g->n_outputs && s == OTTER_OK; i++)
        if (!ot_str_empty(g->outputs[i].name)) s = mark_needed(g->outputs[i].name, &c);
    while (s == OTTER_OK && c.n_stack > 0) s = ot_node_reads(g->nodes[c.stack[--c.n_stack]], mark_needed, &c);
    ot_free(c.stack);
    ot_strmap_free(&producer);
    return s;
}

static size_t tensor_hash(const otter_tensor *t) {
    unsigned char head[2 + 8 * OTTER_MAX_RANK]; /* dtype, rank, then each dim's bytes, little-endian */
    size_t n = 0;
    head[n++] = (unsigned char)t->dtype;
    head[n++] = (unsigned char)t->rank;
    for (int i = 0; i < t->rank; i++)
        for (int b = 0; b < 8; b++) head[n++] = (unsigned char)((uint64_t)t->dims[i] >> (8 * b));
    uint64_t h = ot_fnv1a(OT_FNV1A_OFFSET, head, n);
    if (t->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *s = t->data;
        int64_t count = otter_tensor_numel(t);
        for (int64_t i = 0; s && i < count; i++) h = ot_fnv1a(h, s[i].data, s[i].len);
    } else if (t->data) {
        h = ot_fnv1a(h, t->data, otter_tensor_nbytes(t));
    }
    return h;
}

typedef struct hashed {
    size_t hash, index;
} hashed;

static int cmp_hashed(const void *a, const void *b) {
    const hashed *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static bool name_is_io(const otter_graph *g, const char *name) {
    return otter_graph_find_input(g, name) >= 0 || otter_graph_find_output(g, name) >= 0;
}

/* Remove initializers with remove[i] set. */
static void drop_initializers(otter_graph *g, const bool *remove) {
    size_t w = 0;
    for (size_t i = 0; i < g->n_initializers; i++) {
        if (remove[i])
            otter_tensor_free(g->initializers[i]);
        else
            g->initializers[w++] = g->initializers[i];
    }
    g->n_initializers = w;
}

static otter_status dedup_initializers(otter_graph *g, size_t *n_dedup) {
    size_t n = g->n_initializers;
    if (n < 2) return OTTER_OK;
    hashed *h = ot_calloc(n, sizeof *h);
    bool *dup = ot_calloc(n, sizeof(bool));
    otter_status s = OTTER_OK;
    if (!h || !dup) s = OT_NOMEM();
    size_t m = 0;
    for (size_t i = 0; i < n && s == OTTER_OK; i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name) || name_is_io(g, t->name)) continue;
        h[m].hash = tensor_hash(t);
        h[m++].index = i;
    }
    if (s == OTTER_OK) qsort(h, m, sizeof *h, cmp_hashed);
    for (size_t a = 0; a < m && s == OTTER_OK; a++) {
        if (dup[h[a].index]) continue;
        const otter_tensor *rep = g->initializers[h[a].index];
        for (size_t b = a + 1; b < m && h[b].hash == h[a].hash && s == OTTER_OK; b++) {
            otter_tensor *t = g->initializers[h[b].index];
            if (dup[h[b].index] || !otter_tensor_equal(rep, t)) continue;
            s = ot_graph_rename_reads(g, t->name, rep->name);
            if (s == OTTER_OK) {
                dup[h[b].index] = true;
                (*n_dedup)++;
            }
        }
    }
    if (s == OTTER_OK) drop_initializers(g, dup);
    ot_free(h);
    ot_free(dup);
    return s;
}

static otter_status note_read(const char *name, void *user) { return ot_strmap_put(user, name, 0); }

static otter_status drop_unused(otter_graph *g, otter_clean_stats *st) {
    ot_strmap read = {0}, produced = {0};
    OT_TRY(ot_strmap_reserve(&read, g->n_nodes * 2));
    otter_status s = ot_strmap_reserve(&produced, g->n_nodes);
    if (s != OTTER_OK) {
        ot_strmap_free(&read);
        return s;
    }
    for (size_t i = 0; i < g->n_nodes && s == OTTER_OK; i++) {
        s = ot_node_reads(g->nodes[i], note_read, &read);
        for (size_t j = 0; j < g->nodes[i]->n_outputs && s == OTTER_OK; j++)
            if (!ot_str_empty(g->nodes[i]->outputs[j])) s = ot_strmap_put(&produced, g->nodes[i]->outputs[j], 0);
    }
    for (size_t i = 0; i < g->n_outputs && s == OTTER_OK; i++)
        if (!ot_str_empty(g->outputs[i].name)) s = ot_strmap_put(&read, g->outputs[i].name, 0);
    bool *remove = s == OTTER_OK ? ot_calloc(g->n_initializers + 1, sizeof(bool)) : NULL;
    if (s == OTTER_OK && !remove) s = OT_NOMEM();
    if (s == OTTER_OK) {
        for (size_t i = 0; i < g->n_initializers; i++) {
            const char *name = g->initializers[i]->name;
            remove[i] = !ot_strmap_has(&read, name) && otter_graph_find_input(g, name) < 0;
            if (remove[i]) st->initializers_removed++;
        }
        drop_initializers(g, remove);
        /* value_info: only for tensors a node produces, once, and not graph outputs. */
        ot_strmap seen = {0};
        s = ot_strmap_reserve(&seen, g->n_value_info);
        size_t w = 0;
        for (size_t i = 0; i < g->n_value_info && s == OTTER_OK; i++) {
            otter_value *v = &g->value_info[i];
            bool keep = v->name && ot_strmap_has(&produced, v->name) && !ot_strmap_has(&seen, v->name) &&
                        otter_graph_find_output(g, v->name) < 0;
            if (keep) s = ot_strmap_put(&seen, v->name, 0);
            if (keep && s == OTTER_OK)
                g->value_info[w++] = *v;
            else {
                ot_value_clear(v);
                st->value_info_removed++;
            }
        }
        if (s == OTTER_OK) g->n_value_info = w;
        ot_strmap_free(&seen);
    }
    ot_free(remove);
    ot_strmap_free(&read);
    ot_strmap_free(&produced);
    return s;
}

static otter_status clean_graph(otter_graph *g, otter_clean_stats *st) {
    /* Subgraphs first: what they stop reading from this scope may free nodes here. */
    for (size_t i = 0; i < g->n_nodes; i++) {
        otter_node *n = g->nodes[i];
        for (size_t a = 0; a < n->n_attrs; a++) {
            otter_attr *at = &n->attrs[a];
            if (at->g) OT_TRY(clean_graph(at->g, st));
            for (size_t k = 0; k < at->n_graphs; k++)
                if (at->graphs[k]) OT_TRY(clean_graph(at->graphs[k], st));
        }
    }
    size_t n = g->n_nodes;
    bool *live = ot_calloc(n + 1, sizeof(bool));
    size_t *order = ot_calloc(n + 1, sizeof(size_t));
    otter_status s = (!live || !order) ? OT_NOMEM() : OTTER_OK;
    size_t n_order = 0;
    if (s == OTTER_OK) s = find_live(g, live);
    if (s == OTTER_OK) s = compute_order(g, live, order, &n_order);
    if (s == OTTER_OK) s = apply_order(g, order, n_order);
    if (s == OTTER_OK) st->nodes_removed += n - n_order;
    ot_free(live);
    ot_free(order);
    if (s == OTTER_OK) s = dedup_initializers(g, &st->initializers_deduplicated);
    if (s == OTTER_OK) s = drop_unused(g, st);
    return s;
}

otter_status otter_graph_clean(otter_graph *g, otter_clean_stats *stats) {
    if (!g) return ot_error(OTTER_ERR_ARGUMENT, "otter_graph_clean: graph is NULL");
    otter_clean_stats st = {0};
    otter_status s = clean_graph(g, &st);
    if (stats) *stats = st;
    return s;
}
