/* otter eval DIR --data SPEC [--checkpoint CKPT] [--batch-size B] [--threads N]: loss and accuracy of the
 * eval model on a dataset. Also the helpers `otter train` shares: fitting a batch to the model's inputs and
 * evaluating a whole dataset. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/training.h"

bool cli_fit_batch(const char *verb, const otter_training_session *s, otter_training_graph g, const otter_tensor *x,
                   const otter_tensor *y, cli_batch_fit *f) {
    if (otter_training_input_count(s, g) != 2) {
        fprintf(stderr, "otter %s: the %s model takes %zu user inputs; otter %s feeds two (inputs and targets)\n", verb,
                g == OTTER_EVAL_GRAPH ? "eval" : "training", otter_training_input_count(s, g), verb);
        return false;
    }
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
        if (fixed && want != per) {
            fprintf(stderr, "otter %s: each data sample has %lld values, the model input '%s' takes %lld per sample\n",
                    verb, (long long)per, nx, (long long)want);
            return false;
        }
        if (fixed) {
            f->xv.rank = tx->rank;
            f->xv.dims[0] = n;
            for (int i = 1; i < tx->rank; i++) f->xv.dims[i] = tx->dims[i].value;
        }
    }
    bool want_float = ty && ty->kind == OTTER_TYPE_TENSOR && ty->has_elem_type && otter_dtype_is_float(ty->elem_type);
    if (want_float && y->dtype == OTTER_DTYPE_INT64) { /* class labels -> one-hot targets */
        int64_t c = ty->rank >= 2 ? ty->dims[ty->rank - 1].value : -1;
        if (c <= 0) {
            fprintf(stderr, "otter %s: the model's target '%s' is float with an unknown class count\n", verb, ny);
            return false;
        }
        int64_t d[2] = {n, c};
        if (!f->onehot || f->onehot->dims[0] < n) {
            otter_tensor_free(f->onehot);
            f->onehot = NULL;
            if (otter_tensor_create(&f->onehot, NULL, OTTER_DTYPE_FLOAT, 2, d) != OTTER_OK) {
                cli_fail(verb, "one-hot targets");
                return false;
            }
        }
        float *o = f->onehot->data;
        memset(o, 0, (size_t)(n * c) * sizeof(float));
        const int64_t *l = y->data;
        for (int64_t i = 0; i < n; i++) {
            if (l[i] < 0 || l[i] >= c) {
                fprintf(stderr, "otter %s: label %lld of batch row %lld is outside [0, %lld) for target '%s'\n", verb,
                        (long long)l[i], (long long)i, (long long)c, ny);
                return false;
            }
            o[i * c + l[i]] = 1.0f;
        }
        f->yv = *f->onehot;
        f->yv.rank = 2;
        f->yv.dims[0] = n;
        f->yv.dims[1] = c;
        f->yv.owns_data = false;
    } else if (ty && ty->has_elem_type && ty->elem_type == OTTER_DTYPE_INT64 && y->dtype != OTTER_DTYPE_INT64) {
        fprintf(stderr, "otter %s: the model's target '%s' takes class labels, the data has float targets\n", verb, ny);
        return false;
    }
    return true;
}

void cli_fit_free(cli_batch_fit *f) {
    otter_tensor_free(f->onehot);
    f->onehot = NULL;
}

/* Accuracy from an additional output shaped [n, C] (argmax against the labels). */
static int64_t count_correct(const otter_tensor *out, const otter_tensor *labels, int64_t n, bool *ok) {
    *ok = false;
    if (!out || out->dtype != OTTER_DTYPE_FLOAT || out->rank != 2 || out->dims[0] != n ||
        labels->dtype != OTTER_DTYPE_INT64)
        return 0;
    *ok = true;
    int64_t c = out->dims[1], hits = 0;
    const float *p = out->data;
    const int64_t *l = labels->data;
    for (int64_t i = 0; i < n; i++) {
        int64_t best = 0;
        for (int64_t k = 1; k < c; k++)
            if (p[i * c + k] > p[i * c + best]) best = k;
        hits += best == l[i];
    }
    return hits;
}

