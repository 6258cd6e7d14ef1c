/* Data loaders on small generated files (IDX raw/gzip, CIFAR-10 binary, npy pairs, CSV), their errors, the batch
 * iterator (shuffling per seed and epoch, partial batches, subsets, no allocation per batch), partitions, and
 * allocation failures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "otter/data.h"
#include "testutil.h"

/* ---- file writers ---- */

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_gz(const char *path, const void *d, size_t n, int members) {
    /* members > 1: the data split into that many concatenated gzip members. */
    FILE *f = fopen(path, "wb");
    size_t per = n / (size_t)members;
    for (int m = 0; m < members; m++) {
        size_t b = per * (size_t)m, e = m == members - 1 ? n : per * (size_t)(m + 1);
        z_stream z;
        memset(&z, 0, sizeof z);
        deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        uLong cap = deflateBound(&z, (uLong)(e - b));
        unsigned char *out = malloc(cap);
        z.next_in = (Bytef *)((const unsigned char *)d + b);
        z.avail_in = (uInt)(e - b);
        z.next_out = out;
        z.avail_out = (uInt)cap;
        deflate(&z, Z_FINISH);
        fwrite(out, 1, cap - z.avail_out, f);
        deflateEnd(&z);
        free(out);
    }
    fclose(f);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* IDX images [n, rows, cols] with pixel (i, j) = (7 i + j) % 256, and labels i % 10 (label_at/label_val: one
 * record given another label). Returns byte sizes through *isz, *lsz. */
#define NI 7
#define RR 3
#define CC 4
static unsigned char idx_img[16 + NI * RR * CC], idx_lab[8 + NI];
static void make_idx(void) {
    put_be32(idx_img, 0x803);
    put_be32(idx_img + 4, NI);
    put_be32(idx_img + 8, RR);
    put_be32(idx_img + 12, CC);
    for (int i = 0; i < NI; i++)
        for (int j = 0; j < RR * CC; j++) idx_img[16 + i * RR * CC + j] = (unsigned char)((7 * i + j) % 256);
    put_be32(idx_lab, 0x801);
    put_be32(idx_lab + 4, NI);
    for (int i = 0; i < NI; i++) idx_lab[8 + i] = (unsigned char)(i % 10);
}

static char *spec2(const char *kind, const char *a, const char *b) {
    static char buf[3][8192];
    static int k;
    k = (k + 1) % 3;
    if (b)
        snprintf(buf[k], sizeof buf[k], "%s:%s,%s", kind, a, b);
    else
        snprintf(buf[k], sizeof buf[k], "%s:%s", kind, a);
    return buf[k];
}

static char *tmp(const char *name) {
    static char buf[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s", tu_tmp_path(name));
    return buf[k];
}

static bool error_has(const char *a, const char *b) {
    const char *m = otter_last_error();
    bool ok = strstr(m, a) != NULL && (!b || strstr(m, b) != NULL);
    if (!ok) fprintf(stderr, "  message '%s' lacks '%s'%s%s\n", m, a, b ? " / " : "", b ? b : "");
    return ok;
}

/* Every sample of ds as float rows [n, numel] and labels [n]. */
static float *all_rows(otter_dataset *ds, int64_t **labels) {
    int64_t n = otter_dataset_size(ds), numel = otter_dataset_input_numel(ds);
    int64_t xd[2] = {n, numel}, yd[1] = {n};
    otter_tensor *x = NULL, *y = NULL;
    otter_tensor_create(&x, NULL, OTTER_DTYPE_FLOAT, 2, xd);
    otter_tensor_create(&y, NULL, OTTER_DTYPE_INT64, 1, yd);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    CHECK_OK(otter_dataset_gather(ds, idx, n, x, otter_dataset_labels(ds) ? y : NULL));
    float *rows = malloc((size_t)(n * numel) * sizeof(float));
    memcpy(rows, x->data, (size_t)(n * numel) * sizeof(float));
    if (labels) {
        *labels = malloc((size_t)n * sizeof(int64_t));
        memcpy(*labels, y->data, (size_t)n * sizeof(int64_t));
    }
    free(idx);
    otter_tensor_free(x);
    otter_tensor_free(y);
    return rows;
}

/* ---- IDX ---- */

static void check_idx_content(otter_dataset *ds, const char *what) {
    CHECK(otter_dataset_size(ds) == NI);
    CHECK(otter_dataset_num_classes(ds) == 10);
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_input_shape(ds, dims) == 1 && dims[0] == RR * CC);
    int64_t *lab = NULL;
    float *rows = all_rows(ds, &lab);
    int bad = 0;
    for (int i = 0; i < NI; i++) {
        if (lab[i] != i % 10) bad++;
        for (int j = 0; j < RR * CC; j++)
            if (rows[i * RR * CC + j] != (float)((7 * i + j) % 256) / 255.0f) bad++;
    }
    CHECK(bad == 0);
    printf("idx %s: %d samples, %d pixels and labels compared, %d differ\n", what, NI, NI * (RR * CC + 1), bad);
    free(rows);
    free(lab);
}

static void test_idx(void) {
    make_idx();
    char *img = tmp("img-idx3-ubyte"), *lab = tmp("lab-idx1-ubyte");
    write_bytes(img, idx_img, sizeof idx_img);
    write_bytes(lab, idx_lab, sizeof idx_lab);
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("idx", img, lab), NULL));
    if (ds) check_idx_content(ds, "raw");
    otter_dataset_free(ds);

    /* gzip, one member and several concatenated members */
    char *imgz = tmp("img.gz"), *labz = tmp("lab.gz");
    write_gz(imgz, idx_img, sizeof idx_img, 1);
    write_gz(labz, idx_lab, sizeof idx_lab, 3);
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("idx", imgz, labz), NULL));
    if (ds) check_idx_content(ds, "gzip");
    otter_dataset_free(ds);

    /* mnist:DIR with the standard names; train raw, test gzip'd */
    char *dir = tmp("mnistdir");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    char p[8192];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    write_bytes(p, idx_img, sizeof idx_img);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", dir);
    write_bytes(p, idx_lab, sizeof idx_lab);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
    unsigned char img2[16 + 2 * RR * CC];
    memcpy(img2, idx_img, sizeof img2);
    put_be32(img2 + 4, 2);
    write_gz(p, img2, sizeof img2, 1);
    unsigned char lab2[10];
    memcpy(lab2, idx_lab, 10);
    put_be32(lab2 + 4, 2);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_gz(p, lab2, 10, 1);
    otter_dataset_options o = {0};
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("mnist", dir, NULL), &o));
    CHECK(otter_dataset_size(ds) == NI);
    otter_dataset_free(ds);
    o.split = OTTER_SPLIT_TEST;
    o.layout = OTTER_LAYOUT_IMAGE;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("fashion-mnist", dir, NULL), &o));
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_size(ds) == 2);
    CHECK(otter_dataset_input_shape(ds, dims) == 3 && dims[0] == 1 && dims[1] == RR && dims[2] == CC);
    otter_dataset_free(ds);
    /* normalization: none, standard with the dataset's constants and with given ones */
    o.split = OTTER_SPLIT_TRAIN;
    o.layout = OTTER_LAYOUT_DEFAULT;
    double worst = 0;
    for (int mode = 0; mode < 3; mode++) {
        float mean = 0.25f, sd = 0.5f;
        o.norm = mode == 0 ? OTTER_NORM_NONE : OTTER_NORM_STANDARD;
        o.mean = mode == 2 ? &mean : NULL;
        o.std = mode == 2 ? &sd : NULL;
        o.num_channels = mode == 2 ? 1 : 0;
        ds = NULL;
        CHECK_OK(otter_dataset_open(&ds, spec2(mode == 1 ? "fashion-mnist" : "mnist", dir, NULL), &o));
        if (!ds) continue;
        float *rows = all_rows(ds, NULL);
        for (int i = 0; i < NI * RR * CC; i++) {
            float v = (float)idx_img[16 + i];
            float want = mode == 0 ? v : mode == 1 ? (v / 255.0f - 0.2860f) / 0.3530f : (v / 255.0f - 0.25f) / 0.5f;
            worst = tu_worse(worst, fabsf(rows[i] - want));
        }
        free(rows);
        otter_dataset_free(ds);
    }
    CHECK(worst == 0);
    printf("idx normalization none/standard(fashion constants)/standard(given): worst error %g\n", worst);
    o.norm = OTTER_NORM_STANDARD;
    o.mean = NULL;
    o.std = NULL;
    float m3[3] = {0, 0, 0}, s3[3] = {1, 1, 1};
    o.mean = m3;
    o.std = s3;
    o.num_channels = 3;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("mnist", dir, NULL), &o), OTTER_ERR_ARGUMENT);
    s3[0] = 0;
    o.num_channels = 1;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("mnist", dir, NULL), &o), OTTER_ERR_ARGUMENT);
    CHECK(error_has("std must be positive", NULL));

    /* errors */
    snprintf(p, sizeof p, "%s/nothing", dir);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("mnist", p, NULL), NULL), OTTER_ERR_NOT_FOUND);
    CHECK(error_has("train-images-idx3-ubyte", p));
    CHECK_STATUS(otter_dataset_open(&ds, "mnistx:/tmp", NULL), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_dataset_open(&ds, "no-colon", NULL), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_dataset_open(&ds, "idx:onlyone", NULL), OTTER_ERR_ARGUMENT);

    char *bad = tmp("bad-idx");
    /* truncated inside record 5 */
    write_bytes(bad, idx_img, 16 + 5 * RR * CC + 3);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "truncated") && error_has("record 5", "offset 79"));
    /* truncated header */
    write_bytes(bad, idx_img, 10);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "header needs 16 bytes"));
    write_bytes(bad, idx_img, 2);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "truncated"));
    /* trailing bytes */
    unsigned char big[sizeof idx_img + 5];
    memcpy(big, idx_img, sizeof idx_img);
    memset(big + sizeof idx_img, 0, 5);
    write_bytes(bad, big, sizeof big);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "offset 100: 5 bytes after"));
    /* wrong magic: the label file given as images, and images as labels */
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", lab, img), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(lab, "wrong magic 0x00000801") && error_has("offset 0", "0x00000803"));
    /* a header whose dims promise far more than the file holds is refused before allocating */
    unsigned char huge[16];
    memcpy(huge, idx_img, 16);
    put_be32(huge + 4, 0xffffffffu);
    put_be32(huge + 8, 0xffffffu);
    write_bytes(bad, huge, 16);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    /* mismatched counts */
    unsigned char lab6[8 + NI];
    memcpy(lab6, idx_lab, sizeof lab6);
    put_be32(lab6 + 4, NI - 1);
    char *badlab = tmp("bad-lab");
    write_bytes(badlab, lab6, sizeof lab6 - 1);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", img, badlab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(img, badlab) && error_has("7 images", "6 labels"));
    /* label out of range for the class count: 10 classes by default, then 4 */
    memcpy(lab6, idx_lab, sizeof lab6);
    lab6[8 + 5] = 10;
    write_bytes(badlab, lab6, sizeof lab6);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", img, badlab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(badlab, "record 5 (offset 13): label 10 is out of range for 10 classes"));
    otter_dataset_options o4 = {0};
    o4.num_classes = 4;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", img, lab), &o4), OTTER_ERR_INVALID);
    CHECK(error_has("record 4 (offset 12): label 4 is out of range for 4 classes", NULL));
    o4.num_classes = 7;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("idx", img, lab), &o4));
    CHECK(otter_dataset_num_classes(ds) == 7);
    otter_dataset_free(ds);
    /* gzip: truncated stream, corrupt stream, garbage after it, and a bad IDX inside a good gzip */
    size_t gzn;
    unsigned char *gz = tu_read_file(imgz, &gzn);
    write_bytes(bad, gz, gzn - 12);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "truncated gzip"));
    unsigned char *gz2 = malloc(gzn + 3);
    memcpy(gz2, gz, gzn);
    for (size_t i = 12; i < 20 && i < gzn; i++) gz2[i] ^= 0x5a;
    write_bytes(bad, gz2, gzn);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "gzip"));
    memcpy(gz2, gz, gzn);
    memcpy(gz2 + gzn, "xyz", 3);
    write_bytes(bad, gz2, gzn + 3);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(bad, "3 bytes of garbage"));
    write_gz(bad, idx_img, sizeof idx_img - 1, 1);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("idx", bad, lab), NULL), OTTER_ERR_INVALID);
    CHECK(error_has("(gzip; offsets in the decompressed data)", "record 6"));
    free(gz);
    free(gz2);

    /* every truncation of the raw and gzip'd files is refused, none crashes */
    int refused = 0, total = 0;
    for (size_t cut = 0; cut < sizeof idx_img; cut++, total++) {
        write_bytes(bad, idx_img, cut);
        refused += otter_dataset_open(&ds, spec2("idx", bad, lab), NULL) == OTTER_ERR_INVALID;
    }
    gz = tu_read_file(imgz, &gzn);
    for (size_t cut = 0; cut < gzn; cut++, total++) {
        write_bytes(bad, gz, cut);
        refused += otter_dataset_open(&ds, spec2("idx", bad, lab), NULL) == OTTER_ERR_INVALID;
    }
    free(gz);
    CHECK(refused == total);
    printf("idx truncations (raw and gzip): %d of %d refused\n", refused, total);
}

