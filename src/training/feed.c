/* Feeding a dataset's batches to a training session's user inputs (inputs then targets, or an npy dataset's
 * arrays one to one), and the evaluation of a whole dataset with the eval model. */
#include <math.h>
#include <string.h>

#include "core/core.h"
#include "training/training_internal.h"

static const char *graph_name(otter_training_graph g) { return g == OTTER_EVAL_GRAPH ? "eval" : "training"; }

/* Class labels -> one-hot rows of c classes in f->onehot (grown as needed). */
static otter_status one_hot(const otter_tensor *y, int64_t n, int64_t c, const char *target, ot_training_feed *f) {
    int64_t d[2] = {n, c};
    if (!f->onehot || f->onehot->dims[0] < n) {
        otter_tensor_free(f->onehot);
        f->onehot = NULL;
        OT_TRY(otter_tensor_create(&f->onehot, NULL, OTTER_DTYPE_FLOAT, 2, d));
    }
    float *o = f->onehot->data;
    memset(o, 0, (size_t)(n * c) * sizeof(float));
    const int64_t *l = y->data;
    for (int64_t i = 0; i < n; i++) {
        if (l[i] < 0 || l[i] >= c)
            return ot_error(OTTER_ERR_INVALID, "label %lld of batch row %lld is outside [0, %lld) for target '%s'",
                            (long long)l[i], (long long)i, (long long)c, target);
        o[i * c + l[i]] = 1.0f;
    }
    f->yv = *f->onehot;
    f->yv.dims[0] = n;
    f->yv.owns_data = false;
    return OTTER_OK;
}

otter_status ot_training_feed_batch(const otter_training_session *s, otter_training_graph g, const otter_tensor *x,
                                    const otter_tensor *y, ot_training_feed *f) {
    if (otter_training_input_count(s, g) != 2)
        return ot_error(OTTER_ERR_UNSUPPORTED,
                        "the %s model takes %zu user inputs; a dataset feeds two (inputs and targets)", graph_name(g),
                        otter_training_input_count(s, g));
    int64_t n = x->dims[0];
    f->xv = *x;
    f->yv = *y;
    f->xv.owns_data = f->yv.owns_data = false;
    f->xv.name = f->yv.name = NULL;
    int64_t per = 1;
    for (int i = 1; i < x->rank; i++) per *= x->dims[i];
    const otter_type *tx = otter_training_input_type(s, g, 0), *ty = otter_training_input_type(s, g, 1);
    const char *nx = otter_training_input_name(s, g, 0), *ny = otter_training_input_name(s, g, 1);
    if (tx && tx->kind == OTTER_TYPE_TENSOR && tx->rank >= 1) {
        int64_t want = 1;
        bool fixed = true;
        for (int i = 1; i < tx->rank; i++) {
            if (tx->dims[i].value < 0) fixed = false;
            want *= tx->dims[i].value;
        }
        if (fixed && want != per)
            return ot_error(OTTER_ERR_INVALID,
                            "each data sample has %lld values, the model input '%s' takes %lld per sample",
                            (long long)per, nx, (long long)want);
        if (fixed) {
            f->xv.rank = tx->rank;
            f->xv.dims[0] = n;
            for (int i = 1; i < tx->rank; i++) f->xv.dims[i] = tx->dims[i].value;
        }
    }
    bool want_float = ty && ty->kind == OTTER_TYPE_TENSOR && ty->has_elem_type && otter_dtype_is_float(ty->elem_type);
    if (want_float && y->dtype == OTTER_DTYPE_INT64) {
        int64_t c = ty->rank >= 2 ? ty->dims[ty->rank - 1].value : -1;
        if (c <= 0)
            return ot_error(OTTER_ERR_UNSUPPORTED, "the model's target '%s' is float with an unknown class count", ny);
        return one_hot(y, n, c, ny, f);
    }
    if (ty && ty->has_elem_type && ty->elem_type == OTTER_DTYPE_INT64 && y->dtype != OTTER_DTYPE_INT64)
        return ot_error(OTTER_ERR_INVALID, "the model's target '%s' takes class labels, the data has float targets",
                        ny);
    return OTTER_OK;
}

void ot_training_feed_free(ot_training_feed *f) {
    otter_tensor_free(f->onehot);
    f->onehot = NULL;
    for (size_t i = 0; i < f->n_cols; i++) otter_tensor_free(f->cols[i]);
    ot_free(f->cols);
    f->cols = NULL;
    f->n_cols = 0;
}

