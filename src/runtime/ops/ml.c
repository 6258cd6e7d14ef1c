/* Operators of the ai.onnx.ml domain: ArrayFeatureExtractor, Binarizer, LabelEncoder and the tree
 * ensembles (TreeEnsemble of ai.onnx.ml 5; TreeEnsembleRegressor / TreeEnsembleClassifier, which
 * scikit-learn exports write, on the same evaluator).
 *
 * Semantics follow the spec (Operators-ml.md) and ONNX's reference implementation; these
 * operators postdate or sit outside Debian's ONNX 1.12 schemas, so attributes are read with the
 * explicit defaults the spec gives. Tree structures come from attributes and are validated before
 * any evaluation: a hostile model (an index out of range, a cycle) is an error naming the node. */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

/* ---- Binarizer ------------------------------------------------------------------------------ */

/* Y = X > threshold ? 1 : 0, in X's type (NaN gives 0). */
otter_status ot_kernel_binarizer(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    if (x->dtype != OTTER_DTYPE_FLOAT && x->dtype != OTTER_DTYPE_DOUBLE && x->dtype != OTTER_DTYPE_INT64 &&
        x->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_bad_type(ctx, 0, x->dtype);
    double threshold = ot_ctx_attr_float_or(ctx, "threshold", 0.0f);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) ot_set_f64(y->data, y->dtype, i, ot_get_f64(x->data, x->dtype, i) > threshold);
    return OTTER_OK;
}

/* ---- ArrayFeatureExtractor ------------------------------------------------------------------ */

/* Z[..., k] = X[..., Y[k]] over X's last axis; Y's values in any shape, taken flat. X of rank 1
 * gives Z [1, count], as the reference does. */
otter_status ot_kernel_array_feature_extractor(ot_kernel_ctx *ctx) {
    const otter_tensor *x, *idx;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    OT_TRY(ot_ctx_need_input(ctx, 1, &idx));
    if (x->dtype != OTTER_DTYPE_FLOAT && x->dtype != OTTER_DTYPE_DOUBLE && x->dtype != OTTER_DTYPE_INT64 &&
        x->dtype != OTTER_DTYPE_INT32 && x->dtype != OTTER_DTYPE_STRING)
        return ot_ctx_bad_type(ctx, 0, x->dtype);
    if (idx->dtype != OTTER_DTYPE_INT64) return ot_ctx_bad_type(ctx, 1, idx->dtype);
    if (x->rank < 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have rank >= 1", ot_ctx_input_name(ctx, 0));
    int64_t width = x->dims[x->rank - 1], count = otter_tensor_numel(idx);
    const int64_t *index = idx->data;
    for (int64_t k = 0; k < count; k++)
        if (index[k] < 0 || index[k] >= width)
            return ot_ctx_error(
                ctx, OTTER_ERR_INVALID, "index %lld of input 1 '%s' is outside [0, %lld), the last axis of '%s'",
                (long long)index[k], ot_ctx_input_name(ctx, 1), (long long)width, ot_ctx_input_name(ctx, 0));
    int64_t dims[OTTER_MAX_RANK] = {1};
    int rank = x->rank == 1 ? 2 : x->rank;
    if (x->rank > 1) memcpy(dims, x->dims, (size_t)(x->rank - 1) * sizeof *dims);
    dims[rank - 1] = count;
    otter_tensor *z = ot_ctx_output(ctx, 0, x->dtype, rank, dims);
    if (!z) return ctx->output_status;
    int64_t rows = width ? otter_tensor_numel(x) / width : 0;
    if (x->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *in = x->data;
        otter_bytes *out = z->data;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t k = 0; k < count; k++) {
                const otter_bytes *s = &in[r * width + index[k]];
                otter_bytes *d = &out[r * count + k];
                d->data = ot_strndup(s->len ? s->data : "", s->len);
                if (!d->data) return OT_NOMEM();
                d->len = s->len;
            }
        return OTTER_OK;
    }
    size_t es = otter_dtype_size(x->dtype);
    const char *in = x->data;
    char *out = z->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < count; k++)
            memcpy(out + (size_t)(r * count + k) * es, in + (size_t)(r * width + index[k]) * es, es);
    return OTTER_OK;
}

/* ---- LabelEncoder --------------------------------------------------------------------------- */

/* A list of keys or values: from a keys_* / values_* / default_* attribute or a tensor attribute.
 * Strings are otter_bytes, keys_floats floats, keys_int64s int64s, tensors their own dtype. */
typedef struct le_list {
    otter_dtype dtype;
    const void *data;
    int64_t n;
    const char *attr; /* the attribute it came from, for errors */
} le_list;

enum le_kind { LE_STRING, LE_INT, LE_REAL, LE_OTHER };
static enum le_kind le_kind_of(otter_dtype t) {
    switch (t) {
    case OTTER_DTYPE_STRING:
        return LE_STRING;
    case OTTER_DTYPE_INT16:
    case OTTER_DTYPE_INT32:
    case OTTER_DTYPE_INT64:
        return LE_INT;
    case OTTER_DTYPE_FLOAT:
    case OTTER_DTYPE_DOUBLE:
        return LE_REAL;
    default:
        return LE_OTHER;
    }
}

/* The one keys_* (prefix "keys") or values_* attribute the node sets. */
static otter_status le_find(const ot_kernel_ctx *ctx, const char *prefix, le_list *out) {
    static const char *const suffix[] = {"strings", "int64s", "floats", "tensor"};
    int found = 0;
    for (int k = 0; k < 4; k++) {
        char name[32];
        snprintf(name, sizeof name, "%s_%s", prefix, suffix[k]);
        const otter_attr *a = otter_node_attr(ctx->node, name);
        if (!a) continue;
        found++;
        switch (k) {
        case 0:
            *out = (le_list){OTTER_DTYPE_STRING, a->strings, (int64_t)a->n_strings, a->name};
            break;
        case 1:
            *out = (le_list){OTTER_DTYPE_INT64, a->ints, (int64_t)a->n_ints, a->name};
            break;
        case 2:
            *out = (le_list){OTTER_DTYPE_FLOAT, a->floats, (int64_t)a->n_floats, a->name};
            break;
        default:
            if (!a->t || a->t->rank > 1 || le_kind_of(a->t->dtype) == LE_OTHER)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                    "attribute '%s' must be a 1-D tensor of strings, int16/32/64, float or double",
                                    name);
            *out = (le_list){a->t->dtype, a->t->data, otter_tensor_numel(a->t), a->name};
        }
    }
    if (found != 1)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "exactly one %s_* attribute must be set, not %d", prefix, found);
    return OTTER_OK;
}