/* ---- CIFAR-10 ---- */

static unsigned char cifar_px(int rec, int c, int y, int x) {
    return (unsigned char)((rec * 7 + c * 50 + y * 3 + x) % 256);
}

static void write_cifar(const char *path, int first, int nrec, int bad_label_at) {
    size_t n = (size_t)nrec * 3073;
    unsigned char *b = malloc(n);
    for (int r = 0; r < nrec; r++) {
        unsigned char *p = b + (size_t)r * 3073;
        p[0] = (unsigned char)(r == bad_label_at ? 10 : (first + r) % 10);
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) p[1 + c * 1024 + y * 32 + x] = cifar_px(first + r, c, y, x);
    }
    write_bytes(path, b, n);
    free(b);
}

static void test_cifar(void) {
    char *dir = tmp("cifardir");
    char cmd[8192], p[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    CHECK(system(cmd) == 0);
    int first = 0;
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, i % 2 ? "%s/data_batch_%d.bin" : "%s/data_batch_%d", dir, i); /* both spellings */
        write_cifar(p, first, i, -1);
        first += i;
    }
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    write_cifar(p, 100, 4, -1);
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("cifar10", dir, NULL), NULL));
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_size(ds) == 15);
    CHECK(otter_dataset_input_shape(ds, dims) == 3 && dims[0] == 3 && dims[1] == 32 && dims[2] == 32);
    int bad = 0;
    if (ds) {
        int64_t *lab;
        float *rows = all_rows(ds, &lab);
        for (int r = 0; r < 15; r++) {
            if (lab[r] != r % 10) bad++;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < 32; y++)
                    for (int x = 0; x < 32; x++)
                        if (rows[r * 3072 + c * 1024 + y * 32 + x] != (float)cifar_px(r, c, y, x) / 255.0f) bad++;
        }
        free(rows);
        free(lab);
    }
    otter_dataset_free(ds);
    CHECK(bad == 0);
    printf("cifar10 train (5 batches, 15 records): %d values differ\n", bad);
    /* test split, standard normalization with CIFAR's constants, flat layout */
    otter_dataset_options o = {0};
    o.split = OTTER_SPLIT_TEST;
    o.norm = OTTER_NORM_STANDARD;
    o.layout = OTTER_LAYOUT_FLAT;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("cifar10", dir, NULL), &o));
    CHECK(otter_dataset_size(ds) == 4);
    CHECK(otter_dataset_input_shape(ds, dims) == 1 && dims[0] == 3072);
    double worst = 0;
    if (ds) {
        const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, sd[3] = {0.2470f, 0.2435f, 0.2616f};
        float *rows = all_rows(ds, NULL);
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 3; c++)
                for (int j = 0; j < 1024; j++) {
                    float want = ((float)cifar_px(100 + r, c, j / 32, j % 32) / 255.0f - mean[c]) / sd[c];
                    worst = tu_worse(worst, fabsf(rows[r * 3072 + c * 1024 + j] - want));
                }
        free(rows);
    }
    otter_dataset_free(ds);
    CHECK(worst == 0);
    printf("cifar10 test batch, per-channel standardization: worst error %g\n", worst);
    /* one file */
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("cifar10", p, NULL), NULL));
    CHECK(otter_dataset_size(ds) == 4);
    otter_dataset_free(ds);
    /* errors: truncated record, label out of range, missing batch */
    char *badf = tmp("cifar-bad.bin");
    write_cifar(badf, 0, 3, 2);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("cifar10", badf, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(badf, "record 2 (offset 6146): label 10 is out of range for 10 classes"));
    size_t n;
    unsigned char *b = tu_read_file(badf, &n);
    write_bytes(badf, b, 3073 + 100);
    free(b);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("cifar10", badf, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(badf, "record 1 at offset 3073 has only 100 bytes"));
    snprintf(p, sizeof p, "%s/data_batch_3.bin", dir);
    remove(p);
    CHECK_STATUS(otter_dataset_open(&ds, spec2("cifar10", dir, NULL), NULL), OTTER_ERR_NOT_FOUND);
    CHECK(error_has("data_batch_3", dir));
}