bool cli_evaluate(const char *verb, otter_training_session *s, const otter_dataset *ds, int64_t batch,
                  cli_eval_result *r) {
    memset(r, 0, sizeof *r);
    otter_batch_iter *it = NULL;
    otter_tensor *x = NULL, *y = NULL, *out[2] = {NULL, NULL};
    cli_batch_fit fit = {0};
    bool ok = otter_batch_iter_create(&it, ds, &(otter_batch_options){.batch_size = batch}) == OTTER_OK &&
              otter_batch_iter_alloc(it, &x, &y) == OTTER_OK;
    if (!ok) cli_fail(verb, otter_dataset_description(ds));
    size_t n_out = otter_training_output_count(s, OTTER_EVAL_GRAPH) >= 2 ? 2 : 1;
    double loss_sum = 0;
    int64_t hits = 0;
    bool acc_ok = n_out == 2;
    while (ok) {
        int64_t cnt = 0;
        if (otter_batch_iter_next(it, x, y, &cnt) != OTTER_OK) {
            ok = false;
            cli_fail(verb, otter_dataset_description(ds));
            break;
        }
        if (cnt == 0) break;
        if (!cli_fit_batch(verb, s, OTTER_EVAL_GRAPH, x, y, &fit)) {
            ok = false;
            break;
        }
        const otter_tensor *in[2] = {&fit.xv, &fit.yv};
        if (otter_training_eval_step(s, 2, NULL, in, n_out, out) != OTTER_OK) {
            ok = false;
            cli_fail(verb, "eval step");
            break;
        }
        loss_sum += (double)((float *)out[0]->data)[0] * (double)cnt;
        if (acc_ok) {
            bool this_ok;
            hits += count_correct(out[1], y, cnt, &this_ok);
            acc_ok = this_ok;
        }
        r->n += cnt;
    }
    if (ok && r->n) {
        r->loss = loss_sum / (double)r->n;
        r->has_accuracy = acc_ok;
        r->accuracy = acc_ok ? (double)hits / (double)r->n : 0.0;
    }
    otter_tensor_free(out[0]);
    otter_tensor_free(out[1]);
    otter_tensor_free(x);
    otter_tensor_free(y);
    cli_fit_free(&fit);
    otter_batch_iter_free(it);
    return ok;
}

bool cli_parse_int(const char *text, long long lo, long long *out) {
    char *end;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || v < lo) return false;
    *out = v;
    return true;
}

int cmd_eval(int argc, char **argv) {
    const char *data = NULL, *ckpt = NULL, *batch_text = NULL, *threads_text = NULL, *prefix = NULL, *norm_t = NULL;
    const cli_opt opts[] = {
        {"--data", NULL, "SPEC", "mnist:DIR, fashion-mnist:DIR, cifar10:DIR, npy:X.npy,Y.npy or csv:FILE", &data, NULL},
        {"--checkpoint", NULL, "CKPT", "checkpoint to evaluate (default: DIR/checkpoint)", &ckpt, NULL},
        {"--batch-size", NULL, "B", "samples per eval step (default 256)", &batch_text, NULL},
        {"--threads", NULL, "N", "threads (default: all cores)", &threads_text, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {"--normalize", NULL, "N",
         "inputs: scale (x/255), standard (per-channel mean/std), none (default: the checkpoint's otter.normalize, "
         "saved by otter train --normalize; else scale for images)",
         &norm_t, NULL},
        {0}};
    const cli_spec spec = {
        "eval",
        "DIR",
        "Evaluate training artifacts (eval model + checkpoint) on a dataset: mean loss and, when the\n"
        "eval model outputs class scores after the loss, accuracy. The test split is used for\n"
        "mnist/fashion-mnist/cifar10 folders.",
        1,
        1,
        opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!data) return cli_usage_error(&spec, "missing --data");
    otter_data_norm norm = OTTER_NORM_DEFAULT;
    if (norm_t && !cli_parse_norm(norm_t, &norm))
        return cli_usage_error(&spec, "--normalize must be none, scale or standard, not '%s'", norm_t);
    long long batch = 256, threads = 0;
    if (batch_text && !cli_parse_int(batch_text, 1, &batch))
        return cli_usage_error(&spec, "--batch-size '%s' is not a positive number", batch_text);
    if (threads_text && !cli_parse_int(threads_text, 0, &threads))
        return cli_usage_error(&spec, "--threads '%s' is not a number", threads_text);
    otter_training_session *s = NULL;
    if (otter_training_session_create_from_dir(&s, pos[0], prefix, ckpt,
                                               &(otter_training_options){.n_threads = (int)threads}) != OTTER_OK)
        return cli_fail("eval", pos[0]);
    if (!otter_training_has_eval(s)) {
        fprintf(stderr, "otter eval: '%s' has no eval model\n", pos[0]);
        otter_training_session_free(s);
        return CLI_EXIT_INVALID;
    }
    const otter_property *np = NULL;
    if (!norm_t && otter_training_get_property(s, "otter.normalize", &np) == OTTER_OK &&
        np->type == OTTER_PROPERTY_STRING && !cli_parse_norm(np->s, &norm))
        fprintf(stderr, "otter eval: warning: ignoring the checkpoint's otter.normalize '%s'\n", np->s);
    otter_dataset *ds = NULL;
    if (otter_dataset_open(&ds, data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST, .norm = norm}) != OTTER_OK) {
        otter_training_session_free(s);
        return cli_fail("eval", data);
    }
    cli_eval_result r;
    rc = cli_evaluate("eval", s, ds, batch, &r) ? CLI_EXIT_OK : CLI_EXIT_INVALID;
    if (rc == CLI_EXIT_OK) {
        printf("%s: %lld samples, loss %.6f", otter_dataset_description(ds), (long long)r.n, r.loss);
        if (r.has_accuracy) printf(", accuracy %.2f%%", 100.0 * r.accuracy);
        printf("\n");
    }
    otter_dataset_free(ds);
    otter_training_session_free(s);
    return rc;
}
