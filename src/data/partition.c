/* Partitions of one dataset among federated clients: iid, label shards (McMahan et al. 2017), Dirichlet. */
#include <math.h>
#include <string.h>

#include "data/data_internal.h"

struct otter_partition {
    int num_clients;
    int64_t *offsets; /* [num_clients + 1] */
    int64_t *indices; /* [N]; client c holds indices[offsets[c] .. offsets[c + 1]) */
};

void otter_partition_free(otter_partition *p) {
    if (!p) return;
    ot_free(p->offsets);
    ot_free(p->indices);
    ot_free(p);
}

int otter_partition_num_clients(const otter_partition *p) { return p ? p->num_clients : 0; }

const int64_t *otter_partition_client(const otter_partition *p, int c, int64_t *count) {
    if (!p || c < 0 || c >= p->num_clients) {
        if (count) *count = 0;
        return NULL;
    }
    if (count) *count = p->offsets[c + 1] - p->offsets[c];
    return p->indices + p->offsets[c];
}

static double normal(ot_rng *r) {
    double u1 = 1.0 - ot_rng_uniform(r), u2 = ot_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(a, 1) by Marsaglia and Tsang; a < 1 through Gamma(a + 1) * U^(1/a). */
static double gamma_sample(ot_rng *r, double a) {
    if (a < 1.0) {
        double u = 1.0 - ot_rng_uniform(r);
        return gamma_sample(r, a + 1.0) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = 1.0 - ot_rng_uniform(r);
        if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
    }
}

/* Sample indices grouped by label (stable): by_label[start[k] .. start[k + 1]) hold class k. */
static otter_status group_by_label(const otter_dataset *ds, int64_t **by_label, int64_t **start) {
    int64_t K = ds->num_classes, n = ds->n;
    int64_t *st = ot_calloc((size_t)K + 1, sizeof(int64_t));
    int64_t *out = ot_malloc((size_t)n * sizeof(int64_t));
    int64_t *fill = ot_calloc((size_t)K, sizeof(int64_t));
    if (!st || !out || !fill) {
        ot_free(st);
        ot_free(out);
        ot_free(fill);
        return OT_NOMEM();
    }
    for (int64_t i = 0; i < n; i++) st[ds->labels[i] + 1]++;
    for (int64_t k = 0; k < K; k++) st[k + 1] += st[k];
    for (int64_t i = 0; i < n; i++) {
        int64_t k = ds->labels[i];
        out[st[k] + fill[k]++] = i;
    }
    ot_free(fill);
    *by_label = out;
    *start = st;
    return OTTER_OK;
}

otter_status otter_dataset_partition(otter_partition **out, const otter_dataset *ds,
                                     const otter_partition_options *opts) {
    if (!out || !ds || !opts) return ot_error(OTTER_ERR_ARGUMENT, "otter_dataset_partition: NULL argument");
    *out = NULL;
    int C = opts->num_clients;
    int64_t n = ds->n;
    if (C <= 0) return ot_error(OTTER_ERR_ARGUMENT, "%s: num_clients must be positive (got %d)", ds->desc, C);
    if (opts->kind != OTTER_PARTITION_IID && opts->kind != OTTER_PARTITION_SHARDS &&
        opts->kind != OTTER_PARTITION_DIRICHLET)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: unknown partition kind %d", ds->desc, (int)opts->kind);
    if (opts->kind != OTTER_PARTITION_IID && !ds->labels)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: shard and Dirichlet partitions need class labels", ds->desc);
    int spc = opts->shards_per_client > 0 ? opts->shards_per_client : 2;
    double alpha = opts->alpha > 0 ? opts->alpha : 0.5;
    if (opts->kind == OTTER_PARTITION_SHARDS && (int64_t)C * spc > n)
        return ot_error(OTTER_ERR_ARGUMENT, "%s: %d clients x %d shards is more shards than the %lld samples", ds->desc,
                        C, spc, (long long)n);
    if (!isfinite(alpha)) return ot_error(OTTER_ERR_ARGUMENT, "%s: alpha must be finite", ds->desc);

    otter_partition *p = ot_calloc(1, sizeof *p);
    if (!p) return OT_NOMEM();
    p->num_clients = C;
    p->offsets = ot_calloc((size_t)C + 1, sizeof(int64_t));
    p->indices = ot_malloc((size_t)n * sizeof(int64_t));
    if (!p->offsets || !p->indices) goto nomem;
    ot_rng r = ot_data_epoch_rng(opts->seed, 0);

    if (opts->kind == OTTER_PARTITION_IID) {
        for (int64_t i = 0; i < n; i++) p->indices[i] = i;
        ot_data_shuffle(p->indices, n, &r);
        for (int c = 0; c <= C; c++) p->offsets[c] = (int64_t)c * n / C;
    } else if (opts->kind == OTTER_PARTITION_SHARDS) {
        int64_t *sorted = NULL, *start = NULL;
        if (group_by_label(ds, &sorted, &start) != OTTER_OK) goto nomem;
        ot_free(start);
        int64_t S = (int64_t)C * spc;
        int64_t *shard = ot_malloc((size_t)S * sizeof(int64_t));
        if (!shard) {
            ot_free(sorted);
            goto nomem;
        }
        for (int64_t s = 0; s < S; s++) shard[s] = s;
        ot_data_shuffle(shard, S, &r);
        int64_t w = 0;
        for (int c = 0; c < C; c++) {
            p->offsets[c] = w;
            for (int j = 0; j < spc; j++) {
                int64_t s = shard[(int64_t)c * spc + j], b = s * n / S, e = (s + 1) * n / S;
                memcpy(p->indices + w, sorted + b, (size_t)(e - b) * sizeof(int64_t));
                w += e - b;
            }
        }
        p->offsets[C] = w;
        OT_ASSERT(w == n);
        ot_free(shard);
        ot_free(sorted);
    } else {
        int64_t K = ds->num_classes;
        int64_t *sorted = NULL, *start = NULL;
        if (group_by_label(ds, &sorted, &start) != OTTER_OK) goto nomem;
        int64_t *cnt = ot_calloc((size_t)(K * C), sizeof(int64_t)); /* [K, C] samples of class k for client c */
        double *prop = ot_malloc((size_t)C * sizeof(double));
        if (!cnt || !prop) {
            ot_free(cnt);
            ot_free(prop);
            ot_free(sorted);
            ot_free(start);
            goto nomem;
        }
        for (int64_t k = 0; k < K; k++) {
            int64_t nk = start[k + 1] - start[k];
            ot_data_shuffle(sorted + start[k], nk, &r);
            double sum = 0;
            for (int c = 0; c < C; c++) sum += prop[c] = gamma_sample(&r, alpha);
            if (!(sum > 0)) { /* every draw underflowed (tiny alpha): one client takes the class */
                for (int c = 0; c < C; c++) prop[c] = 0;
                prop[ot_rng_below(&r, (uint64_t)C)] = sum = 1;
            }
            /* Cut at rounded cumulative proportions, so the counts sum to nk. */
            double cum = 0;
            int64_t prev = 0;
            for (int c = 0; c < C; c++) {
                cum += prop[c];
                int64_t cut = c == C - 1 ? nk : (int64_t)llround(cum / sum * (double)nk);
                if (cut > nk) cut = nk;
                if (cut < prev) cut = prev;
                cnt[k * C + c] = cut - prev;
                prev = cut;
            }
        }
        int64_t w = 0;
        for (int c = 0; c < C; c++) {
            p->offsets[c] = w;
            for (int64_t k = 0; k < K; k++) {
                int64_t off = start[k];
                for (int cc = 0; cc < c; cc++) off += cnt[k * C + cc];
                memcpy(p->indices + w, sorted + off, (size_t)cnt[k * C + c] * sizeof(int64_t));
                w += cnt[k * C + c];
            }
        }
        p->offsets[C] = w;
        OT_ASSERT(w == n);
        ot_free(cnt);
        ot_free(prop);
        ot_free(sorted);
        ot_free(start);
    }
    *out = p;
    return OTTER_OK;
nomem:
    otter_partition_free(p);
    return OT_NOMEM();
}