/* ---- npy ---- */

static void test_npy(void) {
    int64_t xd[3] = {5, 2, 3}, yd[1] = {5}, td[2] = {5, 2};
    float xv[30];
    for (int i = 0; i < 30; i++) xv[i] = (float)i * 0.5f - 3.0f;
    int64_t yv[5] = {2, 0, 1, 2, 4};
    float tv[10];
    for (int i = 0; i < 10; i++) tv[i] = (float)i / 4.0f;
    otter_tensor *X = NULL, *Y = NULL, *T = NULL;
    CHECK_OK(otter_tensor_from_data(&X, NULL, OTTER_DTYPE_FLOAT, 3, xd, xv));
    CHECK_OK(otter_tensor_from_data(&Y, NULL, OTTER_DTYPE_INT64, 1, yd, yv));
    CHECK_OK(otter_tensor_from_data(&T, NULL, OTTER_DTYPE_FLOAT, 2, td, tv));
    char *xp = tmp("x.npy"), *yp = tmp("y.npy"), *tp = tmp("t.npy");
    CHECK_OK(otter_tensor_save_npy(X, xp));
    CHECK_OK(otter_tensor_save_npy(Y, yp));
    CHECK_OK(otter_tensor_save_npy(T, tp));
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("npy", xp, yp), NULL));
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_size(ds) == 5 && otter_dataset_num_classes(ds) == 5);
    CHECK(otter_dataset_input_shape(ds, dims) == 2 && dims[0] == 2 && dims[1] == 3);
    /* the arrays as columns too (sharing the inputs' and labels' bytes) */
    const otter_tensor *c0 = otter_dataset_column(ds, 0), *c1 = otter_dataset_column(ds, 1);
    CHECK(c0 && c1 && c0->dtype == OTTER_DTYPE_FLOAT && c0->rank == 3 && c1->dtype == OTTER_DTYPE_INT64 &&
          memcmp(c0->data, xv, sizeof xv) == 0 && memcmp(c1->data, yv, sizeof yv) == 0);
    int bad = 0;
    if (ds) {
        int64_t *lab;
        float *rows = all_rows(ds, &lab);
        for (int i = 0; i < 30; i++) bad += rows[i] != xv[i];
        for (int i = 0; i < 5; i++) bad += lab[i] != yv[i];
        free(rows);
        free(lab);
    }
    otter_dataset_free(ds);
    /* standard normalization over channel = first sample dim (2 channels of 3) */
    float mean[2] = {1, -1}, sd[2] = {2, 4};
    otter_dataset_options o = {0};
    o.norm = OTTER_NORM_STANDARD;
    o.mean = mean;
    o.std = sd;
    o.num_channels = 2;
    o.layout = OTTER_LAYOUT_FLAT;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("npy", xp, tp), &o));
    CHECK(otter_dataset_input_shape(ds, dims) == 1 && dims[0] == 6);
    CHECK(otter_dataset_num_classes(ds) == 0 && otter_dataset_target_numel(ds) == 2 && !otter_dataset_labels(ds));
    if (ds) {
        float *rows = all_rows(ds, NULL);
        for (int i = 0; i < 30; i++) {
            int c = (i % 6) / 3;
            bad += rows[i] != (xv[i] - mean[c]) / sd[c];
        }
        free(rows);
        int64_t idx[2] = {4, 1}, bd[2] = {2, 2};
        otter_tensor *bt = NULL;
        otter_tensor_create(&bt, NULL, OTTER_DTYPE_FLOAT, 2, bd);
        CHECK_OK(otter_dataset_gather(ds, idx, 2, NULL, bt));
        const float *f = bt->data;
        bad += f[0] != tv[8] || f[1] != tv[9] || f[2] != tv[2] || f[3] != tv[3];
        /* a labels tensor for float targets is refused */
        otter_tensor *lt = NULL;
        otter_tensor_create(&lt, NULL, OTTER_DTYPE_INT64, 1, bd);
        CHECK_STATUS(otter_dataset_gather(ds, idx, 2, NULL, lt), OTTER_ERR_ARGUMENT);
        otter_tensor_free(lt);
        otter_tensor_free(bt);
    }
    otter_dataset_free(ds);
    CHECK(bad == 0);
    printf("npy: float inputs [5,2,3] with int64 labels and float targets [5,2]: %d values differ\n", bad);
    /* float labels as classes, errors */
    o = (otter_dataset_options){0};
    o.targets = OTTER_TARGETS_CLASS;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("npy", xp, tp), &o), OTTER_ERR_INVALID);
    CHECK(error_has(tp, "[N, 2]"));
    o.num_classes = 4;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("npy", xp, yp), &o), OTTER_ERR_INVALID);
    CHECK(error_has(yp, "element 4: label 4 is out of range for 4 classes"));
    int64_t y4d[1] = {4};
    otter_tensor *Y4 = NULL;
    CHECK_OK(otter_tensor_from_data(&Y4, NULL, OTTER_DTYPE_INT64, 1, y4d, yv));
    char *y4p = tmp("y4.npy");
    CHECK_OK(otter_tensor_save_npy(Y4, y4p));
    CHECK_STATUS(otter_dataset_open(&ds, spec2("npy", xp, y4p), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(xp, "has 5 samples") && error_has(y4p, "has 4"));
    CHECK_STATUS(otter_dataset_open(&ds, spec2("npy", xp, tmp("missing.npy")), NULL), OTTER_ERR_NOT_FOUND);
    /* uint8 inputs stay compact and scale by default; from_tensors */
    unsigned char u8[10] = {0, 51, 102, 255, 1, 2, 3, 4, 5, 6};
    int64_t ud[2] = {5, 2};
    otter_tensor *U = NULL;
    CHECK_OK(otter_tensor_from_data(&U, NULL, OTTER_DTYPE_UINT8, 2, ud, u8));
    ds = NULL;
    CHECK_OK(otter_dataset_from_tensors(&ds, U, Y, NULL));
    if (ds) {
        float *rows = all_rows(ds, NULL);
        int ub = 0;
        for (int i = 0; i < 10; i++) ub += rows[i] != (float)u8[i] / 255.0f;
        CHECK(ub == 0);
        free(rows);
    }
    otter_dataset_free(ds);
    otter_tensor_free(U);
    otter_tensor_free(Y4);
    otter_tensor_free(X);
    otter_tensor_free(Y);
    otter_tensor_free(T);
}

