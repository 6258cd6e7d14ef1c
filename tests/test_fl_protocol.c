/* The federated wire format (src/fl/protocol.h) and one in-process loopback run of the server and client
 * engines:
 * - messages round-trip bit-exactly; the size is 64 + 4n (overhead ratio printed for the CIFAR-10 CNN's n);
 * - every truncation length of a message, every flipped magic/version/kind/reserved byte, a wrong n, layout
 *   hash, round, example count, a NaN or Inf loss, and a NaN or Inf value (named by parameter and element)
 *   are refused;
 * - layouts round-trip, a changed dim / name / order changes the hash, and every truncation of a layout is
 *   refused;
 * - loopback: a server (port 0) and 3 client threads whose "training" adds a known per-client delta, 2
 *   rounds of FedAvg; the final global equals the example-weighted mean computed here in double. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fl/protocol.h"
#include "testutil.h"

static otter_fl_layout *make_layout(int64_t d0, const char *second) {
    otter_fl_param p[2] = {{.name = "W", .dtype = OTTER_DTYPE_FLOAT, .rank = 2, .dims = {d0, 3}},
                           {.name = second, .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {3}}};
    otter_fl_layout *l = NULL;
    CHECK_OK(otter_fl_layout_create(&l, 2, p));
    return l;
}

static void test_messages(void) {
    otter_fl_layout *l = make_layout(4, "b");
    size_t n = otter_fl_layout_numel(l);
    CHECK(n == 15);
    float v[15];
    for (size_t i = 0; i < n; i++) v[i] = (float)i * 0.25f - 1.5f;
    ot_fl_msg_header h = {.kind = OTTER_FL_MSG_UPDATE,
                          .round = 7,
                          .num_examples = 123,
                          .has_loss = true,
                          .loss = 0.5,
                          .n = n,
                          .layout_hash = ot_fl_layout_hash(l)};
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(ot_fl_msg_encode_alloc(&h, v, &buf, &size));
    CHECK(size == 64 + 4 * n);
    ot_fl_msg_expect want = {
        .kind = OTTER_FL_MSG_UPDATE, .round = 7, .n = n, .layout_hash = h.layout_hash, .layout = l};
    ot_fl_msg_header got;
    const float *gv = NULL;
    float scratch[15];
    CHECK_OK(ot_fl_msg_decode(buf, size, &want, &got, &gv, scratch));
    CHECK(got.round == 7 && got.num_examples == 123 && got.has_loss && got.loss == 0.5 && got.n == n);
    CHECK(gv && memcmp(gv, v, sizeof v) == 0);
    uint8_t *b = buf;
    /* byte 0..3 "OTFL", 4..5 version 1 LE, 6..7 kind 2, 8..15 round 7 LE, value 0 at 64 */
    CHECK(memcmp(b, "OTFL", 4) == 0 && b[4] == 1 && b[5] == 0 && b[6] == 2 && b[8] == 7 && b[15] == 0);
    float f0;
    memcpy(&f0, b + 64, 4);
    CHECK(f0 == -1.5f);

    /* every truncation and one extra byte */
    int refused = 0;
    uint8_t *big = malloc(size + 1);
    memcpy(big, buf, size);
    big[size] = 0;
    for (size_t k = 0; k <= size + 1; k++) {
        if (k == size) continue;
        refused += ot_fl_msg_decode(big, k, &want, &got, &gv, scratch) == OTTER_ERR_INVALID;
    }
    CHECK(refused == (int)size + 1);
    printf("truncations/extension refused: %d of %zu\n", refused, size + 1);
    free(big);

    /* each header field corrupted */
    struct {
        size_t off;
        uint8_t val;
        const char *what;
    } bad[] = {{0, 'X', "magic"}, {4, 2, "version"},  {6, 1, "kind"},   {8, 6, "round"},     {16, 0, "examples"},
               {32, 14, "n"},     {40, 0x55, "hash"}, {48, 2, "flags"}, {55, 1, "reserved"}, {63, 1, "reserved end"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint8_t *c = malloc(size);
        memcpy(c, buf, size);
        c[bad[i].off] = bad[i].val;
        if (bad[i].off == 16) memset(c + 16, 0, 8);
        otter_status st = ot_fl_msg_decode(c, size, &want, &got, &gv, scratch);
        CHECK(st == OTTER_ERR_INVALID);
        printf("corrupt %-12s -> %s\n", bad[i].what, otter_last_error());
        free(c);
    }
    /* negative example count, non-finite loss */
    ot_fl_msg_header h2 = h;
    h2.num_examples = -3;
    void *b2 = NULL;
    size_t s2;
    CHECK_OK(ot_fl_msg_encode_alloc(&h2, v, &b2, &s2));
    CHECK_STATUS(ot_fl_msg_decode(b2, s2, &want, &got, &gv, scratch), OTTER_ERR_INVALID);
    otter_free(b2);
    h2 = h;
    h2.loss = NAN;
    CHECK_OK(ot_fl_msg_encode_alloc(&h2, v, &b2, &s2));
    CHECK_STATUS(ot_fl_msg_decode(b2, s2, &want, &got, &gv, scratch), OTTER_ERR_INVALID);
    otter_free(b2);
    /* NaN / Inf values, named by parameter and element */
    const float specials[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        float w[15];
        memcpy(w, v, sizeof w);
        w[13] = specials[k];
        CHECK_OK(ot_fl_msg_encode_alloc(&h, w, &b2, &s2));
        CHECK_STATUS(ot_fl_msg_decode(b2, s2, &want, &got, &gv, scratch), OTTER_ERR_INVALID);
        CHECK(strstr(otter_last_error(), "'b' element 1") != NULL);
        printf("value 13 = %g -> %s\n", (double)specials[k], otter_last_error());
        otter_free(b2);
    }
    /* the same message where params are expected */
    want.kind = OTTER_FL_MSG_PARAMS;
    CHECK_STATUS(ot_fl_msg_decode(buf, size, &want, &got, &gv, scratch), OTTER_ERR_INVALID);
    otter_free(buf);

    /* overhead for the CIFAR-10 CNN's 1,147,466 floats */
    double ratio = (double)ot_fl_msg_size(1147466) / (4.0 * 1147466);
    printf("format overhead for 1147466 floats: %.7fx raw float32\n", ratio);
    CHECK(ratio < 1.1);
    otter_fl_layout_free(l);
}

