/* otter fl <simulate|serve|client> ...: federated learning. This file holds the dispatcher and `simulate`:
 * N clients in one process sharing one copy of the data (each client an index subset from a partition), a
 * server aggregating with the library's otter_fl_aggregator (the code `otter fl serve` runs).
 *
 * Each round picks max(floor(C * N), 1) clients (otter_fl_sample_clients, from (seed, round)); each starts
 * from the global weights with a fresh optimizer state, trains E local epochs with batch B over its samples
 * (order from (seed, client, epoch)) and returns its weights and example count; the server aggregates. One
 * line per round: participants, examples, mean client training loss, eval loss and accuracy, time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/fl.h"
#include "otter/training.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static bool parse_double(const char *text, double *out) {
    char *end;
    double v = strtod(text, &end);
    if (!*text || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* "iid", "shards:S", "dirichlet:ALPHA" */
static bool parse_partition(const char *text, otter_partition_options *po) {
    if (strcmp(text, "iid") == 0) {
        po->kind = OTTER_PARTITION_IID;
        return true;
    }
    long long s;
    if (strncmp(text, "shards:", 7) == 0 && cli_parse_int(text + 7, 1, &s) && s <= 1 << 20) {
        po->kind = OTTER_PARTITION_SHARDS, po->shards_per_client = (int)s;
        return true;
    }
    double a;
    if (strncmp(text, "dirichlet:", 10) == 0 && parse_double(text + 10, &a) && a > 0) {
        po->kind = OTTER_PARTITION_DIRICHLET, po->alpha = a;
        return true;
    }
    return false;
}

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The artifacts in memory, to give every client a session with a fresh optimizer state. */
typedef struct artifacts {
    void *train, *eval, *optim, *ckpt;
    size_t train_n, eval_n, optim_n, ckpt_n;
} artifacts;

static bool read_all(const char *path, void **data, size_t *n, bool optional) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!optional) fprintf(stderr, "otter fl simulate: can't open '%s'\n", path);
        return optional;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        unsigned char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb, cap *= 2;
    }
    bool ok = buf && !ferror(f);
    fclose(f);
    if (!ok) {
        free(buf);
        fprintf(stderr, "otter fl simulate: can't read '%s'\n", path);
        return false;
    }
    *data = buf, *n = len;
    return true;
}

static bool artifacts_read(const char *dir, artifacts *a) {
    const char *names[4] = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"};
    void **dst[4] = {&a->train, &a->eval, &a->optim, &a->ckpt};
    size_t *len[4] = {&a->train_n, &a->eval_n, &a->optim_n, &a->ckpt_n};
    for (int i = 0; i < 4; i++) {
        size_t n = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(n);
        if (!p) return false;
        snprintf(p, n, "%s/%s", dir, names[i]);
        bool ok = read_all(p, dst[i], len[i], i == 1);
        free(p);
        if (!ok) return false;
    }
    if (!a->optim) fprintf(stderr, "otter fl simulate: '%s' has no optimizer_model.onnx\n", dir);
    return a->optim != NULL;
}

static void artifacts_free(artifacts *a) { free(a->train), free(a->eval), free(a->optim), free(a->ckpt); }

static bool session_new(const artifacts *a, int threads, otter_training_session **out) {
    otter_checkpoint *ck = NULL;
    if (otter_checkpoint_load_from_memory(&ck, a->ckpt, a->ckpt_n) != OTTER_OK) return false;
    otter_training_options o = {.n_threads = threads};
    if (otter_training_session_create_from_memory(out, ck, a->train, a->train_n, a->eval, a->eval_n, a->optim,
                                                  a->optim_n, &o) != OTTER_OK) {
        otter_checkpoint_free(ck);
        return false;
    }
    return true;
}

typedef struct local_result {
    double loss_sum; /* sum over batches of loss * batch size */
    int64_t examples;
} local_result;

