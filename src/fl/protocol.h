/* Federated learning over HTTP: the wire format shared by `otter fl serve` (server.c, libmicrohttpd) and
 * `otter fl client` (client.c, libcurl), and the server and client APIs the two CLI verbs drive. Internal
 * header (src/): the CLI and the tests see it, the public API (include/otter/fl.h) stays aggregation only.
 *
 * Weights travel as one message: a 64-byte header, then n float32 values, little-endian, in the global
 * layout's order (the training session's trainable-slab order). All integers are little-endian.
 *
 *     offset size  field
 *          0    4  magic "OTFL"
 *          4    2  version (1)
 *          6    2  kind: 1 params (server -> client), 2 update (client -> server)
 *          8    8  round (int64): params: the open round the values are for; update: the round trained
 *         16    8  num_examples (int64): update: > 0, the FedAvg weight; params: 0
 *         24    8  loss (float64): the client's mean training loss (flags bit 0 set), else 0
 *         32    8  n (uint64): float32 values that follow
 *         40    8  layout hash (uint64): FNV-1a 64 of the layout encoding below
 *         48    4  flags (uint32): bit 0 loss present; other bits 0
 *         52   12  reserved, 0
 *         64   4n  values
 *
 * So a message is exactly 64 + 4n bytes: 1.0000139x the raw float32 size for the CIFAR-10 CNN (n =
 * 1,147,466). A layout (sent once, at registration, so a client built from other artifacts is refused naming
 * the parameter that differs) is "OTFL", version, kind 3, count (uint32), then per parameter: name length
 * (uint16), name bytes, dtype (uint8, otter_dtype), rank (uint8), rank dims (int64). The layout hash is FNV-1a
 * 64 over that per-parameter part.
 *
 * HTTP API (every request but /register carries "Authorization: Bearer <token issued at registration>";
 * /register carries the configured token from --token / --tokens; a wrong or missing token is 401):
 *     POST /register   body: layout     -> 200 "client ID\ntoken TOKEN\npoll_ms MS\n"
 *     GET  /round                       -> 200 "train R\n" | "wait R\n" | "done R\n" (R: the round trained or
 *                                          the last completed one), then "poll_ms MS\n"
 *     GET  /params                      -> 200 params message for the open round (409 when not picked)
 *     POST /update     body: update     -> 200 "accepted\n"; 400 malformed / wrong shape / NaN / wrong round,
 *                                          409 not picked, already sent or the round closed; 401
 * Refusals carry a one-line reason in the body and are reported to the server's log callback. */
#ifndef OTTER_FL_PROTOCOL_H
#define OTTER_FL_PROTOCOL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/fl.h"
#include "otter/status.h"

#define OTTER_FL_MAGIC       "OTFL"
#define OTTER_FL_VERSION     1
#define OTTER_FL_HEADER_SIZE 64

typedef enum otter_fl_msg_kind {
    OTTER_FL_MSG_PARAMS = 1,
    OTTER_FL_MSG_UPDATE = 2,
    OTTER_FL_MSG_LAYOUT = 3
} otter_fl_msg_kind;

typedef struct otter_fl_msg_header {
    otter_fl_msg_kind kind;
    int64_t round;
    int64_t num_examples;
    bool has_loss;
    double loss;
    uint64_t n;
    uint64_t layout_hash;
} otter_fl_msg_header;

/* FNV-1a 64 of the layout's per-parameter encoding. */
uint64_t otter_fl_layout_hash(const otter_fl_layout *l);
/* Bytes of a message carrying n values. */
size_t otter_fl_msg_size(size_t n);
/* Write header + values into buf (otter_fl_msg_size(h->n) bytes; h->n values read from values). */
void otter_fl_msg_encode(const otter_fl_msg_header *h, const float *values, void *buf);
/* A message allocated with the library's allocator (ot_free / otter_free). */
otter_status otter_fl_msg_encode_alloc(const otter_fl_msg_header *h, const float *values, void **buf, size_t *size);

