/* IDX files (the MNIST format), raw or gzip'd.
 *
 * Layout: a 4-byte magic 00 00 <type> <ndim> (type 0x08: unsigned bytes), ndim big-endian uint32 dimensions,
 * then the elements in row-major order. MNIST labels are 0x00000801 [N], images 0x00000803 [N, rows, cols].
 * Every header field is checked against the file's size before anything is allocated from it. Offsets in
 * messages count bytes of the (decompressed) IDX stream. */
#include <string.h>
#ifndef OTTER_NO_ZLIB
#include <zlib.h>
#endif

#include "data/data_internal.h"

/* ---- gzip ---- */

#ifdef OTTER_NO_ZLIB
/* The WebAssembly build has no zlib (tools/build-web.sh). */
static otter_status gunzip(const char *path, const uint8_t *in, size_t n, uint8_t **out, size_t *out_size) {
    return ot_error(OTTER_ERR_UNSUPPORTED, "%s: gzip'd files are not readable in the WebAssembly build (no zlib)",
                    path);
}
#else
static otter_status gunzip(const char *path, const uint8_t *in, size_t n, uint8_t **out, size_t *out_size) {
    /* The trailer's ISIZE (size mod 2^32 of the last member) is a hint; deflate expands at most ~1032x. */
    size_t cap = 1 << 16;
    if (n >= 18) {
        const uint8_t *t = in + n - 4;
        size_t hint = (size_t)t[0] | (size_t)t[1] << 8 | (size_t)t[2] << 16 | (size_t)t[3] << 24;
        size_t limit = n <= SIZE_MAX / 1032 ? n * 1032 : SIZE_MAX;
        if (hint + 1 > cap && hint < limit) cap = hint + 1;
    }
    uint8_t *buf = ot_malloc(cap);
    if (!buf) return OT_NOMEM();
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        ot_free(buf);
        return ot_error(OTTER_ERR_NOMEM, "%s: zlib could not start", path);
    }
    size_t in_pos = 0, len = 0;
    otter_status s = OTTER_OK;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap * 2;
            uint8_t *nb = ncap > cap ? ot_realloc(buf, ncap) : NULL;
            if (!nb) {
                s = OT_NOMEM();
                break;
            }
            buf = nb;
            cap = ncap;
        }
        size_t in_chunk = n - in_pos > UINT32_MAX ? UINT32_MAX : n - in_pos;
        size_t out_chunk = cap - len > UINT32_MAX ? UINT32_MAX : cap - len;
        z.next_in = (Bytef *)(uintptr_t)(in + in_pos);
        z.avail_in = (uInt)in_chunk;
        z.next_out = buf + len;
        z.avail_out = (uInt)out_chunk;
        int r = inflate(&z, Z_NO_FLUSH);
        in_pos += in_chunk - z.avail_in;
        len += out_chunk - z.avail_out;
        if (r == Z_STREAM_END) {
            if (in_pos == n) break;
            if (n - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b) { /* another member */
                inflateReset(&z);
                continue;
            }
            s = ot_error(OTTER_ERR_INVALID, "%s: %zu bytes of garbage after the gzip data at byte %zu", path,
                         n - in_pos, in_pos);
            break;
        }
        if (r == Z_OK) continue;
        if (r == Z_BUF_ERROR && z.avail_out == 0) continue; /* output full: grow */
        if (r == Z_BUF_ERROR && in_pos == n) {
            s = ot_error(OTTER_ERR_INVALID, "%s: truncated gzip data: the file ends at byte %zu inside the stream",
                         path, n);
            break;
        }
        if (r == Z_MEM_ERROR) {
            s = OT_NOMEM();
            break;
        }
        s = ot_error(OTTER_ERR_INVALID, "%s: corrupt gzip data near byte %zu: %s", path, in_pos,
                     z.msg ? z.msg : "inflate failed");
        break;
    }
    inflateEnd(&z);
    if (s != OTTER_OK) {
        ot_free(buf);
        return s;
    }
    *out = buf;
    *out_size = len;
    return OTTER_OK;
}
#endif /* OTTER_NO_ZLIB */

otter_status ot_read_maybe_gzip(const char *path, uint8_t **data, size_t *size, bool *gz) {
    void *raw = NULL;
    size_t n = 0;
    *data = NULL;
    *size = 0;
    *gz = false;
    OT_TRY(ot_read_file(path, &raw, &n));
    const uint8_t *b = raw;
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
        *gz = true;
        otter_status s = gunzip(path, b, n, data, size);
        ot_free(raw);
        return s;
    }
    *data = raw;
    *size = n;
    return OTTER_OK;
}

