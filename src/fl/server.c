/* `otter fl serve`'s engine: a libmicrohttpd daemon (a fixed pool of worker threads, a connection limit)
 * answering the HTTP API of protocol.h, and a round loop in the caller's thread that opens rounds, picks
 * clients, closes a round when every picked client has sent its update or at the timeout with >= min_clients
 * (late clients dropped; fewer: the round restarts), aggregates through fl.h and saves the aggregator state
 * atomically after every round. Requests and the round loop share one mutex; an update's body is checked in
 * full (protocol decode) before the lock is taken to add it. Nothing here prints: logs and per-round reports
 * go to the callbacks. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include "core/clock.h"
#include "core/core.h"
#include "fl/protocol.h"
#include "fl/web.h"

typedef struct fl_client {
    uint64_t id;
    char token[48];   /* "" once the slot expired */
    size_t reg_token; /* the registration token it came with (index into tokens) */
    double last_seen;
    bool picked, uploaded, told_done;
} fl_client;

typedef enum phase { PH_WAITING, PH_OPEN, PH_CLOSING, PH_DONE } phase;

/* An open connection's clock: its request, headers and body, must be in request_timeout after the
 * connection opened or its previous response went out. libmicrohttpd's own timeout restarts with every
 * byte, so a client trickling its headers or body (slowloris) would hold the connection until the idle
 * timeout never comes; the round loop shuts such connections down (cut_overdue). */
typedef struct conn_watch {
    struct conn_watch *prev, *next;
    int fd;
    double since;   /* when the request now coming in may have started */
    bool receiving; /* false from the request's last byte until its response went out */
    bool cut;
    char peer[80];
} conn_watch;

struct otter_fl_server {
    otter_fl_server_options o;
    char *host, *state_dir, *state_path;
    char *tls_cert, *tls_key; /* PEM text */
    char **tokens;
    otter_fl_aggregator *agg;
    otter_fl_layout *layout;
    uint64_t hash;
    size_t n;
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    fl_client *clients; /* clients[id - 1] */
    size_t n_clients, cap_clients;
    phase ph;
    int64_t open_round;
    size_t picked, received, refused;
    int64_t examples;
    double recv_bytes, t_open, deadline, avail_since, t_done;
    struct MHD_Response *params; /* the open round's params message, shared by every picked client */
    int urandom;
    ot_fl_web *web;              /* static files (NULL: none) */
    char *web_home, *web_config; /* owned copies of the options */
    void *layout_msg;            /* the layout encoding, answered at GET /layout when web is on */
    size_t layout_msg_size;
    pthread_mutex_t watch_mu; /* guards watched (taken after mu, never before) */
    conn_watch *watched;
};

static void slog(otter_fl_server *s, otter_log_level lv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void slog(otter_fl_server *s, otter_log_level lv, const char *fmt, ...) {
    if (!s->o.log) return;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    s->o.log(lv, buf, s->o.user);
}

/* ---- requests ---------------------------------------------------------------------------------------- */

typedef enum route { R_OTHER, R_REGISTER, R_ROUND, R_PARAMS, R_UPDATE, R_HOME, R_LAYOUT, R_WEB_CONFIG, R_WEB } route;

typedef struct req {
    route r;
    int status;    /* early refusal (0: none yet) */
    char msg[512]; /* its reason */
    fl_client *c;  /* the authenticated client (not for register) */
    uint64_t cid;
    uint8_t *buf;
    size_t len, limit;
    bool overflow;
    const otter_fl_web_mount *mount; /* R_WEB */
    const char *method;              /* the handler's: where the request's bytes start (see bearer) */
} req;

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void peer_name(struct MHD_Connection *conn, char *out, size_t cap) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, cap, "?");
    if (!ci || !ci->client_addr) return;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ci->client_addr;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ci->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)ci->client_addr;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, cap, "%s:%d", host, port);
}

