/* NumPy .npy files (format 1.0, 2.0 and 3.0), little-endian, C order.
 *
 * Layout: "\x93NUMPY", major, minor, header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0), then
 * the header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and ended by '\n', then the raw elements. */
#include <string.h>

#include "core/core.h"
#include "otter/io.h"

#define NPY_MAGIC     "\x93NUMPY"
#define NPY_MAGIC_LEN 6

/* ---- dtypes ---- */

typedef struct npy_dtype {
    char kind; /* 'f', 'i', 'u', 'b', 'c' */
    size_t size;
    otter_dtype dtype;
} npy_dtype;

static const npy_dtype NPY_DTYPES[] = {
    {'f', 4, OTTER_DTYPE_FLOAT},     {'f', 8, OTTER_DTYPE_DOUBLE},      {'f', 2, OTTER_DTYPE_FLOAT16},
    {'i', 1, OTTER_DTYPE_INT8},      {'i', 2, OTTER_DTYPE_INT16},       {'i', 4, OTTER_DTYPE_INT32},
    {'i', 8, OTTER_DTYPE_INT64},     {'u', 1, OTTER_DTYPE_UINT8},       {'u', 2, OTTER_DTYPE_UINT16},
    {'u', 4, OTTER_DTYPE_UINT32},    {'u', 8, OTTER_DTYPE_UINT64},      {'b', 1, OTTER_DTYPE_BOOL},
    {'c', 8, OTTER_DTYPE_COMPLEX64}, {'c', 16, OTTER_DTYPE_COMPLEX128},
};
#define N_NPY_DTYPES (sizeof NPY_DTYPES / sizeof NPY_DTYPES[0])

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Reverse the bytes of each element (only used on big-endian hosts). */
static void swap_elements(void *data, size_t count, size_t size) {
    uint8_t *p = data;
    for (size_t i = 0; i < count; i++, p += size)
        for (size_t a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* ---- header parsing: a small Python-literal reader ---- */

typedef struct hdr_parser {
    const char *s;
    size_t len, pos;
    size_t base;      /* byte offset of the header in the file, for messages */
    const char *what; /* file name or "<memory>" */
} hdr_parser;

static otter_status hdr_fail(const hdr_parser *p, const char *msg) {
    size_t at = p->pos < p->len ? p->pos : p->len;
    size_t shown = p->len > 160 ? 160 : p->len;
    while (shown > 0 && (p->s[shown - 1] == ' ' || p->s[shown - 1] == '\n' || p->s[shown - 1] == '\r')) shown--;
    return ot_error(OTTER_ERR_INVALID, "%s: npy header: %s at byte %zu (header: %.*s)", p->what, msg, p->base + at,
                    (int)shown, p->s);
}

static void hdr_skip_ws(hdr_parser *p) {
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            p->pos++;
        else
            break;
    }
}

static bool hdr_peek(hdr_parser *p, char c) {
    hdr_skip_ws(p);
    return p->pos < p->len && p->s[p->pos] == c;
}

static bool hdr_eat(hdr_parser *p, char c) {
    if (!hdr_peek(p, c)) return false;
    p->pos++;
    return true;
}

/* A quoted string without escapes (descr and key strings never need them); points into the header. */
static otter_status hdr_string(hdr_parser *p, const char **str, size_t *n) {
    hdr_skip_ws(p);
    if (p->pos >= p->len || (p->s[p->pos] != '\'' && p->s[p->pos] != '"'))
        return hdr_fail(p, "expected a quoted string");
    char q = p->s[p->pos++];
    size_t start = p->pos;
    while (p->pos < p->len && p->s[p->pos] != q) {
        if (p->s[p->pos] == '\\') return hdr_fail(p, "escape sequences are not supported in strings");
        if (p->s[p->pos] == '\n') return hdr_fail(p, "unterminated string");
        p->pos++;
    }
    if (p->pos >= p->len) return hdr_fail(p, "unterminated string");
    *str = p->s + start;
    *n = p->pos - start;
    p->pos++;
    return OTTER_OK;
}

static bool hdr_word(hdr_parser *p, const char *w) {
    hdr_skip_ws(p);
    size_t n = strlen(w);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, w, n) != 0) return false;
    /* the word must end here */
    if (p->pos + n < p->len) {
        char c = p->s[p->pos + n];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') return false;
    }
    p->pos += n;
    return true;
}

