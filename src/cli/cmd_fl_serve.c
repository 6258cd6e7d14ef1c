/* otter fl serve: the federated server. Loads the artifacts (for the initial global model, its layout and,
 * with --eval-data, the evaluation after every round), resumes from --state when a previous run saved
 * there, serves rounds over HTTP (src/fl/server.c) and prints one line per round. */
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

#define VERB "fl serve"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct serve_ctx {
    otter_training_session *s; /* evaluates the global model and saves it */
    otter_dataset *eds;
    bool verbose, failed;
    cli_curve loss, acc; /* per round, for --plot */
} serve_ctx;

static void on_log(otter_log_level lv, const char *msg, void *user) {
    serve_ctx *c = user;
    if (lv == OTTER_LOG_DEBUG && !c->verbose) return;
    time_t t = time(NULL);
    struct tm tm;
    char ts[16];
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%H:%M:%S", &tm);
    fprintf(stderr, "[%s] %s%s\n", ts, lv == OTTER_LOG_WARN ? "warning: " : "", msg);
}

static void on_round(const otter_fl_round_report *r, void *user) {
    serve_ctx *c = user;
    char acc[32] = "-", loss[32] = "-", eloss[32] = "-";
    otter_eval_result er = {0};
    if (c->eds) {
        if (otter_training_copy_buffer_to_params(c->s, r->global, r->n, true) != OTTER_OK ||
            otter_training_evaluate(c->s, c->eds, 256, &er) != OTTER_OK) {
            cli_fail(VERB, "evaluating the global model");
            c->failed = true;
        } else {
            snprintf(eloss, sizeof eloss, "%.4f", er.loss);
            if (er.has_accuracy) snprintf(acc, sizeof acc, "%.2f%%", 100.0 * er.accuracy);
        }
    }
    if (r->has_loss) snprintf(loss, sizeof loss, "%.4f", r->train_loss);
    printf("round %lld/%lld: clients %zu/%zu, dropped %zu, refused %zu, examples %lld, train loss %s, eval loss %s, "
           "eval acc %s, %.2fs\n",
           (long long)r->round, (long long)r->rounds, r->received, r->picked, r->dropped, r->refused,
           (long long)r->num_examples, loss, eloss, acc, r->seconds);
    fflush(stdout);
    cli_curve_add(&c->loss, (double)r->round, r->has_loss ? r->train_loss : NAN);
    cli_curve_add(&c->acc, (double)r->round, er.has_accuracy ? er.accuracy : NAN);
}

/* The verb's arguments, parsed into the server's options. */
typedef struct serve_args {
    const char *artifacts, *eval_data, *save, *plot, *prefix, *state;
    char host[256];
    char **tokens; /* the accepted tokens (owned) */
    bool verbose;
    otter_fl_strategy strategy;
    otter_fl_server_options so;
    const char *web, *web_data; /* --web DIR, --web-data mnist:DIR */
    long long web_shards;
    otter_fl_web_mount mounts[3];
    char *web_config; /* owned */
} serve_args;

#define WEB_CONFIG                                                                                                     \
    "{\"artifacts\": {\"trainModel\": \"/artifacts/%straining_model.onnx\", \"evalModel\": "                           \
    "\"/artifacts/%seval_model.onnx\", \"optimizerModel\": \"/artifacts/%soptimizer_model.onnx\", "                    \
    "\"checkpointState\": \"/artifacts/%scheckpoint\"}, \"data\": %s}\n"

/* --web: the page and package under /web/, the artifacts under /artifacts/ and the MNIST IDX files under
 * /data/ (both behind a token), and /web-config telling the page where they are and how many shards the
 * training split is cut into (a browser client trains on shard (client ID - 1) mod shards). */