/* Constant-time string equality (the length leaks, the content doesn't). */
static bool token_eq(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* RFC 6750's b64token: what a Bearer token may hold. */
static bool b64token(const char *t) {
    size_t n = strspn(t, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/");
    while (t[n] == '=') n++;
    return n > 0 && t[n] == '\0';
}

#if MHD_VERSION < 0x00097600
/* libmicrohttpd 0.9.75 ends a header value at a NUL: "Bearer secret\0x" arrives as "Bearer secret". Its
 * values point into the request's own bytes, where it overwrote each line's CR LF (and the ':') with NULs,
 * so the raw line can be checked: between the value's end and the next header's name, or the end of the
 * header block for the last header, only the line breaks (NULs there, at most 2 per line) and blanks may
 * lie; anything else is what the NUL hid. */
typedef struct value_end {
    const char *value, *next_key;
    bool seen;
} value_end;

static enum MHD_Result find_next_key(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                     const char *value, size_t value_size) {
    (void)kind, (void)key_size, (void)value_size;
    value_end *e = cls;
    if (e->seen) {
        e->next_key = key;
        return MHD_NO;
    }
    e->seen = value == e->value;
    return MHD_YES;
}

static bool value_whole(struct MHD_Connection *conn, const char *method, const char *value, size_t len) {
    value_end e = {value, NULL, false};
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, find_next_key, &e);
    const char *end = e.next_key;
    size_t line_breaks = 1;
    if (!end) { /* the last header: its line break and the blank line end the header block */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (!ci || !method) return false;
        end = method + ci->header_size;
        line_breaks = 2;
    }
    const char *p = value + len;
    if (!e.seen || end < p) return false;
    size_t nuls = 0;
    for (; p < end; p++) {
        if (*p && !strchr(" \t\r\n", *p)) return false;
        nuls += *p == '\0';
    }
    return nuls <= 2 * line_breaks;
}
#else
/* Newer libmicrohttpd keeps a NUL inside a value, which the length check refuses. */
static bool value_whole(struct MHD_Connection *conn, const char *method, const char *value, size_t len) {
    (void)conn, (void)method, (void)value, (void)len;
    return true;
}
#endif

/* The token of "Authorization: Bearer TOKEN": the scheme is case-insensitive (RFC 7235), the token one
 * b64token (RFC 6750) with nothing after it. A value holding a NUL is refused (see value_whole). method:
 * the handler's, where the request's bytes start. */
static const char *bearer(struct MHD_Connection *conn, const char *method) {
    const char *h = NULL;
    size_t len = 0;
    if (MHD_lookup_connection_value_n(conn, MHD_HEADER_KIND, "Authorization", strlen("Authorization"), &h, &len) !=
            MHD_YES ||
        !h || strlen(h) != len || !value_whole(conn, method, h, len) || len < 7 || strncasecmp(h, "Bearer", 6) != 0 ||
        h[6] != ' ')
        return NULL;
    const char *tok = h + 7;
    while (*tok == ' ') tok++;
    return b64token(tok) ? tok : NULL;
}

/* The client an issued token names ("ID-HEX"), under the lock; NULL when unknown. */
static fl_client *find_client(otter_fl_server *s, const char *tok) {
    if (!tok) return NULL;
    char *end;
    unsigned long long id = strtoull(tok, &end, 10);
    if (end == tok || *end != '-' || id == 0 || id > s->n_clients) return NULL;
    fl_client *c = &s->clients[id - 1];
    return token_eq(c->token, tok) ? c : NULL;
}

static bool random_hex(otter_fl_server *s, char *out, size_t nbytes) {
    uint8_t b[32];
    if (nbytes > sizeof b) return false;
    size_t got = 0;
    while (got < nbytes) {
        ssize_t k = read(s->urandom, b + got, nbytes - got);
        if (k <= 0) {
            if (k < 0 && errno == EINTR) continue;
            return false;
        }
        got += (size_t)k;
    }
    for (size_t i = 0; i < nbytes; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return true;
}

static size_t live_clients(otter_fl_server *s, double now, size_t *idx);

static double live_window(const otter_fl_server *s) { return fmax(3.0, 10.0 * s->o.poll_ms / 1000.0); }

/* Whether tok is one of the configured registration tokens (its index in *which). */
static bool registration_token(const otter_fl_server *s, const char *tok, size_t *which) {
    bool ok = false;
    for (size_t i = 0; tok && i < s->o.n_tokens; i++)
        if (token_eq(s->tokens[i], tok)) ok = true, *which = i;
    return ok;
}

static enum MHD_Result do_register(otter_fl_server *s, struct MHD_Connection *conn, req *q, const char *peer) {
    const char *tok = bearer(conn, q->method);
    size_t reg_token = 0;
    if (!registration_token(s, tok, &reg_token)) {
        slog(s, OTTER_LOG_WARN, "refused registration from %s: %s token (401)", peer, tok ? "wrong" : "missing");
        return reply(conn, MHD_HTTP_UNAUTHORIZED, "unauthorized: wrong or missing registration token\n");
    }
    if (q->overflow) {
        slog(s, OTTER_LOG_WARN, "refused registration from %s: layout larger than %zu bytes", peer, q->limit);
        return reply(conn, MHD_HTTP_CONTENT_TOO_LARGE, "layout too large\n");
    }
    otter_fl_layout *cl = NULL;
    otter_status st = ot_fl_layout_decode(q->buf, q->len, &cl);
    if (st == OTTER_OK) st = otter_fl_layout_match(s->layout, cl);
    if (st == OTTER_OK && ot_fl_layout_hash(cl) != s->hash)
        st = ot_error(OTTER_ERR_INVALID, "the parameters are the server's but in another order");
    otter_fl_layout_free(cl);
    if (st != OTTER_OK) {
        char m[600];
        snprintf(m, sizeof m, "layout differs from the global model's: %s\n", otter_last_error());
        slog(s, OTTER_LOG_WARN, "refused registration from %s: %s", peer, m);
        return reply(conn, MHD_HTTP_BAD_REQUEST, m);
    }
    pthread_mutex_lock(&s->mu);
    /* Slots not heard from for slot_ttl (and not in the open round) expire and are reused, and one
     * registration token holds at most max_per_token of them: a flood of registrations can't keep others
     * out for good. */
    double now = ot_now_seconds();
    size_t slot = s->n_clients, same_token = 0;
    for (size_t i = 0; i < s->n_clients; i++) {
        fl_client *o = &s->clients[i];
        if (o->token[0] && !o->picked && now - o->last_seen > s->o.slot_ttl) o->token[0] = '\0';
        if (!o->token[0] && slot == s->n_clients) slot = i;
        if (o->token[0] && o->reg_token == reg_token) same_token++;
    }
    if (same_token >= s->o.max_per_token) {
        pthread_mutex_unlock(&s->mu);
        slog(s, OTTER_LOG_WARN, "refused registration from %s: token %zu holds %zu registrations (the most per token)",
             peer, reg_token + 1, same_token);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "too many clients with this token\n");
    }
    if (slot == s->n_clients && s->n_clients >= s->o.max_clients) {
        pthread_mutex_unlock(&s->mu);
        slog(s, OTTER_LOG_WARN, "refused registration from %s: %u clients registered already", peer, s->o.max_clients);
        return reply(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "too many clients\n");
    }
    if (slot == s->n_clients && s->n_clients == s->cap_clients) {
        void *arr = s->clients;
        if (ot_grow(&arr, &s->cap_clients, s->n_clients + 1, sizeof *s->clients) != OTTER_OK) {
            pthread_mutex_unlock(&s->mu);
            return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
        }
        s->clients = arr;
    }
    fl_client *c = &s->clients[slot];
    memset(c, 0, sizeof *c);
    c->id = slot + 1;
    c->reg_token = reg_token;
    int k = snprintf(c->token, sizeof c->token, "%llu-", (unsigned long long)c->id);
    if (!random_hex(s, c->token + k, 16)) {
        c->token[0] = '\0';
        pthread_mutex_unlock(&s->mu);
        return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "no randomness for a token\n");
    }
    c->last_seen = now;
    if (slot == s->n_clients) s->n_clients++;
    char text[128];
    snprintf(text, sizeof text, "client %llu\ntoken %s\npoll_ms %d\n", (unsigned long long)c->id, c->token,
             s->o.poll_ms);
    unsigned long long id = c->id;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    slog(s, OTTER_LOG_INFO, "client %llu registered from %s", id, peer);
    return reply(conn, MHD_HTTP_OK, text);
}

