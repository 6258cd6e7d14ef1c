/* Running a session: bind and check inputs, execute nodes in order, each value released after its last
 * reader; outputs are copied to the caller. A run whose input shapes match the plan places every
 * output in the arena (plan.c); otherwise values go to the heap, their sizes are recorded and a new
 * plan is made at the end of the run. */
#include <string.h>
#include <time.h>
#ifdef __GLIBC__ /* defined by the headers above */
#include <malloc.h>
#endif

#include "core/core.h"
#include "runtime/session.h"

/* ---- running one node ------------------------------------------------------------------------ */

void ot_exec_node_free_scratch(ot_exec_node *rn) {
    for (size_t i = 0; i < rn->n_scratch_heap; i++) ot_free(rn->scratch_heap[i]);
    rn->n_scratch_heap = 0;
    rn->scratch_used = 0;
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

otter_status ot_exec_node_run(otter_session *s, ot_exec_node *rn) {
    const otter_node *nd = rn->node;
    for (size_t i = 0; i < nd->n_inputs; i++) {
        if (rn->in_slots[i] == OT_NO_INDEX) {
            rn->in_ptrs[i] = NULL;
            continue;
        }
        ot_slot *src = ot_slot_target(s, rn->in_slots[i]);
        /* (a CONST's header lives in the slot array, which grows while nodes are folded at create) */
        if (src->kind == OT_SLOT_CONST) src->cur = &src->tensor;
        if (!ot_slot_has_value(src)) {
            char label[256];
            ot_node_label(nd, rn->index, label, sizeof label);
            s->err_named = true;
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' has no value (its producer did not write it)",
                            label, nd->inputs[i]);
        }
        if (!src->cur && !(rn->def->flags & OT_OP_VALUES)) {
            char label[256];
            ot_node_label(nd, rn->index, label, sizeof label);
            s->err_named = true;
            return ot_error(OTTER_ERR_INVALID, "node %s: input '%s' is %s; the operator takes tensors", label,
                            nd->inputs[i], ot_arg_kind_name(ot_slot_arg(src).kind));
        }
        rn->in_ptrs[i] = src->cur;
    }
    for (size_t i = 0; i < nd->n_outputs; i++) rn->out_ptrs[i] = NULL;
    s->err_named = false;
    uint64_t t0 = s->opts.profile ? now_ns() : 0;
    otter_status st = rn->def->run(&rn->ctx);
    if (s->opts.profile) rn->prof_calls++, rn->prof_ns += now_ns() - t0;
    ot_exec_node_free_scratch(rn);
    if (st != OTTER_OK && !s->err_named) {
        char label[256];
        ot_node_label(nd, rn->index, label, sizeof label);
        ot_error_context(st, "node %s: ", label);
        s->err_named = true;
    }
    return st;
}

/* ---- inputs ---------------------------------------------------------------------------------- */

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
                            ot_arg_kind_name(a->kind));
        return check_tensor(s, sl, ty, a->tensor);
    }
    if (ty->kind == OTTER_TYPE_SEQUENCE) {
        if (a->kind != OTTER_ARG_SEQUENCE)
            return ot_error(OTTER_ERR_INVALID, "input '%s' is a sequence, %s was given", sl->name,
                            ot_arg_kind_name(a->kind));
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

/* ---- outputs --------------------------------------------------------------------------------- */

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

static otter_arg io_input(const ot_run_io *io, size_t i) {
    if (io->in_a) return io->in_a[i];
    return otter_arg_of_tensor((otter_tensor *)(uintptr_t)io->in_t[i]);
}

static otter_status copy_out_value(const ot_slot *v, const ot_run_io *io, size_t i, const char *name) {
    otter_arg got = ot_slot_arg(v);
    if (!io->out_a) {
        if (got.kind != OTTER_ARG_TENSOR)
            return ot_error(OTTER_ERR_ARGUMENT, "output '%s' is %s: run with otter_session_run_args", name,
                            ot_arg_kind_name(got.kind));
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
        if (s->slots[i].kind == OT_SLOT_VALUE) ot_slot_release(&s->slots[i]);
    for (size_t k = 0; k < s->n_nodes; k++) ot_exec_node_free_scratch(&s->nodes[k]);
}

/* ---- run ------------------------------------------------------------------------------------- */

enum { OT_TRIM_BYTES = 1 << 20 };

otter_status ot_session_run_graph(otter_session *s, size_t n_in, const char *const *in_names, size_t n_out,
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
            size_t si = ot_slot_find(s, name);
            if (si == OT_NO_INDEX || !s->slots[si].decl)
                st = ot_error(OTTER_ERR_NOT_FOUND, "input '%s': the graph has no such input", name);
            else
                st = bind_one(s, si, io_input(io, i), cur);
        }
    }
    for (size_t i = 0; i < s->n_inputs && st == OTTER_OK; i++) {
        ot_slot *sl = &s->slots[s->inputs[i]];
        if (ot_slot_has_value(sl)) continue;
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
            if (ot_slot_has_value(sl)) ot_slot_release(sl);
            sl->size = 0;
        } else if (sl->kind == OT_SLOT_CONST) {
            sl->cur = &sl->tensor;
        }
    }
    for (size_t e = 0; e < s->n_order && st == OTTER_OK; e++) {
        ot_exec_node *rn = &s->nodes[s->order[e]];
        rn->scratch_size = 0;
        st = ot_exec_node_run(s, rn);
        size_t freed = 0;
        for (size_t d = 0; d < rn->n_dying && st == OTTER_OK; d++) {
            ot_slot *sl = &s->slots[rn->dying[d]];
            if (sl->heap) freed += sl->size, s->heap_live -= sl->size;
            ot_slot_release(sl);
        }
#ifdef __GLIBC__
        /* Unplanned run (intermediates on the heap): glibc keeps large freed blocks once its mmap
         * threshold has grown past them, so hand their pages back as they die. */
        if (freed >= OT_TRIM_BYTES) malloc_trim(0);
#else
        (void)freed;
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
        const ot_slot *v = ot_slot_target(s, s->outputs[oi]);
        if (!ot_slot_has_value(v))
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
    return ot_session_run_graph(s, n_inputs, input_names, n_outputs, output_names, &io);
}

otter_status otter_session_run_args(otter_session *s, size_t n_inputs, const char *const *input_names,
                                    const otter_arg *inputs, size_t n_outputs, const char *const *output_names,
                                    otter_arg *outputs) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_session_run_args: session is NULL");
    ot_run_io io = {.in_a = inputs, .out_a = outputs};
    return ot_session_run_graph(s, n_inputs, input_names, n_outputs, output_names, &io);
}