static bool web_options(serve_args *a) {
    const char *pre = a->prefix ? a->prefix : "";
    size_t n = 0;
    a->mounts[n++] = (otter_fl_web_mount){.prefix = "/web/", .dir = a->web};
    a->mounts[n++] = (otter_fl_web_mount){.prefix = "/artifacts/", .dir = a->artifacts, .need_token = true};
    if (a->web_data)
        a->mounts[n++] = (otter_fl_web_mount){.prefix = "/data/", .dir = a->web_data + 6, .need_token = true};
    char data[512] = "null";
    if (a->web_data)
        snprintf(data, sizeof data,
                 "{\"format\": \"mnist\", \"train_images\": \"/data/train-images-idx3-ubyte\", "
                 "\"train_labels\": \"/data/train-labels-idx1-ubyte\", \"test_images\": "
                 "\"/data/t10k-images-idx3-ubyte\", \"test_labels\": \"/data/t10k-labels-idx1-ubyte\", "
                 "\"shards\": %lld}",
                 a->web_shards);
    int len = snprintf(NULL, 0, WEB_CONFIG, pre, pre, pre, pre, data);
    if (!(a->web_config = malloc((size_t)len + 1))) return false;
    snprintf(a->web_config, (size_t)len + 1, WEB_CONFIG, pre, pre, pre, pre, data);
    a->so.web = a->mounts, a->so.n_web = n, a->so.web_home = "/web/client/", a->so.web_config = a->web_config;
    return true;
}

/* --listen HOST:PORT ([::1]:8080 for IPv6) into a->host and a->so.port. */
static bool parse_listen(const char *listen, serve_args *a) {
    const char *colon = strrchr(listen, ':');
    long long port;
    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof a->host ||
        !cli_parse_int(colon + 1, 0, &port) || port > 65535)
        return false;
    snprintf(a->host, sizeof a->host, "%.*s", (int)(colon - listen), listen);
    size_t n = strlen(a->host);
    if (a->host[0] == '[' && a->host[n - 1] == ']') memmove(a->host, a->host + 1, n - 2), a->host[n - 2] = '\0';
    a->so.port = (int)port;
    return true;
}

/* --token, --tokens or $OTTER_FL_TOKEN into a->so.tokens; errors are printed. */
static int read_token_options(const char *token, const char *tokens_f, serve_args *a) {
    size_t n = 0;
    if (!(a->tokens = cli_fl_token_option(VERB, token, tokens_f, &n))) return CLI_EXIT_INVALID;
    a->so.tokens = (const char *const *)a->tokens, a->so.n_tokens = n;
    return CLI_CONTINUE;
}

