/* The session: binds a model's graph to kernels once, then runs it many times.
 *
 * Create: one slot per tensor name (graph inputs, initializers, node outputs; names a subgraph
 * reads from an enclosing graph are OUTER slots pointing at the parent session's slot), each
 * node's kernel from the operator table at the model's opset for its domain, optimizations
 * (Identity / inference Dropout become aliases, nodes over constants run once and their outputs
 * become CONST slots), liveness (the last node reading each value, subgraph reads included) and a
 * sub-session per graph attribute.
 * Run: bind and check inputs, execute nodes in order, each value released after its last reader;
 * outputs are copied to the caller. A run whose input shapes match the plan places every output in
 * the arena (plan.c); otherwise values go to the heap, their sizes are recorded and a new plan is
 * made at the end of the run.
 * Values: a slot holds a tensor (cur), a sequence (seq, owned by the slot when a kernel made it,
 * borrowed when it is the caller's or an enclosing graph's) or NONE (an optional without a value).
 * Sequences live on the heap, outside the plan; only kernels flagged OT_OP_VALUES see them. */
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__ /* defined by the headers above */
#include <malloc.h>
#endif

#include "core/core.h"
#include "otter/io.h"
#include "runtime/fuse.h"
#include "runtime/session.h"

/* Where zero-byte tensors point (never written). */
static _Alignas(OT_ARENA_ALIGN) unsigned char g_empty[OT_ARENA_ALIGN];

/* ---- names ---------------------------------------------------------------------------------- */

/* Names g reads but does not define (recursively through nested subgraphs), in first-use order. */
static otter_status free_vars(const otter_graph *g, ot_strmap *out, const char ***list, size_t *n, size_t *cap) {
    ot_strmap def = {0};
    otter_status st = OTTER_OK;
    for (size_t i = 0; i < g->n_inputs && !st; i++) st = ot_strmap_put(&def, g->inputs[i].name, 0);
    for (size_t i = 0; i < g->n_initializers && !st; i++)
        if (g->initializers[i]->name) st = ot_strmap_put(&def, g->initializers[i]->name, 0);
    for (size_t k = 0; k < g->n_nodes && !st; k++)
        for (size_t o = 0; o < g->nodes[k]->n_outputs && !st; o++)
            if (g->nodes[k]->outputs[o][0]) st = ot_strmap_put(&def, g->nodes[k]->outputs[o], 0);
    for (size_t k = 0; k < g->n_nodes && !st; k++) {
        const otter_node *nd = g->nodes[k];
        const char **names = NULL;
        size_t nn = 0, nc = 0;
        for (size_t i = 0; i < nd->n_inputs && !st; i++) {
            const char *name = nd->inputs[i];
            if (!name[0] || ot_strmap_get(&def, name, NULL) || ot_strmap_get(out, name, NULL)) continue;
            if (!(st = ot_strmap_put(out, name, 0)) && !(st = ot_grow((void **)list, cap, *n + 1, sizeof **list)))
                (*list)[(*n)++] = name;
        }
        for (size_t a = 0; a < nd->n_attrs && !st; a++) {
            const otter_attr *at = &nd->attrs[a];
            size_t ng = at->type == OTTER_ATTR_GRAPH    ? (at->g ? 1 : 0)
                        : at->type == OTTER_ATTR_GRAPHS ? at->n_graphs
                                                        : 0;
            for (size_t gi = 0; gi < ng && !st; gi++) {
                const otter_graph *sub = at->type == OTTER_ATTR_GRAPH ? at->g : at->graphs[gi];
                ot_strmap inner = {0};
                st = free_vars(sub, &inner, &names, &nn, &nc);
                ot_strmap_free(&inner);
            }
        }
        for (size_t i = 0; i < nn && !st; i++) {
            if (ot_strmap_get(&def, names[i], NULL) || ot_strmap_get(out, names[i], NULL)) continue;
            if (!(st = ot_strmap_put(out, names[i], 0)) && !(st = ot_grow((void **)list, cap, *n + 1, sizeof **list)))
                (*list)[(*n)++] = names[i];
        }
        ot_free(names);
    }
    ot_strmap_free(&def);
    return st;
}

/* The slot of a name in this session's table, or OT_NO_INDEX. */
static size_t table_find(const otter_session *s, const char *name) {
    intptr_t i;
    return ot_strmap_get(&s->names, name, &i) ? (size_t)i : OT_NO_INDEX;
}

static otter_status add_slot(otter_session *s, const char *name, ot_slot_kind kind, size_t *out) {
    OT_TRY(ot_grow((void **)&s->slots, &s->cap_slots, s->n_slots + 1, sizeof *s->slots));
    ot_slot *sl = &s->slots[s->n_slots];
    memset(sl, 0, sizeof *sl);
    sl->name = name;
    sl->kind = kind;
    sl->producer = OT_NO_INDEX;
    sl->last_use = OT_NO_INDEX;
    *out = s->n_slots++;
    if (name[0]) OT_TRY(ot_strmap_put(&s->names, name, (intptr_t)*out));
    return OTTER_OK;
}

/* Find a name here or in an enclosing graph (then an OUTER slot is made for it). */
static otter_status resolve(otter_session *s, const char *name, size_t *out) {
    size_t i = table_find(s, name);
    if (i != OT_NO_INDEX) {
        *out = i;
        return OTTER_OK;
    }
    size_t pi;
    if (!s->parent || resolve(s->parent, name, &pi) != OTTER_OK)
        return ot_error(OTTER_ERR_INVALID, "'%s' is not defined", name);
    OT_TRY(add_slot(s, name, OT_SLOT_OUTER, &i));
    s->slots[i].outer_session = s->parent;
    s->slots[i].outer_slot = pi;
    *out = i;
    return OTTER_OK;
}

/* An alias: an extra slot entry would break "one slot per name", so an alias is a slot of kind
 * OUTER pointing into this same session. */
static otter_status add_alias(otter_session *s, const char *name, size_t target) {
    size_t i;
    OT_TRY(add_slot(s, name, OT_SLOT_OUTER, &i));
    s->slots[i].outer_session = s;
    s->slots[i].outer_slot = target;
    return OTTER_OK;
}

/* Follow aliases and outer references to the slot that holds the value. */
static ot_slot *slot_target(otter_session *s, size_t i) {
    ot_slot *sl = &s->slots[i];
    while (sl->kind == OT_SLOT_OUTER) sl = &sl->outer_session->slots[sl->outer_slot];
    return sl;
}

/* ---- node labels and errors ------------------------------------------------------------------ */

static bool default_domain(const char *d) { return ot_str_empty(d) || strcmp(d, "ai.onnx") == 0; }

static void node_label(const otter_node *n, size_t index, char *buf, size_t cap) {
    const char *dom = default_domain(n->domain) ? "" : n->domain;
    const char *sep = dom[0] ? "." : "";
    if (!ot_str_empty(n->name))
        snprintf(buf, cap, "'%s' (%s%s%s)", n->name, dom, sep, n->op_type);
    else if (n->n_outputs > 0)
        snprintf(buf, cap, "#%zu (%s%s%s, output '%s')", index, dom, sep, n->op_type, n->outputs[0]);
    else
        snprintf(buf, cap, "#%zu (%s%s%s)", index, dom, sep, n->op_type);
}

