/* Writing ONNX Runtime's training checkpoint flatbuffer, laid out front to back: each object after the one
 * that refers to it, so every uoffset is positive; vtables just before their tables. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "format/checkpoint_internal.h"

/* Bytes of the file that the builder does not hold: n bytes at position pos come from src, written
 * straight from there when the file is written (a tensor's raw_data, or its external data). */
typedef struct fb_span {
    size_t pos;
    const void *src;
    size_t n;
    size_t before; /* bytes of the spans before this one */
} fb_span;

typedef struct fb_spans {
    fb_span *v;
    size_t n, cap;
    size_t bytes;
} fb_spans;

static otter_status spans_add(fb_spans *l, size_t pos, const void *src, size_t n) {
    OT_TRY(ot_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v));
    l->v[l->n++] = (fb_span){pos, src, n, l->bytes};
    l->bytes += n;
    return OTTER_OK;
}

/* The flatbuffer being built: n bytes long, of which it holds all but the spans (b holds n - spans.bytes). */
typedef struct fbw {
    uint8_t *b;
    size_t n, cap;
    fb_spans spans;
} fbw;

/* Where the byte at position pos (not inside a span) is held. */
static uint8_t *at(fbw *w, size_t pos) {
    size_t lo = 0, hi = w->spans.n; /* the spans before pos are v[0..lo) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->spans.v[mid].pos < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t skipped = lo ? w->spans.v[lo - 1].before + w->spans.v[lo - 1].n : 0;
    return w->b + (pos - skipped);
}

static otter_status w_need(fbw *w, size_t more) {
    if (more > FB_MAX_SIZE - w->n)
        return ot_error(OTTER_ERR_UNSUPPORTED, "the checkpoint would exceed the 2 GiB a flatbuffer can address");
    size_t held = w->n - w->spans.bytes;
    if (held + more <= w->cap) return OTTER_OK;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < held + more) cap *= 2;
    uint8_t *b = ot_realloc(w->b, cap);
    if (!b) return OT_NOMEM();
    w->b = b;
    w->cap = cap;
    return OTTER_OK;
}

static otter_status w_bytes(fbw *w, const void *p, size_t n) {
    OT_TRY(w_need(w, n));
    if (n) memcpy(at(w, w->n), p, n);
    w->n += n;
    return OTTER_OK;
}

static otter_status w_zeros(fbw *w, size_t n) {
    if (!n) return OTTER_OK;
    OT_TRY(w_need(w, n));
    memset(at(w, w->n), 0, n);
    w->n += n;
    return OTTER_OK;
}

/* Zero padding until (n + shift) is a multiple of a. */
static otter_status w_pad(fbw *w, size_t a, size_t shift) { return w_zeros(w, (a - (w->n + shift) % a) % a); }

static void put_u16(fbw *w, size_t p, uint16_t v) {
    uint8_t *b = at(w, p);
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}
static void put_u32(fbw *w, size_t p, uint32_t v) {
    uint8_t *b = at(w, p);
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static otter_status w_u32(fbw *w, uint32_t v) {
    OT_TRY(w_zeros(w, 4));
    put_u32(w, w->n - 4, v);
    return OTTER_OK;
}

/* Point the uoffset at slot to target (written later, so target > slot). */
static void w_link(fbw *w, size_t slot, size_t target) { put_u32(w, slot, (uint32_t)(target - slot)); }

/* A table field: slot, size 1/4/8, value (for offsets: size 4, ref true, value ignored). */
typedef struct wfield {
    int slot;
    size_t size;
    uint64_t value;
    bool ref;
} wfield;

/* vtable, then the table with fields in the given order (give 8-byte fields first); pos[i] receives each
 * field's position (to link offsets later). The uoffset at link_from is pointed at the table. */
static otter_status w_table(fbw *w, const wfield *f, int nf, size_t link_from, size_t *pos) {
    int nslots = 0;
    size_t align = 4;
    for (int i = 0; i < nf; i++) {
        if (f[i].slot + 1 > nslots) nslots = f[i].slot + 1;
        if (f[i].size > align) align = f[i].size;
    }
    OT_TRY(w_pad(w, 4, 0));
    size_t vt = w->n, vtsize = 4 + 2 * (size_t)nslots;
    OT_TRY(w_zeros(w, vtsize));
    put_u16(w, vt, (uint16_t)vtsize);
    /* The table starts 4 bytes before its first field; align so the first (largest) field is aligned. */
    OT_TRY(w_pad(w, align, 4));
    size_t t = w->n;
    w_link(w, link_from, t);
    OT_TRY(w_u32(w, (uint32_t)(int32_t)(t - vt))); /* soffset: vtable = table - soffset */
    for (int i = 0; i < nf; i++) {
        OT_TRY(w_pad(w, f[i].size, 0));
        size_t p = w->n;
        OT_TRY(w_zeros(w, f[i].size));
        uint8_t *b = at(w, p);
        for (size_t k = 0; k < f[i].size && !f[i].ref; k++) b[k] = (uint8_t)(f[i].value >> (8 * k));
        put_u16(w, vt + 4 + 2 * (size_t)f[i].slot, (uint16_t)(p - t));
        if (pos) pos[i] = p;
    }
    if (w->n - t > 0xffff) return ot_error(OTTER_ERR_UNSUPPORTED, "flatbuffer table too large");
    put_u16(w, vt + 2, (uint16_t)(w->n - t));
    return OTTER_OK;
}

static otter_status w_string(fbw *w, const char *s, size_t len, size_t link_from) {
    OT_TRY(w_pad(w, 4, 0));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)len));
    OT_TRY(w_bytes(w, s, len));
    OT_TRY(w_bytes(w, "", 1));
    return OTTER_OK;
}

