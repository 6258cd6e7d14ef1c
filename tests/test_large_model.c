/* A model over protobuf's 2 GiB limit is saved with external data without being asked, and loads back. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "otter/otter.h"
#include "testutil.h"

int main(void) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "large", 17));
    int64_t n = (int64_t)((2.25 * 1024 * 1024 * 1024) / 4); /* 2.25 GiB of float32 */
    otter_tensor *w;
    CHECK_OK(otter_tensor_create(&w, "w", OTTER_DTYPE_FLOAT, 1, &n));
    float *d = w->data;
    for (int64_t i = 0; i < n; i += 1 << 20) d[i] = (float)(i >> 20); /* a value every 4 MiB */
    d[n - 1] = 42.0f;
    CHECK_OK(otter_graph_add_initializer(m->graph, w));
    CHECK_OK(otter_graph_add_input(m->graph, "x", OTTER_DTYPE_FLOAT, 1, &n, NULL));
    const char *in[] = {"x", "w"}, *out[] = {"y"};
    otter_node *node;
    CHECK_OK(otter_node_create(&node, "Add", "add", 2, in, 1, out));
    CHECK_OK(otter_graph_add_node(m->graph, node));
    CHECK_OK(otter_graph_add_output(m->graph, "y", OTTER_DTYPE_FLOAT, 1, &n, NULL));

    char path[4096], data_path[4200];
    snprintf(path, sizeof path, "%s", tu_tmp_path("large.onnx"));
    snprintf(data_path, sizeof data_path, "%s.data", path);
    otter_save_options none = {0};
    CHECK_OK(otter_model_save(m, path, &none));
    struct stat ms, ds;
    CHECK(stat(path, &ms) == 0 && ms.st_size < (1 << 20));
    CHECK(stat(data_path, &ds) == 0 && (int64_t)ds.st_size >= n * 4);
    printf("2.25 GiB initializer: model file %lld bytes, external data %lld bytes\n", (long long)ms.st_size,
           (long long)ds.st_size);

    otter_model *back;
    CHECK_OK(otter_model_load(&back, path));
    if (back) {
        const otter_tensor *b = back->graph->initializers[0];
        CHECK(b->dims[0] == n && memcmp(b->data, d, (size_t)n * 4) == 0);
        printf("loaded back: %lld floats equal\n", (long long)n);
    }
    otter_model_free(back);
    otter_model_free(m);
    unlink(path);
    unlink(data_path);
    return tu_finish("test_large_model");
}