/* ---- CSV ---- */

static void write_text(const char *path, const char *s) { write_bytes(path, s, strlen(s)); }

static void test_csv(void) {
    char *p = tmp("d.csv");
    write_text(p, "label,a,b\r\n1, 0.5,2\r\n\r\n0,-1.25e1,3\r\n2,4,5");
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("csv", p, NULL), NULL));
    int64_t dims[OTTER_MAX_RANK];
    CHECK(otter_dataset_size(ds) == 3 && otter_dataset_num_classes(ds) == 3);
    CHECK(otter_dataset_input_shape(ds, dims) == 1 && dims[0] == 2);
    int bad = 0;
    if (ds) {
        int64_t *lab;
        float *rows = all_rows(ds, &lab);
        const float want[6] = {0.5f, 2, -12.5f, 3, 4, 5};
        const int64_t wl[3] = {1, 0, 2};
        for (int i = 0; i < 6; i++) bad += rows[i] != want[i];
        for (int i = 0; i < 3; i++) bad += lab[i] != wl[i];
        free(rows);
        free(lab);
    }
    otter_dataset_free(ds);
    /* last column, no header, float targets over 2 columns */
    write_text(p, "1,2,3,0\n4,5,6,1\n");
    otter_dataset_options o = {0};
    o.csv_label_column = -1;
    o.csv_header = OTTER_CSV_HEADER_NO;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("csv", p, NULL), &o));
    if (ds) {
        int64_t *lab;
        float *rows = all_rows(ds, &lab);
        bad += rows[0] != 1 || rows[2] != 3 || rows[3] != 4 || lab[0] != 0 || lab[1] != 1;
        free(rows);
        free(lab);
    }
    otter_dataset_free(ds);
    o.csv_label_column = 1;
    o.csv_num_targets = 2;
    o.targets = OTTER_TARGETS_FLOAT;
    ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec2("csv", p, NULL), &o));
    CHECK(otter_dataset_target_numel(ds) == 2 && otter_dataset_input_numel(ds) == 2);
    if (ds) {
        int64_t idx[2] = {1, 0}, xd[2] = {2, 2};
        otter_tensor *x = NULL, *t = NULL;
        otter_tensor_create(&x, NULL, OTTER_DTYPE_FLOAT, 2, xd);
        otter_tensor_create(&t, NULL, OTTER_DTYPE_FLOAT, 2, xd);
        CHECK_OK(otter_dataset_gather(ds, idx, 2, x, t));
        const float *xf = x->data, *tf = t->data;
        bad += xf[0] != 4 || xf[1] != 1 || xf[2] != 1 || xf[3] != 0;
        bad += tf[0] != 5 || tf[1] != 6 || tf[2] != 2 || tf[3] != 3;
        otter_tensor_free(x);
        otter_tensor_free(t);
    }
    otter_dataset_free(ds);
    CHECK(bad == 0);
    printf("csv: header/CRLF/blank line, last-column labels, 2 float target columns: %d values differ\n", bad);
    /* errors name line and column */
    write_text(p, "1,2,3\n0,x,3\n");
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(p, "line 2, column 2: 'x' is not a number"));
    write_text(p, "a,b,c\n1,2,3\n0,3\n");
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(p, "line 3: 2 fields, expected 3 (as on line 2)"));
    write_text(p, "1,2\n1.5,3\n");
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has("line 2, column 1: 1.5 is not a class label", NULL));
    write_text(p, "1,2\n9,3\n");
    o = (otter_dataset_options){0};
    o.num_classes = 5;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), &o), OTTER_ERR_INVALID);
    CHECK(error_has("line 2, column 1: label 9 is out of range for 5 classes", NULL));
    o.csv_label_column = 2;
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), &o), OTTER_ERR_ARGUMENT);
    write_text(p, "a,b\n");
    CHECK_STATUS(otter_dataset_open(&ds, spec2("csv", p, NULL), NULL), OTTER_ERR_INVALID);
    CHECK(error_has(p, "no data lines"));
}