/* A vector of n offsets (zeros, linked later); *elems receives the first slot. */
static otter_status w_ref_vector(fbw *w, size_t n, size_t link_from, size_t *elems) {
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_UNSUPPORTED, "vector of %zu elements is too long", n);
    OT_TRY(w_pad(w, 4, 0));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)n));
    *elems = w->n;
    return w_zeros(w, 4 * n);
}

/* A vector of n scalars of elem bytes whose elements start aligned to align. */
static otter_status w_data_vector(fbw *w, const void *data, size_t n, size_t elem, size_t align, size_t link_from) {
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_UNSUPPORTED, "vector of %zu elements is too long", n);
    OT_TRY(w_pad(w, align, 4));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)n));
    return w_bytes(w, data, n * elem);
}

/* Items in write order: as held (keep_order) or sorted by name (names are unique: ot_ckpt_validate()). */
static ot_named *write_order(const void *items, size_t n, size_t stride, size_t name_offset, bool keep_order) {
    ot_named *v = ot_calloc(n ? n : 1, sizeof *v);
    if (!v) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *item = (const char *)items + i * stride;
        v[i].item = item;
        memcpy(&v[i].name, item + name_offset, sizeof(char *));
    }
    if (!keep_order && n > 1) qsort(v, n, sizeof *v, ot_ckpt_cmp_named);
    return v;
}

typedef struct wctx {
    fbw w;
    bool keep_order;
    bool nominal;
    bool borrow;   /* large raw_data as spans, written from the tensors themselves: no copy of the state */
    bool external; /* tensors of EXTERNAL_MIN bytes or more go to the external data file */
    fb_spans ext;  /* the external data file: span positions are offsets in it */
    size_t ext_size;
} wctx;

/* Smallest tensor worth a span (smaller ones are copied into the flatbuffer). */
#define BORROW_MIN 4096
/* Smallest tensor put in the external data file; ORT's kMinimumSizeForExternalData keeps smaller ones inline. */
#define EXTERNAL_MIN 64

/* raw_data: a vector of bytes aligned to 8, copied or (large, when borrowing) a span. */
static otter_status w_raw(wctx *x, const void *data, size_t n, size_t link_from) {
    fbw *w = &x->w;
    if (!x->borrow || n < BORROW_MIN) return w_data_vector(w, data, n, 1, 8, link_from);
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_UNSUPPORTED, "vector of %zu elements is too long", n);
    OT_TRY(w_pad(w, 8, 4));
    w_link(w, link_from, w->n);
    OT_TRY(w_u32(w, (uint32_t)n));
    if (n > FB_MAX_SIZE - w->n)
        return ot_error(OTTER_ERR_UNSUPPORTED, "the checkpoint would exceed the 2 GiB a flatbuffer can address");
    OT_TRY(spans_add(&w->spans, w->n, data, n));
    w->n += n;
    return OTTER_OK;
}