otter_status ot_ctx_error(const ot_kernel_ctx *ctx, otter_status st, const char *fmt, ...) {
    char msg[768], label[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const ot_exec_node *rn = ot_exec_node_of(ctx);
    node_label(ctx->node, ctx->runtime ? rn->index : 0, label, sizeof label);
    if (ctx->runtime) ((otter_session *)ctx->runtime)->err_named = true;
    return ot_error(st, "node %s: %s", label, msg);
}

static int64_t model_opset(const otter_model *m, const char *domain) {
    for (size_t i = 0; i < m->n_opsets; i++) {
        const char *d = m->opsets[i].domain;
        bool same = default_domain(d) ? default_domain(domain) : (!default_domain(domain) && strcmp(d, domain) == 0);
        if (same) return m->opsets[i].version;
    }
    return 0;
}

/* ---- value memory ---------------------------------------------------------------------------- */

static void release_data(ot_slot *sl) {
    if (sl->is_string && sl->cur == &sl->tensor && sl->tensor.data && sl->tensor.data != g_empty) {
        otter_bytes *b = sl->tensor.data;
        for (int64_t i = 0, n = otter_tensor_numel(&sl->tensor); i < n; i++) {
            ot_free(b[i].data);
            b[i].data = NULL;
        }
    }
    ot_free(sl->heap);
    sl->heap = NULL;
    sl->tensor.data = NULL;
    sl->cur = NULL;
    if (sl->seq_owned) otter_sequence_free(sl->seq);
    sl->seq = NULL;
    sl->seq_owned = false;
    sl->none = false;
}

static bool slot_has_value(const ot_slot *sl) { return sl->cur || sl->seq || sl->none; }

static otter_arg slot_arg(const ot_slot *sl) {
    if (sl->cur) return otter_arg_of_tensor(sl->cur);
    if (sl->seq) return otter_arg_of_sequence(sl->seq);
    if (sl->none) return otter_arg_none();
    return (otter_arg){0};
}

static const char *arg_kind_name(otter_arg_kind k) {
    switch (k) {
    case OTTER_ARG_TENSOR:
        return "a tensor";
    case OTTER_ARG_SEQUENCE:
        return "a sequence";
    case OTTER_ARG_NONE:
        return "an optional without a value";
    default:
        return "no value";
    }
}

otter_tensor *ot_ctx_output(ot_kernel_ctx *ctx, size_t i, otter_dtype dtype, int rank, const int64_t *dims) {
    otter_session *s = ctx->runtime;
    ot_exec_node *rn = ot_exec_node_of(ctx);
    if (i >= ctx->n_outputs) {
        ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu requested, the node has %zu", i, ctx->n_outputs);
        return NULL;
    }
    if (dtype <= OTTER_DTYPE_UNDEFINED || dtype >= OTTER_DTYPE_COUNT_ ||
        (dtype != OTTER_DTYPE_STRING && otter_dtype_size(dtype) == 0)) {
        ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output %zu: element type %d", i, (int)dtype);
        return NULL;
    }
    if (rank < 0 || rank > OTTER_MAX_RANK) {
        ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output %zu: rank %d (otter supports up to %d)", i, rank,
                     OTTER_MAX_RANK);
        return NULL;
    }
    size_t nbytes = dtype == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(dtype);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0) {
            ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: negative dimension %lld", i, (long long)dims[d]);
            return NULL;
        }
        if (!ot_mul_size(nbytes, (size_t)dims[d], &nbytes) || nbytes > ((size_t)1 << 46)) {
            ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: size overflows", i);
            return NULL;
        }
    }
    ot_slot *sl = &s->slots[rn->out_slots[i]];
    release_data(sl);
    otter_tensor *t = &sl->tensor;
    t->name = (char *)(uintptr_t)sl->name;
    t->dtype = dtype;
    t->rank = rank;
    for (int d = 0; d < rank; d++) t->dims[d] = dims[d];
    t->owns_data = false;
    t->extra = NULL;
    sl->size = nbytes;
    sl->is_string = dtype == OTTER_DTYPE_STRING;
    if (nbytes == 0) {
        t->data = g_empty;
    } else if (!s->folding && s->have_plan && sl->planned && nbytes <= sl->plan_size) {
        t->data = s->arena + sl->offset;
    } else {
        /* outside the plan (a first run): take over a dying input's heap block where the planner
         * would share its buffer, so the run's peak stays near the plan's */
        size_t src = i == 0 && !s->folding ? ot_inplace_source(s, rn, sl) : OT_NO_INDEX;
        ot_slot *in = src != OT_NO_INDEX ? &s->slots[src] : NULL;
        if (in && in->heap && in->size >= nbytes) {
            sl->heap = in->heap;
            in->heap = NULL; /* its tensor still reads the block until the node is done */
            s->heap_live -= in->size - nbytes;
        } else {
            sl->heap = ot_malloc(nbytes);
            if (sl->heap && !s->folding) s->heap_live += nbytes;
        }
        if (s->heap_live > s->stats.heap_peak_bytes) s->stats.heap_peak_bytes = s->heap_live;
        if (!sl->heap) {
            ot_ctx_error(ctx, OTTER_ERR_NOMEM, "output %zu: out of memory (%zu bytes)", i, nbytes);
            return NULL;
        }
        t->data = sl->heap;
        if (!s->folding) s->n_fallbacks++;
    }
    if (sl->is_string) memset(t->data, 0, nbytes);
    sl->cur = t;
    rn->out_ptrs[i] = t;
    return t;
}

void *ot_ctx_scratch(ot_kernel_ctx *ctx, size_t nbytes) {
    otter_session *s = ctx->runtime;
    ot_exec_node *rn = ot_exec_node_of(ctx);
    if (nbytes == 0) return g_empty;
    size_t need = (nbytes + OT_ARENA_ALIGN - 1) / OT_ARENA_ALIGN * OT_ARENA_ALIGN;
    if (need < nbytes) {
        ot_ctx_error(ctx, OTTER_ERR_INVALID, "scratch of %zu bytes overflows", nbytes);
        return NULL;
    }
    size_t off = rn->scratch_used;
    rn->scratch_used += need;
    if (rn->scratch_used > rn->scratch_size) rn->scratch_size = rn->scratch_used;
    if (!s->folding && s->have_plan && rn->scratch_planned && rn->scratch_used <= rn->scratch_plan)
        return s->arena + rn->scratch_offset + off;
    if (ot_grow((void **)&rn->scratch_heap, &rn->cap_scratch_heap, rn->n_scratch_heap + 1, sizeof(void *)) !=
        OTTER_OK) {
        ot_ctx_error(ctx, OTTER_ERR_NOMEM, "out of memory for scratch");
        return NULL;
    }
    /* over-allocate so the block can be aligned like the arena's */
    unsigned char *p = ot_malloc(need + OT_ARENA_ALIGN);
    if (!p) {
        ot_ctx_error(ctx, OTTER_ERR_NOMEM, "out of memory for %zu bytes of scratch", nbytes);
        return NULL;
    }
    rn->scratch_heap[rn->n_scratch_heap++] = p;
    if (!s->folding) s->n_fallbacks++;
    return (void *)(((uintptr_t)p + OT_ARENA_ALIGN - 1) / OT_ARENA_ALIGN * OT_ARENA_ALIGN);
}

/* ---- sequences and optionals for kernels ---------------------------------------------------- */

otter_arg ot_ctx_input_arg(const ot_kernel_ctx *ctx, size_t i) {
    const ot_exec_node *rn = ot_exec_node_of(ctx);
    if (i >= ctx->n_inputs || rn->in_slots[i] == OT_NO_INDEX) return (otter_arg){0};
    return slot_arg(slot_target(ctx->runtime, rn->in_slots[i]));
}

/* Output i's slot with its old value released, or NULL (error set). */
static ot_slot *output_slot(ot_kernel_ctx *ctx, size_t i) {
    if (i >= ctx->n_outputs) {
        ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu requested, the node has %zu", i, ctx->n_outputs);
        return NULL;
    }
    otter_session *s = ctx->runtime;
    ot_exec_node *rn = ot_exec_node_of(ctx);
    ot_slot *sl = &s->slots[rn->out_slots[i]];
    release_data(sl);
    sl->size = 0;
    sl->is_string = false;
    rn->out_ptrs[i] = NULL;
    return sl;
}

otter_sequence *ot_ctx_output_sequence(ot_kernel_ctx *ctx, size_t i, otter_dtype elem_type) {
    ot_slot *sl = output_slot(ctx, i);
    if (!sl) return NULL;
    otter_sequence *q = NULL;
    if (otter_sequence_create(&q, elem_type) != OTTER_OK) {
        ot_ctx_error(ctx, OTTER_ERR_NOMEM, "output %zu: %s", i, otter_last_error());
        return NULL;
    }
    sl->seq = q;
    sl->seq_owned = true;
    return q;
}