static enum MHD_Result do_round(otter_fl_server *s, struct MHD_Connection *conn, uint64_t cid) {
    char text[96];
    pthread_mutex_lock(&s->mu);
    fl_client *c = &s->clients[cid - 1]; /* by index: registrations may move the array */
    c->last_seen = ot_now_seconds();
    const char *what = "wait";
    int64_t r = otter_fl_aggregator_round(s->agg);
    if (s->ph == PH_DONE)
        what = "done", c->told_done = true;
    else if (s->ph == PH_OPEN && c->picked && !c->uploaded)
        what = "train", r = s->open_round;
    else if (s->ph == PH_OPEN)
        r = s->open_round;
    /* "rounds" lets a client of the final round finish without hearing "done" (the server may be gone). */
    snprintf(text, sizeof text, "%s %lld\npoll_ms %d\nrounds %lld\n", what, (long long)r, s->o.poll_ms,
             (long long)s->o.rounds);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return reply(conn, MHD_HTTP_OK, text);
}

static enum MHD_Result do_params(otter_fl_server *s, struct MHD_Connection *conn, uint64_t cid) {
    pthread_mutex_lock(&s->mu);
    fl_client *c = &s->clients[cid - 1];
    c->last_seen = ot_now_seconds();
    if (s->ph != PH_OPEN || !c->picked || c->uploaded || !s->params) {
        pthread_mutex_unlock(&s->mu);
        return reply(conn, MHD_HTTP_CONFLICT, "not picked for an open round\n");
    }
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, s->params);
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static enum MHD_Result refuse_update(otter_fl_server *s, struct MHD_Connection *conn, unsigned status, const char *who,
                                     const char *reason) {
    pthread_mutex_lock(&s->mu);
    if (s->ph == PH_OPEN) s->refused++;
    int64_t r = s->ph == PH_OPEN ? s->open_round : otter_fl_aggregator_round(s->agg);
    pthread_mutex_unlock(&s->mu);
    slog(s, OTTER_LOG_WARN, "refused update from %s in round %lld (%u): %s", who, (long long)r, status, reason);
    char m[640];
    snprintf(m, sizeof m, "refused: %s\n", reason);
    return reply(conn, status, m);
}

static enum MHD_Result do_update(otter_fl_server *s, struct MHD_Connection *conn, req *q, const char *peer) {
    char who[96];
    snprintf(who, sizeof who, "client %llu (%s)", (unsigned long long)q->cid, peer);
    if (q->status) return refuse_update(s, conn, (unsigned)q->status, q->cid ? who : peer, q->msg);
    if (q->overflow) {
        snprintf(q->msg, sizeof q->msg, "update: more than the %zu bytes of a 64-byte header + %zu float32", q->limit,
                 s->n);
        return refuse_update(s, conn, MHD_HTTP_CONTENT_TOO_LARGE, who, q->msg);
    }
    pthread_mutex_lock(&s->mu);
    ot_fl_msg_expect want = {
        .kind = OTTER_FL_MSG_UPDATE, .round = s->open_round, .n = s->n, .layout_hash = s->hash, .layout = s->layout};
    pthread_mutex_unlock(&s->mu);
    ot_fl_msg_header h;
    const float *v = NULL;
    float *scratch = NULL;
    otter_status st = OTTER_OK;
    { /* big-endian hosts decode into a copy */
        const uint16_t one = 1;
        uint8_t b0;
        memcpy(&b0, &one, 1);
        if (b0 != 1 && !(scratch = ot_malloc(s->n * sizeof *scratch + 1))) st = OT_NOMEM();
    }
    if (st == OTTER_OK) st = ot_fl_msg_decode(q->buf ? q->buf : (const uint8_t *)"", q->len, &want, &h, &v, scratch);
    if (st != OTTER_OK) {
        snprintf(q->msg, sizeof q->msg, "%s", otter_last_error());
        ot_free(scratch);
        return refuse_update(s, conn, MHD_HTTP_BAD_REQUEST, who, q->msg);
    }
    pthread_mutex_lock(&s->mu);
    fl_client *c = &s->clients[q->cid - 1]; /* clients may have moved (realloc): index again */
    const char *why = NULL;
    if (s->ph != PH_OPEN || s->open_round != h.round)
        why = "the round closed before the update arrived (late)";
    else if (!c->picked)
        why = "client not picked for this round";
    else if (c->uploaded)
        why = "client already sent its update for this round";
    /* A client's claim is its weight in the mean: capped so that no one claim outweighs the rest. */
    int64_t examples = h.num_examples > s->o.max_examples ? s->o.max_examples : h.num_examples;
    if (!why) {
        otter_fl_update u = {
            .params = v, .n = s->n, .num_examples = examples, .has_loss = h.has_loss, .loss = h.loss, .client = who};
        st = otter_fl_aggregator_add_update(s->agg, &u);
        if (st == OTTER_OK) {
            c->uploaded = true;
            c->last_seen = ot_now_seconds();
            s->received++;
            s->examples += examples;
            s->recv_bytes += (double)q->len;
            pthread_cond_broadcast(&s->cv);
        }
    }
    size_t got = s->received, want_n = s->picked;
    int64_t r = s->open_round;
    pthread_mutex_unlock(&s->mu);
    ot_free(scratch);
    if (why) {
        snprintf(q->msg, sizeof q->msg, "%s", why);
        return refuse_update(s, conn, MHD_HTTP_CONFLICT, who, q->msg);
    }
    if (st != OTTER_OK) {
        snprintf(q->msg, sizeof q->msg, "%s", otter_last_error());
        return refuse_update(s, conn, MHD_HTTP_BAD_REQUEST, who, q->msg);
    }
    if (examples < h.num_examples)
        slog(s, OTTER_LOG_WARN, "round %lld: %s claims %lld examples, weighted as %lld (--max-examples)", (long long)r,
             who, (long long)h.num_examples, (long long)examples);
    slog(s, OTTER_LOG_DEBUG, "round %lld: update %zu/%zu from %s (%lld examples)", (long long)r, got, want_n, who,
         (long long)examples);
    return reply(conn, MHD_HTTP_OK, "accepted\n");
}