/* E epochs over the client's samples, from the weights already in the session. */
static bool local_train(otter_training_session *s, const otter_dataset *ds, const int64_t *idx, int64_t count,
                        long long epochs, long long batch, uint64_t seed, local_result *res) {
    otter_batch_iter *it = NULL;
    otter_tensor *x = NULL, *y = NULL, *loss = NULL;
    cli_batch_fit fit = {0};
    bool ok = false;
    otter_batch_options bo = {.batch_size = batch, .shuffle = true, .seed = seed, .indices = idx, .num_indices = count};
    if (otter_batch_iter_create(&it, ds, &bo) != OTTER_OK || otter_batch_iter_alloc(it, &x, &y) != OTTER_OK) {
        cli_fail("fl simulate", "client batches");
        goto done;
    }
    res->loss_sum = 0, res->examples = 0;
    for (long long e = 0; e < epochs; e++) {
        if (otter_batch_iter_seek(it, (uint64_t)e, 0) != OTTER_OK) {
            cli_fail("fl simulate", "client batches");
            goto done;
        }
        for (;;) {
            int64_t cnt = 0;
            if (otter_batch_iter_next(it, x, y, &cnt) != OTTER_OK) {
                cli_fail("fl simulate", "client batches");
                goto done;
            }
            if (cnt == 0) break;
            if (!cli_fit_batch("fl simulate", s, OTTER_TRAINING_GRAPH, x, y, &fit)) goto done;
            const otter_tensor *in[2] = {&fit.xv, &fit.yv};
            if (otter_training_train_step(s, 2, NULL, in, 1, &loss) != OTTER_OK ||
                otter_training_optimizer_step(s) != OTTER_OK || otter_training_lazy_reset_grad(s) != OTTER_OK) {
                cli_fail("fl simulate", "local training step");
                goto done;
            }
            float lv = ((float *)loss->data)[0];
            if (!isfinite(lv)) {
                fprintf(stderr, "otter fl simulate: a client's training loss is %g (lower --lr?)\n", lv);
                goto done;
            }
            res->loss_sum += (double)lv * (double)cnt;
            if (e == epochs - 1) res->examples += cnt;
        }
    }
    ok = true;
done:
    otter_tensor_free(loss), otter_tensor_free(x), otter_tensor_free(y);
    cli_fit_free(&fit);
    otter_batch_iter_free(it);
    return ok;
}

