/* The batch iterator: an epoch's order from (seed, epoch) alone (Fisher-Yates with ot_rng), batches gathered into
 * caller-provided tensors without allocating. */
#include <string.h>

#include "data/data_internal.h"

struct otter_batch_iter {
    const otter_dataset *ds;
    int64_t *base;  /* [m] the samples iterated, in the given order */
    int64_t *order; /* [m] this epoch's order */
    int64_t m;
    int64_t batch_size;
    bool shuffle, drop_last;
    uint64_t seed, epoch;
    int64_t pos;      /* next position in order */
    int64_t last_set; /* dims[0] this iterator last wrote (a partial batch's count), 0 when none */
};

ot_rng ot_data_epoch_rng(uint64_t seed, uint64_t epoch) {
    ot_rng r = {seed};
    uint64_t a = ot_rng_next(&r);
    r.state = a ^ (epoch * 0xd1b54a32d192ed03ull);
    (void)ot_rng_next(&r);
    return r;
}

void ot_data_shuffle(int64_t *a, int64_t n, ot_rng *r) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ot_rng_below(r, (uint64_t)i + 1);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

void otter_batch_iter_free(otter_batch_iter *it) {
    if (!it) return;
    ot_free(it->base);
    ot_free(it->order);
    ot_free(it);
}

int64_t otter_batch_iter_num_samples(const otter_batch_iter *it) {
    if (!it) return 0;
    return it->drop_last ? it->m - it->m % it->batch_size : it->m;
}

int64_t otter_batch_iter_num_batches(const otter_batch_iter *it) {
    if (!it) return 0;
    return it->drop_last ? it->m / it->batch_size : (it->m + it->batch_size - 1) / it->batch_size;
}

otter_status otter_batch_iter_seek(otter_batch_iter *it, uint64_t epoch, int64_t batch) {
    if (!it) return ot_error(OTTER_ERR_ARGUMENT, "otter_batch_iter_seek: NULL iterator");
    if (batch < 0 || batch > otter_batch_iter_num_batches(it))
        return ot_error(OTTER_ERR_ARGUMENT, "%s: batch %lld is outside the epoch's %lld batches", it->ds->desc,
                        (long long)batch, (long long)otter_batch_iter_num_batches(it));
    memcpy(it->order, it->base, (size_t)it->m * sizeof(int64_t));
    if (it->shuffle) {
        ot_rng r = ot_data_epoch_rng(it->seed, epoch);
        ot_data_shuffle(it->order, it->m, &r);
    }
    it->epoch = epoch;
    it->pos = batch * it->batch_size;
    return OTTER_OK;
}

otter_status otter_batch_iter_create(otter_batch_iter **out, const otter_dataset *ds, const otter_batch_options *opts) {
    if (!out || !ds || !opts) return ot_error(OTTER_ERR_ARGUMENT, "otter_batch_iter_create: NULL argument");
    *out = NULL;
    if (opts->batch_size <= 0)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: batch size must be positive (got %lld)", ds->desc,
                        (long long)opts->batch_size);
    int64_t m = opts->indices ? opts->num_indices : ds->n;
    if (m < 0 || (opts->indices == NULL && opts->num_indices != 0 && opts->num_indices != ds->n))
        return ot_error(OTTER_ERR_ARGUMENT, "%s: num_indices %lld without indices", ds->desc,
                        (long long)opts->num_indices);
    if (opts->indices)
        for (int64_t i = 0; i < m; i++)
            if (opts->indices[i] < 0 || opts->indices[i] >= ds->n)
                return ot_error(OTTER_ERR_ARGUMENT, "%s: indices[%lld] = %lld is out of range (%lld samples)", ds->desc,
                                (long long)i, (long long)opts->indices[i], (long long)ds->n);
    otter_batch_iter *it = ot_calloc(1, sizeof *it);
    if (!it) return OT_NOMEM();
    it->base = ot_malloc((size_t)m * sizeof(int64_t) + 1);
    it->order = ot_malloc((size_t)m * sizeof(int64_t) + 1);
    if (!it->base || !it->order) {
        otter_batch_iter_free(it);
        return OT_NOMEM();
    }
    for (int64_t i = 0; i < m; i++) it->base[i] = opts->indices ? opts->indices[i] : i;
    it->ds = ds;
    it->m = m;
    it->batch_size = opts->batch_size;
    it->shuffle = opts->shuffle;
    it->drop_last = opts->drop_last;
    it->seed = opts->seed;
    otter_status s = otter_batch_iter_seek(it, 0, 0);
    if (s != OTTER_OK) {
        otter_batch_iter_free(it);
        return s;
    }
    *out = it;
    return OTTER_OK;
}

