/* Files that are not what they seem, and what killed writers leave behind (issue 18, finding 9):
 *   - a FIFO named as a model or as a tensor's external data is refused at once, not read forever;
 *   - "<file>.tmp.<pid>" temporaries of a writer that died are removed by the next save of <file>
 *     (model and external data), while a live writer's temporary and unrelated names stay;
 *   - a model paired with the external data of another save (files mixed by hand) is refused, naming
 *     the file; data rewritten by another tool (without otter's header) still loads;
 *   - re-saving a model over its external data, also data another tool wrote (no otter header to catch
 *     a mix; finding 7), killed before each rename and unlink of the save (rename and unlink below
 *     stand in for libc's and raise SIGKILL at a chosen call), always leaves a model that loads with
 *     either all old or all new values, and the next save removes what killed saves left. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "onnx.pb-c.h"
#include "testutil.h"

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* The n-th rename or unlink (counting from 1) kills the process before it happens; 0: never. */
static int kill_at_call, calls;
static void maybe_die(void) {
    if (kill_at_call && ++calls == kill_at_call) raise(SIGKILL);
}
int rename(const char *from, const char *to) {
    maybe_die();
    return renameat(AT_FDCWD, from, AT_FDCWD, to);
}
int unlink(const char *path) {
    maybe_die();
    return unlinkat(AT_FDCWD, path, 0);
}

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

/* How many files in dir are named `wanted` or "<wanted>.<suffix>" (a save's data file and alternates);
 * the last one's name goes to name. */
static int data_files(const char *dir, const char *wanted, char *name, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    size_t len = strlen(wanted);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, wanted, len) == 0 && (e->d_name[len] == '\0' || e->d_name[len] == '.'))
            n++, snprintf(name, cap, "%s", e->d_name);
    if (d) closedir(d);
    return n;
}

static float first_value(const char *path, otter_status *s) {
    otter_model *m = NULL;
    *s = otter_model_load(&m, path);
    float v = *s == OTTER_OK ? ((float *)m->graph->initializers[0]->data)[0] : -1.0f;
    otter_model_free(m);
    return v;
}

static void test_killed_resaves(const char *dir) {
    char path[4096], data[4096], name[256];
    snprintf(path, sizeof path, "%s/foreign.onnx", dir);
    snprintf(data, sizeof data, "%s/foreign.onnx.data", dir);
    /* Another tool's pair: W = {1, 1} at offset 0, other bytes (7s) where otter puts its first tensor. */
    size_t size;
    uint8_t *bytes = external_model("foreign.onnx.data", &size);
    FILE *f = fopen(path, "wb");
    CHECK(bytes && f && fwrite(bytes, 1, size, f) == size);
    if (f) fclose(f);
    free(bytes);
    float raw[32];
    for (int i = 0; i < 32; i++) raw[i] = i < 2 ? 1.0f : 7.0f;
    f = fopen(data, "wb");
    CHECK(f && fwrite(raw, sizeof raw, 1, f) == 1);
    if (f) fclose(f);
    otter_status s;
    float live = first_value(path, &s);
    CHECK(s == OTTER_OK && live == 1.0f);
    int killed = 0, finished = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int k = 1; k <= 6; k++) {
            float next = 10.0f * (float)(pass * 6 + k);
            pid_t p = fork();
            if (p == 0) {
                otter_model *m = NULL;
                if (otter_model_load(&m, path) != OTTER_OK) _exit(3);
                float *w = m->graph->initializers[0]->data;
                w[0] = w[1] = next;
                calls = 0, kill_at_call = k;
                _exit(otter_model_save(m, path, &(otter_save_options){.external_threshold = 1}) == OTTER_OK ? 0 : 4);
            }
            int status = 0;
            waitpid(p, &status, 0);
            bool was_killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
            killed += was_killed, finished += WIFEXITED(status) && WEXITSTATUS(status) == 0;
            float now = first_value(path, &s);
            if (s != OTTER_OK || (now != live && now != next))
                printf("pass %d, killed at call %d: loads %s with W[0] = %g (old %g, new %g): %s\n", pass, k,
                       otter_status_name(s), now, live, next, s == OTTER_OK ? "a mix" : otter_last_error());
            CHECK(s == OTTER_OK && (now == live || now == next));
            CHECK(was_killed || now == next);
            live = now;
        }
    printf("%d re-saves killed before a rename or unlink, %d finished: every model loaded old or new values\n", killed,
           finished);
    CHECK(killed >= 6 && finished >= 3);
    /* What killed saves left goes at the next save: one data file remains. */
    otter_model *m = NULL;
    CHECK_OK(otter_model_load(&m, path));
    CHECK_OK(otter_model_save(m, path, &(otter_save_options){.external_threshold = 1}));
    otter_model_free(m);
    int n = data_files(dir, "foreign.onnx.data", name, sizeof name);
    printf("after a clean save: %d data file(s), %s\n", n, name);
    CHECK(n == 1 && first_value(path, &s) == live && s == OTTER_OK);
    snprintf(data, sizeof data, "%s/%s", dir, name);
    unlink(data);
    unlink(path);
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
    /* The re-save went to a fresh name and removed the first save's file. */
    char live[4096];
    CHECK(!exists(data) && data_files(dir, "pair.onnx.data", live, sizeof live) == 1);
    snprintf(data, sizeof data, "%s/%s", dir, live);
    /* The new model with the first save's data, copied in by hand. */
    copy_file(old_data, data);
    otter_status s = otter_model_load(&back, path);
    printf("new model, previous save's data -> %s: %s\n", otter_status_name(s), otter_last_error());
    CHECK(s == OTTER_ERR_INVALID && strstr(otter_last_error(), "pair.onnx.data.") &&
          strstr(otter_last_error(), "was written by another save") && !back);
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
    test_killed_resaves(dir);
    rmdir(dir);
    return tu_finish("test_file_safety");
}