/* GET / (a redirect to the page), /layout, /web-config and the static mounts. */
static enum MHD_Result do_web(otter_fl_server *s, struct MHD_Connection *conn, const req *q, const char *url,
                              const char *peer) {
    struct MHD_Response *r = NULL;
    unsigned status = MHD_HTTP_OK;
    const char *type = NULL;
    if (q->r == R_HOME)
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT), status = MHD_HTTP_FOUND;
    else if (q->r == R_LAYOUT)
        r = MHD_create_response_from_buffer(s->layout_msg_size, s->layout_msg, MHD_RESPMEM_PERSISTENT),
        type = "application/octet-stream";
    else if (q->r == R_WEB_CONFIG)
        r = MHD_create_response_from_buffer(strlen(s->web_config), s->web_config, MHD_RESPMEM_PERSISTENT),
        type = "application/json";
    else {
        const char *why = NULL;
        r = ot_fl_web_open(s->web, q->mount, url, &status, &why);
        if (!r) {
            slog(s, status == MHD_HTTP_NOT_FOUND ? OTTER_LOG_DEBUG : OTTER_LOG_WARN, "refused GET %s from %s (%u): %s",
                 url, peer, status, why);
            return reply(conn, status, status == MHD_HTTP_NOT_FOUND ? "not found\n" : "refused\n");
        }
    }
    if (!r) return MHD_NO;
    if (q->r == R_HOME) MHD_add_response_header(r, "Location", s->web_home);
    if (type) MHD_add_response_header(r, "Content-Type", type);
    if (q->r != R_WEB) MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* ---- connection deadlines ------------------------------------------------------------------------------ */

static conn_watch *watch_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* receiving: a new request may be coming in from now on; else the current one is in. */
static void watch_receiving(otter_fl_server *s, struct MHD_Connection *conn, bool receiving) {
    conn_watch *w = watch_of(conn);
    if (!w) return;
    pthread_mutex_lock(&s->watch_mu);
    w->receiving = receiving;
    w->since = ot_now_seconds();
    pthread_mutex_unlock(&s->watch_mu);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    otter_fl_server *s = cls;
    conn_watch *w = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(w = ot_calloc(1, sizeof *w))) return; /* unwatched: only libmicrohttpd's timeout applies */
        w->fd = ci->connect_fd;
        w->since = ot_now_seconds();
        w->receiving = true;
        peer_name(conn, w->peer, sizeof w->peer);
        pthread_mutex_lock(&s->watch_mu);
        w->next = s->watched;
        if (s->watched) s->watched->prev = w;
        s->watched = w;
        pthread_mutex_unlock(&s->watch_mu);
        *socket_context = w;
    } else if (w) { /* closed: libmicrohttpd closes the socket after this returns */
        pthread_mutex_lock(&s->watch_mu);
        if (w->prev)
            w->prev->next = w->next;
        else
            s->watched = w->next;
        if (w->next) w->next->prev = w->prev;
        pthread_mutex_unlock(&s->watch_mu);
        ot_free(w);
        *socket_context = NULL;
    }
}

