/* Sequences and optionals: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
 * SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap (a subgraph per
 * element), Optional, OptionalHasElement, OptionalGetElement; and ONNX Runtime's optimizer
 * operators over seq(tensor(float)): com.microsoft AdamWOptimizer, SGDOptimizerV2 and
 * InplaceClipGradNorm, which update the tensors of their input sequences in place (as ORT's CPU
 * kernels do) with the math of runtime/optim.h.
 *
 * ONNX values are immutable: a sequence a kernel makes is new (its elements owned copies), except
 * the optimizers' "updated" outputs, which are their input sequences (ot_ctx_output_sequence_inplace).
 * An optional with a value is carried as its tensor or sequence; without one as NONE. */
#include <string.h>

#include "core/core.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"
#include "runtime/optim.h"
#include "runtime/value.h"

static otter_status need_seq(const ot_kernel_ctx *ctx, size_t i, const otter_sequence **q) {
    *q = NULL; /* set on every path: callers read it only after OT_TRY, but -O3 can't tell */
    otter_arg a = ot_ctx_input_arg(ctx, i);
    if (a.kind != OTTER_ARG_SEQUENCE)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a sequence, it is %s", i,
                            ot_ctx_input_name(ctx, i), ot_arg_kind_name(a.kind));
    *q = a.sequence;
    return OTTER_OK;
}

static otter_status need_tensor(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    *t = NULL; /* as in need_seq */
    otter_arg a = ot_ctx_input_arg(ctx, i);
    if (a.kind != OTTER_ARG_TENSOR)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a tensor, it is %s", i,
                            ot_ctx_input_name(ctx, i), ot_arg_kind_name(a.kind));
    *t = a.tensor;
    return OTTER_OK;
}

/* The position input i (int32/int64 scalar) for a sequence of n, normalized; dflt when omitted.
 * Valid positions are [-n, n - 1], or [-n, n] with at_end (insertion). */
static otter_status position(const ot_kernel_ctx *ctx, size_t i, size_t n, bool at_end, int64_t dflt, size_t *out) {
    *out = 0; /* as in need_seq */
    const otter_tensor *t = ot_ctx_input(ctx, i);
    int64_t p = dflt;
    if (t) {
        if ((t->dtype != OTTER_DTYPE_INT64 && t->dtype != OTTER_DTYPE_INT32) || otter_tensor_numel(t) != 1)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' (position) must be one int32 or int64", i,
                                ot_ctx_input_name(ctx, i));
        p = ot_get_i64(t->data, t->dtype, 0);
    }
    int64_t len = (int64_t)n, hi = at_end ? len : len - 1;
    if (p < -len || p > hi)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "position %lld is out of range for a sequence of %zu tensors",
                            (long long)p, n);
    *out = (size_t)(p < 0 ? p + len : p);
    return OTTER_OK;
}

/* Output o as an owned copy of q. */
static otter_status output_seq_copy(ot_kernel_ctx *ctx, size_t o, const otter_sequence *q) {
    otter_arg a = {OTTER_ARG_SEQUENCE, NULL, NULL};
    otter_status st = ot_seq_clone(&a.sequence, q);
    if (st != OTTER_OK) return ot_ctx_error(ctx, st, "%s", otter_last_error());
    st = ot_ctx_output_arg(ctx, o, &a);
    otter_arg_free(&a);
    return st;
}

static otter_status fail_seq(const ot_kernel_ctx *ctx, otter_status st) {
    return ot_ctx_error(ctx, st, "%s", otter_last_error());
}

/* ---- SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength ---- */

otter_status ot_kernel_sequence_empty(ot_kernel_ctx *ctx) {
    /* no schema default: the description says float */
    int64_t dt = ot_ctx_attr_int_or(ctx, "dtype", OTTER_DTYPE_FLOAT);
    if (dt <= OTTER_DTYPE_UNDEFINED || dt >= OTTER_DTYPE_COUNT_)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'dtype' = %lld is not an element type", (long long)dt);
    return ot_ctx_output_sequence(ctx, 0, (otter_dtype)dt) ? OTTER_OK : OTTER_ERR_NOMEM;
}