/* The tensor's bytes go to the external data file, at an offset aligned to its element size (4 or 8, as
 * ORT aligns them); *offset receives it. */
static otter_status w_external(wctx *x, const otter_tensor *t, size_t n, uint64_t *offset) {
    size_t align = otter_dtype_size(t->dtype) >= 8 ? 8 : 4;
    size_t off = (x->ext_size + align - 1) / align * align;
    OT_TRY(spans_add(&x->ext, off, t->data, n));
    x->ext_size = off + n;
    *offset = off;
    return OTTER_OK;
}

static otter_status w_tensor(wctx *x, const otter_tensor *t, size_t link_from) {
    fbw *w = &x->w;
    bool str = t->dtype == OTTER_DTYPE_STRING;
    bool values = !x->nominal && t->data && otter_tensor_numel(t) > 0;
    size_t nbytes = values && !str ? otter_tensor_nbytes(t) : 0;
    uint64_t offset = 0;
    bool ext = x->external && nbytes >= EXTERNAL_MIN;
    if (ext) OT_TRY(w_external(x, t, nbytes, &offset));
    /* external: external_data_offset (the 8-byte field goes first) instead of raw_data, as ORT writes it */
    wfield f[5];
    int nf = 0;
    if (ext) f[nf++] = (wfield){T_EXTERNAL, 8, offset, false};
    f[nf++] = (wfield){T_NAME, 4, 0, true};
    f[nf++] = (wfield){T_DIMS, 4, 0, true};
    f[nf++] = (wfield){T_DATA_TYPE, 4, (uint64_t)(uint32_t)t->dtype, false};
    if (!ext) f[nf++] = (wfield){T_RAW, 4, 0, true};
    if (str) f[nf++] = (wfield){T_STRINGS, 4, 0, true};
    size_t pos[5];
    OT_TRY(w_table(w, f, nf, link_from, pos));
    OT_TRY(w_string(w, t->name, strlen(t->name), pos[ext]));
    OT_TRY(w_data_vector(w, t->dims, (size_t)t->rank, 8, 8, pos[ext + 1]));
    if (!ext) OT_TRY(w_raw(x, nbytes ? t->data : NULL, nbytes, pos[3]));
    if (str) {
        size_t n = values ? (size_t)otter_tensor_numel(t) : 0, elems;
        OT_TRY(w_ref_vector(w, n, pos[nf - 1], &elems));
        const otter_bytes *sv = t->data;
        for (size_t i = 0; i < n; i++) OT_TRY(w_string(w, sv[i].data ? sv[i].data : "", sv[i].len, elems + 4 * i));
    }
    return OTTER_OK;
}

static otter_status w_tensors(wctx *x, otter_tensor *const *v, size_t n, size_t link_from) {
    ot_named *order = ot_calloc(n ? n : 1, sizeof *order);
    if (!order) return OT_NOMEM();
    for (size_t i = 0; i < n; i++) order[i] = (ot_named){v[i]->name, v[i]};
    if (!x->keep_order && n > 1) qsort(order, n, sizeof *order, ot_ckpt_cmp_named);
    size_t elems;
    otter_status s = w_ref_vector(&x->w, n, link_from, &elems);
    for (size_t i = 0; i < n && s == OTTER_OK; i++) s = w_tensor(x, order[i].item, elems + 4 * i);
    ot_free(order);
    return s;
}

