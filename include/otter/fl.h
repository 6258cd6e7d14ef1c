/* otter: federated learning. Aggregation (below), a client's local training and a whole simulation in one
 * process (otter_fl_train_local, otter_fl_simulate), and a server and a client over HTTP (otter_fl_server_*,
 * otter_fl_client_*).
 *
 * An aggregator holds the global model as one flat float32 vector (the training session's trainable slab
 * order, see training.h), the strategy and its state, and runs rounds:
 *
 *     otter_fl_layout *lay;  otter_fl_aggregator *agg;
 *     otter_fl_layout_from_session(&lay, ts);                          // names, dtypes, shapes, offsets
 *     otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
 *     otter_fl_aggregator_create(&agg, lay, slab, n, &st);             // copies layout and vector
 *     for (round...) {
 *         otter_fl_aggregator_begin_round(agg);
 *         for (each client update) {                                   // refused ones change nothing
 *             otter_fl_update u = {.layout = NULL, .params = w, .n = n, .num_examples = k};
 *             if (otter_fl_aggregator_add_update(agg, &u) != OTTER_OK) log(otter_last_error());
 *         }
 *         otter_fl_round_summary sum;
 *         otter_fl_aggregator_finish_round(agg, &sum);                 // new global vector
 *         memcpy(slab, otter_fl_aggregator_global(agg, NULL), n * sizeof(float));
 *         otter_fl_aggregator_save(agg, "state/fl_state.bin");         // atomic; load on restart
 *     }
 *
 * An update is a flat float32 vector with the client's layout (parameter names, dtypes, shapes in the
 * client's order; NULL: exactly the global layout). Every global parameter must be present once with the
 * same dtype and shape and nothing else may be there: a missing, extra, duplicated or mismatched parameter
 * is an error naming it; so is a NaN or an infinity (naming the parameter and the element). A refused
 * update leaves the round's aggregate untouched. Nothing is skipped silently.
 *
 * Strategies (x: global vector, x_i: client i's vector, n_i its example count, S the round's clients):
 *   FEDAVG      x <- sum n_i x_i / sum n_i                                 (McMahan et al. 2017)
 *   FEDAVGM     d = sum n_i (x_i - x) / sum n_i;  v <- momentum v + d;  x <- x + server_lr v
 *                                                                         (Hsu et al. 2019; server_lr 1,
 *                                                                          momentum 0 is FEDAVG)
 *   FEDADAM     d as above; m <- beta1 m + (1 - beta1) d;  v <- beta2 v + (1 - beta2) d^2;
 *               x <- x + server_lr m / (sqrt(v) + tau)        (Reddi et al. 2021, Algorithm 2: no bias
 *                                                            correction, m starts at 0, v at tau^2)
 *   FEDYOGI     as FEDADAM but v <- v - (1 - beta2) d^2 sign(v - d^2)
 *   MEDIAN      x <- coordinate-wise median of the x_i (unweighted; mean of the two middle values for an
 *               even count)                                               (Yin et al. 2018)
 *   TRIMMED_MEAN  per coordinate, drop the k = floor(trim_fraction |S|) smallest and k largest x_i and
 *               average the rest (unweighted)                             (Yin et al. 2018)
 * Clipping (clip_norm > 0, FEDAVG and FEDAVGM): each x_i - x is scaled down to L2 norm clip_norm before it
 * enters the sum, so one client moves the model by at most clip_norm whatever it sends (Sun et al. 2019,
 * "Can you really backdoor federated learning?"). The weights n_i are the clients' claims: a server caps
 * them (otter_fl_server_options.max_examples). Against clients that send arbitrary values, MEDIAN and
 * TRIMMED_MEAN bound each coordinate by honest clients' values as long as fewer than half (MEDIAN) or
 * fewer than trim_fraction of them (TRIMMED_MEAN) are hostile, and ignore n_i.
 * A round whose new global value is not a finite float, or whose FEDAVGM velocity leaves float range, is
 * refused by finish_round: its updates are dropped, the model and the strategy state are unchanged.
 * Sums, the deltas and the server optimizer's state are kept in double; the global vector is float32.
 * MEDIAN and TRIMMED_MEAN keep every update of the round (|S| x n floats); the others accumulate as they go.
 *
 * An aggregator is not thread-safe: a server serializes begin/add/finish/save. otter_fl_aggregator_check_update
 * only reads and may run concurrently with other checks (not with add/finish). */