/* Comparable form of element i of a list or tensor of kind `kind`. */
typedef struct le_key {
    union {
        const otter_bytes *s;
        int64_t i;
        double f;
    } v;
    int64_t pos; /* position in the keys list */
} le_key;

static le_key le_key_at(enum le_kind kind, otter_dtype dtype, const void *data, int64_t i) {
    le_key k = {.pos = i};
    if (kind == LE_STRING)
        k.v.s = (const otter_bytes *)data + i;
    else if (kind == LE_INT)
        k.v.i = ot_get_i64(data, dtype, i);
    else
        k.v.f = ot_get_f64(data, dtype, i);
    return k;
}

static int cmp_bytes(const otter_bytes *a, const otter_bytes *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    return c ? c : (a->len > b->len) - (a->len < b->len);
}
/* Orders: value, then NaNs (all equal to one another: a NaN key matches any NaN), then position. */
static int cmp_real(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
    return (a > b) - (a < b);
}
static int cmp_key_value(enum le_kind kind, const le_key *a, const le_key *b) {
    if (kind == LE_STRING) return cmp_bytes(a->v.s, b->v.s);
    if (kind == LE_INT) return (a->v.i > b->v.i) - (a->v.i < b->v.i);
    return cmp_real(a->v.f, b->v.f);
}
#define LE_CMP(KIND, NAME)                                                                                             \
    static int NAME(const void *pa, const void *pb) {                                                                  \
        const le_key *a = pa, *b = pb;                                                                                 \
        int c = cmp_key_value(KIND, a, b);                                                                             \
        return c ? c : (a->pos > b->pos) - (a->pos < b->pos);                                                          \
    }
LE_CMP(LE_STRING, cmp_key_string)
LE_CMP(LE_INT, cmp_key_int)
LE_CMP(LE_REAL, cmp_key_real)

/* Store element i of `from` as element o of y (same kind; numbers converted to y's dtype). */
static otter_status le_store(otter_tensor *y, int64_t o, const le_list *from, int64_t i) {
    if (y->dtype == OTTER_DTYPE_STRING) {
        const otter_bytes *s = (const otter_bytes *)from->data + i;
        otter_bytes *d = (otter_bytes *)y->data + o;
        d->data = ot_strndup(s->len ? s->data : "", s->len);
        if (!d->data) return OT_NOMEM();
        d->len = s->len;
    } else if (le_kind_of(y->dtype) == LE_INT) {
        int64_t v = ot_get_i64(from->data, from->dtype, i);
        ot_convert((char *)y->data + (size_t)o * otter_dtype_size(y->dtype), y->dtype, &v, OTTER_DTYPE_INT64, 1);
    } else {
        ot_set_f64(y->data, y->dtype, o, ot_get_f64(from->data, from->dtype, i));
    }
    return OTTER_OK;
}

otter_status ot_kernel_label_encoder(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    le_list keys, values;
    OT_TRY(le_find(ctx, "keys", &keys));
    OT_TRY(le_find(ctx, "values", &values));
    if (keys.n != values.n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "'%s' has %lld entries but '%s' has %lld", keys.attr,
                            (long long)keys.n, values.attr, (long long)values.n);
    enum le_kind kind = le_kind_of(keys.dtype);
    if (le_kind_of(x->dtype) != kind) return ot_ctx_bad_type(ctx, 0, x->dtype);
    /* The default: default_tensor, else the default_* attribute of the values' kind (spec defaults). */
    static const otter_bytes unused = {"_Unused", 7};
    int64_t def_int = ot_ctx_attr_int_or(ctx, "default_int64", -1);
    float def_float = ot_ctx_attr_float_or(ctx, "default_float", -0.0f);
    otter_bytes def_string = unused;
    const otter_attr *ds = otter_node_attr(ctx->node, "default_string");
    if (ds && ds->type == OTTER_ATTR_STRING) def_string = ds->s;
    enum le_kind vkind = le_kind_of(values.dtype);
    le_list def = vkind == LE_STRING ? (le_list){OTTER_DTYPE_STRING, &def_string, 1, "default_string"}
                  : vkind == LE_INT  ? (le_list){OTTER_DTYPE_INT64, &def_int, 1, "default_int64"}
                                     : (le_list){OTTER_DTYPE_FLOAT, &def_float, 1, "default_float"};
    const otter_attr *dt = otter_node_attr(ctx->node, "default_tensor");
    if (dt) {
        if (!dt->t || otter_tensor_numel(dt->t) != 1 || dt->t->dtype != values.dtype)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'default_tensor' must hold one %s, as '%s' does",
                                otter_dtype_name(values.dtype), values.attr);
        def = (le_list){dt->t->dtype, dt->t->data, 1, "default_tensor"};
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, values.dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(x);
    /* Keys sorted by (key, position): the last of equal keys wins, as the spec says. */
    le_key *sorted = ot_ctx_scratch(ctx, (size_t)(keys.n ? keys.n : 1) * sizeof *sorted);
    if (!sorted) return OT_NOMEM();
    for (int64_t k = 0; k < keys.n; k++) sorted[k] = le_key_at(kind, keys.dtype, keys.data, k);
    qsort(sorted, (size_t)keys.n, sizeof *sorted,
          kind == LE_STRING ? cmp_key_string
          : kind == LE_INT  ? cmp_key_int
                            : cmp_key_real);
    for (int64_t i = 0; i < n; i++) {
        le_key probe = le_key_at(kind, x->dtype, x->data, i);
        int64_t lo = 0, hi = keys.n; /* first key greater than probe */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (cmp_key_value(kind, &sorted[mid], &probe) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo > 0 && cmp_key_value(kind, &sorted[lo - 1], &probe) == 0)
            OT_TRY(le_store(y, i, &values, sorted[lo - 1].pos));
        else
            OT_TRY(le_store(y, i, &def, 0));
    }
    return OTTER_OK;
}

