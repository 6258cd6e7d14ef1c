/* A full disk while saving: every writer fails with a clear error and leaves the previous file
 * intact (writes go to a temporary file renamed into place). The disk filling up is simulated
 * with RLIMIT_FSIZE, which makes write() fail with EFBIG past the limit. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "otter/otter.h"
#include "testutil.h"

static bool same_file(const char *path, const unsigned char *want, size_t n) {
    size_t got_n;
    unsigned char *got = tu_read_file(path, &got_n);
    bool same = got && got_n == n && memcmp(got, want, n) == 0;
    free(got);
    return same;
}

static void leftovers(const char *dir_file) {
    /* No temporary file may be left next to the target. */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls %s.tmp.* >/dev/null 2>&1", dir_file);
    CHECK(system(cmd) != 0);
}

int main(void) {
    signal(SIGXFSZ, SIG_IGN);
    otter_model *m;
    CHECK_OK(otter_model_mnist_dnn(&m, 3));
    otter_artifacts_options o = {.loss = OTTER_LOSS_CROSS_ENTROPY};
    otter_artifacts a;
    CHECK_OK(otter_artifacts_build(&a, m, &o));

    char model_path[4096], ckpt_path[4096];
    snprintf(model_path, sizeof model_path, "%s", tu_tmp_path("full_disk_model.onnx"));
    snprintf(ckpt_path, sizeof ckpt_path, "%s", tu_tmp_path("full_disk.ckpt"));
    /* The previous files: a small model and a checkpoint with a property. */
    otter_model *small;
    CHECK_OK(otter_model_create(&small, "small", 17));
    CHECK_OK(otter_model_save(small, model_path, NULL));
    CHECK_OK(otter_checkpoint_set_property_int(a.checkpoint, "epoch", 1));
    CHECK_OK(otter_checkpoint_save(a.checkpoint, ckpt_path, NULL));
    size_t model_n, ckpt_n;
    unsigned char *model_before = tu_read_file(model_path, &model_n), *ckpt_before = tu_read_file(ckpt_path, &ckpt_n);
    CHECK(model_before && ckpt_before && ckpt_n > 700000);

    /* The disk "fills up" at 64 KiB: both saves (800 KB each) must fail cleanly. */
    struct rlimit old, lim = {64 * 1024, 64 * 1024};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK_OK(otter_checkpoint_set_property_int(a.checkpoint, "epoch", 2));
    otter_status s1 = otter_checkpoint_save(a.checkpoint, ckpt_path, NULL);
    char msg1[1024];
    snprintf(msg1, sizeof msg1, "%s", otter_last_error());
    otter_status s2 = otter_model_save(m, model_path, NULL);
    char msg2[1024];
    snprintf(msg2, sizeof msg2, "%s", otter_last_error());
    setrlimit(RLIMIT_FSIZE, &old);

    CHECK(s1 == OTTER_ERR_IO && strstr(msg1, "full_disk.ckpt"));
    CHECK(s2 == OTTER_ERR_IO && strstr(msg2, "full_disk_model.onnx"));
    CHECK(same_file(ckpt_path, ckpt_before, ckpt_n));
    CHECK(same_file(model_path, model_before, model_n));
    leftovers(ckpt_path);
    leftovers(model_path);
    printf("checkpoint save on a full disk: %s -> %s; previous %zu-byte file intact\n", otter_status_name(s1), msg1,
           ckpt_n);
    printf("model save on a full disk: %s -> %s; previous %zu-byte file intact\n", otter_status_name(s2), msg2,
           model_n);

    /* The previous checkpoint still loads, with its old property. */
    otter_checkpoint *back;
    CHECK_OK(otter_checkpoint_load(&back, ckpt_path));
    const otter_property *p;
    CHECK_OK(otter_checkpoint_get_property(back, "epoch", &p));
    CHECK(p && p->type == OTTER_PROPERTY_INT && p->i == 1);
    otter_checkpoint_free(back);

    free(model_before);
    free(ckpt_before);
    otter_model_free(small);
    otter_model_free(m);
    otter_artifacts_free(&a);
    return tu_finish("test_full_disk");
}