#ifndef OTTER_FL_H
#define OTTER_FL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/data.h"
#include "otter/status.h"
#include "otter/tensor.h"
#include "otter/training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter layout ------------------------------------------------------------------------------ */

typedef struct otter_fl_param {
    const char *name;
    otter_dtype dtype; /* an aggregator's global layout is all OTTER_DTYPE_FLOAT */
    int rank;          /* 0..OTTER_MAX_RANK */
    int64_t dims[OTTER_MAX_RANK];
} otter_fl_param;

typedef struct otter_fl_layout otter_fl_layout;

/* A layout from entries (copied). Names must be non-empty and distinct, dims >= 0. The flat vector is the
 * parameters' elements one after the other in this order. */
OTTER_API otter_status otter_fl_layout_create(otter_fl_layout **out, size_t n, const otter_fl_param *params);
/* The session's trainable float32 parameters in trainable-slab order (what otter_training_trainable_slab and
 * otter_training_copy_params_to_buffer(..., true) hold). */
OTTER_API otter_status otter_fl_layout_from_session(otter_fl_layout **out, const otter_training_session *s);
OTTER_API void otter_fl_layout_free(otter_fl_layout *l);
OTTER_API size_t otter_fl_layout_count(const otter_fl_layout *l);
/* The i-th entry (NULL when out of range); valid while l lives. */
OTTER_API const otter_fl_param *otter_fl_layout_at(const otter_fl_layout *l, size_t i);
/* Element offset of entry i in the flat vector (SIZE_MAX when out of range). */
OTTER_API size_t otter_fl_layout_offset(const otter_fl_layout *l, size_t i);
/* Elements in the flat vector. */
OTTER_API size_t otter_fl_layout_numel(const otter_fl_layout *l);
/* OTTER_OK when `other` holds the same parameters (names, dtypes, shapes; any order) as `global`; else
 * OTTER_ERR_INVALID naming the first parameter missing, extra, duplicated or mismatched. */
OTTER_API otter_status otter_fl_layout_match(const otter_fl_layout *global, const otter_fl_layout *other);

/* ---- strategy -------------------------------------------------------------------------------------- */

typedef enum otter_fl_strategy_kind {
    OTTER_FL_FEDAVG = 0,
    OTTER_FL_FEDAVGM = 1,
    OTTER_FL_FEDADAM = 2,
    OTTER_FL_FEDYOGI = 3,
    OTTER_FL_MEDIAN = 4,
    OTTER_FL_TRIMMED_MEAN = 5
} otter_fl_strategy_kind;

/* Fields a strategy doesn't use are ignored. Values are used as given: start from otter_fl_strategy_default. */
typedef struct otter_fl_strategy {
    otter_fl_strategy_kind kind;
    double server_lr;     /* FEDAVGM (default 1), FEDADAM / FEDYOGI (default 0.01); > 0 */
    double momentum;      /* FEDAVGM, in [0, 1) (default 0.9) */
    double beta1, beta2;  /* FEDADAM / FEDYOGI, in [0, 1) (defaults 0.9, 0.99) */
    double tau;           /* FEDADAM / FEDYOGI adaptivity, > 0 (default 1e-3) */
    double trim_fraction; /* TRIMMED_MEAN, in [0, 0.5) (default 0.1) */
    double clip_norm;     /* FEDAVG / FEDAVGM: bound on each update's ||x_i - x|| (default 0: no bound) */
} otter_fl_strategy;

OTTER_API otter_fl_strategy otter_fl_strategy_default(otter_fl_strategy_kind kind);
/* Parse "fedavg", "fedavgm[:lr=1,momentum=0.9]", "fedadam[:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3]",
 * "fedyogi[:...]", "median", "trimmed-mean[:fraction=0.1]" (unset keys keep the defaults). Errors name the
 * bad part. */
