/* Strided element copies for the data-movement kernels (strided.h). */
#include "runtime/ops/strided.h"

#include <string.h>

#include "core/core.h"

size_t ot_elem_size(otter_dtype t) { return t == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(t); }

/* Copy n elements; strings are duplicated. */
void ot_copy_elems(void *dst, const void *src, int64_t n, otter_dtype dt) {
    if (n <= 0) return;
    if (dt != OTTER_DTYPE_STRING) {
        memcpy(dst, src, (size_t)n * otter_dtype_size(dt));
        return;
    }
    otter_bytes *d = dst;
    const otter_bytes *s = src;
    for (int64_t i = 0; i < n; i++) {
        ot_free(d[i].data);
        d[i].data = ot_malloc(s[i].len + 1);
        if (d[i].data) {
            if (s[i].len) memcpy(d[i].data, s[i].data, s[i].len);
            d[i].data[s[i].len] = 0;
            d[i].len = s[i].len;
        } else {
            d[i].len = 0;
        }
    }
}

/* ---- strided copy ---------------------------------------------------------------------------- */

typedef struct sc_args {
    char *dst;
    const char *src;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    int64_t st[OTTER_MAX_RANK]; /* source strides in elements (may be negative or 0) */
    size_t es;
    otter_dtype dt;
    int64_t row_len; /* dims[rank-1] */
} sc_args;

/* Row r's source offset (elements), its index in the outer dims (all but the last) in idx. */
static int64_t sc_row_offset(const sc_args *a, int64_t r, int64_t *idx) {
    int64_t off = 0;
    for (int d = a->rank - 2; d >= 0; d--) {
        idx[d] = r % a->dims[d];
        off += idx[d] * a->st[d];
        r /= a->dims[d];
    }
    return off;
}

/* The next row's offset: idx counted up like an odometer, not two divisions a row (a
 * transformer's heads, [T, B*H, 32] to [B*H, T, 32], 4 MB from memory: 1.18-1.25 -> 1.08-1.13 ms). */
static inline int64_t sc_next_row(const sc_args *a, int64_t *idx, int64_t off) {
    for (int d = a->rank - 2; d >= 0; d--) {
        off += a->st[d];
        if (++idx[d] < a->dims[d]) return off;
        off -= idx[d] * a->st[d];
        idx[d] = 0;
    }
    return off;
}

static void sc_rows(void *arg, int64_t r0, int64_t r1) {
    sc_args *a = arg;
    int64_t n = a->row_len, s = a->st[a->rank - 1], idx[OTTER_MAX_RANK];
    int64_t off = sc_row_offset(a, r0, idx);
    for (int64_t r = r0; r < r1; r++, off = sc_next_row(a, idx, off)) {
        char *dst = a->dst + (size_t)(r * n) * a->es;
        const char *src = a->src + off * (int64_t)a->es;
        if (a->dt == OTTER_DTYPE_STRING) {
            for (int64_t i = 0; i < n; i++)
                ot_copy_elems(dst + (size_t)i * a->es, src + i * s * (int64_t)a->es, 1, a->dt);
        } else if (s == 1) {
            memcpy(dst, src, (size_t)n * a->es);
        } else if (a->es == 4) {
            uint32_t *d = (uint32_t *)(void *)dst;
            const uint32_t *sp = (const uint32_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else if (a->es == 8) {
            uint64_t *d = (uint64_t *)(void *)dst;
            const uint64_t *sp = (const uint64_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else if (a->es == 1) {
            for (int64_t i = 0; i < n; i++) dst[i] = src[i * s];
        } else if (a->es == 2) {
            uint16_t *d = (uint16_t *)(void *)dst;
            const uint16_t *sp = (const uint16_t *)(const void *)src;
            for (int64_t i = 0; i < n; i++) d[i] = sp[i * s];
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * a->es, src + i * s * (int64_t)a->es, a->es);
        }
    }
}

/* Rows of up to 1 KB whose source rows lie closer along the second-to-last outer dim (D2) than along
 * the last (D1): a transpose of rows, as a transformer's heads [T, B*H, d] -> [B*H, T, d]. Items are
 * blocks of SC_BLOCK indices of D2 (of one outer matrix), copied down D1: the block's source rows are
 * read as one stretch and its SC_BLOCK destination rows each written in order, where row by row in
 * the destination's order read d floats a page apart ([128, 256, 32], 4 MB from memory: 1.17-1.21 ->
 * 0.72-0.80 ms, a memcpy of 4 MB 0.66). Longer rows are stretches already. */
#define SC_BLOCK 8
static void sc_row_blocks(void *arg, int64_t i0, int64_t i1) {
    sc_args *a = arg;
    const int k = a->rank;
    const int64_t n = a->row_len, D1 = a->dims[k - 2], D2 = a->dims[k - 3], s1 = a->st[k - 2], s2 = a->st[k - 3];
    const int64_t blocks = (D2 + SC_BLOCK - 1) / SC_BLOCK, es = (int64_t)a->es;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t m = i / blocks, b0 = i % blocks * SC_BLOCK, b1 = b0 + SC_BLOCK < D2 ? b0 + SC_BLOCK : D2;
        int64_t off = 0, q = m;
        for (int d = k - 4; d >= 0; d--) {
            off += (q % a->dims[d]) * a->st[d];
            q /= a->dims[d];
        }
        char *dst = a->dst + m * D2 * D1 * n * es;
        const char *src = a->src + off * es;
        for (int64_t j = 0; j < D1; j++)
            for (int64_t b = b0; b < b1; b++)
                memcpy(dst + (b * D1 + j) * n * es, src + (b * s2 + j * s1) * es, (size_t)(n * es));
    }
}

/* Tiled transpose of the last two dims: output [.., R, C] where the source has stride 1 along R
 * (st[rank-2] == 1) and st[rank-1] along C. Items are stripes of SC_TILE output rows of the outer
 * matrices (row_tiles a matrix), so one big matrix splits over the threads too: output rows copied
 * one by one read a source line and a page per element (a transformer's K^T, [128, 8192] to
 * [8192, 128], ran at 3.5 GB/s). */
#define SC_TILE 32
static void sc_tiles(void *arg, int64_t i0, int64_t i1) {
    sc_args *a = arg;
    const int64_t R = a->dims[a->rank - 2], C = a->dims[a->rank - 1], sc = a->st[a->rank - 1];
    const int64_t row_tiles = (R + SC_TILE - 1) / SC_TILE;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t m = i / row_tiles, r0 = i % row_tiles * SC_TILE, r1 = r0 + SC_TILE < R ? r0 + SC_TILE : R;
        int64_t off = 0, q = m;
        for (int d = a->rank - 3; d >= 0; d--) {
            off += (q % a->dims[d]) * a->st[d];
            q /= a->dims[d];
        }
        char *dst = a->dst + (size_t)(m * R * C) * a->es;
        const char *src = a->src + off * (int64_t)a->es;
        for (int64_t c0 = 0; c0 < C; c0 += SC_TILE) {
            const int64_t c1 = c0 + SC_TILE < C ? c0 + SC_TILE : C;
            if (a->es == 4) {
                uint32_t *d = (uint32_t *)(void *)dst;
                const uint32_t *sp = (const uint32_t *)(const void *)src;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++) d[r * C + c] = sp[r + c * sc];
            } else {
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++)
                        memcpy(dst + (size_t)(r * C + c) * a->es, src + (r + c * sc) * (int64_t)a->es, a->es);
            }
        }
    }
}

