/* Sequences of tensors (otter_sequence) as the runtime keeps them, and helpers for kernels that
 * build or edit them. */
#ifndef OTTER_RUNTIME_VALUE_H
#define OTTER_RUNTIME_VALUE_H

#include <stdbool.h>
#include <stddef.h>

#include "otter/runtime.h"

struct otter_sequence {
    otter_dtype elem_type; /* UNDEFINED until the first element (or when made without a type) */
    size_t n, cap;
    otter_tensor **items; /* n */
    bool *owned;          /* n: freed with the sequence */
};

/* What an argument holds, for messages: "a tensor", "a sequence", "an optional without a value",
 * "omitted". */
const char *ot_arg_kind_name(otter_arg_kind k);

/* Insert t at position pos (<= n), owned or a view. On failure t is left to the caller. */
otter_status ot_seq_insert(otter_sequence *q, size_t pos, otter_tensor *t, bool owned);
/* Remove element pos (< n), freeing it when owned. */
void ot_seq_erase(otter_sequence *q, size_t pos);
/* Remove every element (freeing the owned ones); the element type stays. */
void ot_seq_clear(otter_sequence *q);
/* New sequence whose elements are owned deep copies of src's. */
otter_status ot_seq_clone(otter_sequence **out, const otter_sequence *src);
/* Add an owned deep copy of t at position pos. */
otter_status ot_seq_insert_copy(otter_sequence *q, size_t pos, const otter_tensor *t);

#endif
