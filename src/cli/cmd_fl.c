/* otter fl <simulate|serve|client> ...: federated learning. This file holds the dispatcher, `simulate` (a thin
 * verb over otter_fl_simulate, fl.h: N clients in one process sharing one copy of the data) and the round plot
 * `simulate` and `serve` share.
 *
 * One line per round: participants, examples, mean client training loss, eval loss and accuracy, time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/fl.h"
#include "otter/plot.h"
#include "otter/training.h"

bool cli_fl_plot(const char *verb, const char *path, const cli_curve *loss, const cli_curve *acc) {
    const otter_plot_series s[] = {{"train loss", loss->x, loss->y, loss->n, false, true},
                                   {"eval accuracy", acc->x, acc->y, acc->n, true, true}};
    const otter_plot_panel p = {"federated training", "round", "loss", "accuracy", true, s, 2};
    if (otter_plot_svg_save(path, &p, 1) != OTTER_OK) return cli_fail(verb, "--plot"), false;
    printf("plot: %s\n", path);
    return true;
}

char **cli_fl_read_tokens(const char *verb, const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "otter %s: can't read tokens from '%s'\n", verb, path);
        return NULL;
    }
    char **list = calloc(1, sizeof *list), line[CLI_FL_TOKEN_MAX + 2];
    size_t k = 0, lineno = 0;
    bool ok = list != NULL;
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strcspn(line, "\r\n");
        /* a line that fills the buffer without its newline would go on as another "token" */
        if (!line[len] && !feof(f)) {
            fprintf(stderr, "otter %s: '%s' line %zu: longer than %d characters\n", verb, path, lineno,
                    CLI_FL_TOKEN_MAX);
            ok = false;
            break;
        }
        line[len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        len = strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) p[--len] = '\0';
        if (!*p || *p == '#') continue;
        char **nl = realloc(list, (k + 2) * sizeof *nl);
        if (nl) list = nl;
        if (!nl || !(list[k] = strdup(p))) {
            fprintf(stderr, "otter %s: '%s': out of memory\n", verb, path);
            ok = false;
            break;
        }
        list[++k] = NULL;
    }
    if (ok && ferror(f)) fprintf(stderr, "otter %s: can't read tokens from '%s'\n", verb, path), ok = false;
    fclose(f);
    if (ok && k == 0) fprintf(stderr, "otter %s: '%s' holds no token\n", verb, path), ok = false;
    if (!ok) {
        cli_list_free(list);
        return NULL;
    }
    *n = k;
    return list;
}

char **cli_fl_token_option(const char *verb, const char *token, const char *token_file, size_t *n) {
    if (token_file) return cli_fl_read_tokens(verb, token_file, n);
    const char *env = getenv("OTTER_FL_TOKEN");
    const char *t = token ? token : env && *env ? env : NULL;
    if (!t) {
        fprintf(stderr, "otter %s: no token: give --token, a token file or OTTER_FL_TOKEN\n", verb);
        return NULL;
    }
    char **list = calloc(2, sizeof *list);
    if (list && !(list[0] = strdup(t))) free(list), list = NULL;
    if (!list) fprintf(stderr, "otter %s: out of memory\n", verb);
    *n = list ? 1 : 0;
    return list;
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
    if (strncmp(text, "dirichlet:", 10) == 0 && cli_parse_double(text + 10, -INFINITY, &a) && a > 0) {
        po->kind = OTTER_PARTITION_DIRICHLET, po->alpha = a;
        return true;
    }
    return false;
}

/* The verb's arguments, parsed. */
typedef struct sim_args {
    const char *art, *data, *eval_data, *save, *csv, *plot, *part_name;
    double target; /* < 0: none */
    otter_fl_strategy strategy;
    otter_fl_sim_options o;
} sim_args;

