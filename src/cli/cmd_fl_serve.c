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
#include "fl/protocol.h"
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
    otter_training_session *s;
    otter_dataset *eds;
    bool verbose, failed;
    double *acc, *loss, *rounds; /* plot data */
    size_t n_pts, cap_pts;
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
    double a = NAN;
    if (c->eds) {
        cli_eval_result er = {0};
        if (otter_training_copy_buffer_to_params(c->s, r->global, r->n, true) != OTTER_OK) {
            cli_fail(VERB, "setting the global model for evaluation");
            c->failed = true;
        } else if (cli_evaluate(VERB, c->s, c->eds, 256, &er)) {
            snprintf(eloss, sizeof eloss, "%.4f", er.loss);
            if (er.has_accuracy) a = er.accuracy, snprintf(acc, sizeof acc, "%.2f%%", 100.0 * er.accuracy);
        } else {
            c->failed = true;
        }
    }
    if (r->has_loss) snprintf(loss, sizeof loss, "%.4f", r->train_loss);
    printf("round %lld/%lld: clients %zu/%zu, dropped %zu, refused %zu, examples %lld, train loss %s, eval loss %s, "
           "eval acc %s, %.2fs\n",
           (long long)r->round, (long long)r->rounds, r->received, r->picked, r->dropped, r->refused,
           (long long)r->num_examples, loss, eloss, acc, r->seconds);
    fflush(stdout);
    if (c->n_pts == c->cap_pts) {
        size_t cap = c->cap_pts ? 2 * c->cap_pts : 64;
        double *x = realloc(c->rounds, cap * sizeof *x), *y = x ? realloc(c->acc, cap * sizeof *y) : NULL,
               *z = y ? realloc(c->loss, cap * sizeof *z) : NULL;
        if (x) c->rounds = x;
        if (y) c->acc = y;
        if (z) c->loss = z;
        if (!x || !y || !z) return;
        c->cap_pts = cap;
    }
    c->rounds[c->n_pts] = (double)r->round, c->acc[c->n_pts] = a, c->loss[c->n_pts] = r->has_loss ? r->train_loss : NAN;
    c->n_pts++;
}

static void polyline(FILE *f, const double *x, const double *y, size_t n, double x0, double x1, double y0, double y1,
                     const char *color) {
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='1.5' points='", color);
    for (size_t i = 0; i < n; i++)
        if (isfinite(y[i]))
            fprintf(f, "%.1f,%.1f ", 60 + 500 * (x[i] - x0) / (x1 - x0), 340 - 300 * (y[i] - y0) / (y1 - y0));
    fprintf(f, "'/>\n");
}

/* Accuracy (left axis, 0..1) and train loss (scaled to its own range) per round, as SVG. */
static bool write_plot(const char *path, const serve_ctx *c) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    double x0 = c->n_pts ? c->rounds[0] : 0, x1 = c->n_pts ? c->rounds[c->n_pts - 1] : 1, lmax = 0;
    if (x1 <= x0) x1 = x0 + 1;
    for (size_t i = 0; i < c->n_pts; i++)
        if (isfinite(c->loss[i])) lmax = fmax(lmax, c->loss[i]);
    if (lmax <= 0) lmax = 1;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='640' height='400' font-family='sans-serif'>\n"
            "<rect width='640' height='400' fill='white'/>\n"
            "<rect x='60' y='40' width='500' height='300' fill='none' stroke='#999'/>\n"
            "<text x='310' y='25' text-anchor='middle' font-size='14'>federated training</text>\n"
            "<text x='310' y='375' text-anchor='middle' font-size='12'>round (%.0f to %.0f)</text>\n"
            "<text x='70' y='60' font-size='12' fill='#228833'>eval accuracy (0 to 1)</text>\n"
            "<text x='70' y='76' font-size='12' fill='#4477aa'>train loss (0 to %.3g)</text>\n",
            x0, x1, lmax);
    polyline(f, c->rounds, c->acc, c->n_pts, x0, x1, 0, 1, "#228833");
    polyline(f, c->rounds, c->loss, c->n_pts, x0, x1, 0, lmax, "#4477aa");
    fprintf(f, "</svg>\n");
    bool ok = !ferror(f);
    return (fclose(f) == 0) && ok;
}