otter_status ot_kernel_sequence_construct(ot_kernel_ctx *ctx) {
    if (ctx->n_inputs == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs at least one input");
    const otter_tensor *first;
    OT_TRY(need_tensor(ctx, 0, &first));
    otter_sequence *q = ot_ctx_output_sequence(ctx, 0, first->dtype);
    if (!q) return OTTER_ERR_NOMEM;
    for (size_t i = 0; i < ctx->n_inputs; i++) {
        const otter_tensor *t;
        OT_TRY(need_tensor(ctx, i, &t));
        if (t->dtype != first->dtype)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' is %s, input 0 is %s", i,
                                ot_ctx_input_name(ctx, i), otter_dtype_name(t->dtype), otter_dtype_name(first->dtype));
        otter_status st = ot_seq_insert_copy(q, q->n, t);
        if (st != OTTER_OK) return fail_seq(ctx, st);
    }
    return OTTER_OK;
}

otter_status ot_kernel_sequence_insert(ot_kernel_ctx *ctx) {
    const otter_sequence *in;
    const otter_tensor *t;
    OT_TRY(need_seq(ctx, 0, &in));
    OT_TRY(need_tensor(ctx, 1, &t));
    if (in->elem_type != OTTER_DTYPE_UNDEFINED && t->dtype != in->elem_type)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inserting a %s tensor into a sequence of %s",
                            otter_dtype_name(t->dtype), otter_dtype_name(in->elem_type));
    size_t pos;
    OT_TRY(position(ctx, 2, in->n, true, (int64_t)in->n, &pos));
    otter_arg a = {OTTER_ARG_SEQUENCE, NULL, NULL};
    otter_status st = ot_seq_clone(&a.sequence, in);
    if (st == OTTER_OK) st = ot_seq_insert_copy(a.sequence, pos, t);
    if (st != OTTER_OK) {
        otter_arg_free(&a);
        return fail_seq(ctx, st);
    }
    st = ot_ctx_output_arg(ctx, 0, &a);
    otter_arg_free(&a);
    return st;
}

otter_status ot_kernel_sequence_at(ot_kernel_ctx *ctx) {
    const otter_sequence *in;
    OT_TRY(need_seq(ctx, 0, &in));
    if (!ot_ctx_input(ctx, 1)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (position) is missing");
    size_t pos;
    OT_TRY(position(ctx, 1, in->n, false, 0, &pos));
    otter_arg a = otter_arg_of_tensor(in->items[pos]);
    return ot_ctx_output_arg(ctx, 0, &a);
}

otter_status ot_kernel_sequence_erase(ot_kernel_ctx *ctx) {
    const otter_sequence *in;
    OT_TRY(need_seq(ctx, 0, &in));
    if (in->n == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "erasing from an empty sequence");
    size_t pos;
    OT_TRY(position(ctx, 1, in->n, false, -1, &pos));
    otter_arg a = {OTTER_ARG_SEQUENCE, NULL, NULL};
    otter_status st = ot_seq_clone(&a.sequence, in);
    if (st != OTTER_OK) return fail_seq(ctx, st);
    ot_seq_erase(a.sequence, pos);
    st = ot_ctx_output_arg(ctx, 0, &a);
    otter_arg_free(&a);
    return st;
}

otter_status ot_kernel_sequence_length(ot_kernel_ctx *ctx) {
    const otter_sequence *in;
    OT_TRY(need_seq(ctx, 0, &in));
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 0, NULL);
    if (!y) return ctx->output_status;
    *(int64_t *)y->data = (int64_t)in->n;
    return OTTER_OK;
}

/* ---- SplitToSequence, ConcatFromSequence ------------------------------------------------------- */

