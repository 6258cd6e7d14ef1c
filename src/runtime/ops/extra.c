/* Operators outside the main families: detection (NonMaxSuppression, RoiAlign), text
 * (TfIdfVectorizer), Unique, signal processing (HannWindow, HammingWindow,
 * BlackmanWindow, DFT, STFT, MelWeightMatrix), MeanVarianceNormalization and Det.
 *
 * These are reference-grade kernels: plain loops in double where precision matters, written to
 * follow ONNX's reference implementation (and ONNX Runtime's where the reference copies it),
 * not tuned for speed. */
#include <math.h>

#include "runtime/ops/kernels.h"
#include "runtime/ops/broadcast.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static bool is_real(otter_dtype t) { return otter_dtype_is_float(t); }

/* A one-element input as int64 / double; def when omitted. */
static otter_status scalar_i64(const ot_kernel_ctx *ctx, size_t i, int64_t def, int64_t *v) {
    const otter_tensor *t = ot_ctx_input(ctx, i);
    *v = def;
    if (!t) return OTTER_OK;
    if (otter_tensor_numel(t) != 1 || (otter_dtype_is_float(t->dtype) || t->dtype == OTTER_DTYPE_STRING))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a single integer", i,
                            ot_ctx_input_name(ctx, i));
    *v = ot_get_i64(t->data, t->dtype, 0);
    return OTTER_OK;
}

static otter_status scalar_f64(const ot_kernel_ctx *ctx, size_t i, double def, double *v) {
    const otter_tensor *t = ot_ctx_input(ctx, i);
    *v = def;
    if (!t) return OTTER_OK;
    if (otter_tensor_numel(t) != 1 || t->dtype == OTTER_DTYPE_STRING)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be a single number", i,
                            ot_ctx_input_name(ctx, i));
    *v = ot_get_f64(t->data, t->dtype, 0);
    return OTTER_OK;
}