OTTER_API otter_status otter_fl_strategy_parse(const char *text, otter_fl_strategy *out);
/* Ranges as documented above; OTTER_ERR_ARGUMENT naming the field. */
OTTER_API otter_status otter_fl_strategy_check(const otter_fl_strategy *s);
/* "fedavg", "fedavgm", "fedadam", "fedyogi", "median", "trimmed-mean". */
OTTER_API const char *otter_fl_strategy_name(otter_fl_strategy_kind kind);
/* The strategy with its hyperparameters as otter_fl_strategy_parse reads them back ("fedadam:lr=0.01,..."). */
OTTER_API void otter_fl_strategy_format(const otter_fl_strategy *s, char *buf, size_t cap);

/* ---- aggregator ------------------------------------------------------------------------------------ */

typedef struct otter_fl_aggregator otter_fl_aggregator;

/* layout: the global model's (every entry float32); global: its n = numel(layout) values (finite). Both are
 * copied. The server optimizer state starts as documented above; the round counter at 0. */
OTTER_API otter_status otter_fl_aggregator_create(otter_fl_aggregator **out, const otter_fl_layout *layout,
                                                  const float *global, size_t n, const otter_fl_strategy *strategy);
OTTER_API void otter_fl_aggregator_free(otter_fl_aggregator *a);

OTTER_API const otter_fl_layout *otter_fl_aggregator_layout(const otter_fl_aggregator *a);
OTTER_API const otter_fl_strategy *otter_fl_aggregator_strategy(const otter_fl_aggregator *a);
/* The global vector (n may be NULL); valid until the next finish/load/set_global. */
OTTER_API const float *otter_fl_aggregator_global(const otter_fl_aggregator *a, size_t *n);
/* Replace the global vector (n values, finite); the strategy state is kept. Not during a round. */
OTTER_API otter_status otter_fl_aggregator_set_global(otter_fl_aggregator *a, const float *global, size_t n);
/* Rounds completed (finish_round increments it). */
OTTER_API int64_t otter_fl_aggregator_round(const otter_fl_aggregator *a);
OTTER_API bool otter_fl_aggregator_in_round(const otter_fl_aggregator *a);
/* Updates accepted in the open round. */
OTTER_API size_t otter_fl_aggregator_num_updates(const otter_fl_aggregator *a);

typedef struct otter_fl_update {
    const otter_fl_layout *layout; /* the update's layout; NULL: the global layout */
    const float *params;           /* n values in that layout */
    size_t n;
    int64_t num_examples; /* > 0: the weight for FEDAVG/FEDAVGM/FEDADAM/FEDYOGI */
    bool has_loss;        /* the client's training loss, averaged over the round weighted by examples */
    double loss;
    const char *client; /* for messages (may be NULL) */
} otter_fl_update;

/* Open round number round() + 1. OTTER_ERR_INVALID when a round is open. */
OTTER_API otter_status otter_fl_aggregator_begin_round(otter_fl_aggregator *a);
/* Everything add_update checks (layout, size, finite values, example count, loss finite), without adding. */
OTTER_API otter_status otter_fl_aggregator_check_update(const otter_fl_aggregator *a, const otter_fl_update *u);
/* Check, then add the update to the open round. On failure the round is as before the call. */
OTTER_API otter_status otter_fl_aggregator_add_update(otter_fl_aggregator *a, const otter_fl_update *u);

typedef struct otter_fl_round_summary {
    int64_t round;        /* the round just finished (1, 2, ...) */
    size_t num_updates;   /* clients aggregated */
    int64_t num_examples; /* their examples */
    bool has_loss;        /* some update carried a loss */
    double mean_loss;     /* weighted by examples over the updates with a loss */
    double update_norm;   /* L2 norm of new global - old global */
    size_t clipped;       /* updates scaled down to clip_norm */
} otter_fl_round_summary;

/* Aggregate the open round into the new global vector and close it. A round without updates is
 * OTTER_ERR_INVALID and stays open (the caller may add more or abort). summary may be NULL. */
OTTER_API otter_status otter_fl_aggregator_finish_round(otter_fl_aggregator *a, otter_fl_round_summary *summary);
/* Close the open round, dropping its updates; global vector, strategy state and round counter unchanged. */
OTTER_API void otter_fl_aggregator_abort_round(otter_fl_aggregator *a);

/* ---- state for a restarting server ----------------------------------------------------------------- */