/* Shut down connections whose request isn't in within request_timeout; libmicrohttpd then closes them. */
static void cut_overdue(otter_fl_server *s, double now) {
    pthread_mutex_lock(&s->watch_mu);
    for (conn_watch *w = s->watched; w; w = w->next)
        if (w->receiving && !w->cut && now - w->since > s->o.request_timeout) {
            w->cut = true;
            shutdown(w->fd, SHUT_RDWR);
            slog(s, OTTER_LOG_WARN, "closed the connection from %s: no complete request within %gs", w->peer,
                 s->o.request_timeout);
        }
    pthread_mutex_unlock(&s->watch_mu);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
    otter_fl_server *s = cls;
    (void)version;
    req *q = *con_cls;
    if (!q) { /* headers only: route, authenticate, bound the body */
        q = ot_calloc(1, sizeof *q);
        if (!q) return MHD_NO;
        *con_cls = q;
        q->method = method;
        bool post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
        if (post && strcmp(url, "/register") == 0)
            q->r = R_REGISTER, q->limit = 64 + 2 * otter_fl_layout_count(s->layout) * (4 + 8 * OTTER_MAX_RANK) + 65536;
        else if (get && strcmp(url, "/round") == 0)
            q->r = R_ROUND;
        else if (get && strcmp(url, "/params") == 0)
            q->r = R_PARAMS;
        else if (post && strcmp(url, "/update") == 0)
            q->r = R_UPDATE, q->limit = ot_fl_msg_size(s->n);
        else if (get && s->web && strcmp(url, "/") == 0)
            q->r = R_HOME;
        else if (get && s->web && strcmp(url, "/layout") == 0)
            q->r = R_LAYOUT;
        else if (get && s->web_config && strcmp(url, "/web-config") == 0)
            q->r = R_WEB_CONFIG;
        else if (get && (q->mount = ot_fl_web_match(s->web, url)))
            q->r = R_WEB;
        if (q->r == R_LAYOUT || (q->r == R_WEB && q->mount->need_token)) {
            size_t which;
            const char *tok = bearer(conn, method);
            bool ok = registration_token(s, tok, &which);
            if (!ok) {
                pthread_mutex_lock(&s->mu);
                ok = find_client(s, tok) != NULL;
                pthread_mutex_unlock(&s->mu);
            }
            if (!ok)
                q->status = MHD_HTTP_UNAUTHORIZED,
                snprintf(q->msg, sizeof q->msg, "%s token", tok ? "wrong" : "missing");
        }
        if (q->r == R_ROUND || q->r == R_PARAMS || q->r == R_UPDATE) {
            pthread_mutex_lock(&s->mu);
            fl_client *c = find_client(s, bearer(conn, method));
            if (c) q->cid = c->id;
            if (c && q->r == R_UPDATE) {
                if (s->ph != PH_OPEN)
                    q->status = MHD_HTTP_CONFLICT, snprintf(q->msg, sizeof q->msg, "no round is open");
                else if (!c->picked)
                    q->status = MHD_HTTP_CONFLICT, snprintf(q->msg, sizeof q->msg, "client not picked for this round");
                else if (c->uploaded)
                    q->status = MHD_HTTP_CONFLICT, snprintf(q->msg, sizeof q->msg, "client already sent its update");
            }
            pthread_mutex_unlock(&s->mu);
            if (!c)
                q->status = MHD_HTTP_UNAUTHORIZED,
                snprintf(q->msg, sizeof q->msg, "%s token", bearer(conn, method) ? "wrong" : "missing");
        }
        /* a declared body larger than allowed is refused before it is read */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && q->limit && strtoull(cl, NULL, 10) > q->limit) q->overflow = true;
        return MHD_YES;
    }
    if (*upload_data_size) { /* body: kept when it will be used, else counted and dropped */
        size_t k = *upload_data_size;
        *upload_data_size = 0;
        if (q->overflow || k > q->limit - q->len) {
            q->overflow = true;
            return MHD_YES;
        }
        if (!q->status && (q->r == R_REGISTER || q->r == R_UPDATE)) {
            if (!q->buf && !(q->buf = ot_malloc(q->limit ? q->limit : 1))) return MHD_NO;
            memcpy(q->buf + q->len, upload_data, k);
        }
        q->len += k;
        return MHD_YES;
    }
    watch_receiving(s, conn, false); /* the request is in: the answer's time doesn't count */
    char peer[80];
    peer_name(conn, peer, sizeof peer);
    switch (q->r) {
    case R_REGISTER:
        return do_register(s, conn, q, peer);
    case R_UPDATE:
        return do_update(s, conn, q, peer);
    case R_ROUND:
    case R_PARAMS:
        if (q->status) {
            slog(s, OTTER_LOG_WARN, "refused %s %s from %s (401): %s", method, url, peer, q->msg);
            return reply(conn, MHD_HTTP_UNAUTHORIZED, "unauthorized: wrong or missing token\n");
        }
        return q->r == R_ROUND ? do_round(s, conn, q->cid) : do_params(s, conn, q->cid);
    case R_HOME:
    case R_LAYOUT:
    case R_WEB_CONFIG:
    case R_WEB:
        if (q->status) {
            slog(s, OTTER_LOG_WARN, "refused %s %s from %s (401): %s", method, url, peer, q->msg);
            return reply(conn, MHD_HTTP_UNAUTHORIZED, "unauthorized: wrong or missing token\n");
        }
        return do_web(s, conn, q, url, peer);
    default:
        return reply(conn, MHD_HTTP_NOT_FOUND, "not found\n");
    }
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    watch_receiving(cls, conn, true);
    req *q = *con_cls;
    if (!q) return;
    ot_free(q->buf);
    ot_free(q);
    *con_cls = NULL;
}

/* ---- rounds ------------------------------------------------------------------------------------------ */

static size_t live_clients(otter_fl_server *s, double now, size_t *idx) {
    size_t k = 0;
    double w = live_window(s);
    for (size_t i = 0; i < s->n_clients; i++)
        if (now - s->clients[i].last_seen <= w) {
            if (idx) idx[k] = i;
            k++;
        }
    return k;
}

/* Under the lock: open round open_round with up to K of the live clients. */
static otter_status open_round(otter_fl_server *s, double now, size_t *live, size_t n_live) {
    size_t k = n_live < s->o.clients_per_round ? n_live : s->o.clients_per_round;
    size_t *pick = ot_malloc((n_live + 1) * sizeof *pick);
    if (!pick) return OT_NOMEM();
    double frac = fmin(1.0, ((double)k + 0.5) / (double)n_live);
    int64_t round = otter_fl_aggregator_round(s->agg) + 1;
    size_t got = otter_fl_sample_clients(n_live, frac, s->o.seed, round, pick);
    OT_ASSERT(got == k);
    const float *g = otter_fl_aggregator_global(s->agg, NULL);
    ot_fl_msg_header h = {.kind = OTTER_FL_MSG_PARAMS, .round = round, .n = s->n, .layout_hash = s->hash};
    void *msg = NULL;
    size_t msg_size = 0;
    otter_status st = ot_fl_msg_encode_alloc(&h, g, &msg, &msg_size);
    if (st != OTTER_OK) {
        ot_free(pick);
        return st;
    }
    s->params = MHD_create_response_from_buffer_with_free_callback(msg_size, msg, ot_free);
    if (!s->params) {
        ot_free(msg), ot_free(pick);
        return OT_NOMEM();
    }
    MHD_add_response_header(s->params, "Content-Type", "application/octet-stream");
    st = otter_fl_aggregator_begin_round(s->agg);
    if (st != OTTER_OK) {
        MHD_destroy_response(s->params), s->params = NULL;
        ot_free(pick);
        return st;
    }
    for (size_t i = 0; i < s->n_clients; i++) s->clients[i].picked = s->clients[i].uploaded = false;
    for (size_t i = 0; i < got; i++) s->clients[live[pick[i]]].picked = true;
    ot_free(pick);
    s->ph = PH_OPEN;
    s->open_round = round;
    s->picked = got, s->received = 0, s->refused = 0, s->examples = 0, s->recv_bytes = 0;
    s->t_open = now, s->deadline = now + s->o.round_timeout;
    return OTTER_OK;
}