/* Merge sort of int64 keys with a comparison that takes a context (stable). */
typedef int (*cmp_fn)(void *arg, int64_t a, int64_t b);
static void merge_sort(int64_t *v, int64_t *tmp, int64_t n, cmp_fn cmp, void *arg) {
    if (n < 2) return;
    int64_t h = n / 2;
    merge_sort(v, tmp, h, cmp, arg);
    merge_sort(v + h, tmp, n - h, cmp, arg);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp(arg, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

/* ---- NonMaxSuppression --------------------------------------------------------------------- */

typedef struct nms_box {
    float x1, y1, x2, y2, area;
} nms_box;

static nms_box nms_read(const float *b, bool center) {
    nms_box r;
    if (center) {
        r.x1 = b[0] - b[2] / 2, r.x2 = b[0] + b[2] / 2;
        r.y1 = b[1] - b[3] / 2, r.y2 = b[1] + b[3] / 2;
    } else { /* [y1, x1, y2, x2], any diagonal */
        r.y1 = fminf(b[0], b[2]), r.y2 = fmaxf(b[0], b[2]);
        r.x1 = fminf(b[1], b[3]), r.x2 = fmaxf(b[1], b[3]);
    }
    r.area = (r.x2 - r.x1) * (r.y2 - r.y1);
    return r;
}

/* As ONNX Runtime: boxes of zero area never suppress. */
static bool nms_suppress(const nms_box *a, const nms_box *b, float iou_threshold) {
    float ix1 = fmaxf(a->x1, b->x1), iy1 = fmaxf(a->y1, b->y1);
    float ix2 = fminf(a->x2, b->x2), iy2 = fminf(a->y2, b->y2);
    if (ix2 <= ix1 || iy2 <= iy1) return false;
    float inter = (ix2 - ix1) * (iy2 - iy1), uni = a->area + b->area - inter;
    if (a->area <= 0 || b->area <= 0 || uni <= 0) return false;
    return inter / uni > iou_threshold;
}

typedef struct nms_sort {
    const float *scores;
} nms_sort;

static int nms_cmp(void *arg, int64_t a, int64_t b) {
    const float *s = ((nms_sort *)arg)->scores;
    return s[a] > s[b] ? -1 : s[a] < s[b] ? 1 : 0; /* stable: equal scores keep index order */
}

otter_status ot_kernel_nms(ot_kernel_ctx *ctx) {
    const otter_tensor *boxes, *scores;
    OT_TRY(ot_ctx_need_input(ctx, 0, &boxes));
    OT_TRY(ot_ctx_need_input(ctx, 1, &scores));
    if (boxes->dtype != OTTER_DTYPE_FLOAT) return ot_ctx_bad_type(ctx, 0, boxes->dtype);
    if (scores->dtype != OTTER_DTYPE_FLOAT) return ot_ctx_bad_type(ctx, 1, scores->dtype);
    if (boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 || scores->dims[0] != boxes->dims[0] ||
        scores->dims[2] != boxes->dims[1]) {
        char a[96], b[96];
        return ot_ctx_error(
            ctx, OTTER_ERR_INVALID, "boxes %s and scores %s must be [batches, boxes, 4] and [batches, classes, boxes]",
            ot_shape_str(a, sizeof a, boxes->rank, boxes->dims), ot_shape_str(b, sizeof b, scores->rank, scores->dims));
    }
    int64_t max_out;
    double iou, score_thr;
    OT_TRY(scalar_i64(ctx, 2, 0, &max_out));
    OT_TRY(scalar_f64(ctx, 3, 0, &iou));
    OT_TRY(scalar_f64(ctx, 4, -INFINITY, &score_thr));
    int64_t center;
    OT_TRY(ot_ctx_attr_int(ctx, "center_point_box", &center));
    const int64_t B = boxes->dims[0], C = scores->dims[1], S = boxes->dims[1];
    if (iou < 0 || iou > 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "iou_threshold %g is outside [0, 1]", iou);
    int64_t per_class = max_out < 0 ? 0 : max_out < S ? max_out : S;
    int64_t cap = B * C * per_class;
    int64_t *sel = ot_ctx_scratch(ctx, (size_t)(cap * 3 + 1) * sizeof *sel);
    int64_t *order = ot_ctx_scratch(ctx, (size_t)(2 * S + 1) * sizeof *order);
    nms_box *bx = ot_ctx_scratch(ctx, (size_t)(S + 1) * sizeof *bx);
    int64_t *kept = ot_ctx_scratch(ctx, (size_t)(S + 1) * sizeof *kept);
    if (!sel || !order || !bx || !kept) return OTTER_ERR_NOMEM;
    int64_t n_sel = 0;
    for (int64_t b = 0; b < B && per_class > 0; b++) {
        const float *bd = (const float *)boxes->data + b * S * 4;
        for (int64_t i = 0; i < S; i++) bx[i] = nms_read(bd + i * 4, center);
        for (int64_t c = 0; c < C; c++) {
            const float *sc = (const float *)scores->data + (b * C + c) * S;
            int64_t n = 0;
            for (int64_t i = 0; i < S; i++)
                if (sc[i] > score_thr) order[n++] = i;
            nms_sort arg = {sc};
            merge_sort(order, order + S, n, nms_cmp, &arg);
            int64_t n_kept = 0;
            for (int64_t k = 0; k < n && n_kept < per_class; k++) {
                int64_t i = order[k];
                bool drop = false;
                for (int64_t j = 0; j < n_kept && !drop; j++) drop = nms_suppress(&bx[kept[j]], &bx[i], (float)iou);
                if (drop) continue;
                kept[n_kept++] = i;
                sel[n_sel * 3] = b, sel[n_sel * 3 + 1] = c, sel[n_sel * 3 + 2] = i;
                n_sel++;
            }
        }
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, 2, (int64_t[]){n_sel, 3});
    if (!y) return ctx->output_status;
    if (n_sel) memcpy(y->data, sel, (size_t)n_sel * 3 * sizeof *sel);
    return OTTER_OK;
}

/* ---- TfIdfVectorizer ------------------------------------------------------------------------ */

typedef struct tfidf {
    const otter_tensor *x;
    const otter_attr *pool_i, *pool_s;
    const int64_t *counts; /* ngram_counts: pool start of each n-gram level */
    size_t n_levels;
    int64_t pool_len;
} tfidf;

static bool tok_eq(const tfidf *t, int64_t xi, int64_t pi) {
    if (t->pool_s) {
        const otter_bytes *a = (const otter_bytes *)t->x->data + xi, *b = &t->pool_s->strings[pi];
        return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
    }
    return ot_get_i64(t->x->data, t->x->dtype, xi) == t->pool_i->ints[pi];
}

/* Index (counting n-grams over all levels in pool order) of the n-gram starting at x[start] with
 * step sd, or -1. */
static int64_t tfidf_find(const tfidf *t, int64_t n, int64_t start, int64_t sd) {
    int64_t lo = t->counts[n - 1], hi = (size_t)n < t->n_levels ? t->counts[n] : t->pool_len;
    int64_t before = 0;
    for (int64_t k = 1; k < n; k++) {
        int64_t a = t->counts[k - 1], b = (size_t)k < t->n_levels ? t->counts[k] : t->pool_len;
        before += (b - a) / k;
    }
    for (int64_t p = lo, g = 0; p + n <= hi; p += n, g++) {
        bool eq = true;
        for (int64_t k = 0; k < n && eq; k++) eq = tok_eq(t, start + k * sd, p + k);
        if (eq) return before + g;
    }
    return -1;
}

otter_status ot_kernel_tfidf(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    tfidf t = {.x = x};
    t.pool_i = otter_node_attr(ctx->node, "pool_int64s");
    t.pool_s = otter_node_attr(ctx->node, "pool_strings");
    if (t.pool_s && !t.pool_s->n_strings) t.pool_s = NULL;
    if (t.pool_i && !t.pool_i->n_ints) t.pool_i = NULL;
    if (!t.pool_i && !t.pool_s) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "pool_int64s or pool_strings is required");
    if (t.pool_s ? x->dtype != OTTER_DTYPE_STRING : (x->dtype != OTTER_DTYPE_INT32 && x->dtype != OTTER_DTYPE_INT64))
        return ot_ctx_bad_type(ctx, 0, x->dtype);
    t.pool_len = (int64_t)(t.pool_s ? t.pool_s->n_strings : t.pool_i->n_ints);
    const otter_attr *nc = otter_node_attr(ctx->node, "ngram_counts"),
                     *ni = otter_node_attr(ctx->node, "ngram_indexes");
    const otter_attr *wt = otter_node_attr(ctx->node, "weights");
    int64_t min_n, max_n, max_skip;
    const char *mode;
    OT_TRY(ot_ctx_attr_int(ctx, "min_gram_length", &min_n));
    OT_TRY(ot_ctx_attr_int(ctx, "max_gram_length", &max_n));
    OT_TRY(ot_ctx_attr_int(ctx, "max_skip_count", &max_skip));
    OT_TRY(ot_ctx_attr_string(ctx, "mode", &mode));
    int md = ot_streq(mode, "TF") ? 0 : ot_streq(mode, "IDF") ? 1 : ot_streq(mode, "TFIDF") ? 2 : -1;
    if (md < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'mode' is '%s'", mode);
    if (!nc || !ni || min_n < 1 || max_n < min_n || max_skip < 0 || (size_t)max_n > nc->n_ints)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "need ngram_counts (one per level up to max_gram_length), ngram_indexes and "
                            "1 <= min_gram_length <= max_gram_length");
    t.counts = nc->ints;
    t.n_levels = nc->n_ints;
    int64_t total = 0;
    for (size_t k = 0; k < t.n_levels; k++) {
        int64_t a = t.counts[k], b = k + 1 < t.n_levels ? t.counts[k + 1] : t.pool_len;
        if (a < 0 || b < a || b > t.pool_len || (b - a) % (int64_t)(k + 1))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ngram_counts[%zu] = %lld does not fit the pool", k,
                                (long long)a);
        total += (b - a) / (int64_t)(k + 1);
    }
    if ((int64_t)ni->n_ints != total || (wt && wt->n_floats && (int64_t)wt->n_floats != total))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "ngram_indexes has %zu entries, the pool holds %lld n-grams",
                            ni->n_ints, (long long)total);
    int64_t out_size = 0;
    for (size_t k = 0; k < ni->n_ints; k++) {
        if (ni->ints[k] < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative ngram_indexes entry");
        if (ni->ints[k] + 1 > out_size) out_size = ni->ints[k] + 1;
    }
    if (x->rank != 1 && x->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have rank 1 or 2", ot_ctx_input_name(ctx, 0));
    int64_t rows = x->rank == 2 ? x->dims[0] : 1, len = x->dims[x->rank - 1];
    int64_t dims[2] = {rows, out_size};
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, x->rank, x->rank == 2 ? dims : dims + 1);
    if (!y) return ctx->output_status;
    float *yd = y->data;
    memset(yd, 0, (size_t)(rows * out_size) * sizeof *yd);
    for (int64_t r = 0; r < rows; r++) {
        float *row = yd + r * out_size;
        int64_t first_n = min_n;
        for (int64_t sd = 1; sd <= max_skip + 1; sd++) {
            for (int64_t s = 0; s < len; s++)
                for (int64_t n = first_n; n <= max_n; n++) {
                    if (s + (n - 1) * sd >= len) break;
                    int64_t g = tfidf_find(&t, n, r * len + s, sd);
                    if (g >= 0) row[ni->ints[g]] += 1;
                }
            if (first_n == 1 && ++first_n > max_n) break; /* unigrams do not depend on the skip */
        }
        for (size_t g = 0; g < ni->n_ints; g++) {
            float *v = &row[ni->ints[g]];
            float w = wt && wt->n_floats ? wt->floats[g] : 1.0f;
            if (md == 1)
                *v = *v > 0 ? w : 0;
            else if (md == 2)
                *v *= w;
        }
    }
    return OTTER_OK;
}

/* ---- Unique ------------------------------------------------------------------------------- */

typedef struct uniq {
    const void *data; /* slices gathered contiguously: [n][len] */
    otter_dtype t;
    int64_t len;
} uniq;

static int elem_cmp(const void *d, otter_dtype t, int64_t i, int64_t j) {
    switch (t) {
#define CASE(E, T, S)                                                                                                  \
    case E: {                                                                                                          \
        T a = ((const T *)d)[i], b = ((const T *)d)[j];                                                                \
        return a < b ? -1 : a > b ? 1 : 0;                                                                             \
    }
        OT_FOR_NUMERIC_BOOL(CASE)
#undef CASE
    case OTTER_DTYPE_FLOAT16:
    case OTTER_DTYPE_BFLOAT16: {
        double a = ot_get_f64(d, t, i), b = ot_get_f64(d, t, j);
        return a < b ? -1 : a > b ? 1 : 0;
    }
    case OTTER_DTYPE_STRING: {
        const otter_bytes *a = (const otter_bytes *)d + i, *b = (const otter_bytes *)d + j;
        size_t m = a->len < b->len ? a->len : b->len;
        int c = m ? memcmp(a->data, b->data, m) : 0;
        return c ? c : a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
    }
    default:
        return 0;
    }
}

