/* Reading ONNX Runtime's training checkpoint, a flatbuffer with file identifier "ODTC". No flatbuffers
 * library: every offset, length and alignment is checked against the buffer before a byte is touched, and
 * structural problems are reported with the byte offset; then ot_ckpt_validate checks the spec's rules. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "format/checkpoint_internal.h"

typedef struct rd {
    const uint8_t *b;
    size_t n;
    size_t data_bytes;      /* tensor bytes copied so far: at most n, else tables are shared (see read_tensor) */
    bool mapped;            /* b maps the file: pages of raw_data go back to the kernel once copied */
    const char *ext_path;   /* the external data file (NULL: loading from memory, none to read) */
    const uint8_t *ext_mem; /* or the external data in memory (ext_size bytes) */
    int ext_fd;             /* opened at the first tensor stored there; -1 until then */
    uint64_t ext_size;
    uint64_t ext_bytes; /* external data read so far: at most ext_size (no amplification either) */
} rd;

/* Copied tensor data is not read again: let the kernel drop its pages so a load holds the state once, not the
 * file beside it (re-read from the file if a table shares them after all). */
static void release_pages(const rd *r, size_t at, size_t n) {
    if (!r->mapped) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)(r->b + at) + page - 1) / page * page, hi = (uintptr_t)(r->b + at + n) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* n bytes at offset of the external data file into t's data, allocated once the range is checked. */
static otter_status read_external(rd *r, uint64_t offset, otter_tensor *t, size_t n, const char *what) {
    if (r->ext_fd < 0 && !r->ext_mem) {
        if (!r->ext_path)
            return ot_error(OTTER_ERR_UNSUPPORTED,
                            "%s: data stored as external data at offset %llu; a checkpoint with external data loads "
                            "from its file, not from memory",
                            what, (unsigned long long)offset);
        r->ext_fd = open(r->ext_path, O_RDONLY);
        struct stat st;
        if (r->ext_fd < 0 || fstat(r->ext_fd, &st) != 0)
            return ot_error(errno == ENOENT ? OTTER_ERR_NOT_FOUND : OTTER_ERR_IO,
                            "%s: its data is in the external data file '%s': %s", what, r->ext_path, strerror(errno));
        r->ext_size = (uint64_t)st.st_size;
    }
    if (offset > r->ext_size || n > r->ext_size - offset)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: external data at offset %llu (%zu bytes) runs past the end of the %llu-byte file '%s'",
                        what, (unsigned long long)offset, n, (unsigned long long)r->ext_size, r->ext_path);
    if (n > r->ext_size - r->ext_bytes)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: external data adds up to more than the %llu bytes of '%s' (tensors sharing data?)", what,
                        (unsigned long long)r->ext_size, r->ext_path);
    r->ext_bytes += n;
    if (!n) return OTTER_OK; /* no elements: no data to read */
    OT_TRY(ot_tensor_alloc_data(t));
    char *dst = t->data;
    if (r->ext_mem) {
        memcpy(dst, r->ext_mem + offset, n);
        return OTTER_OK;
    }
    for (size_t done = 0; done < n;) {
        ssize_t k = pread(r->ext_fd, dst + done, n - done, (off_t)(offset + done));
        if (k <= 0)
            return ot_error(OTTER_ERR_IO, "%s: reading '%s' at offset %llu: %s", what, r->ext_path,
                            (unsigned long long)(offset + done), k < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)k;
    }
    return OTTER_OK;
}

typedef struct tab {
    size_t pos, vt;
    uint16_t vtsize, tsize;
    const char *what; /* "tensor module_state.requires_grad_params[3]" */
} tab;

static uint16_t rd_u16(const rd *r, size_t p) { return (uint16_t)(r->b[p] | r->b[p + 1] << 8); }
static uint32_t rd_u32(const rd *r, size_t p) {
    return (uint32_t)r->b[p] | (uint32_t)r->b[p + 1] << 8 | (uint32_t)r->b[p + 2] << 16 | (uint32_t)r->b[p + 3] << 24;
}
static uint64_t rd_u64(const rd *r, size_t p) { return (uint64_t)rd_u32(r, p) | (uint64_t)rd_u32(r, p + 4) << 32; }

