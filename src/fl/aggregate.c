/* Federated aggregation (include/otter/fl.h): parameter layouts matched by name, dtype and shape; FedAvg,
 * FedAvgM, FedAdam, FedYogi, coordinate-wise median and trimmed mean over flat float32 vectors, accumulated in
 * double; the state file a restarting server reads back. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/rng.h"
#include "core/strmap.h"
#include "otter/fl.h"
#include "otter/io.h"

/* ---- layout ---------------------------------------------------------------------------------------- */

struct otter_fl_layout {
    size_t n;
    otter_fl_param *p; /* names owned */
    size_t *off;       /* n + 1 offsets; off[n] = numel */
    ot_strmap index;   /* name -> entry */
};

void otter_fl_layout_free(otter_fl_layout *l) {
    if (!l) return;
    for (size_t i = 0; i < l->n; i++) ot_free((char *)l->p[i].name);
    ot_free(l->p);
    ot_free(l->off);
    ot_strmap_free(&l->index);
    ot_free(l);
}

static void shape_str(const otter_fl_param *p, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "%s [", otter_dtype_name(p->dtype));
    for (int d = 0; d < p->rank && k < cap; d++)
        k += (size_t)snprintf(buf + k, cap - k, d ? ",%lld" : "%lld", (long long)p->dims[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

otter_status otter_fl_layout_create(otter_fl_layout **out, size_t n, const otter_fl_param *params) {
    if (!out || (n && !params)) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_layout_create: NULL argument");
    *out = NULL;
    otter_fl_layout *l = ot_calloc(1, sizeof *l);
    if (!l) return OT_NOMEM();
    l->p = ot_calloc(n ? n : 1, sizeof *l->p);
    l->off = ot_calloc(n + 1, sizeof *l->off);
    if (!l->p || !l->off) {
        otter_fl_layout_free(l);
        return OT_NOMEM();
    }
    otter_status st = OTTER_OK;
    size_t total = 0;
    for (size_t i = 0; i < n && st == OTTER_OK; i++) {
        const otter_fl_param *q = &params[i];
        if (ot_str_empty(q->name)) {
            st = ot_error(OTTER_ERR_INVALID, "parameter layout: entry %zu has no name", i);
            break;
        }
        if (q->rank < 0 || q->rank > OTTER_MAX_RANK) {
            st = ot_error(OTTER_ERR_INVALID, "parameter '%s': rank %d outside [0, %d]", q->name, q->rank,
                          OTTER_MAX_RANK);
            break;
        }
        size_t numel = 1;
        for (int d = 0; d < q->rank; d++) {
            if (q->dims[d] < 0 || !ot_mul_size(numel, (size_t)q->dims[d], &numel)) {
                st = ot_error(OTTER_ERR_INVALID, "parameter '%s': bad dimension %lld", q->name, (long long)q->dims[d]);
                break;
            }
        }
        if (st != OTTER_OK) break;
        if (ot_strmap_get(&l->index, q->name, NULL)) {
            st = ot_error(OTTER_ERR_INVALID, "parameter '%s' appears twice in the layout", q->name);
            break;
        }
        l->p[i] = *q;
        l->p[i].name = ot_strdup(q->name);
        if (!l->p[i].name) {
            st = OT_NOMEM();
            break;
        }
        l->n = i + 1;
        st = ot_strmap_put(&l->index, l->p[i].name, (intptr_t)i);
        l->off[i] = total;
        if (total + numel < total) st = ot_error(OTTER_ERR_INVALID, "parameter layout: too many elements");
        total += numel;
    }
    if (st != OTTER_OK) {
        otter_fl_layout_free(l);
        return st;
    }
    l->n = n;
    l->off[n] = total;
    *out = l;
    return OTTER_OK;
}

typedef struct sess_entry {
    size_t offset, idx;
} sess_entry;

static int cmp_sess_entry(const void *a, const void *b) {
    const sess_entry *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

otter_status otter_fl_layout_from_session(otter_fl_layout **out, const otter_training_session *s) {
    if (!out || !s) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_layout_from_session: NULL argument");
    *out = NULL;
    size_t count = otter_training_param_count(s);
    otter_fl_param *ps = ot_calloc(count ? count : 1, sizeof *ps);
    sess_entry *e = ot_calloc(count ? count : 1, sizeof *e);
    if (!ps || !e) {
        ot_free(ps), ot_free(e);
        return OT_NOMEM();
    }
    otter_status st = OTTER_OK;
    size_t k = 0;
    for (size_t i = 0; i < count && st == OTTER_OK; i++) {
        const char *name = otter_training_param_name(s, i);
        otter_param_info info;
        st = otter_training_describe_param(s, name, &info);
        if (st != OTTER_OK || !info.trainable || info.offset_trainable == SIZE_MAX) continue;
        ps[k] = (otter_fl_param){.name = name, .dtype = info.dtype, .rank = info.rank};
        memcpy(ps[k].dims, info.dims, sizeof ps[k].dims);
        e[k] = (sess_entry){info.offset_trainable, k};
        k++;
    }
    otter_fl_param *sorted = NULL;
    if (st == OTTER_OK) {
        qsort(e, k, sizeof *e, cmp_sess_entry);
        sorted = ot_calloc(k ? k : 1, sizeof *sorted);
        if (!sorted) st = OT_NOMEM();
    }
    for (size_t i = 0; i < k && st == OTTER_OK; i++) sorted[i] = ps[e[i].idx];
    if (st == OTTER_OK) st = otter_fl_layout_create(out, k, sorted);
    /* The trainable slab must be exactly these parameters back to back. */
    for (size_t i = 0; i < k && st == OTTER_OK; i++)
        if ((*out)->off[i] != e[i].offset)
            st = ot_error(OTTER_ERR_INVALID, "parameter '%s' sits at offset %zu of the trainable buffer, expected %zu",
                          sorted[i].name, e[i].offset, (*out)->off[i]);
    if (st == OTTER_OK && (*out)->off[k] != otter_training_params_size(s, true))
        st = ot_error(OTTER_ERR_INVALID, "the trainable buffer holds %zu values, its parameters %zu",
                      otter_training_params_size(s, true), (*out)->off[k]);
    if (st != OTTER_OK && *out) {
        otter_fl_layout_free(*out);
        *out = NULL;
    }
    ot_free(ps), ot_free(e), ot_free(sorted);
    return st;
}

size_t otter_fl_layout_count(const otter_fl_layout *l) { return l ? l->n : 0; }
const otter_fl_param *otter_fl_layout_at(const otter_fl_layout *l, size_t i) { return l && i < l->n ? &l->p[i] : NULL; }
size_t otter_fl_layout_offset(const otter_fl_layout *l, size_t i) { return l && i < l->n ? l->off[i] : SIZE_MAX; }
size_t otter_fl_layout_numel(const otter_fl_layout *l) { return l ? l->off[l->n] : 0; }

static bool same_param(const otter_fl_param *a, const otter_fl_param *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* map[i] = global entry of other's entry i. map may be NULL. */
static otter_status layout_map(const otter_fl_layout *g, const otter_fl_layout *o, size_t *map) {
    for (size_t i = 0; i < o->n; i++) {
        intptr_t gi;
        if (!ot_strmap_get(&g->index, o->p[i].name, &gi))
            return ot_error(OTTER_ERR_INVALID, "parameter '%s' of the update is not in the global model", o->p[i].name);
        if (!same_param(&g->p[gi], &o->p[i])) {
            char a[160], b[160];
            shape_str(&o->p[i], a, sizeof a);
            shape_str(&g->p[gi], b, sizeof b);
            return ot_error(OTTER_ERR_INVALID, "parameter '%s': the update has %s, the global model %s", o->p[i].name,
                            a, b);
        }
        if (map) map[i] = (size_t)gi;
    }
    if (o->n != g->n) /* names are distinct in both, so some global parameter is missing */
        for (size_t i = 0; i < g->n; i++)
            if (!ot_strmap_get(&o->index, g->p[i].name, NULL))
                return ot_error(OTTER_ERR_INVALID, "parameter '%s' of the global model is missing from the update",
                                g->p[i].name);
    return OTTER_OK;
}

otter_status otter_fl_layout_match(const otter_fl_layout *global, const otter_fl_layout *other) {
    if (!global || !other) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_layout_match: NULL layout");
    return layout_map(global, other, NULL);
}

/* ---- strategy -------------------------------------------------------------------------------------- */

static const char *const KIND_NAMES[] = {"fedavg", "fedavgm", "fedadam", "fedyogi", "median", "trimmed-mean"};
#define N_KINDS (sizeof KIND_NAMES / sizeof KIND_NAMES[0])

const char *otter_fl_strategy_name(otter_fl_strategy_kind kind) {
    return (unsigned)kind < N_KINDS ? KIND_NAMES[kind] : "unknown";
}

otter_fl_strategy otter_fl_strategy_default(otter_fl_strategy_kind kind) {
    otter_fl_strategy s = {
        .kind = kind, .momentum = 0.9, .beta1 = 0.9, .beta2 = 0.99, .tau = 1e-3, .trim_fraction = 0.1};
    s.server_lr = (kind == OTTER_FL_FEDADAM || kind == OTTER_FL_FEDYOGI) ? 0.01 : 1.0;
    return s;
}

static bool in01(double v) { return v >= 0 && v < 1; }

otter_status otter_fl_strategy_check(const otter_fl_strategy *s) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "strategy: NULL");
    if (!(s->clip_norm >= 0) || !isfinite(s->clip_norm))
        return ot_error(OTTER_ERR_ARGUMENT, "clip norm %g must be >= 0", s->clip_norm);
    if (s->clip_norm > 0 && s->kind != OTTER_FL_FEDAVG && s->kind != OTTER_FL_FEDAVGM)
        return ot_error(OTTER_ERR_ARGUMENT, "clip norm: for fedavg and fedavgm, not %s",
                        otter_fl_strategy_name(s->kind));
    switch (s->kind) {
    case OTTER_FL_FEDAVG:
    case OTTER_FL_MEDIAN:
        return OTTER_OK;
    case OTTER_FL_FEDAVGM:
        if (!(s->server_lr > 0) || !isfinite(s->server_lr))
            return ot_error(OTTER_ERR_ARGUMENT, "fedavgm: server lr %g must be > 0", s->server_lr);
        if (!in01(s->momentum)) return ot_error(OTTER_ERR_ARGUMENT, "fedavgm: momentum %g outside [0, 1)", s->momentum);
        return OTTER_OK;
    case OTTER_FL_FEDADAM:
    case OTTER_FL_FEDYOGI: {
        const char *n = otter_fl_strategy_name(s->kind);
        if (!(s->server_lr > 0) || !isfinite(s->server_lr))
            return ot_error(OTTER_ERR_ARGUMENT, "%s: server lr %g must be > 0", n, s->server_lr);
        if (!in01(s->beta1)) return ot_error(OTTER_ERR_ARGUMENT, "%s: beta1 %g outside [0, 1)", n, s->beta1);
        if (!in01(s->beta2)) return ot_error(OTTER_ERR_ARGUMENT, "%s: beta2 %g outside [0, 1)", n, s->beta2);
        if (!(s->tau > 0) || !isfinite(s->tau))
            return ot_error(OTTER_ERR_ARGUMENT, "%s: tau %g must be > 0", n, s->tau);
        return OTTER_OK;
    }
    case OTTER_FL_TRIMMED_MEAN:
        if (!(s->trim_fraction >= 0 && s->trim_fraction < 0.5))
            return ot_error(OTTER_ERR_ARGUMENT, "trimmed-mean: fraction %g outside [0, 0.5)", s->trim_fraction);
        return OTTER_OK;
    }
    return ot_error(OTTER_ERR_ARGUMENT, "strategy: unknown kind %d", (int)s->kind);
}

otter_status otter_fl_strategy_parse(const char *text, otter_fl_strategy *out) {
    if (!text || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_strategy_parse: NULL argument");
    const char *colon = strchr(text, ':');
    size_t kl = colon ? (size_t)(colon - text) : strlen(text);
    size_t kind = N_KINDS;
    for (size_t i = 0; i < N_KINDS; i++)
        if (strlen(KIND_NAMES[i]) == kl && strncmp(KIND_NAMES[i], text, kl) == 0) kind = i;
    if (kind == N_KINDS)
        return ot_error(OTTER_ERR_ARGUMENT,
                        "unknown strategy '%.*s' (fedavg, fedavgm, fedadam, fedyogi, median, trimmed-mean)", (int)kl,
                        text);
    otter_fl_strategy s = otter_fl_strategy_default((otter_fl_strategy_kind)kind);
    const char *p = colon ? colon + 1 : NULL;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq) return ot_error(OTTER_ERR_ARGUMENT, "strategy option '%.*s' is not KEY=VALUE", (int)len, p);
        size_t klen = (size_t)(eq - p);
        char num[64];
        size_t vlen = len - klen - 1;
        if (vlen == 0 || vlen >= sizeof num)
            return ot_error(OTTER_ERR_ARGUMENT, "strategy option '%.*s': bad value", (int)len, p);
        memcpy(num, eq + 1, vlen);
        num[vlen] = '\0';
        char *nend;
        double v = strtod(num, &nend);
        if (*nend || !isfinite(v))
            return ot_error(OTTER_ERR_ARGUMENT, "strategy option '%.*s': '%s' is not a number", (int)len, p, num);
        double *field = NULL;
#define KEY(str) (klen == strlen(str) && strncmp(p, str, klen) == 0)
        switch (s.kind) {
        case OTTER_FL_FEDAVG:
            if (KEY("clip_norm")) field = &s.clip_norm;
            break;
        case OTTER_FL_FEDAVGM:
            if (KEY("clip_norm")) field = &s.clip_norm;
            if (KEY("lr")) field = &s.server_lr;
            if (KEY("momentum")) field = &s.momentum;
            break;
        case OTTER_FL_FEDADAM:
        case OTTER_FL_FEDYOGI:
            if (KEY("lr")) field = &s.server_lr;
            if (KEY("beta1")) field = &s.beta1;
            if (KEY("beta2")) field = &s.beta2;
            if (KEY("tau")) field = &s.tau;
            break;
        case OTTER_FL_TRIMMED_MEAN:
            if (KEY("fraction")) field = &s.trim_fraction;
            break;
        default:
            break;
        }
#undef KEY
        if (!field)
            return ot_error(OTTER_ERR_ARGUMENT, "strategy %s takes no option '%.*s'", KIND_NAMES[kind], (int)klen, p);
        *field = v;
        p = end ? end + 1 : NULL;
    }
    OT_TRY(otter_fl_strategy_check(&s));
    *out = s;
    return OTTER_OK;
}

void otter_fl_strategy_format(const otter_fl_strategy *s, char *buf, size_t cap) {
    if (!buf || !cap) return;
    const char *n = otter_fl_strategy_name(s->kind);
    switch (s->kind) {
    case OTTER_FL_FEDAVGM:
        snprintf(buf, cap, "%s:lr=%.17g,momentum=%.17g", n, s->server_lr, s->momentum);
        break;
    case OTTER_FL_FEDADAM:
    case OTTER_FL_FEDYOGI:
        snprintf(buf, cap, "%s:lr=%.17g,beta1=%.17g,beta2=%.17g,tau=%.17g", n, s->server_lr, s->beta1, s->beta2,
                 s->tau);
        break;
    case OTTER_FL_TRIMMED_MEAN:
        snprintf(buf, cap, "%s:fraction=%.17g", n, s->trim_fraction);
        break;
    default:
        snprintf(buf, cap, "%s", n);
        break;
    }
    size_t len = strlen(buf);
    if (s->clip_norm > 0 && len < cap)
        snprintf(buf + len, cap - len, "%sclip_norm=%.17g", strchr(buf, ':') ? "," : ":", s->clip_norm);
}

/* ---- aggregator ------------------------------------------------------------------------------------ */

struct otter_fl_aggregator {
    otter_fl_layout *layout;
    otter_fl_strategy st;
    size_t n;
    float *global; /* [n] */
    double *m, *v; /* [n] server state: FEDAVGM velocity in m; FEDADAM/FEDYOGI moments */
    int64_t round; /* rounds finished */
    bool in_round;
    double *acc; /* [n] sum of n_i (x_i - x): the mean-based strategies */
    float *rows; /* [cap_rows][n] the round's updates: MEDIAN, TRIMMED_MEAN */
    size_t cap_rows;
    size_t n_updates, n_clipped;
    int64_t n_examples, loss_examples;
    double loss_sum;
};

static bool keeps_rows(const otter_fl_strategy *s) {
    return s->kind == OTTER_FL_MEDIAN || s->kind == OTTER_FL_TRIMMED_MEAN;
}
static size_t n_state(const otter_fl_strategy *s) {
    return s->kind == OTTER_FL_FEDAVGM ? 1 : (s->kind == OTTER_FL_FEDADAM || s->kind == OTTER_FL_FEDYOGI) ? 2 : 0;
}

void otter_fl_aggregator_free(otter_fl_aggregator *a) {
    if (!a) return;
    otter_fl_layout_free(a->layout);
    ot_free(a->global), ot_free(a->m), ot_free(a->v), ot_free(a->acc), ot_free(a->rows);
    ot_free(a);
}

static otter_status check_finite(const otter_fl_layout *l, const float *x, const char *what, const char *who) {
    for (size_t i = 0; i < l->n; i++)
        for (size_t k = l->off[i]; k < l->off[i + 1]; k++)
            if (!isfinite(x[k]))
                return ot_error(OTTER_ERR_INVALID, "%s%s%s: parameter '%s' element %zu is %s", what,
                                who ? " from " : "", who ? who : "", l->p[i].name, k - l->off[i],
                                isnan(x[k]) ? "NaN" : "infinite");
    return OTTER_OK;
}

static otter_status copy_layout(const otter_fl_layout *src, otter_fl_layout **out) {
    return otter_fl_layout_create(out, src->n, src->p);
}

/* An aggregator with layout (owned on success), strategy and zeroed vectors. */
static otter_status agg_alloc(otter_fl_aggregator **out, otter_fl_layout *layout, const otter_fl_strategy *strategy) {
    OT_TRY(otter_fl_strategy_check(strategy));
    for (size_t i = 0; i < layout->n; i++)
        if (layout->p[i].dtype != OTTER_DTYPE_FLOAT)
            return ot_error(OTTER_ERR_UNSUPPORTED, "parameter '%s' is %s; federated averaging takes float32 parameters",
                            layout->p[i].name, otter_dtype_name(layout->p[i].dtype));
    otter_fl_aggregator *a = ot_calloc(1, sizeof *a);
    if (!a) return OT_NOMEM();
    a->st = *strategy;
    a->n = layout->off[layout->n];
    size_t n1 = a->n ? a->n : 1;
    a->global = ot_calloc(n1, sizeof *a->global);
    size_t ns = n_state(strategy);
    if (ns >= 1) a->m = ot_calloc(n1, sizeof *a->m);
    if (ns >= 2) a->v = ot_calloc(n1, sizeof *a->v);
    if (!keeps_rows(strategy)) a->acc = ot_calloc(n1, sizeof *a->acc);
    if (!a->global || (ns >= 1 && !a->m) || (ns >= 2 && !a->v) || (!keeps_rows(strategy) && !a->acc)) {
        otter_fl_aggregator_free(a);
        return OT_NOMEM();
    }
    a->layout = layout;
    *out = a;
    return OTTER_OK;
}

otter_status otter_fl_aggregator_create(otter_fl_aggregator **out, const otter_fl_layout *layout, const float *global,
                                        size_t n, const otter_fl_strategy *strategy) {
    if (!out || !layout || !strategy || (n && !global))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_create: NULL argument");
    *out = NULL;
    if (n != otter_fl_layout_numel(layout))
        return ot_error(OTTER_ERR_ARGUMENT, "global vector has %zu values, its layout %zu", n,
                        otter_fl_layout_numel(layout));
    OT_TRY(check_finite(layout, global, "global model", NULL));
    otter_fl_layout *l = NULL;
    OT_TRY(copy_layout(layout, &l));
    otter_fl_aggregator *a = NULL;
    otter_status st = agg_alloc(&a, l, strategy);
    if (st != OTTER_OK) {
        otter_fl_layout_free(l);
        return st;
    }
    if (n) memcpy(a->global, global, n * sizeof *global);
    if (a->v) /* Reddi et al.: v_{-1} >= tau^2 */
        for (size_t i = 0; i < n; i++) a->v[i] = a->st.tau * a->st.tau;
    *out = a;
    return OTTER_OK;
}

const otter_fl_layout *otter_fl_aggregator_layout(const otter_fl_aggregator *a) { return a->layout; }
const otter_fl_strategy *otter_fl_aggregator_strategy(const otter_fl_aggregator *a) { return &a->st; }
const float *otter_fl_aggregator_global(const otter_fl_aggregator *a, size_t *n) {
    if (n) *n = a->n;
    return a->global;
}
int64_t otter_fl_aggregator_round(const otter_fl_aggregator *a) { return a->round; }
bool otter_fl_aggregator_in_round(const otter_fl_aggregator *a) { return a->in_round; }
size_t otter_fl_aggregator_num_updates(const otter_fl_aggregator *a) { return a->n_updates; }

otter_status otter_fl_aggregator_set_global(otter_fl_aggregator *a, const float *global, size_t n) {
    if (!a || (n && !global)) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_set_global: NULL argument");
    if (a->in_round) return ot_error(OTTER_ERR_INVALID, "set_global: round %lld is open", (long long)a->round + 1);
    if (n != a->n) return ot_error(OTTER_ERR_ARGUMENT, "set_global: %zu values, the model has %zu", n, a->n);
    OT_TRY(check_finite(a->layout, global, "global model", NULL));
    if (n) memcpy(a->global, global, n * sizeof *global);
    return OTTER_OK;
}

static void round_reset(otter_fl_aggregator *a) {
    a->n_updates = a->n_clipped = 0;
    a->n_examples = a->loss_examples = 0;
    a->loss_sum = 0;
    if (a->acc && a->n) memset(a->acc, 0, a->n * sizeof *a->acc);
}

otter_status otter_fl_aggregator_begin_round(otter_fl_aggregator *a) {
    if (!a) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_begin_round: NULL aggregator");
    if (a->in_round) return ot_error(OTTER_ERR_INVALID, "round %lld is already open", (long long)a->round + 1);
    round_reset(a);
    a->in_round = true;
    return OTTER_OK;
}

void otter_fl_aggregator_abort_round(otter_fl_aggregator *a) {
    if (!a) return;
    round_reset(a);
    a->in_round = false;
}

/* Entries of the update in global order: map[i] is the global entry of update entry i. */
static otter_status update_check(const otter_fl_aggregator *a, const otter_fl_update *u, size_t *map) {
    if (!a || !u) return ot_error(OTTER_ERR_ARGUMENT, "update: NULL argument");
    const char *who = u->client ? u->client : "a client";
    const otter_fl_layout *l = u->layout ? u->layout : a->layout;
    if (u->layout) {
        otter_status st = layout_map(a->layout, u->layout, map);
        if (st != OTTER_OK) return ot_error_context(st, "update from %s: ", who);
    } else if (map)
        for (size_t i = 0; i < a->layout->n; i++) map[i] = i;
    size_t want = l->off[l->n];
    if (u->n != want)
        return ot_error(OTTER_ERR_INVALID, "update from %s has %zu values, the model %zu", who, u->n, want);
    if (u->n && !u->params) return ot_error(OTTER_ERR_ARGUMENT, "update from %s: NULL values", who);
    if (u->num_examples <= 0)
        return ot_error(OTTER_ERR_INVALID, "update from %s: number of examples %lld must be > 0", who,
                        (long long)u->num_examples);
    if (u->num_examples > INT64_MAX - a->n_examples)
        return ot_error(OTTER_ERR_INVALID, "update from %s: number of examples %lld overflows the round's total", who,
                        (long long)u->num_examples);
    if (u->has_loss && !isfinite(u->loss))
        return ot_error(OTTER_ERR_INVALID, "update from %s: loss is %s", who, isnan(u->loss) ? "NaN" : "infinite");
    return check_finite(l, u->params, "update", who);
}

otter_status otter_fl_aggregator_check_update(const otter_fl_aggregator *a, const otter_fl_update *u) {
    if (!a || !u) return ot_error(OTTER_ERR_ARGUMENT, "update: NULL argument");
    size_t *map = ot_calloc(a->layout->n + 1, sizeof *map);
    if (!map) return OT_NOMEM();
    otter_status st = update_check(a, u, map);
    ot_free(map);
    return st;
}

otter_status otter_fl_aggregator_add_update(otter_fl_aggregator *a, const otter_fl_update *u) {
    if (!a || !u) return ot_error(OTTER_ERR_ARGUMENT, "update: NULL argument");
    if (!a->in_round)
        return ot_error(OTTER_ERR_INVALID, "update: no round is open (round %lld finished)", (long long)a->round);
    size_t *map = ot_calloc(a->layout->n + 1, sizeof *map);
    if (!map) return OT_NOMEM();
    otter_status st = update_check(a, u, map);
    const otter_fl_layout *l = u->layout ? u->layout : a->layout, *g = a->layout;
    float *row = NULL;
    if (st == OTTER_OK && keeps_rows(&a->st)) {
        if (a->n_updates == a->cap_rows) {
            size_t cap = a->cap_rows ? 2 * a->cap_rows : 16, bytes;
            if (!ot_mul_size(cap, a->n ? a->n : 1, &bytes) || !ot_mul_size(bytes, sizeof(float), &bytes))
                st = OT_NOMEM();
            float *r = st == OTTER_OK ? ot_realloc(a->rows, bytes) : NULL;
            if (!r && st == OTTER_OK) st = OT_NOMEM();
            if (r) a->rows = r, a->cap_rows = cap;
        }
        if (st == OTTER_OK) row = a->rows + a->n_updates * a->n;
    }
    if (st == OTTER_OK) {
        double w = (double)u->num_examples;
        if (a->st.clip_norm > 0) { /* w becomes n_i * scale: the delta enters the sum scaled */
            double norm2 = 0;
            for (size_t i = 0; i < l->n; i++) {
                const float *src = u->params + l->off[i], *x = a->global + g->off[map[i]];
                for (size_t k = 0; k < l->off[i + 1] - l->off[i]; k++) {
                    double d = (double)src[k] - (double)x[k];
                    norm2 += d * d;
                }
            }
            if (sqrt(norm2) > a->st.clip_norm) w *= a->st.clip_norm / sqrt(norm2), a->n_clipped++;
        }
        for (size_t i = 0; i < l->n; i++) {
            size_t gi = map[i], len = l->off[i + 1] - l->off[i];
            const float *src = u->params + l->off[i];
            if (row)
                memcpy(row + g->off[gi], src, len * sizeof(float));
            else {
                double *acc = a->acc + g->off[gi];
                const float *x = a->global + g->off[gi];
                for (size_t k = 0; k < len; k++) acc[k] += w * ((double)src[k] - (double)x[k]);
            }
        }
        a->n_updates++;
        a->n_examples += u->num_examples;
        if (u->has_loss) a->loss_sum += (double)u->num_examples * u->loss, a->loss_examples += u->num_examples;
    }
    ot_free(map);
    return st;
}

/* Rearrange a[0..n) so that a[k] is the k-th smallest, with a[<k] <= a[k] <= a[>k] (k < n): Wirth's
 * selection (Hoare partitions around the middle element). */
static void select_kth(float *a, size_t n, size_t k) {
    ptrdiff_t lo = 0, hi = (ptrdiff_t)n - 1, kk = (ptrdiff_t)k;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        ptrdiff_t i = lo, j = hi;
        do {
            while (a[i] < pivot) i++;
            while (pivot < a[j]) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j], a[j] = t;
                i++, j--;
            }
        } while (i <= j);
        if (j < kk) lo = i;
        if (kk < i) hi = j;
    }
}

