/* Federated learning in one process (fl.h): a client's local round over the training loop, and the
 * simulation of N clients sharing one dataset with the aggregator the HTTP server runs. */
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/core.h"
#include "otter/fl.h"

otter_status otter_fl_train_local(otter_training_session *s, const float *global, size_t n, const otter_dataset *ds,
                                  const otter_train_options *opts, float *out, int64_t *num_examples, double *loss) {
    if (!s || !global || !ds || !num_examples || !loss)
        return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_train_local: NULL argument");
    otter_train_options o = {0};
    if (opts) o = *opts;
    /* a round is local epochs from the global weights: nothing of a resumable run */
    o.checkpoint = o.best_checkpoint = NULL;
    o.eval_data = NULL;
    o.resume = false;
    OT_TRY(otter_training_copy_buffer_to_params(s, global, n, true));
    otter_train_result r;
    OT_TRY(otter_training_run(s, ds, &o, &r));
    if (out) OT_TRY(otter_training_copy_params_to_buffer(s, out, n, true));
    *num_examples = r.samples_per_epoch;
    *loss = r.mean_loss;
    return OTTER_OK;
}

/* splitmix64 of a combination of a and b: independent streams per (seed, client, round). */
static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The artifacts in memory, so that every client gets a session with a fresh optimizer state. */
typedef struct artifacts {
    void *train, *eval, *optim, *ckpt;
    size_t train_n, eval_n, optim_n, ckpt_n;
    int n_threads;
} artifacts;

static otter_status artifacts_read(const char *dir, artifacts *a) {
    const char *names[4] = {"training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"};
    void **dst[4] = {&a->train, &a->eval, &a->optim, &a->ckpt};
    size_t *len[4] = {&a->train_n, &a->eval_n, &a->optim_n, &a->ckpt_n};
    for (int i = 0; i < 4; i++) {
        char *path = ot_path_join(dir, names[i]);
        if (!path) return OT_NOMEM();
        otter_status st = OTTER_OK;
        if (i == 2 && access(path, F_OK) != 0)
            st = ot_error(OTTER_ERR_NOT_FOUND, "'%s' has no optimizer_model.onnx", dir);
        else if (i != 1 || access(path, F_OK) == 0) /* the eval model is optional */
            st = ot_read_file(path, dst[i], len[i]);
        ot_free(path);
        OT_TRY(st);
    }
    return OTTER_OK;
}

static void artifacts_free(artifacts *a) { ot_free(a->train), ot_free(a->eval), ot_free(a->optim), ot_free(a->ckpt); }

static otter_status session_new(const artifacts *a, otter_training_session **out) {
    otter_checkpoint *ck = NULL;
    OT_TRY(otter_checkpoint_load_from_memory(&ck, a->ckpt, a->ckpt_n));
    otter_training_options o = {.n_threads = a->n_threads};
    otter_status st = otter_training_session_create_from_memory(out, ck, a->train, a->train_n, a->eval, a->eval_n,
                                                                a->optim, a->optim_n, &o);
    if (st != OTTER_OK) otter_checkpoint_free(ck);
    return st;
}

typedef struct sim {
    otter_fl_sim_options o; /* defaults filled in */
    const otter_dataset *ds;
    artifacts arts;
    otter_training_session *global; /* holds the global weights for evaluation and the caller */
    otter_partition *part;
    otter_fl_layout *layout;
    otter_fl_aggregator *agg;
    size_t *picked, n;
    double t_start, session_seconds;
} sim;

/* Client c's update for round r, added to the open round (nothing when the client has no samples). */
static otter_status client_round(sim *m, int64_t r, int c) {
    int64_t cnt = 0;
    const int64_t *idx = otter_partition_client(m->part, c, &cnt);
    if (cnt == 0) return OTTER_OK; /* a Dirichlet partition can leave a client without samples */
    otter_training_session *s = NULL;
    double t0 = ot_now_seconds();
    OT_TRY(session_new(&m->arts, &s));
    m->session_seconds += ot_now_seconds() - t0;
    otter_training_set_seed(s, mix(m->o.seed, (uint64_t)r * 1000003u + (uint64_t)c));
    otter_train_options lo = m->o.local;
    lo.keep_order = false;
    lo.seed = mix(mix(m->o.seed, (uint64_t)c), (uint64_t)r);
    lo.epoch_offset = 0;
    lo.indices = idx, lo.num_indices = cnt;
    int64_t examples = 0;
    double loss = 0;
    const float *global = otter_fl_aggregator_global(m->agg, NULL);
    otter_status st = otter_fl_train_local(s, global, m->n, m->ds, &lo, NULL, &examples, &loss);
    if (st == OTTER_OK) {
        char who[32];
        snprintf(who, sizeof who, "client %d", c);
        size_t n_slab = 0;
        const float *w = otter_training_trainable_slab(s, &n_slab);
        otter_fl_update u = {
            .params = w, .n = n_slab, .num_examples = examples, .has_loss = true, .loss = loss, .client = who};
        st = otter_fl_aggregator_add_update(m->agg, &u);
    }
    if (st != OTTER_OK) ot_error_context(st, "round %lld, client %d: ", (long long)r, c);
    otter_training_session_free(s);
    return st;
}

