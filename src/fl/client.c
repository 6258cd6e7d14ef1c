/* `otter fl client`'s engine: libcurl requests against the HTTP API of protocol.h, a poll loop that trains
 * the rounds the server picks this client for (through a callback: the caller owns the training session),
 * exponential backoff with jitter while the server is unreachable, and a fresh registration when the server
 * no longer knows the issued token (it restarted). Nothing here prints: messages go to the log callback. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/clock.h"
#include "core/core.h"
#include "fl/protocol.h"

struct otter_fl_client {
    otter_fl_client_options o;
    char *server, *token;
    otter_fl_layout *layout;
    uint64_t hash;
    size_t n;
    CURL *curl;
    char issued[64];
    unsigned long long id;
    int poll_ms;
    uint8_t *body; /* response body */
    size_t body_len, body_cap, body_limit;
    bool body_overflow;
    unsigned rng;
    double away_since; /* first failure of the current streak (0: the server answered last time) */
    char err[CURL_ERROR_SIZE];
};

static void clog_(otter_fl_client *c, otter_log_level lv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void clog_(otter_fl_client *c, otter_log_level lv, const char *fmt, ...) {
    if (!c->o.log) return;
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c->o.log(lv, buf, c->o.user);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    otter_fl_client *c = user;
    size_t k = size * nmemb;
    if (c->body_overflow || k > c->body_limit - c->body_len) {
        c->body_overflow = true;
        return 0; /* aborts the transfer */
    }
    if (c->body_len + k + 1 > c->body_cap) {
        void *arr = c->body;
        if (ot_grow(&arr, &c->body_cap, c->body_len + k + 1, 1) != OTTER_OK) return 0;
        c->body = arr;
    }
    memcpy(c->body + c->body_len, data, k);
    c->body_len += k;
    c->body[c->body_len] = '\0';
    return k;
}

/* One request. Returns false on a transport failure (server away): message in c->err. */
static bool request(otter_fl_client *c, const char *method, const char *path, const char *token, const void *data,
                    size_t size, long *status) {
    char url[1024], auth[128];
    snprintf(url, sizeof url, "%s%s", c->server, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token ? token : "");
    struct curl_slist *hdr = NULL, *h2;
    if (token && (h2 = curl_slist_append(hdr, auth))) hdr = h2;
    if ((h2 = curl_slist_append(hdr, "Expect:"))) hdr = h2; /* no 100-continue round trip */
    if (data && (h2 = curl_slist_append(hdr, "Content-Type: application/octet-stream"))) hdr = h2;
    CURL *e = c->curl;
    /* give_up bounds a hung request too: no request outlives the streak's give-up deadline (a server that
     * accepts and never answers would otherwise hold the client for http_timeout per attempt). */
    double left = c->o.give_up - (c->away_since > 0 ? ot_now_seconds() - c->away_since : 0);
    double timeout = fmax(0.5, fmin(c->o.http_timeout, left));
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(fmin(10.0, timeout) * 1000));
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdr);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, data ? data : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    c->body_len = 0;
    c->body_overflow = false;
    c->err[0] = '\0';
    CURLcode rc = curl_easy_perform(e);
    curl_slist_free_all(hdr);
    if (rc != CURLE_OK) {
        if (c->body_overflow)
            snprintf(c->err, sizeof c->err, "response larger than %zu bytes", c->body_limit);
        else if (!c->err[0])
            snprintf(c->err, sizeof c->err, "%s", curl_easy_strerror(rc));
        return false;
    }
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    return true;
}

static const char *body_str(const otter_fl_client *c) { return c->body ? (const char *)c->body : ""; }

/* The body's first line, for messages. */
static const char *body_line(otter_fl_client *c, char *out, size_t cap) {
    size_t k = 0;
    while (k < c->body_len && k + 1 < cap && c->body[k] != '\n' && c->body[k] >= 32) out[k] = (char)c->body[k], k++;
    out[k] = '\0';
    return out;
}