/* LabelEncoder-1: strings to their index in classes_strings (default_int64 when absent), int64 to the
 * string at that index (default_string when out of range). */
otter_status ot_kernel_label_encoder_v1(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_need_input(ctx, 0, &x));
    const otter_attr *classes = otter_node_attr(ctx->node, "classes_strings");
    if (!classes || classes->type != OTTER_ATTR_STRINGS)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'classes_strings' (a list of strings) is required");
    const otter_bytes *names = classes->strings;
    int64_t n_names = (int64_t)classes->n_strings, n = otter_tensor_numel(x);
    if (x->dtype == OTTER_DTYPE_STRING) {
        int64_t def = ot_ctx_attr_int_or(ctx, "default_int64", -1);
        otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT64, x->rank, x->dims);
        if (!y) return ctx->output_status;
        const otter_bytes *in = x->data;
        int64_t *out = y->data;
        /* The first matching label wins (the spec's "index at which it is found"). */
        for (int64_t i = 0; i < n; i++) {
            out[i] = def;
            for (int64_t k = 0; k < n_names; k++)
                if (cmp_bytes(&in[i], &names[k]) == 0) {
                    out[i] = k;
                    break;
                }
        }
        return OTTER_OK;
    }
    if (x->dtype != OTTER_DTYPE_INT64) return ot_ctx_bad_type(ctx, 0, x->dtype);
    static const otter_bytes unused = {"_Unused", 7};
    const otter_attr *ds = otter_node_attr(ctx->node, "default_string");
    const otter_bytes *def = ds && ds->type == OTTER_ATTR_STRING ? &ds->s : &unused;
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_STRING, x->rank, x->dims);
    if (!y) return ctx->output_status;
    const int64_t *in = x->data;
    otter_bytes *out = y->data;
    for (int64_t i = 0; i < n; i++) {
        const otter_bytes *s = in[i] >= 0 && in[i] < n_names ? &names[in[i]] : def;
        out[i].data = ot_strndup(s->len ? s->data : "", s->len);
        if (!out[i].data) return OT_NOMEM();
        out[i].len = s->len;
    }
    return OTTER_OK;
}

/* ---- tree ensembles ------------------------------------------------------------------------- */

enum { BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, BRANCH_MEMBER };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };
enum { POST_NONE, POST_SOFTMAX, POST_LOGISTIC, POST_SOFTMAX_ZERO, POST_PROBIT };

/* A validated forest in one layout for every tree operator: interior nodes branch to a node or a
 * leaf; a leaf holds votes (target, weight). */
typedef struct forest {
    int64_t n_nodes, n_leaves, n_roots, n_targets;
    const int64_t *feature; /* [n_nodes] */
    double *split;          /* [n_nodes] threshold (not for BRANCH_MEMBER) */
    uint8_t *mode, *missing_true;
    int64_t *child[2];      /* [n_nodes] 0: false branch, 1: true branch */
    uint8_t *child_leaf[2]; /* [n_nodes] whether child[] is a leaf index */
    int64_t *set_range[2];  /* [n_nodes] BRANCH_MEMBER: the set is set_values[begin, end) */
    double *set_values;
    int64_t *roots;       /* [n_roots] */
    uint8_t *root_leaf;   /* [n_roots] */
    int64_t *vote_start;  /* [n_leaves + 1] votes of leaf l */
    int64_t *vote_target; /* [votes] */
    double *vote_weight;  /* [votes] */
    int aggregate, post;
    double no_vote;     /* MIN / MAX result of a target no leaf voted for */
    const double *base; /* [n_targets] added after aggregation, or NULL */
} forest;

static bool branch_true(const forest *f, int64_t node, double x) {
    if (isnan(x) && f->missing_true[node]) return true;
    double s = f->split[node];
    switch (f->mode[node]) {
    case BRANCH_LEQ:
        return x <= s;
    case BRANCH_LT:
        return x < s;
    case BRANCH_GTE:
        return x >= s;
    case BRANCH_GT:
        return x > s;
    case BRANCH_EQ:
        return x == s;
    case BRANCH_NEQ:
        return x != s;
    default:
        for (int64_t k = f->set_range[0][node]; k < f->set_range[1][node]; k++)
            if (x == f->set_values[k]) return true;
        return false;
    }
}

/* The leaf row `row` of X reaches in tree t; -1 when the walk exceeds n_nodes steps (a cycle). */
static int64_t tree_leaf(const forest *f, int64_t t, const void *x, otter_dtype dt, int64_t row, int64_t n_feat) {
    if (f->root_leaf[t]) return f->roots[t];
    int64_t node = f->roots[t];
    for (int64_t steps = 0; steps <= f->n_nodes; steps++) {
        int b = branch_true(f, node, ot_get_f64(x, dt, row * n_feat + f->feature[node]));
        if (f->child_leaf[b][node]) return f->child[b][node];
        node = f->child[b][node];
    }
    return -1;
}

/* ONNX's reference probit: sqrt(2) * erfinv(2p - 1) with Winitzki's erfinv approximation. */
static double probit(double p) {
    double x = 2 * p - 1, sgn = x < 0 ? -1 : 1;
    x = (1 - x) * (1 + x);
    if (x == 0) return 0;
    double lg = log(x), v = 2 / (M_PI * 0.147) + 0.5 * lg, v2 = lg / 0.147;
    return 1.41421356 * sgn * sqrt(sqrt(v * v - v2) - v);
}