static otter_status w_group(wctx *x, const otter_optimizer_group *g, size_t link_from) {
    fbw *w = &x->w;
    uint32_t lr_bits;
    memcpy(&lr_bits, &g->initial_learning_rate, 4);
    wfield f[4];
    int nf = 0, i_name, i_states;
    if (g->step) f[nf++] = (wfield){OG_STEP, 8, (uint64_t)g->step, false};
    i_name = nf;
    f[nf++] = (wfield){OG_NAME, 4, 0, true};
    if (lr_bits) f[nf++] = (wfield){OG_LR, 4, lr_bits, false};
    i_states = nf;
    f[nf++] = (wfield){OG_STATES, 4, 0, true};
    size_t pos[4];
    OT_TRY(w_table(w, f, nf, link_from, pos));
    OT_TRY(w_string(w, g->name, strlen(g->name), pos[i_name]));
    ot_named *order = write_order(g->states, g->n_states, sizeof *g->states,
                                  offsetof(otter_param_optimizer_state, param_name), x->keep_order);
    if (!order) return OT_NOMEM();
    size_t elems;
    otter_status s = w_ref_vector(w, g->n_states, pos[i_states], &elems);
    for (size_t i = 0; i < g->n_states && s == OTTER_OK; i++) {
        const otter_param_optimizer_state *st = order[i].item;
        const wfield sf[2] = {{PS_PARAM_NAME, 4, 0, true}, {PS_MOMENTUMS, 4, 0, true}};
        size_t sp[2];
        s = w_table(w, sf, 2, elems + 4 * i, sp);
        if (s == OTTER_OK) s = w_string(w, st->param_name, strlen(st->param_name), sp[0]);
        if (s == OTTER_OK) s = w_tensors(x, st->momentums, st->n_momentums, sp[1]);
    }
    ot_free(order);
    return s;
}

static otter_status w_properties(wctx *x, const otter_checkpoint *c, size_t link_from) {
    fbw *w = &x->w;
    size_t count[3] = {0, 0, 0};
    for (size_t i = 0; i < c->n_props; i++) count[c->props[i].type]++;
    wfield f[3];
    int nf = 0, at[3] = {-1, -1, -1};
    for (int k = 0; k < 3; k++)
        if (count[k]) {
            at[k] = nf;
            f[nf++] = (wfield){k, 4, 0, true};
        }
    size_t pos[3];
    OT_TRY(w_table(w, f, nf, link_from, pos));
    ot_named *order =
        write_order(c->props, c->n_props, sizeof *c->props, offsetof(otter_property, name), x->keep_order);
    if (!order) return OT_NOMEM();
    otter_status s = OTTER_OK;
    for (int k = 0; k < 3 && s == OTTER_OK; k++) {
        if (!count[k]) continue;
        size_t elems, j = 0;
        s = w_ref_vector(w, count[k], pos[at[k]], &elems);
        for (size_t i = 0; i < c->n_props && s == OTTER_OK; i++) {
            const otter_property *p = order[i].item;
            if ((int)p->type != k) continue;
            wfield pf[2];
            int np = 0, i_name, i_value = -1;
            uint32_t bits;
            memcpy(&bits, &p->f, 4);
            if (k == PB_INTS && p->i) pf[np++] = (wfield){PR_VALUE, 8, (uint64_t)p->i, false};
            i_name = np;
            pf[np++] = (wfield){PR_NAME, 4, 0, true};
            if (k == PB_FLOATS && bits) pf[np++] = (wfield){PR_VALUE, 4, bits, false};
            if (k == PB_STRINGS) {
                i_value = np;
                pf[np++] = (wfield){PR_VALUE, 4, 0, true};
            }
            size_t pp[2];
            s = w_table(w, pf, np, elems + 4 * j++, pp);
            if (s == OTTER_OK) s = w_string(w, p->name, strlen(p->name), pp[i_name]);
            if (s == OTTER_OK && i_value >= 0) s = w_string(w, p->s, strlen(p->s), pp[i_value]);
        }
    }
    ot_free(order);
    return s;
}

static void count_bytes(const otter_tensor *t, uint64_t *total, uint64_t *largest) {
    uint64_t n = t->dtype == OTTER_DTYPE_STRING ? 0 : otter_tensor_nbytes(t);
    *total += n;
    if (n > *largest) *largest = n;
}

/* Bytes of tensor data the save writes (parameters and, with groups, momentums) and the largest tensor's. */
static void state_bytes(const otter_checkpoint *c, bool groups, uint64_t *total, uint64_t *largest) {
    *total = *largest = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < c->params[k].n; i++) count_bytes(c->params[k].v[i], total, largest);
    for (size_t g = 0; groups && g < c->n_groups; g++)
        for (size_t j = 0; j < c->groups[g].n_states; j++)
            for (size_t m = 0; m < c->groups[g].states[j].n_momentums; m++)
                count_bytes(c->groups[g].states[j].momentums[m], total, largest);
}

