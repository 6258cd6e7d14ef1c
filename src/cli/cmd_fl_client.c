/* otter fl client: a federated client. Registers with the server, polls, and for every round it is picked
 * for trains the global model on its data for E local epochs with the training session API (a fresh
 * session each round: the local optimizer starts from zero, and a round's result depends only on the global
 * weights and the round number, so a round retried after a server restart trains the same), then uploads
 * its weights and example count. Backs off while the server is away; exits 0 when the server says training
 * is over. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "otter/data.h"
#include "otter/fl.h"
#include "otter/training.h"

#define VERB "fl client"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct client_ctx {
    const char *artifacts, *prefix;
    const otter_dataset *ds;
    otter_train_options local; /* batch size, local epochs, learning rate, seed, the partition's samples */
    long long threads;
    bool verbose, train_failed;
    char label[32];
} client_ctx;

static void on_log(otter_log_level lv, const char *msg, void *user) {
    client_ctx *c = user;
    if (lv == OTTER_LOG_DEBUG && !c->verbose) return;
    time_t t = time(NULL);
    struct tm tm;
    char ts[16];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    FILE *f = lv == OTTER_LOG_WARN ? stderr : stdout;
    fprintf(f, "[%s] %s%s%s\n", ts, c->label, lv == OTTER_LOG_WARN ? "warning: " : "", msg);
    fflush(f);
}

/* A fresh session each round (the local optimizer starts from zero) trained with the library's loop; epoch e
 * of round r takes the batch order of epoch (r - 1) E + e, so a retried round trains the same. */
static otter_status train_round(int64_t round, const float *global, size_t n, float *out, int64_t *num_examples,
                                double *loss, void *user) {
    client_ctx *c = user;
    otter_training_session *s = NULL;
    otter_status st = otter_training_session_create_from_dir(&s, c->artifacts, c->prefix, NULL,
                                                             &(otter_training_options){.n_threads = (int)c->threads});
    if (st == OTTER_OK) {
        otter_training_set_seed(s, (uint64_t)round);
        otter_train_options o = c->local;
        o.epoch_offset = (uint64_t)((round - 1) * o.epochs);
        st = otter_fl_train_local(s, global, n, c->ds, &o, out, num_examples, loss);
    }
    if (st != OTTER_OK) {
        fprintf(stderr, "otter %s: round %lld: %s\n", VERB, (long long)round, otter_last_error());
        c->train_failed = true;
    }
    otter_training_session_free(s);
    return st;
}