/* The robust strategies' value of coordinate column col[0..m) (rearranged). */
static double robust_value(const otter_fl_strategy *s, float *col, size_t m) {
    if (s->kind == OTTER_FL_MEDIAN) {
        select_kth(col, m, m / 2);
        double hi = col[m / 2];
        if (m % 2) return hi;
        float lo = col[0];
        for (size_t i = 1; i < m / 2; i++)
            if (col[i] > lo) lo = col[i];
        return 0.5 * ((double)lo + hi);
    }
    size_t k = (size_t)floor(s->trim_fraction * (double)m);
    if (k > 0) {
        select_kth(col, m, k - 1);                 /* col[0..k): the k smallest */
        select_kth(col + k, m - k, m - 2 * k - 1); /* col[k..m-k): the middle m-2k */
    }
    double sum = 0;
    for (size_t i = k; i < m - k; i++) sum += col[i];
    return sum / (double)(m - k - k);
}

/* One coordinate of the mean-based strategies: new x (double) and state from delta d. */
static double server_step(const otter_fl_strategy *s, double x, double d, double *m, double *v) {
    switch (s->kind) {
    case OTTER_FL_FEDAVGM:
        *m = s->momentum * *m + d;
        return x + s->server_lr * *m;
    case OTTER_FL_FEDADAM:
    case OTTER_FL_FEDYOGI: {
        *m = s->beta1 * *m + (1 - s->beta1) * d;
        double d2 = d * d;
        if (s->kind == OTTER_FL_FEDADAM)
            *v = s->beta2 * *v + (1 - s->beta2) * d2;
        else {
            double diff = *v - d2;
            *v = *v - (1 - s->beta2) * d2 * (double)((diff > 0) - (diff < 0));
        }
        return x + s->server_lr * *m / (sqrt(*v) + s->tau);
    }
    default:
        return x + d;
    }
}

