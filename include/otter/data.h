/* otter: training data. Loaders for MNIST-format IDX files (raw or gzip; Fashion-MNIST too), CIFAR-10
 * binary batches, pairs of .npy arrays and CSV; normalization; a batch iterator with seeded shuffling
 * that fills caller-provided tensors; partitions of one dataset among federated clients.
 *
 * A dataset holds N samples: inputs (kept as uint8 when the source is uint8, converted to float per
 * batch, so MNIST train takes 47 MB, not 188 MB) and targets, either class labels (int64 [N]) or float
 * targets [N, k] (regression from npy or CSV). Errors name the file and the record, byte offset or line. */
#ifndef OTTER_DATA_H
#define OTTER_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_dataset otter_dataset;

typedef enum otter_data_split {
    OTTER_SPLIT_TRAIN = 0, /* mnist: train-images-idx3-ubyte, cifar10: data_batch_1..5 */
    OTTER_SPLIT_TEST = 1   /* mnist: t10k-images-idx3-ubyte, cifar10: test_batch */
} otter_data_split;

typedef enum otter_data_norm {
    OTTER_NORM_DEFAULT = 0,  /* SCALE for uint8 sources (IDX, CIFAR-10, uint8 .npy), NONE otherwise */
    OTTER_NORM_NONE = 1,     /* values as stored (0..255 for images) */
    OTTER_NORM_SCALE = 2,    /* x / 255 */
    OTTER_NORM_STANDARD = 3, /* per channel: (x / 255 - mean[c]) / std[c] for uint8 sources,
                                (x - mean[c]) / std[c] for float sources */
} otter_data_norm;

typedef enum otter_data_layout {
    OTTER_LAYOUT_DEFAULT = 0, /* mnist: flat [784]; cifar10: [3, 32, 32]; npy: as stored; csv: [F] */
    OTTER_LAYOUT_FLAT = 1,    /* every sample flattened to one dimension */
    OTTER_LAYOUT_IMAGE = 2    /* images as [C, H, W] (mnist: [1, 28, 28]); others as stored */
} otter_data_layout;

typedef enum otter_data_targets {
    OTTER_TARGETS_AUTO = 0,  /* class labels, except float .npy targets, which stay float */
    OTTER_TARGETS_CLASS = 1, /* int64 labels in [0, num_classes) (float values must be whole numbers) */
    OTTER_TARGETS_FLOAT = 2  /* float targets [N, k] (a label column or 1-D array gives k = 1) */
} otter_data_targets;

typedef enum otter_csv_header {
    OTTER_CSV_HEADER_AUTO = 0, /* skip the first line when one of its fields is not a number */
    OTTER_CSV_HEADER_YES = 1,
    OTTER_CSV_HEADER_NO = 2
} otter_csv_header;

/* Zero-initialized options are the defaults. */
typedef struct otter_dataset_options {
    otter_data_split split;
    otter_data_norm norm;
    /* Per-channel mean and std for OTTER_NORM_STANDARD, num_channels values each. NULL: the usual
     * constants for mnist (0.1307/0.3081), fashion-mnist (0.2860/0.3530) and cifar10
     * ((0.4914, 0.4822, 0.4465)/(0.2470, 0.2435, 0.2616)); for npy and csv they must be given. The channel
     * is the first per-sample dimension (an image's C; a CSV column; 1 channel for scalar samples). */
    const float *mean;
    const float *std;
    int num_channels;
    otter_data_layout layout;
    otter_data_targets targets;
    /* Number of classes; a label outside [0, num_classes) is an error naming its record. 0: 10 for mnist,
     * fashion-mnist and cifar10, (largest label + 1) for npy and csv. */
    int64_t num_classes;
    /* CSV: the label column (0-based; negative counts from the end, -1 is the last column) and, for
     * float targets, how many consecutive columns from it are targets (0 means 1). Every other column
     * is an input feature. */
    int csv_label_column;
    int csv_num_targets;
    otter_csv_header csv_header;
} otter_dataset_options;

