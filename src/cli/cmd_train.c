/* otter train DIR --data SPEC [...]: train ORT-format artifacts on a dataset.
 *
 * Each batch is a train step (gradients accumulate over --grad-accum batches, then one optimizer step, the
 * scheduler step and a lazy reset; an epoch's leftover batches get their optimizer step at the epoch's end).
 * A progress bar (step, samples/s, running loss, ETA) goes to stderr when it is a terminal; a per-epoch table
 * (train loss, eval loss and accuracy, learning rate, time) to stdout. The checkpoint is saved atomically after
 * every epoch with the position as properties (otter.epoch, otter.batch, otter.global_step, otter.seed);
 * --resume continues from such a checkpoint along the same trajectory: the batch order of an epoch depends only
 * on (seed, epoch), Dropout masks on (seed, optimizer step), the learning rate on the optimizer step. An explicit
 * --normalize is saved too (otter.normalize), so that --resume and otter eval feed the inputs the same way. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/training.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool parse_float(const char *text, float *out) {
    char *end;
    double v = strtod(text, &end);
    if (!*text || *end || !isfinite(v)) return false;
    *out = (float)v;
    return true;
}

/* "constant", "linear[:warmup=W]", "cosine[:warmup=W,min=M]", "step:size=S[,gamma=G][,warmup=W]". */
static bool parse_schedule(const char *text, otter_lr_schedule *sc, char *err, size_t cap) {
    memset(sc, 0, sizeof *sc);
    const char *colon = strchr(text, ':');
    size_t kl = colon ? (size_t)(colon - text) : strlen(text);
    if (kl == 8 && strncmp(text, "constant", kl) == 0)
        sc->kind = OTTER_LR_CONSTANT;
    else if (kl == 6 && strncmp(text, "linear", kl) == 0)
        sc->kind = OTTER_LR_LINEAR;
    else if (kl == 6 && strncmp(text, "cosine", kl) == 0)
        sc->kind = OTTER_LR_COSINE;
    else if (kl == 4 && strncmp(text, "step", kl) == 0)
        sc->kind = OTTER_LR_STEP, sc->gamma = 0.1f;
    else {
        snprintf(err, cap, "unknown schedule '%.*s' (constant, linear, cosine, step)", (int)kl, text);
        return false;
    }
    size_t n = 0;
    char **kv = colon ? cli_split(colon + 1, &n) : NULL;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char *eq = strchr(kv[i], '=');
        if (!eq) {
            snprintf(err, cap, "schedule option '%s' is not KEY=VALUE", kv[i]);
            ok = false;
            break;
        }
        *eq = '\0';
        const char *k = kv[i], *v = eq + 1;
        long long iv;
        float fv;
        if (strcmp(k, "warmup") == 0 && cli_parse_int(v, 0, &iv))
            sc->warmup_steps = iv;
        else if (strcmp(k, "size") == 0 && cli_parse_int(v, 1, &iv))
            sc->step_size = iv;
        else if (strcmp(k, "gamma") == 0 && parse_float(v, &fv))
            sc->gamma = fv;
        else if (strcmp(k, "min") == 0 && parse_float(v, &fv))
            sc->min_lr = fv;
        else {
            snprintf(err, cap, "bad schedule option '%s=%s' (warmup=N, size=N, gamma=G, min=LR)", k, v);
            ok = false;
        }
    }
    cli_list_free(kv);
    if (ok && sc->kind == OTTER_LR_STEP && sc->step_size <= 0) {
        snprintf(err, cap, "step schedule needs size=N (optimizer steps between decays)");
        ok = false;
    }
    return ok;
}

/* ---- SVG plot -------------------------------------------------------------------------------------- */

typedef struct curve {
    double *x, *y;
    size_t n, cap;
} curve;

static void curve_add(curve *c, double x, double y) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        double *nx = realloc(c->x, cap * sizeof *nx);
        if (!nx) return;
        c->x = nx;
        double *ny = realloc(c->y, cap * sizeof *ny);
        if (!ny) return;
        c->y = ny;
        c->cap = cap;
    }
    c->x[c->n] = x, c->y[c->n] = y, c->n++;
}

static void curve_free(curve *c) { free(c->x), free(c->y); }

