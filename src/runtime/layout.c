/* Channel-blocked layout for chains of convolutions: see layout.h.
 *
 * Three steps: find the nodes that can run on blocks (in node order, so a pooling or Concat joins
 * when what it reads does) and join each to what it reads into chains; keep the chains that pay;
 * rewrite. The maps borrow the graph's strings, so every decision is made (as node indices and
 * fresh names) before the first name changes. */
#include "runtime/layout.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/strmap.h"
#include "runtime/ops/channel_blocks.h"
#include "runtime/ops/conv_depthwise.h"
#include "runtime/ops/conv_direct.h"

/* What a node becomes: nothing; a blocked convolution or MaxPool; an operator that runs on blocks as it is
 * (unary: X blocked, the other inputs not; all: every input blocked); GlobalAveragePool reading blocks and
 * writing its planar [N, C, 1, 1]. */
enum { LAY_NONE, LAY_CONV, LAY_POOL, LAY_UNARY, LAY_ALL, LAY_GAP };

typedef struct lay {
    otter_graph *g;
    ot_strmap producer; /* value -> index of the top-level node writing it */
    ot_strmap inits;    /* initializer name -> index */
    ot_strmap inputs;   /* graph input names (an initializer that is one can change) */
    ot_strmap reads;    /* value -> readers: node inputs at any depth and graph outputs */
    ot_strmap names;    /* every name (for fresh ones) */
    int *kind;          /* per node: LAY_* */
    bool *back;         /* per blocked node: its output is read outside the blocks (a FromChannelBlocks) */
    size_t *root;       /* per node: union-find parent (its chain) */
    int64_t block;      /* channels a block (ot_channel_block) */
} lay;

static bool default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

static bool is_op(const otter_node *n, const char *domain, const char *op) {
    const bool dom = domain ? n->domain && !strcmp(n->domain, domain) : default_domain(n->domain);
    return dom && !strcmp(n->op_type, op);
}

static intptr_t get(const ot_strmap *m, const char *k) {
    intptr_t v;
    return k && k[0] && ot_strmap_get(m, k, &v) ? v : -1;
}

static otter_status count_reads(lay *l, const otter_graph *g) {
    for (size_t k = 0; k < g->n_nodes; k++) {
        const otter_node *n = g->nodes[k];
        for (size_t i = 0; i < n->n_inputs; i++)
            if (n->inputs[i][0]) {
                const intptr_t c = get(&l->reads, n->inputs[i]);
                OT_TRY(ot_strmap_put(&l->reads, n->inputs[i], c < 0 ? 1 : c + 1));
                OT_TRY(ot_strmap_put(&l->names, n->inputs[i], 1));
            }
        for (size_t o = 0; o < n->n_outputs; o++)
            if (n->outputs[o][0]) OT_TRY(ot_strmap_put(&l->names, n->outputs[o], 1));
        for (size_t a = 0; a < n->n_attrs; a++) {
            const otter_attr *at = &n->attrs[a];
            if (at->type == OTTER_ATTR_GRAPH && at->g) OT_TRY(count_reads(l, at->g));
            if (at->type == OTTER_ATTR_GRAPHS)
                for (size_t i = 0; i < at->n_graphs; i++) OT_TRY(count_reads(l, at->graphs[i]));
        }
    }
    return OTTER_OK;
}

/* Every value of ints attribute `name` (absent: true) is at least lo. */
static bool ints_at_least(const otter_node *n, const char *name, int64_t lo) {
    const otter_attr *a = otter_node_attr(n, name);
    for (size_t i = 0; a && i < a->n_ints; i++)
        if (a->ints[i] < lo) return false;
    return true;
}

/* Product of ints attribute `name` (absent: 1). */
static int64_t ints_product(const otter_node *n, const char *name) {
    const otter_attr *a = otter_node_attr(n, name);
    int64_t p = 1;
    for (size_t i = 0; a && i < a->n_ints; i++) p *= a->ints[i];
    return p;
}