/* ---- batches ---- */

/* A dataset whose input i is the float i and label i % 4. */
static otter_dataset *counting_dataset(int64_t n) {
    float *x = malloc((size_t)n * sizeof(float));
    int64_t *y = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)i;
        y[i] = i % 4;
    }
    int64_t xd[2] = {n, 1}, yd[1] = {n};
    otter_tensor *X = NULL, *Y = NULL;
    otter_tensor_from_data(&X, NULL, OTTER_DTYPE_FLOAT, 2, xd, x);
    otter_tensor_from_data(&Y, NULL, OTTER_DTYPE_INT64, 1, yd, y);
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_from_tensors(&ds, X, Y, NULL));
    otter_tensor_free(X);
    otter_tensor_free(Y);
    free(x);
    free(y);
    return ds;
}

/* One epoch: the sample ids in visiting order (returns how many), batch sizes into sizes[]. */
static int64_t run_epoch(otter_batch_iter *it, otter_tensor *x, otter_tensor *y, int64_t *seen, int64_t *sizes, int *nb,
                         int *mismatched) {
    int64_t total = 0, cnt;
    *nb = 0;
    for (;;) {
        CHECK_OK(otter_batch_iter_next(it, x, y, &cnt));
        if (cnt == 0) break;
        if (x->dims[0] != cnt || y->dims[0] != cnt) (*mismatched)++;
        for (int64_t r = 0; r < cnt; r++) {
            int64_t id = (int64_t)((float *)x->data)[r];
            seen[total++] = id;
            if (((int64_t *)y->data)[r] != id % 4) (*mismatched)++;
        }
        sizes[(*nb)++] = cnt;
    }
    return total;
}

static void test_batches(void) {
    const int64_t N = 10;
    otter_dataset *ds = counting_dataset(N);
    if (!ds) return;
    otter_batch_options bo = {0};
    bo.batch_size = 3;
    otter_batch_iter *it = NULL;
    CHECK_OK(otter_batch_iter_create(&it, ds, &bo));
    otter_tensor *x = NULL, *y = NULL;
    CHECK_OK(otter_batch_iter_alloc(it, &x, &y));
    CHECK(x->rank == 2 && x->dims[0] == 3 && x->dims[1] == 1 && y->dtype == OTTER_DTYPE_INT64 && y->dims[0] == 3);
    int64_t seen[64], sizes[16];
    int nb, mism = 0;
    CHECK(otter_batch_iter_num_batches(it) == 4);
    int64_t got = run_epoch(it, x, y, seen, sizes, &nb, &mism);
    CHECK(got == 10 && nb == 4 && sizes[0] == 3 && sizes[3] == 1 && mism == 0);
    for (int64_t i = 0; i < got; i++) CHECK(seen[i] == i);
    CHECK(x->dims[0] == 1); /* the partial batch's count */
    int64_t cnt = -1;
    CHECK_OK(otter_batch_iter_next(it, x, y, &cnt)); /* still at the end */
    CHECK(cnt == 0);
    CHECK_OK(otter_batch_iter_seek(it, 1, 0));
    CHECK_OK(otter_batch_iter_next(it, x, y, &cnt));
    CHECK(cnt == 3 && x->dims[0] == 3 && y->dims[0] == 3); /* back to full size */
    otter_batch_iter_free(it);
    printf("batches: 10 samples by 3 without shuffle: sizes %lld %lld %lld %lld\n", (long long)sizes[0],
           (long long)sizes[1], (long long)sizes[2], (long long)sizes[3]);
    /* drop_last */
    bo.drop_last = true;
    CHECK_OK(otter_batch_iter_create(&it, ds, &bo));
    x->dims[0] = y->dims[0] = 3;
    got = run_epoch(it, x, y, seen, sizes, &nb, &mism);
    CHECK(got == 9 && nb == 3 && otter_batch_iter_num_batches(it) == 3 && otter_batch_iter_num_samples(it) == 9);
    otter_batch_iter_free(it);

    /* shuffling: every sample once per epoch; same (seed, epoch) same order; epochs and seeds differ */
    bo.drop_last = false;
    bo.shuffle = true;
    bo.seed = 42;
    otter_batch_iter *a = NULL, *b = NULL;
    CHECK_OK(otter_batch_iter_create(&a, ds, &bo));
    CHECK_OK(otter_batch_iter_create(&b, ds, &bo));
    int64_t e0[16], e1[16], again[16];
    int once_bad = 0;
    for (int e = 0; e < 5; e++) {
        CHECK_OK(otter_batch_iter_seek(a, (uint64_t)e, 0));
        got = run_epoch(a, x, y, e == 0 ? e0 : e1, sizes, &nb, &mism);
        int count[16] = {0};
        for (int64_t i = 0; i < got; i++) count[(e == 0 ? e0 : e1)[i]]++;
        for (int i = 0; i < N; i++) once_bad += count[i] != 1;
        once_bad += got != N;
    }
    CHECK(once_bad == 0 && mism == 0);
    /* b jumps straight to epoch 4 and reproduces it */
    CHECK_OK(otter_batch_iter_seek(b, 4, 0));
    x->dims[0] = y->dims[0] = 3;
    run_epoch(b, x, y, again, sizes, &nb, &mism);
    CHECK(memcmp(again, e1, sizeof(int64_t) * N) == 0);
    CHECK(memcmp(e0, e1, sizeof(int64_t) * N) != 0);
    /* resume mid-epoch: batch 2 of epoch 4 continues where the uninterrupted run was */
    CHECK_OK(otter_batch_iter_seek(b, 4, 2));
    x->dims[0] = y->dims[0] = 3;
    got = run_epoch(b, x, y, again, sizes, &nb, &mism);
    CHECK(got == 4 && memcmp(again, e1 + 6, sizeof(int64_t) * 4) == 0);
    CHECK_STATUS(otter_batch_iter_seek(b, 0, 5), OTTER_ERR_ARGUMENT);
    otter_batch_iter_free(b);
    bo.seed = 43;
    CHECK_OK(otter_batch_iter_create(&b, ds, &bo));
    int64_t n;
    const int64_t *o43 = otter_batch_iter_order(b, &n);
    CHECK(n == N && memcmp(o43, e0, sizeof(int64_t) * N) != 0);
    otter_batch_iter_free(b);
    otter_batch_iter_free(a);
    printf("shuffle: 5 epochs of 10, each sample once per epoch (%d violations); epoch 4 reproduced from a seek\n",
           once_bad);

    /* uniformity: where sample 0 lands over 5000 seeds (5 samples: 1000 expected per position) */
    otter_dataset *d5 = counting_dataset(5);
    long pos[5] = {0};
    for (uint64_t seed = 0; seed < 5000; seed++) {
        bo.seed = seed;
        CHECK_OK(otter_batch_iter_create(&a, d5, &bo));
        const int64_t *ord = otter_batch_iter_order(a, &n);
        for (int i = 0; i < 5; i++)
            if (ord[i] == 0) pos[i]++;
        otter_batch_iter_free(a);
    }
    double chi2 = 0;
    for (int i = 0; i < 5; i++) chi2 += (pos[i] - 1000.0) * (pos[i] - 1000.0) / 1000.0;
    CHECK(chi2 < 18.5); /* 4 degrees of freedom, p = 0.001 */
    printf("shuffle uniformity: sample 0 at positions %ld %ld %ld %ld %ld over 5000 seeds, chi2 %.2f\n", pos[0], pos[1],
           pos[2], pos[3], pos[4], chi2);
    otter_dataset_free(d5);

    /* a subset of indices, int32 labels, no allocation per batch */
    int64_t sub[5] = {9, 2, 7, 7, 0};
    bo.indices = sub;
    bo.num_indices = 5;
    bo.batch_size = 2;
    bo.shuffle = false;
    CHECK_OK(otter_batch_iter_create(&a, ds, &bo));
    int64_t yd[1] = {2}, xd[3] = {2, 1, 1};
    otter_tensor *y32 = NULL, *x3 = NULL;
    otter_tensor_create(&y32, NULL, OTTER_DTYPE_INT32, 1, yd);
    otter_tensor_create(&x3, NULL, OTTER_DTYPE_FLOAT, 3, xd); /* another per-sample shape, same elements */
    otter_set_allocator(&tu_counting_allocator);
    tu_alloc_fail_at(0);
    int64_t ids[8];
    int k = 0, lbad = 0;
    for (;;) {
        CHECK_OK(otter_batch_iter_next(a, x3, y32, &cnt));
        if (!cnt) break;
        for (int64_t r = 0; r < cnt; r++) {
            ids[k] = (int64_t)((float *)x3->data)[r];
            lbad += ((int32_t *)y32->data)[r] != ids[k] % 4;
            k++;
        }
    }
    long allocs = tu_alloc_calls;
    otter_set_allocator(NULL);
    CHECK(allocs == 0 && lbad == 0 && k == 5);
    for (int i = 0; i < 5 && i < k; i++) CHECK(ids[i] == sub[i]);
    printf("subset [9 2 7 7 0] by 2 into int32 labels and [B,1,1] inputs: %d samples, %ld allocations\n", k, allocs);
    otter_batch_iter_free(a);
    /* bad tensors and indices */
    bo.indices = NULL;
    bo.num_indices = 0;
    bo.batch_size = 2;
    CHECK_OK(otter_batch_iter_create(&a, ds, &bo));
    int64_t wd[2] = {2, 3};
    otter_tensor *wrong = NULL;
    otter_tensor_create(&wrong, NULL, OTTER_DTYPE_FLOAT, 2, wd);
    y32->dims[0] = 2;
    CHECK_STATUS(otter_batch_iter_next(a, wrong, y32, &cnt), OTTER_ERR_ARGUMENT);
    x->dims[0] = 3;
    CHECK_STATUS(otter_batch_iter_next(a, x, NULL, &cnt), OTTER_ERR_ARGUMENT); /* dims[0] 3, batch 2 */
    otter_batch_iter_free(a);
    int64_t badidx[2] = {1, 10};
    bo.indices = badidx;
    bo.num_indices = 2;
    CHECK_STATUS(otter_batch_iter_create(&a, ds, &bo), OTTER_ERR_ARGUMENT);
    bo.indices = NULL;
    bo.batch_size = 0;
    CHECK_STATUS(otter_batch_iter_create(&a, ds, &bo), OTTER_ERR_ARGUMENT);
    CHECK_STATUS(otter_dataset_gather(ds, badidx, 2, NULL, NULL), OTTER_ERR_ARGUMENT);
    otter_tensor_free(wrong);
    otter_tensor_free(y32);
    otter_tensor_free(x3);
    otter_tensor_free(x);
    otter_tensor_free(y);
    otter_dataset_free(ds);
}