static void post_transform(int post, double *s, int64_t n) {
    double mx = -INFINITY, sum = 0;
    switch (post) {
    case POST_SOFTMAX:
        for (int64_t k = 0; k < n; k++) mx = s[k] > mx ? s[k] : mx;
        for (int64_t k = 0; k < n; k++) sum += s[k] = exp(s[k] - mx);
        for (int64_t k = 0; k < n; k++) s[k] /= sum;
        break;
    case POST_SOFTMAX_ZERO: /* zeros stay zero and leave the sum */
        for (int64_t k = 0; k < n; k++) mx = s[k] > mx ? s[k] : mx;
        for (int64_t k = 0; k < n; k++)
            if (fabs(s[k]) > 1e-7)
                sum += s[k] = exp(s[k] - mx);
            else
                s[k] = 0;
        for (int64_t k = 0; k < n && sum > 0; k++) s[k] /= sum;
        break;
    case POST_LOGISTIC:
        for (int64_t k = 0; k < n; k++) {
            double e = 1 / (1 + exp(-fabs(s[k])));
            s[k] = s[k] >= 0 ? e : 1 - e;
        }
        break;
    case POST_PROBIT:
        for (int64_t k = 0; k < n; k++) s[k] = probit(s[k]);
        break;
    default:
        break;
    }
}

/* scores [N, n_targets] for X [N, F]. */
static otter_status forest_run(ot_kernel_ctx *ctx, const forest *f, const otter_tensor *x, double *scores) {
    int64_t rows = x->dims[0], n_feat = x->dims[1];
    for (int64_t i = 0; i < f->n_nodes; i++)
        if (f->feature[i] < 0 || f->feature[i] >= n_feat)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "node %lld reads feature %lld but input 0 '%s' has %lld",
                                (long long)i, (long long)f->feature[i], ot_ctx_input_name(ctx, 0), (long long)n_feat);
    uint8_t *voted = ot_ctx_scratch(ctx, (size_t)f->n_targets + 1);
    if (!voted) return OT_NOMEM();
    for (int64_t r = 0; r < rows; r++) {
        double *s = scores + r * f->n_targets;
        memset(voted, 0, (size_t)f->n_targets);
        for (int64_t k = 0; k < f->n_targets; k++) s[k] = 0;
        for (int64_t t = 0; t < f->n_roots; t++) {
            int64_t leaf = tree_leaf(f, t, x->data, x->dtype, r, n_feat);
            if (leaf < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "tree %lld has a cycle", (long long)t);
            for (int64_t v = f->vote_start[leaf]; v < f->vote_start[leaf + 1]; v++) {
                int64_t k = f->vote_target[v];
                double w = f->vote_weight[v];
                if (f->aggregate == AGG_MIN)
                    s[k] = voted[k] && s[k] < w ? s[k] : w;
                else if (f->aggregate == AGG_MAX)
                    s[k] = voted[k] && s[k] > w ? s[k] : w;
                else
                    s[k] += w;
                voted[k] = 1;
            }
        }
        for (int64_t k = 0; k < f->n_targets; k++) {
            if (f->aggregate == AGG_AVERAGE && f->n_roots) s[k] /= (double)f->n_roots;
            if ((f->aggregate == AGG_MIN || f->aggregate == AGG_MAX) && !voted[k]) s[k] = f->no_vote;
            if (f->base) s[k] += f->base[k];
        }
        post_transform(f->post, s, f->n_targets);
    }
    return OTTER_OK;
}

/* Checks every index of the forest: children, roots, votes' targets; BRANCH_MEMBER sets. */
static otter_status forest_check(const ot_kernel_ctx *ctx, const forest *f) {
    for (int64_t i = 0; i < f->n_nodes; i++) {
        if (f->mode[i] > BRANCH_MEMBER)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "node %lld has an unknown mode %d", (long long)i, f->mode[i]);
        for (int b = 0; b < 2; b++) {
            int64_t c = f->child[b][i], lim = f->child_leaf[b][i] ? f->n_leaves : f->n_nodes;
            if (c < 0 || c >= lim)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "node %lld: %s branch %lld is outside [0, %lld)",
                                    (long long)i, b ? "true" : "false", (long long)c, (long long)lim);
        }
    }
    for (int64_t t = 0; t < f->n_roots; t++)
        if (f->roots[t] < 0 || f->roots[t] >= (f->root_leaf[t] ? f->n_leaves : f->n_nodes))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "tree %lld: root %lld is out of range", (long long)t,
                                (long long)f->roots[t]);
    for (int64_t v = 0; v < f->vote_start[f->n_leaves]; v++)
        if (f->vote_target[v] < 0 || f->vote_target[v] >= f->n_targets)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "a leaf votes for target %lld, outside [0, %lld)",
                                (long long)f->vote_target[v], (long long)f->n_targets);
    return OTTER_OK;
}

static otter_status tree_float_input(const ot_kernel_ctx *ctx, const otter_tensor **x) {
    OT_TRY(ot_ctx_need_input(ctx, 0, x));
    if ((*x)->dtype != OTTER_DTYPE_FLOAT && (*x)->dtype != OTTER_DTYPE_DOUBLE && (*x)->dtype != OTTER_DTYPE_FLOAT16)
        return ot_ctx_bad_type(ctx, 0, (*x)->dtype);
    if ((*x)->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have shape [N, F]", ot_ctx_input_name(ctx, 0));
    return OTTER_OK;
}

/* A required INTS attribute of n entries (n < 0: any count, set in *n). */
static otter_status ints_attr(const ot_kernel_ctx *ctx, const char *name, int64_t *n, const int64_t **v) {
    const otter_attr *a = otter_node_attr(ctx->node, name);
    if (!a || a->type != OTTER_ATTR_INTS)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "the ints attribute '%s' is required", name);
    if (*n >= 0 && (int64_t)a->n_ints != *n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has %zu entries, expected %lld", name, a->n_ints,
                            (long long)*n);
    *n = (int64_t)a->n_ints;
    *v = a->ints;
    return OTTER_OK;
}