static otter_status bad(size_t at, const char *what, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static otter_status bad(size_t at, const char *what, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ot_error(OTTER_ERR_INVALID, "%s at byte %zu: %s", what, at, msg);
}

/* The table at pos, with its vtable checked. */
static otter_status open_table(const rd *r, size_t pos, const char *what, tab *t) {
    if (pos % 4) return bad(pos, what, "table is not 4-byte aligned");
    if (pos > r->n || r->n - pos < 4) return bad(pos, what, "table starts past the end of the %zu-byte buffer", r->n);
    int64_t vt = (int64_t)pos - (int64_t)(int32_t)rd_u32(r, pos);
    if (vt < 0 || (uint64_t)vt > r->n || r->n - (size_t)vt < 4)
        return bad(pos, what, "vtable offset %d points to byte %lld, outside the %zu-byte buffer",
                   (int)(int32_t)rd_u32(r, pos), (long long)vt, r->n);
    if (vt % 2) return bad(pos, what, "vtable at byte %lld is not 2-byte aligned", (long long)vt);
    t->pos = pos;
    t->vt = (size_t)vt;
    t->vtsize = rd_u16(r, t->vt);
    t->tsize = rd_u16(r, t->vt + 2);
    t->what = what;
    if (t->vtsize < 4 || t->vtsize % 2 || r->n - t->vt < t->vtsize)
        return bad(pos, what, "vtable at byte %zu has a bad size %u", t->vt, t->vtsize);
    if (t->tsize < 4 || r->n - pos < t->tsize)
        return bad(pos, what, "table size %u runs past the end of the %zu-byte buffer", t->tsize, r->n);
    return OTTER_OK;
}

/* Position of field slot (of size bytes), or 0 when absent. */
static otter_status field(const rd *r, const tab *t, int slot, size_t size, size_t *pos) {
    *pos = 0;
    size_t e = 4 + 2 * (size_t)slot;
    if (e + 2 > t->vtsize) return OTTER_OK;
    uint16_t off = rd_u16(r, t->vt + e);
    if (!off) return OTTER_OK;
    if (off < 4 || (size_t)off + size > t->tsize)
        return bad(t->pos, t->what, "field %d at offset %u lies outside the %u-byte table", slot, off, t->tsize);
    if ((t->pos + off) % size) return bad(t->pos + off, t->what, "field %d is not %zu-byte aligned", slot, size);
    *pos = t->pos + off;
    return OTTER_OK;
}

static otter_status get_scalar(const rd *r, const tab *t, int slot, size_t size, uint64_t def, uint64_t *out) {
    size_t p;
    OT_TRY(field(r, t, slot, size, &p));
    if (!p)
        *out = def;
    else if (size == 1)
        *out = r->b[p];
    else if (size == 4)
        *out = rd_u32(r, p);
    else
        *out = rd_u64(r, p);
    return OTTER_OK;
}

/* Target of an offset field; 0 when absent. */
static otter_status get_ref(const rd *r, const tab *t, int slot, size_t *target) {
    size_t p;
    *target = 0;
    OT_TRY(field(r, t, slot, 4, &p));
    if (!p) return OTTER_OK;
    uint64_t to = (uint64_t)p + rd_u32(r, p);
    if (to >= r->n)
        return bad(p, t->what, "field %d points to byte %llu, past the end of the %zu-byte buffer", slot,
                   (unsigned long long)to, r->n);
    *target = (size_t)to;
    return OTTER_OK;
}

/* A vector at pos of count elements of elem bytes (aligned to align) starting at *elems. */
static otter_status open_vector(const rd *r, size_t pos, size_t elem, size_t align, const char *what, size_t *count,
                                size_t *elems) {
    if (pos % 4) return bad(pos, what, "vector is not 4-byte aligned");
    if (r->n - pos < 4) return bad(pos, what, "vector length runs past the end of the %zu-byte buffer", r->n);
    uint32_t len = rd_u32(r, pos);
    size_t start = pos + 4;
    if (align > 1 && start % align) return bad(pos, what, "vector elements are not %zu-byte aligned", align);
    if ((uint64_t)len * elem > (uint64_t)(r->n - start))
        return bad(pos, what, "vector of %u elements of %zu bytes runs past the end of the %zu-byte buffer", len, elem,
                   r->n);
    *count = len;
    *elems = start;
    return OTTER_OK;
}

static otter_status get_vector(const rd *r, const tab *t, int slot, size_t elem, size_t align, const char *what,
                               bool *present, size_t *count, size_t *elems) {
    size_t to;
    OT_TRY(get_ref(r, t, slot, &to));
    *present = to != 0;
    *count = *elems = 0;
    if (!to) return OTTER_OK;
    return open_vector(r, to, elem, align, what, count, elems);
}

/* A string at pos: its bytes (not copied) and length; NUL-terminated in the buffer. NULL and 0 on failure. */
static otter_status open_string(const rd *r, size_t pos, const char *what, const char **s, size_t *len) {
    *s = NULL;
    *len = 0;
    size_t n = 0, e = 0;
    OT_TRY(open_vector(r, pos, 1, 1, what, &n, &e));
    if (e + n >= r->n || r->b[e + n] != 0) return bad(pos, what, "string of %zu bytes is not NUL-terminated", n);
    *s = (const char *)r->b + e;
    *len = n;
    return OTTER_OK;
}

/* A string field used as a C name: present when required, no NUL inside. *out NULL when absent. */
static otter_status get_name(const rd *r, const tab *t, int slot, bool required, const char *field_name,
                             const char **out) {
    size_t to, len;
    *out = NULL;
    OT_TRY(get_ref(r, t, slot, &to));
    if (!to) {
        if (required) return bad(t->pos, t->what, "has no %s", field_name);
        return OTTER_OK;
    }
    char what[300];
    snprintf(what, sizeof what, "%s.%s", t->what, field_name);
    OT_TRY(open_string(r, to, what, out, &len));
    if (memchr(*out, 0, len)) return bad(to, what, "contains a NUL byte");
    return OTTER_OK;
}

/* The i-th table of a vector of offsets. */
static otter_status vector_table(const rd *r, size_t elems, size_t i, const char *what, tab *t) {
    size_t p = elems + 4 * i;
    uint64_t to = (uint64_t)p + rd_u32(r, p);
    if (to >= r->n)
        return bad(p, what, "offset points to byte %llu, past the end of the %zu-byte buffer", (unsigned long long)to,
                   r->n);
    return open_table(r, (size_t)to, what, t);
}

static otter_status charge(rd *r, size_t bytes, const tab *t) {
    if (bytes > r->n - r->data_bytes)
        return bad(t->pos, t->what,
                   "tensor data adds up to more than the %zu bytes of the buffer (tables shared between tensors?)",
                   r->n);
    r->data_bytes += bytes;
    return OTTER_OK;
}

/* One Tensor table into a new otter_tensor. */
static otter_status read_tensor(rd *r, size_t pos, const char *what, bool nominal, otter_tensor **out) {
    *out = NULL;
    tab t;
    OT_TRY(open_table(r, pos, what, &t));
    const char *name;
    OT_TRY(get_name(r, &t, T_NAME, true, "name", &name));
    char full[400];
    snprintf(full, sizeof full, "%s '%s'", what, name);
    t.what = full;
    uint64_t v;
    OT_TRY(get_scalar(r, &t, T_EXTERNAL, 8, (uint64_t)-1, &v));
    int64_t external = (int64_t)v;
    OT_TRY(get_scalar(r, &t, T_DATA_TYPE, 4, 0, &v));
    int32_t dt = (int32_t)(uint32_t)v;
    if (dt >= OTTER_DTYPE_FLOAT8E4M3FN && dt < OTTER_DTYPE_COUNT_) /* see check_tensor in checkpoint.c */
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s at byte %zu: element type %d (%s) is not supported in checkpoints",
                        full, pos, (int)dt, otter_dtype_name((otter_dtype)dt));
    if (dt <= 0 || dt >= OTTER_DTYPE_COUNT_) return bad(pos, full, "invalid element type %d", (int)dt);
    otter_dtype dtype = (otter_dtype)dt;
    bool present;
    size_t rank, dims_at;
    OT_TRY(get_vector(r, &t, T_DIMS, 8, 8, full, &present, &rank, &dims_at));
    if (!present) return bad(pos, full, "has no dims");
    if (rank > OTTER_MAX_RANK)
        return ot_error(OTTER_ERR_UNSUPPORTED, "%s at byte %zu: rank %zu (otter supports up to %d)", full, pos, rank,
                        OTTER_MAX_RANK);
    int64_t dims[OTTER_MAX_RANK];
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t i = 0; i < rank; i++) {
        dims[i] = (int64_t)rd_u64(r, dims_at + 8 * i);
        if (dims[i] < 0) return bad(dims_at + 8 * i, full, "negative dimension %lld", (long long)dims[i]);
        if (dims[i] && numel > (UINT64_C(1) << 46) / (uint64_t)dims[i]) overflow = true;
        numel *= (uint64_t)dims[i];
    }
    if (overflow) return bad(dims_at, full, "dimensions overflow");
    size_t raw_n, raw_at, str_n, str_at;
    bool raw_present, str_present;
    OT_TRY(get_vector(r, &t, T_RAW, 1, 1, full, &raw_present, &raw_n, &raw_at));
    OT_TRY(get_vector(r, &t, T_STRINGS, 4, 4, full, &str_present, &str_n, &str_at));
    uint64_t want = dtype == OTTER_DTYPE_STRING ? 0 : numel * otter_dtype_size(dtype);
    if (external >= 0) { /* ORT 1.18+: the bytes are in the external data file, at that offset (raw_data, if
                          * any, ignored as ORT does) */
        if (nominal || dtype == OTTER_DTYPE_STRING)
            return bad(pos, full, "has an external data offset, but %s",
                       nominal ? "the state is nominal" : "string tensors keep their data inline");
        otter_tensor *ten = NULL;
        OT_TRY(ot_tensor_shell(&ten, name, dtype, (int)rank, dims));
        char w[480];
        snprintf(w, sizeof w, "%s at byte %zu", full, pos);
        otter_status s = read_external(r, (uint64_t)external, ten, (size_t)want, w);
        if (s != OTTER_OK) {
            otter_tensor_free(ten);
            return s;
        }
        *out = ten;
        return OTTER_OK;
    }
    if (dtype != OTTER_DTYPE_STRING) {
        if (!raw_present) return bad(pos, full, "has no raw_data (and no external data offset)");
        if (nominal && raw_n != 0)
            return bad(raw_at - 4, full, "the state is nominal but raw_data holds %zu bytes", raw_n);
        if (!nominal && raw_n != want) {
            char sh[160];
            otter_tensor tmp = {.dtype = dtype, .rank = (int)rank};
            memcpy(tmp.dims, dims, rank * sizeof *dims);
            return bad(raw_at - 4, full, "raw_data holds %zu bytes, %s %s needs %llu", raw_n, otter_dtype_name(dtype),
                       ot_ckpt_shape_str(&tmp, sh, sizeof sh), (unsigned long long)want);
        }
    } else if (nominal ? str_n != 0 : str_n != numel) {
        return bad(pos, full, "string_data holds %zu strings, %s needs %llu", str_n,
                   nominal ? "a nominal state" : "dims", nominal ? 0ULL : (unsigned long long)numel);
    }
    otter_tensor *ten = NULL;
    if (nominal || numel == 0) {
        OT_TRY(ot_tensor_shell(&ten, name, dtype, (int)rank, dims));
    } else if (dtype != OTTER_DTYPE_STRING) {
        OT_TRY(charge(r, raw_n, &t));
        OT_TRY(ot_tensor_shell(&ten, name, dtype, (int)rank, dims));
        otter_status s = ot_tensor_alloc_data(ten);
        if (s != OTTER_OK) {
            otter_tensor_free(ten);
            return s;
        }
        /* in slices, each released once copied: the file's pages and the copy never both hold a large tensor */
        for (size_t done = 0, step = (size_t)16 << 20; done < raw_n; done += step) {
            size_t k = raw_n - done < step ? raw_n - done : step;
            memcpy((char *)ten->data + done, r->b + raw_at + done, k);
            release_pages(r, raw_at + done, k);
        }
    } else {
        OT_TRY(charge(r, 4 * str_n, &t));
        OT_TRY(otter_tensor_create(&ten, name, dtype, (int)rank, dims));
        otter_bytes *sv = ten->data;
        for (size_t i = 0; i < str_n; i++) {
            size_t p = str_at + 4 * i;
            uint64_t to = (uint64_t)p + rd_u32(r, p);
            const char *s;
            size_t len;
            otter_status st = to >= r->n ? bad(p, full, "string_data[%zu] points past the end of the buffer", i)
                                         : open_string(r, (size_t)to, full, &s, &len);
            if (st == OTTER_OK) st = charge(r, len, &t);
            if (st == OTTER_OK && !(sv[i].data = ot_strndup(s, len))) st = OT_NOMEM();
            if (st != OTTER_OK) {
                otter_tensor_free(ten);
                return st;
            }
            sv[i].len = len;
        }
    }
    *out = ten;
    return OTTER_OK;
}

