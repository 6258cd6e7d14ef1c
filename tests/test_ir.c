/* The IR editing API and model I/O: build, edit, clone, save and load back; external data;
 * unknown protobuf fields survive a round trip. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/proto_extra.h"
#include "testutil.h"

static otter_model *small_model(void) {
    otter_model *m;
    CHECK_OK(otter_model_create(&m, "g", 17));
    otter_graph *g = m->graph;
    int64_t dims[2] = {-1, 4};
    const char *params[2] = {"batch", NULL};
    CHECK_OK(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 2, dims, params));
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, 2, dims, params));
    float w[4] = {1, 2, 3, 4};
    int64_t wd[1] = {4};
    otter_tensor *t;
    CHECK_OK(otter_tensor_from_data(&t, "w", OTTER_DTYPE_FLOAT, 1, wd, w));
    CHECK_OK(otter_graph_add_initializer(g, t));
    otter_node *n;
    const char *in[] = {"x", "w"}, *out[] = {"t"};
    CHECK_OK(otter_node_create(&n, "Mul", "mul", 2, in, 1, out));
    CHECK_OK(otter_graph_add_node(g, n));
    const char *in2[] = {"t"}, *out2[] = {"y"};
    CHECK_OK(otter_node_create(&n, "LeakyRelu", "act", 1, in2, 1, out2));
    CHECK_OK(otter_node_set_attr_float(n, "alpha", 0.25f));
    CHECK_OK(otter_graph_add_node(g, n));
    return m;
}

static void test_build_and_edit(void) {
    otter_model *m = small_model();
    otter_graph *g = m->graph;
    CHECK(g->n_nodes == 2 && g->n_inputs == 1 && g->n_outputs == 1 && g->n_initializers == 1);
    CHECK(otter_model_opset(m, "") == 17 && otter_model_opset(m, "ai.onnx") == 17);
    CHECK(otter_model_opset(m, "com.microsoft") == 0);
    CHECK(otter_node_attr_float(g->nodes[1], "alpha", 0) == 0.25f);
    CHECK(otter_graph_find_producer(g, "t") == 0);
    CHECK_STATUS(otter_graph_add_input(g, "x", OTTER_DTYPE_FLOAT, 0, NULL, NULL), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "'x'") != NULL);

    /* Rename a tensor everywhere it appears. */
    CHECK_OK(otter_graph_rename(g, "t", "scaled"));
    CHECK(strcmp(g->nodes[0]->outputs[0], "scaled") == 0 && strcmp(g->nodes[1]->inputs[0], "scaled") == 0);
    CHECK_OK(otter_graph_rename(g, "w", "weight"));
    CHECK(otter_graph_find_initializer(g, "weight") == 0 && strcmp(g->nodes[0]->inputs[1], "weight") == 0);
    CHECK_STATUS(otter_graph_rename(g, "x", "y"), OTTER_ERR_INVALID);

    /* Change an input's type, delete and re-add an output. */
    int64_t d3[3] = {2, 2, 4};
    CHECK_OK(otter_graph_change_input(g, "x", OTTER_DTYPE_FLOAT, 3, d3, NULL));
    CHECK(g->inputs[0].type.rank == 3 && g->inputs[0].type.dims[2].value == 4);
    CHECK_OK(otter_graph_delete_output(g, "y"));
    CHECK_STATUS(otter_graph_delete_output(g, "y"), OTTER_ERR_NOT_FOUND);
    CHECK_OK(otter_graph_add_output(g, "y", OTTER_DTYPE_FLOAT, -1, NULL, NULL));
    CHECK(g->outputs[0].type.rank == -1);

    /* Replacing an attribute keeps one copy. */
    CHECK_OK(otter_node_set_attr_float(g->nodes[1], "alpha", 0.5f));
    CHECK(g->nodes[1]->n_attrs == 1 && otter_node_attr_float(g->nodes[1], "alpha", 0) == 0.5f);
    int64_t ints[3] = {1, 2, 3};
    CHECK_OK(otter_node_set_attr_ints(g->nodes[1], "list", 3, ints));
    CHECK(otter_node_attr(g->nodes[1], "list")->n_ints == 3);

    /* A constant node, then delete nodes by name and by output. */
    int64_t one = 1;
    otter_tensor *c;
    CHECK_OK(otter_tensor_from_data(&c, NULL, OTTER_DTYPE_INT64, 1, &one, &one));
    CHECK_OK(otter_graph_add_constant(g, "k", c));
    otter_tensor_free(c);
    CHECK(g->n_nodes == 3 && strcmp(g->nodes[2]->op_type, "Constant") == 0);
    CHECK_OK(otter_graph_delete_node(g, "k"));
    CHECK_OK(otter_graph_delete_node(g, "mul"));
    CHECK(g->n_nodes == 1);
    CHECK_STATUS(otter_graph_delete_node(g, "nope"), OTTER_ERR_NOT_FOUND);

    otter_model *copy;
    CHECK_OK(otter_model_clone(&copy, m));
    CHECK(copy->graph->n_nodes == 1 && copy->graph->nodes[0] != g->nodes[0]);
    otter_model_free(copy);
    otter_model_free(m);
}