/* Copy the slab [start, start + len) of axis `axis` of x into a new tensor of dims `dims`. */
static otter_status slab(const otter_tensor *x, int axis, int64_t start, int64_t len, int rank, const int64_t *dims,
                         otter_tensor **out) {
    OT_TRY(otter_tensor_create(out, NULL, x->dtype, rank, dims));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    bool str = x->dtype == OTTER_DTYPE_STRING;
    size_t es = str ? sizeof(otter_bytes) : otter_dtype_size(x->dtype);
    size_t row = (size_t)(len * inner) * es, src_row = (size_t)(x->dims[axis] * inner) * es;
    for (int64_t o = 0; o < outer && row; o++) {
        const char *src = (const char *)x->data + (size_t)o * src_row + (size_t)(start * inner) * es;
        char *dst = (char *)(*out)->data + (size_t)o * row;
        if (!str) {
            memcpy(dst, src, row);
            continue;
        }
        const otter_bytes *sb = (const otter_bytes *)(const void *)src;
        otter_bytes *db = (otter_bytes *)(void *)dst;
        for (int64_t k = 0; k < len * inner; k++) {
            db[k].data = ot_strndup(sb[k].data ? sb[k].data : "", sb[k].len);
            if (!db[k].data) return OT_NOMEM();
            db[k].len = sb[k].len;
        }
    }
    return OTTER_OK;
}

otter_status ot_kernel_split_to_sequence(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(need_tensor(ctx, 0, &x));
    if (x->rank == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is a scalar; it needs an axis to split");
    int64_t axis0, keepdims;
    OT_TRY(ot_ctx_attr_int(ctx, "axis", &axis0));
    OT_TRY(ot_ctx_attr_int(ctx, "keepdims", &keepdims));
    int64_t axis = axis0;
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis0, x->rank);
    int64_t len = x->dims[axis];
    const otter_tensor *sp = ot_ctx_input(ctx, 1);
    int64_t *sizes = NULL, n = 0;
    bool squeeze = false;
    if (!sp) { /* pieces of 1, squeezed unless keepdims */
        n = len;
        squeeze = !keepdims;
        sizes = ot_calloc((size_t)(n ? n : 1), sizeof *sizes);
        if (!sizes) return OT_NOMEM();
        for (int64_t i = 0; i < n; i++) sizes[i] = 1;
    } else {
        if (sp->dtype != OTTER_DTYPE_INT64 && sp->dtype != OTTER_DTYPE_INT32)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 1 (split) must be int32 or int64");
        if (sp->rank == 0) {
            int64_t c = ot_get_i64(sp->data, sp->dtype, 0);
            if (c <= 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "split %lld must be positive", (long long)c);
            n = (len + c - 1) / c;
            sizes = ot_calloc((size_t)(n ? n : 1), sizeof *sizes);
            if (!sizes) return OT_NOMEM();
            for (int64_t i = 0; i < n; i++) sizes[i] = i + 1 < n ? c : len - c * (n - 1);
        } else {
            n = otter_tensor_numel(sp);
            sizes = ot_calloc((size_t)(n ? n : 1), sizeof *sizes);
            if (!sizes) return OT_NOMEM();
            int64_t sum = 0;
            for (int64_t i = 0; i < n; i++) {
                sizes[i] = ot_get_i64(sp->data, sp->dtype, i);
                if (sizes[i] < 0) {
                    ot_free(sizes);
                    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "split[%lld] = %lld is negative", (long long)i,
                                        (long long)sizes[i]);
                }
                sum += sizes[i];
            }
            if (sum != len) {
                ot_free(sizes);
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "the splits sum to %lld, axis %lld has %lld",
                                    (long long)sum, (long long)axis, (long long)len);
            }
        }
    }
    otter_status st = OTTER_OK;
    otter_sequence *q = ot_ctx_output_sequence(ctx, 0, x->dtype);
    if (!q) st = OTTER_ERR_NOMEM;
    for (int64_t i = 0, start = 0; i < n && st == OTTER_OK; start += sizes[i], i++) {
        int64_t dims[OTTER_MAX_RANK];
        int r = 0;
        for (int d = 0; d < x->rank; d++) {
            if (d == axis && squeeze) continue;
            dims[r++] = d == axis ? sizes[i] : x->dims[d];
        }
        otter_tensor *t = NULL;
        st = slab(x, (int)axis, start, sizes[i], r, dims, &t);
        if (st == OTTER_OK) st = ot_seq_insert(q, q->n, t, true);
        if (st != OTTER_OK) {
            otter_tensor_free(t);
            st = fail_seq(ctx, st);
        }
    }
    ot_free(sizes);
    return st;
}