/* Write layout, strategy, round counter, global vector and server optimizer state to a small binary file
 * (magic "OTFLSTAT", version, checksum), atomically (temporary file, fsync, rename: the previous file stays
 * intact on failure). An open round's updates are not saved: a restarted server resumes after the last
 * finished round. */
OTTER_API otter_status otter_fl_aggregator_save(const otter_fl_aggregator *a, const char *path);
/* Read a file written by save (errors name the path and what is wrong: magic, version, checksum, sizes). */
OTTER_API otter_status otter_fl_aggregator_load(otter_fl_aggregator **out, const char *path);
/* The same as a buffer allocated with the library's allocator (free with otter_free) and back. */
OTTER_API otter_status otter_fl_aggregator_save_to_memory(const otter_fl_aggregator *a, void **data, size_t *size);
OTTER_API otter_status otter_fl_aggregator_load_from_memory(otter_fl_aggregator **out, const void *data, size_t size);

/* ---- client selection ------------------------------------------------------------------------------ */

/* max(floor(fraction * num_clients), 1) distinct clients out of num_clients (fraction in (0, 1]), chosen
 * uniformly from (seed, round) alone and written to out (room for num_clients) in increasing order.
 * Returns how many. */
OTTER_API size_t otter_fl_sample_clients(size_t num_clients, double fraction, uint64_t seed, int64_t round,
                                         size_t *out);

/* ---- local training and simulation --------------------------------------------------------------- */

/* One client's round: set the session's trainable parameters to global (n values), train on ds with
 * otter_training_run(opts) (its local epochs; no checkpoint, eval or resume is used here), and write the new
 * weights to out (n values; NULL: leave them in the session's trainable slab). *num_examples gets the samples
 * of one local epoch (the FedAvg weight), *loss the mean training loss over the round's batches. */
OTTER_API otter_status otter_fl_train_local(otter_training_session *s, const float *global, size_t n,
                                            const otter_dataset *ds, const otter_train_options *opts, float *out,
                                            int64_t *num_examples, double *loss);

/* Reported before the first round (round 0: the plan) and after every round. */
typedef struct otter_fl_sim_report {
    int64_t round, rounds;
    /* round 0 */
    size_t clients_per_round;                       /* max(floor(fraction * num_clients), 1) */
    int64_t min_client_samples, max_client_samples; /* of the partition */
    size_t n;                                       /* parameters in the global vector */
    /* rounds >= 1 */
    size_t clients;       /* updates aggregated (a client without samples sends none) */
    int64_t num_examples; /* theirs */
    double train_loss;    /* their mean training loss, weighted by examples */
    bool has_eval;        /* evaluated this round (every eval_every rounds and the last) */
    otter_eval_result eval;
    double seconds, total_seconds; /* the round's, and since the simulation started */
    const float *global;           /* the new global vector (n values), valid during the callback */
} otter_fl_sim_report;

/* Return false to stop after this round (e.g. a target accuracy reached). */
typedef bool (*otter_fl_sim_callback)(const otter_fl_sim_report *r, void *user);

typedef struct otter_fl_sim_options {
    int num_clients; /* N (0: 100) */
    double fraction; /* C in (0, 1]: clients per round max(floor(C N), 1) (0: 0.1) */
    int64_t rounds;  /* 0: 10 */
    uint64_t seed;   /* partition, client selection, shuffling and Dropout */
    /* kind and shards_per_client / alpha (num_clients and seed are the simulation's). */
    otter_partition_options partition;
    const otter_fl_strategy *strategy; /* NULL: FedAvg */
    /* Each client's local training: epochs (E), batch_size (B), set_lr/lr, grad_accum, schedule; the
     * rest is the simulation's. */
    otter_train_options local;
    const otter_dataset *eval_data; /* the global model is evaluated on it (NULL: never) */
    int64_t eval_every;             /* rounds between evaluations (0: 1); the last round always */
    int64_t eval_batch_size;        /* 0: 500 */
    int n_threads;                  /* kernel threads of the sessions (0: the available cores) */
    otter_fl_sim_callback on_round;
    void *user;
} otter_fl_sim_options;

typedef struct otter_fl_sim_result {
    int64_t rounds;         /* completed */
    bool stopped;           /* by the callback */
    double seconds;         /* in total */
    double session_seconds; /* creating the clients' sessions */
} otter_fl_sim_result;

