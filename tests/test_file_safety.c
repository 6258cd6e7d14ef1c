/* Files that are not what they seem, and what killed writers leave behind (issue 18, finding 9):
 *   - a FIFO named as a model or as a tensor's external data is refused at once, not read forever;
 *   - "<file>.tmp.<pid>" temporaries of a writer that died are removed by the next save of <file>
 *     (model and external data), while a live writer's temporary and unrelated names stay;
 *   - a model paired with the external data of another save (a save killed between renaming the
 *     model and its data, or files mixed by hand) is refused, naming the file; data rewritten by
 *     another tool (without otter's header) still loads. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onnx.pb-c.h"
#include "testutil.h"

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

/* A pid that ran and exited: its temporaries are stale. */
static pid_t dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return p;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_file_safety: a read blocked (FIFO opened as a file)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

/* A model whose initializer W (2 floats) lives in external file `location`. */
static uint8_t *external_model(const char *location, size_t *size) {
    Onnx__StringStringEntryProto loc = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
    loc.key = "location";
    loc.value = (char *)location;
    Onnx__StringStringEntryProto *entries[] = {&loc};
    int64_t dims[] = {2};
    Onnx__TensorProto w = ONNX__TENSOR_PROTO__INIT;
    w.name = "W";
    w.has_data_type = true;
    w.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    w.n_dims = 1;
    w.dims = dims;
    w.has_data_location = true;
    w.data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    w.n_external_data = 1;
    w.external_data = entries;
    Onnx__TensorProto *inits[] = {&w};
    Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
    g.name = "g";
    g.n_initializer = 1;
    g.initializer = inits;
    Onnx__OperatorSetIdProto op = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    op.domain = "";
    op.has_version = true;
    op.version = 17;
    Onnx__OperatorSetIdProto *ops[] = {&op};
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    m.has_ir_version = true;
    m.ir_version = 8;
    m.n_opset_import = 1;
    m.opset_import = ops;
    m.graph = &g;
    *size = onnx__model_proto__get_packed_size(&m);
    uint8_t *buf = malloc(*size);
    if (buf) onnx__model_proto__pack(&m, buf);
    return buf;
}

static void test_fifos(const char *dir) {
    char fifo[4096], model[4096];
    snprintf(fifo, sizeof fifo, "%s/weights.fifo", dir);
    snprintf(model, sizeof model, "%s/model.fifo", dir);
    CHECK(mkfifo(fifo, 0600) == 0 && mkfifo(model, 0600) == 0);
    signal(SIGALRM, on_alarm);
    alarm(10);
    otter_model *m = NULL;
    otter_status s = otter_model_load(&m, model);
    printf("model path is a FIFO -> %s: %s\n", otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_IO && strstr(otter_last_error(), "not a regular file") && !m);
    size_t size;
    uint8_t *bytes = external_model("weights.fifo", &size);
    s = otter_model_load_from_memory(&m, bytes, size, dir);
    printf("external data is a FIFO -> %s: %s\n", otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_IO && strstr(otter_last_error(), "tensor 'W'") &&
          strstr(otter_last_error(), "not a regular file") && !m);
    alarm(0);
    free(bytes);
    unlink(fifo);
    unlink(model);
}

static void test_stale_temps(const char *dir) {
    char path[4096], data[4096], stale[4096], stale_data[4096], live[4096], other[4096];
    snprintf(path, sizeof path, "%s/m.onnx", dir);
    snprintf(data, sizeof data, "%s/m.onnx.data", dir);
    snprintf(stale, sizeof stale, "%s.tmp.%ld", path, (long)dead_pid());
    snprintf(stale_data, sizeof stale_data, "%s.tmp.%ld", data, (long)dead_pid());
    snprintf(live, sizeof live, "%s.tmp.%ld", path, (long)getppid());
    snprintf(other, sizeof other, "%s.tmp.notapid", path);
    touch(stale);
    touch(stale_data);
    touch(live);
    touch(other);
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 17));
    otter_tensor *w = NULL;
    CHECK_OK(otter_tensor_create(&w, "W", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){1024}));
    CHECK_OK(otter_graph_add_initializer(m->graph, w));
    CHECK_OK(otter_model_save(m, path, &(otter_save_options){.external_threshold = 16}));
    otter_model_free(m);
    CHECK(exists(path) && exists(data));
    CHECK(!exists(stale) && !exists(stale_data));
    CHECK(exists(live) && exists(other));
    printf("stale temporaries of dead writers removed; a live writer's and unrelated names kept\n");
    unlink(live);
    unlink(other);
    unlink(path);
    unlink(data);
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *bytes = tu_read_file(from, &n);
    FILE *f = bytes ? fopen(to, "wb") : NULL;
    CHECK(f != NULL);
    if (f) {
        fwrite(bytes, 1, n, f);
        fclose(f);
    }
    free(bytes);
}

static void test_mixed_saves(const char *dir) {
    char path[4096], data[4096], old_data[4096];
    snprintf(path, sizeof path, "%s/pair.onnx", dir);
    snprintf(data, sizeof data, "%s/pair.onnx.data", dir);
    snprintf(old_data, sizeof old_data, "%s/old.data", dir);
    otter_model *m = NULL;
    CHECK_OK(otter_model_create(&m, "g", 17));
    otter_tensor *w = NULL;
    CHECK_OK(otter_tensor_create(&w, "W", OTTER_DTYPE_FLOAT, 1, (const int64_t[]){256}));
    for (int i = 0; i < 256; i++) ((float *)w->data)[i] = 1.0f;
    CHECK_OK(otter_graph_add_initializer(m->graph, w));
    const otter_save_options ext = {.external_threshold = 16};
    CHECK_OK(otter_model_save(m, path, &ext));
    copy_file(data, old_data);
    for (int i = 0; i < 256; i++) ((float *)w->data)[i] = 2.0f;
    CHECK_OK(otter_model_save(m, path, &ext));
    otter_model *back = NULL;
    CHECK_OK(otter_model_load(&back, path));
    CHECK(back && ((float *)back->graph->initializers[0]->data)[0] == 2.0f);
    otter_model_free(back);
    /* The new model with the first save's data: what a kill between the two renames leaves. */
    copy_file(old_data, data);
    otter_status s = otter_model_load(&back, path);
    printf("new model, previous save's data -> %s: %s\n", otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_INVALID && strstr(otter_last_error(), "pair.onnx.data' was written by another save") && !back);
    /* Data rewritten by another tool (no otter header; same offsets here) is taken as it is. */
    size_t n;
    unsigned char *bytes = tu_read_file(data, &n);
    if (bytes) {
        memset(bytes, 0, 64);
        FILE *f = fopen(data, "wb");
        if (f) {
            fwrite(bytes, 1, n, f);
            fclose(f);
        }
    }
    free(bytes);
    CHECK_OK(otter_model_load(&back, path));
    otter_model_free(back);
    otter_model_free(m);
    unlink(path);
    unlink(data);
    unlink(old_data);
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tu_tmp_path("file_safety"));
    mkdir(dir, 0700);
    test_fifos(dir);
    test_stale_temps(dir);
    test_mixed_saves(dir);
    rmdir(dir);
    return tu_finish("test_file_safety");
}