/* Open a dataset. spec is one of
 *   "mnist:DIR" / "fashion-mnist:DIR"  DIR holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
 *                                      (also the "train-images.idx3-ubyte" spelling)
 *   "idx:IMAGES,LABELS"                two IDX files (raw or gzip, found by the 1f 8b magic)
 *   "cifar10:DIR"                      DIR holds data_batch_1..5[.bin] and test_batch[.bin]
 *   "cifar10:FILE"                     one CIFAR-10 binary batch file
 *   "npy:X.npy,Y.npy"                  inputs [N, ...] (any real dtype) and targets [N] or [N, k]
 *   "npy:A.npy,B.npy,..."              any number of arrays [N, ...] of any dtype, kept as stored: see
 *                                      otter_dataset_column (two arrays are also inputs and targets)
 *   "csv:FILE"                         one sample a line, comma-separated numbers
 * opts may be NULL (defaults). */
OTTER_API otter_status otter_dataset_open(otter_dataset **out, const char *spec, const otter_dataset_options *opts);
/* A dataset from tensors in memory (copied): inputs [N, ...] of a real dtype, targets int [N] (labels)
 * or float [N] / [N, k]. opts: norm, mean/std, layout, targets and num_classes apply. */
OTTER_API otter_status otter_dataset_from_tensors(otter_dataset **out, const otter_tensor *inputs,
                                                  const otter_tensor *targets, const otter_dataset_options *opts);
OTTER_API void otter_dataset_free(otter_dataset *ds);

OTTER_API int64_t otter_dataset_size(const otter_dataset *ds);
/* Shape of one sample's input (without the batch dimension); returns the rank, dims gets OTTER_MAX_RANK. */
OTTER_API int otter_dataset_input_shape(const otter_dataset *ds, int64_t *dims);
/* Elements in one input sample. */
OTTER_API int64_t otter_dataset_input_numel(const otter_dataset *ds);
/* Number of classes (0 when the targets are float). */
OTTER_API int64_t otter_dataset_num_classes(const otter_dataset *ds);
/* Elements in one sample's targets: 1 for class labels, k for float targets [N, k]. */
OTTER_API int64_t otter_dataset_target_numel(const otter_dataset *ds);
/* The N labels (NULL when the targets are float). */
OTTER_API const int64_t *otter_dataset_labels(const otter_dataset *ds);
/* What was opened ("mnist:/data/mnist (train)"), for messages. */
OTTER_API const char *otter_dataset_description(const otter_dataset *ds);

/* ---- Columns: the arrays of an npy dataset, dtypes kept (token ids stay int64) ---- */

/* How many arrays the dataset was opened from ("npy:A.npy,B.npy,...": one per file); 0 for the other
 * kinds, whose samples are inputs and targets only. */
OTTER_API size_t otter_dataset_column_count(const otter_dataset *ds);
/* Column i as loaded ([N, ...]), and the file it came from; NULL when i is out of range. */
OTTER_API const otter_tensor *otter_dataset_column(const otter_dataset *ds, size_t i);
OTTER_API const char *otter_dataset_column_file(const otter_dataset *ds, size_t i);
/* Copy rows idx[0..n) of column i into rows 0..n-1 of out (the column's dtype and elements per sample, any
 * per-sample shape, dims[0] >= n). No allocation. */
OTTER_API otter_status otter_dataset_gather_column(const otter_dataset *ds, size_t i, const int64_t *idx, int64_t n,
                                                   otter_tensor *out);

/* Copy samples idx[0..n) into rows 0..n-1 of inputs (float, dims[0] >= n, same elements per sample as
 * the dataset, any per-sample shape) and targets (labels: int64 or int32 with dims[0] >= n; float
 * targets: float with k elements per row). Either tensor may be NULL. No allocation. */
OTTER_API otter_status otter_dataset_gather(const otter_dataset *ds, const int64_t *idx, int64_t n,
                                            otter_tensor *inputs, otter_tensor *targets);

/* ---- Batches ---- */

typedef struct otter_batch_iter otter_batch_iter;