static void test_layouts(void) {
    otter_fl_layout *a = make_layout(4, "b"), *b = make_layout(5, "b"), *c = make_layout(4, "bias");
    otter_fl_param rev[2] = {{.name = "b", .dtype = OTTER_DTYPE_FLOAT, .rank = 1, .dims = {3}},
                             {.name = "W", .dtype = OTTER_DTYPE_FLOAT, .rank = 2, .dims = {4, 3}}};
    otter_fl_layout *d = NULL;
    CHECK_OK(otter_fl_layout_create(&d, 2, rev));
    uint64_t ha = ot_fl_layout_hash(a);
    CHECK(ha != ot_fl_layout_hash(b) && ha != ot_fl_layout_hash(c) && ha != ot_fl_layout_hash(d));
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(ot_fl_layout_encode(a, &buf, &size));
    otter_fl_layout *back = NULL;
    CHECK_OK(ot_fl_layout_decode(buf, size, &back));
    CHECK(back && ot_fl_layout_hash(back) == ha && otter_fl_layout_numel(back) == 15);
    CHECK(back && otter_fl_layout_match(a, back) == OTTER_OK);
    otter_fl_layout_free(back);
    int refused = 0;
    for (size_t k = 0; k < size; k++) {
        otter_fl_layout *t = NULL;
        refused += ot_fl_layout_decode(buf, k, &t) == OTTER_ERR_INVALID;
        otter_fl_layout_free(t);
    }
    CHECK(refused == (int)size);
    printf("layout: %zu bytes, truncations refused %d of %zu\n", size, refused, size);
    otter_free(buf);
    otter_fl_layout_free(a), otter_fl_layout_free(b), otter_fl_layout_free(c), otter_fl_layout_free(d);
}

/* ---- loopback ---------------------------------------------------------------------------------------- */

typedef struct lb_client {
    otter_fl_client *c;
    int idx;
    otter_status st;
    otter_fl_client_stats stats;
} lb_client;

static otter_status fake_train(int64_t round, const float *global, size_t n, float *out, int64_t *num_examples,
                               double *loss, void *user) {
    lb_client *c = user;
    for (size_t i = 0; i < n; i++) out[i] = global[i] + (float)((c->idx + 1) * (int)(i + 1)) * 0.01f * (float)round;
    *num_examples = 10 * (c->idx + 1);
    *loss = 1.0 / (double)round;
    return OTTER_OK;
}

static void *client_thread(void *p) {
    lb_client *c = p;
    c->st = otter_fl_client_run(c->c, fake_train, c, &c->stats);
    return NULL;
}

typedef struct lb_server {
    otter_fl_server *s;
    otter_status st;
} lb_server;