static void wctx_free(wctx *x) {
    ot_free(x->w.b);
    ot_free(x->w.spans.v);
    ot_free(x->ext.v);
    memset(x, 0, sizeof *x);
}

/* The checkpoint into x. to_file: large tensor data stays where it is (spans, written from the tensors), and
 * past the threshold it goes to the external data file. */
static otter_status serialize(const otter_checkpoint *c, const otter_checkpoint_save_options *opts, bool to_file,
                              wctx *x) {
    memset(x, 0, sizeof *x);
    otter_checkpoint_save_options o = opts ? *opts : (otter_checkpoint_save_options){0};
    if (o.version == 0) o.version = OTTER_CHECKPOINT_VERSION;
    if (o.version != 1 && o.version != 2)
        return ot_error(OTTER_ERR_ARGUMENT, "otter writes checkpoint versions 1 and 2, not %d", o.version);
    if (o.version == 1 && c->nominal)
        return ot_error(OTTER_ERR_ARGUMENT, "a nominal state can't be written as version 1 (it has no nominal flag)");
    bool groups = !o.skip_optimizer_state && c->n_groups > 0;
    OT_TRY(ot_ckpt_validate(c, groups));
    uint64_t threshold = o.external_data_threshold ? o.external_data_threshold : OTTER_CHECKPOINT_EXTERNAL_THRESHOLD;
    uint64_t bytes = 0, largest = 0;
    if (!c->nominal) state_bytes(c, groups, &bytes, &largest);
    x->keep_order = o.keep_order;
    x->nominal = c->nominal;
    x->borrow = to_file;
    x->external = to_file && o.version == 2 && bytes >= threshold && largest >= EXTERNAL_MIN;
    if (bytes > FB_MAX_SIZE && !x->external) {
        const char *why = !to_file         ? "a checkpoint in memory is one flatbuffer"
                          : o.version == 1 ? "version 1 has no external data"
                                           : "the external data threshold is above it";
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "the state holds %llu bytes of tensors, more than the 2 GiB a flatbuffer can address (%s)",
                        (unsigned long long)bytes, why);
    }
    fbw *w = &x->w;
    otter_status s = w_u32(w, 0); /* root offset, linked below */
    if (s == OTTER_OK) s = w_bytes(w, "ODTC", 4);
    wfield f[4] = {{CK_VERSION, 4, (uint64_t)o.version, false}, {CK_MODULE_STATE, 4, 0, true}};
    int nf = 2, i_groups = -1, i_bag = -1;
    if (groups) i_groups = nf, f[nf++] = (wfield){CK_OPTIMIZER_GROUPS, 4, 0, true};
    if (c->n_props) i_bag = nf, f[nf++] = (wfield){CK_PROPERTY_BAG, 4, 0, true};
    size_t pos[4];
    if (s == OTTER_OK) s = w_table(w, f, nf, 0, pos);
    /* module state (has_external_data: some tensor, the largest at least, goes out) */
    bool has_ext = x->external;
    wfield mf[4] = {{MS_REQUIRES_GRAD, 4, 0, true}, {MS_FROZEN, 4, 0, true}};
    int nm = 2;
    if (c->nominal) mf[nm++] = (wfield){MS_IS_NOMINAL, 1, 1, false};
    if (has_ext) mf[nm++] = (wfield){MS_HAS_EXTERNAL_DATA, 1, 1, false};
    size_t mp[4];
    if (s == OTTER_OK) s = w_table(w, mf, nm, pos[1], mp);
    if (s == OTTER_OK) s = w_tensors(x, c->params[0].v, c->params[0].n, mp[0]);
    if (s == OTTER_OK) s = w_tensors(x, c->params[1].v, c->params[1].n, mp[1]);
    if (s == OTTER_OK && groups) {
        ot_named *order =
            write_order(c->groups, c->n_groups, sizeof *c->groups, offsetof(otter_optimizer_group, name), o.keep_order);
        size_t elems;
        if (!order) s = OT_NOMEM();
        if (s == OTTER_OK) s = w_ref_vector(w, c->n_groups, pos[i_groups], &elems);
        for (size_t i = 0; i < c->n_groups && s == OTTER_OK; i++) s = w_group(x, order[i].item, elems + 4 * i);
        ot_free(order);
    }
    if (s == OTTER_OK && c->n_props) s = w_properties(x, c, pos[i_bag]);
    if (s != OTTER_OK) wctx_free(x);
    return s;
}