otter_status ot_ctx_output_none(ot_kernel_ctx *ctx, size_t i) {
    ot_slot *sl = output_slot(ctx, i);
    if (!sl) return OTTER_ERR_INVALID;
    sl->none = true;
    return OTTER_OK;
}

otter_status ot_ctx_output_arg(ot_kernel_ctx *ctx, size_t i, otter_arg *v) {
    switch (v->kind) {
    case OTTER_ARG_TENSOR: {
        const otter_tensor *src = v->tensor;
        if (!src) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: tensor is NULL", i);
        otter_tensor *t = ot_ctx_output(ctx, i, src->dtype, src->rank, src->dims);
        if (!t) return OTTER_ERR_NOMEM; /* the type and shape are a valid tensor's: memory is what failed */
        int64_t n = otter_tensor_numel(src);
        if (src->dtype == OTTER_DTYPE_STRING) {
            const otter_bytes *sb = src->data;
            otter_bytes *db = t->data;
            for (int64_t k = 0; k < n; k++) {
                db[k].data = ot_strndup(sb[k].data ? sb[k].data : "", sb[k].len);
                if (!db[k].data) return ot_ctx_error(ctx, OTTER_ERR_NOMEM, "output %zu: out of memory", i);
                db[k].len = sb[k].len;
            }
        } else if (n) {
            memcpy(t->data, src->data, otter_tensor_nbytes(src));
        }
        return OTTER_OK;
    }
    case OTTER_ARG_SEQUENCE: {
        if (!v->sequence) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: sequence is NULL", i);
        ot_slot *sl = output_slot(ctx, i);
        if (!sl) return OTTER_ERR_INVALID;
        sl->seq = v->sequence;
        sl->seq_owned = true;
        v->sequence = NULL;
        return OTTER_OK;
    }
    case OTTER_ARG_NONE:
        return ot_ctx_output_none(ctx, i);
    default:
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: no value", i);
    }
}

otter_status ot_ctx_output_sequence_inplace(ot_kernel_ctx *ctx, size_t o, size_t i) {
    otter_session *s = ctx->runtime;
    ot_exec_node *rn = ot_exec_node_of(ctx);
    if (i >= ctx->n_inputs || rn->in_slots[i] == OT_NO_INDEX)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is omitted", i);
    ot_slot *src = slot_target(s, rn->in_slots[i]);
    if (!src->seq) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is not a sequence", i);
    ot_slot *dst = output_slot(ctx, o);
    if (!dst) return OTTER_ERR_INVALID;
    bool here = src >= s->slots && src < s->slots + s->n_slots;
    if (!here || src->kind != OT_SLOT_VALUE || !src->seq_owned) {
        /* the caller's (or an enclosing graph's) value, or a VALUE borrowing one: alive for the
         * whole run */
        dst->seq = src->seq;
        dst->seq_owned = false;
    } else if (src->seq_owned && src->last_use == dst->producer) {
        /* dies at this node: the output takes it over */
        dst->seq = src->seq;
        dst->seq_owned = true;
        src->seq_owned = false;
    } else {
        otter_status st = ot_seq_clone(&dst->seq, src->seq);
        if (st != OTTER_OK) return ot_ctx_error(ctx, st, "output %zu: %s", o, otter_last_error());
        dst->seq_owned = true;
    }
    return OTTER_OK;
}

void ot_parallel_for(const ot_kernel_ctx *ctx, int64_t n, int64_t grain, ot_range_fn fn, void *arg) {
    const otter_session *s = ctx ? ctx->runtime : NULL;
    ot_pool_run(s ? s->pool : NULL, n, grain, fn, arg);
}

/* ---- running one node ------------------------------------------------------------------------ */

static void free_scratch(ot_exec_node *rn) {
    for (size_t i = 0; i < rn->n_scratch_heap; i++) ot_free(rn->scratch_heap[i]);
    rn->n_scratch_heap = 0;
    rn->scratch_used = 0;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static otter_status exec_node(otter_session *s, ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    for (size_t i = 0; i < nd->n_inputs; i++) {
        if (rn->in_slots[i] == OT_NO_INDEX) {
            rn->in_ptrs[i] = NULL;
            continue;
        }
        ot_slot *src = slot_target(s, rn->in_slots[i]);
        /* (a CONST's header lives in the slot array, which grows while nodes are folded at create) */
        if (src->kind == OT_SLOT_CONST) src->cur = &src->tensor;
        if (!slot_has_value(src)) {
            char label[256];
            node_label(nd, rn->index, label, sizeof label);
            s->err_named = true;
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' has no value (its producer did not write it)",
                            label, nd->inputs[i]);
        }
        if (!src->cur && !(rn->def->flags & OT_OP_VALUES)) {
            char label[256];
            node_label(nd, rn->index, label, sizeof label);
            s->err_named = true;
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' is %s; the operator takes tensors", label,
                            nd->inputs[i], arg_kind_name(slot_arg(src).kind));
        }
        rn->in_ptrs[i] = src->cur;
    }
    for (size_t i = 0; i < nd->n_outputs; i++) rn->out_ptrs[i] = NULL;
    s->err_named = false;
    uint64_t t0 = s->opts.profile ? now_ns() : 0;
    otter_status st = rn->def->run(&rn->ctx);
    if (s->opts.profile) rn->prof_calls++, rn->prof_ns += now_ns() - t0;
    free_scratch(rn);
    if (st != OTTER_OK && !s->err_named) {
        char label[256];
        node_label(nd, rn->index, label, sizeof label);
        ot_error_context(st, "node %s: ", label);
        s->err_named = true;
    }
    return st;
}

/* ---- create ---------------------------------------------------------------------------------- */

static otter_status build(otter_session *s);

static bool is_const_slot(const otter_session *s, size_t i) {
    const ot_slot *sl = &s->slots[i];
    if (sl->kind == OT_SLOT_CONST) return true;
    return sl->kind == OT_SLOT_INIT && !sl->decl && !s->opts.no_fold_initializers;
}

void **ot_ctx_cache(ot_kernel_ctx *ctx, void (*free_fn)(void *)) {
    ot_exec_node *rn = ot_exec_node_of(ctx);
    rn->cache_free = free_fn;
    return &rn->cache;
}

bool ot_ctx_input_constant(const ot_kernel_ctx *ctx, size_t i) {
    const ot_exec_node *rn = ot_exec_node_of(ctx);
    return i < ctx->n_inputs && rn->in_slots[i] != OT_NO_INDEX && is_const_slot(ctx->runtime, rn->in_slots[i]);
}

/* Dropout that is the identity: no mask output used, not in training mode. */
static bool inference_dropout(const otter_session *s, const otter_node *nd, int64_t opset) {
    if (nd->n_outputs > 1 && nd->outputs[1][0]) return false;
    if (opset < 7 && otter_node_attr_int(nd, "is_test", 0) == 0) return false;
    if (opset >= 12 && nd->n_inputs > 2 && nd->inputs[2][0]) {
        size_t i = table_find(s, nd->inputs[2]);
        if (i == OT_NO_INDEX || !is_const_slot(s, i)) return false;
        const otter_tensor *t = s->slots[i].kind == OT_SLOT_CONST ? &s->slots[i].tensor : s->slots[i].init;
        if (!t || t->dtype != OTTER_DTYPE_BOOL || otter_tensor_numel(t) != 1 || ((const uint8_t *)t->data)[0])
            return false;
    }
    return nd->n_inputs >= 1 && nd->inputs[0][0];
}