static void svg_panel(FILE *f, double x0, double y0, double w, double h, const char *title, const char *xlabel,
                      const curve *const *cs, const char *const *colors, const char *const *labels, size_t nc,
                      bool markers) {
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (size_t k = 0; k < nc; k++)
        for (size_t i = 0; i < cs[k]->n; i++) {
            xmin = fmin(xmin, cs[k]->x[i]), xmax = fmax(xmax, cs[k]->x[i]);
            ymin = fmin(ymin, cs[k]->y[i]), ymax = fmax(ymax, cs[k]->y[i]);
        }
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999'/>\n", x0, y0, w, h);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='14'>%s</text>\n", x0 + w / 2, y0 - 8, title);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%s</text>\n", x0 + w / 2, y0 + h + 32,
            xlabel);
    if (!(xmin <= xmax)) {
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>no data</text>\n", x0 + w / 2,
                y0 + h / 2);
        return;
    }
    if (xmax == xmin) xmax = xmin + 1;
    double pad = (ymax - ymin) * 0.05;
    if (pad == 0) pad = fabs(ymax) * 0.05 + 1e-3;
    ymin -= pad, ymax += pad;
    for (int t = 0; t <= 4; t++) {
        double yv = ymin + (ymax - ymin) * t / 4, py = y0 + h - h * t / 4;
        double xv = xmin + (xmax - xmin) * t / 4, px = x0 + w * t / 4;
        fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#eee'/>\n", x0, py, x0 + w, py);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='end' font-size='11'>%.4g</text>\n", x0 - 4, py + 4, yv);
        fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='11'>%.4g</text>\n", px, y0 + h + 16, xv);
    }
    for (size_t k = 0; k < nc; k++) {
        const curve *c = cs[k];
        if (!c->n) continue;
        fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", colors[k]);
        for (size_t i = 0; i < c->n; i++)
            fprintf(f, "%.1f,%.1f ", x0 + w * (c->x[i] - xmin) / (xmax - xmin),
                    y0 + h - h * (c->y[i] - ymin) / (ymax - ymin));
        fprintf(f, "'/>\n");
        if (markers)
            for (size_t i = 0; i < c->n; i++)
                fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3' fill='%s'/>\n", x0 + w * (c->x[i] - xmin) / (xmax - xmin),
                        y0 + h - h * (c->y[i] - ymin) / (ymax - ymin), colors[k]);
        fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' fill='%s'>%s</text>\n", x0 + w - 150, y0 + 18 + 16.0 * k,
                colors[k], labels[k]);
    }
}

static bool write_plot(const char *path, const curve *train_loss, const curve *eval_loss, const curve *eval_acc,
                       const curve *epoch_loss) {
    size_t n = strlen(path) + 8;
    char *tmp = malloc(n);
    if (!tmp) return false;
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        free(tmp);
        return false;
    }
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='420' font-family='sans-serif'>\n"
               "<rect width='1000' height='420' fill='white'/>\n");
    const curve *l1[] = {train_loss};
    const char *c1[] = {"#4477aa"}, *n1[] = {"train loss (per step)"};
    svg_panel(f, 70, 40, 400, 320, "training loss", "step", l1, c1, n1, 1, false);
    const curve *l2[] = {epoch_loss, eval_loss, eval_acc};
    const char *c2[] = {"#4477aa", "#ee6677", "#228833"}, *n2[] = {"train loss", "eval loss", "eval accuracy"};
    svg_panel(f, 570, 40, 400, 320, "per epoch", "epoch", l2, c2, n2, 3, true);
    fprintf(f, "</svg>\n");
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) remove(tmp);
    free(tmp);
    return ok;
}

/* ---- the verb -------------------------------------------------------------------------------------- */

typedef struct run_state {
    otter_training_session *s;
    const char *save;
    uint64_t seed;
    long long batch_size;
    long long global;      /* batches done */
    const char *norm_name; /* --normalize as given (or resumed), saved as otter.normalize; NULL: not saved */
} run_state;