static int parse_args(int argc, char **argv, sim_args *a) {
    const char *clients_t = NULL, *frac_t = NULL, *epochs_t = NULL, *batch_t = NULL, *rounds_t = NULL, *seed_t = NULL,
               *lr_t = NULL, *strat_t = NULL, *target_t = NULL, *threads_t = NULL, *eval_every_t = NULL;
    const cli_opt opts[] = {
        {"--artifacts", NULL, "DIR", "training/eval/optimizer models and checkpoint (otter artifacts) (required)",
         &a->art, NULL},
        {"--data", NULL, "SPEC", "training data shared by the clients: mnist:DIR, cifar10:DIR, npy:X,Y, csv:FILE",
         &a->data, NULL},
        {"--clients", NULL, "N", "number of clients (default 100)", &clients_t, NULL},
        {"--fraction", NULL, "C", "fraction of clients per round, in (0, 1] (default 0.1)", &frac_t, NULL},
        {"--local-epochs", NULL, "E", "local epochs per round (default 1)", &epochs_t, NULL},
        {"--batch-size", NULL, "B", "local batch size (default 10)", &batch_t, NULL},
        {"--rounds", NULL, "R", "rounds (default 10)", &rounds_t, NULL},
        {"--partition", NULL, "P", "iid (default), shards:S (S label-sorted shards each), dirichlet:ALPHA",
         &a->part_name, NULL},
        {"--seed", NULL, "S", "partition, client selection and shuffling seed (default 0)", &seed_t, NULL},
        {"--lr", NULL, "LR", "client learning rate (default 0.05)", &lr_t, NULL},
        {"--eval-data", NULL, "SPEC", "evaluated after rounds (test split of mnist/cifar10 folders)", &a->eval_data,
         NULL},
        {"--eval-every", NULL, "K", "evaluate every K rounds (default 1; the last round always)", &eval_every_t, NULL},
        {"--strategy", NULL, "S",
         "fedavg (default), fedavgm[:lr=,momentum=], fedadam[:lr=,beta1=,beta2=,tau=], fedyogi[:...], median, "
         "trimmed-mean[:fraction=]",
         &strat_t, NULL},
        {"--target-accuracy", NULL, "A", "stop at the first round whose eval accuracy is >= A (0..1)", &target_t, NULL},
        {"--save", NULL, "CKPT", "write the final global model as a checkpoint (for otter eval / export)", &a->save,
         NULL},
        {"--csv", NULL, "FILE", "also write the per-round table as CSV", &a->csv, NULL},
        {"--plot", NULL, "FILE.svg", "train loss and eval accuracy per round as SVG", &a->plot, NULL},
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
    if (!a->art) return cli_usage_error(&spec, "missing --artifacts");
    if (!a->data) return cli_usage_error(&spec, "missing --data");
    long long n_clients = 100, epochs = 1, batch = 10, rounds = 10, seed = 0, threads = 0, eval_every = 1;
    double fraction = 0.1, lr = 0.05;
    if (clients_t && !cli_parse_int(clients_t, 1, &n_clients)) return cli_usage_error(&spec, "bad --clients");
    if (frac_t && (!cli_parse_double(frac_t, -INFINITY, &fraction) || !(fraction > 0 && fraction <= 1)))
        return cli_usage_error(&spec, "--fraction '%s' must be in (0, 1]", frac_t);
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs)) return cli_usage_error(&spec, "bad --local-epochs");
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size");
    if (rounds_t && !cli_parse_int(rounds_t, 1, &rounds)) return cli_usage_error(&spec, "bad --rounds");
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed");
    if (threads_t && !cli_parse_int(threads_t, 0, &threads)) return cli_usage_error(&spec, "bad --threads");
    if (eval_every_t && !cli_parse_int(eval_every_t, 1, &eval_every)) return cli_usage_error(&spec, "bad --eval-every");
    if (lr_t && !cli_parse_double(lr_t, 0, &lr)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    if (target_t && (!cli_parse_double(target_t, 0, &a->target) || a->target > 1))
        return cli_usage_error(&spec, "--target-accuracy '%s' must be in [0, 1]", target_t);
    if (target_t && !a->eval_data) return cli_usage_error(&spec, "--target-accuracy needs --eval-data");
    if (n_clients > 1000000) return cli_usage_error(&spec, "--clients %lld is too many", n_clients);
    if (a->part_name && !parse_partition(a->part_name, &a->o.partition))
        return cli_usage_error(&spec, "bad --partition '%s' (iid, shards:S, dirichlet:ALPHA)", a->part_name);
    a->strategy = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    if (strat_t && otter_fl_strategy_parse(strat_t, &a->strategy) != OTTER_OK)
        return cli_usage_error(&spec, "--strategy: %s", otter_last_error());
    if (!target_t) a->target = -1;
    a->o.num_clients = (int)n_clients, a->o.fraction = fraction, a->o.rounds = rounds, a->o.seed = (uint64_t)seed;
    a->o.eval_every = eval_every, a->o.n_threads = (int)threads, a->o.strategy = &a->strategy;
    a->o.local.epochs = epochs, a->o.local.batch_size = batch, a->o.local.set_lr = true, a->o.local.lr = (float)lr;
    return CLI_CONTINUE;
}

/* What the round callback prints, writes to the CSV and collects for the plot. */
typedef struct sim_view {
    const sim_args *a;
    const otter_dataset *ds;
    FILE *csv;
    int64_t reached; /* the round reaching --target-accuracy (0: none) */
    cli_curve loss, acc;
} sim_view;

static void print_plan(const sim_view *v, const otter_fl_sim_report *r) {
    const sim_args *a = v->a;
    char sdesc[200];
    otter_fl_strategy_format(&a->strategy, sdesc, sizeof sdesc);
    printf("federated simulation: %s, %lld samples over %d clients (%s, %lld..%lld each), %zu parameters\n",
           otter_dataset_description(v->ds), (long long)otter_dataset_size(v->ds), a->o.num_clients,
           a->part_name ? a->part_name : "iid", (long long)r->min_client_samples, (long long)r->max_client_samples,
           r->n);
    printf("each round %zu clients (C = %g), E = %lld, B = %lld, lr %g, strategy %s, seed %llu\n", r->clients_per_round,
           a->o.fraction, (long long)a->o.local.epochs, (long long)a->o.local.batch_size, (double)a->o.local.lr, sdesc,
           (unsigned long long)a->o.seed);
    printf("%5s %7s %9s %12s %12s %9s %8s %9s\n", "round", "clients", "examples", "train loss", "eval loss", "eval acc",
           "time", "total");
    if (v->csv) fprintf(v->csv, "round,clients,examples,train_loss,eval_loss,eval_accuracy,seconds,total_seconds\n");
}