bool otter_training_feeds_columns(const otter_training_session *s, const otter_dataset *ds) {
    if (!s || otter_dataset_column_count(ds) == 0) return false;
    /* Arrays that don't read as inputs and targets have no other way in. */
    if (otter_dataset_target_numel(ds) == 0) return true;
    /* Two that do feed a float first input through the conversions (normalization, one-hot targets). */
    const otter_type *t = otter_training_input_type(s, OTTER_TRAINING_GRAPH, 0);
    return t && t->has_elem_type && !otter_dtype_is_float(t->elem_type);
}

static int64_t per_sample(const otter_tensor *t) {
    int64_t n = 1;
    for (int i = 1; i < t->rank; i++) n *= t->dims[i];
    return n;
}

otter_status ot_training_feed_columns_init(const otter_training_session *s, otter_training_graph g,
                                           const otter_dataset *ds, int64_t batch_size, ot_training_feed *f) {
    size_t n_in = otter_training_input_count(s, g), n_cols = otter_dataset_column_count(ds);
    if (n_in != n_cols)
        return ot_error(OTTER_ERR_INVALID, "the %s model takes %zu inputs (%s%s), %s holds %zu arrays", graph_name(g),
                        n_in, n_in ? otter_training_input_name(s, g, 0) : "", n_in > 1 ? ", ..." : "",
                        otter_dataset_description(ds), n_cols);
    if (!(f->cols = ot_calloc(n_in ? n_in : 1, sizeof *f->cols))) return OT_NOMEM();
    f->n_cols = n_in;
    for (size_t i = 0; i < n_in; i++) {
        const otter_tensor *c = otter_dataset_column(ds, i);
        const char *name = otter_training_input_name(s, g, i), *file = otter_dataset_column_file(ds, i);
        const otter_type *t = otter_training_input_type(s, g, i);
        if (t && t->has_elem_type && t->elem_type != c->dtype)
            return ot_error(OTTER_ERR_INVALID, "input '%s' takes %s, %s holds %s", name, otter_dtype_name(t->elem_type),
                            file, otter_dtype_name(c->dtype));
        int64_t dims[OTTER_MAX_RANK] = {batch_size};
        int rank = c->rank;
        memcpy(dims + 1, c->dims + 1, (size_t)(c->rank - 1) * sizeof *dims);
        bool fixed = t && t->kind == OTTER_TYPE_TENSOR && t->rank >= 1;
        int64_t want = 1;
        for (int k = 1; fixed && k < t->rank; k++) {
            fixed = t->dims[k].value >= 0;
            want *= t->dims[k].value;
        }
        if (fixed && want != per_sample(c))
            return ot_error(OTTER_ERR_INVALID, "input '%s' takes %lld values per sample, %s has %lld", name,
                            (long long)want, file, (long long)per_sample(c));
        if (fixed) {
            rank = t->rank;
            for (int k = 1; k < rank; k++) dims[k] = t->dims[k].value;
        }
        OT_TRY(otter_tensor_create(&f->cols[i], name, c->dtype, rank, dims));
    }
    return OTTER_OK;
}

otter_status ot_training_feed_columns(const otter_dataset *ds, const int64_t *idx, int64_t n, ot_training_feed *f) {
    for (size_t i = 0; i < f->n_cols; i++) {
        f->cols[i]->dims[0] = n; /* a partial batch uses the front of the buffer */
        OT_TRY(otter_dataset_gather_column(ds, i, idx, n, f->cols[i]));
    }
    return OTTER_OK;
}

otter_status ot_training_check_batch_dim(const otter_training_session *s, otter_training_graph g, int64_t batch_size,
                                         int64_t samples, bool drop_last) {
    const otter_type *t = otter_training_input_type(s, g, 0);
    if (!t || t->kind != OTTER_TYPE_TENSOR || t->rank < 1 || t->dims[0].value < 0) return OTTER_OK;
    const char *name = otter_training_input_name(s, g, 0);
    int64_t fixed = t->dims[0].value;
    if (fixed != batch_size)
        return ot_error(OTTER_ERR_INVALID,
                        "the %s model's input '%s' takes batches of exactly %lld samples (its first dimension is "
                        "fixed), not %lld",
                        graph_name(g), name, (long long)fixed, (long long)batch_size);
    if (!drop_last && samples % batch_size)
        return ot_error(OTTER_ERR_INVALID,
                        "the %s model's input '%s' takes batches of exactly %lld samples, and the last batch of each "
                        "epoch holds %lld: drop it with --drop-last (drop_last), or export the model with a dynamic "
                        "batch axis",
                        graph_name(g), name, (long long)fixed, (long long)(samples % batch_size));
    return OTTER_OK;
}