static void end_round_locked(otter_fl_server *s) {
    if (s->params) MHD_destroy_response(s->params), s->params = NULL;
    for (size_t i = 0; i < s->n_clients; i++) s->clients[i].picked = false;
    s->avail_since = 0;
}

static void wait_until(otter_fl_server *s, double t) {
    double now = ot_now_seconds();
    if (t > now + 0.1) t = now + 0.1; /* wake often enough to see *stop */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double d = t - now;
    if (d < 0) d = 0;
    long ns = ts.tv_nsec + (long)(d * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* Called with the lock held in PH_CLOSING; takes and gives back the lock. */
static otter_status close_round(otter_fl_server *s) {
    otter_fl_round_report rep = {.round = s->open_round,
                                 .rounds = s->o.rounds,
                                 .picked = s->picked,
                                 .received = s->received,
                                 .dropped = s->picked - s->received,
                                 .refused = s->refused,
                                 .receive_bytes = s->recv_bytes};
    pthread_mutex_unlock(&s->mu);
    otter_fl_round_summary sum;
    otter_status st = otter_fl_aggregator_finish_round(s->agg, &sum);
    bool aggregated = st == OTTER_OK;
    if (!aggregated) { /* poisoned updates: finish_round dropped them; the round runs again */
        slog(s, OTTER_LOG_WARN, "%s", otter_last_error());
        otter_fl_aggregator_abort_round(s->agg);
        st = OTTER_OK;
    } else
        st = otter_fl_aggregator_save(s->agg, s->state_path);
    if (aggregated && sum.clipped)
        slog(s, OTTER_LOG_WARN, "round %lld: %zu of %zu updates clipped to norm %g", (long long)sum.round, sum.clipped,
             sum.num_updates, otter_fl_aggregator_strategy(s->agg)->clip_norm);
    if (aggregated && st == OTTER_OK) {
        rep.num_examples = sum.num_examples;
        rep.has_loss = sum.has_loss;
        rep.train_loss = sum.mean_loss;
        rep.update_norm = sum.update_norm;
        rep.global = otter_fl_aggregator_global(s->agg, &rep.n);
        rep.seconds = ot_now_seconds() - s->t_open;
        if (s->o.on_round) s->o.on_round(&rep, s->o.user);
    }
    pthread_mutex_lock(&s->mu);
    end_round_locked(s);
    s->ph = otter_fl_aggregator_round(s->agg) >= s->o.rounds ? PH_DONE : PH_WAITING;
    if (s->ph == PH_DONE) s->t_done = ot_now_seconds();
    pthread_cond_broadcast(&s->cv);
    return st;
}

otter_status otter_fl_server_run(otter_fl_server *s) {
    otter_status st = OTTER_OK;
    pthread_mutex_lock(&s->mu);
    size_t *live = NULL;
    while (st == OTTER_OK) {
        if (s->o.stop && *s->o.stop) break;
        double now = ot_now_seconds();
        cut_overdue(s, now);
        if (s->ph == PH_DONE) {
            size_t n_live = 0, told = 0;
            /* Wait for every client still polling, and for every client of the final round (one slow to
             * come back after its upload would otherwise retry against a gone server until it gives up). */
            for (size_t i = 0; i < s->n_clients; i++)
                if (now - s->clients[i].last_seen <= live_window(s) || s->clients[i].uploaded)
                    n_live++, told += s->clients[i].told_done;
            if (told == n_live || now - s->t_done >= s->o.linger) break;
            wait_until(s, s->t_done + s->o.linger);
        } else if (s->ph == PH_WAITING) {
            void *arr = live;
            size_t cap = 0;
            if (ot_grow(&arr, &cap, s->n_clients + 1, sizeof *live) != OTTER_OK) {
                st = OT_NOMEM();
                break;
            }
            live = arr;
            size_t n_live = live_clients(s, now, live);
            if (n_live >= s->o.min_clients && s->avail_since == 0) s->avail_since = now;
            if (n_live < s->o.min_clients) s->avail_since = 0;
            if (n_live >= s->o.clients_per_round ||
                (n_live >= s->o.min_clients && now - s->avail_since >= s->o.join_wait)) {
                st = open_round(s, now, live, n_live);
                if (st == OTTER_OK)
                    slog(s, OTTER_LOG_INFO, "round %lld/%lld open: %zu of %zu live clients picked",
                         (long long)s->open_round, (long long)s->o.rounds, s->picked, n_live);
                pthread_cond_broadcast(&s->cv);
            } else {
                wait_until(s, s->avail_since ? s->avail_since + s->o.join_wait : now + 0.1);
            }
        } else if (s->ph == PH_OPEN) {
            if (s->received == s->picked) {
                s->ph = PH_CLOSING;
                st = close_round(s);
            } else if (now >= s->deadline) {
                if (s->received >= s->o.min_clients) {
                    slog(s, OTTER_LOG_WARN,
                         "round %lld: timeout after %.1fs: closing with %zu of %zu updates, %zu "
                         "late clients dropped",
                         (long long)s->open_round, s->o.round_timeout, s->received, s->picked, s->picked - s->received);
                    s->ph = PH_CLOSING;
                    st = close_round(s);
                } else {
                    slog(s, OTTER_LOG_WARN,
                         "round %lld: timeout after %.1fs with %zu of %zu updates (fewer than "
                         "--min-clients %zu): round restarted",
                         (long long)s->open_round, s->o.round_timeout, s->received, s->picked, s->o.min_clients);
                    otter_fl_aggregator_abort_round(s->agg);
                    end_round_locked(s);
                    s->ph = PH_WAITING;
                    pthread_cond_broadcast(&s->cv);
                }
            } else {
                wait_until(s, s->deadline);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    ot_free(live);
    return st;
}

/* ---- lifetime ---------------------------------------------------------------------------------------- */

static otter_status mkdir_p(const char *dir) {
    char *p = ot_strdup(dir);
    if (!p) return OT_NOMEM();
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) break;
        *c = '/';
    }
    int rc = mkdir(p, 0777);
    int e = errno;
    ot_free(p);
    struct stat sb;
    if ((rc != 0 && e != EEXIST) || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return ot_error(OTTER_ERR_IO, "can't create the state folder '%s': %s", dir, strerror(rc ? e : ENOTDIR));
    return OTTER_OK;
}

static otter_status resume_or_create(otter_fl_server *s, const float *initial, size_t n,
                                     const otter_fl_strategy *strategy) {
    if (access(s->state_path, F_OK) != 0) return otter_fl_aggregator_create(&s->agg, s->layout, initial, n, strategy);
    OT_TRY(otter_fl_aggregator_load(&s->agg, s->state_path));
    otter_status st = otter_fl_layout_match(s->layout, otter_fl_aggregator_layout(s->agg));
    if (st == OTTER_OK && ot_fl_layout_hash(otter_fl_aggregator_layout(s->agg)) != s->hash)
        st = ot_error(OTTER_ERR_INVALID, "parameters in another order");
    if (st != OTTER_OK) return ot_error_context(st, "'%s' holds another model than the artifacts: ", s->state_path);
    char a[256], b[256];
    otter_fl_strategy_format(otter_fl_aggregator_strategy(s->agg), a, sizeof a);
    otter_fl_strategy_format(strategy, b, sizeof b);
    if (strcmp(a, b) != 0)
        return ot_error(OTTER_ERR_INVALID, "'%s' was made with strategy %s, not %s", s->state_path, a, b);
    if (otter_fl_aggregator_round(s->agg) > s->o.rounds)
        return ot_error(OTTER_ERR_INVALID, "'%s' is at round %lld, past --rounds %lld", s->state_path,
                        (long long)otter_fl_aggregator_round(s->agg), (long long)s->o.rounds);
    return OTTER_OK;
}

/* The PEM certificate and key into NUL-terminated strings (libmicrohttpd reads them from memory). */
static otter_status read_tls(otter_fl_server *s) {
    if (!s->o.tls_cert != !s->o.tls_key) return ot_error(OTTER_ERR_ARGUMENT, "TLS needs both a certificate and a key");
    if (!s->o.tls_cert) return OTTER_OK;
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return ot_error(OTTER_ERR_UNSUPPORTED, "this libmicrohttpd has no TLS support");
    const char *paths[2] = {s->o.tls_cert, s->o.tls_key};
    char **out[2] = {&s->tls_cert, &s->tls_key};
    for (int i = 0; i < 2; i++) {
        void *data = NULL;
        size_t size = 0;
        OT_TRY(ot_read_file(paths[i], &data, &size));
        char *text = ot_malloc(size + 1);
        if (!text) {
            ot_free(data);
            return OT_NOMEM();
        }
        memcpy(text, data, size);
        text[size] = '\0';
        ot_free(data);
        *out[i] = text;
    }
    return OTTER_OK;
}

otter_status otter_fl_server_create(otter_fl_server **out, const otter_fl_layout *layout, const float *initial,
                                    size_t n, const otter_fl_strategy *strategy, const otter_fl_server_options *opts) {
    *out = NULL;
    const otter_fl_server_options *o = opts;
    if (!o || o->rounds <= 0 || o->clients_per_round == 0 || o->min_clients == 0 ||
        o->min_clients > o->clients_per_round || !(o->round_timeout > 0) || !o->state_dir || o->n_tokens == 0 ||
        o->port < 0 || o->port > 65535)
        return ot_error(OTTER_ERR_ARGUMENT, "server options: rounds > 0, 1 <= min_clients <= clients_per_round, "
                                            "round_timeout > 0, a state folder and at least one token are needed");
    if (n != otter_fl_layout_numel(layout))
        return ot_error(OTTER_ERR_ARGUMENT, "%zu initial values for a layout of %zu", n, otter_fl_layout_numel(layout));
    for (size_t i = 0; i < o->n_tokens; i++) {
        if (!o->tokens[i] || !o->tokens[i][0]) return ot_error(OTTER_ERR_ARGUMENT, "empty token %zu", i);
        if (!b64token(o->tokens[i]))
            return ot_error(OTTER_ERR_ARGUMENT,
                            "token %zu has characters a Bearer token can't carry (letters, digits, -._~+/ and "
                            "trailing =)",
                            i + 1);
    }
    otter_fl_server *s = ot_calloc(1, sizeof *s);
    if (!s) return OT_NOMEM();
    s->urandom = -1;
    s->o = *o;
    s->o.tokens = NULL;
    if (!s->o.threads) s->o.threads = 2;
    if (!s->o.max_connections) s->o.max_connections = 1000;
    if (!s->o.max_per_ip) s->o.max_per_ip = s->o.max_connections / 4 ? s->o.max_connections / 4 : 1;
    if (!s->o.idle_timeout) s->o.idle_timeout = 30;
    if (!(s->o.request_timeout > 0)) s->o.request_timeout = 120;
    if (!s->o.max_clients) s->o.max_clients = 10000;
    if (!s->o.max_per_token) s->o.max_per_token = s->o.max_clients;
    if (!(s->o.slot_ttl > 0)) s->o.slot_ttl = fmax(60.0, s->o.round_timeout);
    if (s->o.max_examples <= 0) s->o.max_examples = 1000000;
    if (s->o.poll_ms <= 0) s->o.poll_ms = 200;
    if (!(s->o.linger > 0)) s->o.linger = 10;
    if (!(s->o.join_wait > 0)) s->o.join_wait = fmin(2.0, s->o.round_timeout);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->watch_mu, NULL);
    otter_status st = OTTER_OK;
    s->host = ot_strdup(o->host ? o->host : "127.0.0.1");
    s->state_dir = ot_strdup(o->state_dir);
    s->tokens = ot_calloc(o->n_tokens, sizeof *s->tokens);
    if (!s->host || !s->state_dir || !s->tokens) {
        st = OT_NOMEM();
        goto fail;
    }
    s->o.n_tokens = 0;
    for (size_t i = 0; i < o->n_tokens; i++, s->o.n_tokens++)
        if (!(s->tokens[i] = ot_strdup(o->tokens[i]))) {
            st = OT_NOMEM();
            goto fail;
        }
    s->o.host = s->host, s->o.state_dir = s->state_dir;
    if ((st = mkdir_p(s->state_dir)) != OTTER_OK) goto fail;
    if (!(s->state_path = ot_path_join(s->state_dir, "fl_state.bin"))) {
        st = OT_NOMEM();
        goto fail;
    }
    /* our own copy of the layout (a decode/encode round trip is the simplest deep copy) */
    {
        void *lb = NULL;
        size_t ls = 0;
        if ((st = ot_fl_layout_encode(layout, &lb, &ls)) != OTTER_OK) goto fail;
        st = ot_fl_layout_decode(lb, ls, &s->layout);
        ot_free(lb);
        if (st != OTTER_OK) goto fail;
    }
    s->hash = ot_fl_layout_hash(s->layout);
    s->n = n;
    s->o.web = NULL, s->o.n_web = 0, s->o.web_home = NULL, s->o.web_config = NULL; /* copies below */
    if (o->n_web) {
        if ((st = ot_fl_web_create(&s->web, o->web, o->n_web, o->web_max_file)) != OTTER_OK ||
            (st = ot_fl_layout_encode(s->layout, &s->layout_msg, &s->layout_msg_size)) != OTTER_OK)
            goto fail;
        s->web_home = ot_strdup(o->web_home ? o->web_home : o->web[0].prefix);
        if (!s->web_home || (o->web_config && !(s->web_config = ot_strdup(o->web_config)))) {
            st = OT_NOMEM();
            goto fail;
        }
    }
    if ((st = resume_or_create(s, initial, n, strategy)) != OTTER_OK) goto fail;
    if (otter_fl_aggregator_round(s->agg) > 0)
        slog(s, OTTER_LOG_INFO, "resumed from %s: %lld rounds completed", s->state_path,
             (long long)otter_fl_aggregator_round(s->agg));
    s->ph = otter_fl_aggregator_round(s->agg) >= s->o.rounds ? PH_DONE : PH_WAITING;
    s->t_done = ot_now_seconds();
    if ((s->urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) < 0) {
        st = ot_error(OTTER_ERR_IO, "/dev/urandom: %s", strerror(errno));
        goto fail;
    }
    if ((st = read_tls(s)) != OTTER_OK) goto fail;
    {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
        struct addrinfo *ai = NULL;
        char port[16];
        snprintf(port, sizeof port, "%d", o->port);
        int rc = getaddrinfo(s->host, port, &hints, &ai);
        if (rc != 0 || !ai) {
            st = ot_error(OTTER_ERR_ARGUMENT, "listen address '%s': %s", s->host, gai_strerror(rc));
            goto fail;
        }
        unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD;
        if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
        if (s->tls_cert) flags |= MHD_USE_TLS;
        /* TLS options only with MHD_USE_TLS: libmicrohttpd refuses them on a plain daemon */
        struct MHD_OptionItem tls[] = {{MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert},
                                       {MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
                                       {MHD_OPTION_END, 0, NULL}};
        if (!s->tls_cert) tls[0].option = MHD_OPTION_END;
        s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_THREAD_POOL_SIZE, s->o.threads, MHD_OPTION_CONNECTION_LIMIT,
                                s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, s->o.idle_timeout,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, s->o.max_per_ip, MHD_OPTION_ARRAY, tls,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
                                s, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
        freeaddrinfo(ai);
        if (!s->d) {
            st = ot_error(OTTER_ERR_IO, "can't listen on %s:%d (in use, or not an address of this host)", s->host,
                          o->port);
            goto fail;
        }
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
        s->port = di ? di->port : o->port;
    }
    *out = s;
    return OTTER_OK;
fail:
    otter_fl_server_free(s);
    return st;
}

int otter_fl_server_port(const otter_fl_server *s) { return s->port; }
int64_t otter_fl_server_round(const otter_fl_server *s) { return otter_fl_aggregator_round(s->agg); }
const float *otter_fl_server_global(const otter_fl_server *s, size_t *n) {
    return otter_fl_aggregator_global(s->agg, n);
}

void otter_fl_server_free(otter_fl_server *s) {
    if (!s) return;
    if (s->d) MHD_stop_daemon(s->d);
    if (s->params) MHD_destroy_response(s->params);
    if (s->urandom >= 0) close(s->urandom);
    otter_fl_aggregator_free(s->agg);
    otter_fl_layout_free(s->layout);
    for (size_t i = 0; s->tokens && i < s->o.n_tokens; i++) ot_free(s->tokens[i]);
    ot_free(s->tokens);
    ot_free(s->host), ot_free(s->state_dir), ot_free(s->state_path);
    ot_free(s->tls_cert), ot_free(s->tls_key);
    ot_free(s->clients);
    ot_fl_web_free(s->web);
    ot_free(s->web_home), ot_free(s->web_config), ot_free(s->layout_msg);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->watch_mu);
    pthread_cond_destroy(&s->cv);
    ot_free(s);
}