/* dst (contiguous, shape dims) [i] = src[sum i_d * st_d]. ctx may be NULL (one thread). */
void ot_copy_strided(const ot_kernel_ctx *ctx, void *dst, const void *src, otter_dtype dt, int rank,
                     const int64_t *dims, const int64_t *st) {
    sc_args a = {.dst = dst, .src = src, .es = ot_elem_size(dt), .dt = dt, .rank = 0};
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) numel *= dims[d];
    if (numel == 0) return;
    /* drop size-1 dims, merge dims contiguous in the source */
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        if (a.rank > 0 && a.st[a.rank - 1] == st[d] * dims[d]) {
            a.dims[a.rank - 1] *= dims[d];
            a.st[a.rank - 1] = st[d];
            continue;
        }
        a.dims[a.rank] = dims[d], a.st[a.rank] = st[d];
        a.rank++;
    }
    if (a.rank == 0) a.dims[0] = 1, a.st[0] = 1, a.rank = 1;
    a.row_len = a.dims[a.rank - 1];
    if (a.rank >= 2 && a.st[a.rank - 2] == 1 && a.st[a.rank - 1] != 1 && dt != OTTER_DTYPE_STRING &&
        a.dims[a.rank - 2] >= 8) {
        const int64_t R = a.dims[a.rank - 2], mats = numel / (R * a.row_len);
        const int64_t items = mats * ((R + SC_TILE - 1) / SC_TILE);
        if (ctx)
            ot_parallel_for(ctx, items, 1 + 32768 / (SC_TILE * a.row_len), sc_tiles, &a);
        else
            sc_tiles(&a, 0, items);
        return;
    }
    if (a.rank >= 3 && a.st[a.rank - 1] == 1 && dt != OTTER_DTYPE_STRING && a.st[a.rank - 3] >= 0 &&
        a.st[a.rank - 3] < a.st[a.rank - 2] && a.row_len * (int64_t)a.es <= 1024) {
        const int64_t items = numel / (a.dims[a.rank - 3] * a.dims[a.rank - 2] * a.row_len) *
                              ((a.dims[a.rank - 3] + SC_BLOCK - 1) / SC_BLOCK);
        if (ctx)
            ot_parallel_for(ctx, items, 1 + 32768 / (SC_BLOCK * a.dims[a.rank - 2] * a.row_len), sc_row_blocks, &a);
        else
            sc_row_blocks(&a, 0, items);
        return;
    }
    int64_t rows = numel / a.row_len;
    if (ctx && dt != OTTER_DTYPE_STRING)
        ot_parallel_for(ctx, rows, 1 + 32768 / (a.row_len + 1), sc_rows, &a);
    else
        sc_rows(&a, 0, rows);
}

void ot_contiguous_strides(int rank, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) st[d] = s, s *= dims[d];
}
