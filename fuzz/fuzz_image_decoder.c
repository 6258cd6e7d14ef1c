/* libFuzzer target: ImageDecoder (every format's decoder) on arbitrary bytes, through a session as
 * a model runs it. The first byte picks the pixel format. A decoded image must be [H, W, C] uint8
 * with C matching the format and no more pixels than the cap. */
#include <stdint.h>
#include <stdlib.h>

#include "otter/otter.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static otter_session *session_for(int format) {
    static const char *const FORMATS[] = {"RGB", "BGR", "Grayscale"};
    static otter_session *sessions[3];
    static otter_model *models[3]; /* a session reads its model for its whole life */
    if (sessions[format]) return sessions[format];
    otter_model *m = NULL;
    otter_node *n = NULL;
    const char *in = "encoded", *out = "image";
    if (otter_model_create(&m, "g", 20) || otter_node_create(&n, "ImageDecoder", "decode", 1, &in, 1, &out) ||
        otter_node_set_attr_string(n, "pixel_format", FORMATS[format]) || otter_graph_add_node(m->graph, n) ||
        otter_graph_add_input(m->graph, in, OTTER_DTYPE_UINT8, -1, NULL, NULL) ||
        otter_graph_add_output(m->graph, out, OTTER_DTYPE_UINT8, -1, NULL, NULL))
        abort();
    otter_session_options o = {.n_threads = 1};
    if (otter_session_create(&sessions[format], m, &o)) abort();
    models[format] = m;
    return sessions[format];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int format = data[0] % 3;
    otter_tensor *x = NULL, *y = NULL;
    int64_t n = (int64_t)size - 1;
    if (otter_tensor_from_data(&x, "encoded", OTTER_DTYPE_UINT8, 1, &n, data + 1)) abort();
    const otter_tensor *in[] = {x};
    if (otter_session_run(session_for(format), 1, NULL, in, 1, NULL, &y) == OTTER_OK) {
        if (y->dtype != OTTER_DTYPE_UINT8 || y->rank != 3 || y->dims[2] != (format == 2 ? 1 : 3) ||
            y->dims[0] * y->dims[1] > ((int64_t)1 << 26))
            abort();
        otter_tensor_free(y);
    }
    otter_tensor_free(x);
    return 0;
}