static bool foldable(const otter_session *s, const ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    if (!default_domain(nd->domain) || (rn->def->flags & (OT_OP_NOFOLD | OT_OP_VALUES)) || nd->n_outputs == 0)
        return false;
    if (strncmp(nd->op_type, "Random", 6) == 0 || strcmp(nd->op_type, "Multinomial") == 0 ||
        strcmp(nd->op_type, "Bernoulli") == 0 || strcmp(nd->op_type, "Dropout") == 0)
        return false;
    if (rn->n_subs) return false;
    for (size_t a = 0; a < nd->n_attrs; a++)
        if (nd->attrs[a].type == OTTER_ATTR_GRAPH || nd->attrs[a].type == OTTER_ATTR_GRAPHS) return false;
    for (size_t i = 0; i < nd->n_inputs; i++)
        if (rn->in_slots[i] != OT_NO_INDEX && !is_const_slot(s, rn->in_slots[i])) return false;
    return true;
}

/* Run a node over constants now; on success its outputs become CONST slots. */
static bool try_fold(otter_session *s, ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    s->folding = true;
    otter_status st = exec_node(s, rn);
    s->folding = false;
    bool ok = st == OTTER_OK;
    for (size_t o = 0; ok && o < nd->n_outputs; o++) ok = s->slots[rn->out_slots[o]].cur != NULL;
    for (size_t o = 0; o < nd->n_outputs; o++) {
        ot_slot *sl = &s->slots[rn->out_slots[o]];
        if (ok) {
            sl->kind = OT_SLOT_CONST;
            sl->tensor.owns_data = false;
            s->stats.constant_bytes += sl->size;
        } else {
            release_data(sl);
        }
    }
    if (!ok) otter_clear_error();
    return ok;
}

static otter_status graph_attrs(const otter_node *nd, size_t *n, const otter_graph ***out) {
    *n = 0;
    *out = NULL;
    size_t cap = 0;
    for (size_t a = 0; a < nd->n_attrs; a++) {
        const otter_attr *at = &nd->attrs[a];
        if (at->type == OTTER_ATTR_GRAPH && at->g) {
            OT_TRY(ot_grow((void **)out, &cap, *n + 1, sizeof **out));
            (*out)[(*n)++] = at->g;
        } else if (at->type == OTTER_ATTR_GRAPHS) {
            for (size_t g = 0; g < at->n_graphs; g++) {
                OT_TRY(ot_grow((void **)out, &cap, *n + 1, sizeof **out));
                (*out)[(*n)++] = at->graphs[g];
            }
        }
    }
    return OTTER_OK;
}

static otter_status build_node(otter_session *s, size_t k) {
    const otter_node *nd = s->graph->nodes[k];
    ot_exec_node *rn = &s->nodes[k];
    char label[256];
    node_label(nd, k, label, sizeof label);
    rn->index = k;
    rn->node = nd;
    rn->in_slots = ot_calloc(nd->n_inputs + 1, sizeof(size_t));
    rn->out_slots = ot_calloc(nd->n_outputs + 1, sizeof(size_t));
    rn->in_ptrs = ot_calloc(nd->n_inputs + 1, sizeof(otter_tensor *));
    rn->out_ptrs = ot_calloc(nd->n_outputs + 1, sizeof(otter_tensor *));
    if (!rn->in_slots || !rn->out_slots || !rn->in_ptrs || !rn->out_ptrs) return OT_NOMEM();
    for (size_t i = 0; i < nd->n_inputs; i++) {
        rn->in_slots[i] = OT_NO_INDEX;
        if (!nd->inputs[i][0]) continue;
        if (resolve(s, nd->inputs[i], &rn->in_slots[i]) != OTTER_OK)
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' is not defined before this node", label,
                            nd->inputs[i]);
    }
    /* names its subgraphs read from here or further out */
    OT_TRY(graph_attrs(nd, &rn->n_subs, &rn->sub_graphs));
    if (rn->n_subs) {
        ot_strmap seen = {0};
        const char **names = NULL;
        size_t nn = 0, nc = 0;
        otter_status st = OTTER_OK;
        for (size_t g = 0; g < rn->n_subs && !st; g++) st = free_vars(rn->sub_graphs[g], &seen, &names, &nn, &nc);
        if (!st) rn->outer_reads = ot_calloc(nn + 1, sizeof(size_t));
        if (!st && !rn->outer_reads) st = OT_NOMEM();
        for (size_t i = 0; i < nn && !st; i++) {
            if (resolve(s, names[i], &rn->outer_reads[i]) != OTTER_OK)
                st = ot_error(OTTER_ERR_INVALID,
                              "node %s: a subgraph reads '%s', which is not defined before this node", label, names[i]);
            else
                rn->n_outer_reads++;
        }
        ot_strmap_free(&seen);
        ot_free(names);
        OT_TRY(st);
        rn->subs = ot_calloc(rn->n_subs, sizeof *rn->subs);
        if (!rn->subs) return OT_NOMEM();
    }
    int64_t opset = model_opset(s->model, nd->domain);
    const char *dom = default_domain(nd->domain) ? "ai.onnx" : nd->domain;
    bool optimize = s->opts.opt_level >= 1;
    /* Identity and inference Dropout: the output names the input's value */
    if (optimize && default_domain(nd->domain) && nd->n_outputs >= 1 && nd->outputs[0][0] &&
        ((strcmp(nd->op_type, "Identity") == 0 && nd->n_inputs == 1 && nd->inputs[0][0] && nd->n_outputs == 1) ||
         (strcmp(nd->op_type, "Dropout") == 0 && inference_dropout(s, nd, opset)))) {
        if (table_find(s, nd->outputs[0]) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "node %s: output '%s' is already defined", label, nd->outputs[0]);
        OT_TRY(add_alias(s, nd->outputs[0], rn->in_slots[0]));
        s->stats.n_dropped++;
        return OTTER_OK;
    }
    if (opset <= 0) return ot_error(OTTER_ERR_INVALID, "node %s: the model does not import domain '%s'", label, dom);
    rn->def = ot_op_lookup(nd->domain, nd->op_type, opset);
    if (!rn->def) {
        const ot_op_def *later = ot_op_lookup(nd->domain, nd->op_type, INT64_MAX);
        if (later)
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "node %s: operator %s of domain '%s' at opset %lld is not implemented (otter has it "
                            "from opset %d)",
                            label, nd->op_type, dom, (long long)opset, later->since_version);
        return ot_error(OTTER_ERR_UNSUPPORTED, "node %s: operator %s of domain '%s' (opset %lld) is not implemented",
                        label, nd->op_type, dom, (long long)opset);
    }
    for (size_t o = 0; o < nd->n_outputs; o++) {
        const char *name = nd->outputs[o];
        if (name[0] && table_find(s, name) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "node %s: output '%s' is already defined", label, name);
        OT_TRY(add_slot(s, name, OT_SLOT_VALUE, &rn->out_slots[o]));
    }
    rn->ctx = (ot_kernel_ctx){.node = nd,
                              .model = s->model,
                              .opset = opset,
                              .n_inputs = nd->n_inputs,
                              .inputs = rn->in_ptrs,
                              .n_outputs = nd->n_outputs,
                              .outputs = rn->out_ptrs,
                              .n_threads = s->n_threads,
                              .winograd = s->opts.opt_level >= 3   ? 4
                                          : s->opts.opt_level == 2 ? 2
                                                                   : 0,
                              .runtime = s};
    if (optimize && foldable(s, rn) && try_fold(s, rn)) {
        s->stats.n_folded++;
        return OTTER_OK;
    }
    rn->alive = true;
    size_t e = s->n_order++;
    s->order[e] = k;
    for (size_t o = 0; o < nd->n_outputs; o++) {
        s->slots[rn->out_slots[o]].producer = e;
        s->slots[rn->out_slots[o]].last_use = e;
    }
    return OTTER_OK;
}

static otter_status add_sym(otter_session *s, const char *param, size_t *cap, int *out) {
    for (size_t i = 0; i < s->n_syms; i++)
        if (strcmp(s->syms[i].param, param) == 0) {
            *out = (int)i;
            return OTTER_OK;
        }
    OT_TRY(ot_grow((void **)&s->syms, cap, s->n_syms + 1, sizeof *s->syms));
    s->syms[s->n_syms] = (ot_dim_sym){param, 0, false};
    *out = (int)s->n_syms++;
    return OTTER_OK;
}