static int uniq_cmp(void *arg, int64_t a, int64_t b) {
    const uniq *u = arg;
    for (int64_t k = 0; k < u->len; k++) {
        int c = elem_cmp(u->data, u->t, a * u->len + k, b * u->len + k);
        if (c) return c;
    }
    return 0;
}

typedef struct first_cmp_arg {
    const int64_t *first;
} first_cmp_arg;

static int first_cmp(void *arg, int64_t a, int64_t b) {
    const int64_t *f = ((first_cmp_arg *)arg)->first;
    return f[a] < f[b] ? -1 : f[a] > f[b] ? 1 : 0;
}

otter_status ot_kernel_unique(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    size_t es = x->dtype == OTTER_DTYPE_STRING ? sizeof(otter_bytes) : otter_dtype_size(x->dtype);
    if (!es || x->dtype == OTTER_DTYPE_COMPLEX64 || x->dtype == OTTER_DTYPE_COMPLEX128)
        return ot_ctx_bad_type(ctx, 0, x->dtype);
    const otter_attr *ax = otter_node_attr(ctx->node, "axis");
    int64_t sorted;
    OT_TRY(ot_ctx_attr_int(ctx, "sorted", &sorted));
    int64_t axis = 0, outer = 1, n, inner = 1;
    if (ax) {
        axis = ax->i;
        if (!ot_norm_axis(&axis, x->rank))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'axis' %lld is out of range for rank %d",
                                (long long)ax->i, x->rank);
        for (int k = 0; k < x->rank; k++) {
            if (k < axis) outer *= x->dims[k];
            if (k > axis) inner *= x->dims[k];
        }
        n = x->dims[axis];
    } else {
        n = otter_tensor_numel(x);
    }
    int64_t len = outer * inner; /* elements per slice */
    /* gather slice k contiguously (strings: shallow copies of the otter_bytes) */
    char *g = ot_ctx_scratch(ctx, (size_t)(n * len) * es + 1);
    int64_t *order = ot_ctx_scratch(ctx, (size_t)(5 * n + 1) * sizeof *order);
    if (!g || !order) return OTTER_ERR_NOMEM;
    int64_t *tmp = order + n, *first = tmp + n, *count = first + n, *inv = count + n;
    for (int64_t k = 0; k < n; k++)
        for (int64_t o = 0; o < outer; o++)
            memcpy(g + (size_t)(k * len + o * inner) * es, (const char *)x->data + (size_t)((o * n + k) * inner) * es,
                   (size_t)inner * es);
    uniq u = {g, x->dtype, len};
    for (int64_t k = 0; k < n; k++) order[k] = k;
    merge_sort(order, tmp, n, uniq_cmp, &u);
    /* groups of equal slices; the first of each run is its first occurrence (stable sort) */
    int64_t m = 0;
    for (int64_t k = 0; k < n; k++) {
        if (k == 0 || uniq_cmp(&u, order[k - 1], order[k]) != 0) {
            first[m] = order[k];
            count[m] = 0;
            m++;
        }
        count[m - 1]++;
        inv[order[k]] = m - 1;
    }
    int64_t *gorder = tmp, *rank = order; /* output position p holds group gorder[p] */
    for (int64_t k = 0; k < m; k++) gorder[k] = k;
    if (!sorted) {
        int64_t *tmp2 = ot_ctx_scratch(ctx, (size_t)(m + 1) * sizeof *tmp2);
        if (!tmp2) return OTTER_ERR_NOMEM;
        first_cmp_arg fa = {first};
        merge_sort(gorder, tmp2, m, first_cmp, &fa);
    }
    for (int64_t p = 0; p < m; p++) rank[gorder[p]] = p;
    int64_t ydims[OTTER_MAX_RANK];
    int yrank = ax ? x->rank : 1;
    if (ax) {
        memcpy(ydims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        ydims[axis] = m;
    } else {
        ydims[0] = m;
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, yrank, ydims);
    if (!y) return ctx->output_status;
    for (int64_t p = 0; p < m; p++) {
        int64_t k = first[gorder[p]];
        for (int64_t o = 0; o < outer; o++) {
            char *dst = (char *)y->data + (size_t)((o * m + p) * inner) * es;
            const char *src = g + (size_t)(k * len + o * inner) * es;
            if (x->dtype != OTTER_DTYPE_STRING) {
                memcpy(dst, src, (size_t)inner * es);
                continue;
            }
            for (int64_t i = 0; i < inner; i++) {
                const otter_bytes *s = (const otter_bytes *)src + i;
                otter_bytes *d = (otter_bytes *)dst + i;
                d->data = ot_strndup(s->data ? s->data : "", s->len);
                if (!d->data) return OT_NOMEM();
                d->len = s->len;
            }
        }
    }
    for (size_t o = 1; o < ctx->n_outputs && o < 4; o++) {
        int64_t cnt = o == 2 ? n : m;
        otter_tensor *t = ot_ctx_output(ctx, o, OTTER_DTYPE_INT64, 1, &cnt);
        if (!t) return ctx->output_status;
        int64_t *d = t->data;
        for (int64_t k = 0; k < cnt; k++) d[k] = o == 1 ? first[gorder[k]] : o == 2 ? rank[inv[k]] : count[gorder[k]];
    }
    return OTTER_OK;
}

/* ---- HannWindow, HammingWindow, BlackmanWindow ----------------------------------------------- */

static otter_status output_datatype(const ot_kernel_ctx *ctx, otter_dtype *dt) {
    int64_t v;
    OT_TRY(ot_ctx_attr_int(ctx, "output_datatype", &v));
    *dt = (otter_dtype)v;
    return OTTER_OK;
}

static otter_status window_common(ot_kernel_ctx *ctx, double a0, double a1, double a2) {
    int64_t size;
    if (!ot_ctx_input(ctx, 0)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 (size) is missing");
    OT_TRY(scalar_i64(ctx, 0, 0, &size));
    if (size < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "size %lld is negative", (long long)size);
    otter_dtype dt;
    OT_TRY(output_datatype(ctx, &dt));
    if (dt == OTTER_DTYPE_STRING || !otter_dtype_size(dt) || dt == OTTER_DTYPE_COMPLEX64 ||
        dt == OTTER_DTYPE_COMPLEX128)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output_datatype %d is not supported", (int)dt);
    int64_t periodic;
    OT_TRY(ot_ctx_attr_int(ctx, "periodic", &periodic));
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, 1, &size);
    if (!y) return ctx->output_status;
    double den = periodic ? (double)size : (double)(size - 1);
    for (int64_t k = 0; k < size; k++) {
        double ph = den > 0 ? 2 * M_PI * (double)k / den : 0;
        ot_set_f64(y->data, dt, k, a0 - a1 * cos(ph) + a2 * cos(2 * ph));
    }
    return OTTER_OK;
}

otter_status ot_kernel_hann(ot_kernel_ctx *ctx) { return window_common(ctx, 0.5, 0.5, 0); }
otter_status ot_kernel_hamming(ot_kernel_ctx *ctx) { return window_common(ctx, 25.0 / 46, 1 - 25.0 / 46, 0); }
otter_status ot_kernel_blackman(ot_kernel_ctx *ctx) { return window_common(ctx, 0.42, 0.5, 0.08); }