otter_status ot_kernel_concat_from_sequence(ot_kernel_ctx *ctx) {
    const otter_sequence *q;
    OT_TRY(need_seq(ctx, 0, &q));
    const otter_attr *ax = otter_node_attr(ctx->node, "axis");
    if (!ax) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' is missing");
    int64_t new_axis;
    OT_TRY(ot_ctx_attr_int(ctx, "new_axis", &new_axis));
    if (q->n == 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is an empty sequence");
    const otter_tensor *t0 = q->items[0];
    int out_rank = t0->rank + (new_axis ? 1 : 0);
    if (out_rank > OTTER_MAX_RANK) return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "rank above %d", OTTER_MAX_RANK);
    int64_t axis = ax->i;
    if (!ot_norm_axis(&axis, out_rank) || out_rank == 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)ax->i,
                            t0->rank);
    /* every element: same dtype, same dims except along axis (equal everywhere with new_axis) */
    int64_t total = 0;
    for (size_t k = 0; k < q->n; k++) {
        const otter_tensor *t = q->items[k];
        bool ok = t->dtype == t0->dtype && t->rank == t0->rank;
        for (int d = 0; ok && d < t->rank; d++) ok = t->dims[d] == t0->dims[d] || (!new_axis && d == axis);
        if (!ok)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "sequence element %zu does not match element 0 in type or shape", k);
        total += new_axis ? 1 : t->dims[axis];
    }
    int64_t dims[OTTER_MAX_RANK];
    for (int d = 0, c = 0; d < out_rank; d++) {
        if (new_axis && d == axis)
            dims[d] = total;
        else {
            dims[d] = d == axis ? total : t0->dims[c];
            c++;
        }
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, t0->dtype, out_rank, dims);
    if (!y) return ctx->output_status;
    bool str = t0->dtype == OTTER_DTYPE_STRING;
    size_t es = str ? sizeof(otter_bytes) : otter_dtype_size(t0->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= dims[d];
    for (int d = (int)axis + 1; d < out_rank; d++) inner *= dims[d];
    int64_t off = 0; /* position along axis */
    for (size_t k = 0; k < q->n; k++) {
        const otter_tensor *t = q->items[k];
        int64_t len = new_axis ? 1 : t->dims[axis];
        size_t row = (size_t)(len * inner) * es, dst_row = (size_t)(total * inner) * es;
        for (int64_t o = 0; o < outer && row; o++) {
            const char *src = (const char *)t->data + (size_t)o * row;
            char *dst = (char *)y->data + (size_t)o * dst_row + (size_t)(off * inner) * es;
            if (!str) {
                memcpy(dst, src, row);
                continue;
            }
            const otter_bytes *sb = (const otter_bytes *)(const void *)src;
            otter_bytes *db = (otter_bytes *)(void *)dst;
            for (int64_t j = 0; j < len * inner; j++) {
                db[j].data = ot_strndup(sb[j].data ? sb[j].data : "", sb[j].len);
                if (!db[j].data) return OT_NOMEM();
                db[j].len = sb[j].len;
            }
        }
        off += len;
    }
    return OTTER_OK;
}

/* ---- SequenceMap ------------------------------------------------------------------------------- */