/* ---- IDX ---- */

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Parse and check an IDX header: magic 00 00 08 <ndim>; returns the header size and the dims. */
static otter_status idx_header(const char *path, bool gz, const uint8_t *d, size_t n, int want_ndim, const char *what,
                               uint32_t *dims, size_t *header) {
    const char *z = gz ? " (gzip; offsets in the decompressed data)" : "";
    uint32_t want = 0x0800u | (uint32_t)want_ndim;
    if (n < 4)
        return ot_error(OTTER_ERR_INVALID, "%s%s: truncated: %zu bytes, too short for the 4-byte IDX magic at offset 0",
                        path, z, n);
    uint32_t magic = be32(d);
    if (magic != want)
        return ot_error(OTTER_ERR_INVALID, "%s%s: offset 0: wrong magic 0x%08x (expected 0x%08x, an IDX %s file)", path,
                        z, magic, want, what);
    size_t h = 4 + 4 * (size_t)want_ndim;
    if (n < h)
        return ot_error(OTTER_ERR_INVALID, "%s%s: truncated: the header needs %zu bytes, the file ends at offset %zu",
                        path, z, h, n);
    size_t total = 1;
    for (int i = 0; i < want_ndim; i++) {
        dims[i] = be32(d + 4 + 4 * i);
        if (dims[i] == 0 && i > 0)
            return ot_error(OTTER_ERR_INVALID, "%s%s: offset %d: dimension %d is 0", path, z, 4 + 4 * i, i);
        if (!ot_mul_size(total, dims[i], &total))
            return ot_error(OTTER_ERR_INVALID, "%s%s: offset 4: the dimensions overflow", path, z);
    }
    size_t rec = total / (dims[0] ? dims[0] : 1);
    if (dims[0] == 0) rec = 1;
    if (n - h < total) {
        size_t have = (n - h) / rec;
        return ot_error(OTTER_ERR_INVALID,
                        "%s%s: truncated: the header declares %u %ss (%zu bytes from offset %zu) but the file ends at "
                        "offset %zu, inside record %zu",
                        path, z, dims[0], what, total, h, n, have);
    }
    if (n - h > total)
        return ot_error(OTTER_ERR_INVALID, "%s%s: offset %zu: %zu bytes after the %u %ss the header declares", path, z,
                        h + total, n - h - total, dims[0], what);
    *header = h;
    return OTTER_OK;
}

otter_status ot_idx_load_pair(ot_data_raw *raw, const char *images, const char *labels, int64_t ncls) {
    uint8_t *img = NULL, *lab = NULL;
    size_t in = 0, ln = 0;
    bool igz = false, lgz = false;
    uint32_t idims[3] = {0}, ldims[1] = {0};
    size_t ih = 0, lh = 0;
    otter_status s = ot_read_maybe_gzip(images, &img, &in, &igz);
    if (s == OTTER_OK) s = idx_header(images, igz, img, in, 3, "image", idims, &ih);
    if (s == OTTER_OK) s = ot_read_maybe_gzip(labels, &lab, &ln, &lgz);
    if (s == OTTER_OK) s = idx_header(labels, lgz, lab, ln, 1, "label", ldims, &lh);
    if (s == OTTER_OK && idims[0] != ldims[0])
        s = ot_error(OTTER_ERR_INVALID, "%s holds %u images but %s holds %u labels", images, idims[0], labels,
                     ldims[0]);
    if (s != OTTER_OK) goto done;
    int64_t n = idims[0];
    raw->labels = ot_malloc((size_t)n * sizeof(int64_t) + 1);
    if (!raw->labels) {
        s = OT_NOMEM();
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        uint8_t l = lab[lh + (size_t)i];
        if ((int64_t)l >= ncls) {
            s = ot_error(OTTER_ERR_INVALID, "%s%s: record %lld (offset %zu): label %u is out of range for %lld classes",
                         labels, lgz ? " (gzip; offsets in the decompressed data)" : "", (long long)i, lh + (size_t)i,
                         l, (long long)ncls);
            goto done;
        }
        raw->labels[i] = l;
    }
    /* Keep the image buffer, pixels moved to its start. */
    size_t pixels = in - ih;
    memmove(img, img + ih, pixels);
    raw->x = img;
    img = NULL;
    raw->u8 = true;
    raw->n = n;
    raw->rank = 3;
    raw->dims[0] = 1;
    raw->dims[1] = idims[1];
    raw->dims[2] = idims[2];
    raw->image = true;
    raw->flat_default = true;
    raw->num_classes = ncls;
done:
    ot_free(img);
    ot_free(lab);
    return s;
}
