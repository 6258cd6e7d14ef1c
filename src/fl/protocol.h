/* Federated learning over HTTP: the wire format shared by the server (server.c, libmicrohttpd) and the client
 * (client.c, libcurl) whose APIs are public in include/otter/fl.h. Internal header (src/): the library, its
 * tests and benchmarks see it; programs using libotter see only fl.h.
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
 * With static-file mounts (otter_fl_server_options.web, `otter fl serve --web`), for browser clients:
 *     GET  /                            -> 302 to the client page
 *     GET  /layout                      -> 200 the layout encoding to register with (registration token)
 *     GET  /web-config                  -> 200 the page's settings (JSON: artifact and data URLs, shards)
 *     GET  <mount prefix>FILE           -> 200 the file (src/fl/web.c); a mount may require a token
 * Refusals carry a one-line reason in the body and are reported to the server's log callback. */
#ifndef OTTER_FL_PROTOCOL_H
#define OTTER_FL_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/fl.h"
#include "otter/status.h"

#define OTTER_FL_MAGIC       "OTFL"
#define OTTER_FL_VERSION     1
#define OTTER_FL_HEADER_SIZE 64

typedef enum ot_fl_msg_kind {
    OTTER_FL_MSG_PARAMS = 1,
    OTTER_FL_MSG_UPDATE = 2,
    OTTER_FL_MSG_LAYOUT = 3
} ot_fl_msg_kind;

typedef struct ot_fl_msg_header {
    ot_fl_msg_kind kind;
    int64_t round;
    int64_t num_examples;
    bool has_loss;
    double loss;
    uint64_t n;
    uint64_t layout_hash;
} ot_fl_msg_header;

/* FNV-1a 64 of the layout's per-parameter encoding. */
uint64_t ot_fl_layout_hash(const otter_fl_layout *l);
/* Bytes of a message carrying n values. */
size_t ot_fl_msg_size(size_t n);
/* Write header + values into buf (ot_fl_msg_size(h->n) bytes; h->n values read from values). */
void ot_fl_msg_encode(const ot_fl_msg_header *h, const float *values, void *buf);
/* A message allocated with the library's allocator (ot_free / otter_free). */
otter_status ot_fl_msg_encode_alloc(const ot_fl_msg_header *h, const float *values, void **buf, size_t *size);

/* What a received message must be. */
typedef struct ot_fl_msg_expect {
    ot_fl_msg_kind kind;
    int64_t round; /* the message's round must equal it */
    uint64_t n;
    uint64_t layout_hash;
    const otter_fl_layout *layout; /* when set, a NaN/Inf names its parameter and element */
} ot_fl_msg_expect;

/* Check every field of a received message against `want` (magic, version, kind, reserved bytes, size ==
 * 64 + 4n, n, layout hash, round, num_examples > 0 and a finite loss for updates, every value finite) and
 * decode it. *values points into buf on little-endian hosts (a copy is made into scratch, n floats, on
 * big-endian ones; scratch may be NULL on little-endian hosts). OTTER_ERR_INVALID naming the field (and the
 * value's index for NaN/Inf) on failure. */
otter_status ot_fl_msg_decode(const void *buf, size_t size, const ot_fl_msg_expect *want, ot_fl_msg_header *h,
                              const float **values, float *scratch);
/* Copy the values of a decoded message into out (n floats) in host order. */
void ot_fl_msg_values(const void *buf, size_t n, float *out);

/* Layout encoding (allocated with the library's allocator) and decoding (bounds-checked). */
otter_status ot_fl_layout_encode(const otter_fl_layout *l, void **buf, size_t *size);
otter_status ot_fl_layout_decode(const void *buf, size_t size, otter_fl_layout **out);

#endif
