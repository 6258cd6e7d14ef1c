/* CIFAR-10 binary batches: records of 1 label byte and 3072 pixel bytes (the red, green and blue 32x32 planes). */
#include <string.h>

#include "data/data_internal.h"

#define CIFAR_PIXELS 3072
#define CIFAR_RECORD (1 + CIFAR_PIXELS)

otter_status ot_cifar10_load(ot_data_raw *raw, const char *const *files, int nfiles, int64_t ncls) {
    uint8_t *bufs[8] = {0};
    size_t sizes[8] = {0};
    otter_status s = OTTER_OK;
    int64_t n = 0;
    OT_ASSERT(nfiles > 0 && nfiles <= 8);
    for (int f = 0; f < nfiles && s == OTTER_OK; f++) {
        void *d = NULL;
        s = ot_read_file(files[f], &d, &sizes[f]);
        bufs[f] = d;
        if (s != OTTER_OK) break;
        if (sizes[f] == 0) {
            s = ot_error(OTTER_ERR_INVALID, "%s: empty file (CIFAR-10 records are %d bytes)", files[f], CIFAR_RECORD);
        } else if (sizes[f] % CIFAR_RECORD != 0) {
            size_t last = sizes[f] / CIFAR_RECORD;
            s = ot_error(OTTER_ERR_INVALID,
                         "%s: truncated: %zu bytes is not a whole number of %d-byte records; record %zu at offset %zu "
                         "has only %zu bytes",
                         files[f], sizes[f], CIFAR_RECORD, last, last * CIFAR_RECORD, sizes[f] % CIFAR_RECORD);
        } else {
            n += (int64_t)(sizes[f] / CIFAR_RECORD);
        }
    }
    if (s != OTTER_OK) goto done;
    uint8_t *x = ot_malloc((size_t)n * CIFAR_PIXELS);
    int64_t *labels = ot_malloc((size_t)n * sizeof(int64_t));
    if (!x || !labels) {
        ot_free(x);
        ot_free(labels);
        s = OT_NOMEM();
        goto done;
    }
    raw->x = x;
    raw->labels = labels;
    int64_t i = 0;
    for (int f = 0; f < nfiles; f++) {
        size_t recs = sizes[f] / CIFAR_RECORD;
        for (size_t r = 0; r < recs; r++, i++) {
            const uint8_t *rec = bufs[f] + r * CIFAR_RECORD;
            if ((int64_t)rec[0] >= ncls) {
                s = ot_error(OTTER_ERR_INVALID,
                             "%s: record %zu (offset %zu): label %u is out of range for %lld classes", files[f], r,
                             r * CIFAR_RECORD, rec[0], (long long)ncls);
                goto done;
            }
            labels[i] = rec[0];
            memcpy(x + (size_t)i * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
        }
    }
    raw->u8 = true;
    raw->n = n;
    raw->rank = 3;
    raw->dims[0] = 3;
    raw->dims[1] = 32;
    raw->dims[2] = 32;
    raw->image = true;
    raw->flat_default = false;
    raw->num_classes = ncls;
done:
    for (int f = 0; f < nfiles; f++) ot_free(bufs[f]);
    return s;
}
