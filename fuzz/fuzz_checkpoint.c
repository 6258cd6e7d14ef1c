/* libFuzzer target: the ORT checkpoint reader on arbitrary bytes. Whatever loads must save, load again to an
 * equal state, and save to the same bytes (the reader and writer agree); tensor data read can't exceed the
 * input's size (no amplification through shared tables). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/checkpoint_internal.h"
#include "otter/checkpoint.h"
#include "otter/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a checkpoint with external data: a little-endian u32 length L, L bytes of flatbuffer, then the
 * external data file. What loads must save (inline, to memory) and load again with the same tensors; external
 * data read can't exceed the file's size. */
static void external_case(const uint8_t *data, size_t size) {
    if (size < 4) return;
    size_t len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    if (len > size - 4) return;
    const uint8_t *ext = data + 4 + len;
    size_t ext_size = size - 4 - len;
    otter_checkpoint *c = NULL;
    if (ot_ckpt_load_parts(&c, data + 4, len, ext, ext_size) != OTTER_OK) {
        if (!otter_last_error()[0]) abort();
        return;
    }
    size_t bytes = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < otter_checkpoint_param_count(c, k); i++) {
            const otter_tensor *t = otter_checkpoint_param_at(c, k, i);
            if (t->data && t->dtype != OTTER_DTYPE_STRING) bytes += otter_tensor_nbytes(t);
        }
    if (bytes > size) abort();
    void *b = NULL;
    size_t n = 0;
    otter_checkpoint *r = NULL;
    if (otter_checkpoint_save_to_memory(c, NULL, &b, &n) != OTTER_OK) abort();
    if (otter_checkpoint_load_from_memory(&r, b, n) != OTTER_OK) abort();
    for (int k = 0; k < 2; k++) {
        if (otter_checkpoint_param_count(r, k) != otter_checkpoint_param_count(c, k)) abort();
        for (size_t i = 0; i < otter_checkpoint_param_count(c, k); i++) {
            const otter_tensor *t = otter_checkpoint_param_at(c, k, i), *u = NULL;
            if (otter_checkpoint_get_param(r, t->name, &u, NULL) != OTTER_OK) abort();
            if (t->data && t->dtype != OTTER_DTYPE_STRING &&
                (!u->data || memcmp(t->data, u->data, otter_tensor_nbytes(t)) != 0))
                abort();
        }
    }
    otter_free(b);
    otter_checkpoint_free(r);
    otter_checkpoint_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    external_case(data, size);
    otter_checkpoint *c = NULL;
    if (otter_checkpoint_load_from_memory(&c, data, size) != OTTER_OK) {
        if (!otter_last_error()[0]) abort(); /* every failure explains itself */
        return 0;
    }
    size_t bytes = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < otter_checkpoint_param_count(c, k); i++) {
            const otter_tensor *t = otter_checkpoint_param_at(c, k, i);
            if (t->data && t->dtype != OTTER_DTYPE_STRING) bytes += otter_tensor_nbytes(t);
        }
    if (bytes > size) abort();
    void *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 0;
    otter_checkpoint *r = NULL;
    if (otter_checkpoint_save_to_memory(c, NULL, &b1, &n1) != OTTER_OK) abort();
    if (otter_checkpoint_load_from_memory(&r, b1, n1) != OTTER_OK) abort();
    if (otter_checkpoint_save_to_memory(r, NULL, &b2, &n2) != OTTER_OK) abort();
    if (n1 != n2 || memcmp(b1, b2, n1) != 0) abort();
    if (otter_checkpoint_param_count(r, OTTER_PARAM_TRAINABLE) !=
            otter_checkpoint_param_count(c, OTTER_PARAM_TRAINABLE) ||
        otter_checkpoint_group_count(r) != otter_checkpoint_group_count(c) ||
        otter_checkpoint_property_count(r) != otter_checkpoint_property_count(c))
        abort();
    otter_free(b1);
    otter_free(b2);
    otter_checkpoint_free(r);
    otter_checkpoint_free(c);
    return 0;
}