otter_status otter_fl_aggregator_finish_round(otter_fl_aggregator *a, otter_fl_round_summary *summary) {
    if (!a) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_finish_round: NULL aggregator");
    if (!a->in_round)
        return ot_error(OTTER_ERR_INVALID, "finish: no round is open (round %lld finished)", (long long)a->round);
    if (a->n_updates == 0)
        return ot_error(OTTER_ERR_INVALID, "round %lld has no updates to aggregate", (long long)a->round + 1);
    size_t n = a->n, m = a->n_updates;
    float *col = NULL;
    if (keeps_rows(&a->st) && !(col = ot_calloc(m, sizeof *col))) return OT_NOMEM();
    /* Pass 1 checks that every new value is a finite float; pass 2 commits. A round that would overflow
     * leaves the model and the state as they were. */
    double inv = 1.0 / (double)a->n_examples, norm2 = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t j = 0; j < n; j++) {
            double nx, mj = a->m ? a->m[j] : 0, vj = a->v ? a->v[j] : 0;
            if (col) {
                for (size_t i = 0; i < m; i++) col[i] = a->rows[i * n + j];
                nx = robust_value(&a->st, col, m);
            } else
                nx = server_step(&a->st, a->global[j], a->acc[j] * inv, &mj, &vj);
            float f = (float)nx;
            if (pass == 0) {
                /* The velocity is in parameter units: beyond float range it would overflow every later
                 * round, honest ones included, so it is refused like a non-finite value. */
                if (!isfinite(f) || !(fabs(mj) <= FLT_MAX) || !isfinite(vj)) {
                    ot_free(col);
                    size_t e = 0;
                    while (e + 1 < a->layout->n && a->layout->off[e + 1] <= j) e++;
                    otter_status err = ot_error(
                        OTTER_ERR_INVALID,
                        "round %lld: the aggregate of parameter '%s' element %zu is not finite (%s %g); the round's "
                        "%zu updates are dropped, the model and the strategy state are unchanged",
                        (long long)a->round + 1, a->layout->p[e].name, j - a->layout->off[e],
                        isfinite(f) ? "momentum" : "value", isfinite(f) ? mj : nx, m);
                    otter_fl_aggregator_abort_round(a);
                    return err;
                }
                continue;
            }
            double dx = (double)f - (double)a->global[j];
            norm2 += dx * dx;
            a->global[j] = f;
            if (a->m) a->m[j] = mj;
            if (a->v) a->v[j] = vj;
        }
    }
    ot_free(col);
    a->round++;
    if (summary)
        *summary =
            (otter_fl_round_summary){.round = a->round,
                                     .num_updates = m,
                                     .num_examples = a->n_examples,
                                     .has_loss = a->loss_examples > 0,
                                     .mean_loss = a->loss_examples > 0 ? a->loss_sum / (double)a->loss_examples : 0.0,
                                     .update_norm = sqrt(norm2),
                                     .clipped = a->n_clipped};
    round_reset(a);
    a->in_round = false;
    return OTTER_OK;
}