otter_status otter_batch_iter_alloc(const otter_batch_iter *it, otter_tensor **inputs, otter_tensor **targets) {
    if (!it) return ot_error(OTTER_ERR_ARGUMENT, "otter_batch_iter_alloc: NULL iterator");
    const otter_dataset *ds = it->ds;
    otter_tensor *x = NULL, *y = NULL;
    if (inputs) {
        int64_t dims[OTTER_MAX_RANK];
        if (ds->rank + 1 > OTTER_MAX_RANK)
            return ot_error(OTTER_ERR_UNSUPPORTED, "%s: samples of rank %d leave no room for a batch dimension",
                            ds->desc, ds->rank);
        dims[0] = it->batch_size;
        memcpy(dims + 1, ds->dims, (size_t)ds->rank * sizeof(int64_t));
        OT_TRY(otter_tensor_create(&x, "inputs", OTTER_DTYPE_FLOAT, ds->rank + 1, dims));
    }
    if (targets) {
        int64_t dims[2] = {it->batch_size, ds->k};
        otter_status s = ds->labels ? otter_tensor_create(&y, "labels", OTTER_DTYPE_INT64, 1, dims)
                                    : otter_tensor_create(&y, "targets", OTTER_DTYPE_FLOAT, 2, dims);
        if (s != OTTER_OK) {
            otter_tensor_free(x);
            return s;
        }
    }
    if (inputs) *inputs = x;
    if (targets) *targets = y;
    return OTTER_OK;
}

const int64_t *otter_batch_iter_order(const otter_batch_iter *it, int64_t *n) {
    if (n) *n = it ? it->m : 0;
    return it ? it->order : NULL;
}

otter_status otter_batch_iter_next_indices(otter_batch_iter *it, const int64_t **idx, int64_t *count) {
    if (!it || !idx || !count) return ot_error(OTTER_ERR_ARGUMENT, "otter_batch_iter_next_indices: NULL argument");
    int64_t end = otter_batch_iter_num_samples(it);
    *idx = it->order + it->pos;
    *count = it->pos >= end ? 0 : end - it->pos < it->batch_size ? end - it->pos : it->batch_size;
    it->pos += *count;
    return OTTER_OK;
}

otter_status otter_batch_iter_next(otter_batch_iter *it, otter_tensor *inputs, otter_tensor *targets, int64_t *count) {
    if (!it || !count) return ot_error(OTTER_ERR_ARGUMENT, "otter_batch_iter_next: NULL argument");
    *count = 0;
    const otter_dataset *ds = it->ds;
    int64_t B = it->batch_size;
    OT_TRY(ot_data_check_batch(ds, inputs, targets, B));
    otter_tensor *ts[2] = {inputs, targets};
    for (int i = 0; i < 2; i++)
        if (ts[i] && ts[i]->dims[0] != B && (it->last_set == 0 || ts[i]->dims[0] != it->last_set))
            return ot_error(OTTER_ERR_ARGUMENT, "%s: batch %s have dims[0] = %lld, the batch size is %lld", ds->desc,
                            i == 0 ? "inputs" : "targets", (long long)ts[i]->dims[0], (long long)B);
    int64_t end = otter_batch_iter_num_samples(it);
    if (it->pos >= end) return OTTER_OK;
    int64_t n = end - it->pos < B ? end - it->pos : B;
    OT_TRY(ot_data_gather_rows(ds, it->order + it->pos, n, inputs, targets));
    it->pos += n;
    for (int i = 0; i < 2; i++)
        if (ts[i]) ts[i]->dims[0] = n;
    it->last_set = n == B ? it->last_set : n;
    *count = n;
    return OTTER_OK;
}