otter_status otter_checkpoint_save_to_memory(const otter_checkpoint *c, const otter_checkpoint_save_options *opts,
                                             void **data, size_t *size) {
    if (!c || !data || !size) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_save_to_memory: NULL argument");
    *data = NULL;
    *size = 0;
    wctx x;
    OT_TRY(serialize(c, opts, false, &x));
    *data = x.w.b;
    *size = x.w.n;
    return OTTER_OK;
}

/* The bytes from 0 to total: held bytes (zeros when held is NULL) with each span's bytes at its position. */
static otter_status write_spans(FILE *f, const uint8_t *held, size_t total, const fb_spans *sp) {
    static const uint8_t zeros[64];
    size_t pos = 0, h = 0;
    for (size_t i = 0; i <= sp->n; i++) {
        size_t end = i < sp->n ? sp->v[i].pos : total;
        for (size_t k = end - pos; k > 0;) {
            size_t step = held ? k : (k < sizeof zeros ? k : sizeof zeros);
            if (fwrite(held ? held + h : zeros, 1, step, f) != step)
                return ot_error(OTTER_ERR_IO, "write failed: %s", strerror(errno));
            h += step, k -= step;
        }
        if (i == sp->n) break;
        if (sp->v[i].n && fwrite(sp->v[i].src, 1, sp->v[i].n, f) != sp->v[i].n)
            return ot_error(OTTER_ERR_IO, "write failed: %s", strerror(errno));
        pos = sp->v[i].pos + sp->v[i].n;
    }
    return OTTER_OK;
}

static otter_status write_main(FILE *f, void *user) {
    const wctx *x = user;
    return write_spans(f, x->w.b, x->w.n, &x->w.spans);
}

static otter_status write_external(FILE *f, void *user) {
    const wctx *x = user;
    return write_spans(f, NULL, x->ext_size, &x->ext);
}

char *ot_ckpt_external_path(const char *path) { return ot_sprintf("%s.data", path); }

otter_status otter_checkpoint_save_plan(const otter_checkpoint *c, const otter_checkpoint_save_options *opts,
                                        uint64_t *file_bytes, uint64_t *external_bytes) {
    if (!c) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_save_plan: NULL checkpoint");
    wctx x;
    OT_TRY(serialize(c, opts, true, &x));
    if (file_bytes) *file_bytes = x.w.n;
    if (external_bytes) *external_bytes = x.ext_size;
    wctx_free(&x);
    return OTTER_OK;
}

/* The external data file first, then the checkpoint that refers to it, each written to a temporary file,
 * synced and renamed over the old one: a crash leaves each file whole, old or new. A stale external data
 * file from an earlier save goes once the new checkpoint no longer refers to one. */
otter_status otter_checkpoint_save(const otter_checkpoint *c, const char *path,
                                   const otter_checkpoint_save_options *opts) {
    if (!c || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_checkpoint_save: NULL argument");
    char *data_path = ot_ckpt_external_path(path);
    if (!data_path) return OT_NOMEM();
    wctx x;
    otter_status s = serialize(c, opts, true, &x);
    if (s == OTTER_OK && x.ext.n) s = ot_write_atomic_with(data_path, write_external, &x);
    if (s == OTTER_OK) s = ot_write_atomic_with(path, write_main, &x);
    if (s == OTTER_OK && !x.ext.n && unlink(data_path) != 0 && errno != ENOENT)
        s = ot_error(OTTER_ERR_IO, "cannot remove the stale external data file '%s': %s", data_path, strerror(errno));
    wctx_free(&x);
    ot_free(data_path);
    if (s != OTTER_OK) ot_error_context(s, "checkpoint '%s': ", path);
    return s;
}