static otter_status build(otter_session *s) {
    const otter_graph *g = s->graph;
    size_t cap = 0;
    /* initializers first, so inputs that are also initializers become overridable */
    for (size_t i = 0; i < g->n_initializers; i++) {
        const otter_tensor *t = g->initializers[i];
        if (ot_str_empty(t->name)) return ot_error(OTTER_ERR_INVALID, "initializer %zu has no name", i);
        if (table_find(s, t->name) != OT_NO_INDEX)
            return ot_error(OTTER_ERR_INVALID, "initializer '%s' is defined twice", t->name);
        size_t si;
        OT_TRY(add_slot(s, t->name, OT_SLOT_INIT, &si));
        s->slots[si].init = t;
        s->slots[si].cur = (otter_tensor *)(uintptr_t)t;
    }
    s->all_inputs = ot_calloc(g->n_inputs + 1, sizeof(size_t));
    s->inputs = ot_calloc(g->n_inputs + 1, sizeof(size_t));
    if (!s->all_inputs || !s->inputs) return OT_NOMEM();
    for (size_t i = 0; i < g->n_inputs; i++) {
        const otter_value *v = &g->inputs[i];
        if (ot_str_empty(v->name)) return ot_error(OTTER_ERR_INVALID, "graph input %zu has no name", i);
        size_t si = table_find(s, v->name);
        if (si != OT_NO_INDEX && s->slots[si].kind == OT_SLOT_INIT && !s->slots[si].decl) {
            s->slots[si].decl = v;
        } else if (si != OT_NO_INDEX) {
            return ot_error(OTTER_ERR_INVALID, "graph input '%s' is defined twice", v->name);
        } else {
            OT_TRY(add_slot(s, v->name, OT_SLOT_INPUT, &si));
            s->slots[si].decl = v;
            s->inputs[s->n_inputs++] = si;
        }
        s->all_inputs[s->n_all_inputs++] = si;
        if (v->has_type && v->type.kind != OTTER_TYPE_TENSOR && v->type.kind != OTTER_TYPE_NONE &&
            v->type.kind != OTTER_TYPE_SEQUENCE && v->type.kind != OTTER_TYPE_OPTIONAL)
            return ot_error(
                OTTER_ERR_UNSUPPORTED,
                "graph input '%s' is a map or a sparse tensor (otter runs tensors, sequences and optionals)", v->name);
        if (v->has_type && v->type.kind == OTTER_TYPE_TENSOR && v->type.rank > 0) {
            int *ds = ot_calloc((size_t)v->type.rank, sizeof(int));
            if (!ds) return OT_NOMEM();
            s->slots[si].dim_sym = ds;
            for (int d = 0; d < v->type.rank; d++) {
                ds[d] = -1;
                if (v->type.dims[d].value < 0 && !ot_str_empty(v->type.dims[d].param))
                    OT_TRY(add_sym(s, v->type.dims[d].param, &cap, &ds[d]));
            }
        }
    }
    s->nodes = ot_calloc(g->n_nodes + 1, sizeof *s->nodes);
    s->order = ot_calloc(g->n_nodes + 1, sizeof *s->order);
    if (!s->nodes || !s->order) return OT_NOMEM();
    s->n_nodes = g->n_nodes;
    s->stats.n_nodes_model = g->n_nodes;
    for (size_t k = 0; k < g->n_nodes; k++) OT_TRY(build_node(s, k));
    s->outputs = ot_calloc(g->n_outputs + 1, sizeof(size_t));
    if (!s->outputs) return OT_NOMEM();
    for (size_t i = 0; i < g->n_outputs; i++) {
        const otter_value *v = &g->outputs[i];
        size_t si;
        if (ot_str_empty(v->name) || resolve(s, v->name, &si) != OTTER_OK)
            return ot_error(OTTER_ERR_INVALID, "graph output '%s' is not produced by the graph",
                            v->name ? v->name : "");
        s->outputs[s->n_outputs++] = si;
        ot_slot *t = slot_target(s, si);
        if (t->kind == OT_SLOT_VALUE) t->last_use = OT_LIVE_FOREVER;
    }
    /* liveness: the last node reading each value (aliases resolved) */
    for (size_t e = 0; e < s->n_order; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        for (size_t j = 0; j < rn->node->n_inputs + rn->n_outer_reads; j++) {
            size_t si = j < rn->node->n_inputs ? rn->in_slots[j] : rn->outer_reads[j - rn->node->n_inputs];
            if (si == OT_NO_INDEX) continue;
            ot_slot *t = slot_target(s, si);
            /* values of an enclosing graph are kept alive by the enclosing node */
            if (t->kind == OT_SLOT_VALUE && t >= s->slots && t < s->slots + s->n_slots &&
                t->last_use != OT_LIVE_FOREVER && t->last_use < e)
                t->last_use = e;
        }
    }
    for (size_t i = 0; i < s->n_slots; i++) {
        ot_slot *t = &s->slots[i];
        if (t->kind != OT_SLOT_VALUE || t->last_use == OT_LIVE_FOREVER || t->last_use == OT_NO_INDEX) continue;
        ot_exec_node *rn = &s->nodes[s->order[t->last_use]];
        OT_TRY(ot_grow((void **)&rn->dying, &rn->cap_dying, rn->n_dying + 1, sizeof(size_t)));
        rn->dying[rn->n_dying++] = i;
    }
    /* sub-sessions, now that every slot they may point at exists */
    for (size_t k = 0; k < s->n_nodes; k++) {
        ot_exec_node *rn = &s->nodes[k];
        for (size_t g2 = 0; g2 < rn->n_subs && rn->alive; g2++) {
            otter_session *c = ot_calloc(1, sizeof *c);
            if (!c) return OT_NOMEM();
            rn->subs[g2] = c;
            c->model = s->model;
            c->graph = rn->sub_graphs[g2];
            c->parent = s;
            c->opts = s->opts;
            c->pool = s->pool;
            c->n_threads = s->n_threads;
            otter_status st = build(c);
            if (st != OTTER_OK) {
                char label[256];
                node_label(rn->node, k, label, sizeof label);
                return ot_error_context(st, "node %s, subgraph '%s': ", label, c->graph->name ? c->graph->name : "");
            }
        }
    }
    s->key = ot_calloc(2 * s->n_all_inputs + 2, sizeof *s->key);
    if (!s->key) return OT_NOMEM();
    s->stats.n_nodes = s->n_order;
    return OTTER_OK;
}

void otter_session_free(otter_session *s) {
    if (!s) return;
    for (size_t k = 0; k < s->n_nodes; k++) {
        ot_exec_node *rn = &s->nodes[k];
        for (size_t g = 0; g < rn->n_subs && rn->subs; g++) otter_session_free(rn->subs[g]);
        free_scratch(rn);
        ot_free(rn->scratch_heap);
        if (rn->cache) rn->cache_free(rn->cache);
        ot_free(rn->subs);
        ot_free(rn->sub_graphs);
        ot_free(rn->in_slots);
        ot_free(rn->out_slots);
        ot_free(rn->in_ptrs);
        ot_free(rn->out_ptrs);
        ot_free(rn->outer_reads);
        ot_free(rn->dying);
    }
    for (size_t i = 0; i < s->n_slots; i++) {
        if (s->slots[i].kind == OT_SLOT_VALUE || s->slots[i].kind == OT_SLOT_CONST) release_data(&s->slots[i]);
        ot_free(s->slots[i].dim_sym);
    }
    if (s->owns_pool) ot_pool_free(s->pool);
    ot_free(s->nodes);
    ot_free(s->order);
    ot_free(s->slots);
    ot_strmap_free(&s->names);
    ot_free(s->inputs);
    ot_free(s->all_inputs);
    ot_free(s->outputs);
    ot_free(s->syms);
    ot_free(s->key);
    ot_free(s->arena_mem);
    ot_plans_free(s);
    otter_model_free(s->owned_model);
    otter_model_free(s->fused_model);
    ot_free(s);
}