static int cmd_fl_simulate(int argc, char **argv) {
    const char *art = NULL, *data = NULL, *clients_t = NULL, *frac_t = NULL, *epochs_t = NULL, *batch_t = NULL,
               *rounds_t = NULL, *part_t = NULL, *seed_t = NULL, *lr_t = NULL, *eval_t = NULL, *strat_t = NULL,
               *save = NULL, *target_t = NULL, *threads_t = NULL, *eval_every_t = NULL, *csv = NULL;
    const cli_opt opts[] = {
        {"--artifacts", NULL, "DIR", "training/eval/optimizer models and checkpoint (otter artifacts) (required)", &art,
         NULL},
        {"--data", NULL, "SPEC", "training data shared by the clients: mnist:DIR, cifar10:DIR, npy:X,Y, csv:FILE",
         &data, NULL},
        {"--clients", NULL, "N", "number of clients (default 100)", &clients_t, NULL},
        {"--fraction", NULL, "C", "fraction of clients per round, in (0, 1] (default 0.1)", &frac_t, NULL},
        {"--local-epochs", NULL, "E", "local epochs per round (default 1)", &epochs_t, NULL},
        {"--batch-size", NULL, "B", "local batch size (default 10)", &batch_t, NULL},
        {"--rounds", NULL, "R", "rounds (default 10)", &rounds_t, NULL},
        {"--partition", NULL, "P", "iid (default), shards:S (S label-sorted shards each), dirichlet:ALPHA", &part_t,
         NULL},
        {"--seed", NULL, "S", "partition, client selection and shuffling seed (default 0)", &seed_t, NULL},
        {"--lr", NULL, "LR", "client learning rate (default 0.05)", &lr_t, NULL},
        {"--eval-data", NULL, "SPEC", "evaluated after rounds (test split of mnist/cifar10 folders)", &eval_t, NULL},
        {"--eval-every", NULL, "K", "evaluate every K rounds (default 1; the last round always)", &eval_every_t, NULL},
        {"--strategy", NULL, "S",
         "fedavg (default), fedavgm[:lr=,momentum=], fedadam[:lr=,beta1=,beta2=,tau=], fedyogi[:...], median, "
         "trimmed-mean[:fraction=]",
         &strat_t, NULL},
        {"--target-accuracy", NULL, "A", "stop at the first round whose eval accuracy is >= A (0..1)", &target_t, NULL},
        {"--save", NULL, "CKPT", "write the final global model as a checkpoint (for otter eval / export)", &save, NULL},
        {"--csv", NULL, "FILE", "also write the per-round table as CSV", &csv, NULL},
        {"--threads", NULL, "N", "threads for the kernels (default: all cores)", &threads_t, NULL},
        {0}};
    const cli_spec spec = {"fl simulate",
                           "",
                           "Simulate federated averaging: N clients in one process share one copy of the data, each\n"
                           "round max(C*N, 1) of them train E local epochs from the global weights and the server\n"
                           "aggregates their weights (weighted by examples) with the chosen strategy.",
                           0,
                           0,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!art) return cli_usage_error(&spec, "missing --artifacts");
    if (!data) return cli_usage_error(&spec, "missing --data");
    long long n_clients = 100, epochs = 1, batch = 10, rounds = 10, seed = 0, threads = 0, eval_every = 1;
    double fraction = 0.1, lr = 0.05, target = -1;
    if (clients_t && !cli_parse_int(clients_t, 1, &n_clients)) return cli_usage_error(&spec, "bad --clients");
    if (frac_t && (!parse_double(frac_t, &fraction) || !(fraction > 0 && fraction <= 1)))
        return cli_usage_error(&spec, "--fraction '%s' must be in (0, 1]", frac_t);
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs)) return cli_usage_error(&spec, "bad --local-epochs");
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size");
    if (rounds_t && !cli_parse_int(rounds_t, 1, &rounds)) return cli_usage_error(&spec, "bad --rounds");
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed");
    if (threads_t && !cli_parse_int(threads_t, 0, &threads)) return cli_usage_error(&spec, "bad --threads");
    if (eval_every_t && !cli_parse_int(eval_every_t, 1, &eval_every)) return cli_usage_error(&spec, "bad --eval-every");
    if (lr_t && (!parse_double(lr_t, &lr) || lr < 0)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    if (target_t && (!parse_double(target_t, &target) || target < 0 || target > 1))
        return cli_usage_error(&spec, "--target-accuracy '%s' must be in [0, 1]", target_t);
    if (target_t && !eval_t) return cli_usage_error(&spec, "--target-accuracy needs --eval-data");
    if (n_clients > 1000000) return cli_usage_error(&spec, "--clients %lld is too many", n_clients);
    otter_partition_options po = {.num_clients = (int)n_clients, .seed = (uint64_t)seed};
    if (part_t && !parse_partition(part_t, &po))
        return cli_usage_error(&spec, "bad --partition '%s' (iid, shards:S, dirichlet:ALPHA)", part_t);
    otter_fl_strategy strategy = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    if (strat_t && otter_fl_strategy_parse(strat_t, &strategy) != OTTER_OK)
        return cli_usage_error(&spec, "--strategy: %s", otter_last_error());

    artifacts arts = {0};
    otter_training_session *s = NULL;
    otter_dataset *ds = NULL, *eds = NULL;
    otter_partition *part = NULL;
    otter_fl_layout *layout = NULL;
    otter_fl_aggregator *agg = NULL;
    size_t *picked = NULL;
    FILE *csvf = NULL;
    rc = CLI_EXIT_INVALID;
    if (!artifacts_read(art, &arts)) goto done;
    if (!session_new(&arts, (int)threads, &s)) {
        cli_fail("fl simulate", art);
        goto done;
    }
    if (otter_dataset_open(&ds, data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN}) != OTTER_OK) {
        cli_fail("fl simulate", data);
        goto done;
    }
    if (eval_t && otter_dataset_open(&eds, eval_t, &(otter_dataset_options){.split = OTTER_SPLIT_TEST}) != OTTER_OK) {
        cli_fail("fl simulate", eval_t);
        goto done;
    }
    if (eds && !otter_training_has_eval(s)) {
        fprintf(stderr, "otter fl simulate: --eval-data given but '%s' has no eval model\n", art);
        goto done;
    }
    if (otter_dataset_partition(&part, ds, &po) != OTTER_OK) {
        cli_fail("fl simulate", "--partition");
        goto done;
    }
    size_t n_params = 0;
    float *slab = otter_training_trainable_slab(s, &n_params);
    if (otter_fl_layout_from_session(&layout, s) != OTTER_OK ||
        otter_fl_aggregator_create(&agg, layout, slab, n_params, &strategy) != OTTER_OK) {
        cli_fail("fl simulate", "aggregator");
        goto done;
    }
    picked = calloc((size_t)n_clients, sizeof *picked);
    if (!picked) goto done;
    if (csv && !(csvf = fopen(csv, "w"))) {
        fprintf(stderr, "otter fl simulate: can't write '%s'\n", csv);
        goto done;
    }
    char sdesc[200];
    otter_fl_strategy_format(&strategy, sdesc, sizeof sdesc);
    int64_t min_n = INT64_MAX, max_n = 0;
    for (int c = 0; c < (int)n_clients; c++) {
        int64_t cnt;
        otter_partition_client(part, c, &cnt);
        min_n = cnt < min_n ? cnt : min_n, max_n = cnt > max_n ? cnt : max_n;
    }
    printf("federated simulation: %s, %lld samples over %lld clients (%s, %lld..%lld each), %zu parameters\n",
           otter_dataset_description(ds), (long long)otter_dataset_size(ds), n_clients, part_t ? part_t : "iid",
           (long long)min_n, (long long)max_n, n_params);
    printf("each round %zu clients (C = %g), E = %lld, B = %lld, lr %g, strategy %s, seed %lld\n",
           otter_fl_sample_clients((size_t)n_clients, fraction, 0, 0, picked), fraction, epochs, batch, lr, sdesc,
           seed);
    printf("%5s %7s %9s %12s %12s %9s %8s %9s\n", "round", "clients", "examples", "train loss", "eval loss", "eval acc",
           "time", "total");
    if (csvf) fprintf(csvf, "round,clients,examples,train_loss,eval_loss,eval_accuracy,seconds,total_seconds\n");
    double t0 = now_s(), t_sessions = 0;
    long long reached = -1;
    bool ok = true;
    for (long long r = 1; ok && r <= rounds; r++) {
        double tr = now_s();
        size_t m = otter_fl_sample_clients((size_t)n_clients, fraction, (uint64_t)seed, r, picked);
        if (otter_fl_aggregator_begin_round(agg) != OTTER_OK) {
            cli_fail("fl simulate", "begin round");
            break;
        }
        const float *global = otter_fl_aggregator_global(agg, NULL);
        for (size_t k = 0; ok && k < m; k++) {
            int c = (int)picked[k];
            int64_t cnt = 0;
            const int64_t *idx = otter_partition_client(part, c, &cnt);
            if (cnt == 0) continue; /* a Dirichlet partition can leave a client without samples */
            /* A fresh session: the global weights and a new optimizer state (moments, step). */
            double ts = now_s();
            otter_training_session_free(s);
            s = NULL;
            if (!session_new(&arts, (int)threads, &s)) {
                cli_fail("fl simulate", art);
                ok = false;
                break;
            }
            t_sessions += now_s() - ts;
            if (otter_training_copy_buffer_to_params(s, global, n_params, true) != OTTER_OK ||
                otter_training_set_lr(s, (float)lr) != OTTER_OK) {
                cli_fail("fl simulate", "client setup");
                ok = false;
                break;
            }
            otter_training_set_seed(s, mix((uint64_t)seed, (uint64_t)r * 1000003u + (uint64_t)c));
            local_result lres;
            if (!local_train(s, ds, idx, cnt, epochs, batch, mix(mix((uint64_t)seed, (uint64_t)c), (uint64_t)r),
                             &lres)) {
                ok = false;
                break;
            }
            char who[32];
            snprintf(who, sizeof who, "client %d", c);
            size_t n_slab = 0;
            const float *w = otter_training_trainable_slab(s, &n_slab);
            otter_fl_update u = {.params = w,
                                 .n = n_slab,
                                 .num_examples = lres.examples,
                                 .has_loss = true,
                                 .loss = lres.loss_sum / (double)(lres.examples * epochs),
                                 .client = who};
            if (otter_fl_aggregator_add_update(agg, &u) != OTTER_OK) {
                cli_fail("fl simulate", "aggregate");
                ok = false;
            }
        }
        if (!ok) break;
        otter_fl_round_summary sum;
        if (otter_fl_aggregator_finish_round(agg, &sum) != OTTER_OK) {
            cli_fail("fl simulate", "aggregate");
            ok = false;
            break;
        }
        cli_eval_result er = {0};
        bool evaluated = eds && (r % eval_every == 0 || r == rounds);
        if (evaluated) {
            if (otter_training_copy_buffer_to_params(s, otter_fl_aggregator_global(agg, NULL), n_params, true) !=
                OTTER_OK) {
                cli_fail("fl simulate", "global weights");
                ok = false;
                break;
            }
            if (!cli_evaluate("fl simulate", s, eds, 500, &er)) {
                ok = false;
                break;
            }
        }
        double now = now_s();
        char el[32] = "-", ea[32] = "-";
        if (evaluated) snprintf(el, sizeof el, "%.6f", er.loss);
        if (evaluated && er.has_accuracy) snprintf(ea, sizeof ea, "%.2f%%", 100.0 * er.accuracy);
        printf("%5lld %7zu %9lld %12.6f %12s %9s %7.2fs %8.1fs\n", r, sum.num_updates, (long long)sum.num_examples,
               sum.mean_loss, el, ea, now - tr, now - t0);
        fflush(stdout);
        if (csvf) {
            fprintf(csvf, "%lld,%zu,%lld,%.9g,", r, sum.num_updates, (long long)sum.num_examples, sum.mean_loss);
            if (evaluated)
                fprintf(csvf, "%.9g,", er.loss);
            else
                fprintf(csvf, ",");
            if (evaluated && er.has_accuracy)
                fprintf(csvf, "%.9g,", er.accuracy);
            else
                fprintf(csvf, ",");
            fprintf(csvf, "%.3f,%.3f\n", now - tr, now - t0);
            fflush(csvf);
        }
        if (target >= 0 && evaluated && er.has_accuracy && er.accuracy >= target) {
            reached = r;
            break;
        }
    }
    if (!ok) goto done;
    long long done_rounds = (long long)otter_fl_aggregator_round(agg);
    double total = now_s() - t0;
    if (target >= 0) {
        if (reached > 0)
            printf("target accuracy %.2f%% reached at round %lld (%.1fs)\n", 100 * target, reached, total);
        else
            printf("target accuracy %.2f%% not reached in %lld rounds (%.1fs)\n", 100 * target, done_rounds, total);
    }
    printf("done: %lld rounds in %.1fs (client session setup %.1fs)\n", done_rounds, total, t_sessions);
    if (save) {
        if (otter_training_copy_buffer_to_params(s, otter_fl_aggregator_global(agg, NULL), n_params, true) !=
                OTTER_OK ||
            otter_training_set_property_int(s, "otter.fl.rounds", done_rounds) != OTTER_OK ||
            otter_training_set_property_string(s, "otter.fl.strategy", sdesc) != OTTER_OK ||
            otter_training_save_checkpoint(s, save, false) != OTTER_OK) {
            cli_fail("fl simulate", save);
            goto done;
        }
        printf("global model: %s\n", save);
    }
    rc = CLI_EXIT_OK;