/* ---- DFT, STFT --------------------------------------------------------------------------- */

/* One transform of length L: out[k] = scale * sum_n in(n) e^(sign 2 pi i k n / L) for k < n_out;
 * in(n) is read through get (n < n_in, zero beyond). Twiddles tw[2 * j] = cos, tw[2 * j + 1] = sin
 * of 2 pi j / L. */
static void dft_line(const double *in_re, const double *in_im, int64_t n_in, int64_t L, int64_t n_out, const double *tw,
                     double sign, double scale, double *out_re, double *out_im) {
    int64_t n_use = n_in < L ? n_in : L;
    for (int64_t k = 0; k < n_out; k++) {
        double re = 0, im = 0;
        int64_t j = 0;
        for (int64_t n = 0; n < n_use; n++) {
            double c = tw[2 * j], s = sign * tw[2 * j + 1];
            re += in_re[n] * c - in_im[n] * s;
            im += in_re[n] * s + in_im[n] * c;
            j += k;
            if (j >= L) j %= L;
        }
        out_re[k] = re * scale;
        out_im[k] = im * scale;
    }
}

static double *twiddles(ot_kernel_ctx *ctx, int64_t L) {
    double *tw = ot_ctx_scratch(ctx, (size_t)(2 * L + 2) * sizeof *tw);
    if (!tw) return NULL;
    for (int64_t j = 0; j < L; j++) {
        tw[2 * j] = cos(2 * M_PI * (double)j / (double)L);
        tw[2 * j + 1] = sin(2 * M_PI * (double)j / (double)L);
    }
    return tw;
}

/* What one DFT node does along its axis: lines of n_in values (real or complex) in, n_out bins out, a
 * transform of length L; irfft: inverse and onesided, a one-sided spectrum in and the real signal of
 * dft_length out (by default 2 * (bins - 1)), the missing half of the spectrum the conjugate of the given
 * one. The node's inputs: X, dft_length (input axis_input - 1) and, when axis_is_input, the axis (input
 * axis_input, by default -2, as DFT-20), else the attribute (DFT-17's, by default 1). */
typedef struct dft_plan {
    int64_t axis, n_in, L, n_out, outer, inner;
    bool inverse, onesided, cplx, irfft;
} dft_plan;

static otter_status dft_plan_of(ot_kernel_ctx *ctx, const otter_tensor *x, size_t axis_input, bool axis_is_input,
                                dft_plan *p) {
    if (!is_real(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    if (x->rank < 2 || (x->dims[x->rank - 1] != 1 && x->dims[x->rank - 1] != 2))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2 and a last dimension of 1 or 2",
                            ot_ctx_input_name(ctx, axis_input - 2));
    if (axis_is_input)
        OT_TRY(scalar_i64(ctx, axis_input, -2, &p->axis));
    else
        p->axis = ot_ctx_attr_int_or(ctx, "axis", 1);
    int64_t given = p->axis;
    if (!ot_norm_axis(&p->axis, x->rank) || p->axis == x->rank - 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)given, x->rank);
    p->inverse = ot_ctx_attr_int_or(ctx, "inverse", 0) != 0;
    p->onesided = ot_ctx_attr_int_or(ctx, "onesided", 0) != 0;
    p->cplx = x->dims[x->rank - 1] == 2;
    p->irfft = p->inverse && p->onesided;
    p->n_in = x->dims[p->axis];
    OT_TRY(scalar_i64(ctx, axis_input - 1, p->irfft ? 2 * (p->n_in - 1) : p->n_in, &p->L));
    if (p->L < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dft_length %lld must be positive", (long long)p->L);
    if (p->onesided && p->cplx != p->irfft)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "onesided %s needs a %s input (last dimension %d)",
                            p->irfft ? "inverse" : "output", p->irfft ? "complex" : "real", p->irfft ? 2 : 1);
    p->n_out = p->onesided && !p->irfft ? p->L / 2 + 1 : p->L;
    p->outer = p->inner = 1;
    for (int k = 0; k < x->rank - 1; k++) {
        if (k < p->axis) p->outer *= x->dims[k];
        if (k > p->axis) p->inner *= x->dims[k];
    }
    return OTTER_OK;
}

otter_status ot_kernel_dft(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    dft_plan p;
    OT_TRY(dft_plan_of(ctx, x, 2, ctx->opset >= 20, &p));
    int64_t dims[OTTER_MAX_RANK];
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    dims[p.axis] = p.n_out;
    dims[x->rank - 1] = p.irfft ? 1 : 2;
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, dims);
    if (!y) return ctx->output_status;
    /* the line read: n_in values, or for IRFFT the whole Hermitian spectrum of L */
    int64_t n_line = p.irfft ? p.L : p.n_in, L = p.L, n_in = p.n_in, n_out = p.n_out;
    double *tw = twiddles(ctx, L);
    double *buf = ot_ctx_scratch(ctx, (size_t)(2 * n_line + 2 * n_out + 4) * sizeof *buf);
    if (!tw || !buf) return OTTER_ERR_NOMEM;
    double *ire = buf, *iim = ire + n_line, *ore = iim + n_line + 1, *oim = ore + n_out + 1;
    int64_t c_in = p.cplx ? 2 : 1;
    for (int64_t o = 0; o < p.outer; o++)
        for (int64_t i = 0; i < p.inner; i++) {
            for (int64_t n = 0; n < n_line; n++) {
                /* IRFFT: bins above L / 2 mirror the ones below, conjugated; bins past the input are 0 */
                int64_t src = p.irfft && n > L / 2 ? L - n : n;
                double sign = p.irfft && n > L / 2 ? -1 : 1;
                if (src >= n_in) {
                    ire[n] = iim[n] = 0;
                    continue;
                }
                int64_t e = ((o * n_in + src) * p.inner + i) * c_in;
                ire[n] = ot_get_f64(x->data, x->dtype, e);
                iim[n] = p.cplx ? sign * ot_get_f64(x->data, x->dtype, e + 1) : 0;
            }
            dft_line(ire, iim, n_line, L, n_out, tw, p.inverse ? 1 : -1, p.inverse ? 1.0 / (double)L : 1.0, ore, oim);
            for (int64_t k = 0; k < n_out; k++) {
                int64_t e = ((o * n_out + k) * p.inner + i) * (p.irfft ? 1 : 2);
                ot_set_f64(y->data, y->dtype, e, ore[k]);
                if (!p.irfft) ot_set_f64(y->data, y->dtype, e + 1, oim[k]);
            }
        }
    return OTTER_OK;
}

/* com.otter DFTGrad(dY, X, dft_length?, axis?; DFT's attributes) -> dX: the adjoint of DFT's real-linear
 * map. Per line, dY's bins go through the conjugate transform (the opposite sign, the same scale) back to
 * the first min(n_in, L) positions (the rest of X was cut off: 0), whose real part alone reaches a real
 * X; IRFFT's real output takes dY as a real spectrum, and its Hermitian extension folds back onto the
 * bins it copied (conjugated ones with the imaginary part negated). */
