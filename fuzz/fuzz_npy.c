/* libFuzzer target: the .npy reader on arbitrary bytes. A tensor that loads cannot hold more data
 * than the input had. */
#include <stdint.h>
#include <stdlib.h>

#include "otter/otter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    otter_tensor *t = NULL;
    if (otter_tensor_load_npy_from_memory(&t, data, size) != OTTER_OK) return 0;
    if (otter_tensor_nbytes(t) > size) abort();
    otter_tensor_free(t);
    return 0;
}