/* ---- partitions ---- */

/* A dataset of n_per samples of each of K labels, interleaved (label i % K). */
static otter_dataset *labelled(int64_t K, int64_t n_per) {
    int64_t n = K * n_per;
    float *x = calloc((size_t)n, sizeof(float));
    int64_t *y = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) y[i] = i % K;
    int64_t xd[2] = {n, 1}, yd[1] = {n};
    otter_tensor *X = NULL, *Y = NULL;
    otter_tensor_from_data(&X, NULL, OTTER_DTYPE_FLOAT, 2, xd, x);
    otter_tensor_from_data(&Y, NULL, OTTER_DTYPE_INT64, 1, yd, y);
    otter_dataset *ds = NULL;
    otter_dataset_from_tensors(&ds, X, Y, NULL);
    otter_tensor_free(X);
    otter_tensor_free(Y);
    free(x);
    free(y);
    return ds;
}

/* Every sample in exactly one client. */
static bool covers_once(const otter_partition *p, int64_t n) {
    char *seen = calloc((size_t)n, 1);
    bool ok = true;
    int64_t total = 0;
    for (int c = 0; c < otter_partition_num_clients(p); c++) {
        int64_t m;
        const int64_t *idx = otter_partition_client(p, c, &m);
        for (int64_t i = 0; i < m; i++) {
            if (idx[i] < 0 || idx[i] >= n || seen[idx[i]])
                ok = false;
            else
                seen[idx[i]] = 1;
        }
        total += m;
    }
    free(seen);
    return ok && total == n;
}