/* A non-negative decimal integer (Python 2 files may append 'L'). */
static otter_status hdr_dim(hdr_parser *p, int64_t *v) {
    hdr_skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '-') return hdr_fail(p, "negative dimension in 'shape'");
    if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
        return hdr_fail(p, "expected an integer in 'shape'");
    uint64_t x = 0;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return hdr_fail(p, "dimension does not fit in int64 in 'shape'");
        x = x * 10 + d;
        p->pos++;
    }
    if (p->pos < p->len && (p->s[p->pos] == 'L' || p->s[p->pos] == 'l')) p->pos++;
    *v = (int64_t)x;
    return OTTER_OK;
}

static otter_status hdr_shape(hdr_parser *p, int *rank, int64_t *dims) {
    if (!hdr_eat(p, '(')) return hdr_fail(p, "expected a tuple '(...)' for 'shape'");
    *rank = 0;
    for (;;) {
        if (hdr_eat(p, ')')) break;
        if (*rank >= OTTER_MAX_RANK)
            return ot_error(OTTER_ERR_UNSUPPORTED, "%s: npy header: 'shape' has more than %d dimensions at byte %zu",
                            p->what, OTTER_MAX_RANK, p->base + p->pos);
        OT_TRY(hdr_dim(p, &dims[*rank]));
        (*rank)++;
        if (hdr_eat(p, ',')) continue;
        if (hdr_eat(p, ')')) {
            if (*rank == 1) return hdr_fail(p, "'shape' (n) is not a tuple: a 1-tuple needs a trailing comma");
            break;
        }
        return hdr_fail(p, "expected ',' or ')' in 'shape'");
    }
    return OTTER_OK;
}

typedef struct npy_header {
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    const char *descr;
    size_t descr_len;
    bool fortran_order;
} npy_header;

static otter_status hdr_parse(hdr_parser *p, npy_header *h) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!hdr_eat(p, '{')) return hdr_fail(p, "expected '{'");
    for (;;) {
        if (hdr_eat(p, '}')) break;
        const char *key;
        size_t klen;
        OT_TRY(hdr_string(p, &key, &klen));
        size_t key_pos = p->pos;
        if (!hdr_eat(p, ':')) return hdr_fail(p, "expected ':' after a key");
        if (klen == 5 && memcmp(key, "descr", 5) == 0) {
            if (have_descr) return hdr_fail(p, "duplicate key 'descr'");
            hdr_skip_ws(p);
            if (hdr_peek(p, '[') || hdr_peek(p, '{'))
                return ot_error(OTTER_ERR_UNSUPPORTED, "%s: npy header: structured dtypes are not supported (byte %zu)",
                                p->what, p->base + p->pos);
            OT_TRY(hdr_string(p, &h->descr, &h->descr_len));
            have_descr = true;
        } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
            if (have_fortran) return hdr_fail(p, "duplicate key 'fortran_order'");
            if (hdr_word(p, "True"))
                h->fortran_order = true;
            else if (hdr_word(p, "False"))
                h->fortran_order = false;
            else
                return hdr_fail(p, "expected True or False for 'fortran_order'");
            have_fortran = true;
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
            if (have_shape) return hdr_fail(p, "duplicate key 'shape'");
            OT_TRY(hdr_shape(p, &h->rank, h->dims));
            have_shape = true;
        } else {
            p->pos = key_pos - klen - 1;
            return ot_error(OTTER_ERR_INVALID, "%s: npy header: unexpected key '%.*s' at byte %zu", p->what, (int)klen,
                            key, p->base + p->pos);
        }
        if (hdr_eat(p, ',')) continue;
        if (hdr_eat(p, '}')) break;
        return hdr_fail(p, "expected ',' or '}'");
    }
    hdr_skip_ws(p);
    if (p->pos != p->len) return hdr_fail(p, "unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return ot_error(OTTER_ERR_INVALID, "%s: npy header: missing key '%s'", p->what,
                        !have_descr     ? "descr"
                        : !have_fortran ? "fortran_order"
                                        : "shape");
    return OTTER_OK;
}

