/* The federated wire format (see protocol.h): fixed 64-byte header + little-endian float32 values, and the
 * layout encoding sent at registration. Every field of a received message is checked before a caller may
 * use it. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "fl/protocol.h"

static bool host_is_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- layout ------------------------------------------------------------------------------------------ */

/* Bytes of one parameter's entry. */
static size_t entry_size(const otter_fl_param *p) { return 2 + strlen(p->name) + 2 + 8 * (size_t)p->rank; }

static size_t entry_write(const otter_fl_param *p, uint8_t *o) {
    size_t len = strlen(p->name);
    put_u16(o, (uint16_t)len);
    memcpy(o + 2, p->name, len);
    o[2 + len] = (uint8_t)p->dtype;
    o[3 + len] = (uint8_t)p->rank;
    for (int d = 0; d < p->rank; d++) put_u64(o + 4 + len + 8 * (size_t)d, (uint64_t)p->dims[d]);
    return entry_size(p);
}

uint64_t ot_fl_layout_hash(const otter_fl_layout *l) {
    uint64_t h = OT_FNV1A_OFFSET;
    uint8_t buf[2 + 65535 + 2 + 8 * OTTER_MAX_RANK];
    for (size_t i = 0; i < otter_fl_layout_count(l); i++) {
        const otter_fl_param *p = otter_fl_layout_at(l, i);
        if (strlen(p->name) > 65535) continue; /* not encodable; encode refuses it */
        size_t k = entry_write(p, buf);
        h = ot_fnv1a(h, buf, k);
    }
    return h;
}

otter_status ot_fl_layout_encode(const otter_fl_layout *l, void **buf, size_t *size) {
    size_t n = otter_fl_layout_count(l), total = 12;
    for (size_t i = 0; i < n; i++) {
        const otter_fl_param *p = otter_fl_layout_at(l, i);
        if (strlen(p->name) > 65535) return ot_error(OTTER_ERR_ARGUMENT, "parameter name longer than 65535 bytes");
        total += entry_size(p);
    }
    if (n > UINT32_MAX) return ot_error(OTTER_ERR_ARGUMENT, "too many parameters (%zu)", n);
    uint8_t *o = ot_malloc(total);
    if (!o) return OT_NOMEM();
    memcpy(o, OTTER_FL_MAGIC, 4);
    put_u16(o + 4, OTTER_FL_VERSION);
    put_u16(o + 6, OTTER_FL_MSG_LAYOUT);
    put_u32(o + 8, (uint32_t)n);
    size_t at = 12;
    for (size_t i = 0; i < n; i++) at += entry_write(otter_fl_layout_at(l, i), o + at);
    OT_ASSERT(at == total);
    *buf = o, *size = total;
    return OTTER_OK;
}

otter_status ot_fl_layout_decode(const void *buf, size_t size, otter_fl_layout **out) {
    const uint8_t *b = buf;
    if (size < 12) return ot_error(OTTER_ERR_INVALID, "layout: %zu bytes, shorter than its 12-byte header", size);
    if (memcmp(b, OTTER_FL_MAGIC, 4) != 0) return ot_error(OTTER_ERR_INVALID, "layout: bad magic (not \"OTFL\")");
    if (get_u16(b + 4) != OTTER_FL_VERSION)
        return ot_error(OTTER_ERR_INVALID, "layout: version %u (this build reads %d)", get_u16(b + 4),
                        OTTER_FL_VERSION);
    if (get_u16(b + 6) != OTTER_FL_MSG_LAYOUT)
        return ot_error(OTTER_ERR_INVALID, "layout: message kind %u, expected %d", get_u16(b + 6), OTTER_FL_MSG_LAYOUT);
    uint32_t n = get_u32(b + 8);
    /* each entry takes at least 5 bytes (a 1-byte name): bound n by the size before allocating */
    if (n > (size - 12) / 5)
        return ot_error(OTTER_ERR_INVALID, "layout: %u parameters can't fit in %zu bytes", n, size);
    otter_fl_param *ps = ot_calloc(n ? n : 1, sizeof *ps);
    char **names = ot_calloc(n ? n : 1, sizeof *names);
    otter_status st = OTTER_OK;
    if (!ps || !names) {
        st = OT_NOMEM();
        goto done;
    }
    size_t at = 12;
    for (uint32_t i = 0; i < n; i++) {
        if (size - at < 2) {
            st = ot_error(OTTER_ERR_INVALID, "layout: truncated at parameter %u", i);
            goto done;
        }
        size_t len = get_u16(b + at);
        if (len == 0 || size - at - 2 < len + 2) {
            st = ot_error(OTTER_ERR_INVALID, "layout: parameter %u: bad or truncated name", i);
            goto done;
        }
        names[i] = ot_strndup((const char *)b + at + 2, len);
        if (!names[i]) {
            st = OT_NOMEM();
            goto done;
        }
        if (strlen(names[i]) != len) {
            st = ot_error(OTTER_ERR_INVALID, "layout: parameter %u: name holds a NUL byte", i);
            goto done;
        }
        int dtype = b[at + 2 + len], rank = b[at + 3 + len];
        at += 4 + len;
        if (rank > OTTER_MAX_RANK || size - at < 8 * (size_t)rank) {
            st = ot_error(OTTER_ERR_INVALID, "layout: parameter '%s': rank %d truncated or above %d", names[i], rank,
                          OTTER_MAX_RANK);
            goto done;
        }
        ps[i].name = names[i];
        ps[i].dtype = (otter_dtype)dtype;
        ps[i].rank = rank;
        for (int d = 0; d < rank; d++) {
            uint64_t v = get_u64(b + at + 8 * (size_t)d);
            if (v > (uint64_t)INT64_MAX) {
                st = ot_error(OTTER_ERR_INVALID, "layout: parameter '%s': negative dimension", names[i]);
                goto done;
            }
            ps[i].dims[d] = (int64_t)v;
        }
        at += 8 * (size_t)rank;
    }
    if (at != size) {
        st = ot_error(OTTER_ERR_INVALID, "layout: %zu trailing bytes", size - at);
        goto done;
    }
    st = otter_fl_layout_create(out, n, ps);
    if (st != OTTER_OK) ot_error_context(st, "layout: ");
done:
    for (uint32_t i = 0; names && i < n; i++) ot_free(names[i]);
    ot_free(names);
    ot_free(ps);
    return st;
}