/* A floating-point tensor attribute as n doubles in scratch (n < 0: any count, set in *n). */
static otter_status real_tensor_attr(ot_kernel_ctx *ctx, const char *name, int64_t *n, double **v) {
    const otter_attr *a = otter_node_attr(ctx->node, name);
    if (!a || !a->t || !otter_dtype_is_float(a->t->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "the floating-point tensor attribute '%s' is required", name);
    int64_t count = otter_tensor_numel(a->t);
    if (*n >= 0 && count != *n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has %lld entries, expected %lld", name,
                            (long long)count, (long long)*n);
    *n = count;
    *v = ot_ctx_scratch(ctx, (size_t)(count ? count : 1) * sizeof **v);
    if (!*v) return OT_NOMEM();
    for (int64_t i = 0; i < count; i++) (*v)[i] = ot_get_f64(a->t->data, a->t->dtype, i);
    return OTTER_OK;
}

static uint8_t *flags_of(ot_kernel_ctx *ctx, const int64_t *v, int64_t n) {
    uint8_t *f = ot_ctx_scratch(ctx, (size_t)n + 1);
    for (int64_t i = 0; f && i < n; i++) f[i] = v ? v[i] != 0 : 0;
    return f;
}

static otter_status write_scores(ot_kernel_ctx *ctx, size_t out, otter_dtype dt, int64_t rows, int64_t n_targets,
                                 const double *scores) {
    otter_tensor *y = ot_ctx_output(ctx, out, dt, 2, (const int64_t[]){rows, n_targets});
    if (!y) return ctx->output_status;
    for (int64_t i = 0; i < rows * n_targets; i++) ot_set_f64(y->data, dt, i, scores[i]);
    return OTTER_OK;
}

/* TreeEnsemble (ai.onnx.ml 5): interior nodes and leaves in separate lists, one vote per leaf. */
otter_status ot_kernel_tree_ensemble(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(tree_float_input(ctx, &x));
    forest f = {.n_nodes = -1, .n_leaves = -1, .n_roots = -1};
    const int64_t *true_ids = NULL, *false_ids = NULL, *true_leafs = NULL, *false_leafs = NULL, *targets = NULL;
    OT_TRY(ints_attr(ctx, "nodes_featureids", &f.n_nodes, &f.feature));
    OT_TRY(ints_attr(ctx, "nodes_truenodeids", &f.n_nodes, &true_ids));
    OT_TRY(ints_attr(ctx, "nodes_falsenodeids", &f.n_nodes, &false_ids));
    OT_TRY(ints_attr(ctx, "nodes_trueleafs", &f.n_nodes, &true_leafs));
    OT_TRY(ints_attr(ctx, "nodes_falseleafs", &f.n_nodes, &false_leafs));
    OT_TRY(real_tensor_attr(ctx, "nodes_splits", &f.n_nodes, &f.split));
    OT_TRY(ints_attr(ctx, "leaf_targetids", &f.n_leaves, &targets));
    OT_TRY(real_tensor_attr(ctx, "leaf_weights", &f.n_leaves, &f.vote_weight));
    const int64_t *roots = NULL;
    OT_TRY(ints_attr(ctx, "tree_roots", &f.n_roots, &roots));
    const otter_attr *modes = otter_node_attr(ctx->node, "nodes_modes");
    if (!modes || !modes->t || modes->t->dtype != OTTER_DTYPE_UINT8 || otter_tensor_numel(modes->t) != f.n_nodes)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'nodes_modes' must be a uint8 tensor of %lld modes",
                            (long long)f.n_nodes);
    f.mode = modes->t->data;
    const otter_attr *missing = otter_node_attr(ctx->node, "nodes_missing_value_tracks_true");
    if (missing && missing->n_ints && (int64_t)missing->n_ints != f.n_nodes)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "attribute 'nodes_missing_value_tracks_true' has %zu entries, expected %lld",
                            missing->n_ints, (long long)f.n_nodes);
    f.n_targets = ot_ctx_attr_int_or(ctx, "n_targets", 1);
    f.aggregate = (int)ot_ctx_attr_int_or(ctx, "aggregate_function", AGG_SUM);
    f.post = (int)ot_ctx_attr_int_or(ctx, "post_transform", POST_NONE);
    if (f.n_targets < 1 || f.aggregate < AGG_AVERAGE || f.aggregate > AGG_MAX || f.post < POST_NONE ||
        f.post > POST_PROBIT)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "n_targets %lld, aggregate_function %d or post_transform %d is out of range",
                            (long long)f.n_targets, f.aggregate, f.post);
    f.no_vote = x->dtype == OTTER_DTYPE_DOUBLE ? DBL_MAX : x->dtype == OTTER_DTYPE_FLOAT ? FLT_MAX : 65504.0;
    if (f.aggregate == AGG_MAX) f.no_vote = -f.no_vote;
    f.missing_true = flags_of(ctx, missing && missing->n_ints ? missing->ints : NULL, f.n_nodes);
    f.child_leaf[0] = flags_of(ctx, false_leafs, f.n_nodes);
    f.child_leaf[1] = flags_of(ctx, true_leafs, f.n_nodes);
    f.child[0] = (int64_t *)false_ids;
    f.child[1] = (int64_t *)true_ids;
    f.roots = (int64_t *)roots;
    f.root_leaf = flags_of(ctx, NULL, f.n_roots);
    f.vote_start = ot_ctx_scratch(ctx, (size_t)(f.n_leaves + 1) * sizeof *f.vote_start);
    f.set_range[0] = ot_ctx_scratch(ctx, (size_t)(f.n_nodes + 1) * sizeof *f.set_range[0]);
    f.set_range[1] = ot_ctx_scratch(ctx, (size_t)(f.n_nodes + 1) * sizeof *f.set_range[1]);
    if (!f.missing_true || !f.child_leaf[0] || !f.child_leaf[1] || !f.root_leaf || !f.vote_start || !f.set_range[0] ||
        !f.set_range[1])
        return OT_NOMEM();
    for (int64_t l = 0; l <= f.n_leaves; l++) f.vote_start[l] = l;
    f.vote_target = (int64_t *)targets;
    /* BRANCH_MEMBER sets: membership_values lists them in node order, each ended by a NaN. */
    int64_t n_members = -1, next = 0;
    if (otter_node_attr(ctx->node, "membership_values"))
        OT_TRY(real_tensor_attr(ctx, "membership_values", &n_members, &f.set_values));
    for (int64_t i = 0; i < f.n_nodes; i++) {
        f.set_range[0][i] = f.set_range[1][i] = 0;
        if (f.mode[i] != BRANCH_MEMBER) continue;
        if (next >= n_members)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "node %lld is BRANCH_MEMBER but 'membership_values' has no set left for it",
                                (long long)i);
        int64_t end = next;
        while (end < n_members && !isnan(f.set_values[end])) end++;
        f.set_range[0][i] = next;
        f.set_range[1][i] = end;
        next = end + 1; /* past the NaN */
    }
    OT_TRY(forest_check(ctx, &f));
    int64_t rows = x->dims[0];
    if (rows && f.n_targets > INT64_MAX / 16 / rows)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "n_targets %lld is too large", (long long)f.n_targets);
    double *scores = ot_ctx_scratch(ctx, (size_t)(rows * f.n_targets + 1) * sizeof *scores);
    if (!scores) return OT_NOMEM();
    OT_TRY(forest_run(ctx, &f, x, scores));
    return write_scores(ctx, 0, x->dtype, rows, f.n_targets, scores);
}