static otter_status read_tensor_vector(rd *r, const tab *parent, int slot, const char *what, bool required,
                                       bool nominal, ot_tensor_list *out) {
    bool present;
    size_t n, at;
    OT_TRY(get_vector(r, parent, slot, 4, 4, what, &present, &n, &at));
    if (!present && required)
        return bad(parent->pos, parent->what, "has no %s vector (ORT needs it, even when empty)", what);
    for (size_t i = 0; i < n; i++) {
        char w[300];
        snprintf(w, sizeof w, "tensor %s[%zu]", what, i);
        size_t p = at + 4 * i;
        uint64_t to = (uint64_t)p + rd_u32(r, p);
        if (to >= r->n) return bad(p, w, "offset points past the end of the %zu-byte buffer", r->n);
        otter_tensor *ten;
        OT_TRY(read_tensor(r, (size_t)to, w, nominal, &ten));
        otter_status s = ot_ckpt_list_push(out, ten);
        if (s != OTTER_OK) {
            otter_tensor_free(ten);
            return s;
        }
    }
    return OTTER_OK;
}

static otter_status read_module_state(rd *r, size_t pos, otter_checkpoint *c) {
    tab t;
    OT_TRY(open_table(r, pos, "module_state", &t));
    uint64_t v;
    OT_TRY(get_scalar(r, &t, MS_IS_NOMINAL, 1, 0, &v));
    c->nominal = v != 0;
    OT_TRY(read_tensor_vector(r, &t, MS_REQUIRES_GRAD, "module_state.requires_grad_params", true, c->nominal,
                              &c->params[OTTER_PARAM_TRAINABLE]));
    return read_tensor_vector(r, &t, MS_FROZEN, "module_state.frozen_params", true, c->nominal,
                              &c->params[OTTER_PARAM_FROZEN]);
}

