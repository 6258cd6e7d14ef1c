/* libFuzzer target: the TensorProto (.pb) reader on arbitrary bytes (no folder: external data must
 * be refused, never read). */
#include <stdint.h>
#include <stdlib.h>

#include "otter/otter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    otter_tensor *t = NULL;
    if (otter_tensor_load_pb_from_memory(&t, data, size) != OTTER_OK) return 0;
    size_t nb = otter_tensor_nbytes(t);
    if (nb && !t->data) abort();
    otter_tensor_free(t);
    return 0;
}