otter_status ot_kernel_sequence_map(ot_kernel_ctx *ctx) {
    const otter_attr *ba = otter_node_attr(ctx->node, "body");
    const otter_graph *g = ba ? ba->g : NULL;
    if (!g) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'body' is missing");
    size_t ni = ctx->n_inputs, no = ctx->n_outputs;
    if (g->n_inputs != ni || g->n_outputs != no)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "body has %zu inputs and %zu outputs, the node %zu and %zu",
                            g->n_inputs, g->n_outputs, ni, no);
    const otter_sequence *q0;
    OT_TRY(need_seq(ctx, 0, &q0));
    size_t n = q0->n;
    otter_arg *in = ot_calloc(ni + 1, sizeof *in), *out = ot_calloc(no + 1, sizeof *out);
    otter_sequence **res = ot_calloc(no + 1, sizeof *res);
    otter_status st = OTTER_OK;
    if (!in || !out || !res) st = OT_NOMEM();
    for (size_t j = 0; j < ni && st == OTTER_OK; j++) {
        in[j] = ot_ctx_input_arg(ctx, j);
        if (in[j].kind == OTTER_ARG_SEQUENCE && in[j].sequence->n != n)
            st = ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu has %zu tensors, input 0 has %zu", j,
                              in[j].sequence->n, n);
        else if (in[j].kind != OTTER_ARG_SEQUENCE && in[j].kind != OTTER_ARG_TENSOR)
            st = ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is %s", j, ot_arg_kind_name(in[j].kind));
    }
    for (size_t o = 0; o < no && st == OTTER_OK; o++) {
        const otter_type *ty = otter_graph_value_type(g, g->outputs[o].name);
        otter_dtype dt =
            ty && ty->kind == OTTER_TYPE_TENSOR && ty->has_elem_type ? ty->elem_type : OTTER_DTYPE_UNDEFINED;
        st = otter_sequence_create(&res[o], dt);
    }
    otter_arg *call = ot_calloc(ni + 1, sizeof *call);
    if (!call && st == OTTER_OK) st = OT_NOMEM();
    for (size_t i = 0; i < n && st == OTTER_OK; i++) {
        for (size_t j = 0; j < ni; j++)
            call[j] = in[j].kind == OTTER_ARG_SEQUENCE ? otter_arg_of_tensor(in[j].sequence->items[i]) : in[j];
        st = ot_ctx_run_subgraph_args(ctx, g, ni, call, no, out);
        for (size_t o = 0; o < no && st == OTTER_OK; o++) {
            if (out[o].kind != OTTER_ARG_TENSOR) {
                st = ot_ctx_error(ctx, OTTER_ERR_INVALID, "body output %zu is %s, expected a tensor", o,
                                  ot_arg_kind_name(out[o].kind));
                break;
            }
            st = ot_seq_insert(res[o], res[o]->n, out[o].tensor, true);
            if (st == OTTER_OK)
                out[o] = (otter_arg){0};
            else
                st = fail_seq(ctx, st);
        }
        for (size_t o = 0; o < no; o++) otter_arg_free(&out[o]);
    }
    for (size_t o = 0; o < no && st == OTTER_OK; o++) {
        otter_arg a = otter_arg_of_sequence(res[o]);
        st = ot_ctx_output_arg(ctx, o, &a);
        res[o] = a.sequence;
    }
    if (res)
        for (size_t o = 0; o < no; o++) otter_sequence_free(res[o]);
    ot_free(call);
    ot_free(in);
    ot_free(out);
    ot_free(res);
    return st;
}

/* ---- Optional, OptionalHasElement, OptionalGetElement ------------------------------------------ */

static otter_status copy_value(ot_kernel_ctx *ctx, size_t o, otter_arg a) {
    if (a.kind == OTTER_ARG_SEQUENCE) return output_seq_copy(ctx, o, a.sequence);
    return ot_ctx_output_arg(ctx, o, &a);
}