static otter_status read_groups(rd *r, const tab *root, otter_checkpoint *c) {
    bool present;
    size_t n, at;
    OT_TRY(get_vector(r, root, CK_OPTIMIZER_GROUPS, 4, 4, "optimizer_groups", &present, &n, &at));
    if (!n) return OTTER_OK;
    if (!(c->groups = ot_calloc(n, sizeof *c->groups))) return OT_NOMEM();
    c->cap_groups = n;
    for (size_t g = 0; g < n; g++) {
        char w[300];
        snprintf(w, sizeof w, "optimizer_groups[%zu]", g);
        tab t;
        OT_TRY(vector_table(r, at, g, w, &t));
        otter_optimizer_group *gr = &c->groups[c->n_groups++];
        const char *name;
        OT_TRY(get_name(r, &t, OG_NAME, true, "group_name", &name));
        if (!(gr->name = ot_strdup(name))) return OT_NOMEM();
        uint64_t v;
        OT_TRY(get_scalar(r, &t, OG_STEP, 8, 0, &v));
        gr->step = (int64_t)v;
        OT_TRY(get_scalar(r, &t, OG_LR, 4, 0, &v));
        uint32_t bits = (uint32_t)v;
        memcpy(&gr->initial_learning_rate, &bits, 4);
        size_t ns, sat;
        OT_TRY(get_vector(r, &t, OG_STATES, 4, 4, w, &present, &ns, &sat));
        if (!ns) continue;
        if (!(gr->states = ot_calloc(ns, sizeof *gr->states))) return OT_NOMEM();
        for (size_t j = 0; j < ns; j++) {
            char ws[340];
            snprintf(ws, sizeof ws, "optimizer_groups[%zu].optimizer_states[%zu]", g, j);
            tab st;
            OT_TRY(vector_table(r, sat, j, ws, &st));
            otter_param_optimizer_state *ps = &gr->states[gr->n_states++];
            OT_TRY(get_name(r, &st, PS_PARAM_NAME, true, "param_name", &name));
            if (!(ps->param_name = ot_strdup(name))) return OT_NOMEM();
            size_t nm, mat;
            OT_TRY(get_vector(r, &st, PS_MOMENTUMS, 4, 4, ws, &present, &nm, &mat));
            if (!nm) continue;
            if (!(ps->momentums = ot_calloc(nm, sizeof *ps->momentums))) return OT_NOMEM();
            for (size_t m = 0; m < nm; m++) {
                char wm[400];
                snprintf(wm, sizeof wm, "tensor %s.momentums[%zu]", ws, m);
                size_t p = mat + 4 * m;
                uint64_t to = (uint64_t)p + rd_u32(r, p);
                if (to >= r->n) return bad(p, wm, "offset points past the end of the %zu-byte buffer", r->n);
                OT_TRY(read_tensor(r, (size_t)to, wm, c->nominal, &ps->momentums[m]));
                ps->n_momentums++;
            }
        }
    }
    return OTTER_OK;
}