/* Whether value v is written by a node whose output is blocked (a GlobalAveragePool's is planar). */
static bool from_blocks(const lay *l, const char *v) {
    const intptr_t p = get(&l->producer, v);
    return p >= 0 && l->kind[p] != LAY_NONE && l->kind[p] != LAY_GAP;
}

/* A convolution the channel-lane kernel or the channel-block depthwise code runs on blocks (see layout.h). */
static bool conv_ok(const lay *l, const otter_node *n) {
    const bool fused = is_op(n, "com.otter", "FusedConv");
    if (!(is_op(n, NULL, "Conv") || fused) || n->n_outputs != 1 || n->n_inputs < 2 || !n->inputs[0][0]) return false;
    if (fused && (otter_node_attr_int(n, "maxpool_2x2", 0) || otter_node_attr_int(n, "channel_blocks", 0)))
        return false;
    if (n->n_inputs > 3 && n->inputs[3][0] && !from_blocks(l, n->inputs[3])) return false; /* a planar sum input */
    const intptr_t wi = get(&l->inits, n->inputs[1]);
    if (wi < 0 || get(&l->inputs, n->inputs[1]) >= 0) return false;
    const otter_tensor *w = l->g->initializers[wi];
    /* a Concat of convolutions (fuse.c): its channels, every part's; input 1 is the first part's weight */
    const otter_attr *parts = fused ? otter_node_attr(n, "kernel_parts") : NULL;
    int64_t M = parts ? 0 : w->dims[0];
    for (size_t i = 0; parts && i < parts->n_ints; i += OT_CONV_PART_INTS) M += parts->ints[i];
    if (w->dtype != OTTER_DTYPE_FLOAT || w->rank != 4 || M == 0 || M % l->block != 0) return false;
    const int64_t group = otter_node_attr_int(n, "group", 1);
    /* one group (the channel-lane kernel) or one channel a group (the channel-block depthwise code) */
    const bool depthwise = group == w->dims[0] && w->dims[1] == 1 && w->dims[2] * w->dims[3] <= OT_DW_MAX_TAPS &&
                           ints_product(n, "strides") <= OT_DW_MAX_TAPS;
    return (group == 1 || depthwise) && ints_at_least(n, "pads", 0);
}

/* MaxPool's Y alone, 2-D, a window the channel-block pooling takes, over a blocked value. */
static bool pool_ok(const lay *l, const otter_node *n) {
    if (!is_op(n, NULL, "MaxPool") || n->n_inputs != 1 || (n->n_outputs > 1 && n->outputs[1][0])) return false;
    const otter_attr *k = otter_node_attr(n, "kernel_shape");
    return k && k->n_ints == 2 && ints_product(n, "kernel_shape") <= OT_DW_MAX_TAPS &&
           ints_product(n, "strides") <= OT_DW_MAX_TAPS && ints_at_least(n, "pads", 0) &&
           ints_at_least(n, "dilations", 1) && from_blocks(l, n->inputs[0]);
}

/* n (one output) reads blocked values only. */
static bool all_blocked(const lay *l, const otter_node *n) {
    if (n->n_outputs != 1 || n->n_inputs == 0) return false;
    for (size_t i = 0; i < n->n_inputs; i++)
        if (!from_blocks(l, n->inputs[i])) return false;
    return true;
}