/* Map a descr like "<f4" to an otter dtype. */
static otter_status descr_to_dtype(const char *what, const char *d, size_t n, otter_dtype *out, size_t *itemsize) {
    if (n < 2) goto unknown;
    char order = d[0];
    const char *rest = d + 1;
    size_t rlen = n - 1;
    if (order != '<' && order != '>' && order != '|' && order != '=') {
        /* numpy also accepts a descr without a byte-order character */
        order = '=';
        rest = d;
        rlen = n;
    }
    if (rlen < 2 || rlen > 3) goto unknown;
    char kind = rest[0];
    size_t size = 0;
    for (size_t i = 1; i < rlen; i++) {
        if (rest[i] < '0' || rest[i] > '9') goto unknown;
        size = size * 10 + (size_t)(rest[i] - '0');
    }
    for (size_t i = 0; i < N_NPY_DTYPES; i++) {
        if (NPY_DTYPES[i].kind != kind || NPY_DTYPES[i].size != size) continue;
        bool big = order == '>' || (order == '=' && !host_is_little_endian());
        if (big && size > 1)
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "%s: npy dtype '%.*s' is big-endian; otter reads little-endian .npy files only "
                            "(convert with arr.astype(arr.dtype.newbyteorder('<')))",
                            what, (int)n, d);
        *out = NPY_DTYPES[i].dtype;
        *itemsize = size;
        return OTTER_OK;
    }
unknown:
    return ot_error(OTTER_ERR_UNSUPPORTED,
                    "%s: npy dtype '%.*s' is not supported (supported: f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1 c8 c16)",
                    what, (int)(n > 64 ? 64 : n), d);
}