/* Tokens, one a line; blank lines and lines starting with # are skipped. */
static char **read_tokens(const char *path, size_t *n) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char **list = NULL, line[512];
    size_t k = 0;
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\r\n");
        line[len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        len = strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) p[--len] = '\0';
        if (!*p || *p == '#') continue;
        char **nl = realloc(list, (k + 2) * sizeof *nl);
        if (!nl) break;
        list = nl;
        if (!(list[k] = strdup(p))) break;
        list[++k] = NULL;
    }
    fclose(f);
    *n = k;
    if (!list) list = calloc(1, sizeof *list);
    return list;
}

static bool parse_double(const char *t, double lo, double *out) {
    char *end;
    double v = strtod(t, &end);
    if (!*t || *end || !isfinite(v) || v < lo) return false;
    *out = v;
    return true;
}

int cmd_fl_serve(int argc, char **argv) {
    const char *artifacts = NULL, *rounds_t = NULL, *k_t = NULL, *m_t = NULL, *timeout_t = NULL, *listen = NULL,
               *state = NULL, *token = NULL, *tokens_f = NULL, *strategy_t = NULL, *eval_data = NULL, *save = NULL,
               *plot = NULL, *seed_t = NULL, *threads_t = NULL, *maxconn_t = NULL, *join_t = NULL, *poll_t = NULL,
               *prefix = NULL;
    bool verbose = false;
    const cli_opt opts[] = {
        {"--artifacts", NULL, "DIR", "training artifacts (otter artifacts); the initial global model", &artifacts,
         NULL},
        {"--rounds", NULL, "R", "rounds in total, resumed ones included (required)", &rounds_t, NULL},
        {"--clients-per-round", NULL, "K", "clients picked per round (required)", &k_t, NULL},
        {"--min-clients", NULL, "M", "updates needed to close a round at the timeout (default K)", &m_t, NULL},
        {"--round-timeout", NULL, "S", "seconds before a round closes without its late clients (default 60)",
         &timeout_t, NULL},
        {"--listen", NULL, "HOST:PORT", "address to listen on (default 127.0.0.1:8080; port 0: any free port)", &listen,
         NULL},
        {"--state", NULL, "DIR", "global model, round and strategy state saved after every round; resumed from", &state,
         NULL},
        {"--token", NULL, "T", "the token clients register with", &token, NULL},
        {"--tokens", NULL, "FILE", "accepted registration tokens, one a line", &tokens_f, NULL},
        {"--strategy", NULL, "S",
         "fedavg (default), fedavgm[:lr=,momentum=], fedadam[:lr=,beta1=,beta2=,tau=], fedyogi[...], median, "
         "trimmed-mean[:fraction=]",
         &strategy_t, NULL},
        {"--eval-data", NULL, "SPEC", "evaluate the global model after every round (test split)", &eval_data, NULL},
        {"--save", NULL, "CKPT", "write the final global model as a checkpoint (for otter eval / export)", &save, NULL},
        {"--plot", NULL, "FILE.svg", "accuracy and loss per round as SVG", &plot, NULL},
        {"--seed", NULL, "S", "client selection seed (default 0)", &seed_t, NULL},
        {"--threads", NULL, "N", "HTTP worker threads (default 2)", &threads_t, NULL},
        {"--max-connections", NULL, "N", "concurrent connections (default 1000)", &maxconn_t, NULL},
        {"--join-wait", NULL, "S",
         "once M clients are there, seconds to wait for K before a round opens (default "
         "min(2, timeout))",
         &join_t, NULL},
        {"--poll-ms", NULL, "MS", "how often idle clients ask for a round (default 200)", &poll_t, NULL},
        {"--prefix", NULL, "P", "artifact file name prefix", &prefix, NULL},
        {"--verbose", "-v", NULL, "log every accepted update", NULL, &verbose},
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
    if (!artifacts) return cli_usage_error(&spec, "missing --artifacts");
    if (!rounds_t || !k_t) return cli_usage_error(&spec, "--rounds and --clients-per-round are required");
    if (!state) return cli_usage_error(&spec, "missing --state");
    if (!token == !tokens_f) return cli_usage_error(&spec, "give --token or --tokens (one of them)");
    long long rounds, k, m, seed = 0, threads = 2, maxconn = 1000, poll = 200;
    double timeout = 60, join = 0;
    if (!cli_parse_int(rounds_t, 1, &rounds)) return cli_usage_error(&spec, "bad --rounds '%s'", rounds_t);
    if (!cli_parse_int(k_t, 1, &k)) return cli_usage_error(&spec, "bad --clients-per-round '%s'", k_t);
    m = k;
    if (m_t && (!cli_parse_int(m_t, 1, &m) || m > k))
        return cli_usage_error(&spec, "bad --min-clients '%s' (1..K)", m_t);
    if (timeout_t && (!parse_double(timeout_t, 0, &timeout) || timeout <= 0))
        return cli_usage_error(&spec, "bad --round-timeout '%s'", timeout_t);
    if (join_t && !parse_double(join_t, 0, &join)) return cli_usage_error(&spec, "bad --join-wait '%s'", join_t);
    if (seed_t && !cli_parse_int(seed_t, 0, &seed)) return cli_usage_error(&spec, "bad --seed '%s'", seed_t);
    if (threads_t && (!cli_parse_int(threads_t, 1, &threads) || threads > 256))
        return cli_usage_error(&spec, "bad --threads '%s'", threads_t);
    if (maxconn_t && (!cli_parse_int(maxconn_t, 1, &maxconn) || maxconn > 100000))
        return cli_usage_error(&spec, "bad --max-connections '%s'", maxconn_t);
    if (poll_t && (!cli_parse_int(poll_t, 1, &poll) || poll > 60000))
        return cli_usage_error(&spec, "bad --poll-ms '%s'", poll_t);
    otter_fl_strategy strat = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    if (strategy_t && otter_fl_strategy_parse(strategy_t, &strat) != OTTER_OK)
        return cli_usage_error(&spec, "--strategy: %s", otter_last_error());
    char host[256] = "127.0.0.1";
    long long port = 8080;
    if (listen) {
        const char *colon = strrchr(listen, ':');
        if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host ||
            !cli_parse_int(colon + 1, 0, &port) || port > 65535)
            return cli_usage_error(&spec, "bad --listen '%s' (HOST:PORT)", listen);
        snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
        if (host[0] == '[' && host[strlen(host) - 1] == ']') { /* [::1]:8080 */
            memmove(host, host + 1, strlen(host));
            host[strlen(host) - 1] = '\0';
        }
    }
    char **tokens = NULL;
    size_t n_tokens = 0;
    const char *one[1] = {token};
    if (tokens_f) {
        if (!(tokens = read_tokens(tokens_f, &n_tokens))) {
            fprintf(stderr, "otter %s: can't read --tokens '%s'\n", VERB, tokens_f);
            return CLI_EXIT_INVALID;
        }
        if (!n_tokens) {
            fprintf(stderr, "otter %s: '%s' holds no token\n", VERB, tokens_f);
            cli_list_free(tokens);
            return CLI_EXIT_INVALID;
        }
    }
    serve_ctx ctx = {.verbose = verbose};
    otter_fl_layout *lay = NULL;
    otter_fl_server *srv = NULL;
    rc = CLI_EXIT_INVALID;
    if (otter_training_session_create_from_dir(&ctx.s, artifacts, prefix, NULL, NULL) != OTTER_OK) {
        cli_fail(VERB, artifacts);
        goto done;
    }
    if (eval_data) {
        if (!otter_training_has_eval(ctx.s)) {
            fprintf(stderr, "otter %s: --eval-data given but '%s' has no eval model\n", VERB, artifacts);
            goto done;
        }
        if (otter_dataset_open(&ctx.eds, eval_data, &(otter_dataset_options){.split = OTTER_SPLIT_TEST}) != OTTER_OK) {
            cli_fail(VERB, eval_data);
            goto done;
        }
    }
    if (otter_fl_layout_from_session(&lay, ctx.s) != OTTER_OK) {
        cli_fail(VERB, artifacts);
        goto done;
    }
    size_t n = 0;
    const float *init = otter_training_trainable_slab(ctx.s, &n);
    otter_fl_server_options so = {.host = host,
                                  .port = (int)port,
                                  .rounds = rounds,
                                  .clients_per_round = (size_t)k,
                                  .min_clients = (size_t)m,
                                  .round_timeout = timeout,
                                  .join_wait = join,
                                  .state_dir = state,
                                  .tokens = tokens ? (const char *const *)tokens : one,
                                  .n_tokens = tokens ? n_tokens : 1,
                                  .seed = (uint64_t)seed,
                                  .threads = (unsigned)threads,
                                  .max_connections = (unsigned)maxconn,
                                  .poll_ms = (int)poll,
                                  .log = on_log,
                                  .on_round = on_round,
                                  .user = &ctx,
                                  .stop = &g_stop};
    if (otter_fl_server_create(&srv, lay, init, n, &strat, &so) != OTTER_OK) {
        cli_fail(VERB, state);
        goto done;
    }
    char sdesc[256];
    otter_fl_strategy_format(&strat, sdesc, sizeof sdesc);
    printf("listening on http://%s%s%s:%d (%s, %zu parameters in %zu tensors, %lld rounds of %lld clients, "
           "min %lld, timeout %gs, state %s)\n",
           strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", otter_fl_server_port(srv), sdesc, n,
           otter_fl_layout_count(lay), rounds, k, m, timeout, state);
    if (otter_fl_server_round(srv) > 0)
        printf("resumed at round %lld of %lld from %s\n", (long long)otter_fl_server_round(srv), rounds, state);
    fflush(stdout);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (otter_fl_server_run(srv) != OTTER_OK) {
        cli_fail(VERB, "round");
        goto done;
    }
    if (ctx.failed) goto done;
    int64_t done_rounds = otter_fl_server_round(srv);
    if (g_stop && done_rounds < rounds) {
        printf("stopped after round %lld of %lld; the same command resumes from %s\n", (long long)done_rounds, rounds,
               state);
        rc = CLI_EXIT_INVALID;
        goto done;
    }
    printf("done: %lld rounds; state %s\n", (long long)done_rounds, state);
    if (save) {
        size_t gn = 0;
        const float *g = otter_fl_server_global(srv, &gn);
        if (otter_training_copy_buffer_to_params(ctx.s, g, gn, true) != OTTER_OK ||
            otter_training_save_checkpoint(ctx.s, save, false) != OTTER_OK) {
            cli_fail(VERB, save);
            goto done;
        }
        printf("global model: %s\n", save);
    }
    if (plot) {
        if (!write_plot(plot, &ctx)) {
            fprintf(stderr, "otter %s: can't write '%s'\n", VERB, plot);
            goto done;
        }
        printf("plot: %s\n", plot);
    }
    rc = CLI_EXIT_OK;
done:
    otter_fl_server_free(srv);
    otter_fl_layout_free(lay);
    otter_dataset_free(ctx.eds);
    otter_training_session_free(ctx.s);
    cli_list_free(tokens);
    free(ctx.acc), free(ctx.loss), free(ctx.rounds);
    return rc;
}