static bool save_position(run_state *r, long long epoch, long long batch) {
    otter_status st = otter_training_set_property_int(r->s, "otter.epoch", epoch);
    if (st == OTTER_OK) st = otter_training_set_property_int(r->s, "otter.batch", batch);
    if (st == OTTER_OK) st = otter_training_set_property_int(r->s, "otter.global_step", r->global);
    if (st == OTTER_OK) st = otter_training_set_property_int(r->s, "otter.seed", (int64_t)r->seed);
    if (st == OTTER_OK) st = otter_training_set_property_int(r->s, "otter.batch_size", r->batch_size);
    if (st == OTTER_OK && r->norm_name) st = otter_training_set_property_string(r->s, "otter.normalize", r->norm_name);
    if (st == OTTER_OK) st = otter_training_save_checkpoint(r->s, r->save, true);
    if (st != OTTER_OK) {
        cli_fail("train", r->save);
        return false;
    }
    return true;
}

static void fmt_time(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static bool get_int_property(otter_training_session *s, const char *name, long long *out) {
    const otter_property *p = NULL;
    if (otter_training_get_property(s, name, &p) != OTTER_OK || p->type != OTTER_PROPERTY_INT) return false;
    *out = p->i;
    return true;
}

int cmd_train(int argc, char **argv) {
    const char *data = NULL, *eval_data = NULL, *epochs_t = NULL, *steps_t = NULL, *batch_t = NULL, *lr_t = NULL,
               *sched_t = NULL, *accum_t = NULL, *seed_t = NULL, *threads_t = NULL, *save = NULL, *resume = NULL,
               *plot = NULL, *prefix = NULL, *norm_t = NULL;
    bool no_shuffle = false;
    const cli_opt opts[] = {
        {"--data", NULL, "SPEC", "training data: mnist:DIR, fashion-mnist:DIR, cifar10:DIR, npy:X.npy,Y.npy, csv:FILE",
         &data, NULL},
        {"--eval-data", NULL, "SPEC", "evaluated after every epoch (test split of mnist/cifar10 folders)", &eval_data,
         NULL},
        {"--epochs", NULL, "N", "epochs in total, resumed ones included (default 1)", &epochs_t, NULL},
        {"--steps", NULL, "N", "stop after N batches in total instead", &steps_t, NULL},
        {"--batch-size", NULL, "B", "samples per batch (default 64)", &batch_t, NULL},
        {"--lr", NULL, "LR", "learning rate (default 0.001)", &lr_t, NULL},
        {"--schedule", NULL, "S",
         "constant (default), linear[:warmup=W], cosine[:warmup=W,min=LR], step:size=N[,gamma=G][,warmup=W] "
         "(in optimizer steps)",
         &sched_t, NULL},
        {"--grad-accum", NULL, "K", "sum the gradients of K batches per optimizer step (default 1)", &accum_t, NULL},
        {"--seed", NULL, "S", "shuffling and Dropout seed (default 0; on --resume, the checkpoint's)", &seed_t, NULL},
        {"--no-shuffle", NULL, NULL, "keep the data's order", NULL, &no_shuffle},
        {"--threads", NULL, "N", "threads (default: all cores)", &threads_t, NULL},
        {"--save", NULL, "CKPT", "checkpoint written after every epoch (default: DIR/checkpoint)", &save, NULL},
        {"--resume", NULL, "CKPT", "continue from a checkpoint saved by otter train", &resume, NULL},
        {"--plot", NULL, "FILE.svg", "write loss and accuracy curves as SVG", &plot, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {"--normalize", NULL, "N",
         "inputs: scale (x/255, default for images), standard (per-channel mean/std), none; saved in the "
         "checkpoint (on --resume, the checkpoint's)",
         &norm_t, NULL},
        {0}};
    const cli_spec spec = {"train",
                           "DIR",
                           "Train ORT-format artifacts (training/eval/optimizer models + checkpoint, as made by\n"
                           "`otter artifacts` or ORT's generate_artifacts) on a dataset. The model's two user inputs\n"
                           "are fed the samples and the targets (class labels, one-hot when the target is float).",
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
    long long epochs = 1, steps = -1, batch = 64, accum = 1, threads = 0, seed_v = 0;
    float lr = 0.001f;
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs)) return cli_usage_error(&spec, "bad --epochs '%s'", epochs_t);
    if (steps_t && !cli_parse_int(steps_t, 1, &steps)) return cli_usage_error(&spec, "bad --steps '%s'", steps_t);
    if (epochs_t && steps_t) return cli_usage_error(&spec, "give --epochs or --steps, not both");
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size '%s'", batch_t);
    if (accum_t && !cli_parse_int(accum_t, 1, &accum)) return cli_usage_error(&spec, "bad --grad-accum '%s'", accum_t);
    if (threads_t && !cli_parse_int(threads_t, 0, &threads))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed_v)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (lr_t && (!parse_float(lr_t, &lr) || lr < 0)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    otter_lr_schedule sched = {0};
    char err[256];
    if (sched_t && !parse_schedule(sched_t, &sched, err, sizeof err)) return cli_usage_error(&spec, "%s", err);

    char *default_save = NULL;
    if (!save) {
        size_t n = strlen(pos[0]) + (prefix ? strlen(prefix) : 0) + 16;
        default_save = malloc(n);
        if (!default_save) return CLI_EXIT_INVALID;
        snprintf(default_save, n, "%s/%scheckpoint", pos[0], prefix ? prefix : "");
        save = default_save;
    }
    otter_training_session *s = NULL;
    otter_dataset *ds = NULL, *eds = NULL;
    otter_batch_iter *it = NULL;
    otter_tensor *x = NULL, *y = NULL, *loss = NULL;
    cli_batch_fit fit = {0};
    curve c_train = {0}, c_eloss = {0}, c_eacc = {0}, c_eptrain = {0};
    rc = CLI_EXIT_INVALID;
    if (otter_training_session_create_from_dir(&s, pos[0], prefix, resume,
                                               &(otter_training_options){.n_threads = (int)threads}) != OTTER_OK) {
        cli_fail("train", resume ? resume : pos[0]);
        goto done;
    }
    if (!otter_training_has_optimizer(s)) {
        fprintf(stderr, "otter train: '%s' has no optimizer model\n", pos[0]);
        goto done;
    }
    long long start_epoch = 0, start_batch = 0, global = 0, stored_seed;
    uint64_t seed = (uint64_t)seed_v;
    if (resume) {
        if (!get_int_property(s, "otter.epoch", &start_epoch) || !get_int_property(s, "otter.batch", &start_batch) ||
            !get_int_property(s, "otter.global_step", &global)) {
            fprintf(stderr,
                    "otter train: '%s' has no otter.epoch/otter.batch/otter.global_step properties (not saved "
                    "by otter train)\n",
                    resume);
            goto done;
        }
        if (get_int_property(s, "otter.seed", &stored_seed)) {
            if (seed_t && (uint64_t)stored_seed != seed)
                fprintf(stderr,
                        "otter train: warning: --seed %llu differs from the checkpoint's %lld; the run will not "
                        "follow the interrupted one\n",
                        (unsigned long long)seed, stored_seed);
            else
                seed = (uint64_t)stored_seed;
        }
    }
    const otter_property *np = NULL;
    if (resume && otter_training_get_property(s, "otter.normalize", &np) == OTTER_OK &&
        np->type == OTTER_PROPERTY_STRING) {
        otter_data_norm stored_norm;
        if (!cli_parse_norm(np->s, &stored_norm))
            fprintf(stderr, "otter train: warning: ignoring the checkpoint's otter.normalize '%s'\n", np->s);
        else if (!norm_t) /* a literal: saving replaces the property np points into */
            norm = stored_norm, norm_t = stored_norm == OTTER_NORM_NONE    ? "none"
                                         : stored_norm == OTTER_NORM_SCALE ? "scale"
                                                                           : "standard";
        else if (stored_norm != norm)
            fprintf(stderr,
                    "otter train: warning: --normalize %s differs from the checkpoint's %s; the run will not "
                    "follow the interrupted one\n",
                    norm_t, np->s);
    }
    long long stored_batch;
    if (resume && get_int_property(s, "otter.batch_size", &stored_batch) && stored_batch != batch) {
        fprintf(stderr, "otter train: '%s' was trained with batches of %lld; resume with --batch-size %lld\n", resume,
                stored_batch, stored_batch);
        goto done;
    }
    otter_training_set_seed(s, seed);
    if (otter_dataset_open(&ds, data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN, .norm = norm}) != OTTER_OK) {
        cli_fail("train", data);
        goto done;
    }
    if (eval_data &&
        otter_dataset_open(&eds, eval_data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST, .norm = norm}) !=
            OTTER_OK) {
        cli_fail("train", eval_data);
        goto done;
    }
    if (eds && !otter_training_has_eval(s)) {
        fprintf(stderr, "otter train: --eval-data given but '%s' has no eval model\n", pos[0]);
        goto done;
    }
    otter_batch_options bo = {.batch_size = batch, .shuffle = !no_shuffle, .seed = seed};
    if (otter_batch_iter_create(&it, ds, &bo) != OTTER_OK || otter_batch_iter_alloc(it, &x, &y) != OTTER_OK) {
        cli_fail("train", data);
        goto done;
    }
    long long per_epoch = otter_batch_iter_num_batches(it);
    long long total = steps > 0 ? steps : epochs * per_epoch;
    if (per_epoch <= 0) {
        fprintf(stderr, "otter train: '%s' has no samples\n", data);
        goto done;
    }
    if (start_batch >= per_epoch) start_epoch++, start_batch = 0;
    if (global >= total) {
        fprintf(stderr, "otter train: the checkpoint is already at batch %lld of %lld; nothing to do\n", global, total);
        rc = CLI_EXIT_OK;
        goto done;
    }
    long long total_opt_steps = (total + accum - 1) / accum;
    if (otter_training_set_lr(s, lr) != OTTER_OK) {
        cli_fail("train", "--lr");
        goto done;
    }
    if (sched_t && sched.kind != OTTER_LR_CONSTANT) {
        sched.initial_lr = lr;
        if (sched.kind != OTTER_LR_STEP) sched.total_steps = total_opt_steps;
        if (otter_training_set_schedule(s, &sched) != OTTER_OK) {
            cli_fail("train", "--schedule");
            goto done;
        }
    }
    if (otter_batch_iter_seek(it, (uint64_t)start_epoch, start_batch) != OTTER_OK) {
        cli_fail("train", "resume position");
        goto done;
    }
    bool tty = isatty(2);
    long long epochs_total = (total + per_epoch - 1) / per_epoch;
    printf("training %s on %s: %lld samples, batch %lld, %lld batches/epoch, %lld batches in total%s%s\n", pos[0],
           otter_dataset_description(ds), (long long)otter_dataset_size(ds), batch, per_epoch, total,
           resume ? ", resumed at batch " : "", "");
    if (resume)
        printf("resumed from %s: epoch %lld, batch %lld, global batch %lld\n", resume, start_epoch + 1, start_batch,
               global);
    printf("%5s %12s %12s %10s %10s %8s\n", "epoch", "train loss", "eval loss", "eval acc", "lr", "time");
    run_state r = {.s = s, .save = save, .seed = seed, .batch_size = batch, .global = global, .norm_name = norm_t};
    long long epoch = start_epoch, bi = start_batch, pending = 0;
    double t_epoch = now_s(), t_start = t_epoch, ep_loss = 0, run_loss = 0, last_draw = 0;
    long long ep_n = 0, run_n = 0, samples_run = 0;
    bool ok = true;
    while (ok && r.global < total) {
        int64_t cnt = 0;
        if (otter_batch_iter_next(it, x, y, &cnt) != OTTER_OK) {
            cli_fail("train", data);
            ok = false;
            break;
        }
        if (cnt > 0) {
            if (!cli_fit_batch("train", s, OTTER_TRAINING_GRAPH, x, y, &fit)) {
                ok = false;
                break;
            }
            const otter_tensor *in[2] = {&fit.xv, &fit.yv};
            if (otter_training_train_step(s, 2, NULL, in, 1, &loss) != OTTER_OK) {
                char where[64];
                snprintf(where, sizeof where, "epoch %lld, batch %lld", epoch + 1, bi);
                cli_fail("train", where);
                ok = false;
                break;
            }
            float lv = ((float *)loss->data)[0];
            if (!isfinite(lv)) {
                fprintf(stderr, "\notter train: the loss is %g at epoch %lld, batch %lld; stopping (lower --lr?)\n", lv,
                        epoch + 1, bi);
                ok = false;
                break;
            }
            ep_loss += (double)lv * (double)cnt, ep_n += cnt;
            run_loss = run_n ? 0.98 * run_loss + 0.02 * lv : lv, run_n++;
            samples_run += cnt;
            curve_add(&c_train, (double)r.global + 1, lv);
            if (++pending == accum) {
                ok = otter_training_optimizer_step(s) == OTTER_OK &&
                     (!sched_t || sched.kind == OTTER_LR_CONSTANT || otter_training_scheduler_step(s) == OTTER_OK) &&
                     otter_training_lazy_reset_grad(s) == OTTER_OK;
                if (!ok) cli_fail("train", "optimizer step");
                pending = 0;
            }
            r.global++, bi++;
            double t = now_s();
            if (tty && (t - last_draw > 0.1 || r.global == total)) {
                last_draw = t;
                double rate = samples_run / fmax(t - t_start, 1e-9);
                char eta[32];
                fmt_time(eta, sizeof eta, (double)(total - r.global) * (double)batch / fmax(rate, 1e-9));
                int w = 24, fill = (int)(w * bi / per_epoch);
                char bar[32];
                for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
                bar[w] = '\0';
                fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  step %lld  %.0f samples/s  loss %.4f  ETA %s ",
                        epoch + 1, epochs_total, bar, bi, per_epoch, r.global, rate, run_loss, eta);
            }
        }
        bool epoch_end = cnt == 0 || bi == per_epoch;
        if (!ok || (!epoch_end && r.global < total)) continue;
        if (pending) { /* an epoch's (or the run's) leftover batches */
            ok = otter_training_optimizer_step(s) == OTTER_OK &&
                 (!sched_t || sched.kind == OTTER_LR_CONSTANT || otter_training_scheduler_step(s) == OTTER_OK) &&
                 otter_training_lazy_reset_grad(s) == OTTER_OK;
            if (!ok) cli_fail("train", "optimizer step");
            pending = 0;
        }
        if (tty) fprintf(stderr, "\r%*s\r", 110, "");
        if (!ok) break;
        if (!epoch_end) { /* --steps ended mid-epoch */
            ok = save_position(&r, epoch, bi);
            printf("%5lld %12.6f %12s %10s %10.4g %7.1fs  (stopped at batch %lld, saved %s)\n", epoch + 1,
                   ep_n ? ep_loss / (double)ep_n : NAN, "-", "-", (double)otter_training_get_lr(s), now_s() - t_epoch,
                   bi, save);
            break;
        }
        cli_eval_result er = {0};
        if (eds && !cli_evaluate("train", s, eds, 256, &er)) {
            ok = false;
            break;
        }
        double tl = ep_n ? ep_loss / (double)ep_n : NAN;
        char el[32] = "-", ea[32] = "-";
        if (eds) snprintf(el, sizeof el, "%.6f", er.loss);
        if (eds && er.has_accuracy) snprintf(ea, sizeof ea, "%.2f%%", 100.0 * er.accuracy);
        if (ep_n) curve_add(&c_eptrain, (double)epoch + 1, tl);
        if (eds) curve_add(&c_eloss, (double)epoch + 1, er.loss);
        if (eds && er.has_accuracy) curve_add(&c_eacc, (double)epoch + 1, er.accuracy);
        epoch++, bi = 0;
        ok = save_position(&r, epoch, 0);
        printf("%5lld %12.6f %12s %10s %10.4g %7.1fs\n", epoch, tl, el, ea, (double)otter_training_get_lr(s),
               now_s() - t_epoch);
        fflush(stdout);
        ep_loss = 0, ep_n = 0, t_epoch = now_s();
        if (ok && r.global < total && otter_batch_iter_seek(it, (uint64_t)epoch, 0) != OTTER_OK) {
            cli_fail("train", "next epoch");
            ok = false;
        }
    }
    if (ok) {
        double el = now_s() - t_start;
        printf("done: %lld batches (%lld optimizer steps) in %.1fs, %.0f samples/s; checkpoint %s\n", r.global - global,
               (long long)otter_training_step_count(s), el, samples_run / fmax(el, 1e-9), save);
        rc = CLI_EXIT_OK;
    }
    if (plot) {
        if (write_plot(plot, &c_train, &c_eloss, &c_eacc, &c_eptrain))
            printf("plot: %s\n", plot);
        else {
            fprintf(stderr, "otter train: can't write '%s'\n", plot);
            rc = CLI_EXIT_INVALID;
        }
    }
done:
    curve_free(&c_train), curve_free(&c_eloss), curve_free(&c_eacc), curve_free(&c_eptrain);
    otter_tensor_free(loss), otter_tensor_free(x), otter_tensor_free(y);
    cli_fit_free(&fit);
    otter_batch_iter_free(it);
    otter_dataset_free(ds);
    otter_dataset_free(eds);
    otter_training_session_free(s);
    free(default_save);
    return rc;
}