typedef struct otter_batch_options {
    int64_t batch_size; /* > 0 */
    bool shuffle;       /* a new order every epoch, from (seed, epoch) alone */
    uint64_t seed;
    bool drop_last; /* false: the last batch of an epoch may be partial */
    /* Iterate only these samples (copied; NULL: all). Used to give each federated client its part of
     * one shared dataset (see otter_partition_client). */
    const int64_t *indices;
    int64_t num_indices;
} otter_batch_options;

OTTER_API otter_status otter_batch_iter_create(otter_batch_iter **out, const otter_dataset *ds,
                                               const otter_batch_options *opts);
OTTER_API void otter_batch_iter_free(otter_batch_iter *it);
/* Allocate batch tensors for this iterator: inputs float [B, <sample shape>], targets int64 [B] or float
 * [B, k]. Either pointer may be NULL. */
OTTER_API otter_status otter_batch_iter_alloc(const otter_batch_iter *it, otter_tensor **inputs,
                                              otter_tensor **targets);
/* Fill the next batch of the current epoch; *count gets the number of samples in it, 0 when the epoch is
 * over (call again after otter_batch_iter_seek). A partial last batch sets dims[0] of both tensors to its
 * count (the buffers keep their capacity); the next full batch sets dims[0] back to batch_size. The tensors
 * must have dims[0] == batch_size (or the count this iterator last set). No allocation. */
OTTER_API otter_status otter_batch_iter_next(otter_batch_iter *it, otter_tensor *inputs, otter_tensor *targets,
                                             int64_t *count);
/* Go to batch `batch` of epoch `epoch` (starts at epoch 0, batch 0). The order of an epoch depends only on
 * (seed, epoch), so resuming at (epoch, batch) reproduces an uninterrupted run. */
OTTER_API otter_status otter_batch_iter_seek(otter_batch_iter *it, uint64_t epoch, int64_t batch);
/* The sample indices of the next batch of the current epoch (*idx valid until the next call or seek; *count
 * 0 when the epoch is over), for datasets fed column by column (otter_dataset_gather_column). */
OTTER_API otter_status otter_batch_iter_next_indices(otter_batch_iter *it, const int64_t **idx, int64_t *count);
/* Batches per epoch (counting a partial last batch unless drop_last). */
OTTER_API int64_t otter_batch_iter_num_batches(const otter_batch_iter *it);
/* Samples per epoch (after drop_last). */
OTTER_API int64_t otter_batch_iter_num_samples(const otter_batch_iter *it);
/* The current epoch's sample order (num_indices entries; valid until the next seek). */
OTTER_API const int64_t *otter_batch_iter_order(const otter_batch_iter *it, int64_t *n);

/* ---- Partitions among federated clients ---- */

typedef enum otter_partition_kind {
    OTTER_PARTITION_IID = 0,       /* shuffled, sizes differ by at most 1 */
    OTTER_PARTITION_SHARDS = 1,    /* sorted by label, cut into num_clients * shards_per_client equal shards,
                                      shards dealt to clients at random (McMahan et al. 2017) */
    OTTER_PARTITION_DIRICHLET = 2, /* per class, proportions ~ Dirichlet(alpha) over clients */
} otter_partition_kind;

typedef struct otter_partition_options {
    otter_partition_kind kind;
    int num_clients; /* > 0 */
    uint64_t seed;
    int shards_per_client; /* SHARDS; 0 means 2 */
    double alpha;          /* DIRICHLET concentration; 0 means 0.5 */
} otter_partition_options;

typedef struct otter_partition otter_partition;

/* Every sample goes to exactly one client. SHARDS and DIRICHLET need class labels. */
OTTER_API otter_status otter_dataset_partition(otter_partition **out, const otter_dataset *ds,
                                               const otter_partition_options *opts);
OTTER_API void otter_partition_free(otter_partition *p);
OTTER_API int otter_partition_num_clients(const otter_partition *p);
/* Client c's sample indices (valid while p lives); pass them as otter_batch_options.indices. */
OTTER_API const int64_t *otter_partition_client(const otter_partition *p, int c, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif
