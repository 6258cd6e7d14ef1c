/* otter train DIR --data SPEC [...]: train ORT-format artifacts on a dataset with the library's training
 * loop (otter_training_run, training.h), which documents the steps, the checkpoint policy and --resume.
 *
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
#include <unistd.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/training.h"

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
        double fv;
        if (strcmp(k, "warmup") == 0 && cli_parse_int(v, 0, &iv))
            sc->warmup_steps = iv;
        else if (strcmp(k, "size") == 0 && cli_parse_int(v, 1, &iv))
            sc->step_size = iv;
        else if (strcmp(k, "gamma") == 0 && cli_parse_double(v, -INFINITY, &fv))
            sc->gamma = (float)fv;
        else if (strcmp(k, "min") == 0 && cli_parse_double(v, -INFINITY, &fv))
            sc->min_lr = (float)fv;
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

/* The verb's arguments, parsed. */
typedef struct train_args {
    const char *dir, *data, *eval_data, *save, *resume, *plot, *prefix, *norm_name;
    long long threads;
    size_t max_memory;
    bool seed_given, profile;
    otter_data_norm norm;
    otter_train_options o;
} train_args;

static int parse_args(int argc, char **argv, train_args *a) {
    const char *epochs_t = NULL, *steps_t = NULL, *batch_t = NULL, *lr_t = NULL, *sched_t = NULL, *accum_t = NULL,
               *seed_t = NULL, *threads_t = NULL, *max_memory_t = NULL;
    bool no_shuffle = false, drop_last = false;
    const cli_opt opts[] = {
        {"--data", NULL, "SPEC",
         "training data: mnist:DIR, fashion-mnist:DIR, idx:IMAGES,LABELS, cifar10:DIR, csv:FILE, or "
         "npy:A.npy,B.npy,... (one array per model input, in order, dtypes kept)",
         &a->data, NULL},
        {"--eval-data", NULL, "SPEC", "evaluated after every epoch (test split of mnist/cifar10 folders)",
         &a->eval_data, NULL},
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
        {"--drop-last", NULL, NULL,
         "leave out each epoch's partial last batch (needed when the model's batch dimension is fixed)", NULL,
         &drop_last},
        {"--threads", NULL, "N", "threads (default: all cores)", &threads_t, NULL},
        {"--profile", NULL, NULL,
         "print where a batch's time went (forward and backward, the optimizer step apart): per operator type and "
         "the slowest nodes, over the batches after the first two, which plan memory and touch it",
         NULL, &a->profile},
        {"--max-memory", NULL, "BYTES",
         "fail cleanly, naming the node, when a step's values would need more than BYTES per model (K/M/G; "
         "default: the machine's physical memory)",
         &max_memory_t, NULL},
        {"--save", NULL, "CKPT", "checkpoint written after every epoch (default: DIR/checkpoint)", &a->save, NULL},
        {"--resume", NULL, "CKPT", "continue from a checkpoint saved by otter train", &a->resume, NULL},
        {"--plot", NULL, "FILE.svg", "write loss and accuracy curves as SVG", &a->plot, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &a->prefix, NULL},
        {"--normalize", NULL, "N",
         "inputs: scale (x/255, default for images), standard (per-channel mean/std), none; saved in the "
         "checkpoint (on --resume, the checkpoint's)",
         &a->norm_name, NULL},
        {0}};
    const cli_spec spec = {"train",
                           "DIR",
                           "Train ORT-format artifacts (training/eval/optimizer models + checkpoint, as made by\n"
                           "`otter artifacts` or ORT's generate_artifacts) on a dataset. npy:A.npy,B.npy,... feeds\n"
                           "the model's user inputs one array each, in order, with their element types (int64 token\n"
                           "ids stay int64). The other kinds feed two inputs: the samples (as float) and the targets\n"
                           "(class labels, one-hot when the target is float). The run's summary says which feeds\n"
                           "which.",
                           1,
                           1,
                           opts};
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, &a->dir, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!a->data) return cli_usage_error(&spec, "missing --data");
    if (a->norm_name && !cli_parse_norm(a->norm_name, &a->norm))
        return cli_usage_error(&spec, "--normalize must be none, scale or standard, not '%s'", a->norm_name);
    long long epochs = 1, steps = -1, batch = 64, accum = 1, seed = 0;
    double lr = 0.001;
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs)) return cli_usage_error(&spec, "bad --epochs '%s'", epochs_t);
    if (steps_t && !cli_parse_int(steps_t, 1, &steps)) return cli_usage_error(&spec, "bad --steps '%s'", steps_t);
    if (epochs_t && steps_t) return cli_usage_error(&spec, "give --epochs or --steps, not both");
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size '%s'", batch_t);
    if (accum_t && !cli_parse_int(accum_t, 1, &accum)) return cli_usage_error(&spec, "bad --grad-accum '%s'", accum_t);
    if (threads_t && !cli_parse_int(threads_t, 0, &a->threads))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (max_memory_t && (!cli_parse_size(max_memory_t, &a->max_memory) || a->max_memory == 0))
        return cli_usage_error(&spec, "--max-memory needs a size such as 512M or 2G, not '%s'", max_memory_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (lr_t && !cli_parse_double(lr_t, 0, &lr)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    char err[256];
    if (sched_t && !parse_schedule(sched_t, &a->o.schedule, err, sizeof err)) return cli_usage_error(&spec, "%s", err);
    a->seed_given = seed_t != NULL;
    a->o.epochs = epochs, a->o.max_steps = steps > 0 ? steps : 0, a->o.batch_size = batch, a->o.grad_accum = accum;
    a->o.seed = (uint64_t)seed, a->o.keep_order = no_shuffle, a->o.set_lr = true, a->o.lr = (float)lr;
    a->o.drop_last = drop_last;
    a->o.resume = a->resume != NULL;
    return CLI_CONTINUE;
}

/* --resume: the checkpoint's seed and --normalize unless given; its batch size must be --batch-size. */
static bool resume_settings(train_args *a, otter_training_session *s) {
    otter_train_position pos;
    if (otter_training_get_position(s, &pos) != OTTER_OK) return cli_fail("train", a->resume), false;
    if (pos.has_seed && a->seed_given && pos.seed != a->o.seed)
        fprintf(stderr,
                "otter train: warning: --seed %llu differs from the checkpoint's %llu; the run will not follow "
                "the interrupted one\n",
                (unsigned long long)a->o.seed, (unsigned long long)pos.seed);
    else if (pos.has_seed)
        a->o.seed = pos.seed;
    if (pos.has_batch_size && pos.batch_size != a->o.batch_size) {
        fprintf(stderr, "otter train: '%s' was trained with batches of %lld; resume with --batch-size %lld\n",
                a->resume, (long long)pos.batch_size, (long long)pos.batch_size);
        return false;
    }
    const otter_property *np = NULL;
    if (otter_training_get_property(s, "otter.normalize", &np) != OTTER_OK || np->type != OTTER_PROPERTY_STRING)
        return true;
    otter_data_norm stored;
    if (!cli_parse_norm(np->s, &stored))
        fprintf(stderr, "otter train: warning: ignoring the checkpoint's otter.normalize '%s'\n", np->s);
    else if (!a->norm_name) /* a literal: setting the property again frees the string np points into */
        a->norm = stored, a->norm_name = stored == OTTER_NORM_NONE    ? "none"
                                         : stored == OTTER_NORM_SCALE ? "scale"
                                                                      : "standard";
    else if (stored != a->norm)
        fprintf(stderr,
                "otter train: warning: --normalize %s differs from the checkpoint's %s; the run will not follow the "
                "interrupted one\n",
                a->norm_name, np->s);
    return true;
}

/* Batches --profile leaves out: the first plans memory, the second touches the new arena's pages. */
enum { PROFILE_WARMUP = 2 };

/* The training step's profile so far (NULL on out of memory); *n its node count. */
static otter_node_profile *profile_snapshot(const otter_training_session *s, size_t *n) {
    *n = otter_training_profile(s, OTTER_TRAINING_GRAPH, NULL, 0);
    otter_node_profile *p = calloc(*n + 1, sizeof *p);
    if (p) otter_training_profile(s, OTTER_TRAINING_GRAPH, p, *n);
    return p;
}

/* What the progress callback prints and collects for the plot. */
typedef struct train_view {
    const train_args *a;
    otter_training_session *s;
    const otter_dataset *ds;
    bool tty;
    double run_loss, last_draw; /* running loss (exponential average) for the progress bar */
    long long run_n;
    otter_node_profile *warm_profile; /* --profile: the training step's after the first two batches */
    size_t n_warm;
    cli_curve step_loss, epoch_loss, eval_loss, eval_acc;
} train_view;

static void fmt_time(char *buf, size_t cap, double s) {
    if (!(s >= 0) || s > 1e7) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void draw_bar(train_view *v, const otter_train_progress *p) {
    v->run_loss = v->run_n++ ? 0.98 * v->run_loss + 0.02 * p->loss : p->loss;
    if (!v->tty || (p->seconds - v->last_draw <= 0.1 && p->global_step != p->total_steps)) return;
    v->last_draw = p->seconds;
    double rate = (double)p->run_samples / fmax(p->seconds, 1e-9);
    char eta[32], bar[32];
    fmt_time(eta, sizeof eta,
             (double)(p->total_steps - p->global_step) * (double)v->a->o.batch_size / fmax(rate, 1e-9));
    int w = 24, fill = (int)(w * p->batch / p->batches_per_epoch);
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[w] = '\0';
    fprintf(stderr, "\repoch %lld/%lld [%s] %lld/%lld  step %lld  %.0f samples/s  loss %.4f  ETA %s ",
            (long long)p->epoch + 1, (long long)p->epochs, bar, (long long)p->batch, (long long)p->batches_per_epoch,
            (long long)p->global_step, rate, v->run_loss, eta);
}

static void print_shape(const char *dtype, int rank, const int64_t *dims) {
    printf("%s [", dtype);
    for (int i = 0; i < rank; i++) printf(i ? ", %lld" : "%lld", (long long)dims[i]);
    printf("]");
}

/* Which part of the data feeds which model input (per sample). */
static void print_feeds(const train_view *v) {
    const otter_dataset *ds = v->ds;
    otter_training_session *s = v->s;
    if (otter_training_feeds_columns(s, ds)) {
        for (size_t i = 0; i < otter_dataset_column_count(ds); i++) {
            const otter_tensor *c = otter_dataset_column(ds, i);
            printf("  input '%s' <- %s, ", otter_training_input_name(s, OTTER_TRAINING_GRAPH, i),
                   otter_dataset_column_file(ds, i));
            print_shape(otter_dtype_name(c->dtype), c->rank - 1, c->dims + 1);
            printf(" per sample\n");
        }
        return;
    }
    int64_t dims[OTTER_MAX_RANK];
    int rank = otter_dataset_input_shape(ds, dims);
    printf("  input '%s' <- the samples, ", otter_training_input_name(s, OTTER_TRAINING_GRAPH, 0));
    print_shape("float32", rank, dims);
    printf(" each, normalization %s\n", v->a->norm_name ? v->a->norm_name : "default");
    const otter_type *t = otter_training_input_type(s, OTTER_TRAINING_GRAPH, 1);
    const char *target = otter_training_input_name(s, OTTER_TRAINING_GRAPH, 1);
    if (!otter_dataset_labels(ds))
        printf("  input '%s' <- the float targets, %lld per sample\n", target,
               (long long)otter_dataset_target_numel(ds));
    else if (t && t->has_elem_type && otter_dtype_is_float(t->elem_type))
        printf("  input '%s' <- the class labels, one-hot over %lld classes\n", target,
               (long long)otter_dataset_num_classes(ds));
    else
        printf("  input '%s' <- the class labels (int64, %lld classes)\n", target,
               (long long)otter_dataset_num_classes(ds));
}

static void print_begin(const train_view *v, const otter_train_progress *p) {
    printf("training %s on %s: %lld samples, batch %lld, %lld batches/epoch%s, %lld batches in total\n", v->a->dir,
           otter_dataset_description(v->ds), (long long)otter_dataset_size(v->ds), (long long)v->a->o.batch_size,
           (long long)p->batches_per_epoch, v->a->o.drop_last ? " (partial batch dropped)" : "",
           (long long)p->total_steps);
    print_feeds(v);
    if (v->a->resume)
        printf("resumed from %s: epoch %lld, batch %lld, global batch %lld\n", v->a->resume, (long long)p->epoch + 1,
               (long long)p->batch, (long long)p->global_step);
    printf("%5s %12s %12s %10s %10s %8s\n", "epoch", "train loss", "eval loss", "eval acc", "lr", "time");
}

static void print_epoch(train_view *v, const otter_train_progress *p) {
    char el[32] = "-", ea[32] = "-";
    if (p->has_eval) snprintf(el, sizeof el, "%.6f", p->eval.loss);
    if (p->has_eval && p->eval.has_accuracy) snprintf(ea, sizeof ea, "%.2f%%", 100.0 * p->eval.accuracy);
    double x = (double)p->epoch + 1;
    if (p->samples) cli_curve_add(&v->epoch_loss, x, p->loss);
    if (p->has_eval) cli_curve_add(&v->eval_loss, x, p->eval.loss);
    if (p->has_eval && p->eval.has_accuracy) cli_curve_add(&v->eval_acc, x, p->eval.accuracy);
    printf("%5lld %12.6f %12s %10s %10.4g %7.1fs\n", (long long)p->epoch + 1, p->loss, el, ea, (double)p->lr,
           p->epoch_seconds);
    fflush(stdout);
}

static bool on_progress(const otter_train_progress *p, void *user) {
    train_view *v = user;
    if (p->event == OTTER_TRAIN_BEGIN) print_begin(v, p);
    if (p->event == OTTER_TRAIN_STEP) {
        cli_curve_add(&v->step_loss, (double)p->global_step, p->loss);
        draw_bar(v, p);
        if (v->a->profile && v->run_n == PROFILE_WARMUP) v->warm_profile = profile_snapshot(v->s, &v->n_warm);
    }
    if (v->tty && (p->event == OTTER_TRAIN_EPOCH_END || p->event == OTTER_TRAIN_STOPPED))
        fprintf(stderr, "\r%*s\r", 110, "");
    if (p->event == OTTER_TRAIN_EPOCH_END) print_epoch(v, p);
    if (p->event == OTTER_TRAIN_STOPPED)
        printf("%5lld %12.6f %12s %10s %10.4g %7.1fs  (stopped at batch %lld, saved %s)\n", (long long)p->epoch + 1,
               p->loss, "-", "-", (double)p->lr, p->epoch_seconds, (long long)p->batch, p->checkpoint);
    return true;
}

/* Loss per step; loss and accuracy (right axis) per epoch. */
static bool write_plot(const char *path, const train_view *v) {
    const otter_plot_series steps[] = {
        {"train loss (per step)", v->step_loss.x, v->step_loss.y, v->step_loss.n, false, false}};
    const otter_plot_series epochs[] = {{"train loss", v->epoch_loss.x, v->epoch_loss.y, v->epoch_loss.n, false, true},
                                        {"eval loss", v->eval_loss.x, v->eval_loss.y, v->eval_loss.n, false, true},
                                        {"eval accuracy", v->eval_acc.x, v->eval_acc.y, v->eval_acc.n, true, true}};
    const otter_plot_panel panels[] = {{"training loss", "step", "loss", NULL, true, steps, 1},
                                       {"per epoch", "epoch", "loss", "accuracy", true, epochs, 3}};
    if (otter_plot_svg_save(path, panels, 2) != OTTER_OK) return cli_fail("train", "--plot"), false;
    printf("plot: %s\n", path);
    return true;
}

/* Sessions and data opened, settings resolved: run and report. */
static int train(train_args *a, otter_training_session *s, const otter_dataset *ds, const otter_dataset *eds) {
    train_view v = {.a = a, .s = s, .ds = ds, .tty = isatty(2)};
    a->o.eval_data = eds, a->o.checkpoint = a->save, a->o.on_progress = on_progress, a->o.user = &v;
    otter_train_result r;
    int rc = CLI_EXIT_OK;
    if (otter_training_run(s, ds, &a->o, &r) != OTTER_OK) {
        if (v.tty) fprintf(stderr, "\n");
        rc = cli_fail("train", NULL);
    } else if (r.steps == 0) {
        fprintf(stderr, "otter train: the checkpoint is already at batch %lld of %lld; nothing to do\n",
                (long long)r.start_step, (long long)r.total_steps);
        a->plot = NULL;
    } else {
        printf("done: %lld batches (%lld optimizer steps) in %.1fs, %.0f samples/s; checkpoint %s\n",
               (long long)r.steps, (long long)otter_training_step_count(s), r.seconds,
               (double)r.samples / fmax(r.seconds, 1e-9), a->save);
    }
    if (rc == CLI_EXIT_OK && r.steps > 0 && a->profile) {
        const bool warm = v.warm_profile && r.steps > PROFILE_WARMUP;
        size_t n = 0;
        otter_node_profile *p = profile_snapshot(s, &n);
        if (!warm) printf("(the profile includes the first two batches, which plan memory)\n");
        rc = cli_print_profile("train", p, n, warm ? v.warm_profile : NULL, v.n_warm,
                               (long)(warm ? r.steps - PROFILE_WARMUP : r.steps), "step");
        free(p);
    }
    free(v.warm_profile);
    if (a->plot && !write_plot(a->plot, &v)) rc = CLI_EXIT_INVALID;
    cli_curve_free(&v.step_loss), cli_curve_free(&v.epoch_loss);
    cli_curve_free(&v.eval_loss), cli_curve_free(&v.eval_acc);
    return rc;
}

int cmd_train(int argc, char **argv) {
    train_args a = {.norm = OTTER_NORM_DEFAULT};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_CONTINUE) return rc;
    char *default_save = NULL;
    if (!a.save) {
        size_t n = strlen(a.dir) + (a.prefix ? strlen(a.prefix) : 0) + 16;
        if (!(default_save = malloc(n))) return CLI_EXIT_INVALID;
        snprintf(default_save, n, "%s/%scheckpoint", a.dir, a.prefix ? a.prefix : "");
        a.save = default_save;
    }
    otter_training_session *s = NULL;
    otter_dataset *ds = NULL, *eds = NULL;
    rc = CLI_EXIT_INVALID;
    if (otter_training_session_create_from_dir(&s, a.dir, a.prefix, a.resume,
                                               &(otter_training_options){.n_threads = (int)a.threads,
                                                                         .max_memory_bytes = a.max_memory,
                                                                         .profile = a.profile}) != OTTER_OK) {
        cli_fail("train", a.resume ? a.resume : a.dir);
    } else if (!otter_training_has_optimizer(s)) {
        fprintf(stderr, "otter train: '%s' has no optimizer model\n", a.dir);
    } else if (a.resume && !resume_settings(&a, s)) {
    } else if (a.norm_name && otter_training_set_property_string(s, "otter.normalize", a.norm_name) != OTTER_OK) {
        cli_fail("train", "--normalize");
    } else if (otter_dataset_open(&ds, a.data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN, .norm = a.norm}) !=
               OTTER_OK) {
        cli_fail("train", a.data);
    } else if (a.eval_data &&
               otter_dataset_open(&eds, a.eval_data,
                                  &(otter_dataset_options){.split = OTTER_SPLIT_TEST, .norm = a.norm}) != OTTER_OK) {
        cli_fail("train", a.eval_data);
    } else if (eds && !otter_training_has_eval(s)) {
        fprintf(stderr, "otter train: --eval-data given but '%s' has no eval model\n", a.dir);
    } else {
        otter_training_set_seed(s, a.o.seed);
        rc = train(&a, s, ds, eds);
    }
    otter_dataset_free(ds);
    otter_dataset_free(eds);
    otter_training_session_free(s);
    free(default_save);
    return rc;
}