static bool on_round(const otter_fl_sim_report *r, void *user) {
    sim_view *v = user;
    if (r->round == 0) {
        print_plan(v, r);
        return true;
    }
    bool acc = r->has_eval && r->eval.has_accuracy;
    char el[32] = "-", ea[32] = "-";
    if (r->has_eval) snprintf(el, sizeof el, "%.6f", r->eval.loss);
    if (acc) snprintf(ea, sizeof ea, "%.2f%%", 100.0 * r->eval.accuracy);
    printf("%5lld %7zu %9lld %12.6f %12s %9s %7.2fs %8.1fs\n", (long long)r->round, r->clients,
           (long long)r->num_examples, r->train_loss, el, ea, r->seconds, r->total_seconds);
    fflush(stdout);
    if (v->csv) {
        fprintf(v->csv, "%lld,%zu,%lld,%.9g,", (long long)r->round, r->clients, (long long)r->num_examples,
                r->train_loss);
        fprintf(v->csv, r->has_eval ? "%.9g," : ",", r->eval.loss);
        fprintf(v->csv, acc ? "%.9g," : ",", r->eval.accuracy);
        fprintf(v->csv, "%.3f,%.3f\n", r->seconds, r->total_seconds);
        fflush(v->csv);
    }
    cli_curve_add(&v->loss, (double)r->round, r->train_loss);
    cli_curve_add(&v->acc, (double)r->round, acc ? r->eval.accuracy : NAN);
    if (v->a->target >= 0 && acc && r->eval.accuracy >= v->a->target) v->reached = r->round;
    return v->reached == 0;
}

/* The final global model as a checkpoint, with the rounds and the strategy as properties. */
static bool save_global(const sim_args *a, otter_training_session *g, int64_t rounds) {
    char sdesc[200];
    otter_fl_strategy_format(&a->strategy, sdesc, sizeof sdesc);
    if (otter_training_set_property_int(g, "otter.fl.rounds", rounds) != OTTER_OK ||
        otter_training_set_property_string(g, "otter.fl.strategy", sdesc) != OTTER_OK ||
        otter_training_save_checkpoint(g, a->save, false) != OTTER_OK)
        return cli_fail("fl simulate", a->save), false;
    printf("global model: %s\n", a->save);
    return true;
}

static int simulate(sim_args *a, sim_view *v) {
    otter_training_session *g = NULL;
    otter_fl_sim_result res;
    a->o.on_round = on_round, a->o.user = v;
    if (otter_fl_simulate(a->art, v->ds, &a->o, &g, &res) != OTTER_OK) return cli_fail("fl simulate", NULL);
    if (a->target >= 0 && v->reached)
        printf("target accuracy %.2f%% reached at round %lld (%.1fs)\n", 100 * a->target, (long long)v->reached,
               res.seconds);
    else if (a->target >= 0)
        printf("target accuracy %.2f%% not reached in %lld rounds (%.1fs)\n", 100 * a->target, (long long)res.rounds,
               res.seconds);
    printf("done: %lld rounds in %.1fs (client session setup %.1fs)\n", (long long)res.rounds, res.seconds,
           res.session_seconds);
    bool ok = (!a->save || save_global(a, g, res.rounds)) &&
              (!a->plot || cli_fl_plot("fl simulate", a->plot, &v->loss, &v->acc));
    otter_training_session_free(g);
    return ok ? CLI_EXIT_OK : CLI_EXIT_INVALID;
}

static int cmd_fl_simulate(int argc, char **argv) {
    sim_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_CONTINUE) return rc;
    otter_dataset *ds = NULL, *eds = NULL;
    sim_view v = {.a = &a};
    rc = CLI_EXIT_INVALID;
    if (otter_dataset_open(&ds, a.data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN}) != OTTER_OK)
        cli_fail("fl simulate", a.data);
    else if (a.eval_data &&
             otter_dataset_open(&eds, a.eval_data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST}) != OTTER_OK)
        cli_fail("fl simulate", a.eval_data);
    else if (a.csv && !(v.csv = fopen(a.csv, "w")))
        fprintf(stderr, "otter fl simulate: can't write '%s'\n", a.csv);
    else {
        v.ds = ds, a.o.eval_data = eds;
        rc = simulate(&a, &v);
    }
    if (v.csv && fclose(v.csv) != 0 && rc == CLI_EXIT_OK) {
        fprintf(stderr, "otter fl simulate: can't write '%s'\n", a.csv);
        rc = CLI_EXIT_INVALID;
    }
    cli_curve_free(&v.loss), cli_curve_free(&v.acc);
    otter_dataset_free(ds);
    otter_dataset_free(eds);
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