static uint32_t rd_le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static otter_status npy_parse(otter_tensor **out, const void *data, size_t size, const char *what) {
    *out = NULL;
    const uint8_t *b = data;
    if (size < NPY_MAGIC_LEN + 2 || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (size < NPY_MAGIC_LEN + 2 && (size == 0 || memcmp(b, NPY_MAGIC, size < 6 ? size : 6) == 0))
            return ot_error(OTTER_ERR_INVALID, "%s: truncated npy file: %zu bytes, shorter than the magic string", what,
                            size);
        return ot_error(OTTER_ERR_INVALID, "%s: not a npy file: bad magic at byte 0 (expected \\x93NUMPY)", what);
    }
    unsigned major = b[6], minor = b[7];
    size_t hlen_size;
    if (major == 1)
        hlen_size = 2;
    else if (major == 2 || major == 3)
        hlen_size = 4;
    else
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "%s: npy format version %u.%u is not supported (1.0, 2.0, 3.0) at byte 6", what, major, minor);
    if (minor != 0)
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "%s: npy format version %u.%u is not supported (1.0, 2.0, 3.0) at byte 7", what, major, minor);
    if (size < 8 + hlen_size)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: truncated npy file: %zu bytes, the header length field ends at byte %zu", what, size,
                        8 + hlen_size);
    size_t hlen = hlen_size == 2 ? rd_le16(b + 8) : rd_le32(b + 8);
    size_t hstart = 8 + hlen_size;
    if (hlen > size - hstart)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: truncated npy file: header of %zu bytes at byte %zu needs %zu bytes, file has %zu", what,
                        hlen, hstart, hstart + hlen, size);
    const char *hs = (const char *)b + hstart;
    for (size_t i = 0; i < hlen; i++)
        if (hs[i] == '\0' || (major < 3 && (unsigned char)hs[i] >= 0x80))
            return ot_error(OTTER_ERR_INVALID, "%s: npy header: invalid character 0x%02x at byte %zu", what,
                            (unsigned char)hs[i], hstart + i);

    hdr_parser p = {hs, hlen, 0, hstart, what};
    npy_header h;
    memset(&h, 0, sizeof h);
    OT_TRY(hdr_parse(&p, &h));
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    size_t itemsize = 0;
    OT_TRY(descr_to_dtype(what, h.descr, h.descr_len, &dt, &itemsize));
    if (h.fortran_order) {
        bool trivial = true; /* Fortran and C order coincide when at most one dim exceeds 1 */
        int big = 0;
        for (int i = 0; i < h.rank; i++) big += h.dims[i] > 1;
        if (big > 1) trivial = false;
        if (!trivial)
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "%s: npy array is in Fortran order (fortran_order: True); otter reads C-order arrays only "
                            "(save np.ascontiguousarray(arr))",
                            what);
    }

    size_t count = 1;
    for (int i = 0; i < h.rank; i++)
        if (!ot_mul_size(count, (size_t)h.dims[i], &count))
            return ot_error(OTTER_ERR_INVALID, "%s: npy shape overflows: the product of dimensions exceeds %zu", what,
                            (size_t)SIZE_MAX);
    size_t nbytes;
    if (!ot_mul_size(count, itemsize, &nbytes))
        return ot_error(OTTER_ERR_INVALID, "%s: npy shape overflows: %zu elements of %zu bytes", what, count, itemsize);
    size_t dstart = hstart + hlen, avail = size - dstart;
    if (avail < nbytes)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: truncated npy file: data at byte %zu should hold %zu bytes (%zu elements of %zu bytes), "
                        "file has %zu",
                        what, dstart, nbytes, count, itemsize, avail);
    if (avail > nbytes)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: npy file has %zu bytes of data at byte %zu, expected %zu (%zu elements of %zu bytes)",
                        what, avail, dstart, nbytes, count, itemsize);

    otter_status s = otter_tensor_from_data(out, NULL, dt, h.rank, h.dims, b + dstart);
    if (s != OTTER_OK) return ot_error_context(s, "%s: ", what);
    if (!host_is_little_endian() && itemsize > 1)
        swap_elements((*out)->data, count * (dt == OTTER_DTYPE_COMPLEX64 || dt == OTTER_DTYPE_COMPLEX128 ? 2 : 1),
                      dt == OTTER_DTYPE_COMPLEX64 || dt == OTTER_DTYPE_COMPLEX128 ? itemsize / 2 : itemsize);
    return OTTER_OK;
}

otter_status otter_tensor_load_npy_from_memory(otter_tensor **out, const void *data, size_t size) {
    if (!out) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_npy_from_memory: out is NULL");
    *out = NULL;
    if (!data && size) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_npy_from_memory: data is NULL");
    return npy_parse(out, data ? data : "", size, "<memory>");
}

otter_status otter_tensor_load_npy(otter_tensor **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_load_npy: NULL argument");
    *out = NULL;
    void *data;
    size_t size;
    OT_TRY(ot_read_file(path, &data, &size));
    otter_status s = npy_parse(out, data, size, path);
    ot_free(data);
    return s;
}

/* ---- writing ---- */

static const char *dtype_descr(otter_dtype t) {
    switch (t) {
    case OTTER_DTYPE_FLOAT:
        return "<f4";
    case OTTER_DTYPE_DOUBLE:
        return "<f8";
    case OTTER_DTYPE_FLOAT16:
        return "<f2";
    case OTTER_DTYPE_INT8:
        return "|i1";
    case OTTER_DTYPE_INT16:
        return "<i2";
    case OTTER_DTYPE_INT32:
        return "<i4";
    case OTTER_DTYPE_INT64:
        return "<i8";
    case OTTER_DTYPE_UINT8:
        return "|u1";
    case OTTER_DTYPE_UINT16:
        return "<u2";
    case OTTER_DTYPE_UINT32:
        return "<u4";
    case OTTER_DTYPE_UINT64:
        return "<u8";
    case OTTER_DTYPE_BOOL:
        return "|b1";
    case OTTER_DTYPE_COMPLEX64:
        return "<c8";
    case OTTER_DTYPE_COMPLEX128:
        return "<c16";
    default:
        return NULL;
    }
}