/* ---- state file ------------------------------------------------------------------------------------ */

#define STATE_MAGIC   "OTFLSTAT"
#define STATE_VERSION 2u /* 2: clip_norm after the other hyperparameters; 1 is read too */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t len) {
    if (b->oom) return;
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + len) cap *= 2;
        unsigned char *q = ot_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, src, len);
    b->n += len;
}
static void put_u64(wbuf *b, uint64_t v) {
    unsigned char t[8];
    for (int i = 0; i < 8; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, 8);
}
static void put_u32(wbuf *b, uint32_t v) {
    unsigned char t[4];
    for (int i = 0; i < 4; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, 4);
}
static void put_f64(wbuf *b, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    put_u64(b, u);
}
static void put_f32(wbuf *b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    put_u32(b, u);
}

otter_status otter_fl_aggregator_save_to_memory(const otter_fl_aggregator *a, void **data, size_t *size) {
    if (!a || !data || !size) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_save_to_memory: NULL argument");
    wbuf b = {0};
    put(&b, STATE_MAGIC, 8);
    put_u32(&b, STATE_VERSION);
    put_u32(&b, (uint32_t)a->st.kind);
    const double hp[] = {a->st.server_lr, a->st.momentum,      a->st.beta1,    a->st.beta2,
                         a->st.tau,       a->st.trim_fraction, a->st.clip_norm};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) put_f64(&b, hp[i]);
    put_u64(&b, (uint64_t)a->round);
    put_u64(&b, (uint64_t)a->layout->n);
    for (size_t i = 0; i < a->layout->n; i++) {
        const otter_fl_param *p = &a->layout->p[i];
        size_t len = strlen(p->name);
        put_u32(&b, (uint32_t)len);
        put(&b, p->name, len);
        put_u32(&b, (uint32_t)p->dtype);
        put_u32(&b, (uint32_t)p->rank);
        for (int d = 0; d < p->rank; d++) put_u64(&b, (uint64_t)p->dims[d]);
    }
    put_u64(&b, (uint64_t)a->n);
    for (size_t j = 0; j < a->n; j++) put_f32(&b, a->global[j]);
    size_t ns = n_state(&a->st);
    put_u32(&b, (uint32_t)ns);
    for (size_t s = 0; s < ns; s++) {
        const double *vec = s == 0 ? a->m : a->v;
        for (size_t j = 0; j < a->n; j++) put_f64(&b, vec[j]);
    }
    if (!b.oom) put_u64(&b, ot_fnv1a(OT_FNV1A_OFFSET, b.p, b.n));
    if (b.oom) {
        ot_free(b.p);
        return OT_NOMEM();
    }
    *data = b.p;
    *size = b.n;
    return OTTER_OK;
}