/* What a received message must be. */
typedef struct otter_fl_msg_expect {
    otter_fl_msg_kind kind;
    int64_t round; /* the message's round must equal it */
    uint64_t n;
    uint64_t layout_hash;
    const otter_fl_layout *layout; /* when set, a NaN/Inf names its parameter and element */
} otter_fl_msg_expect;

/* Check every field of a received message against `want` (magic, version, kind, reserved bytes, size ==
 * 64 + 4n, n, layout hash, round, num_examples > 0 and a finite loss for updates, every value finite) and
 * decode it. *values points into buf on little-endian hosts (a copy is made into scratch, n floats, on
 * big-endian ones; scratch may be NULL on little-endian hosts). OTTER_ERR_INVALID naming the field (and the
 * value's index for NaN/Inf) on failure. */
otter_status otter_fl_msg_decode(const void *buf, size_t size, const otter_fl_msg_expect *want, otter_fl_msg_header *h,
                                 const float **values, float *scratch);
/* Copy the values of a decoded message into out (n floats) in host order. */
void otter_fl_msg_values(const void *buf, size_t n, float *out);

/* Layout encoding (allocated with the library's allocator) and decoding (bounds-checked). */
otter_status otter_fl_layout_encode(const otter_fl_layout *l, void **buf, size_t *size);
otter_status otter_fl_layout_decode(const void *buf, size_t size, otter_fl_layout **out);

/* ---- server (server.c) ------------------------------------------------------------------------------- */

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
    uint64_t seed;            /* client selection */
    unsigned threads;         /* HTTP worker threads (0: 2) */
    unsigned max_connections; /* concurrent connections (0: 1000) */
    unsigned max_clients;     /* registrations (0: 10000) */
    int poll_ms;              /* client poll interval advertised (0: 200) */
    double linger; /* at most this long (default 0: 10 s), keep answering "done" until the final round's clients heard
                      it */
    otter_fl_server_log_fn log;
    otter_fl_server_round_fn on_round;
    void *user;
    volatile sig_atomic_t *stop; /* when set non-zero, run returns (state of finished rounds is saved) */
} otter_fl_server_options;

/* The aggregator is created from layout + initial global + strategy, or loaded from state_dir/fl_state.bin
 * when that exists (its layout must match `layout` and its strategy `strategy`, else an error naming the
 * difference). The HTTP daemon starts listening here. */
otter_status otter_fl_server_create(otter_fl_server **out, const otter_fl_layout *layout, const float *initial,
                                    size_t n, const otter_fl_strategy *strategy, const otter_fl_server_options *opts);
/* The port listened on. */
int otter_fl_server_port(const otter_fl_server *s);
/* Rounds completed (resumed ones included). */
int64_t otter_fl_server_round(const otter_fl_server *s);
/* The current global vector (n may be NULL); valid until the next round finishes. */
const float *otter_fl_server_global(const otter_fl_server *s, size_t *n);
/* Run rounds until `rounds` are complete (then linger) or *stop is set. Reports through the callbacks. */
otter_status otter_fl_server_run(otter_fl_server *s);
/* Stop the daemon and free. */
void otter_fl_server_free(otter_fl_server *s);

/* ---- client (client.c) ------------------------------------------------------------------------------- */

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
    otter_fl_server_log_fn log;
    void *user;
    volatile sig_atomic_t *stop;
} otter_fl_client_options;

typedef struct otter_fl_client_stats {
    int64_t rounds_trained, updates_accepted, updates_refused, reconnects, registrations;
    int64_t last_round; /* the server's last completed round when it said done */
} otter_fl_client_stats;

otter_status otter_fl_client_create(otter_fl_client **out, const otter_fl_layout *layout,
                                    const otter_fl_client_options *opts);
/* Register, poll, train the rounds this client is picked for, upload; re-register when the server
 * restarted (401 on an issued token); back off exponentially while the server is away. Returns OTTER_OK when
 * the server says training is over; an error when the registration token is refused, the layout differs
 * from the server's, training fails or the server stays away longer than give_up. */
otter_status otter_fl_client_run(otter_fl_client *c, otter_fl_train_fn train, void *train_user,
                                 otter_fl_client_stats *stats);
void otter_fl_client_free(otter_fl_client *c);

#endif