static otter_status read_properties(rd *r, const tab *root, otter_checkpoint *c) {
    size_t to;
    OT_TRY(get_ref(r, root, CK_PROPERTY_BAG, &to));
    if (!to) return OTTER_OK;
    tab bag;
    OT_TRY(open_table(r, to, "property_bag", &bag));
    static const char *const kinds[3] = {"ints", "floats", "strings"};
    for (int k = 0; k < 3; k++) {
        bool present;
        size_t n, at;
        char w[64];
        snprintf(w, sizeof w, "property_bag.%s", kinds[k]);
        OT_TRY(get_vector(r, &bag, k, 4, 4, w, &present, &n, &at));
        if (n) OT_TRY(ot_grow((void **)&c->props, &c->cap_props, c->n_props + n, sizeof *c->props));
        for (size_t i = 0; i < n; i++) {
            char wi[100];
            snprintf(wi, sizeof wi, "property_bag.%s[%zu]", kinds[k], i);
            tab t;
            OT_TRY(vector_table(r, at, i, wi, &t));
            otter_property *p = &c->props[c->n_props];
            memset(p, 0, sizeof *p);
            const char *name;
            OT_TRY(get_name(r, &t, PR_NAME, true, "name", &name));
            if (!(p->name = ot_strdup(name))) return OT_NOMEM();
            c->n_props++;
            p->type = (otter_property_type)k;
            uint64_t v;
            if (k == PB_INTS) {
                OT_TRY(get_scalar(r, &t, PR_VALUE, 8, 0, &v));
                p->i = (int64_t)v;
            } else if (k == PB_FLOATS) {
                OT_TRY(get_scalar(r, &t, PR_VALUE, 4, 0, &v));
                uint32_t bits = (uint32_t)v;
                memcpy(&p->f, &bits, 4);
            } else {
                const char *s;
                OT_TRY(get_name(r, &t, PR_VALUE, true, "value", &s));
                if (!(p->s = ot_strdup(s))) return OT_NOMEM();
            }
        }
    }
    return OTTER_OK;
}

