/* libFuzzer target: the .pb readers on arbitrary bytes (no folder: external data must be refused, never
 * read): a TensorProto, and the same bytes as the SequenceProto / OptionalProto a graph may declare. */
#include <stdint.h>
#include <stdlib.h>

#include "otter/otter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tensor(const otter_tensor *t) {
    if (otter_tensor_nbytes(t) && !t->data) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    otter_tensor *t = NULL;
    if (otter_tensor_load_pb_from_memory(&t, data, size) == OTTER_OK) {
        check_tensor(t);
        otter_tensor_free(t);
    }
    static otter_type any_tensor = {.kind = OTTER_TYPE_TENSOR, .rank = -1};
    static otter_type bf16_tensor = {
        .kind = OTTER_TYPE_TENSOR, .elem_type = OTTER_DTYPE_BFLOAT16, .has_elem_type = true, .rank = -1};
    static otter_type seq = {.kind = OTTER_TYPE_SEQUENCE, .rank = -1, .elem = &any_tensor};
    static otter_type opt_tensor = {.kind = OTTER_TYPE_OPTIONAL, .rank = -1, .elem = &bf16_tensor};
    static otter_type opt_seq = {.kind = OTTER_TYPE_OPTIONAL, .rank = -1, .elem = &seq};
    const otter_type *declared[] = {&seq, &opt_tensor, &opt_seq};
    for (size_t k = 0; k < sizeof declared / sizeof declared[0]; k++) {
        otter_arg a;
        if (otter_arg_load_pb_from_memory(&a, data, size, declared[k]) != OTTER_OK) continue;
        if (a.kind == OTTER_ARG_TENSOR) check_tensor(a.tensor);
        for (size_t i = 0; a.kind == OTTER_ARG_SEQUENCE && i < otter_sequence_length(a.sequence); i++)
            check_tensor(otter_sequence_at(a.sequence, i));
        otter_arg_free(&a);
    }
    return 0;
}