otter_status otter_session_create(otter_session **out, const otter_model *m, const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create: out is NULL");
    *out = NULL;
    if (!m || !m->graph) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create: no model or graph");
    otter_session *s = ot_calloc(1, sizeof *s);
    if (!s) return OT_NOMEM();
    if (opts) s->opts = *opts;
    if (!s->opts.opt_level_set && s->opts.opt_level == 0) s->opts.opt_level = 2;
    int n = s->opts.n_threads;
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    s->n_threads = n;
    otter_status st = s->opts.opt_level >= 2 ? ot_fuse_model(m, !s->opts.no_fold_initializers, &s->fused_model, NULL)
                                             : OTTER_OK; /* fuse.c: a copy with fused nodes, or NULL */
    s->model = s->fused_model ? s->fused_model : m;
    s->graph = s->model->graph;
    if (st == OTTER_OK) st = ot_pool_create(&s->pool, n);
    if (st == OTTER_OK) {
        s->owns_pool = true;
        st = build(s);
    }
    if (st != OTTER_OK) {
        otter_session_free(s);
        return st;
    }
    *out = s;
    return OTTER_OK;
}

otter_status otter_session_create_from_file(otter_session **out, const char *path, const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create_from_file: out is NULL");
    *out = NULL;
    otter_model *m = NULL;
    OT_TRY(otter_model_load(&m, path));
    otter_status st = otter_session_create(out, m, opts);
    if (st != OTTER_OK) {
        otter_model_free(m);
        return ot_error_context(st, "%s: ", path);
    }
    (*out)->owned_model = m;
    return OTTER_OK;
}

otter_status otter_session_create_from_memory(otter_session **out, const void *data, size_t size,
                                              const otter_session_options *opts) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_create_from_memory: out is NULL");
    *out = NULL;
    otter_model *m = NULL;
    OT_TRY(otter_model_load_from_memory(&m, data, size, NULL));
    otter_status st = otter_session_create(out, m, opts);
    if (st != OTTER_OK) {
        otter_model_free(m);
        return st;
    }
    (*out)->owned_model = m;
    return OTTER_OK;
}

/* ---- queries --------------------------------------------------------------------------------- */

const otter_model *otter_session_model(const otter_session *s) { return s->model; }
int otter_session_threads(const otter_session *s) { return s->n_threads; }
size_t otter_session_input_count(const otter_session *s) { return s->n_inputs; }
size_t otter_session_output_count(const otter_session *s) { return s->n_outputs; }
const char *otter_session_input_name(const otter_session *s, size_t i) {
    return i < s->n_inputs ? s->slots[s->inputs[i]].name : NULL;
}
const char *otter_session_output_name(const otter_session *s, size_t i) {
    return i < s->n_outputs ? s->graph->outputs[i].name : NULL;
}
const otter_type *otter_session_input_type(const otter_session *s, size_t i) {
    if (i >= s->n_inputs) return NULL;
    const otter_value *v = s->slots[s->inputs[i]].decl;
    return v && v->has_type ? &v->type : NULL;
}
const otter_type *otter_session_output_type(const otter_session *s, size_t i) {
    if (i >= s->n_outputs) return NULL;
    const otter_value *v = &s->graph->outputs[i];
    return v->has_type ? &v->type : NULL;
}

