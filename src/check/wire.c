/* A minimal protobuf wire-format walk over the parts the IR keeps as serialized bytes (sparse
 * initializers, model-local functions): the checker needs a few of their fields. */
#include "check/check_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "format/wire.h"

/* The last occurrence of field `field` in the message [p, end): a varint field's value in *v, a
 * length-delimited field's bytes in *out / *len (the other output is left alone). */
static bool wire_find_field(const uint8_t *p, const uint8_t *end, uint64_t field, uint64_t *v_out, const uint8_t **out,
                            size_t *len) {
    bool found = false;
    ot_wire_field f;
    while (p < end) {
        if (!ot_wire_next(&p, end, &f)) return false;
        if (f.number != field) continue;
        if (f.type == 0 && v_out) *v_out = f.value, found = true;
        if (f.type == 2 && out) *out = f.bytes, *len = f.len, found = true;
    }
    return found;
}

static bool wire_find(const uint8_t *p, const uint8_t *end, uint64_t field, const uint8_t **out, size_t *len) {
    return wire_find_field(p, end, field, NULL, out, len);
}

static bool wire_find_varint(const uint8_t *p, const uint8_t *end, uint64_t field, uint64_t *out) {
    return wire_find_field(p, end, field, out, NULL, NULL);
}

/* The name of a sparse initializer (ot_free it; NULL when it has none or out of memory) and the
 * element type of its values (values.data_type, field 2; UNDEFINED when absent). */
char *ot_check_sparse_initializer_name(const otter_bytes *b, otter_dtype *dtype) {
    const uint8_t *values, *name;
    size_t n_values, n_name;
    const uint8_t *p = (const uint8_t *)b->data;
    uint64_t dt = 0;
    *dtype = OTTER_DTYPE_UNDEFINED;
    if (p == NULL || !wire_find(p, p + b->len, 1, &values, &n_values)) return NULL;
    if (wire_find_varint(values, values + n_values, 2, &dt) && dt < OTTER_DTYPE_COUNT_) *dtype = (otter_dtype)dt;
    if (!wire_find(values, values + n_values, 8, &name, &n_name)) return NULL;
    return ot_strndup((const char *)name, n_name);
}

bool ot_check_wire_string(const otter_bytes *b, uint64_t field, const char **out, size_t *len) {
    const uint8_t *p = (const uint8_t *)b->data, *s;
    if (p == NULL || !wire_find(p, p + b->len, field, &s, len)) return false;
    *out = (const char *)s;
    return true;
}