otter_status ot_kernel_dft_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_need_input(ctx, 1, &x));
    dft_plan p;
    OT_TRY(dft_plan_of(ctx, x, 3, ot_ctx_input(ctx, 3) != NULL, &p)); /* the rule passes DFT-20's axis */
    int64_t L = p.L, n_in = p.n_in, n_out = p.n_out, c_out = p.irfft ? 1 : 2, c_in = p.cplx ? 2 : 1;
    if (dy->rank != x->rank || dy->dims[p.axis] != n_out || dy->dims[x->rank - 1] != c_out ||
        otter_tensor_numel(dy) != p.outer * p.inner * n_out * c_out)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' is not shaped like DFT's output of X '%s'",
                            ot_ctx_input_name(ctx, 0), ot_ctx_input_name(ctx, 1));
    otter_tensor *dx = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!dx) return ctx->output_status;
    int64_t n_back = p.irfft ? L : (n_in < L ? n_in : L); /* positions the transform read */
    double *tw = twiddles(ctx, L);
    double *buf = ot_ctx_scratch(ctx, (size_t)(2 * n_out + 2 * n_back + 2 * n_in + 6) * sizeof *buf);
    if (!tw || !buf) return OTTER_ERR_NOMEM;
    double *gre = buf, *gim = gre + n_out + 1, *bre = gim + n_out + 1, *bim = bre + n_back + 1, *dre = bim + n_back + 1,
           *dim = dre + n_in + 1;
    for (int64_t o = 0; o < p.outer; o++)
        for (int64_t i = 0; i < p.inner; i++) {
            for (int64_t k = 0; k < n_out; k++) {
                int64_t e = ((o * n_out + k) * p.inner + i) * c_out;
                gre[k] = ot_get_f64(dy->data, dy->dtype, e);
                gim[k] = p.irfft ? 0 : ot_get_f64(dy->data, dy->dtype, e + 1);
            }
            dft_line(gre, gim, n_out, L, n_back, tw, p.inverse ? -1 : 1, p.inverse ? 1.0 / (double)L : 1.0, bre, bim);
            for (int64_t n = 0; n < n_in; n++) dre[n] = dim[n] = 0;
            for (int64_t n = 0; n < n_back; n++) {
                int64_t src = p.irfft && n > L / 2 ? L - n : n;
                if (src >= n_in) continue;
                dre[src] += bre[n];
                dim[src] += p.irfft && n > L / 2 ? -bim[n] : bim[n];
            }
            for (int64_t n = 0; n < n_in; n++) {
                int64_t e = ((o * n_in + n) * p.inner + i) * c_in;
                ot_set_f64(dx->data, dx->dtype, e, dre[n]);
                if (p.cplx) ot_set_f64(dx->data, dx->dtype, e + 1, dim[n]);
            }
        }
    return OTTER_OK;
}

/* What one STFT node does: frames of flen samples every `step` of a [B, S, 1 or 2] signal, each windowed
 * and transformed to `bins` bins. The inputs' positions: signal, frame_step, window, frame_length (the
 * forward node's 0..3; STFTGrad's 1, 3, 2, 4). */
typedef struct stft_plan {
    const otter_tensor *x, *win;
    int64_t B, S, step, flen, frames, bins;
    bool cplx;
} stft_plan;

static otter_status stft_plan_of(ot_kernel_ctx *ctx, size_t in_x, size_t in_step, size_t in_win, size_t in_len,
                                 stft_plan *p) {
    const otter_tensor *x, *win = ot_ctx_input(ctx, in_win);
    OT_TRY(ot_ctx_need_input(ctx, in_x, &x));
    if (!is_real(x->dtype)) return ot_ctx_bad_type(ctx, in_x, x->dtype);
    if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' must be [batch, signal_length, 1 or 2]", in_x,
                            ot_ctx_input_name(ctx, in_x));
    if (!ot_ctx_input(ctx, in_step))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu (frame_step) is missing", in_step);
    OT_TRY(scalar_i64(ctx, in_step, 0, &p->step));
    if (win && win->rank != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' (window) must have rank 1", in_win,
                            ot_ctx_input_name(ctx, in_win));
    OT_TRY(scalar_i64(ctx, in_len, win ? win->dims[0] : 0, &p->flen));
    if (win && win->dims[0] != p->flen)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "window length %lld differs from frame_length %lld",
                            (long long)win->dims[0], (long long)p->flen);
    p->x = x;
    p->win = win;
    p->B = x->dims[0];
    p->S = x->dims[1];
    if (p->step < 1 || p->flen < 1 || p->flen > p->S)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "frame_step %lld and frame_length %lld must be positive, the frame at most %lld long",
                            (long long)p->step, (long long)p->flen, (long long)p->S);
    bool onesided = ot_ctx_attr_int_or(ctx, "onesided", 1) != 0; /* STFT-17's default */
    p->cplx = x->dims[2] == 2;
    if (onesided && p->cplx)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "onesided output needs a real signal (last dimension 1)");
    p->frames = (p->S - p->flen) / p->step + 1;
    p->bins = onesided ? p->flen / 2 + 1 : p->flen;
    return OTTER_OK;
}

otter_status ot_kernel_stft(ot_kernel_ctx *ctx) {
    stft_plan p;
    OT_TRY(stft_plan_of(ctx, 0, 1, 2, 3, &p));
    const otter_tensor *x = p.x, *win = p.win;
    const int64_t S = p.S, flen = p.flen, bins = p.bins, frames = p.frames;
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 4, (int64_t[]){p.B, frames, bins, 2});
    if (!y) return ctx->output_status;
    double *tw = twiddles(ctx, flen);
    double *buf = ot_ctx_scratch(ctx, (size_t)(2 * flen + 2 * bins + 4) * sizeof *buf);
    if (!tw || !buf) return OTTER_ERR_NOMEM;
    double *ire = buf, *iim = ire + flen, *ore = iim + flen + 1, *oim = ore + bins + 1;
    int64_t c_in = p.cplx ? 2 : 1;
    for (int64_t b = 0; b < p.B; b++)
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t n = 0; n < flen; n++) {
                int64_t e = (b * S + f * p.step + n) * c_in;
                double w = win ? ot_get_f64(win->data, win->dtype, n) : 1.0;
                ire[n] = ot_get_f64(x->data, x->dtype, e) * w;
                iim[n] = p.cplx ? ot_get_f64(x->data, x->dtype, e + 1) * w : 0;
            }
            dft_line(ire, iim, flen, flen, bins, tw, -1, 1.0, ore, oim);
            for (int64_t k = 0; k < bins; k++) {
                int64_t e = ((b * frames + f) * bins + k) * 2;
                ot_set_f64(y->data, y->dtype, e, ore[k]);
                ot_set_f64(y->data, y->dtype, e + 1, oim[k]);
            }
        }
    return OTTER_OK;
}

/* com.otter STFTGrad(dY, signal, window?, frame_step, frame_length?; onesided) -> dSignal, dWindow?: each
 * frame's bins go through the adjoint transform (sign +1, unscaled) back to its flen windowed samples;
 * the signal's gradient is their overlap-add times the window (a real signal keeps the real part), the
 * window's the sum over frames and batches of their inner product with the samples. */
