/* otter_sequence and otter_arg: the non-tensor values a session carries (see value.h). */
#include <string.h>

#include "core/core.h"
#include "runtime/value.h"

otter_status otter_sequence_create(otter_sequence **out, otter_dtype elem_type) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_sequence_create: out is NULL");
    *out = NULL;
    if (elem_type < OTTER_DTYPE_UNDEFINED || elem_type >= OTTER_DTYPE_COUNT_)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_sequence_create: element type %d", (int)elem_type);
    otter_sequence *q = ot_calloc(1, sizeof *q);
    if (!q) return OT_NOMEM();
    q->elem_type = elem_type;
    *out = q;
    return OTTER_OK;
}

void ot_seq_clear(otter_sequence *q) {
    for (size_t i = 0; i < q->n; i++)
        if (q->owned[i]) otter_tensor_free(q->items[i]);
    q->n = 0;
}

void otter_sequence_free(otter_sequence *q) {
    if (!q) return;
    ot_seq_clear(q);
    ot_free(q->items);
    ot_free(q->owned);
    ot_free(q);
}

otter_status ot_seq_insert(otter_sequence *q, size_t pos, otter_tensor *t, bool owned) {
    if (!t) return ot_error(OTTER_ERR_ARGUMENT, "sequence: tensor is NULL");
    if (pos > q->n) return ot_error(OTTER_ERR_ARGUMENT, "sequence: position %zu beyond length %zu", pos, q->n);
    if (q->elem_type != OTTER_DTYPE_UNDEFINED && t->dtype != q->elem_type)
        return ot_error(OTTER_ERR_INVALID, "sequence of %s: a %s tensor cannot be added",
                        otter_dtype_name(q->elem_type), otter_dtype_name(t->dtype));
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 8;
        otter_tensor **items = ot_realloc(q->items, cap * sizeof *items);
        if (!items) return OT_NOMEM();
        q->items = items;
        bool *own = ot_realloc(q->owned, cap * sizeof *own);
        if (!own) return OT_NOMEM();
        q->owned = own;
        q->cap = cap;
    }
    memmove(&q->items[pos + 1], &q->items[pos], (q->n - pos) * sizeof *q->items);
    memmove(&q->owned[pos + 1], &q->owned[pos], (q->n - pos) * sizeof *q->owned);
    q->items[pos] = t;
    q->owned[pos] = owned;
    q->n++;
    if (q->elem_type == OTTER_DTYPE_UNDEFINED) q->elem_type = t->dtype;
    return OTTER_OK;
}

void ot_seq_erase(otter_sequence *q, size_t pos) {
    if (pos >= q->n) return;
    if (q->owned[pos]) otter_tensor_free(q->items[pos]);
    memmove(&q->items[pos], &q->items[pos + 1], (q->n - pos - 1) * sizeof *q->items);
    memmove(&q->owned[pos], &q->owned[pos + 1], (q->n - pos - 1) * sizeof *q->owned);
    q->n--;
}

otter_status ot_seq_insert_copy(otter_sequence *q, size_t pos, const otter_tensor *t) {
    otter_tensor *c = NULL;
    OT_TRY(otter_tensor_clone(&c, t));
    otter_status st = ot_seq_insert(q, pos, c, true);
    if (st != OTTER_OK) otter_tensor_free(c);
    return st;
}

otter_status ot_seq_clone(otter_sequence **out, const otter_sequence *src) {
    OT_TRY(otter_sequence_create(out, src->elem_type));
    for (size_t i = 0; i < src->n; i++) {
        otter_status st = ot_seq_insert_copy(*out, i, src->items[i]);
        if (st != OTTER_OK) {
            otter_sequence_free(*out);
            *out = NULL;
            return st;
        }
    }
    return OTTER_OK;
}

otter_status otter_sequence_append(otter_sequence *q, otter_tensor *t) {
    if (!q) return ot_error(OTTER_ERR_ARGUMENT, "otter_sequence_append: sequence is NULL");
    return ot_seq_insert(q, q->n, t, true);
}

otter_status otter_sequence_append_view(otter_sequence *q, otter_tensor *t) {
    if (!q) return ot_error(OTTER_ERR_ARGUMENT, "otter_sequence_append_view: sequence is NULL");
    return ot_seq_insert(q, q->n, t, false);
}

size_t otter_sequence_length(const otter_sequence *q) { return q ? q->n : 0; }
otter_dtype otter_sequence_elem_type(const otter_sequence *q) { return q ? q->elem_type : OTTER_DTYPE_UNDEFINED; }
otter_tensor *otter_sequence_at(const otter_sequence *q, size_t i) { return q && i < q->n ? q->items[i] : NULL; }

void otter_arg_free(otter_arg *a) {
    if (!a) return;
    otter_tensor_free(a->tensor);
    otter_sequence_free(a->sequence);
    *a = (otter_arg){0};
}

const char *ot_arg_kind_name(otter_arg_kind k) {
    switch (k) {
    case OTTER_ARG_TENSOR:
        return "a tensor";
    case OTTER_ARG_SEQUENCE:
        return "a sequence";
    case OTTER_ARG_NONE:
        return "an optional without a value";
    default:
        return "omitted";
    }
}