/* Correct predictions of an additional output shaped [n, C] (argmax against the labels); false when the
 * output or the targets don't allow it. */
static bool count_correct(const otter_tensor *out, const otter_tensor *labels, int64_t n, int64_t *hits) {
    if (!out || out->dtype != OTTER_DTYPE_FLOAT || out->rank != 2 || out->dims[0] != n ||
        labels->dtype != OTTER_DTYPE_INT64)
        return false;
    int64_t c = out->dims[1];
    const float *p = out->data;
    const int64_t *l = labels->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (p[i * c + k] > p[i * c + best]) best = k;
        *hits += best == l[i];
    }
    return true;
}

otter_status otter_training_evaluate(otter_training_session *s, const otter_dataset *ds, int64_t batch_size,
                                     otter_eval_result *r) {
    if (!s || !ds || !r) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_evaluate: NULL argument");
    memset(r, 0, sizeof *r);
    if (!otter_training_has_eval(s)) return ot_error(OTTER_ERR_INVALID, "the session has no eval model");
    otter_batch_iter *it = NULL;
    otter_tensor *x = NULL, *y = NULL, *out[2] = {NULL, NULL};
    ot_training_feed feed = {0};
    otter_batch_options bo = {.batch_size = batch_size > 0 ? batch_size : 256};
    otter_status st = otter_batch_iter_create(&it, ds, &bo);
    bool columns = otter_training_feeds_columns(s, ds);
    if (st == OTTER_OK && columns)
        st = ot_training_feed_columns_init(s, OTTER_EVAL_GRAPH, ds, bo.batch_size, &feed);
    else if (st == OTTER_OK)
        st = otter_batch_iter_alloc(it, &x, &y);
    size_t n_out = otter_training_output_count(s, OTTER_EVAL_GRAPH) >= 2 ? 2 : 1;
    double loss_sum = 0;
    int64_t hits = 0;
    bool acc_ok = n_out == 2;
    while (st == OTTER_OK) {
        int64_t cnt = 0;
        const int64_t *idx;
        st = columns ? otter_batch_iter_next_indices(it, &idx, &cnt) : otter_batch_iter_next(it, x, y, &cnt);
        if (st != OTTER_OK || cnt == 0) break;
        st = columns ? ot_training_feed_columns(ds, idx, cnt, &feed)
                     : ot_training_feed_batch(s, OTTER_EVAL_GRAPH, x, y, &feed);
        const otter_tensor *pair[2] = {&feed.xv, &feed.yv};
        size_t n_in = columns ? feed.n_cols : 2;
        if (st == OTTER_OK)
            st = otter_training_eval_step(s, n_in, NULL, columns ? (const otter_tensor *const *)feed.cols : pair, n_out,
                                          out);
        if (st != OTTER_OK) break;
        loss_sum += (double)((const float *)out[0]->data)[0] * (double)cnt;
        /* The labels: the targets, or the last array of a dataset fed column by column. */
        const otter_tensor *labels = !columns ? y : feed.n_cols ? feed.cols[feed.n_cols - 1] : NULL;
        acc_ok = acc_ok && labels && count_correct(out[1], labels, cnt, &hits);
        r->samples += cnt;
    }
    if (st == OTTER_OK && r->samples) {
        r->loss = loss_sum / (double)r->samples;
        r->has_accuracy = acc_ok;
        r->accuracy = acc_ok ? (double)hits / (double)r->samples : 0.0;
    }
    if (st != OTTER_OK) ot_error_context(st, "evaluating on %s: ", otter_dataset_description(ds));
    otter_tensor_free(out[0]), otter_tensor_free(out[1]);
    otter_tensor_free(x), otter_tensor_free(y);
    ot_training_feed_free(&feed);
    otter_batch_iter_free(it);
    return st;
}