otter_status ot_kernel_stft_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    stft_plan p;
    OT_TRY(stft_plan_of(ctx, 1, 3, 2, 4, &p));
    const otter_tensor *x = p.x, *win = p.win;
    const int64_t S = p.S, flen = p.flen, bins = p.bins, frames = p.frames, c_in = p.cplx ? 2 : 1;
    if (dy->rank != 4 || dy->dims[0] != p.B || dy->dims[1] != frames || dy->dims[2] != bins || dy->dims[3] != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' is not shaped [%lld, %lld, %lld, 2] like STFT's output",
                            ot_ctx_input_name(ctx, 0), (long long)p.B, (long long)frames, (long long)bins);
    otter_tensor *dx = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims), *dw = NULL;
    if (!dx) return ctx->output_status;
    if (win && ctx->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1])) {
        dw = ot_ctx_output(ctx, 1, win->dtype, 1, win->dims);
        if (!dw) return ctx->output_status;
    }
    double *tw = twiddles(ctx, flen);
    double *buf = ot_ctx_scratch(ctx, (size_t)(2 * bins + 2 * flen + flen + 2 * S * c_in + 6) * sizeof *buf);
    if (!tw || !buf) return OTTER_ERR_NOMEM;
    double *gre = buf, *gim = gre + bins + 1, *bre = gim + bins + 1, *bim = bre + flen + 1, *wsum = bim + flen + 1,
           *acc = wsum + flen + 1;
    for (int64_t n = 0; n < flen; n++) wsum[n] = 0;
    for (int64_t b = 0; b < p.B; b++) {
        for (int64_t e = 0; e < S * c_in; e++) acc[e] = 0;
        for (int64_t f = 0; f < frames; f++) {
            for (int64_t k = 0; k < bins; k++) {
                int64_t e = ((b * frames + f) * bins + k) * 2;
                gre[k] = ot_get_f64(dy->data, dy->dtype, e);
                gim[k] = ot_get_f64(dy->data, dy->dtype, e + 1);
            }
            dft_line(gre, gim, bins, flen, flen, tw, 1, 1.0, bre, bim);
            for (int64_t n = 0; n < flen; n++) {
                int64_t at = (f * p.step + n) * c_in, e = b * S * c_in + at;
                double w = win ? ot_get_f64(win->data, win->dtype, n) : 1.0;
                acc[at] += bre[n] * w;
                wsum[n] += bre[n] * ot_get_f64(x->data, x->dtype, e);
                if (p.cplx) {
                    acc[at + 1] += bim[n] * w;
                    wsum[n] += bim[n] * ot_get_f64(x->data, x->dtype, e + 1);
                }
            }
        }
        for (int64_t e = 0; e < S * c_in; e++) ot_set_f64(dx->data, dx->dtype, b * S * c_in + e, acc[e]);
    }
    for (int64_t n = 0; dw && n < flen; n++) ot_set_f64(dw->data, dw->dtype, n, wsum[n]);
    return OTTER_OK;
}

/* ---- MelWeightMatrix ------------------------------------------------------------------------ */

/* ONNX's reference: num_mel_bins + 2 points evenly spaced on the mel scale (step divided by the
 * point count, as the reference does), mapped to spectrogram bins floor((dft_length + 1) f / rate),
 * and triangles between neighbours. */
otter_status ot_kernel_mel(ot_kernel_ctx *ctx) {
    for (size_t i = 0; i < 5; i++)
        if (!ot_ctx_input(ctx, i)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    int64_t n_mel, dft_len, rate;
    double lo_hz, hi_hz;
    OT_TRY(scalar_i64(ctx, 0, 0, &n_mel));
    OT_TRY(scalar_i64(ctx, 1, 0, &dft_len));
    OT_TRY(scalar_i64(ctx, 2, 0, &rate));
    OT_TRY(scalar_f64(ctx, 3, 0, &lo_hz));
    OT_TRY(scalar_f64(ctx, 4, 0, &hi_hz));
    if (n_mel < 1 || dft_len < 1 || rate < 1 || lo_hz < 0 || hi_hz < lo_hz)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "num_mel_bins %lld, dft_length %lld, sample_rate %lld, edges %g..%g Hz are not valid",
                            (long long)n_mel, (long long)dft_len, (long long)rate, lo_hz, hi_hz);
    otter_dtype dt;
    OT_TRY(output_datatype(ctx, &dt));
    if (dt == OTTER_DTYPE_STRING || !otter_dtype_size(dt) || dt == OTTER_DTYPE_COMPLEX64 ||
        dt == OTTER_DTYPE_COMPLEX128)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "output_datatype %d is not supported", (int)dt);
    int64_t n_spec = dft_len / 2 + 1;
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, 2, (int64_t[]){n_spec, n_mel});
    int64_t *bin = ot_ctx_scratch(ctx, (size_t)(n_mel + 2) * sizeof *bin);
    double *w = ot_ctx_scratch(ctx, (size_t)(n_spec * n_mel) * sizeof *w);
    if (!y) return ctx->output_status;
    if (!bin || !w) return OTTER_ERR_NOMEM;
    double lo_mel = 2595 * log10(1 + lo_hz / 700), hi_mel = 2595 * log10(1 + hi_hz / 700);
    double step = (hi_mel - lo_mel) / (double)(n_mel + 2);
    for (int64_t i = 0; i < n_mel + 2; i++) {
        double hz = 700 * (pow(10, ((double)i * step + lo_mel) / 2595) - 1);
        bin[i] = (int64_t)floor((double)(dft_len + 1) * hz / (double)rate);
        if (bin[i] < 0) bin[i] = 0;
        if (bin[i] > n_spec - 1 && i < n_mel + 1) bin[i] = n_spec - 1; /* stay inside the matrix */
    }
    memset(w, 0, (size_t)(n_spec * n_mel) * sizeof *w);
    for (int64_t i = 0; i < n_mel; i++) {
        int64_t l = bin[i], c = bin[i + 1], h = bin[i + 2];
        if (c == l) {
            w[c * n_mel + i] = 1;
        } else {
            for (int64_t j = l; j <= c; j++) w[j * n_mel + i] = (double)(j - l) / (double)(c - l);
        }
        for (int64_t j = c; j < h && j < n_spec; j++) w[j * n_mel + i] = (double)(h - j) / (double)(h - c);
    }
    for (int64_t k = 0; k < n_spec * n_mel; k++) ot_set_f64(y->data, dt, k, w[k]);
    return OTTER_OK;
}

/* ---- RoiAlign ------------------------------------------------------------------------------ */

/* Bilinear sampling of a channel plane as ONNX Runtime (and ONNX's reference) does it: points more
 * than one pixel outside contribute nothing (false), coordinates below 0 clamp to 0; the four corners'
 * offsets in the plane and weights, kept apart so max mode can take the largest weighted corner. */
static bool roi_corners(int64_t H, int64_t W, double y, double x, int64_t at[4], double w[4]) {
    if (y < -1.0 || y > (double)H || x < -1.0 || x > (double)W) return false;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
    if (yl >= H - 1) {
        yh = yl = H - 1;
        y = (double)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= W - 1) {
        xh = xl = W - 1;
        x = (double)xl;
    } else {
        xh = xl + 1;
    }
    double ly = y - (double)yl, lx = x - (double)xl, hy = 1 - ly, hx = 1 - lx;
    at[0] = yl * W + xl, at[1] = yl * W + xh, at[2] = yh * W + xl, at[3] = yh * W + xh;
    w[0] = hy * hx, w[1] = hy * lx, w[2] = ly * hx, w[3] = ly * lx;
    return true;
}

/* RoiAlign from input `first` on (X, rois, batch_indices): the forward values into Y, or (dY not
 * NULL) their gradient scattered into dX (zeroed by the caller): avg spreads each output's gradient
 * over its samples' corners by weight / count, max hands it to the weighted corner that won. */