/* ---- messages ---------------------------------------------------------------------------------------- */

size_t ot_fl_msg_size(size_t n) { return OTTER_FL_HEADER_SIZE + 4 * n; }

void ot_fl_msg_encode(const ot_fl_msg_header *h, const float *values, void *buf) {
    uint8_t *o = buf;
    memset(o, 0, OTTER_FL_HEADER_SIZE);
    memcpy(o, OTTER_FL_MAGIC, 4);
    put_u16(o + 4, OTTER_FL_VERSION);
    put_u16(o + 6, (uint16_t)h->kind);
    put_u64(o + 8, (uint64_t)h->round);
    put_u64(o + 16, (uint64_t)h->num_examples);
    uint64_t lb = 0;
    if (h->has_loss) memcpy(&lb, &h->loss, 8);
    put_u64(o + 24, lb);
    put_u64(o + 32, h->n);
    put_u64(o + 40, h->layout_hash);
    put_u32(o + 48, h->has_loss ? 1u : 0u);
    if (host_is_le()) {
        memcpy(o + OTTER_FL_HEADER_SIZE, values, 4 * h->n);
    } else {
        for (size_t i = 0; i < h->n; i++) {
            uint32_t u;
            memcpy(&u, &values[i], 4);
            put_u32(o + OTTER_FL_HEADER_SIZE + 4 * i, u);
        }
    }
}

otter_status ot_fl_msg_encode_alloc(const ot_fl_msg_header *h, const float *values, void **buf, size_t *size) {
    if (h->n > (SIZE_MAX - OTTER_FL_HEADER_SIZE) / 4) return ot_error(OTTER_ERR_ARGUMENT, "message too large");
    size_t sz = ot_fl_msg_size(h->n);
    void *o = ot_malloc(sz);
    if (!o) return OT_NOMEM();
    ot_fl_msg_encode(h, values, o);
    *buf = o, *size = sz;
    return OTTER_OK;
}

