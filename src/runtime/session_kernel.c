/* The session's side of the kernel interface (runtime/op.h): a kernel names its node in errors, asks
 * for its outputs and scratch memory (from the plan's arena when the run matches the plan, else the
 * heap, sizes recorded for the next plan), reads and writes sequences and optionals, keeps a cache and
 * runs its subgraphs. */
#include <stdarg.h>
#include <string.h>

#include "core/core.h"
#include "runtime/session.h"

/* Where zero-byte tensors point (never written). */
static _Alignas(OT_ARENA_ALIGN) unsigned char g_empty[OT_ARENA_ALIGN];

/* ---- node labels and errors ------------------------------------------------------------------ */

void ot_node_label(const otter_node *n, size_t index, char *buf, size_t cap) {
    const char *dom = ot_is_default_domain(n->domain) ? "" : n->domain;
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
    ot_node_label(ctx->node, ctx->runtime ? rn->index : 0, label, sizeof label);
    if (ctx->runtime) ((otter_session *)ctx->runtime)->err_named = true;
    return ot_error(st, "node %s: %s", label, msg);
}

/* ---- outputs and scratch --------------------------------------------------------------------- */

void ot_slot_release(ot_slot *sl) {
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

static const char *megabytes(size_t n, char *buf, size_t cap) {
    if (n < 1000000)
        snprintf(buf, cap, "%.1f kB", (double)n / 1e3);
    else
        snprintf(buf, cap, n >= 100000000 ? "%.0f MB" : "%.1f MB", (double)n / 1e6);
    return buf;
}

otter_status ot_session_reserve(const otter_session *s, size_t nbytes, const char *what) {
    size_t used = s->arena_cap + s->heap_live + s->folded_live;
    if (nbytes <= s->budget && used <= s->budget - nbytes) return OTTER_OK;
    char need[32], budget[32], in_use[32];
    return ot_error(OTTER_ERR_NOMEM,
                    "%s needs %s, past the session's memory budget of %s (%s in use; raise it with max_memory_bytes "
                    "or --max-memory)",
                    what, megabytes(nbytes, need, sizeof need), megabytes(s->budget, budget, sizeof budget),
                    megabytes(used, in_use, sizeof in_use));
}

/* ot_ctx_output's failure: the kernel returns the status it records. */
static otter_tensor *output_failed(ot_kernel_ctx *ctx, otter_status s) {
    ctx->output_status = s;
    return NULL;
}

otter_tensor *ot_ctx_output(ot_kernel_ctx *ctx, size_t i, otter_dtype dtype, int rank, const int64_t *dims) {
    otter_session *s = ctx->runtime;
    ot_exec_node *rn = ot_exec_node_of(ctx);
    if (i >= ctx->n_outputs) {
        return output_failed(
            ctx, ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu requested, the node has %zu", i, ctx->n_outputs));
    }
    if (dtype <= OTTER_DTYPE_UNDEFINED || dtype >= OTTER_DTYPE_COUNT_ ||
        (dtype != OTTER_DTYPE_STRING && otter_dtype_size(dtype) == 0)) {
        return output_failed(ctx,
                             ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output %zu: element type %d", i, (int)dtype));
    }
    if (rank < 0 || rank > OTTER_MAX_RANK) {
        return output_failed(ctx,
                             ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output %zu: rank %d (otter supports up to %d)",
                                          i, rank, OTTER_MAX_RANK));
    }
    size_t nbytes = dtype == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(dtype);
    for (int d = 0; d < rank; d++) {
        if (dims[d] < 0) {
            return output_failed(ctx, ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: negative dimension %lld", i,
                                                   (long long)dims[d]));
        }
        if (!ot_mul_size(nbytes, (size_t)dims[d], &nbytes) || (uint64_t)nbytes > ((uint64_t)1 << 46)) {
            return output_failed(ctx, ot_ctx_error(ctx, OTTER_ERR_INVALID, "output %zu: size overflows", i));
        }
    }
    ot_slot *sl = &s->slots[rn->out_slots[i]];
    ot_slot_release(sl);
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
            char what[64];
            snprintf(what, sizeof what, "output %zu", i);
            otter_status st = ot_session_reserve(s, nbytes, what);
            if (st != OTTER_OK) return output_failed(ctx, ot_ctx_error(ctx, st, "%s", otter_last_error()));
            sl->heap = ot_malloc(nbytes);
            if (sl->heap) *(s->folding ? &s->folded_live : &s->heap_live) += nbytes;
        }
        if (s->heap_live > s->stats.heap_peak_bytes) s->stats.heap_peak_bytes = s->heap_live;
        if (!sl->heap) {
            return output_failed(
                ctx, ot_ctx_error(ctx, OTTER_ERR_NOMEM, "output %zu: out of memory (%zu bytes)", i, nbytes));
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
    otter_status st = ot_session_reserve(s, need, "scratch");
    if (st != OTTER_OK) {
        ot_ctx_error(ctx, st, "%s", otter_last_error());
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

/* ---- sequences and optionals ----------------------------------------------------------------- */

otter_arg ot_ctx_input_arg(const ot_kernel_ctx *ctx, size_t i) {
    const ot_exec_node *rn = ot_exec_node_of(ctx);
    if (i >= ctx->n_inputs || rn->in_slots[i] == OT_NO_INDEX) return (otter_arg){0};
    return ot_slot_arg(ot_slot_target(ctx->runtime, rn->in_slots[i]));
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
    ot_slot_release(sl);
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
    ot_slot *src = ot_slot_target(s, rn->in_slots[i]);
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

/* ---- threads, caches, constants, subgraphs --------------------------------------------------- */

void ot_parallel_for(const ot_kernel_ctx *ctx, int64_t n, int64_t grain, ot_range_fn fn, void *arg) {
    const otter_session *s = ctx && ctx->n_threads > 1 ? ctx->runtime : NULL;
    ot_pool_run(s ? s->pool : NULL, n, grain, fn, arg);
}

void **ot_ctx_cache(ot_kernel_ctx *ctx, void (*free_fn)(void *)) {
    ot_exec_node *rn = ot_exec_node_of(ctx);
    rn->cache_free = free_fn;
    return &rn->cache;
}

bool ot_ctx_input_constant(const ot_kernel_ctx *ctx, size_t i) {
    const ot_exec_node *rn = ot_exec_node_of(ctx);
    return i < ctx->n_inputs && rn->in_slots[i] != OT_NO_INDEX && ot_slot_is_const(ctx->runtime, rn->in_slots[i]);
}

static otter_status run_sub(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, size_t n_out, const ot_run_io *io) {
    ot_exec_node *rn = ot_exec_node_of(ctx);
    otter_session *s = ctx->runtime;
    char label[256];
    ot_node_label(ctx->node, rn->index, label, sizeof label);
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
    otter_status st = ot_session_run_graph(sub, n_in, NULL, n_out, NULL, io);
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