static void *server_thread(void *p) {
    lb_server *s = p;
    s->st = otter_fl_server_run(s->s);
    return NULL;
}

static void test_loopback(void) {
    otter_fl_layout *l = make_layout(4, "b");
    size_t n = otter_fl_layout_numel(l);
    float init[15];
    for (size_t i = 0; i < n; i++) init[i] = (float)i;
    const char *tokens[] = {"t0k3n"};
    char state[512];
    snprintf(state, sizeof state, "%s", tu_tmp_path("fl_protocol_state"));
    char rmcmd[600];
    snprintf(rmcmd, sizeof rmcmd, "rm -rf '%s'", state);
    CHECK(system(rmcmd) == 0);
    otter_fl_server_options so = {.host = "127.0.0.1",
                                  .port = 0,
                                  .rounds = 2,
                                  .clients_per_round = 3,
                                  .min_clients = 3,
                                  .round_timeout = 60,
                                  .state_dir = state,
                                  .tokens = tokens,
                                  .n_tokens = 1,
                                  .poll_ms = 20,
                                  .linger = 10};
    otter_fl_strategy strat = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    lb_server srv = {0};
    CHECK_OK(otter_fl_server_create(&srv.s, l, init, n, &strat, &so));
    if (!srv.s) return;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", otter_fl_server_port(srv.s));
    pthread_t st, ct[3];
    pthread_create(&st, NULL, server_thread, &srv);
    lb_client cs[3];
    for (int i = 0; i < 3; i++) {
        cs[i] = (lb_client){.idx = i};
        otter_fl_client_options co = {.server = url, .token = "t0k3n", .give_up = 30};
        CHECK_OK(otter_fl_client_create(&cs[i].c, l, &co));
        pthread_create(&ct[i], NULL, client_thread, &cs[i]);
    }
    /* a client with the wrong token is refused at registration */
    otter_fl_client *bad = NULL;
    otter_fl_client_options bo = {.server = url, .token = "wrong", .give_up = 5};
    CHECK_OK(otter_fl_client_create(&bad, l, &bo));
    lb_client dummy = {.idx = 9};
    CHECK_STATUS(otter_fl_client_run(bad, fake_train, &dummy, NULL), OTTER_ERR_ARGUMENT);
    printf("wrong token: %s\n", otter_last_error());
    otter_fl_client_free(bad);
    /* a client of another model is refused naming the parameter */
    otter_fl_layout *other = make_layout(5, "b");
    CHECK_OK(otter_fl_client_create(&bad, other, &(otter_fl_client_options){.server = url, .token = "t0k3n"}));
    CHECK_STATUS(otter_fl_client_run(bad, fake_train, &dummy, NULL), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "'W'") != NULL);
    printf("other model: %s\n", otter_last_error());
    otter_fl_client_free(bad);
    otter_fl_layout_free(other);
    for (int i = 0; i < 3; i++) pthread_join(ct[i], NULL);
    pthread_join(st, NULL);
    CHECK_OK(srv.st);
    CHECK(otter_fl_server_round(srv.s) == 2);
    /* expected: two FedAvg rounds in double */
    double g[15], worst = 0;
    for (size_t i = 0; i < n; i++) g[i] = init[i];
    for (int r = 1; r <= 2; r++) {
        for (size_t i = 0; i < n; i++) {
            double num = 0, den = 0;
            for (int k = 0; k < 3; k++) {
                float x = (float)g[i] + (float)((k + 1) * (int)(i + 1)) * 0.01f * (float)r;
                num += 10.0 * (k + 1) * (double)x, den += 10.0 * (k + 1);
            }
            g[i] = (double)(float)(num / den);
        }
    }
    size_t gn = 0;
    const float *got = otter_fl_server_global(srv.s, &gn);
    CHECK(gn == n);
    for (size_t i = 0; i < n; i++) worst = tu_worse(worst, fabs((double)got[i] - g[i]));
    printf("loopback: 3 clients x 2 rounds, worst |global - expected FedAvg| = %.3g\n", worst);
    CHECK(worst <= 1e-6);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(cs[i].st);
        CHECK(cs[i].stats.rounds_trained == 2 && cs[i].stats.updates_accepted == 2 && cs[i].stats.last_round == 2);
        otter_fl_client_free(cs[i].c);
    }
    otter_fl_server_free(srv.s);
    otter_fl_layout_free(l);
}

int main(void) {
    test_messages();
    test_layouts();
    test_loopback();
    return tu_finish("test_fl_protocol");
}