/* One round: pick, train, aggregate, evaluate, report. *go becomes false when the callback stops the run. */
static otter_status sim_round(sim *m, int64_t r, bool *go) {
    double t0 = ot_now_seconds();
    size_t k = otter_fl_sample_clients((size_t)m->o.num_clients, m->o.fraction, m->o.seed, r, m->picked);
    OT_TRY(otter_fl_aggregator_begin_round(m->agg));
    for (size_t i = 0; i < k; i++) OT_TRY(client_round(m, r, (int)m->picked[i]));
    otter_fl_round_summary sum;
    OT_TRY(otter_fl_aggregator_finish_round(m->agg, &sum));
    otter_fl_sim_report rep = {.round = r,
                               .rounds = m->o.rounds,
                               .n = m->n,
                               .clients = sum.num_updates,
                               .num_examples = sum.num_examples,
                               .train_loss = sum.mean_loss,
                               .global = otter_fl_aggregator_global(m->agg, NULL)};
    rep.has_eval = m->o.eval_data && (r % m->o.eval_every == 0 || r == m->o.rounds);
    if (rep.has_eval) {
        OT_TRY(otter_training_copy_buffer_to_params(m->global, rep.global, m->n, true));
        OT_TRY(otter_training_evaluate(m->global, m->o.eval_data, m->o.eval_batch_size, &rep.eval));
    }
    double now = ot_now_seconds();
    rep.seconds = now - t0, rep.total_seconds = now - m->t_start;
    *go = !m->o.on_round || m->o.on_round(&rep, m->o.user);
    return OTTER_OK;
}

/* Defaults, artifacts, partition, aggregator; then the plan's report (round 0). */
static otter_status sim_setup(sim *m, const char *dir, const otter_fl_sim_options *opts, bool *go) {
    if (opts) m->o = *opts;
    otter_fl_sim_options *o = &m->o;
    if (o->num_clients <= 0) o->num_clients = 100;
    if (o->fraction <= 0) o->fraction = 0.1;
    if (o->fraction > 1) return ot_error(OTTER_ERR_ARGUMENT, "fraction %g is not in (0, 1]", o->fraction);
    if (o->rounds <= 0) o->rounds = 10;
    if (o->eval_every <= 0) o->eval_every = 1;
    if (o->eval_batch_size <= 0) o->eval_batch_size = 500;
    m->arts.n_threads = o->n_threads;
    OT_TRY(artifacts_read(dir, &m->arts));
    OT_TRY(session_new(&m->arts, &m->global));
    if (o->eval_data && !otter_training_has_eval(m->global))
        return ot_error(OTTER_ERR_INVALID, "evaluation asked for but '%s' has no eval model", dir);
    otter_partition_options po = o->partition;
    po.num_clients = o->num_clients, po.seed = o->seed;
    OT_TRY(otter_dataset_partition(&m->part, m->ds, &po));
    const float *slab = otter_training_trainable_slab(m->global, &m->n);
    otter_fl_strategy fedavg = otter_fl_strategy_default(OTTER_FL_FEDAVG);
    OT_TRY(otter_fl_layout_from_session(&m->layout, m->global));
    OT_TRY(otter_fl_aggregator_create(&m->agg, m->layout, slab, m->n, o->strategy ? o->strategy : &fedavg));
    if (!(m->picked = ot_calloc((size_t)o->num_clients, sizeof *m->picked))) return OT_NOMEM();
    otter_fl_sim_report plan = {.rounds = o->rounds, .n = m->n, .min_client_samples = INT64_MAX};
    plan.clients_per_round = otter_fl_sample_clients((size_t)o->num_clients, o->fraction, 0, 0, m->picked);
    for (int c = 0; c < o->num_clients; c++) {
        int64_t cnt;
        otter_partition_client(m->part, c, &cnt);
        if (cnt < plan.min_client_samples) plan.min_client_samples = cnt;
        if (cnt > plan.max_client_samples) plan.max_client_samples = cnt;
    }
    *go = !o->on_round || o->on_round(&plan, o->user);
    return OTTER_OK;
}

otter_status otter_fl_simulate(const char *artifacts_dir, const otter_dataset *ds, const otter_fl_sim_options *opts,
                               otter_training_session **global, otter_fl_sim_result *result) {
    if (!artifacts_dir || !ds) return ot_error(OTTER_ERR_ARGUMENT, "otter_fl_simulate: NULL artifacts or dataset");
    sim m = {.ds = ds, .t_start = ot_now_seconds()};
    bool go = true;
    otter_status st = sim_setup(&m, artifacts_dir, opts, &go);
    for (int64_t r = 1; st == OTTER_OK && go && r <= m.o.rounds; r++) st = sim_round(&m, r, &go);
    if (st == OTTER_OK) {
        const float *g = otter_fl_aggregator_global(m.agg, NULL);
        st = otter_training_copy_buffer_to_params(m.global, g, m.n, true);
    }
    if (result)
        *result = (otter_fl_sim_result){.rounds = m.agg ? otter_fl_aggregator_round(m.agg) : 0,
                                        .stopped = !go,
                                        .seconds = ot_now_seconds() - m.t_start,
                                        .session_seconds = m.session_seconds};
    if (st == OTTER_OK && global) *global = m.global, m.global = NULL;
    ot_free(m.picked);
    otter_fl_aggregator_free(m.agg);
    otter_fl_layout_free(m.layout);
    otter_partition_free(m.part);
    otter_training_session_free(m.global);
    artifacts_free(&m.arts);
    return st;
}