void ot_fl_msg_values(const void *buf, size_t n, float *out) {
    const uint8_t *v = (const uint8_t *)buf + OTTER_FL_HEADER_SIZE;
    if (host_is_le()) {
        memcpy(out, v, 4 * n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t u = get_u32(v + 4 * i);
        memcpy(&out[i], &u, 4);
    }
}

static const char *kind_name(unsigned k) {
    return k == OTTER_FL_MSG_PARAMS ? "params" : k == OTTER_FL_MSG_UPDATE ? "update" : "layout";
}

otter_status ot_fl_msg_decode(const void *buf, size_t size, const ot_fl_msg_expect *want, ot_fl_msg_header *h,
                              const float **values, float *scratch) {
    const uint8_t *b = buf;
    const char *what = kind_name(want->kind);
    if (size < OTTER_FL_HEADER_SIZE)
        return ot_error(OTTER_ERR_INVALID, "%s: truncated: %zu bytes, shorter than the %d-byte header", what, size,
                        OTTER_FL_HEADER_SIZE);
    if (memcmp(b, OTTER_FL_MAGIC, 4) != 0) return ot_error(OTTER_ERR_INVALID, "%s: bad magic (not \"OTFL\")", what);
    if (get_u16(b + 4) != OTTER_FL_VERSION)
        return ot_error(OTTER_ERR_INVALID, "%s: version %u (this build speaks %d)", what, get_u16(b + 4),
                        OTTER_FL_VERSION);
    if (get_u16(b + 6) != want->kind)
        return ot_error(OTTER_ERR_INVALID, "%s: message kind %u, expected %d (%s)", what, get_u16(b + 6), want->kind,
                        what);
    uint32_t flags = get_u32(b + 48);
    if (flags & ~1u) return ot_error(OTTER_ERR_INVALID, "%s: unknown flags 0x%x", what, flags);
    for (int i = 52; i < OTTER_FL_HEADER_SIZE; i++)
        if (b[i]) return ot_error(OTTER_ERR_INVALID, "%s: reserved header byte %d is not 0", what, i);
    ot_fl_msg_header m = {.kind = want->kind,
                          .round = (int64_t)get_u64(b + 8),
                          .num_examples = (int64_t)get_u64(b + 16),
                          .has_loss = flags & 1u,
                          .n = get_u64(b + 32),
                          .layout_hash = get_u64(b + 40)};
    uint64_t lb = get_u64(b + 24);
    memcpy(&m.loss, &lb, 8);
    if (!m.has_loss) m.loss = 0;
    if (m.n != want->n)
        return ot_error(OTTER_ERR_INVALID, "%s: wrong shape: %llu values, the global model has %llu", what,
                        (unsigned long long)m.n, (unsigned long long)want->n);
    if (size != ot_fl_msg_size((size_t)m.n))
        return ot_error(OTTER_ERR_INVALID, "%s: %s: %zu bytes, expected %zu (64-byte header + %llu float32)", what,
                        size < ot_fl_msg_size((size_t)m.n) ? "truncated" : "trailing bytes", size,
                        ot_fl_msg_size((size_t)m.n), (unsigned long long)m.n);
    if (m.layout_hash != want->layout_hash)
        return ot_error(OTTER_ERR_INVALID,
                        "%s: wrong shape: layout hash %016llx differs from the global layout's %016llx (other "
                        "parameter names, shapes or order)",
                        what, (unsigned long long)m.layout_hash, (unsigned long long)want->layout_hash);
    if (m.round != want->round)
        return ot_error(OTTER_ERR_INVALID, "%s: wrong round %lld (the open round is %lld)", what, (long long)m.round,
                        (long long)want->round);
    if (want->kind == OTTER_FL_MSG_UPDATE) {
        if (m.num_examples <= 0)
            return ot_error(OTTER_ERR_INVALID, "%s: num_examples %lld (must be > 0)", what, (long long)m.num_examples);
        if (m.has_loss && !isfinite(m.loss)) return ot_error(OTTER_ERR_INVALID, "%s: loss is %g", what, m.loss);
    } else if (m.num_examples != 0) {
        return ot_error(OTTER_ERR_INVALID, "%s: num_examples %lld (must be 0)", what, (long long)m.num_examples);
    }
    const float *v;
    if (host_is_le()) {
        v = (const float *)(const void *)(b + OTTER_FL_HEADER_SIZE);
    } else {
        OT_ASSERT(scratch != NULL);
        ot_fl_msg_values(buf, (size_t)m.n, scratch);
        v = scratch;
    }
    /* finite check: an exponent of all ones is NaN or Inf. Blocks of 4096 values are tested with a branch-free
     * OR (vectorized); only a block holding a bad value is searched for it. */
    const uint8_t *raw = b + OTTER_FL_HEADER_SIZE;
    const bool le = host_is_le();
    for (size_t i0 = 0; i0 < (size_t)m.n; i0 += 4096) {
        size_t i1 = (size_t)m.n - i0 < 4096 ? (size_t)m.n : i0 + 4096;
        uint32_t any = 0;
        if (le) {
            for (size_t i = i0; i < i1; i++) {
                uint32_t u;
                memcpy(&u, raw + 4 * i, 4);
                any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
            }
        } else {
            any = 1; /* big-endian hosts search every block */
        }
        if (!any) continue;
        for (size_t i = i0; i < i1; i++) {
            uint32_t u = get_u32(raw + 4 * i);
            if ((u & 0x7f800000u) != 0x7f800000u) continue;
            const char *bad = (u & 0x007fffffu) ? "NaN" : "Inf";
            for (size_t p = 0; want->layout && p < otter_fl_layout_count(want->layout); p++) {
                size_t off = otter_fl_layout_offset(want->layout, p),
                       next = p + 1 < otter_fl_layout_count(want->layout) ? otter_fl_layout_offset(want->layout, p + 1)
                                                                          : (size_t)m.n;
                if (i >= off && i < next)
                    return ot_error(OTTER_ERR_INVALID, "%s: parameter '%s' element %zu is %s (value %zu)", what,
                                    otter_fl_layout_at(want->layout, p)->name, i - off, bad, i);
            }
            return ot_error(OTTER_ERR_INVALID, "%s: value %zu is %s", what, i, bad);
        }
    }
    *h = m;
    *values = v;
    return OTTER_OK;
}