static otter_status parse(rd *r, otter_checkpoint *c) {
    if (r->n < 8) return ot_error(OTTER_ERR_INVALID, "%zu bytes are too short for a checkpoint (at least 8)", r->n);
    if (memcmp(r->b + 4, "ODTC", 4) != 0)
        return ot_error(OTTER_ERR_INVALID,
                        "bytes 4..8 are \"%c%c%c%c\" (hex %02x%02x%02x%02x), not the checkpoint file identifier "
                        "\"ODTC\"",
                        r->b[4] >= 32 && r->b[4] < 127 ? r->b[4] : '.', r->b[5] >= 32 && r->b[5] < 127 ? r->b[5] : '.',
                        r->b[6] >= 32 && r->b[6] < 127 ? r->b[6] : '.', r->b[7] >= 32 && r->b[7] < 127 ? r->b[7] : '.',
                        r->b[4], r->b[5], r->b[6], r->b[7]);
    uint32_t root = rd_u32(r, 0);
    if (root >= r->n)
        return bad(0, "root offset", "points to byte %u, past the end of the %zu-byte buffer", root, r->n);
    tab t;
    OT_TRY(open_table(r, root, "checkpoint (root table)", &t));
    uint64_t v;
    OT_TRY(get_scalar(r, &t, CK_VERSION, 4, 0, &v));
    int32_t version = (int32_t)(uint32_t)v;
    if (version != 1 && version != 2)
        return ot_error(OTTER_ERR_UNSUPPORTED, "checkpoint version %d (otter reads versions 1 and 2)", (int)version);
    c->version = version;
    size_t ms;
    OT_TRY(get_ref(r, &t, CK_MODULE_STATE, &ms));
    if (ms) OT_TRY(read_module_state(r, ms, c));
    OT_TRY(read_groups(r, &t, c));
    OT_TRY(read_properties(r, &t, c));
    return ot_ckpt_validate(c, true);
}