otter_status ot_kernel_optional_make(ot_kernel_ctx *ctx) {
    otter_arg a = ot_ctx_input_arg(ctx, 0);
    if (a.kind == OTTER_ARG_UNSET) {
        if (!otter_node_attr(ctx->node, "type"))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "without an input the attribute 'type' is required");
        return ot_ctx_output_none(ctx, 0);
    }
    return copy_value(ctx, 0, a);
}

otter_status ot_kernel_optional_has_element(ot_kernel_ctx *ctx) {
    otter_arg a = ot_ctx_input_arg(ctx, 0);
    if (a.kind == OTTER_ARG_UNSET && ctx->opset < 18)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is missing (optional from opset 18)");
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_BOOL, 0, NULL);
    if (!y) return ctx->output_status;
    *(uint8_t *)y->data = a.kind == OTTER_ARG_TENSOR || a.kind == OTTER_ARG_SEQUENCE;
    return OTTER_OK;
}

otter_status ot_kernel_optional_get_element(ot_kernel_ctx *ctx) {
    otter_arg a = ot_ctx_input_arg(ctx, 0);
    if (a.kind != OTTER_ARG_TENSOR && a.kind != OTTER_ARG_SEQUENCE)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' is %s", ot_ctx_input_name(ctx, 0),
                            ot_arg_kind_name(a.kind));
    return copy_value(ctx, 0, a);
}

/* ---- com.microsoft optimizers over sequences ---------------------------------------------------- */