/* ---- TreeEnsembleRegressor / TreeEnsembleClassifier (ai.onnx.ml 1 and 3, deprecated at 5) --------
 * One nodes_* tuple per node, identified by (tree id, node id); nodes of mode LEAF carry the votes
 * (target_* or class_* tuples naming their leaf by (tree id, node id)). Each tree's root is its
 * first node in the lists, trees run in increasing tree id, as the reference does. In the forest,
 * node i of the lists is interior node i and, when it is a LEAF, leaf i. */

typedef struct node_key {
    int64_t tree, node, index;
} node_key;

static int cmp_node_key(const void *pa, const void *pb) {
    const node_key *a = pa, *b = pb;
    if (a->tree != b->tree) return (a->tree > b->tree) - (a->tree < b->tree);
    if (a->node != b->node) return (a->node > b->node) - (a->node < b->node);
    return (a->index > b->index) - (a->index < b->index);
}

/* Index of (tree, node) in the sorted keys, or -1. */
static int64_t find_node(const node_key *keys, int64_t n, int64_t tree, int64_t node) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        node_key probe = {tree, node, INT64_MIN};
        if (cmp_node_key(&keys[mid], &probe) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && keys[lo].tree == tree && keys[lo].node == node ? keys[lo].index : -1;
}

/* A list of floats from `name` (FLOATS) or `name`_as_tensor (a double tensor), as n doubles in
 * scratch (n < 0: any count, set in *n); *v NULL when neither is set and !required. */
static otter_status legacy_reals(ot_kernel_ctx *ctx, const char *name, bool required, int64_t *n, double **v) {
    char tensor_name[64];
    snprintf(tensor_name, sizeof tensor_name, "%s_as_tensor", name);
    const otter_attr *a = otter_node_attr(ctx->node, name);
    *v = NULL;
    if (otter_node_attr(ctx->node, tensor_name)) return real_tensor_attr(ctx, tensor_name, n, v);
    if (!a) {
        if (!required) return OTTER_OK;
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' or '%s' is required", name, tensor_name);
    }
    if (*n >= 0 && (int64_t)a->n_floats != *n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' has %zu entries, expected %lld", name, a->n_floats,
                            (long long)*n);
    *n = (int64_t)a->n_floats;
    *v = ot_ctx_scratch(ctx, (size_t)(*n ? *n : 1) * sizeof **v);
    if (!*v) return OT_NOMEM();
    for (int64_t i = 0; i < *n; i++) (*v)[i] = a->floats[i];
    return OTTER_OK;
}

static int name_index(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (ot_streq(s, names[i])) return i;
    return -1;
}