done:
    if (csvf && fclose(csvf) != 0 && rc == CLI_EXIT_OK) {
        fprintf(stderr, "otter fl simulate: can't write '%s'\n", csv);
        rc = CLI_EXIT_INVALID;
    }
    free(picked);
    otter_fl_aggregator_free(agg);
    otter_fl_layout_free(layout);
    otter_partition_free(part);
    otter_dataset_free(ds);
    otter_dataset_free(eds);
    otter_training_session_free(s);
    artifacts_free(&arts);
    return rc;
}

int cmd_fl(int argc, char **argv) {
    static const struct {
        const char *name, *summary;
    } SUB[] = {
        {"simulate", "N clients in one process over one dataset (partitioned), FedAvg and friends"},
        {"serve", "HTTP server: registers clients, runs rounds, aggregates their updates"},
        {"client", "joins a server, trains each round it is picked for, uploads its weights"},
    };
    int (*fns[3])(int, char **) = {cmd_fl_simulate, cmd_fl_serve, cmd_fl_client};
    const size_t n_sub = sizeof SUB / sizeof SUB[0];
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: otter fl <sub-verb> [options]   (otter fl <sub-verb> --help)\n\nfederated learning:\n");
        for (size_t i = 0; i < n_sub; i++) fprintf(f, "  %-9s %s\n", SUB[i].name, SUB[i].summary);
        return argc < 2 ? CLI_EXIT_USAGE : CLI_EXIT_OK;
    }
    for (size_t i = 0; i < n_sub; i++)
        if (strcmp(argv[1], SUB[i].name) == 0) {
            /* the sub-verb sees argv[0] = "fl <name>" for its messages */
            char name[32];
            snprintf(name, sizeof name, "fl %s", SUB[i].name);
            char *saved = argv[1];
            argv[1] = name;
            int rc = fns[i](argc - 1, argv + 1);
            argv[1] = saved;
            return rc;
        }
    fprintf(stderr, "otter fl: unknown sub-verb '%s' (simulate, serve, client)\n", argv[1]);
    return CLI_EXIT_USAGE;
}