static otter_status scalar_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t, const char *what) {
    OT_TRY(need_tensor(ctx, i, t));
    if (otter_tensor_numel(*t) < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' (%s) is empty", i, ot_ctx_input_name(ctx, i), what);
    return OTTER_OK;
}

/* update_signal (optional bool): false means skip the update. */
static otter_status update_signal(const ot_kernel_ctx *ctx, size_t i, bool *update) {
    *update = true;
    otter_arg a = ot_ctx_input_arg(ctx, i);
    if (a.kind == OTTER_ARG_UNSET || a.kind == OTTER_ARG_NONE) return OTTER_OK;
    if (a.kind != OTTER_ARG_TENSOR || otter_tensor_numel(a.tensor) < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu (update_signal) must be a non-empty tensor", i);
    *update = ot_get_f64(a.tensor->data, a.tensor->dtype, 0) != 0;
    return OTTER_OK;
}

/* Output 0: the flag, shaped like `like`; BOOL unless the graph declares it INT64 (files from 2023
 * do: ONNX Runtime refuses them since 1.16, otter reads both). */
static otter_status flag_output(ot_kernel_ctx *ctx, const otter_tensor *like, bool value) {
    otter_dtype dt = OTTER_DTYPE_BOOL;
    const char *name = ctx->node->n_outputs ? ctx->node->outputs[0] : "";
    const otter_type *ty =
        name[0] && ctx->model && ctx->model->graph ? otter_graph_value_type(ctx->model->graph, name) : NULL;
    if (ty && ty->kind == OTTER_TYPE_TENSOR && ty->has_elem_type && ty->elem_type == OTTER_DTYPE_INT64)
        dt = OTTER_DTYPE_INT64;
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, like->rank, like->dims);
    if (!y) return ctx->output_status;
    for (int64_t k = 0, n = otter_tensor_numel(y); k < n; k++) ot_set_f64(y->data, dt, k, value ? 1 : 0);
    return OTTER_OK;
}

/* Outputs first.. are the input sequences from `in` on, updated in place (when asked for). */
static otter_status inplace_outputs(ot_kernel_ctx *ctx, size_t first, size_t in, size_t count) {
    for (size_t k = 0; k < count; k++) {
        size_t o = first + k;
        if (o >= ctx->n_outputs || !ctx->node->outputs[o][0]) continue;
        OT_TRY(ot_ctx_output_sequence_inplace(ctx, o, in + k));
    }
    return OTTER_OK;
}

static otter_status same_length(const ot_kernel_ctx *ctx, const otter_sequence *const *qs, size_t n) {
    if (qs[0]->n == 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' is an empty sequence", ot_ctx_input_name(ctx, 0));
    for (size_t k = 1; k < n; k++)
        if (qs[k]->n != qs[0]->n)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "the sequences hold %zu and %zu tensors", qs[0]->n, qs[k]->n);
    return OTTER_OK;
}

/* AdamWOptimizer(lr, step, weights, gradients, momentums_1, momentums_2[, update_signal])
 *   -> updated_flag[, updated_weights, updated_momentums_1, updated_momentums_2] */
otter_status ot_kernel_adamw_optimizer(ot_kernel_ctx *ctx) {
    const otter_tensor *lr, *step;
    OT_TRY(scalar_input(ctx, 0, &lr, "learning rate"));
    OT_TRY(scalar_input(ctx, 1, &step, "step"));
    const otter_sequence *q[4];
    for (size_t k = 0; k < 4; k++) OT_TRY(need_seq(ctx, 2 + k, &q[k]));
    OT_TRY(same_length(ctx, q, 4));
    ot_adamw_params p;
    if (ot_adamw_params_from_node(ctx->node, &p) != OTTER_OK) return fail_seq(ctx, OTTER_ERR_INVALID);
    bool update;
    OT_TRY(update_signal(ctx, 6, &update));
    if (update) {
        float rate = (float)ot_get_f64(lr->data, lr->dtype, 0);
        int64_t t = ot_get_i64(step->data, step->dtype, 0);
        otter_status st = ot_adamw_step(&p, rate, t, q[0]->n, q[0]->items, (const otter_tensor *const *)q[1]->items,
                                        q[2]->items, q[3]->items);
        if (st != OTTER_OK) return fail_seq(ctx, st);
    }
    OT_TRY(flag_output(ctx, step, update));
    OT_TRY(inplace_outputs(ctx, 1, 2, 1));
    return inplace_outputs(ctx, 2, 4, 2);
}

/* SGDOptimizerV2(lr, weights, gradients[, update_signal]) -> update_completed[, updated_weights] */
otter_status ot_kernel_sgd_optimizer_v2(ot_kernel_ctx *ctx) {
    const otter_tensor *lr;
    OT_TRY(scalar_input(ctx, 0, &lr, "learning rate"));
    const otter_sequence *q[2];
    for (size_t k = 0; k < 2; k++) OT_TRY(need_seq(ctx, 1 + k, &q[k]));
    OT_TRY(same_length(ctx, q, 2));
    bool update;
    OT_TRY(update_signal(ctx, 3, &update));
    if (update) {
        float rate = (float)ot_get_f64(lr->data, lr->dtype, 0);
        otter_status st = ot_sgd_step(rate, q[0]->n, q[0]->items, (const otter_tensor *const *)q[1]->items);
        if (st != OTTER_OK) return fail_seq(ctx, st);
    }
    OT_TRY(flag_output(ctx, lr, update));
    return inplace_outputs(ctx, 1, 1, 1);
}

/* InplaceClipGradNorm(gradients) -> clipped_gradients; attributes max_norm (1.0), norm_type ("fro"). */
otter_status ot_kernel_inplace_clip_grad_norm(ot_kernel_ctx *ctx) {
    const otter_sequence *g;
    OT_TRY(need_seq(ctx, 0, &g));
    /* com.microsoft's operator: no ONNX schema */
    float max_norm = ot_ctx_attr_float_or(ctx, "max_norm", 1.0f);
    const char *norm_type = ot_ctx_attr_string_or(ctx, "norm_type", "fro");
    otter_status st = ot_clip_grad_norm(g->n, g->items, max_norm, norm_type, NULL);
    if (st != OTTER_OK) return fail_seq(ctx, st);
    return inplace_outputs(ctx, 0, 0, 1);
}
