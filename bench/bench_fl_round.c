/* Server-side cost of a federated round: `otter fl serve`'s engine (src/fl/server.c) receiving C updates of a
 * model over loopback HTTP and aggregating them with FedAvg, state saved after each round as in a real run.
 *
 *     bench_fl_round ARTIFACTS_DIR [CLIENTS [ROUNDS]]        (defaults 100 clients, 4 rounds)
 *
 * The clients run in a child process (C threads, each an otter_fl_client whose "training" returns the global
 * weights plus a small client-specific offset), so the server process's CPU time (getrusage) is the server's
 * alone: HTTP receive, message checks, aggregation and the state save. Round 1 includes the registrations and
 * is left out of the averages. Also times the aggregation alone (C add_update + finish in memory) and prints
 * the wire format's size against raw float32. Not a test. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fl/protocol.h"
#include "otter/otter.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* ---- clients (child process) --------------------------------------------------------------------------- */

typedef struct bclient {
    otter_fl_client *c;
    int idx;
    otter_status st;
} bclient;

static otter_status echo_train(int64_t round, const float *global, size_t n, float *out, int64_t *num_examples,
                               double *loss, void *user) {
    bclient *b = user;
    float d = 1e-4f * (float)(b->idx + 1);
    for (size_t i = 0; i < n; i++) out[i] = global[i] + d;
    *num_examples = 500;
    *loss = 1.0 / (double)round;
    return OTTER_OK;
}

static void *client_main(void *p) {
    bclient *b = p;
    b->st = otter_fl_client_run(b->c, echo_train, b, NULL);
    return NULL;
}

static int run_clients(const otter_fl_layout *lay, int port, int n) {
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    bclient *cs = calloc((size_t)n, sizeof *cs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        cs[i].idx = i;
        otter_fl_client_options co = {.server = url, .token = "bench", .give_up = 60, .http_timeout = 600};
        if (otter_fl_client_create(&cs[i].c, lay, &co) != OTTER_OK ||
            pthread_create(&th[i], NULL, client_main, &cs[i]) != 0) {
            fprintf(stderr, "client %d: %s\n", i, otter_last_error());
            return 1;
        }
    }
    for (int i = 0; i < n; i++) {
        pthread_join(th[i], NULL);
        bad += cs[i].st != OTTER_OK;
        otter_fl_client_free(cs[i].c);
    }
    free(cs), free(th);
    return bad ? 1 : 0;
}

/* ---- server (parent) ------------------------------------------------------------------------------------ */

typedef struct bstate {
    double t_first, cpu_first, cpu_open;
    double wall[64], window[64], cpu[64], bytes[64];
    size_t received[64];
    int n_rounds;
} bstate;

static void on_log(otter_log_level lv, const char *msg, void *user) {
    bstate *b = user;
    if (strstr(msg, ": update 1/")) b->t_first = now_s(), b->cpu_first = cpu_s();
    if (strstr(msg, " open: ")) b->cpu_open = cpu_s();
    if (lv == OTTER_LOG_WARN) fprintf(stderr, "server: %s\n", msg);
}