/* Federated learning simulated in one process: N clients share one copy of the training data ds, each
 * client an index subset from otter_dataset_partition. Each round picks its clients with
 * otter_fl_sample_clients(N, C, seed, round); each starts from the global weights in a fresh session of
 * the artifacts in `artifacts_dir` (training_model.onnx, optimizer_model.onnx, checkpoint, and
 * eval_model.onnx when present; fresh optimizer state), trains its local epochs (batch order from (seed,
 * client, round), Dropout from (seed, round, client)) and sends its weights and example count; the
 * aggregator (the strategy) makes the new global vector; the global model is evaluated; on_round reports.
 * *global (may be NULL) receives a session of the artifacts holding the final global weights (the caller
 * frees it; save or export it with the training API). */
OTTER_API otter_status otter_fl_simulate(const char *artifacts_dir, const otter_dataset *ds,
                                         const otter_fl_sim_options *opts, otter_training_session **global,
                                         otter_fl_sim_result *result);

/* ---- server over HTTP (the wire format and HTTP API: src/fl/protocol.h)
 * ---------------------------------------------------------------------------- */

typedef struct otter_fl_server otter_fl_server;

typedef struct otter_fl_round_report {
    int64_t round, rounds; /* the round just finished, of how many */
    size_t picked;         /* clients picked for it */
    size_t received;       /* updates aggregated */
    size_t dropped;        /* picked clients without an accepted update when it closed */
    size_t refused;        /* updates refused during the round (bad token, malformed, wrong round...) */
    int64_t num_examples;  /* the aggregated updates' examples */
    bool has_loss;         /* mean train loss of the aggregated updates, weighted by examples */
    double train_loss;
    double update_norm;   /* ||new global - old global|| */
    double seconds;       /* round opened -> aggregated and saved */
    double receive_bytes; /* update bytes accepted */
    const float *global;  /* the new global vector (n values), valid during the callback */
    size_t n;
} otter_fl_round_report;

typedef void (*otter_fl_server_log_fn)(otter_log_level level, const char *msg, void *user);
typedef void (*otter_fl_server_round_fn)(const otter_fl_round_report *r, void *user);

/* A directory served as static files (GET) under a URL prefix by the server's own listener: the browser
 * client page and package (`otter fl serve --web`), the artifacts and data a browser client trains on. */
typedef struct otter_fl_web_mount {
    const char *prefix; /* URL prefix starting and ending with '/', e.g. "/web/" (the longest match wins) */
    const char *dir;
    bool need_token; /* requests must carry "Authorization: Bearer T" with a registration or issued token */
} otter_fl_web_mount;

typedef struct otter_fl_server_options {
    const char *host;          /* listen address (numeric or name); NULL: 127.0.0.1 */
    int port;                  /* 0: any free port (see otter_fl_server_port) */
    int64_t rounds;            /* > 0: rounds to run in total (resumed ones included) */
    size_t clients_per_round;  /* K > 0 */
    size_t min_clients;        /* M in [1, K]: a round closes at the timeout with >= M updates, else restarts */
    double round_timeout;      /* seconds > 0 */
    double join_wait;          /* seconds to wait for K clients once M are there before a round opens (default 0:
                                  min(2, round_timeout)) */
    const char *state_dir;     /* fl_state.bin is saved there after every round and resumed from */
    const char *const *tokens; /* accepted registration tokens (n_tokens > 0) */
    size_t n_tokens;
    uint64_t seed;                  /* client selection */
    unsigned threads;               /* HTTP worker threads (0: 2) */
    unsigned max_connections;       /* concurrent connections (0: 1000) */
    unsigned max_per_ip;            /* concurrent connections from one address (0: max_connections / 4) */
    unsigned idle_timeout;          /* seconds a connection may stay silent before it is closed (0: 30) */
    double request_timeout;         /* seconds a request may take to come in, headers and body, from the connection's
                                     * start or its previous response (0: 120) */
    const char *tls_cert, *tls_key; /* PEM files: serve HTTPS (both or neither; NULL: plain HTTP) */
    unsigned max_clients;           /* registrations (0: 10000) */
    unsigned max_per_token;         /* registrations per registration token (0: max_clients) */
    double slot_ttl; /* seconds after which a registration not heard from (nor picked) expires (0: max(60, timeout)) */
    int64_t max_examples; /* an update claiming more examples is weighted as this many, logged (0: 1e6) */
    int poll_ms;          /* client poll interval advertised (0: 200) */
    double linger; /* at most this long (default 0: 10 s), keep answering "done" until the final round's clients heard
                      it */
    otter_fl_server_log_fn log;
    otter_fl_server_round_fn on_round;
    void *user;
    volatile sig_atomic_t *stop;   /* when set non-zero, run returns (state of finished rounds is saved) */
    const otter_fl_web_mount *web; /* static files (n_web mounts); with any, GET / redirects to web_home, and
                                      GET /layout (registration token) answers the layout encoding a browser
                                      client registers with */
    size_t n_web;
    size_t web_max_file;    /* bytes: larger files are refused with 413 (0: 256 MiB) */
    const char *web_home;   /* where GET / redirects (NULL: the first mount's prefix) */
    const char *web_config; /* JSON text answered at GET /web-config (NULL: 404): the page's settings */
} otter_fl_server_options;