static void test_memory_round_trip(void) {
    otter_model *m = small_model();
    void *buf;
    size_t size;
    CHECK_OK(otter_model_save_to_memory(m, &buf, &size));
    otter_model *back;
    CHECK_OK(otter_model_load_from_memory(&back, buf, size, NULL));
    CHECK(back->graph->n_nodes == 2 && strcmp(back->graph->nodes[1]->op_type, "LeakyRelu") == 0);
    CHECK(strcmp(back->graph->inputs[0].type.dims[0].param, "batch") == 0);
    CHECK(otter_tensor_equal(back->graph->initializers[0], m->graph->initializers[0]));
    /* Save again: byte-identical. */
    void *buf2;
    size_t size2;
    CHECK_OK(otter_model_save_to_memory(back, &buf2, &size2));
    CHECK(size == size2 && memcmp(buf, buf2, size) == 0);
    printf("memory round trip: %zu bytes, identical on re-save\n", size);

    /* A field protobuf-c does not know (tag 99, varint 7) is kept and written back. */
    unsigned char *ext = malloc(size + 3);
    memcpy(ext, buf, size);
    ext[size] = ((99 << 3) & 0x7f) | 0x80;
    ext[size + 1] = 99 >> 4;
    ext[size + 2] = 7;
    otter_model *unk;
    CHECK_OK(otter_model_load_from_memory(&unk, ext, size + 3, NULL));
    void *buf3;
    size_t size3;
    CHECK_OK(otter_model_save_to_memory(unk, &buf3, &size3));
    CHECK(size3 == size + 3 && memcmp(buf3, ext, size3) == 0);
    printf("unknown field: kept (%zu bytes)\n", size3);
    otter_free(buf3);
    otter_model_free(unk);
    free(ext);
    otter_free(buf);
    otter_free(buf2);
    otter_model_free(back);
    otter_model_free(m);
}

static void test_external_data(void) {
    otter_model *m = small_model();
    int64_t d[1] = {100000};
    otter_tensor *big;
    CHECK_OK(otter_tensor_create(&big, "big", OTTER_DTYPE_FLOAT, 1, d));
    for (int i = 0; i < 100000; i++) ((float *)big->data)[i] = (float)i * 0.5f;
    CHECK_OK(otter_graph_add_initializer(m->graph, big));
    char path[4096];
    snprintf(path, sizeof path, "%s", tu_tmp_path("ext_model.onnx"));
    otter_save_options o = {.external_threshold = 1024};
    CHECK_OK(otter_model_save(m, path, &o));
    char data_path[4200];
    snprintf(data_path, sizeof data_path, "%s.data", path);
    CHECK(access(data_path, F_OK) == 0);
    otter_model *back;
    CHECK_OK(otter_model_load(&back, path));
    ptrdiff_t i = otter_graph_find_initializer(back->graph, "big");
    CHECK(i >= 0 && otter_tensor_equal(back->graph->initializers[i], m->graph->initializers[1]));
    /* Small tensors stay inline. */
    ptrdiff_t w = otter_graph_find_initializer(back->graph, "w");
    CHECK(w >= 0 && back->graph->initializers[w]->extra->storage == OTTER_STORAGE_RAW);

    /* Bring it inline again. */
    otter_save_options inl = {.all_inline = true};
    const char *path2 = tu_tmp_path("ext_model_inline.onnx");
    CHECK_OK(otter_model_save(back, path2, &inl));
    otter_model *back2;
    CHECK_OK(otter_model_load(&back2, path2));
    i = otter_graph_find_initializer(back2->graph, "big");
    CHECK(i >= 0 && back2->graph->initializers[i]->extra->storage == OTTER_STORAGE_RAW);
    CHECK(otter_tensor_equal(back2->graph->initializers[i], m->graph->initializers[1]));

    /* A missing data file is a clear error naming the tensor and file. */
    unlink(data_path);
    otter_model *gone;
    CHECK_STATUS(otter_model_load(&gone, path), OTTER_ERR_NOT_FOUND);
    CHECK(strstr(otter_last_error(), "big") && strstr(otter_last_error(), "ext_model.onnx.data"));
    printf("external data: 400000 bytes out and back, missing file -> %s\n", otter_last_error());
    otter_model_free(back2);
    otter_model_free(back);
    otter_model_free(m);
}

int main(void) {
    test_build_and_edit();
    test_memory_round_trip();
    test_external_data();
    return tu_finish("test_ir");
}