/* The forest of a TreeEnsembleRegressor (votes "target") or TreeEnsembleClassifier ("class"). */
static otter_status legacy_forest(ot_kernel_ctx *ctx, const char *votes, forest *f) {
    static const char *const MODES[] = {"BRANCH_LEQ", "BRANCH_LT",  "BRANCH_GTE", "BRANCH_GT",
                                        "BRANCH_EQ",  "BRANCH_NEQ", "LEAF"};
    int64_t n = -1;
    const int64_t *tree_ids = NULL, *node_ids = NULL, *features = NULL, *true_ids = NULL, *false_ids = NULL;
    OT_TRY(ints_attr(ctx, "nodes_treeids", &n, &tree_ids));
    OT_TRY(ints_attr(ctx, "nodes_nodeids", &n, &node_ids));
    OT_TRY(ints_attr(ctx, "nodes_featureids", &n, &features));
    OT_TRY(ints_attr(ctx, "nodes_truenodeids", &n, &true_ids));
    OT_TRY(ints_attr(ctx, "nodes_falsenodeids", &n, &false_ids));
    OT_TRY(legacy_reals(ctx, "nodes_values", true, &n, &f->split));
    const otter_attr *modes = otter_node_attr(ctx->node, "nodes_modes");
    if (!modes || (int64_t)modes->n_strings != n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'nodes_modes' must list %lld modes", (long long)n);
    const otter_attr *missing = otter_node_attr(ctx->node, "nodes_missing_value_tracks_true");
    if (missing && missing->n_ints && (int64_t)missing->n_ints != n)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "attribute 'nodes_missing_value_tracks_true' has %zu entries, expected %lld",
                            missing->n_ints, (long long)n);
    f->n_nodes = f->n_leaves = n;
    node_key *keys = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *keys);
    int64_t *feature = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *feature);
    f->mode = ot_ctx_scratch(ctx, (size_t)n + 1);
    f->missing_true = flags_of(ctx, missing && missing->n_ints ? missing->ints : NULL, n);
    f->child_leaf[0] = ot_ctx_scratch(ctx, (size_t)n + 1);
    f->child_leaf[1] = ot_ctx_scratch(ctx, (size_t)n + 1);
    f->child[0] = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *f->child[0]);
    f->child[1] = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *f->child[1]);
    f->roots = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *f->roots);
    f->root_leaf = ot_ctx_scratch(ctx, (size_t)n + 1);
    f->vote_start = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *f->vote_start);
    uint8_t *is_leaf = ot_ctx_scratch(ctx, (size_t)n + 1);
    if (!keys || !feature || !f->mode || !f->missing_true || !f->child_leaf[0] || !f->child_leaf[1] || !f->child[0] ||
        !f->child[1] || !f->roots || !f->root_leaf || !f->vote_start || !is_leaf)
        return OT_NOMEM();
    for (int64_t i = 0; i < n; i++) {
        int m = name_index(modes->strings[i].data, MODES, 7);
        if (m < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "node %lld has an unknown mode '%.*s'", (long long)i,
                                (int)modes->strings[i].len, modes->strings[i].data ? modes->strings[i].data : "");
        f->mode[i] = (uint8_t)(m == 6 ? BRANCH_LEQ : m);
        is_leaf[i] = m == 6;
        feature[i] = m == 6 ? 0 : features[i]; /* a LEAF reads no feature */
        keys[i] = (node_key){tree_ids[i], node_ids[i], i};
    }
    f->feature = feature;
    qsort(keys, (size_t)n, sizeof *keys, cmp_node_key);
    for (int64_t i = 1; i < n; i++)
        if (keys[i].tree == keys[i - 1].tree && keys[i].node == keys[i - 1].node)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "tree %lld has two nodes with id %lld", (long long)keys[i].tree,
                                (long long)keys[i].node);
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) {
            int64_t c = is_leaf[i] ? i : find_node(keys, n, tree_ids[i], b ? true_ids[i] : false_ids[i]);
            if (c < 0)
                return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                    "node %lld of tree %lld: its %s branch, node %lld, does not exist",
                                    (long long)node_ids[i], (long long)tree_ids[i], b ? "true" : "false",
                                    (long long)(b ? true_ids[i] : false_ids[i]));
            f->child[b][i] = c;
            f->child_leaf[b][i] = is_leaf[c];
        }
    /* Roots: the first node of each tree, in increasing tree id (keys are sorted by tree, then node). */
    int64_t n_roots = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && keys[i].tree == keys[i - 1].tree) continue;
        int64_t first = keys[i].index;
        for (int64_t j = i; j < n && keys[j].tree == keys[i].tree; j++)
            if (keys[j].index < first) first = keys[j].index;
        f->roots[n_roots++] = first;
    }
    f->n_roots = n_roots;
    /* Votes: counted per leaf, then placed (CSR). */
    char name[32];
    int64_t n_votes = -1;
    const int64_t *v_tree = NULL, *v_node = NULL, *v_id = NULL;
    snprintf(name, sizeof name, "%s_treeids", votes);
    OT_TRY(ints_attr(ctx, name, &n_votes, &v_tree));
    snprintf(name, sizeof name, "%s_nodeids", votes);
    OT_TRY(ints_attr(ctx, name, &n_votes, &v_node));
    snprintf(name, sizeof name, "%s_ids", votes);
    OT_TRY(ints_attr(ctx, name, &n_votes, &v_id));
    double *v_weight = NULL;
    snprintf(name, sizeof name, "%s_weights", votes);
    OT_TRY(legacy_reals(ctx, name, true, &n_votes, &v_weight));
    int64_t *leaf_of = ot_ctx_scratch(ctx, (size_t)(n_votes + 1) * sizeof *leaf_of);
    int64_t *fill = ot_ctx_scratch(ctx, (size_t)(n + 1) * sizeof *fill);
    f->vote_target = ot_ctx_scratch(ctx, (size_t)(n_votes + 1) * sizeof *f->vote_target);
    f->vote_weight = ot_ctx_scratch(ctx, (size_t)(n_votes + 1) * sizeof *f->vote_weight);
    if (!leaf_of || !fill || !f->vote_target || !f->vote_weight) return OT_NOMEM();
    memset(f->vote_start, 0, (size_t)(n + 1) * sizeof *f->vote_start);
    for (int64_t v = 0; v < n_votes; v++) {
        leaf_of[v] = find_node(keys, n, v_tree[v], v_node[v]);
        if (leaf_of[v] < 0 || !is_leaf[leaf_of[v]])
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "%s vote %lld names node %lld of tree %lld, which is not a LEAF", votes, (long long)v,
                                (long long)v_node[v], (long long)v_tree[v]);
        f->vote_start[leaf_of[v] + 1]++;
    }
    for (int64_t i = 0; i < n; i++) f->vote_start[i + 1] += f->vote_start[i];
    memcpy(fill, f->vote_start, (size_t)n * sizeof *fill);
    for (int64_t v = 0; v < n_votes; v++) {
        int64_t at = fill[leaf_of[v]]++;
        f->vote_target[at] = v_id[v];
        f->vote_weight[at] = v_weight[v];
    }
    for (int64_t t = 0; t < n_roots; t++) f->root_leaf[t] = is_leaf[f->roots[t]];
    f->set_range[0] = f->set_range[1] = NULL; /* no BRANCH_MEMBER in this encoding */
    return OTTER_OK;
}