/* Serialize to a buffer (ot_free it). */
static otter_status npy_serialize(const otter_tensor *t, const char *what, uint8_t **out, size_t *out_size) {
    const char *descr = dtype_descr(t->dtype);
    if (!descr)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s: tensor '%s' has element type %s, which .npy files cannot hold",
                        what, t->name ? t->name : "", otter_dtype_name(t->dtype));
    if (t->rank < 0 || t->rank > OTTER_MAX_RANK)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: tensor '%s' has invalid rank %d", what, t->name ? t->name : "",
                        t->rank);
    size_t itemsize = otter_dtype_size(t->dtype), count = 1;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0 || !ot_mul_size(count, (size_t)t->dims[i], &count))
            return ot_error(OTTER_ERR_ARGUMENT, "%s: tensor '%s' has invalid dimension %lld", what,
                            t->name ? t->name : "", (long long)t->dims[i]);
    size_t nbytes;
    if (!ot_mul_size(count, itemsize, &nbytes))
        return ot_error(OTTER_ERR_ARGUMENT, "%s: tensor '%s' is too large", what, t->name ? t->name : "");
    if (nbytes && !t->data)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: tensor '%s' has no data", what, t->name ? t->name : "");

    /* The dict, as numpy writes it. 16 dims of 20 digits fit easily. */
    char dict[OTTER_MAX_RANK * 24 + 128];
    size_t n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->rank; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", t->rank == 1 ? "," : "");

    /* Pad with spaces so the data starts on a 64-byte boundary; the header ends with '\n'. */
    unsigned major = 1;
    size_t pre = 10, total = pre + n + 1;
    size_t padded = (total + 63) / 64 * 64;
    if (padded - pre > 0xffff) {
        major = 2;
        pre = 12;
        total = pre + n + 1;
        padded = (total + 63) / 64 * 64;
    }
    size_t hlen = padded - pre, fsize;
    if (nbytes > SIZE_MAX - padded) return ot_error(OTTER_ERR_ARGUMENT, "%s: tensor too large", what);
    fsize = padded + nbytes;
    uint8_t *buf = ot_malloc(fsize);
    if (!buf) return ot_error(OTTER_ERR_NOMEM, "%s: out of memory for %zu bytes", what, fsize);
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = (uint8_t)(hlen & 0xff);
        buf[9] = (uint8_t)(hlen >> 8);
    } else {
        for (int i = 0; i < 4; i++) buf[8 + i] = (uint8_t)(hlen >> (8 * i));
    }
    memcpy(buf + pre, dict, n);
    memset(buf + pre + n, ' ', hlen - n - 1);
    buf[padded - 1] = '\n';
    if (nbytes) {
        memcpy(buf + padded, t->data, nbytes);
        if (!host_is_little_endian() && itemsize > 1) {
            bool cplx = t->dtype == OTTER_DTYPE_COMPLEX64 || t->dtype == OTTER_DTYPE_COMPLEX128;
            swap_elements(buf + padded, cplx ? count * 2 : count, cplx ? itemsize / 2 : itemsize);
        }
    }
    *out = buf;
    *out_size = fsize;
    return OTTER_OK;
}

otter_status otter_tensor_save_npy(const otter_tensor *t, const char *path) {
    if (!t || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_tensor_save_npy: NULL argument");
    uint8_t *buf;
    size_t size;
    OT_TRY(npy_serialize(t, path, &buf, &size));
    otter_status s = ot_write_file_atomic(path, buf, size);
    ot_free(buf);
    return s;
}