static void on_round(const otter_fl_round_report *r, void *user) {
    bstate *b = user;
    int k = b->n_rounds++;
    if (k >= 64) return;
    b->wall[k] = r->seconds;
    b->window[k] = now_s() - b->t_first;
    b->cpu[k] = cpu_s() - b->cpu_open;
    b->bytes[k] = r->receive_bytes;
    b->received[k] = r->received;
    printf("round %lld: %zu updates, %.1f MB in %.3f s (open -> saved), first update -> saved %.3f s, server CPU "
           "%.3f s\n",
           (long long)r->round, r->received, r->receive_bytes / 1e6, r->seconds, b->window[k], b->cpu[k]);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_fl_round ARTIFACTS_DIR [CLIENTS [ROUNDS]]\n");
        return 2;
    }
    int n_clients = argc > 2 ? atoi(argv[2]) : 100, rounds = argc > 3 ? atoi(argv[3]) : 4;
    if (n_clients < 1 || rounds < 2 || rounds > 60) return 2;
    otter_training_session *s = NULL;
    otter_fl_layout *lay = NULL;
    if (otter_training_session_create_from_dir(&s, argv[1], NULL, NULL, NULL) != OTTER_OK ||
        otter_fl_layout_from_session(&lay, s) != OTTER_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], otter_last_error());
        return 1;
    }
    size_t n = 0;
    const float *init = otter_training_trainable_slab(s, &n);
    double raw = 4.0 * (double)n, wire = (double)ot_fl_msg_size(n);
    printf("model %s: %zu parameters in %zu tensors; raw float32 %.3f MB, message %.3f MB: format overhead %.7fx\n",
           argv[1], n, otter_fl_layout_count(lay), raw / 1e6, wire / 1e6, wire / raw);

    /* aggregation alone, in memory */
    {
        otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
        otter_fl_aggregator *agg = NULL;
        float *u = malloc(n * sizeof *u);
        if (!u || otter_fl_aggregator_create(&agg, lay, init, n, &st) != OTTER_OK) return 1;
        /* one untimed round warms the pages up */
        otter_fl_aggregator_begin_round(agg);
        for (int c = 0; c < 2; c++) {
            for (size_t i = 0; i < n; i++) u[i] = init[i] + 1e-4f * (float)c;
            otter_fl_update up = {.params = u, .n = n, .num_examples = 500};
            if (otter_fl_aggregator_add_update(agg, &up) != OTTER_OK) return 1;
        }
        otter_fl_aggregator_finish_round(agg, NULL);
        /* timed: add_update only, then finish */
        otter_fl_aggregator_begin_round(agg);
        for (size_t i = 0; i < n; i++) u[i] = init[i] + 1e-4f;
        double t_add = 0;
        for (int c = 0; c < n_clients; c++) {
            otter_fl_update up = {.params = u, .n = n, .num_examples = 500};
            double t0 = now_s();
            otter_fl_aggregator_add_update(agg, &up);
            t_add += now_s() - t0;
        }
        double t0 = now_s();
        otter_fl_aggregator_finish_round(agg, NULL);
        double t_fin = now_s() - t0;
        printf("aggregation alone (FedAvg, in memory): %d x add_update %.3f s (%.0f MB/s), finish %.4f s\n", n_clients,
               t_add, raw * n_clients / 1e6 / t_add, t_fin);
        /* the server's checks of one received message (protocol decode: header fields + every value finite) */
        ot_fl_msg_header h = {.kind = OTTER_FL_MSG_UPDATE,
                              .round = 1,
                              .num_examples = 500,
                              .n = n,
                              .layout_hash = ot_fl_layout_hash(lay)};
        void *msg = NULL;
        size_t msz = 0;
        if (ot_fl_msg_encode_alloc(&h, u, &msg, &msz) != OTTER_OK) return 1;
        ot_fl_msg_expect want = {.kind = OTTER_FL_MSG_UPDATE, .round = 1, .n = n, .layout_hash = h.layout_hash};
        double t_dec = 0;
        for (int c = 0; c < n_clients; c++) {
            ot_fl_msg_header got;
            const float *v;
            double t1 = now_s();
            if (ot_fl_msg_decode(msg, msz, &want, &got, &v, NULL) != OTTER_OK) return 1;
            t_dec += now_s() - t1;
        }
        printf("message checks alone (decode + finite scan): %d x %.2f ms (%.0f MB/s)\n", n_clients,
               1e3 * t_dec / n_clients, wire * n_clients / 1e6 / t_dec);
        otter_free(msg);
        otter_fl_aggregator_free(agg);
        free(u);
    }

    int pfd[2];
    if (pipe(pfd) != 0) return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { /* clients: wait for the port */
        close(pfd[1]);
        int port = 0;
        if (read(pfd[0], &port, sizeof port) != (ssize_t)sizeof port) _exit(1);
        _exit(run_clients(lay, port, n_clients));
    }
    close(pfd[0]);
    char state[] = "/tmp/otter_bench_fl_XXXXXX";
    if (!mkdtemp(state)) return 1;
    const char *tokens[] = {"bench"};
    bstate b = {0};
    otter_fl_server_options so = {.port = 0,
                                  .rounds = rounds,
                                  .clients_per_round = (size_t)n_clients,
                                  .min_clients = (size_t)n_clients,
                                  .round_timeout = 600,
                                  .state_dir = state,
                                  .tokens = tokens,
                                  .n_tokens = 1,
                                  .threads = 2,
                                  .poll_ms = 20,
                                  .linger = 30,
                                  .log = on_log,
                                  .on_round = on_round,
                                  .user = &b};
    otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    otter_fl_server *srv = NULL;
    if (otter_fl_server_create(&srv, lay, init, n, &st, &so) != OTTER_OK) {
        fprintf(stderr, "server: %s\n", otter_last_error());
        return 1;
    }
    int port = otter_fl_server_port(srv);
    if (write(pfd[1], &port, sizeof port) != (ssize_t)sizeof port) return 1;
    close(pfd[1]);
    otter_status rs = otter_fl_server_run(srv);
    int status = 0;
    waitpid(pid, &status, 0);
    if (rs != OTTER_OK || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "run failed: %s (clients exit %d)\n", otter_last_error(), WEXITSTATUS(status));
        return 1;
    }
    double wall = 0, window = 0, cpu = 0, bytes = 0;
    int k = 0;
    for (int i = 1; i < b.n_rounds && i < 64; i++, k++)
        wall += b.wall[i], window += b.window[i], cpu += b.cpu[i], bytes += b.bytes[i];
    printf("rounds 2..%d, mean per round: %d updates, %.1f MB received; open -> saved %.3f s (%.0f MB/s); first "
           "update -> saved %.3f s (%.0f MB/s); server CPU %.3f s (%.0f MB/s of CPU)\n",
           b.n_rounds, n_clients, bytes / k / 1e6, wall / k, bytes / wall / 1e6, window / k, bytes / window / 1e6,
           cpu / k, bytes / cpu / 1e6);
    printf("(clients and server share this machine's %ld cores; the clients' encode and send are in the wall times, "
           "not in the server CPU)\n",
           sysconf(_SC_NPROCESSORS_ONLN));
    otter_fl_server_free(srv);
    otter_fl_layout_free(lay);
    otter_training_session_free(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", state);
    if (system(cmd) != 0) return 1;
    return 0;
}