otter_status otter_fl_aggregator_save(const otter_fl_aggregator *a, const char *path) {
    if (!path) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_save: NULL path");
    void *data = NULL;
    size_t size = 0;
    OT_TRY(otter_fl_aggregator_save_to_memory(a, &data, &size));
    otter_status st = ot_write_file_atomic(path, data, size);
    ot_free(data);
    return st;
}

typedef struct rbuf {
    const unsigned char *p;
    size_t n, at;
    bool short_read;
} rbuf;

static bool get(rbuf *r, void *dst, size_t len) {
    if (r->short_read || len > r->n - r->at) {
        r->short_read = true;
        if (dst) memset(dst, 0, len);
        return false;
    }
    if (dst) memcpy(dst, r->p + r->at, len);
    r->at += len;
    return true;
}
static uint64_t get_u64(rbuf *r) {
    unsigned char t[8];
    get(r, t, 8);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | t[i];
    return v;
}
static uint32_t get_u32(rbuf *r) {
    unsigned char t[4];
    get(r, t, 4);
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | t[i];
    return v;
}
static double get_f64(rbuf *r) {
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, 8);
    return v;
}
static float get_f32(rbuf *r) {
    uint32_t u = get_u32(r);
    float v;
    memcpy(&v, &u, 4);
    return v;
}

