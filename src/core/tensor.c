#include <math.h>
#include <string.h>

#include "core/core.h"
#include "core/float_formats.h"
#include "core/proto_extra.h"

static const struct {
    const char *name;
    const char *onnx_name;
    size_t size;
} DTYPES[OTTER_DTYPE_COUNT_] = {
    [OTTER_DTYPE_UNDEFINED] = {"undefined", "UNDEFINED", 0},
    [OTTER_DTYPE_FLOAT] = {"float32", "FLOAT", 4},
    [OTTER_DTYPE_UINT8] = {"uint8", "UINT8", 1},
    [OTTER_DTYPE_INT8] = {"int8", "INT8", 1},
    [OTTER_DTYPE_UINT16] = {"uint16", "UINT16", 2},
    [OTTER_DTYPE_INT16] = {"int16", "INT16", 2},
    [OTTER_DTYPE_INT32] = {"int32", "INT32", 4},
    [OTTER_DTYPE_INT64] = {"int64", "INT64", 8},
    [OTTER_DTYPE_STRING] = {"string", "STRING", 0},
    [OTTER_DTYPE_BOOL] = {"bool", "BOOL", 1},
    [OTTER_DTYPE_FLOAT16] = {"float16", "FLOAT16", 2},
    [OTTER_DTYPE_DOUBLE] = {"float64", "DOUBLE", 8},
    [OTTER_DTYPE_UINT32] = {"uint32", "UINT32", 4},
    [OTTER_DTYPE_UINT64] = {"uint64", "UINT64", 8},
    [OTTER_DTYPE_COMPLEX64] = {"complex64", "COMPLEX64", 8},
    [OTTER_DTYPE_COMPLEX128] = {"complex128", "COMPLEX128", 16},
    [OTTER_DTYPE_BFLOAT16] = {"bfloat16", "BFLOAT16", 2},
    [OTTER_DTYPE_FLOAT8E4M3FN] = {"float8e4m3fn", "FLOAT8E4M3FN", 1},
    [OTTER_DTYPE_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", "FLOAT8E4M3FNUZ", 1},
    [OTTER_DTYPE_FLOAT8E5M2] = {"float8e5m2", "FLOAT8E5M2", 1},
    [OTTER_DTYPE_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", "FLOAT8E5M2FNUZ", 1},
    [OTTER_DTYPE_UINT4] = {"uint4", "UINT4", 1},
    [OTTER_DTYPE_INT4] = {"int4", "INT4", 1},
    [OTTER_DTYPE_FLOAT4E2M1] = {"float4e2m1", "FLOAT4E2M1", 1},
    [OTTER_DTYPE_FLOAT8E8M0] = {"float8e8m0", "FLOAT8E8M0", 1},
    [OTTER_DTYPE_UINT2] = {"uint2", "UINT2", 1},
    [OTTER_DTYPE_INT2] = {"int2", "INT2", 1},
};

static bool dtype_valid(otter_dtype t) { return (int)t >= 0 && t < OTTER_DTYPE_COUNT_; }

size_t otter_dtype_size(otter_dtype t) { return dtype_valid(t) ? DTYPES[t].size : 0; }
const char *otter_dtype_name(otter_dtype t) { return dtype_valid(t) ? DTYPES[t].name : "undefined"; }

otter_dtype otter_dtype_from_name(const char *name) {
    if (!name) return OTTER_DTYPE_UNDEFINED;
    if (strcmp(name, "float") == 0) return OTTER_DTYPE_FLOAT;
    if (strcmp(name, "double") == 0) return OTTER_DTYPE_DOUBLE;
    for (int i = 1; i < OTTER_DTYPE_COUNT_; i++)
        if (strcmp(name, DTYPES[i].name) == 0 || strcmp(name, DTYPES[i].onnx_name) == 0) return (otter_dtype)i;
    return OTTER_DTYPE_UNDEFINED;
}

bool otter_dtype_is_float(otter_dtype t) {
    return t == OTTER_DTYPE_FLOAT || t == OTTER_DTYPE_DOUBLE || t == OTTER_DTYPE_FLOAT16 || t == OTTER_DTYPE_BFLOAT16;
}

bool otter_dtype_is_narrow_float(otter_dtype t) {
    return (t >= OTTER_DTYPE_FLOAT8E4M3FN && t <= OTTER_DTYPE_FLOAT8E5M2FNUZ) || t == OTTER_DTYPE_FLOAT4E2M1 ||
           t == OTTER_DTYPE_FLOAT8E8M0;
}

int otter_dtype_bits(otter_dtype t) {
    switch (t) {
    case OTTER_DTYPE_UINT4:
    case OTTER_DTYPE_INT4:
    case OTTER_DTYPE_FLOAT4E2M1:
        return 4;
    case OTTER_DTYPE_UINT2:
    case OTTER_DTYPE_INT2:
        return 2;
    default:
        return 8 * (int)otter_dtype_size(t);
    }
}

double otter_tensor_value(const otter_tensor *t, int64_t i) {
    if (!t || !t->data || i < 0 || i >= otter_tensor_numel(t)) return NAN;
    return ot_elem_f64(t->data, t->dtype, i);
}

int64_t otter_tensor_numel(const otter_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

size_t otter_tensor_nbytes(const otter_tensor *t) {
    size_t es = t->dtype == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(t->dtype);
    return (size_t)otter_tensor_numel(t) * es;
}

static otter_status check_shape(otter_dtype dtype, int rank, const int64_t *dims, size_t *nbytes) {
    if (!dtype_valid(dtype) || dtype == OTTER_DTYPE_UNDEFINED)
        return ot_error(OTTER_ERR_ARGUMENT, "invalid tensor element type %d", (int)dtype);
    if (rank < 0 || rank > OTTER_MAX_RANK)
        return ot_error(OTTER_ERR_UNSUPPORTED, "tensor rank %d (otter supports up to %d)", rank, OTTER_MAX_RANK);
    size_t n = dtype == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(dtype);
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return ot_error(OTTER_ERR_INVALID, "negative dimension %lld", (long long)dims[i]);
        if (!ot_mul_size(n, (size_t)dims[i], &n) || (uint64_t)n > ((uint64_t)1 << 46))
            return ot_error(OTTER_ERR_INVALID, "tensor dimensions overflow");
    }
    *nbytes = n;
    return OTTER_OK;
}

otter_status ot_tensor_shell(otter_tensor **out, const char *name, otter_dtype dtype, int rank, const int64_t *dims) {
    *out = NULL;
    size_t nbytes;
    OT_TRY(check_shape(dtype, rank, dims, &nbytes));
    otter_tensor *t = ot_calloc(1, sizeof *t);
    if (!t) return OT_NOMEM();
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    if (name && !(t->name = ot_strdup(name))) {
        ot_free(t);
        return OT_NOMEM();
    }
    *out = t;
    return OTTER_OK;
}

otter_status ot_tensor_alloc_data(otter_tensor *t) {
    size_t nbytes = otter_tensor_nbytes(t);
    if (!nbytes) return OTTER_OK;
    if (!(t->data = ot_calloc(1, nbytes)))
        return ot_error(OTTER_ERR_NOMEM, "out of memory allocating a %s tensor of %zu bytes",
                        otter_dtype_name(t->dtype), nbytes);
    t->owns_data = true;
    return OTTER_OK;
}

otter_status otter_tensor_create(otter_tensor **out, const char *name, otter_dtype dtype, int rank,
                                 const int64_t *dims) {
    OT_TRY(ot_tensor_shell(out, name, dtype, rank, dims));
    otter_status s = ot_tensor_alloc_data(*out);
    if (s != OTTER_OK) {
        otter_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

static otter_status copy_strings(otter_bytes *dst, const otter_bytes *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i].data = ot_strndup(src[i].data ? src[i].data : "", src[i].len);
        if (!dst[i].data) return OT_NOMEM();
        dst[i].len = src[i].len;
    }
    return OTTER_OK;
}

otter_status otter_tensor_from_data(otter_tensor **out, const char *name, otter_dtype dtype, int rank,
                                    const int64_t *dims, const void *data) {
    OT_TRY(otter_tensor_create(out, name, dtype, rank, dims));
    otter_tensor *t = *out;
    if (!t->data || !data) return OTTER_OK;
    if (dtype == OTTER_DTYPE_STRING) {
        otter_status s = copy_strings(t->data, data, otter_tensor_numel(t));
        if (s != OTTER_OK) {
            otter_tensor_free(t);
            *out = NULL;
        }
        return s;
    }
    memcpy(t->data, data, otter_tensor_nbytes(t));
    return OTTER_OK;
}

otter_status otter_tensor_clone(otter_tensor **out, const otter_tensor *src) {
    OT_TRY(otter_tensor_from_data(out, src->name, src->dtype, src->rank, src->dims, src->data));
    if (src->extra && !((*out)->extra = ot_proto_extra_clone(src->extra))) {
        otter_tensor_free(*out);
        *out = NULL;
        return OT_NOMEM();
    }
    return OTTER_OK;
}

otter_status otter_tensor_set_name(otter_tensor *t, const char *name) {
    char *n = ot_strdup(name);
    if (name && !n) return OT_NOMEM();
    ot_free(t->name);
    t->name = n;
    return OTTER_OK;
}

bool otter_tensor_equal(const otter_tensor *a, const otter_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    int64_t n = otter_tensor_numel(a);
    if (n == 0) return true;
    if (a->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *x = a->data, *y = b->data;
        for (int64_t i = 0; i < n; i++)
            if (x[i].len != y[i].len || (x[i].len && memcmp(x[i].data, y[i].data, x[i].len) != 0)) return false;
        return true;
    }
    return memcmp(a->data, b->data, otter_tensor_nbytes(a)) == 0;
}

void otter_tensor_free(otter_tensor *t) {
    if (!t) return;
    if (t->owns_data && t->data) {
        if (t->dtype == OTTER_DTYPE_STRING) {
            otter_bytes *s = t->data;
            for (int64_t i = 0, n = otter_tensor_numel(t); i < n; i++) ot_free(s[i].data);
        }
        ot_free(t->data);
    }
    ot_proto_extra_free(t->extra);
    ot_free(t->name);
    ot_free(t);
}