static otter_status roi_align(ot_kernel_ctx *ctx, size_t first, const float *dY, float *dX) {
    const otter_tensor *x, *rois, *bi;
    OT_TRY(ot_ctx_need_input(ctx, first, &x));
    OT_TRY(ot_ctx_need_input(ctx, first + 1, &rois));
    OT_TRY(ot_ctx_need_input(ctx, first + 2, &bi));
    if (x->dtype != OTTER_DTYPE_FLOAT) return ot_ctx_bad_type(ctx, first, x->dtype);
    if (rois->dtype != OTTER_DTYPE_FLOAT) return ot_ctx_bad_type(ctx, first + 1, rois->dtype);
    if (bi->dtype != OTTER_DTYPE_INT64 && bi->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_bad_type(ctx, first + 2, bi->dtype);
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != 4 || bi->rank != 1 || bi->dims[0] != rois->dims[0])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "expected X [N, C, H, W], rois [R, 4] and batch_indices [R]");
    const char *mode;
    OT_TRY(ot_ctx_attr_string(ctx, "mode", &mode));
    bool max_mode = ot_streq(mode, "max");
    if (!max_mode && !ot_streq(mode, "avg"))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'mode' is '%s'", mode);
    /* RoiAlign-16 added it with the default half_pixel, while RoiAlign-10 behaves as output_half_pixel
     * (""): an exception to "a later version's default is the behaviour before", so read only from 16
     * (RoiAlignGrad's rule always sets it) */
    const char *ctm = "";
    if (dY || ctx->opset >= 16) OT_TRY(ot_ctx_attr_string(ctx, "coordinate_transformation_mode", &ctm));
    bool half_pixel = ot_streq(ctm, "half_pixel");
    if (!half_pixel && !ot_streq(ctm, "output_half_pixel") && !ot_str_empty(ctm))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'coordinate_transformation_mode' is '%s'", ctm);
    int64_t oh, ow, sr;
    float scale;
    OT_TRY(ot_ctx_attr_int(ctx, "output_height", &oh));
    OT_TRY(ot_ctx_attr_int(ctx, "output_width", &ow));
    OT_TRY(ot_ctx_attr_int(ctx, "sampling_ratio", &sr));
    OT_TRY(ot_ctx_attr_float(ctx, "spatial_scale", &scale));
    if (oh < 1 || ow < 1 || sr < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output_height/output_width must be positive, sampling_ratio >= 0");
    const int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], R = rois->dims[0];
    float *yd = NULL;
    if (!dY) {
        otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, 4, (int64_t[]){R, C, oh, ow});
        if (!y) return ctx->output_status;
        yd = y->data;
    }
    const float *rd = rois->data;
    double off = half_pixel ? 0.5 : 0.0;
    for (int64_t r = 0; r < R; r++) {
        int64_t b = ot_get_i64(bi->data, bi->dtype, r);
        if (b < 0 || b >= N)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "batch_indices[%lld] = %lld is outside [0, %lld)", (long long)r,
                                (long long)b, (long long)N);
        double x0 = rd[r * 4] * scale - off, y0 = rd[r * 4 + 1] * scale - off;
        double x1 = rd[r * 4 + 2] * scale - off, y1 = rd[r * 4 + 3] * scale - off;
        double rw = x1 - x0, rh = y1 - y0;
        if (!half_pixel) {
            rw = fmax(rw, 1.0);
            rh = fmax(rh, 1.0);
        }
        double bh = rh / (double)oh, bw = rw / (double)ow;
        int64_t gh = sr > 0 ? sr : (int64_t)ceil(rh / (double)oh), gw = sr > 0 ? sr : (int64_t)ceil(rw / (double)ow);
        double count = (double)(gh * gw > 1 ? gh * gw : 1);
        for (int64_t c = 0; c < C; c++) {
            const float *plane = (const float *)x->data + (b * C + c) * H * W;
            float *dplane = dX ? dX + (b * C + c) * H * W : NULL;
            for (int64_t ph = 0; ph < oh; ph++)
                for (int64_t pw = 0; pw < ow; pw++) {
                    int64_t o = ((r * C + c) * oh + ph) * ow + pw, best_at = -1;
                    double acc = 0, best_w = 0;
                    bool first_sample = true;
                    for (int64_t iy = 0; iy < gh; iy++) {
                        double yy = y0 + (double)ph * bh + ((double)iy + 0.5) * bh / (double)gh;
                        for (int64_t ix = 0; ix < gw; ix++) {
                            double xx = x0 + (double)pw * bw + ((double)ix + 0.5) * bw / (double)gw, w[4] = {0};
                            int64_t at[4] = {0};
                            bool inside = roi_corners(H, W, yy, xx, at, w);
                            for (int k = 0; k < 4; k++) {
                                double v = inside ? w[k] * plane[at[k]] : 0;
                                if (!max_mode) {
                                    acc += v;
                                    if (dplane && inside) dplane[at[k]] += (float)(w[k] * dY[o] / count);
                                } else if (first_sample || v > acc) {
                                    acc = v, first_sample = false;
                                    best_at = inside ? at[k] : -1, best_w = w[k];
                                }
                            }
                        }
                    }
                    if (yd) yd[o] = (float)(max_mode ? acc : acc / count);
                    if (dplane && max_mode && best_at >= 0) dplane[best_at] += (float)(best_w * dY[o]);
                }
        }
    }
    return OTTER_OK;
}

otter_status ot_kernel_roialign(ot_kernel_ctx *ctx) { return roi_align(ctx, 0, NULL, NULL); }

/* com.otter RoiAlignGrad(dY, X, rois, batch_indices) -> dX with RoiAlign's attributes (ONNX Runtime
 * has none). */
otter_status ot_kernel_roialign_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x, *rois;
    OT_TRY(ot_ctx_need_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_need_input(ctx, 1, &x));
    OT_TRY(ot_ctx_need_input(ctx, 2, &rois));
    if (dy->dtype != OTTER_DTYPE_FLOAT) return ot_ctx_bad_type(ctx, 0, dy->dtype);
    if (dy->rank != 4 || x->rank != 4 || rois->rank < 1 || dy->dims[0] != rois->dims[0] || dy->dims[1] != x->dims[1] ||
        dy->dims[2] != otter_node_attr_int(ctx->node, "output_height", 1) ||
        dy->dims[3] != otter_node_attr_int(ctx->node, "output_width", 1))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "dY '%s' must be RoiAlign's output [R, C, output_height, output_width]",
                            ot_ctx_input_name(ctx, 0));
    otter_tensor *dx = ot_ctx_output(ctx, 0, OTTER_DTYPE_FLOAT, x->rank, x->dims);
    if (!dx) return ctx->output_status;
    memset(dx->data, 0, (size_t)otter_tensor_numel(dx) * sizeof(float));
    return roi_align(ctx, 1, dy->data, dx->data);
}

/* ---- MeanVarianceNormalization --------------------------------------------------------------- */