otter_status otter_fl_aggregator_load_from_memory(otter_fl_aggregator **out, const void *data, size_t size) {
    if (!out || (size && !data))
        return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_load_from_memory: NULL argument");
    *out = NULL;
    const unsigned char *bytes = data;
    if (size < 8 + 8 || memcmp(bytes, STATE_MAGIC, 8) != 0)
        return ot_error(OTTER_ERR_INVALID, "not an otter federated state (magic '%s' missing)", STATE_MAGIC);
    rbuf r = {bytes, size - 8, 8, false};
    uint64_t sum = 0;
    for (int i = 7; i >= 0; i--) sum = (sum << 8) | bytes[size - 8 + (size_t)i];
    if (sum != ot_fnv1a(OT_FNV1A_OFFSET, bytes, size - 8))
        return ot_error(OTTER_ERR_INVALID, "federated state: checksum mismatch (truncated or corrupted)");
    uint32_t version = get_u32(&r);
    if (version != STATE_VERSION && version != 1)
        return ot_error(OTTER_ERR_UNSUPPORTED, "federated state version %u (this otter reads %u)", version,
                        STATE_VERSION);
    otter_fl_strategy st = {.kind = (otter_fl_strategy_kind)get_u32(&r)};
    st.server_lr = get_f64(&r), st.momentum = get_f64(&r), st.beta1 = get_f64(&r), st.beta2 = get_f64(&r);
    st.tau = get_f64(&r), st.trim_fraction = get_f64(&r);
    if (version >= 2) st.clip_norm = get_f64(&r);
    int64_t round = (int64_t)get_u64(&r);
    uint64_t np = get_u64(&r);
    if (r.short_read || np > (r.n - r.at) / 12)
        return ot_error(OTTER_ERR_INVALID, "federated state: %llu parameters don't fit in the file",
                        (unsigned long long)np);
    otter_fl_param *ps = ot_calloc(np ? np : 1, sizeof *ps);
    if (!ps) return OT_NOMEM();
    otter_status status = OTTER_OK;
    for (uint64_t i = 0; i < np && status == OTTER_OK; i++) {
        uint32_t len = get_u32(&r);
        char *name = len <= r.n - r.at ? ot_calloc(len + 1, 1) : NULL;
        if (!name || !get(&r, name, len)) {
            ot_free(name);
            status = r.short_read || !name ? ot_error(OTTER_ERR_INVALID, "federated state: truncated at parameter %llu",
                                                      (unsigned long long)i)
                                           : OT_NOMEM();
            break;
        }
        ps[i].name = name;
        ps[i].dtype = (otter_dtype)get_u32(&r);
        uint32_t rank = get_u32(&r);
        if (rank > OTTER_MAX_RANK) {
            status = ot_error(OTTER_ERR_INVALID, "federated state: parameter '%s' has rank %u", name, rank);
            break;
        }
        ps[i].rank = (int)rank;
        for (uint32_t d = 0; d < rank; d++) ps[i].dims[d] = (int64_t)get_u64(&r);
        if (r.short_read) status = ot_error(OTTER_ERR_INVALID, "federated state: truncated at parameter '%s'", name);
    }
    otter_fl_layout *l = NULL;
    if (status == OTTER_OK && (status = otter_fl_layout_create(&l, (size_t)np, ps)) != OTTER_OK)
        ot_error_context(status, "federated state: "); /* the reads above name the state themselves */
    for (uint64_t i = 0; i < np; i++) ot_free((char *)ps[i].name);
    ot_free(ps);
    if (status != OTTER_OK) return status;
    /* Sizes before allocation: the global vector and the state vectors must be in the file. */
    size_t numel = otter_fl_layout_numel(l), need;
    if (status == OTTER_OK &&
        (!ot_mul_size(numel, 4 + 8 * (otter_fl_strategy_check(&st) == OTTER_OK ? n_state(&st) : 0), &need) ||
         need > r.n - r.at))
        status = ot_error(OTTER_ERR_INVALID, "federated state: a layout of %zu values doesn't fit in the file", numel);
    if (status != OTTER_OK) {
        otter_fl_layout_free(l);
        return status;
    }
    otter_fl_aggregator *a = NULL;
    status = agg_alloc(&a, l, &st);
    if (status != OTTER_OK) {
        otter_fl_layout_free(l);
        return ot_error_context(status, "federated state: ");
    }
    uint64_t n = get_u64(&r);
    if (n != a->n || (r.n - r.at) / 4 < n)
        status = ot_error(OTTER_ERR_INVALID, "federated state: %llu values for a layout of %zu", (unsigned long long)n,
                          a->n);
    for (size_t j = 0; status == OTTER_OK && j < a->n; j++) a->global[j] = get_f32(&r);
    uint32_t ns = status == OTTER_OK ? get_u32(&r) : 0;
    if (status == OTTER_OK && ns != n_state(&st))
        status = ot_error(OTTER_ERR_INVALID, "federated state: %u state vectors for %s (needs %zu)", ns,
                          otter_fl_strategy_name(st.kind), n_state(&st));
    for (uint32_t s = 0; status == OTTER_OK && s < ns; s++) {
        double *vec = s == 0 ? a->m : a->v;
        for (size_t j = 0; j < a->n && status == OTTER_OK; j++) {
            vec[j] = get_f64(&r);
            /* what finish_round lets through: a velocity within float range, a non-negative second moment */
            if (!(s == 0 ? fabs(vec[j]) <= FLT_MAX : vec[j] >= 0 && isfinite(vec[j])))
                status =
                    ot_error(OTTER_ERR_INVALID, "federated state: strategy state %u element %zu is %g", s, j, vec[j]);
        }
    }
    if (status == OTTER_OK && (r.short_read || r.at != r.n))
        status = ot_error(OTTER_ERR_INVALID, "federated state: %s", r.short_read ? "truncated" : "trailing bytes");
    if (status == OTTER_OK) status = check_finite(l, a->global, "federated state: global model", NULL);
    if (status != OTTER_OK) {
        otter_fl_aggregator_free(a);
        return status;
    }
    a->round = round;
    *out = a;
    return OTTER_OK;
}

