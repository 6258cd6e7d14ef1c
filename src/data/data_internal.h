/* Internals shared by the data loaders (src/data/). */
#ifndef OTTER_DATA_INTERNAL_H
#define OTTER_DATA_INTERNAL_H

#include "core/core.h"
#include "otter/data.h"

struct otter_dataset {
    char *desc; /* "mnist:DIR (train)" */
    int64_t n;  /* samples */
    int rank;   /* per-sample input shape as presented (after layout) */
    int64_t dims[OTTER_MAX_RANK];
    int64_t numel; /* elements per sample */
    bool u8;       /* x holds uint8 (converted per batch through lut) or float */
    void *x;       /* [n, numel] */
    /* Normalization: a sample is channels blocks of chan_block elements. */
    int64_t channels;
    int64_t chan_block;
    float *lut;      /* u8: [channels, 256] */
    float *mean;     /* float sources with STANDARD: [channels] (else NULL) */
    float *stdv;     /* [channels] */
    bool scale255;   /* float sources with SCALE: x / 255 */
    int64_t *labels; /* [n] class labels, or NULL */
    int64_t num_classes;
    float *targets; /* [n, k] float targets, or NULL */
    int64_t k;
    /* npy datasets: the arrays as loaded, [n, ...] each, dtypes kept, and the files they came from.
     * Two arrays also make the inputs and targets above; any other count makes only these (x NULL). */
    otter_tensor **columns;
    char **column_files;
    size_t n_columns;
};

/* What a loader hands to ot_dataset_finish (which takes ownership of the buffers, even on failure). */
typedef struct ot_data_raw {
    char *desc;
    int64_t n;
    int rank; /* per-sample shape as stored */
    int64_t dims[OTTER_MAX_RANK];
    bool u8;
    void *x;
    bool image; /* dims are [C, H, W]; DEFAULT layout flattens when flat_default */
    bool flat_default;
    int64_t *labels; /* checked against the class count by the loader */
    int64_t num_classes;
    float *targets;
    int64_t k;
    const float *def_mean, *def_std; /* usual constants, or NULL */
} ot_data_raw;

otter_status ot_dataset_finish(otter_dataset **out, ot_data_raw *raw, const otter_dataset_options *opts);
void ot_data_raw_release(ot_data_raw *raw);

/* Loaders: fill raw (desc left to the caller). ncls is the class count to check labels against. */
otter_status ot_idx_load_pair(ot_data_raw *raw, const char *images, const char *labels, int64_t ncls);
otter_status ot_cifar10_load(ot_data_raw *raw, const char *const *files, int nfiles, int64_t ncls);
otter_status ot_csv_load(ot_data_raw *raw, const char *path, const otter_dataset_options *opts);

/* Whole file into memory, gunzipped when it starts with 1f 8b (*gz says so). ot_free *data. */
otter_status ot_read_maybe_gzip(const char *path, uint8_t **data, size_t *size, bool *gz);

/* Batch tensors: dtype and per-sample element count (cap > 0: data present). */
otter_status ot_data_check_batch(const otter_dataset *ds, const otter_tensor *inputs, const otter_tensor *targets,
                                 int64_t cap);
/* Rows idx[0..n) into rows 0..n-1 (indices checked, tensors not). */
otter_status ot_data_gather_rows(const otter_dataset *ds, const int64_t *idx, int64_t n, otter_tensor *inputs,
                                 otter_tensor *targets);

/* Per-epoch generator for shuffling: depends on (seed, epoch) only. */
#include "core/rng.h"
ot_rng ot_data_epoch_rng(uint64_t seed, uint64_t epoch);
void ot_data_shuffle(int64_t *a, int64_t n, ot_rng *r);

#endif
