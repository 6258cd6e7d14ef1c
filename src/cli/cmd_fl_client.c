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
    char label[64]; /* "part I/N: " */
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

/* The verb's arguments besides the training context. */
typedef struct client_args {
    const char *server, *token, *data, *ca;
    char **tokens; /* the token read (owned); token points at it */
    double give_up;
    bool partitioned;
    long long part_i, part_n; /* --partition I/N */
} client_args;

/* "I/N" with 0 <= I < N. */
static bool parse_part(const char *text, long long *i, long long *n) {
    char a[32], b[32];
    const char *slash = strchr(text, '/');
    if (!slash || (size_t)(slash - text) >= sizeof a || strlen(slash + 1) >= sizeof b) return false;
    snprintf(a, sizeof a, "%.*s", (int)(slash - text), text);
    snprintf(b, sizeof b, "%s", slash + 1);
    return cli_parse_int(a, 0, i) && cli_parse_int(b, 1, n) && *i < *n && *n <= 1000000;
}

static int parse_args(int argc, char **argv, client_args *a, client_ctx *c) {
    const char *epochs_t = NULL, *batch_t = NULL, *lr_t = NULL, *part_t = NULL, *seed_t = NULL, *threads_t = NULL,
               *give_t = NULL, *token_f = NULL;
    const cli_opt opts[] = {
        {"--server", NULL, "URL", "the server, e.g. http://127.0.0.1:8080 (required)", &a->server, NULL},
        {"--token", NULL, "T", "registration token the server was given (default: $OTTER_FL_TOKEN)", &a->token, NULL},
        {"--ca", NULL, "PEM", "CA certificate an https:// server must chain to (default: the system's)", &a->ca, NULL},
        {"--token-file", NULL, "FILE", "read the token from FILE's first line (not on the command line)", &token_f,
         NULL},
        {"--artifacts", NULL, "DIR", "the same training artifacts as the server's (required)", &c->artifacts, NULL},
        {"--data", NULL, "SPEC", "local training data: mnist:DIR, cifar10:DIR, npy:X.npy,Y.npy, csv:FILE (required)",
         &a->data, NULL},
        {"--local-epochs", NULL, "E", "epochs over the local data per round (default 1)", &epochs_t, NULL},
        {"--batch-size", NULL, "B", "samples per batch (default 10)", &batch_t, NULL},
        {"--lr", NULL, "LR", "learning rate (default: the artifacts' 0.001)", &lr_t, NULL},
        {"--partition", NULL, "I/N", "train on part I (0-based) of an IID split of the data into N parts", &part_t,
         NULL},
        {"--seed", NULL, "S", "partition and shuffling seed (default 0)", &seed_t, NULL},
        {"--threads", NULL, "N", "kernel threads (default: all cores)", &threads_t, NULL},
        {"--give-up", NULL, "S", "seconds without reaching the server before exiting with an error (default 300)",
         &give_t, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &c->prefix, NULL},
        {"--verbose", "-v", NULL, "more messages", NULL, &c->verbose},
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
    if (!a->server || !c->artifacts || !a->data)
        return cli_usage_error(&spec, "--server, --artifacts and --data are required");
    if (a->token && token_f) return cli_usage_error(&spec, "give --token or --token-file, not both");
    long long epochs = 1, batch = 10, seed = 0;
    double lr = 0;
    a->give_up = 300;
    if (epochs_t && !cli_parse_int(epochs_t, 1, &epochs))
        return cli_usage_error(&spec, "bad --local-epochs '%s'", epochs_t);
    if (batch_t && !cli_parse_int(batch_t, 1, &batch)) return cli_usage_error(&spec, "bad --batch-size '%s'", batch_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (threads_t && !cli_parse_int(threads_t, 0, &c->threads))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (give_t && (!cli_parse_double(give_t, 0, &a->give_up) || a->give_up <= 0))
        return cli_usage_error(&spec, "bad --give-up '%s'", give_t);
    if (lr_t && !cli_parse_double(lr_t, 0, &lr)) return cli_usage_error(&spec, "bad --lr '%s'", lr_t);
    if (part_t && !strchr(part_t, '/')) return cli_usage_error(&spec, "bad --partition '%s' (I/N)", part_t);
    if (part_t && !parse_part(part_t, &a->part_i, &a->part_n))
        return cli_usage_error(&spec, "bad --partition '%s' (I/N with 0 <= I < N)", part_t);
    a->partitioned = part_t != NULL;
    if (part_t) snprintf(c->label, sizeof c->label, "part %lld/%lld: ", a->part_i, a->part_n);
    c->local = (otter_train_options){
        .epochs = epochs, .batch_size = batch, .seed = (uint64_t)seed, .set_lr = lr_t != NULL, .lr = (float)lr};
    size_t n_tokens = 0;
    if (!(a->tokens = cli_fl_token_option(VERB, a->token, token_f, &n_tokens))) return CLI_EXIT_INVALID;
    a->token = a->tokens[0];
    return CLI_CONTINUE;
}

/* Join the server and train until it says training is over. */
static int run_client(const client_args *a, client_ctx *c, const otter_fl_layout *lay, int64_t samples) {
    otter_fl_client *cl = NULL;
    otter_fl_client_options co = {.server = a->server,
                                  .token = a->token,
                                  .give_up = a->give_up,
                                  .ca = a->ca,
                                  .log = on_log,
                                  .user = c,
                                  .stop = &g_stop};
    if (otter_fl_client_create(&cl, lay, &co) != OTTER_OK) return cli_fail(VERB, a->server);
    printf("%sclient of %s: %lld samples of %s, %lld local epochs of batches of %lld\n", c->label, a->server,
           (long long)samples, otter_dataset_description(c->ds), (long long)c->local.epochs,
           (long long)c->local.batch_size);
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    otter_fl_client_stats stats;
    int rc = CLI_EXIT_INVALID;
    if (otter_fl_client_run(cl, train_round, c, &stats) != OTTER_OK) {
        if (!c->train_failed) fprintf(stderr, "otter %s: %s\n", VERB, otter_last_error());
    } else if (g_stop) {
        printf("%sstopped\n", c->label);
    } else {
        printf("%sdone: trained %lld rounds, %lld updates accepted, %lld refused, %lld registrations, %lld retries\n",
               c->label, (long long)stats.rounds_trained, (long long)stats.updates_accepted,
               (long long)stats.updates_refused, (long long)stats.registrations, (long long)stats.reconnects);
        rc = CLI_EXIT_OK;
    }
    otter_fl_client_free(cl);
    return rc;
}

/* The layout of the artifacts' trainable parameters (what the server checks at registration). */
static bool artifacts_layout(const client_ctx *c, otter_fl_layout **lay) {
    otter_training_session *s = NULL;
    bool ok = false;
    if (otter_training_session_create_from_dir(&s, c->artifacts, c->prefix, NULL, NULL) != OTTER_OK)
        cli_fail(VERB, c->artifacts);
    else if (!otter_training_has_optimizer(s))
        fprintf(stderr, "otter %s: '%s' has no optimizer model\n", VERB, c->artifacts);
    else if (otter_fl_layout_from_session(lay, s) != OTTER_OK)
        cli_fail(VERB, c->artifacts);
    else
        ok = true;
    otter_training_session_free(s);
    return ok;
}

int cmd_fl_client(int argc, char **argv) {
    client_args a = {0};
    client_ctx ctx = {0};
    int rc = parse_args(argc, argv, &a, &ctx);
    if (rc != CLI_CONTINUE) return rc;
    otter_dataset *ds = NULL;
    otter_partition *part = NULL;
    otter_fl_layout *lay = NULL;
    rc = CLI_EXIT_INVALID;
    if (!artifacts_layout(&ctx, &lay)) goto done;
    if (otter_dataset_open(&ds, a.data, &(otter_dataset_options){.split = OTTER_SPLIT_TRAIN}) != OTTER_OK) {
        cli_fail(VERB, a.data);
        goto done;
    }
    ctx.ds = ds;
    int64_t samples = otter_dataset_size(ds);
    if (a.partitioned) {
        otter_partition_options po = {
            .kind = OTTER_PARTITION_IID, .num_clients = (int)a.part_n, .seed = ctx.local.seed};
        if (otter_dataset_partition(&part, ds, &po) != OTTER_OK) {
            cli_fail(VERB, "--partition");
            goto done;
        }
        ctx.local.indices = otter_partition_client(part, (int)a.part_i, &samples);
        ctx.local.num_indices = samples;
        if (samples == 0) {
            fprintf(stderr, "otter %s: part %lld of %lld of '%s' is empty\n", VERB, a.part_i, a.part_n, a.data);
            goto done;
        }
        ctx.local.seed = ctx.local.seed * 1000003u + (uint64_t)a.part_i;
    }
    rc = run_client(&a, &ctx, lay, samples);
done:
    otter_fl_layout_free(lay);
    otter_partition_free(part);
    otter_dataset_free(ds);
    cli_list_free(a.tokens);
    return rc;
}