otter_status otter_fl_aggregator_load(otter_fl_aggregator **out, const char *path) {
    if (!out || !path) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_aggregator_load: NULL argument");
    void *data = NULL;
    size_t size = 0;
    OT_TRY(ot_read_file(path, &data, &size));
    otter_status st = otter_fl_aggregator_load_from_memory(out, data, size);
    ot_free(data);
    if (st != OTTER_OK) return ot_error_context(st, "'%s': ", path);
    return OTTER_OK;
}

/* ---- client selection ------------------------------------------------------------------------------ */

size_t otter_fl_sample_clients(size_t num_clients, double fraction, uint64_t seed, int64_t round, size_t *out) {
    if (num_clients == 0 || !out) return 0;
    if (!(fraction > 0)) fraction = 0;
    if (fraction > 1) fraction = 1;
    size_t m = (size_t)floor(fraction * (double)num_clients + 1e-9);
    if (m < 1) m = 1;
    if (m > num_clients) m = num_clients;
    ot_rng r = {seed ^ (0x632be59bd9b4e019ull * (uint64_t)(round + 1))};
    ot_rng_next(&r);
    for (size_t i = 0; i < num_clients; i++) out[i] = i;
    for (size_t i = 0; i < m; i++) { /* partial Fisher-Yates */
        size_t j = i + (size_t)ot_rng_below(&r, (uint64_t)(num_clients - i));
        size_t t = out[i];
        out[i] = out[j], out[j] = t;
    }
    for (size_t i = 1; i < m; i++) { /* insertion sort of the m picked */
        size_t v = out[i], k = i;
        while (k > 0 && out[k - 1] > v) out[k] = out[k - 1], k--;
        out[k] = v;
    }
    return m;
}