/* Parse size bytes at data; ext_path: the external data file, if the checkpoint has one (or ext_mem). */
static otter_status load(otter_checkpoint **out, const void *data, size_t size, bool mapped, const char *ext_path,
                         const void *ext_mem, size_t ext_size) {
    *out = NULL;
    if (size > FB_MAX_SIZE)
        return ot_error(OTTER_ERR_INVALID, "%zu bytes exceed the 2 GiB a flatbuffer can address", size);
    otter_checkpoint *c;
    OT_TRY(otter_checkpoint_create(&c));
    rd r = {data, size, 0, mapped, ext_path, ext_mem, -1, ext_mem ? ext_size : 0, 0};
    otter_status s = parse(&r, c);
    if (r.ext_fd >= 0) close(r.ext_fd);
    if (s != OTTER_OK) {
        otter_checkpoint_free(c);
        return s;
    }
    *out = c;
    return OTTER_OK;
}

otter_status otter_checkpoint_load_from_memory(otter_checkpoint **out, const void *data, size_t size) {
    if (!out || (!data && size))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_load_from_memory: NULL argument");
    return load(out, data, size, false, NULL, NULL, 0);
}

otter_status otter_checkpoint_load(otter_checkpoint **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_load: NULL argument");
    *out = NULL;
    const void *data;
    size_t size;
    bool mapped;
    char *ext_path = ot_ckpt_external_path(path);
    if (!ext_path) return OT_NOMEM();
    otter_status s = ot_map_file(path, &data, &size, &mapped);
    if (s == OTTER_OK) {
        s = load(out, data, size, mapped, ext_path, NULL, 0);
        ot_unmap_file(data, size, mapped);
    }
    ot_free(ext_path);
    if (s != OTTER_OK) ot_error_context(s, "checkpoint '%s': ", path);
    return s;
}

otter_status ot_ckpt_load_parts(otter_checkpoint **out, const void *data, size_t size, const void *ext,
                                size_t ext_size) {
    if (!out || (!data && size) || (!ext && ext_size))
        return ot_error(OTTER_ERR_ARGUMENT, "ot_ckpt_load_parts: NULL argument");
    static const uint8_t none[1];
    return load(out, data, size, false, "external data in memory", ext ? ext : none, ext_size);
}