static int parse_args(int argc, char **argv, serve_args *a) {
    const char *rounds_t = NULL, *k_t = NULL, *m_t = NULL, *timeout_t = NULL, *listen = NULL, *token = NULL,
               *tokens_f = NULL, *strategy_t = NULL, *seed_t = NULL, *threads_t = NULL, *maxconn_t = NULL,
               *join_t = NULL, *poll_t = NULL, *clip_t = NULL, *maxex_t = NULL, *perip_t = NULL, *idle_t = NULL,
               *reqto_t = NULL, *pertok_t = NULL, *ttl_t = NULL, *shards_t = NULL;
    const cli_opt opts[] = {
        {"--artifacts", NULL, "DIR", "training artifacts (otter artifacts); the initial global model", &a->artifacts,
         NULL},
        {"--rounds", NULL, "R", "rounds in total, resumed ones included (required)", &rounds_t, NULL},
        {"--clients-per-round", NULL, "K", "clients picked per round (required)", &k_t, NULL},
        {"--min-clients", NULL, "M", "updates needed to close a round at the timeout (default K)", &m_t, NULL},
        {"--round-timeout", NULL, "S", "seconds before a round closes without its late clients (default 60)",
         &timeout_t, NULL},
        {"--listen", NULL, "HOST:PORT", "address to listen on (default 127.0.0.1:8080; port 0: any free port)", &listen,
         NULL},
        {"--state", NULL, "DIR", "global model, round and strategy state saved after every round; resumed from",
         &a->state, NULL},
        {"--token", NULL, "T", "the token clients register with (default: $OTTER_FL_TOKEN)", &token, NULL},
        {"--tokens", NULL, "FILE", "accepted registration tokens, one a line (# comments)", &tokens_f, NULL},
        {"--strategy", NULL, "S",
         "fedavg (default), fedavgm[:lr=,momentum=], fedadam[:lr=,beta1=,beta2=,tau=], fedyogi[...], median, "
         "trimmed-mean[:fraction=]",
         &strategy_t, NULL},
        {"--clip-norm", NULL, "C",
         "fedavg/fedavgm: scale each update's change to L2 norm <= C (default: no bound); see also median, "
         "trimmed-mean",
         &clip_t, NULL},
        {"--max-examples", NULL, "N",
         "weigh an update claiming more than N examples as N, with a warning (default 1000000)", &maxex_t, NULL},
        {"--eval-data", NULL, "SPEC", "evaluate the global model after every round (test split)", &a->eval_data, NULL},
        {"--save", NULL, "CKPT", "write the final global model as a checkpoint (for otter eval / export)", &a->save,
         NULL},
        {"--plot", NULL, "FILE.svg", "accuracy and loss per round as SVG", &a->plot, NULL},
        {"--seed", NULL, "S", "client selection seed (default 0)", &seed_t, NULL},
        {"--threads", NULL, "N", "HTTP worker threads (default 2)", &threads_t, NULL},
        {"--max-connections", NULL, "N", "concurrent connections (default 1000)", &maxconn_t, NULL},
        {"--max-connections-per-ip", NULL, "N", "concurrent connections from one address (default N/4 of the above)",
         &perip_t, NULL},
        {"--idle-timeout", NULL, "S", "close a connection silent this long (default 30)", &idle_t, NULL},
        {"--request-timeout", NULL, "S",
         "close a connection whose request (headers and body) isn't in this long (default 120)", &reqto_t, NULL},
        {"--max-clients-per-token", NULL, "N", "registrations one registration token may hold (default: all)",
         &pertok_t, NULL},
        {"--slot-ttl", NULL, "S", "a registration not heard from this long expires (default max(60, timeout))", &ttl_t,
         NULL},
        {"--tls-cert", NULL, "PEM", "serve HTTPS with this certificate (with --tls-key)", &a->so.tls_cert, NULL},
        {"--tls-key", NULL, "PEM", "the certificate's private key", &a->so.tls_key, NULL},
        {"--join-wait", NULL, "S",
         "once M clients are there, seconds to wait for K before a round opens (default "
         "min(2, timeout))",
         &join_t, NULL},
        {"--poll-ms", NULL, "MS", "how often idle clients ask for a round (default 200)", &poll_t, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &a->prefix, NULL},
        {"--web", NULL, "DIR",
         "also serve browser clients: the page and package in DIR (the repository's web/) at /web/client/, the "
         "artifacts to token holders",
         &a->web, NULL},
        {"--web-data", NULL, "mnist:DIR",
         "with --web: hand MNIST (IDX files in DIR) to browser clients, one shard each", &a->web_data, NULL},
        {"--web-shards", NULL, "N", "with --web-data: shards the training split is cut into (default K)", &shards_t,
         NULL},
        {"--verbose", "-v", NULL, "log every accepted update", NULL, &a->verbose},
        {0}};
    const cli_spec spec = {VERB,
                           "",
                           "Federated averaging server: registers clients, runs rounds over HTTP (binary weights,\n"
                           "see src/fl/protocol.h), aggregates with the chosen strategy, saves its state after\n"
                           "every round and resumes from it when restarted. One line per round on stdout; refused\n"
                           "requests are logged on stderr.",
                           0,
                           0,
                           opts};
    const char *pos[1];
    size_t n_pos;
    int rc = cli_parse(&spec, argc, argv, pos, &n_pos);
    if (rc != CLI_CONTINUE) return rc;
    if (!a->artifacts) return cli_usage_error(&spec, "missing --artifacts");
    if (!rounds_t || !k_t) return cli_usage_error(&spec, "--rounds and --clients-per-round are required");
    if (!a->state) return cli_usage_error(&spec, "missing --state");
    if (!a->so.tls_cert != !a->so.tls_key) return cli_usage_error(&spec, "--tls-cert and --tls-key go together");
    if (token && tokens_f) return cli_usage_error(&spec, "give --token or --tokens, not both");
    if ((a->web_data || shards_t) && !a->web) return cli_usage_error(&spec, "--web-data and --web-shards need --web");
    if (a->web_data && strncmp(a->web_data, "mnist:", 6) != 0)
        return cli_usage_error(&spec, "bad --web-data '%s' (mnist:DIR)", a->web_data);
    long long rounds, k, m, seed = 0, threads = 2, maxconn = 1000, poll = 200, maxex = 0;
    double timeout = 60, join = 0;
    if (!cli_parse_int(rounds_t, 1, &rounds)) return cli_usage_error(&spec, "bad --rounds '%s'", rounds_t);
    if (!cli_parse_int(k_t, 1, &k)) return cli_usage_error(&spec, "bad --clients-per-round '%s'", k_t);
    m = k;
    if (m_t && (!cli_parse_int(m_t, 1, &m) || m > k))
        return cli_usage_error(&spec, "bad --min-clients '%s' (1..K)", m_t);
    if (timeout_t && (!cli_parse_double(timeout_t, 0, &timeout) || timeout <= 0))
        return cli_usage_error(&spec, "bad --round-timeout '%s'", timeout_t);
    if (join_t && !cli_parse_double(join_t, 0, &join)) return cli_usage_error(&spec, "bad --join-wait '%s'", join_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (threads_t && (!cli_parse_int(threads_t, 1, &threads) || threads > 256))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (maxconn_t && (!cli_parse_int(maxconn_t, 1, &maxconn) || maxconn > 100000))
        return cli_usage_error(&spec, "bad --max-connections '%s'", maxconn_t);
    if (poll_t && (!cli_parse_int(poll_t, 1, &poll) || poll > 60000))
        return cli_usage_error(&spec, "bad --poll-ms '%s'", poll_t);
    long long perip = 0, idle = 0;
    double reqto = 0;
    if (perip_t && (!cli_parse_int(perip_t, 1, &perip) || perip > 100000))
        return cli_usage_error(&spec, "bad --max-connections-per-ip '%s'", perip_t);
    if (idle_t && (!cli_parse_int(idle_t, 1, &idle) || idle > 86400))
        return cli_usage_error(&spec, "bad --idle-timeout '%s'", idle_t);
    if (reqto_t && (!cli_parse_double(reqto_t, 0, &reqto) || !(reqto > 0)))
        return cli_usage_error(&spec, "bad --request-timeout '%s'", reqto_t);
    long long pertok = 0;
    double ttl = 0;
    if (pertok_t && (!cli_parse_int(pertok_t, 1, &pertok) || pertok > 10000000))
        return cli_usage_error(&spec, "bad --max-clients-per-token '%s'", pertok_t);
    if (ttl_t && (!cli_parse_double(ttl_t, 0, &ttl) || !(ttl > 0)))
        return cli_usage_error(&spec, "bad --slot-ttl '%s'", ttl_t);
    if (maxex_t && !cli_parse_int(maxex_t, 1, &maxex))
        return cli_usage_error(&spec, "bad --max-examples '%s'", maxex_t);
    a->web_shards = k;
    if (shards_t && (!cli_parse_int(shards_t, 1, &a->web_shards) || a->web_shards > 60000))
        return cli_usage_error(&spec, "bad --web-shards '%s' (1..60000)", shards_t);
    a->strategy = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    if (strategy_t && otter_fl_strategy_parse(strategy_t, &a->strategy) != OTTER_OK)
        return cli_usage_error(&spec, "--strategy: %s", otter_last_error());
    if (clip_t && (!cli_parse_double(clip_t, 0, &a->strategy.clip_norm) || !(a->strategy.clip_norm > 0)))
        return cli_usage_error(&spec, "bad --clip-norm '%s'", clip_t);
    if (otter_fl_strategy_check(&a->strategy) != OTTER_OK)
        return cli_usage_error(&spec, "--clip-norm: %s", otter_last_error());
    snprintf(a->host, sizeof a->host, "127.0.0.1");
    a->so.port = 8080;
    if (listen && !parse_listen(listen, a)) return cli_usage_error(&spec, "bad --listen '%s' (HOST:PORT)", listen);
    a->so.host = a->host, a->so.rounds = rounds, a->so.clients_per_round = (size_t)k, a->so.min_clients = (size_t)m;
    a->so.round_timeout = timeout, a->so.join_wait = join, a->so.state_dir = a->state, a->so.seed = (uint64_t)seed;
    a->so.threads = (unsigned)threads, a->so.max_connections = (unsigned)maxconn, a->so.poll_ms = (int)poll;
    a->so.max_examples = maxex, a->so.max_per_ip = (unsigned)perip, a->so.idle_timeout = (unsigned)idle;
    a->so.request_timeout = reqto, a->so.max_per_token = (unsigned)pertok, a->so.slot_ttl = ttl;
    if (a->web && !web_options(a)) {
        fprintf(stderr, "otter %s: out of memory\n", VERB);
        return CLI_EXIT_INVALID;
    }
    return read_token_options(token, tokens_f, a);
}

/* After the last round (or a stop): the summary, the global model, the plot. */
static int finish(serve_args *a, serve_ctx *ctx, otter_fl_server *srv) {
    int64_t done_rounds = otter_fl_server_round(srv);
    if (g_stop && done_rounds < a->so.rounds) {
        printf("stopped after round %lld of %lld; the same command resumes from %s\n", (long long)done_rounds,
               (long long)a->so.rounds, a->state);
        return CLI_EXIT_INVALID;
    }
    printf("done: %lld rounds; state %s\n", (long long)done_rounds, a->state);
    if (a->save) {
        size_t gn = 0;
        const float *g = otter_fl_server_global(srv, &gn);
        if (otter_training_copy_buffer_to_params(ctx->s, g, gn, true) != OTTER_OK ||
            otter_training_save_checkpoint(ctx->s, a->save, false) != OTTER_OK)
            return cli_fail(VERB, a->save);
        printf("global model: %s\n", a->save);
    }
    if (a->plot && !cli_fl_plot(VERB, a->plot, &ctx->loss, &ctx->acc)) return CLI_EXIT_INVALID;
    return CLI_EXIT_OK;
}

/* Serve until the rounds are done or a signal stops it. */
static int serve(serve_args *a, serve_ctx *ctx, const otter_fl_layout *lay) {
    otter_fl_server *srv = NULL;
    size_t n = 0;
    const float *init = otter_training_trainable_slab(ctx->s, &n);
    a->so.log = on_log, a->so.on_round = on_round, a->so.user = ctx, a->so.stop = &g_stop;
    if (otter_fl_server_create(&srv, lay, init, n, &a->strategy, &a->so) != OTTER_OK) return cli_fail(VERB, a->state);
    char sdesc[256];
    otter_fl_strategy_format(&a->strategy, sdesc, sizeof sdesc);
    bool v6 = strchr(a->host, ':') != NULL;
    printf("listening on http%s://%s%s%s:%d (%s, %zu parameters in %zu tensors, %lld rounds of %zu clients, "
           "min %zu, timeout %gs, state %s)\n",
           a->so.tls_cert ? "s" : "", v6 ? "[" : "", a->host, v6 ? "]" : "", otter_fl_server_port(srv), sdesc, n,
           otter_fl_layout_count(lay), (long long)a->so.rounds, a->so.clients_per_round, a->so.min_clients,
           a->so.round_timeout, a->state);
    if (a->web)
        printf("browser clients: open http%s://%s%s%s:%d/web/client/ and enter the token (or append #token=T)\n",
               a->so.tls_cert ? "s" : "", v6 ? "[" : "", a->host, v6 ? "]" : "", otter_fl_server_port(srv));
    if (otter_fl_server_round(srv) > 0)
        printf("resumed at round %lld of %lld from %s\n", (long long)otter_fl_server_round(srv),
               (long long)a->so.rounds, a->state);
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int rc = otter_fl_server_run(srv) != OTTER_OK ? cli_fail(VERB, "round")
             : ctx->failed                        ? CLI_EXIT_INVALID
                                                  : finish(a, ctx, srv);
    otter_fl_server_free(srv);
    return rc;
}

int cmd_fl_serve(int argc, char **argv) {
    serve_args a = {0};
    int rc = parse_args(argc, argv, &a);
    serve_ctx ctx = {.verbose = a.verbose};
    otter_fl_layout *lay = NULL;
    if (rc != CLI_CONTINUE) goto done;
    rc = CLI_EXIT_INVALID;
    if (otter_training_session_create_from_dir(&ctx.s, a.artifacts, a.prefix, NULL, NULL) != OTTER_OK)
        cli_fail(VERB, a.artifacts);
    else if (a.eval_data && !otter_training_has_eval(ctx.s))
        fprintf(stderr, "otter %s: --eval-data given but '%s' has no eval model\n", VERB, a.artifacts);
    else if (a.eval_data &&
             otter_dataset_open(&ctx.eds, a.eval_data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST}) != OTTER_OK)
        cli_fail(VERB, a.eval_data);
    else if (otter_fl_layout_from_session(&lay, ctx.s) != OTTER_OK)
        cli_fail(VERB, a.artifacts);
    else
        rc = serve(&a, &ctx, lay);
done:
    otter_fl_layout_free(lay);
    otter_dataset_free(ctx.eds);
    otter_training_session_free(ctx.s);
    cli_list_free(a.tokens);
    free(a.web_config);
    cli_curve_free(&ctx.loss), cli_curve_free(&ctx.acc);
    return rc;
}