/* Elementwise operators that run on blocks as they are, X their only blocked input. */
static bool unary_ok(const lay *l, const otter_node *n) {
    static const char *const ops[] = {"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (is_op(n, NULL, ops[i])) return n->n_outputs == 1 && n->n_inputs >= 1 && from_blocks(l, n->inputs[0]);
    return false;
}

/* Concat on axis 1 and an Add or Mul of two blocked values run on blocks as they are (two planar
 * shapes with channel counts that are multiples of the block broadcast only when the counts are equal, so
 * their blocks line up). */
static int kind_of(const lay *l, const otter_node *n) {
    if (conv_ok(l, n)) return LAY_CONV;
    if (pool_ok(l, n)) return LAY_POOL;
    if (unary_ok(l, n)) return LAY_UNARY;
    if (!all_blocked(l, n)) return LAY_NONE;
    if (is_op(n, NULL, "Concat") && otter_node_attr_int(n, "axis", 0) == 1) return LAY_ALL;
    if ((is_op(n, NULL, "Add") || is_op(n, NULL, "Mul")) && n->n_inputs == 2) return LAY_ALL;
    if (is_op(n, NULL, "GlobalAveragePool")) return LAY_GAP;
    return LAY_NONE;
}

/* Whether input i of a node of kind k reads blocks: a convolution's X (when its producer writes
 * blocks) and Z, a unary operator's X, every input of the others. */
static bool blocked_input(const lay *l, const otter_node *n, int k, size_t i) {
    if (k == LAY_NONE || i >= n->n_inputs || !n->inputs[i][0]) return false;
    if (k == LAY_CONV) return (i == 0 && from_blocks(l, n->inputs[0])) || i == 3;
    return k == LAY_UNARY ? i == 0 : true;
}

static size_t find(size_t *root, size_t k) {
    while (root[k] != k) k = root[k] = root[root[k]];
    return k;
}

/* A name not in the graph, made from v and suffix (the caller frees it). */
static char *fresh_name(lay *l, const char *v, const char *suffix) {
    const size_t size = strlen(v) + strlen(suffix) + 24;
    char *s = ot_malloc(size);
    if (!s) return NULL;
    snprintf(s, size, "%s%s", v, suffix);
    for (unsigned i = 1; ot_strmap_has(&l->names, s); i++) snprintf(s, size, "%s%s_%u", v, suffix, i);
    return s;
}

/* What the rewrite needs, decided while the maps are valid. */
typedef struct lay_plan {
    char **blocked_name;   /* per blocked node: its output's blocked name */
    intptr_t **input_from; /* per blocked node, per input: the blocked producer's index, or -1 (a planar input) */
    intptr_t *pool_of;     /* per convolution: the MaxPool that becomes part of it, or -1 */
    bool *pooled;          /* per MaxPool: it becomes part of the convolution it reads */
} lay_plan;

static void plan_free(lay_plan *p, size_t n_nodes) {
    for (size_t k = 0; k < n_nodes; k++) {
        if (p->blocked_name) ot_free(p->blocked_name[k]);
        if (p->input_from) ot_free(p->input_from[k]);
    }
    ot_free(p->blocked_name), ot_free(p->input_from), ot_free(p->pool_of), ot_free(p->pooled);
}

/* A blocked MaxPool k joins the convolution it reads when nothing else reads that convolution's result and it has
 * no sum input: the convolution pools each image while its result is in cache (SqueezeNet at batch 32 read its
 * 7x7 stride-2 stem's 10 MB result back from memory for the pooling). */
static bool pool_joins(const lay *l, const lay_plan *p, size_t k) {
    const intptr_t c = l->kind[k] == LAY_POOL ? p->input_from[k][0] : -1;
    if (c < 0 || l->kind[c] != LAY_CONV) return false;
    const otter_node *conv = l->g->nodes[c];
    return get(&l->reads, conv->outputs[0]) == 1 && !l->back[c] && (conv->n_inputs < 4 || !conv->inputs[3][0]);
}

/* The convolutions a node of kind LAY_CONV stands for: a Concat of convolutions joined by fuse.c (kernel_parts)
 * counts as those convolutions, and as the Concat's reads of them (blocked-to-blocked edges), so that the chain
 * rule below weighs it as it weighed them before the join. */
static size_t conv_parts(const otter_node *n) {
    const otter_attr *parts = otter_node_attr(n, "kernel_parts");
    return parts ? parts->n_ints / OT_CONV_PART_INTS : 1;
}

/* Steps one and two: l->kind marks the nodes of the chains kept. */
static otter_status choose(lay *l, size_t *n_blocked) {
    const otter_graph *g = l->g;
    const size_t n = g->n_nodes;
    for (size_t k = 0; k < n; k++) {
        const otter_node *nd = g->nodes[k];
        l->kind[k] = kind_of(l, nd);
        l->root[k] = k;
        for (size_t i = 0; i < nd->n_inputs; i++)
            if (blocked_input(l, nd, l->kind[k], i))
                l->root[find(l->root, k)] = find(l->root, (size_t)get(&l->producer, nd->inputs[i]));
    }
    /* per chain: convolutions, blocked-to-blocked edges and reorders */
    size_t *convs = ot_calloc(n, sizeof *convs), *edges = ot_calloc(n, sizeof *edges),
           *reorders = ot_calloc(n, sizeof *reorders);
    ot_strmap inner_reads = {0};
    otter_status s = convs && edges && reorders ? OTTER_OK : OT_NOMEM();
    for (size_t k = 0; s == OTTER_OK && k < n; k++) {
        if (l->kind[k] == LAY_NONE) continue;
        const size_t r = find(l->root, k);
        if (l->kind[k] == LAY_CONV) {
            const size_t parts = conv_parts(g->nodes[k]);
            convs[r] += parts;
            edges[r] += parts > 1 ? parts : 0;
        }
        for (size_t i = 0; s == OTTER_OK && i < g->nodes[k]->n_inputs; i++) {
            if (!blocked_input(l, g->nodes[k], l->kind[k], i)) continue;
            const char *v = g->nodes[k]->inputs[i];
            const intptr_t c = get(&inner_reads, v);
            s = ot_strmap_put(&inner_reads, v, c < 0 ? 1 : c + 1);
            edges[r]++;
        }
    }
    /* a chain's readers are all in it, so what a kept chain's values have read outside stays as counted */
    for (size_t k = 0; s == OTTER_OK && k < n; k++)
        if (l->kind[k] != LAY_NONE && l->kind[k] != LAY_GAP) {
            const char *v = g->nodes[k]->outputs[0];
            l->back[k] = get(&l->reads, v) > (get(&inner_reads, v) > 0 ? get(&inner_reads, v) : 0);
            reorders[find(l->root, k)] += l->back[k];
        }
    *n_blocked = 0;
    for (size_t k = 0; s == OTTER_OK && k < n; k++) {
        const size_t r = find(l->root, k);
        if (l->kind[k] != LAY_NONE && !(convs[r] >= 2 && edges[r] >= 2 * reorders[r])) l->kind[k] = LAY_NONE;
        *n_blocked += l->kind[k] != LAY_NONE;
    }
    ot_free(convs), ot_free(edges), ot_free(reorders);
    ot_strmap_free(&inner_reads);
    return s;
}

/* The rewrite's decisions for the kept chains (names fresh against the graph's). */
static otter_status plan(lay *l, lay_plan *p) {
    const otter_graph *g = l->g;
    const size_t n = g->n_nodes;
    p->blocked_name = ot_calloc(n, sizeof *p->blocked_name);
    p->input_from = ot_calloc(n, sizeof *p->input_from);
    p->pool_of = ot_malloc(n * sizeof *p->pool_of);
    p->pooled = ot_calloc(n, sizeof *p->pooled);
    if (!p->blocked_name || !p->input_from || !p->pool_of || !p->pooled) return OT_NOMEM();
    for (size_t k = 0; k < n; k++) p->pool_of[k] = -1;
    otter_status s = OTTER_OK;
    for (size_t k = 0; s == OTTER_OK && k < n; k++) {
        if (l->kind[k] == LAY_NONE) continue;
        const otter_node *nd = g->nodes[k];
        if (!(p->input_from[k] = ot_malloc((nd->n_inputs + 1) * sizeof(intptr_t)))) s = OT_NOMEM();
        for (size_t i = 0; s == OTTER_OK && i < nd->n_inputs; i++)
            p->input_from[k][i] = blocked_input(l, nd, l->kind[k], i) ? get(&l->producer, nd->inputs[i]) : -1;
        if (l->kind[k] == LAY_GAP) continue; /* its output stays planar */
        if (s == OTTER_OK && !(p->blocked_name[k] = fresh_name(l, nd->outputs[0], "_blocks"))) s = OT_NOMEM();
        if (s == OTTER_OK) s = ot_strmap_put(&l->names, p->blocked_name[k], 1);
        if (s == OTTER_OK && pool_joins(l, p, k)) p->pooled[k] = true, p->pool_of[p->input_from[k][0]] = k;
    }
    return s;
}

/* A com.otter FromChannelBlocks node (from -> to), appended to nodes. */
static otter_status unblock_node(const char *from, const char *to, otter_node **nodes, size_t *count) {
    otter_node *r;
    OT_TRY(otter_node_create(&r, "FromChannelBlocks", to, 1, &from, 1, &to));
    otter_status s = otter_node_set_domain(r, "com.otter");
    if (s != OTTER_OK) {
        otter_node_free(r);
        return s;
    }
    nodes[(*count)++] = r;
    return OTTER_OK;
}

/* MaxPool pool's attributes on convolution conv, each as maxpool_<name> (nn_conv.c reads them). */
static otter_status take_pool_attrs(otter_node *conv, const otter_node *pool) {
    char name[64];
    for (size_t i = 0; i < pool->n_attrs; i++) {
        const otter_attr *a = &pool->attrs[i];
        snprintf(name, sizeof name, "maxpool_%s", a->name);
        if (a->type == OTTER_ATTR_INT)
            OT_TRY(otter_node_set_attr_int(conv, name, a->i));
        else if (a->type == OTTER_ATTR_INTS)
            OT_TRY(otter_node_set_attr_ints(conv, name, a->n_ints, a->ints));
        else if (a->type == OTTER_ATTR_STRING)
            OT_TRY(otter_node_set_attr_string(conv, name, otter_node_attr_string(pool, a->name, "")));
    }
    return OTTER_OK;
}

static otter_status set_string(char **slot, const char *v) {
    char *c = ot_strdup(v);
    if (!c) return OT_NOMEM();
    ot_free(*slot);
    *slot = c;
    return OTTER_OK;
}

/* Step three: the new node list, a FromChannelBlocks after each blocked value read outside, a MaxPool that joins
 * its convolution (p->pooled) gone into it: the convolution writes the MaxPool's result. */
static otter_status rewrite(otter_graph *g, const int *kind, const bool *back, const lay_plan *p, int64_t block) {
    const size_t n = g->n_nodes;
    otter_node **nodes = ot_calloc(2 * n + 1, sizeof *nodes);
    bool *made = ot_calloc(2 * n + 1, sizeof *made); /* nodes[i] is a new FromChannelBlocks */
    if (!nodes || !made) {
        ot_free(nodes), ot_free(made);
        return OT_NOMEM();
    }
    size_t count = 0;
    otter_status s = OTTER_OK;
    for (size_t k = 0; s == OTTER_OK && k < n; k++) {
        otter_node *nd = g->nodes[k];
        if (p->pooled[k]) continue;
        nodes[count++] = nd;
        if (kind[k] == LAY_NONE) continue;
        for (size_t i = 0; s == OTTER_OK && i < nd->n_inputs; i++)
            if (p->input_from[k][i] >= 0) s = set_string(&nd->inputs[i], p->blocked_name[p->input_from[k][i]]);
        const char *op = kind[k] == LAY_CONV   ? "FusedConv"
                         : kind[k] == LAY_POOL ? "BlockedMaxPool"
                         : kind[k] == LAY_GAP  ? "BlockedGlobalAveragePool"
                                               : NULL;
        if (s == OTTER_OK && op) s = set_string(&nd->op_type, op);
        if (s == OTTER_OK && op) s = otter_node_set_domain(nd, "com.otter");
        if (s == OTTER_OK && kind[k] == LAY_CONV) s = otter_node_set_attr_int(nd, "channel_blocks", block);
        const intptr_t q = p->pool_of[k]; /* the result's node: the MaxPool that joins, or this one */
        const size_t r = q >= 0 ? (size_t)q : k;
        if (s == OTTER_OK && q >= 0) s = take_pool_attrs(nd, g->nodes[q]);
        if (s != OTTER_OK) break;
        if (kind[k] == LAY_GAP) continue;
        char *planar = nd->outputs[0];
        const char *result = q >= 0 ? g->nodes[q]->outputs[0] : planar; /* the planar name readers outside use */
        if (!(nd->outputs[0] = ot_strdup(p->blocked_name[r]))) {
            nd->outputs[0] = planar;
            s = OT_NOMEM();
        }
        if (s != OTTER_OK) break;
        if (back[r]) {
            made[count] = true;
            s = unblock_node(nd->outputs[0], result, nodes, &count);
        }
        ot_free(planar);
    }
    if (s != OTTER_OK) { /* the graph keeps its nodes (some changed: the caller drops the copy) */
        for (size_t i = 0; i < count; i++)
            if (made[i]) otter_node_free(nodes[i]);
        ot_free(nodes), ot_free(made);
        return s;
    }
    for (size_t k = 0; k < n; k++)
        if (p->pooled[k]) otter_node_free(g->nodes[k]);
    ot_free(made), ot_free(g->nodes);
    g->nodes = nodes, g->n_nodes = g->cap_nodes = count;
    return OTTER_OK;
}

otter_status ot_layout_channel_blocks(otter_graph *g, size_t *n_blocked) {
    *n_blocked = 0;
    lay l = {.g = g, .block = ot_channel_block()};
    if (!l.block || g->n_nodes == 0) return OTTER_OK;
    lay_plan p = {0};
    l.kind = ot_calloc(g->n_nodes, sizeof *l.kind);
    l.root = ot_calloc(g->n_nodes, sizeof *l.root);
    l.back = ot_calloc(g->n_nodes, sizeof *l.back);
    otter_status s = l.kind && l.root && l.back ? count_reads(&l, g) : OT_NOMEM();
    for (size_t i = 0; s == OTTER_OK && i < g->n_outputs; i++) {
        const intptr_t c = get(&l.reads, g->outputs[i].name);
        s = ot_strmap_put(&l.reads, g->outputs[i].name, c < 0 ? 1 : c + 1);
    }
    for (size_t i = 0; s == OTTER_OK && i < g->n_initializers; i++)
        s = ot_strmap_put(&l.inits, g->initializers[i]->name, (intptr_t)i);
    for (size_t i = 0; s == OTTER_OK && i < g->n_inputs; i++) {
        s = ot_strmap_put(&l.inputs, g->inputs[i].name, (intptr_t)i);
        if (s == OTTER_OK) s = ot_strmap_put(&l.names, g->inputs[i].name, 1);
    }
    for (size_t k = 0; s == OTTER_OK && k < g->n_nodes; k++)
        for (size_t o = 0; s == OTTER_OK && o < g->nodes[k]->n_outputs; o++)
            if (g->nodes[k]->outputs[o][0]) s = ot_strmap_put(&l.producer, g->nodes[k]->outputs[o], (intptr_t)k);
    if (s == OTTER_OK) s = choose(&l, n_blocked);
    if (s == OTTER_OK && *n_blocked) s = plan(&l, &p);
    ot_strmap_free(&l.producer), ot_strmap_free(&l.inits), ot_strmap_free(&l.inputs), ot_strmap_free(&l.reads),
        ot_strmap_free(&l.names);
    const size_t n = g->n_nodes;
    if (s == OTTER_OK && *n_blocked) s = rewrite(g, l.kind, l.back, &p, l.block);
    plan_free(&p, n);
    ot_free(l.kind), ot_free(l.root), ot_free(l.back);
    return s;
}