otter_status otter_session_memory_stats(const otter_session *s, otter_memory_stats *out) {
    if (!s || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_memory_stats: NULL argument");
    *out = s->stats;
    return OTTER_OK;
}

size_t otter_session_profile(const otter_session *s, otter_node_profile *out, size_t cap) {
    if (!s || !s->opts.profile) return 0;
    size_t n = 0;
    for (size_t k = 0; k < s->n_order; k++) {
        const ot_exec_node *rn = &s->nodes[s->order[k]];
        if (!rn->prof_calls) continue;
        if (out && n < cap)
            out[n] = (otter_node_profile){.name = rn->node->name ? rn->node->name : "",
                                          .op_type = rn->node->op_type,
                                          .calls = rn->prof_calls,
                                          .total_ms = (double)rn->prof_ns * 1e-6};
        n++;
    }
    return n;
}

/* ---- run ------------------------------------------------------------------------------------- */

static void shape_str(const otter_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static otter_status check_tensor(otter_session *s, ot_slot *sl, const otter_type *ty, const otter_tensor *t) {
    char shape[256];
    if (ty->has_elem_type && ty->elem_type != t->dtype)
        return ot_error(OTTER_ERR_INVALID, "input '%s': element type %s, expected %s", sl->name,
                        otter_dtype_name(t->dtype), otter_dtype_name(ty->elem_type));
    if (ty->rank < 0 || ty != &sl->decl->type) return OTTER_OK; /* shapes of top-level tensors only */
    shape_str(t, shape, sizeof shape);
    if (ty->rank != t->rank)
        return ot_error(OTTER_ERR_INVALID, "input '%s': rank %d (shape %s), expected rank %d", sl->name, t->rank, shape,
                        ty->rank);
    for (int d = 0; d < ty->rank; d++) {
        if (ty->dims[d].value >= 0 && ty->dims[d].value != t->dims[d])
            return ot_error(OTTER_ERR_INVALID, "input '%s': dimension %d is %lld (shape %s), expected %lld", sl->name,
                            d, (long long)t->dims[d], shape, (long long)ty->dims[d].value);
        int k = sl->dim_sym ? sl->dim_sym[d] : -1;
        if (k < 0) continue;
        ot_dim_sym *sym = &s->syms[k];
        if (!sym->bound) {
            sym->bound = true;
            sym->value = t->dims[d];
        } else if (sym->value != t->dims[d]) {
            return ot_error(OTTER_ERR_INVALID,
                            "input '%s': dimension %d ('%s') is %lld (shape %s), but '%s' is %lld in an earlier input",
                            sl->name, d, sym->param, (long long)t->dims[d], shape, sym->param, (long long)sym->value);
        }
    }
    return OTTER_OK;
}

/* The kind (and for tensors the type and shape) of a value given for the input sl. */
static otter_status check_input(otter_session *s, ot_slot *sl, const otter_arg *a) {
    const otter_value *v = sl->decl;
    const otter_type *ty = v && v->has_type ? &v->type : NULL;
    if (ty && ty->kind == OTTER_TYPE_OPTIONAL) {
        if (a->kind == OTTER_ARG_NONE) return OTTER_OK;
        ty = ty->elem;
    }
    if (!ty || ty->kind == OTTER_TYPE_NONE) {
        if (a->kind == OTTER_ARG_NONE)
            return ot_error(OTTER_ERR_INVALID, "input '%s': no value given and the input is not optional", sl->name);
        return OTTER_OK;
    }
    if (ty->kind == OTTER_TYPE_TENSOR) {
        if (a->kind != OTTER_ARG_TENSOR)
            return ot_error(OTTER_ERR_INVALID, "input '%s' is a tensor, %s was given", sl->name,
                            arg_kind_name(a->kind));
        return check_tensor(s, sl, ty, a->tensor);
    }
    if (ty->kind == OTTER_TYPE_SEQUENCE) {
        if (a->kind != OTTER_ARG_SEQUENCE)
            return ot_error(OTTER_ERR_INVALID, "input '%s' is a sequence, %s was given", sl->name,
                            arg_kind_name(a->kind));
        const otter_type *et = ty->elem;
        otter_dtype got = otter_sequence_elem_type(a->sequence);
        if (et && et->kind == OTTER_TYPE_TENSOR && et->has_elem_type && got != OTTER_DTYPE_UNDEFINED &&
            got != et->elem_type)
            return ot_error(OTTER_ERR_INVALID, "input '%s': sequence of %s, expected a sequence of %s", sl->name,
                            otter_dtype_name(got), otter_dtype_name(et->elem_type));
        for (size_t i = 0; i < a->sequence->n; i++)
            if (!a->sequence->items[i] ||
                (!a->sequence->items[i]->data && otter_tensor_numel(a->sequence->items[i]) > 0))
                return ot_error(OTTER_ERR_ARGUMENT, "input '%s': sequence element %zu has no data", sl->name, i);
        return OTTER_OK;
    }
    return OTTER_OK;
}

/* Copy a value to the caller: a new tensor, or into the caller's. */
static otter_status copy_out(const otter_tensor *src, otter_tensor **dst, const char *name) {
    if (!*dst) {
        otter_tensor *t = NULL;
        OT_TRY(otter_tensor_from_data(&t, name, src->dtype, src->rank, src->dims, src->data));
        *dst = t;
        return OTTER_OK;
    }
    otter_tensor *d = *dst;
    if (d->dtype != src->dtype)
        return ot_error(OTTER_ERR_ARGUMENT, "output '%s': the tensor given has element type %s, the output is %s", name,
                        otter_dtype_name(d->dtype), otter_dtype_name(src->dtype));
    size_t nb = otter_tensor_nbytes(src);
    int64_t n = otter_tensor_numel(src);
    if (d->dtype == OTTER_DTYPE_STRING && d->owns_data && d->data) {
        otter_bytes *b = d->data;
        for (int64_t i = 0, m = otter_tensor_numel(d); i < m; i++) {
            ot_free(b[i].data);
            b[i] = (otter_bytes){0};
        }
    }
    if (otter_tensor_nbytes(d) != nb || (!d->data && nb)) {
        if (!d->owns_data)
            return ot_error(OTTER_ERR_ARGUMENT, "output '%s': the view given holds %zu bytes, the output %zu", name,
                            otter_tensor_nbytes(d), nb);
        void *p = ot_realloc(d->data, nb);
        if (!p) return OT_NOMEM();
        d->data = p;
    }
    d->rank = src->rank;
    for (int i = 0; i < src->rank; i++) d->dims[i] = src->dims[i];
    if (src->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *sb = src->data;
        otter_bytes *db = d->data;
        for (int64_t i = 0; i < n; i++) {
            db[i].data = ot_strndup(sb[i].data ? sb[i].data : "", sb[i].len);
            db[i].len = sb[i].len;
            if (!db[i].data) return OT_NOMEM();
        }
    } else if (nb) {
        memcpy(d->data, src->data, nb);
    }
    return OTTER_OK;
}

/* Where a run's inputs come from and its outputs go: tensors (otter_session_run,
 * ot_ctx_run_subgraph) or arguments of any kind. */
typedef struct ot_run_io {
    const otter_tensor *const *in_t;
    const otter_arg *in_a;
    otter_tensor **out_t;
    otter_arg *out_a;
} ot_run_io;

static otter_arg io_input(const ot_run_io *io, size_t i) {
    if (io->in_a) return io->in_a[i];
    return otter_arg_of_tensor((otter_tensor *)(uintptr_t)io->in_t[i]);
}

static otter_status copy_out_value(const ot_slot *v, const ot_run_io *io, size_t i, const char *name) {
    otter_arg got = slot_arg(v);
    if (!io->out_a) {
        if (got.kind != OTTER_ARG_TENSOR)
            return ot_error(OTTER_ERR_ARGUMENT, "output '%s' is %s: run with otter_session_run_args", name,
                            arg_kind_name(got.kind));
        return copy_out(got.tensor, &io->out_t[i], name);
    }
    otter_arg *d = &io->out_a[i];
    if (got.kind == OTTER_ARG_NONE) {
        d->kind = OTTER_ARG_NONE;
        return OTTER_OK;
    }
    bool unset = d->kind == OTTER_ARG_UNSET || (d->kind == OTTER_ARG_NONE && !d->tensor && !d->sequence);
    if (got.kind == OTTER_ARG_TENSOR) {
        if (unset) {
            d->tensor = NULL;
            OT_TRY(copy_out(got.tensor, &d->tensor, name));
            d->kind = OTTER_ARG_TENSOR;
            return OTTER_OK;
        }
        if (!d->tensor)
            return ot_error(OTTER_ERR_ARGUMENT, "output '%s' is a tensor, the argument given holds none", name);
        OT_TRY(copy_out(got.tensor, &d->tensor, name));
        d->kind = OTTER_ARG_TENSOR;
        return OTTER_OK;
    }
    if (unset) {
        OT_TRY(ot_seq_clone(&d->sequence, got.sequence));
        d->kind = OTTER_ARG_SEQUENCE;
        return OTTER_OK;
    }
    if (!d->sequence)
        return ot_error(OTTER_ERR_ARGUMENT, "output '%s' is a sequence, the argument given holds none", name);
    if (d->sequence == got.sequence) { /* the caller's own input sequence, updated in place */
        d->kind = OTTER_ARG_SEQUENCE;
        return OTTER_OK;
    }
    ot_seq_clear(d->sequence);
    d->sequence->elem_type = got.sequence->elem_type;
    for (size_t k = 0; k < got.sequence->n; k++) OT_TRY(ot_seq_insert_copy(d->sequence, k, got.sequence->items[k]));
    d->kind = OTTER_ARG_SEQUENCE;
    return OTTER_OK;
}

static void release_values(otter_session *s) {
    for (size_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].kind == OT_SLOT_VALUE) release_data(&s->slots[i]);
    for (size_t k = 0; k < s->n_nodes; k++) free_scratch(&s->nodes[k]);
}

/* Inputs get the initializer (if any) back; a caller's value is never freed here. */
static void reset_inputs(otter_session *s) {
    for (size_t j = 0; j < s->n_all_inputs; j++) {
        ot_slot *sl = &s->slots[s->all_inputs[j]];
        sl->cur = sl->kind == OT_SLOT_INIT ? (otter_tensor *)(uintptr_t)sl->init : NULL;
        sl->seq = NULL;
        sl->seq_owned = false;
        sl->none = false;
    }
}

static otter_status bind_one(otter_session *s, size_t si, otter_arg a, ot_shape_key *cur) {
    ot_slot *sl = &s->slots[si];
    switch (a.kind) {
    case OTTER_ARG_TENSOR:
        if (!a.tensor) return ot_error(OTTER_ERR_ARGUMENT, "input '%s': tensor is NULL", sl->name);
        if (a.tensor->dtype == OTTER_DTYPE_UNDEFINED || (a.tensor->data == NULL && otter_tensor_numel(a.tensor) > 0))
            return ot_error(OTTER_ERR_ARGUMENT, "input '%s': tensor has no data", sl->name);
        break;
    case OTTER_ARG_SEQUENCE:
        if (!a.sequence) return ot_error(OTTER_ERR_ARGUMENT, "input '%s': sequence is NULL", sl->name);
        break;
    case OTTER_ARG_NONE:
        break;
    default:
        return ot_error(OTTER_ERR_ARGUMENT, "input '%s': no value given (kind UNSET)", sl->name);
    }
    OT_TRY(check_input(s, sl, &a));
    sl->cur = a.kind == OTTER_ARG_TENSOR ? a.tensor : NULL;
    sl->seq = a.kind == OTTER_ARG_SEQUENCE ? a.sequence : NULL;
    sl->seq_owned = false;
    sl->none = a.kind == OTTER_ARG_NONE;
    for (size_t j = 0; j < s->n_all_inputs; j++)
        if (s->all_inputs[j] == si) {
            cur[j].given = true;
            cur[j].kind = a.kind;
            if (a.kind == OTTER_ARG_TENSOR) {
                cur[j].dtype = a.tensor->dtype;
                cur[j].rank = a.tensor->rank;
                memcpy(cur[j].dims, a.tensor->dims, sizeof a.tensor->dims);
            } else {
                cur[j].dtype = a.kind == OTTER_ARG_SEQUENCE ? a.sequence->elem_type : OTTER_DTYPE_UNDEFINED;
                cur[j].rank = 0;
            }
        }
    return OTTER_OK;
}

enum { OT_TRIM_BYTES = 1 << 20 };

static otter_status run_graph(otter_session *s, size_t n_in, const char *const *in_names, size_t n_out,
                              const char *const *out_names, const ot_run_io *io) {
    if (n_in && !io->in_t && !io->in_a) return ot_error(OTTER_ERR_ARGUMENT, "run: inputs is NULL");
    if (n_out && !io->out_t && !io->out_a) return ot_error(OTTER_ERR_ARGUMENT, "run: outputs is NULL");
    if (n_out > s->n_outputs && !out_names)
        return ot_error(OTTER_ERR_ARGUMENT, "run: %zu outputs asked for, the graph has %zu", n_out, s->n_outputs);
    ot_shape_key *plan_key = s->key, *cur = s->key + s->n_all_inputs + 1;
    reset_inputs(s);
    for (size_t j = 0; j < s->n_all_inputs; j++) cur[j].given = false;
    for (size_t k = 0; k < s->n_syms; k++) s->syms[k].bound = false;
    otter_status st = OTTER_OK;
    if (!in_names) {
        if (n_in > s->n_inputs)
            st = ot_error(OTTER_ERR_ARGUMENT, "run: %zu inputs given, the graph takes %zu", n_in, s->n_inputs);
        for (size_t i = 0; i < n_in && st == OTTER_OK; i++) st = bind_one(s, s->inputs[i], io_input(io, i), cur);
    } else {
        for (size_t i = 0; i < n_in && st == OTTER_OK; i++) {
            const char *name = in_names[i] ? in_names[i] : "";
            size_t si = table_find(s, name);
            if (si == OT_NO_INDEX || !s->slots[si].decl)
                st = ot_error(OTTER_ERR_NOT_FOUND, "input '%s': the graph has no such input", name);
            else
                st = bind_one(s, si, io_input(io, i), cur);
        }
    }
    for (size_t i = 0; i < s->n_inputs && st == OTTER_OK; i++) {
        ot_slot *sl = &s->slots[s->inputs[i]];
        if (slot_has_value(sl)) continue;
        /* an optional input left out has no value */
        if (sl->decl && sl->decl->has_type && sl->decl->type.kind == OTTER_TYPE_OPTIONAL)
            sl->none = true;
        else
            st = ot_error(OTTER_ERR_INVALID, "input '%s' is missing", sl->name);
    }
    if (st != OTTER_OK) {
        reset_inputs(s);
        return st;
    }
    /* same shapes as the plan? */
    if (!s->have_plan || !ot_shape_key_equal(plan_key, cur, s->n_all_inputs)) {
        s->have_plan = ot_plan_activate(s, cur);
        if (s->have_plan) memcpy(plan_key, cur, s->n_all_inputs * sizeof *cur);
    }
    s->n_fallbacks = 0;
    s->heap_live = 0;
    for (size_t i = 0; i < s->n_slots; i++) {
        ot_slot *sl = &s->slots[i];
        if (sl->kind == OT_SLOT_VALUE) {
            if (slot_has_value(sl)) release_data(sl);
            sl->size = 0;
        } else if (sl->kind == OT_SLOT_CONST) {
            sl->cur = &sl->tensor;
        }
    }
    for (size_t e = 0; e < s->n_order && st == OTTER_OK; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        rn->scratch_size = 0;
        st = exec_node(s, rn);
        size_t freed = 0;
        for (size_t d = 0; d < rn->n_dying && st == OTTER_OK; d++) {
            ot_slot *sl = &s->slots[rn->dying[d]];
            if (sl->heap) freed += sl->size, s->heap_live -= sl->size;
            release_data(sl);
        }
#ifdef __GLIBC__
        /* Unplanned run (intermediates on the heap): glibc keeps large freed blocks once its mmap
         * threshold has grown past them, so hand their pages back as they die. */
        if (freed >= OT_TRIM_BYTES) malloc_trim(0);
#endif
    }
    for (size_t i = 0; i < n_out && st == OTTER_OK; i++) {
        size_t oi = i;
        if (out_names) {
            for (oi = 0; oi < s->n_outputs; oi++)
                if (out_names[i] && strcmp(s->graph->outputs[oi].name, out_names[i]) == 0) break;
            if (oi == s->n_outputs) {
                st = ot_error(OTTER_ERR_NOT_FOUND, "output '%s': the graph has no such output",
                              out_names[i] ? out_names[i] : "(null)");
                break;
            }
        }
        const char *name = s->graph->outputs[oi].name;
        const ot_slot *v = slot_target(s, s->outputs[oi]);
        if (!slot_has_value(v))
            st = ot_error(OTTER_ERR_INVALID, "output '%s' was not produced", name);
        else
            st = copy_out_value(v, io, i, name);
    }
    release_values(s);
    reset_inputs(s);
    s->stats.n_runs++;
    s->stats.n_heap_fallbacks = s->n_fallbacks;
    if (st == OTTER_OK && (!s->have_plan || s->n_fallbacks > 0)) {
        memcpy(plan_key, cur, s->n_all_inputs * sizeof *cur);
#ifdef __GLIBC__
        /* the unplanned run's intermediates are freed: give their pages back before the arena
         * takes its own, or the process keeps both (peak RSS ~2x the arena) */
        malloc_trim(0);
#endif
        if (ot_plan_build(s, cur) != OTTER_OK) otter_clear_error(); /* no plan: the next run uses the heap again */
    }
    return st;
}

otter_status otter_session_run(otter_session *s, size_t n_inputs, const char *const *input_names,
                               const otter_tensor *const *inputs, size_t n_outputs, const char *const *output_names,
                               otter_tensor **outputs) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_run: session is NULL");
    ot_run_io io = {.in_t = inputs, .out_t = outputs};
    return run_graph(s, n_inputs, input_names, n_outputs, output_names, &io);
}