/* The aggregator is created from layout + initial global + strategy, or loaded from state_dir/fl_state.bin
 * when that exists (its layout must match `layout` and its strategy `strategy`, else an error naming the
 * difference). The HTTP daemon starts listening here. */
OTTER_API otter_status otter_fl_server_create(otter_fl_server **out, const otter_fl_layout *layout,
                                              const float *initial, size_t n, const otter_fl_strategy *strategy,
                                              const otter_fl_server_options *opts);
/* The port listened on. */
OTTER_API int otter_fl_server_port(const otter_fl_server *s);
/* Rounds completed (resumed ones included). */
OTTER_API int64_t otter_fl_server_round(const otter_fl_server *s);
/* The current global vector (n may be NULL); valid until the next round finishes. */
OTTER_API const float *otter_fl_server_global(const otter_fl_server *s, size_t *n);
/* Run rounds until `rounds` are complete (then linger) or *stop is set. Reports through the callbacks. */
OTTER_API otter_status otter_fl_server_run(otter_fl_server *s);
/* Stop the daemon and free. */
OTTER_API void otter_fl_server_free(otter_fl_server *s);

/* ---- client over HTTP ---------------------------------------------------------------------------- */

typedef struct otter_fl_client otter_fl_client;

/* Train one round: start from global (n values), write the new weights to out (n values), the number of
 * examples behind them and the mean training loss. Return OTTER_OK or an error (the run stops). */
typedef otter_status (*otter_fl_train_fn)(int64_t round, const float *global, size_t n, float *out,
                                          int64_t *num_examples, double *loss, void *user);

typedef struct otter_fl_client_options {
    const char *server;                  /* "http://127.0.0.1:8080" */
    const char *token;                   /* registration token */
    double backoff_initial, backoff_max; /* seconds (defaults 0.1 and 5) */
    double give_up;                      /* seconds without reaching the server before run fails (default 0: 300) */
    double http_timeout;                 /* seconds per request (default 0: 120) */
    const char *ca; /* PEM file of the CA (or the self-signed certificate) an https server must chain to
                       (NULL: the system's) */
    otter_fl_server_log_fn log;
    void *user;
    volatile sig_atomic_t *stop;
} otter_fl_client_options;

typedef struct otter_fl_client_stats {
    int64_t rounds_trained, updates_accepted, updates_refused, reconnects, registrations;
    int64_t last_round; /* the server's last completed round when it said done */
} otter_fl_client_stats;

OTTER_API otter_status otter_fl_client_create(otter_fl_client **out, const otter_fl_layout *layout,
                                              const otter_fl_client_options *opts);
/* Register, poll, train the rounds this client is picked for, upload; re-register when the server
 * restarted (401 on an issued token); back off exponentially while the server is away. Returns OTTER_OK when
 * the server says training is over; an error when the registration token is refused, the layout differs
 * from the server's, training fails or the server stays away longer than give_up. */
OTTER_API otter_status otter_fl_client_run(otter_fl_client *c, otter_fl_train_fn train, void *train_user,
                                           otter_fl_client_stats *stats);
OTTER_API void otter_fl_client_free(otter_fl_client *c);

#ifdef __cplusplus
}
#endif
#endif