/* X [N, F] of a numeric type (the legacy operators also take int32 / int64 features). */
static otter_status legacy_input(const ot_kernel_ctx *ctx, const otter_tensor **x) {
    OT_TRY(ot_ctx_need_input(ctx, 0, x));
    otter_dtype t = (*x)->dtype;
    if (t != OTTER_DTYPE_FLOAT && t != OTTER_DTYPE_DOUBLE && t != OTTER_DTYPE_INT64 && t != OTTER_DTYPE_INT32)
        return ot_ctx_bad_type(ctx, 0, t);
    if ((*x)->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 '%s' must have shape [N, F]", ot_ctx_input_name(ctx, 0));
    return OTTER_OK;
}

/* A string attribute naming one of n choices (def when unset). */
static otter_status legacy_choice(const ot_kernel_ctx *ctx, const char *name, const char *const *choices, int n,
                                  int def, int *out) {
    const char *v = ot_ctx_attr_string_or(ctx, name, choices[def]);
    *out = name_index(v, choices, n);
    return *out >= 0 ? OTTER_OK : ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute '%s' is '%s'", name, v);
}

static const char *const POST_NAMES[] = {"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"};

static otter_status legacy_scores(ot_kernel_ctx *ctx, forest *f, const otter_tensor *x, double **scores) {
    int64_t n_base = f->n_targets;
    double *base = NULL;
    OT_TRY(legacy_reals(ctx, "base_values", false, &n_base, &base));
    f->base = base;
    OT_TRY(forest_check(ctx, f));
    int64_t rows = x->dims[0];
    if (rows && f->n_targets > INT64_MAX / 16 / rows)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "%lld targets or classes are too many", (long long)f->n_targets);
    *scores = ot_ctx_scratch(ctx, (size_t)(rows * f->n_targets + 1) * sizeof **scores);
    if (!*scores) return OT_NOMEM();
    return forest_run(ctx, f, x, *scores);
}

otter_status ot_kernel_tree_ensemble_regressor(ot_kernel_ctx *ctx) {
    static const char *const AGGREGATES[] = {"AVERAGE", "SUM", "MIN", "MAX"};
    const otter_tensor *x;
    OT_TRY(legacy_input(ctx, &x));
    forest f = {0};
    OT_TRY(legacy_forest(ctx, "target", &f));
    f.n_targets = ot_ctx_attr_int_or(ctx, "n_targets", 1);
    if (f.n_targets < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "n_targets is %lld", (long long)f.n_targets);
    OT_TRY(legacy_choice(ctx, "aggregate_function", AGGREGATES, 4, AGG_SUM, &f.aggregate));
    OT_TRY(legacy_choice(ctx, "post_transform", POST_NAMES, 5, POST_NONE, &f.post));
    f.no_vote = f.aggregate == AGG_MAX ? -FLT_MAX : FLT_MAX; /* the output is float */
    double *scores = NULL;
    OT_TRY(legacy_scores(ctx, &f, x, &scores));
    return write_scores(ctx, 0, OTTER_DTYPE_FLOAT, x->dims[0], f.n_targets, scores);
}

/* Y [N] labels (classlabels_int64s or _strings), Z [N, classes] scores. As in ONNX's reference: the
 * votes are summed onto base_values; when every vote is for one class (a binary model) column 1 is
 * that score and column 0 its complement (1 - s, or -s before a LOGISTIC / SOFTMAX transform); the
 * label is the first highest score's class. */
otter_status ot_kernel_tree_ensemble_classifier(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(legacy_input(ctx, &x));
    const otter_attr *ints = otter_node_attr(ctx->node, "classlabels_int64s"),
                     *strs = otter_node_attr(ctx->node, "classlabels_strings");
    if (ints && !ints->n_ints) ints = NULL;
    if (strs && !strs->n_strings) strs = NULL;
    if (!ints == !strs)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                            "exactly one of classlabels_int64s and classlabels_strings is required");
    int64_t n_classes = ints ? (int64_t)ints->n_ints : (int64_t)strs->n_strings;
    if (n_classes == 1 && (strs || ints->ints[0] != 1))
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED,
                            "a single class label is supported only as classlabels_int64s [1]");
    forest f = {.n_targets = n_classes, .aggregate = AGG_SUM, .post = POST_NONE};
    OT_TRY(legacy_forest(ctx, "class", &f));
    int post;
    OT_TRY(legacy_choice(ctx, "post_transform", POST_NAMES, 5, POST_NONE, &post));
    double *scores = NULL;
    OT_TRY(legacy_scores(ctx, &f, x, &scores));
    const otter_attr *ids = otter_node_attr(ctx->node, "class_ids");
    bool binary = ids->n_ints > 0;
    for (size_t v = 1; v < ids->n_ints; v++) binary = binary && ids->ints[v] == ids->ints[0];
    int64_t rows = x->dims[0], width = binary && n_classes == 1 ? 2 : n_classes;
    otter_tensor *y = ot_ctx_output(ctx, 0, ints ? OTTER_DTYPE_INT64 : OTTER_DTYPE_STRING, 1, &rows);
    if (!y) return ctx->output_status;
    otter_tensor *z = ot_ctx_output(ctx, 1, OTTER_DTYPE_FLOAT, 2, (const int64_t[]){rows, width});
    if (!z) return ctx->output_status;
    double *row = ot_ctx_scratch(ctx, (size_t)(width + 1) * sizeof *row);
    if (!row) return OT_NOMEM();
    for (int64_t r = 0; r < rows; r++) {
        const double *s = scores + r * n_classes;
        for (int64_t k = 0; k < n_classes; k++) row[k] = s[k];
        if (binary) {
            row[1] = s[0];
            row[0] = post == POST_NONE || post == POST_PROBIT ? 1 - row[1] : -row[1];
        }
        post_transform(post, row, width);
        int64_t best = 0;
        for (int64_t k = 1; k < width; k++)
            if (row[k] > row[best]) best = k;
        for (int64_t k = 0; k < width; k++) ((float *)z->data)[r * width + k] = (float)row[k];
        if (ints) {
            ((int64_t *)y->data)[r] = n_classes == 1 ? best == 1 : ints->ints[best];
        } else {
            const otter_bytes *label = &strs->strings[best];
            otter_bytes *out = (otter_bytes *)y->data + r;
            out->data = ot_strndup(label->len ? label->data : "", label->len);
            if (!out->data) return OT_NOMEM();
            out->len = label->len;
        }
    }
    return OTTER_OK;
}