otter_status otter_session_run_args(otter_session *s, size_t n_inputs, const char *const *input_names,
                                    const otter_arg *inputs, size_t n_outputs, const char *const *output_names,
                                    otter_arg *outputs) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_run_args: session is NULL");
    ot_run_io io = {.in_a = inputs, .out_a = outputs};
    return run_graph(s, n_inputs, input_names, n_outputs, output_names, &io);
}

static otter_status run_sub(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, size_t n_out, const ot_run_io *io) {
    ot_exec_node *rn = ot_exec_node_of(ctx);
    otter_session *s = ctx->runtime;
    char label[256];
    node_label(ctx->node, rn->index, label, sizeof label);
    otter_session *sub = NULL;
    for (size_t i = 0; i < rn->n_subs; i++)
        if (rn->sub_graphs[i] == g) sub = rn->subs[i];
    if (!sub) {
        s->err_named = true;
        return ot_error(OTTER_ERR_ARGUMENT, "node %s: the graph given is not an attribute of this node", label);
    }
    if (n_out > sub->n_outputs) {
        s->err_named = true;
        return ot_error(OTTER_ERR_ARGUMENT, "node %s: %zu outputs asked of subgraph '%s', which has %zu", label, n_out,
                        g->name ? g->name : "", sub->n_outputs);
    }
    otter_status st = run_graph(sub, n_in, NULL, n_out, NULL, io);
    if (st != OTTER_OK) {
        s->err_named = true;
        return ot_error_context(st, "node %s, subgraph '%s': ", label, g->name ? g->name : "");
    }
    return OTTER_OK;
}

otter_status ot_ctx_run_subgraph(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, otter_tensor *const *in,
                                 size_t n_out, otter_tensor **out) {
    ot_run_io io = {.in_t = (const otter_tensor *const *)in, .out_t = out};
    return run_sub(ctx, g, n_in, n_out, &io);
}

otter_status ot_ctx_run_subgraph_args(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, const otter_arg *in,
                                      size_t n_out, otter_arg *out) {
    ot_run_io io = {.in_a = in, .out_a = out};
    return run_sub(ctx, g, n_in, n_out, &io);
}