/* ONNX's function body: (X - mean) / (sqrt(mean(X^2) - mean^2) + 1e-9) over `axes`. */
otter_status ot_kernel_mvn(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!is_real(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    const otter_attr *a = otter_node_attr(ctx->node, "axes");
    static const int64_t def_axes[] = {0, 2, 3};
    const int64_t *axes = a ? a->ints : def_axes;
    size_t n_axes = a ? a->n_ints : 3;
    bool reduce[OTTER_MAX_RANK] = {false};
    for (size_t k = 0; k < n_axes; k++) {
        int64_t ax = axes[k];
        if (!ot_norm_axis(&ax, x->rank))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axes[k],
                                x->rank);
        reduce[ax] = true;
    }
    int64_t n = otter_tensor_numel(x), groups = 1;
    for (int k = 0; k < x->rank; k++)
        if (!reduce[k]) groups *= x->dims[k];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    double *acc = ot_ctx_scratch(ctx, (size_t)(3 * groups + 1) * sizeof *acc);
    int64_t *grp = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *grp);
    if (!y) return ctx->output_status;
    if (!acc || !grp) return OTTER_ERR_NOMEM;
    memset(acc, 0, (size_t)(3 * groups) * sizeof *acc);
    for (int64_t i = 0; i < n; i++) { /* group of element i: its index over the kept axes */
        int64_t rem = i, g = 0, mul = 1;
        for (int k = x->rank - 1; k >= 0; k--) {
            int64_t c = rem % x->dims[k];
            rem /= x->dims[k];
            if (!reduce[k]) {
                g += c * mul;
                mul *= x->dims[k];
            }
        }
        grp[i] = g;
        double v = ot_get_f64(x->data, x->dtype, i);
        acc[3 * g] += v;
        acc[3 * g + 1] += v * v;
        acc[3 * g + 2] += 1;
    }
    for (int64_t g = 0; g < groups; g++) {
        double cnt = acc[3 * g + 2] > 0 ? acc[3 * g + 2] : 1, mean = acc[3 * g] / cnt;
        double var = acc[3 * g + 1] / cnt - mean * mean;
        acc[3 * g] = mean;
        acc[3 * g + 1] = sqrt(var > 0 ? var : 0) + 1e-9;
    }
    for (int64_t i = 0; i < n; i++) {
        const double *s = acc + 3 * grp[i];
        ot_set_f64(y->data, y->dtype, i, (ot_get_f64(x->data, x->dtype, i) - s[0]) / s[1]);
    }
    return OTTER_OK;
}

/* ---- Det ------------------------------------------------------------------------------------- */

/* a (M x M, row-major) := its LU factors with partial pivoting (unit L below the diagonal, U on and
 * above it; row r of the factors is row perm[r] of the input) and returns det(a); stops at the first zero
 * pivot and returns 0, leaving the factors incomplete. */
static double lu_factor(double *a, int64_t M, int64_t *perm) {
    for (int64_t r = 0; r < M; r++) perm[r] = r;
    double det = 1;
    for (int64_t c = 0; c < M; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < M; r++)
            if (fabs(a[r * M + c]) > fabs(a[p * M + c])) p = r;
        if (a[p * M + c] == 0) return 0;
        if (p != c) {
            for (int64_t k = 0; k < M; k++) {
                double t = a[c * M + k];
                a[c * M + k] = a[p * M + k];
                a[p * M + k] = t;
            }
            int64_t t = perm[c];
            perm[c] = perm[p];
            perm[p] = t;
            det = -det;
        }
        double piv = a[c * M + c];
        det *= piv;
        for (int64_t r = c + 1; r < M; r++) {
            double f = a[r * M + c] / piv;
            a[r * M + c] = f;
            for (int64_t k = c + 1; k < M; k++) a[r * M + k] -= f * a[c * M + k];
        }
    }
    return det;
}

static otter_status check_square(const ot_kernel_ctx *ctx, size_t i, const otter_tensor *x) {
    if (x->rank >= 2 && x->dims[x->rank - 1] == x->dims[x->rank - 2]) return OTTER_OK;
    char a[96];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has shape %s, expected [..., M, M]", i,
                        ot_ctx_input_name(ctx, i), ot_shape_str(a, sizeof a, x->rank, x->dims));
}

otter_status ot_kernel_det(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (!is_real(x->dtype)) return ot_ctx_bad_type(ctx, 0, x->dtype);
    OT_TRY(check_square(ctx, 0, x));
    int64_t M = x->dims[x->rank - 1], mats = 1;
    for (int k = 0; k < x->rank - 2; k++) mats *= x->dims[k];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank - 2, x->dims);
    double *a = ot_ctx_scratch(ctx, (size_t)(M * M + 1) * sizeof *a);
    int64_t *perm = ot_ctx_scratch(ctx, (size_t)(M + 1) * sizeof *perm);
    if (!y) return ctx->output_status;
    if (!a || !perm) return OTTER_ERR_NOMEM;
    for (int64_t m = 0; m < mats; m++) {
        for (int64_t i = 0; i < M * M; i++) a[i] = ot_get_f64(x->data, x->dtype, m * M * M + i);
        ot_set_f64(y->data, y->dtype, m, lu_factor(a, M, perm));
    }
    return OTTER_OK;
}

/* com.otter DetGrad(dY, X) -> dX = dY * cofactor(X), the derivative of det(X) = sum_j X_ij C_ij. An
 * invertible X has cofactor det(X) inv(X)^T (columns of the inverse solved from X's LU factors, O(M^3));
 * a singular X, where that product is 0 * inf, gets its cofactors as signed minors ((M-1)-sized
 * determinants, O(M^5)), which is the same continuous function PyTorch's det backward computes. */
otter_status ot_kernel_det_grad(ot_kernel_ctx *ctx) {
    const otter_tensor *dy, *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &dy));
    OT_TRY(ot_ctx_float_input(ctx, 1, &x));
    OT_TRY(check_square(ctx, 1, x));
    int64_t M = x->dims[x->rank - 1], mats = 1;
    for (int k = 0; k < x->rank - 2; k++) mats *= x->dims[k];
    if (otter_tensor_numel(dy) != mats)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dY '%s' has %lld elements, X '%s' holds %lld matrices",
                            ot_ctx_input_name(ctx, 0), (long long)otter_tensor_numel(dy), ot_ctx_input_name(ctx, 1),
                            (long long)mats);
    otter_tensor *dx = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    double *a = ot_ctx_scratch(ctx, (size_t)(2 * M * M + 2 * M + 1) * sizeof *a);
    int64_t *perm = ot_ctx_scratch(ctx, (size_t)(M + 1) * sizeof *perm);
    if (!dx) return ctx->output_status;
    if (!a || !perm) return OTTER_ERR_NOMEM;
    double *minor = a + M * M, *col = minor + M * M;
    for (int64_t m = 0; m < mats; m++) {
        const int64_t base = m * M * M;
        double g = ot_get_f64(dy->data, dy->dtype, m);
        for (int64_t i = 0; i < M * M; i++) a[i] = ot_get_f64(x->data, x->dtype, base + i);
        double det = lu_factor(a, M, perm);
        if (det != 0) {
            for (int64_t j = 0; j < M; j++) { /* column j of inv(X) is row j of the cofactor matrix / det */
                for (int64_t r = 0; r < M; r++) {
                    double v = perm[r] == j;
                    for (int64_t k = 0; k < r; k++) v -= a[r * M + k] * col[k];
                    col[r] = v;
                }
                for (int64_t r = M - 1; r >= 0; r--) {
                    double v = col[r];
                    for (int64_t k = r + 1; k < M; k++) v -= a[r * M + k] * col[k];
                    col[r] = v / a[r * M + r];
                }
                for (int64_t i = 0; i < M; i++) ot_set_f64(dx->data, dx->dtype, base + j * M + i, g * det * col[i]);
            }
            continue;
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < M; j++) {
                int64_t e = 0;
                for (int64_t r = 0; r < M; r++)
                    for (int64_t c = 0; c < M; c++)
                        if (r != i && c != j) minor[e++] = ot_get_f64(x->data, x->dtype, base + r * M + c);
                double cof = lu_factor(minor, M - 1, perm) * ((i + j) % 2 ? -1 : 1);
                ot_set_f64(dx->data, dx->dtype, base + i * M + j, g * cof);
            }
    }
    return OTTER_OK;
}