int cmd_fl_client(int argc, char **argv) {
    const char *server = NULL, *token = NULL, *artifacts = NULL, *data = NULL, *epochs_t = NULL, *batch_t = NULL,
               *lr_t = NULL, *part_t = NULL, *seed_t = NULL, *threads_t = NULL, *give_t = NULL, *prefix = NULL;
    bool verbose = false;
    const cli_opt opts[] = {
        {"--server", NULL, "URL", "the server, e.g. http://127.0.0.1:8080 (required)", &server, NULL},
        {"--token", NULL, "T", "registration token the server was given (required)", &token, NULL},
        {"--artifacts", NULL, "DIR", "the same training artifacts as the server's (required)", &artifacts, NULL},
        {"--data", NULL, "SPEC", "local training data: mnist:DIR, cifar10:DIR, npy:X.npy,Y.npy, csv:FILE (required)",
         &data, NULL},
        {"--local-epochs", NULL, "E", "epochs over the local data per round (default 1)", &epochs_t, NULL},
        {"--batch-size", NULL, "B", "samples per batch (default 10)", &batch_t, NULL},
        {"--lr", NULL, "LR", "learning rate (default: the artifacts' 0.001)", &lr_t, NULL},
        {"--partition", NULL, "I/N", "train on part I (0-based) of an IID split of the data into N parts", &part_t,
         NULL},
        {"--seed", NULL, "S", "partition and shuffling seed (default 0)", &seed_t, NULL},
        {"--threads", NULL, "N", "kernel threads (default: all cores)", &threads_t, NULL},
        {"--give-up", NULL, "S", "seconds without reaching the server before exiting with an error (default 300)",
         &give_t, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {"--verbose", "-v", NULL, "more messages", NULL, &verbose},
        {0}};
    const cli_spec spec = {VERB,
                           "",
                           "Federated client: joins an `otter fl serve` server, trains each round it is picked for\n"
                           "on its local data and uploads the weights; retries with exponential backoff while the\n"
                           "server is away and exits when the server says training is over.",
                           0,
                           0,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!server || !token || !artifacts || !data)
        return cli_usage_error(&spec, "--server, --token, --artifacts and --data are required");
    long long epochs = 1, batch = 10, seed = 0, threads = 0, pi = 0, pn = 1;
    double give_up = 300, lr = 0;
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs))
        return cli_usage_error(&spec, "bad --local-epochs '%s'", epochs_t);
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size '%s'", batch_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (threads_t && !cli_parse_int(threads_t, 0, &threads))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (give_t && (!cli_parse_double(give_t, 0, &give_up) || give_up <= 0))
        return cli_usage_error(&spec, "bad --give-up '%s'", give_t);
    if (lr_t && !cli_parse_double(lr_t, 0, &lr)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    if (part_t) {
        char a[32], b[32];
        const char *slash = strchr(part_t, '/');
        if (!slash || (size_t)(slash - part_t) >= sizeof a || strlen(slash + 1) >= sizeof b)
            return cli_usage_error(&spec, "bad --partition '%s' (I/N)", part_t);
        snprintf(a, sizeof a, "%.*s", (int)(slash - part_t), part_t);
        snprintf(b, sizeof b, "%s", slash + 1);
        if (!cli_parse_int(a, 0, &pi) || !cli_parse_int(b, 1, &pn) || pi >= pn || pn > 1000000)
            return cli_usage_error(&spec, "bad --partition '%s' (I/N with 0 <= I < N)", part_t);
    }
    client_ctx ctx = {.artifacts = artifacts,
                      .prefix = prefix,
                      .local = {.epochs = epochs,
                                .batch_size = batch,
                                .seed = (uint64_t)seed,
                                .set_lr = lr_t != NULL,
                                .lr = (float)lr},
                      .threads = threads,
                      .verbose = verbose};
    if (part_t) snprintf(ctx.label, sizeof ctx.label, "part %lld/%lld: ", pi, pn);
    otter_training_session *s = NULL;
    otter_dataset *ds = NULL;
    otter_partition *part = NULL;
    otter_fl_layout *lay = NULL;
    otter_fl_client *cl = NULL;
    rc = CLI_EXIT_INVALID;
    if (otter_training_session_create_from_dir(&s, artifacts, prefix, NULL, NULL) != OTTER_OK) {
        cli_fail(VERB, artifacts);
        goto done;
    }
    if (!otter_training_has_optimizer(s)) {
        fprintf(stderr, "otter %s: '%s' has no optimizer model\n", VERB, artifacts);
        goto done;
    }
    if (otter_fl_layout_from_session(&lay, s) != OTTER_OK) {
        cli_fail(VERB, artifacts);
        goto done;
    }
    otter_training_session_free(s), s = NULL;
    if (otter_dataset_open(&ds, data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN}) != OTTER_OK) {
        cli_fail(VERB, data);
        goto done;
    }
    ctx.ds = ds;
    int64_t samples = otter_dataset_size(ds);
    if (part_t) {
        otter_partition_options po = {.kind = OTTER_PARTITION_IID, .num_clients = (int)pn, .seed = (uint64_t)seed};
        if (otter_dataset_partition(&part, ds, &po) != OTTER_OK) {
            cli_fail(VERB, "--partition");
            goto done;
        }
        ctx.local.indices = otter_partition_client(part, (int)pi, &samples);
        ctx.local.num_indices = samples;
        if (samples == 0) {
            fprintf(stderr, "otter %s: part %lld of %lld of '%s' is empty\n", VERB, pi, pn, data);
            goto done;
        }
        ctx.local.seed = (uint64_t)seed * 1000003u + (uint64_t)pi;
    }
    otter_fl_client_options co = {
        .server = server, .token = token, .give_up = give_up, .log = on_log, .user = &ctx, .stop = &g_stop};
    if (otter_fl_client_create(&cl, lay, &co) != OTTER_OK) {
        cli_fail(VERB, server);
        goto done;
    }
    printf("%sclient of %s: %lld samples of %s, %lld local epochs of batches of %lld\n", ctx.label, server,
           (long long)samples, otter_dataset_description(ds), epochs, batch);
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    otter_fl_client_stats stats;
    otter_status st = otter_fl_client_run(cl, train_round, &ctx, &stats);
    if (st != OTTER_OK) {
        if (!ctx.train_failed) fprintf(stderr, "otter %s: %s\n", VERB, otter_last_error());
        goto done;
    }
    if (g_stop) {
        printf("%sstopped\n", ctx.label);
        goto done;
    }
    printf("%sdone: trained %lld rounds, %lld updates accepted, %lld refused, %lld registrations, %lld retries\n",
           ctx.label, (long long)stats.rounds_trained, (long long)stats.updates_accepted,
           (long long)stats.updates_refused, (long long)stats.registrations, (long long)stats.reconnects);
    rc = CLI_EXIT_OK;
done:
    otter_fl_client_free(cl);
    otter_fl_layout_free(lay);
    otter_partition_free(part);
    otter_dataset_free(ds);
    otter_training_session_free(s);
    return rc;
}