static void test_partitions(void) {
    otter_dataset *ds = labelled(10, 100);
    if (!ds) return;
    const int64_t *labels = otter_dataset_labels(ds);
    otter_partition *p = NULL;
    /* iid */
    otter_dataset *odd = labelled(1, 103);
    otter_partition_options po = {OTTER_PARTITION_IID, 10, 7, 0, 0};
    CHECK_OK(otter_dataset_partition(&p, odd, &po));
    int64_t mn = 1 << 30, mx = 0, m;
    for (int c = 0; c < 10; c++) {
        otter_partition_client(p, c, &m);
        if (m < mn) mn = m;
        if (m > mx) mx = m;
    }
    CHECK(covers_once(p, 103) && mn == 10 && mx == 11);
    printf("iid: 103 samples over 10 clients, sizes %lld..%lld\n", (long long)mn, (long long)mx);
    otter_partition_free(p);
    otter_dataset_free(odd);
    /* shards: 1000 samples of 10 labels, 5 clients x 2 shards of 100: each client exactly 2 labels */
    po = (otter_partition_options){OTTER_PARTITION_SHARDS, 5, 11, 2, 0};
    CHECK_OK(otter_dataset_partition(&p, ds, &po));
    int two = 0;
    for (int c = 0; c < 5; c++) {
        const int64_t *idx = otter_partition_client(p, c, &m);
        int has[10] = {0}, distinct = 0;
        for (int64_t i = 0; i < m; i++) has[labels[idx[i]]]++;
        for (int k = 0; k < 10; k++) distinct += has[k] > 0;
        two += distinct == 2 && m == 200;
    }
    CHECK(covers_once(p, 1000) && two == 5);
    printf("shards: 5 clients x 2 shards, %d of 5 clients hold exactly 2 labels and 200 samples\n", two);
    otter_partition_free(p);
    /* dirichlet: counts sum per class; concentration shows (alpha 100: near even; alpha 0.05: one client dominates) */
    double share_hi[2];
    for (int t = 0; t < 2; t++) {
        double alpha = t == 0 ? 100.0 : 0.05;
        po = (otter_partition_options){OTTER_PARTITION_DIRICHLET, 5, 3, 0, alpha};
        CHECK_OK(otter_dataset_partition(&p, ds, &po));
        CHECK(covers_once(p, 1000));
        int64_t cnt[10][5] = {{0}};
        for (int c = 0; c < 5; c++) {
            const int64_t *idx = otter_partition_client(p, c, &m);
            for (int64_t i = 0; i < m; i++) cnt[labels[idx[i]]][c]++;
        }
        double maxshare = 0;
        int sums_ok = 1;
        for (int k = 0; k < 10; k++) {
            int64_t s = 0, big = 0;
            for (int c = 0; c < 5; c++) {
                s += cnt[k][c];
                if (cnt[k][c] > big) big = cnt[k][c];
            }
            sums_ok &= s == 100;
            maxshare += (double)big / 100.0 / 10.0;
        }
        CHECK(sums_ok);
        share_hi[t] = maxshare;
        /* same seed, same partition */
        otter_partition *q = NULL;
        CHECK_OK(otter_dataset_partition(&q, ds, &po));
        int same = 1;
        for (int c = 0; c < 5; c++) {
            int64_t ma, mb;
            const int64_t *ia = otter_partition_client(p, c, &ma), *ib = otter_partition_client(q, c, &mb);
            same &= ma == mb && (ma == 0 || memcmp(ia, ib, (size_t)ma * sizeof(int64_t)) == 0);
        }
        CHECK(same);
        otter_partition_free(q);
        otter_partition_free(p);
    }
    CHECK(share_hi[0] < 0.35 && share_hi[1] > 0.6);
    printf("dirichlet over 5 clients: mean largest client share per class %.3f at alpha 100, %.3f at alpha 0.05\n",
           share_hi[0], share_hi[1]);
    po = (otter_partition_options){OTTER_PARTITION_SHARDS, 600, 1, 2, 0};
    CHECK_STATUS(otter_dataset_partition(&p, ds, &po), OTTER_ERR_ARGUMENT);
    po.num_clients = 0;
    CHECK_STATUS(otter_dataset_partition(&p, ds, &po), OTTER_ERR_ARGUMENT);
    otter_dataset_free(ds);
}

/* ---- allocation failures: NOMEM each time, nothing leaked ---- */

static void test_alloc_failures(void) {
    char *imgz = tmp("img.gz"), *labz = tmp("lab.gz"), *csv = tmp("af.csv"), *cif = tmp("af.bin");
    write_text(csv, "y,a,b\n1,2,3\n0,4,5\n");
    write_cifar(cif, 0, 2, -1);
    const char *specs[3] = {spec2("idx", imgz, labz), NULL, NULL};
    char s1[8192], s2[8192], s0[8192];
    snprintf(s0, sizeof s0, "%s", specs[0]);
    snprintf(s1, sizeof s1, "csv:%s", csv);
    snprintf(s2, sizeof s2, "cifar10:%s", cif);
    const char *all[3] = {s0, s1, s2};
    int leaks = 0, wrong = 0, points = 0;
    for (int k = 0; k < 3; k++) {
        for (long n = 1;; n++) {
            otter_set_allocator(&tu_counting_allocator);
            tu_alloc_live = 0;
            tu_alloc_fail_at(n);
            otter_dataset *ds = NULL;
            otter_status s = otter_dataset_open(&ds, all[k], NULL);
            otter_partition *p = NULL;
            otter_batch_iter *it = NULL;
            if (s == OTTER_OK) {
                otter_partition_options po = {OTTER_PARTITION_DIRICHLET, 2, 1, 0, 0.5};
                s = otter_dataset_partition(&p, ds, &po);
            }
            if (s == OTTER_OK) {
                otter_batch_options bo = {2, true, 1, false, NULL, 0};
                s = otter_batch_iter_create(&it, ds, &bo);
            }
            otter_batch_iter_free(it);
            otter_partition_free(p);
            otter_dataset_free(ds);
            tu_alloc_fail_at(0);
            long live = tu_alloc_live;
            otter_set_allocator(NULL);
            if (live != 0) leaks++;
            if (s == OTTER_OK) break;
            points++;
            if (s != OTTER_ERR_NOMEM) {
                wrong++;
                fprintf(stderr, "  %s, allocation %ld: %s\n", all[k], n, otter_last_error());
            }
        }
    }
    CHECK(leaks == 0 && wrong == 0 && points > 10);
    printf("allocation failures (gzip idx, csv, cifar10 + partition + iterator): %d points, %d not NOMEM, %d leaked\n",
           points, wrong, leaks);
}

/* ---- corruptions: random byte changes to each format are refused or loaded, never a crash (run under ASan) ---- */

static void test_corruptions(void) {
    char *imgz = tmp("img.gz"), *lab = tmp("lab-idx1-ubyte"), *bad = tmp("corrupt"), *cif = tmp("cor.bin");
    char *csv = tmp("cor.csv");
    write_text(csv, "label,a,b\n1,0.5,2\n0,-1.25e1,3\n2,4,5\n");
    write_cifar(cif, 0, 2, -1);
    const char *srcs[4] = {imgz, lab, cif, csv};
    uint64_t st = 12345;
    int ok = 0, refused = 0, other = 0;
    for (int k = 0; k < 4; k++) {
        size_t n;
        unsigned char *orig = tu_read_file(srcs[k], &n);
        unsigned char *b = malloc(n);
        for (int trial = 0; trial < 300; trial++) {
            memcpy(b, orig, n);
            int flips = 1 + trial % 4;
            for (int f = 0; f < flips; f++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = (size_t)(st >> 33) % (k == 2 ? 64 : n); /* CIFAR: the first label and pixels */
                b[at] = (unsigned char)(st >> 17);
            }
            write_bytes(bad, b, n);
            char sp[8400];
            if (k == 0)
                snprintf(sp, sizeof sp, "idx:%s,%s", bad, lab);
            else if (k == 1)
                snprintf(sp, sizeof sp, "idx:%s,%s", imgz, bad);
            else
                snprintf(sp, sizeof sp, "%s:%s", k == 2 ? "cifar10" : "csv", bad);
            otter_dataset *ds = NULL;
            otter_status s = otter_dataset_open(&ds, sp, NULL);
            if (s == OTTER_OK) {
                float *rows = all_rows(ds, NULL);
                free(rows);
                ok++;
            } else if (s == OTTER_ERR_INVALID && strstr(otter_last_error(), bad)) {
                refused++;
            } else {
                other++;
                fprintf(stderr, "  corrupt %s: %s: %s\n", srcs[k], otter_status_name(s), otter_last_error());
            }
            otter_dataset_free(ds);
        }
        free(b);
        free(orig);
    }
    CHECK(other == 0 && refused > 0);
    printf("corruptions: 1200 mutated files: %d loaded, %d refused naming the file, %d otherwise\n", ok, refused,
           other);
}

