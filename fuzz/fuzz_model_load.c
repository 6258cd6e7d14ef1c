/* libFuzzer target: the ONNX model loader on arbitrary bytes. A model that loads must also save
 * and load again (the saved bytes are otter's own output, so refusing them is a bug). */
#include <stdint.h>
#include <stdlib.h>

#include "otter/otter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    otter_model *m = NULL;
    if (otter_model_load_from_memory(&m, data, size, NULL) != OTTER_OK) return 0;
    void *buf = NULL;
    size_t n = 0;
    if (otter_model_save_to_memory(m, &buf, &n) != OTTER_OK) abort();
    otter_model *m2 = NULL;
    if (otter_model_load_from_memory(&m2, buf, n, NULL) != OTTER_OK) abort();
    otter_model_free(m2);
    otter_free(buf);
    otter_model_free(m);
    return 0;
}