static void sleep_s(otter_fl_client *c, double s) {
    double end = ot_now_seconds() + s;
    while (!(c->o.stop && *c->o.stop)) {
        double left = end - ot_now_seconds();
        if (left <= 0) break;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(fmin(left, 0.05) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

/* Backoff state: sleeps initial * 2^k (capped), +-25% jitter; false once give_up has passed since the last
 * time the server answered. */
typedef struct backoff {
    int k;
    double since; /* 0: the server answered last time */
} backoff;

static bool backoff_wait(otter_fl_client *c, backoff *b, otter_fl_client_stats *st, const char *what) {
    double now = ot_now_seconds();
    if (b->since == 0) b->since = c->away_since = now;
    if (now - b->since > c->o.give_up) return false;
    double d = fmin(c->o.backoff_initial * pow(2.0, b->k), c->o.backoff_max);
    d *= 0.75 + 0.5 * (double)(rand_r(&c->rng) % 1000) / 1000.0;
    if (b->k < 30) b->k++;
    st->reconnects++;
    clog_(c, OTTER_LOG_WARN, "%s: %s; retrying in %.2fs", what, c->err, d);
    sleep_s(c, d);
    return true;
}

static void backoff_reset(otter_fl_client *c, backoff *b) { b->k = 0, b->since = c->away_since = 0; }

typedef enum reg_result { REG_OK, REG_AWAY, REG_FATAL } reg_result;

static reg_result do_register(otter_fl_client *c, otter_fl_client_stats *st, otter_status *fatal) {
    void *lb = NULL;
    size_t ls = 0;
    if ((*fatal = ot_fl_layout_encode(c->layout, &lb, &ls)) != OTTER_OK) return REG_FATAL;
    long code = 0;
    bool ok = request(c, "POST", "/register", c->token, lb, ls, &code);
    ot_free(lb);
    if (!ok) return REG_AWAY;
    char line[160];
    if (code == 401) {
        *fatal = ot_error(OTTER_ERR_ARGUMENT, "server %s refused the registration token (401)", c->server);
        return REG_FATAL;
    }
    if (code == 400) {
        *fatal = ot_error(OTTER_ERR_INVALID, "server %s refused this client: %s", c->server,
                          body_line(c, line, sizeof line));
        return REG_FATAL;
    }
    unsigned long long id;
    char tok[64];
    int poll;
    if (code != 200 || sscanf(body_str(c), "client %llu token %63s poll_ms %d", &id, tok, &poll) != 3) {
        snprintf(c->err, sizeof c->err, "registration answered %ld: %s", code, body_line(c, line, sizeof line));
        return REG_AWAY;
    }
    c->id = id;
    snprintf(c->issued, sizeof c->issued, "%s", tok);
    c->poll_ms = poll > 0 ? poll : 200;
    st->registrations++;
    clog_(c, OTTER_LOG_INFO, "registered with %s as client %llu", c->server, id);
    return REG_OK;
}

otter_status otter_fl_client_run(otter_fl_client *c, otter_fl_train_fn train, void *train_user,
                                 otter_fl_client_stats *stats) {
    otter_fl_client_stats st_local = {0};
    otter_fl_client_stats *st = stats ? stats : &st_local;
    memset(st, 0, sizeof *st);
    st->last_round = -1;
    float *out = ot_malloc((c->n ? c->n : 1) * sizeof *out), *global = ot_malloc((c->n ? c->n : 1) * sizeof *global);
    void *msg = ot_malloc(ot_fl_msg_size(c->n));
    otter_status res = OTTER_OK;
    if (!out || !global || !msg) {
        res = OT_NOMEM();
        goto done;
    }
    backoff b = {0};
    bool registered = false;
    char line[160];
    while (!(c->o.stop && *c->o.stop)) {
        if (!registered) {
            reg_result r = do_register(c, st, &res);
            if (r == REG_FATAL) goto done;
            if (r == REG_AWAY) {
                if (!backoff_wait(c, &b, st, "registering")) goto away;
                continue;
            }
            backoff_reset(c, &b);
            registered = true;
        }
        long code = 0;
        if (!request(c, "GET", "/round", c->issued, NULL, 0, &code)) {
            if (!backoff_wait(c, &b, st, "polling")) goto away;
            continue;
        }
        if (code == 401) { /* the server restarted and forgot us */
            clog_(c, OTTER_LOG_INFO, "server no longer knows client %llu; registering again", c->id);
            registered = false;
            continue;
        }
        char what[16];
        long long round, rounds = 0;
        int poll;
        if (code != 200 || sscanf(body_str(c), "%15s %lld poll_ms %d rounds %lld", what, &round, &poll, &rounds) < 3) {
            snprintf(c->err, sizeof c->err, "GET /round answered %ld: %s", code, body_line(c, line, sizeof line));
            if (!backoff_wait(c, &b, st, "polling")) goto away;
            continue;
        }
        backoff_reset(c, &b);
        if (poll > 0) c->poll_ms = poll;
        if (strcmp(what, "done") == 0) {
            st->last_round = round;
            clog_(c, OTTER_LOG_INFO, "server says training is over after round %lld", round);
            goto done;
        }
        /* "train" goes only to a picked client without an accepted update for the open round; the same round
         * number comes back after a restarted round or a restarted server, and then it is trained again */
        if (strcmp(what, "train") != 0) {
            sleep_s(c, c->poll_ms / 1000.0);
            continue;
        }
        /* picked for `round` */
        if (!request(c, "GET", "/params", c->issued, NULL, 0, &code)) {
            if (!backoff_wait(c, &b, st, "fetching the global model")) goto away;
            continue;
        }
        if (code != 200) { /* 409: the round closed meanwhile; 401: restarted */
            clog_(c, OTTER_LOG_INFO, "round %lld: GET /params answered %ld: %s", round, code,
                  body_line(c, line, sizeof line));
            if (code == 401) registered = false;
            continue;
        }
        ot_fl_msg_expect want = {
            .kind = OTTER_FL_MSG_PARAMS, .round = round, .n = c->n, .layout_hash = c->hash, .layout = c->layout};
        ot_fl_msg_header h;
        const float *v;
        if (ot_fl_msg_decode(c->body, c->body_len, &want, &h, &v, global) != OTTER_OK) {
            res = ot_error_context(OTTER_ERR_INVALID, "global model from %s: ", c->server);
            goto done;
        }
        if (v != global) memcpy(global, v, c->n * sizeof *global);
        int64_t examples = 0;
        double loss = NAN;
        double t0 = ot_now_seconds();
        if ((res = train(round, global, c->n, out, &examples, &loss, train_user)) != OTTER_OK) goto done;
        st->rounds_trained++;
        ot_fl_msg_header u = {.kind = OTTER_FL_MSG_UPDATE,
                              .round = round,
                              .num_examples = examples,
                              .has_loss = isfinite(loss),
                              .loss = loss,
                              .n = c->n,
                              .layout_hash = c->hash};
        ot_fl_msg_encode(&u, out, msg);
        for (;;) {
            if (request(c, "POST", "/update", c->issued, msg, ot_fl_msg_size(c->n), &code)) break;
            if (!backoff_wait(c, &b, st, "uploading")) goto away;
            if (c->o.stop && *c->o.stop) goto done;
        }
        backoff_reset(c, &b);
        if (code == 200) {
            st->updates_accepted++;
            clog_(c, OTTER_LOG_INFO, "round %lld: trained on %lld examples in %.2fs, loss %.4f; update accepted", round,
                  (long long)examples, ot_now_seconds() - t0, loss);
            if (rounds > 0 && round >= rounds) { /* the final round: nothing more to wait for */
                st->last_round = round;
                clog_(c, OTTER_LOG_INFO, "round %lld was the last of %lld: training is over", round, rounds);
                goto done;
            }
        } else {
            st->updates_refused++;
            clog_(c, OTTER_LOG_WARN, "round %lld: update refused (%ld): %s", round, code,
                  body_line(c, line, sizeof line));
            if (code == 401) registered = false;
            if (code == 400) { /* the server would refuse it again: a fault of this client, not a transient */
                res = ot_error(OTTER_ERR_INVALID, "round %lld: server %s refused the update: %s", round, c->server,
                               body_line(c, line, sizeof line));
                goto done;
            }
        }
    }
    goto done;
away:
    res = ot_error(OTTER_ERR_IO, "server %s unreachable for %.1fs (%s); giving up", c->server, c->o.give_up, c->err);
done:
    ot_free(out), ot_free(global), ot_free(msg);
    return res;
}

otter_status otter_fl_client_create(otter_fl_client **out, const otter_fl_layout *layout,
                                    const otter_fl_client_options *opts) {
    *out = NULL;
    if (!opts || !opts->server || !opts->server[0] || !opts->token || !opts->token[0])
        return ot_error(OTTER_ERR_ARGUMENT, "client options: a server URL and a token are needed");
    if (strlen(opts->server) > 900) return ot_error(OTTER_ERR_ARGUMENT, "server URL too long");
    if (strlen(opts->token) > 100) return ot_error(OTTER_ERR_ARGUMENT, "token longer than 100 characters");
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) return ot_error(OTTER_ERR_IO, "libcurl: %s", curl_easy_strerror(curl_init_rc));
    otter_fl_client *c = ot_calloc(1, sizeof *c);
    if (!c) return OT_NOMEM();
    c->o = *opts;
    if (!(c->o.backoff_initial > 0)) c->o.backoff_initial = 0.1;
    if (!(c->o.backoff_max > 0)) c->o.backoff_max = 5;
    if (!(c->o.give_up > 0)) c->o.give_up = 300;
    if (!(c->o.http_timeout > 0)) c->o.http_timeout = 120;
    otter_status st = OTTER_OK;
    c->server = ot_strdup(opts->server);
    c->token = ot_strdup(opts->token);
    if (!c->server || !c->token) {
        st = OT_NOMEM();
        goto fail;
    }
    size_t sl = strlen(c->server);
    while (sl && c->server[sl - 1] == '/') c->server[--sl] = '\0';
    void *lb = NULL;
    size_t ls = 0;
    if ((st = ot_fl_layout_encode(layout, &lb, &ls)) != OTTER_OK) goto fail;
    st = ot_fl_layout_decode(lb, ls, &c->layout);
    ot_free(lb);
    if (st != OTTER_OK) goto fail;
    c->hash = ot_fl_layout_hash(c->layout);
    c->n = otter_fl_layout_numel(c->layout);
    c->body_limit = ot_fl_msg_size(c->n) + 65536;
    c->rng = (unsigned)getpid() ^ (unsigned)(ot_now_seconds() * 1e6);
    if (!(c->curl = curl_easy_init())) {
        st = ot_error(OTTER_ERR_IO, "libcurl: can't create a handle");
        goto fail;
    }
    curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->err);
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TCP_KEEPALIVE, 1L);
    if (c->o.ca) curl_easy_setopt(c->curl, CURLOPT_CAINFO, c->o.ca);
    *out = c;
    return OTTER_OK;
fail:
    otter_fl_client_free(c);
    return st;
}

void otter_fl_client_free(otter_fl_client *c) {
    if (!c) return;
    if (c->curl) curl_easy_cleanup(c->curl);
    otter_fl_layout_free(c->layout);
    ot_free(c->server), ot_free(c->token), ot_free(c->body);
    ot_free(c);
}