/* npy:A.npy,B.npy,...: one column per array, dtypes kept; batches of indices gathered column by column. */
static void test_npy_columns(void) {
    int64_t td[2] = {5, 3}, md[2] = {5, 2}, ld[1] = {5};
    int64_t tokens[15], labels[5] = {1, 0, 3, 2, 1};
    int32_t mask[10];
    for (int i = 0; i < 15; i++) tokens[i] = 1000000000000ll + i; /* not representable as float32 */
    for (int i = 0; i < 10; i++) mask[i] = i % 3;
    otter_tensor *T = NULL, *M = NULL, *L = NULL;
    CHECK_OK(otter_tensor_from_data(&T, NULL, OTTER_DTYPE_INT64, 2, td, tokens));
    CHECK_OK(otter_tensor_from_data(&M, NULL, OTTER_DTYPE_INT32, 2, md, mask));
    CHECK_OK(otter_tensor_from_data(&L, NULL, OTTER_DTYPE_INT64, 1, ld, labels));
    char *tp = tmp("tokens.npy"), *mp = tmp("mask.npy"), *lp = tmp("labels.npy");
    CHECK_OK(otter_tensor_save_npy(T, tp));
    CHECK_OK(otter_tensor_save_npy(M, mp));
    CHECK_OK(otter_tensor_save_npy(L, lp));
    char spec[3 * 4096 + 8];
    snprintf(spec, sizeof spec, "npy:%s,%s,%s", tp, mp, lp);
    otter_dataset *ds = NULL;
    CHECK_OK(otter_dataset_open(&ds, spec, NULL));
    CHECK(otter_dataset_size(ds) == 5 && otter_dataset_column_count(ds) == 3 && otter_dataset_target_numel(ds) == 0);
    CHECK(otter_dataset_column(ds, 1) && otter_dataset_column(ds, 1)->dtype == OTTER_DTYPE_INT32);
    CHECK(otter_dataset_column(ds, 3) == NULL && strcmp(otter_dataset_column_file(ds, 2), lp) == 0);
    /* batches of 2 with drop_last: indices 0..3 in two batches, then the epoch ends */
    otter_batch_iter *it = NULL;
    CHECK_OK(otter_batch_iter_create(&it, ds, &(otter_batch_options){.batch_size = 2, .drop_last = true}));
    otter_tensor *bt = NULL, *bm = NULL;
    int64_t btd[2] = {2, 3}, bmd[3] = {2, 1, 2};
    CHECK_OK(otter_tensor_create(&bt, NULL, OTTER_DTYPE_INT64, 2, btd));
    CHECK_OK(otter_tensor_create(&bm, NULL, OTTER_DTYPE_INT32, 3, bmd)); /* any per-sample shape of 2 values */
    int bad = 0, batches = 0;
    for (;;) {
        const int64_t *idx;
        int64_t n = 0;
        CHECK_OK(otter_batch_iter_next_indices(it, &idx, &n));
        if (n == 0) break;
        CHECK_OK(otter_dataset_gather_column(ds, 0, idx, n, bt));
        CHECK_OK(otter_dataset_gather_column(ds, 1, idx, n, bm));
        for (int64_t r = 0; r < n; r++) {
            for (int j = 0; j < 3; j++) bad += ((int64_t *)bt->data)[r * 3 + j] != tokens[idx[r] * 3 + j];
            for (int j = 0; j < 2; j++) bad += ((int32_t *)bm->data)[r * 2 + j] != mask[idx[r] * 2 + j];
        }
        batches++;
    }
    CHECK(bad == 0 && batches == 2);
    /* the wrong dtype or values per sample is refused, naming the file */
    CHECK_STATUS(otter_dataset_gather_column(ds, 1, (int64_t[]){0}, 1, bt), OTTER_ERR_ARGUMENT);
    CHECK(error_has(mp, "int32"));
    /* inputs and targets aren't there: the float batch API says so */
    otter_tensor *x = NULL, *y = NULL;
    CHECK_OK(otter_batch_iter_alloc(it, &x, &y));
    int64_t n = 0;
    CHECK_STATUS(otter_batch_iter_next(it, x, y, &n), OTTER_ERR_ARGUMENT);
    CHECK(error_has("column by column", NULL));
    otter_tensor_free(x), otter_tensor_free(y), otter_tensor_free(bt), otter_tensor_free(bm);
    otter_batch_iter_free(it);
    otter_dataset_free(ds);
    /* two arrays that read as inputs and targets are both; [N, 3] int64 targets aren't class labels */
    CHECK_OK(otter_dataset_open(&ds, spec2("npy", tp, lp), NULL));
    CHECK(otter_dataset_column_count(ds) == 2 && otter_dataset_num_classes(ds) == 4 &&
          otter_dataset_column(ds, 0)->dtype == OTTER_DTYPE_INT64);
    otter_dataset_free(ds);
    CHECK_OK(otter_dataset_open(&ds, spec2("npy", lp, tp), NULL));
    CHECK(otter_dataset_column_count(ds) == 2 && otter_dataset_target_numel(ds) == 0);
    otter_dataset_free(ds);
    /* arrays of different lengths */
    int64_t l4d[1] = {4};
    otter_tensor *L4 = NULL;
    CHECK_OK(otter_tensor_from_data(&L4, NULL, OTTER_DTYPE_INT64, 1, l4d, labels));
    char *l4p = tmp("labels4.npy");
    CHECK_OK(otter_tensor_save_npy(L4, l4p));
    snprintf(spec, sizeof spec, "npy:%s,%s,%s", tp, mp, l4p);
    CHECK_STATUS(otter_dataset_open(&ds, spec, NULL), OTTER_ERR_INVALID);
    CHECK(error_has(tp, "has 5 samples") && error_has(l4p, "has 4"));
    otter_tensor_free(T), otter_tensor_free(M), otter_tensor_free(L), otter_tensor_free(L4);
    printf("npy columns: int64 [5, 3], int32 [5, 2], int64 [5] kept as stored, 2 batches of 2 (drop_last), %d "
           "values differ\n",
           bad);
}

int main(void) {
    test_idx();
    test_cifar();
    test_npy();
    test_npy_columns();
    test_csv();
    test_batches();
    test_partitions();
    test_alloc_failures();
    test_corruptions();
    return tu_finish("test_data");
}
