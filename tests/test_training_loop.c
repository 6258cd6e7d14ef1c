/* The library's training loop (otter_training_run) and FL simulation (otter_fl_simulate) through the C API,
 * on a tiny model (8 -> 16 -> ReLU -> 4, CrossEntropyLoss, SGD, 'output' as an additional output) and a
 * synthetic 4-class dataset of 96 samples (class centers plus LCG noise):
 *   - 6 epochs of batch 16: the events come in the right numbers, the epoch loss falls, the task is learned;
 *   - a stop from the callback inside epoch 2 saves the position; resuming from that checkpoint ends on the
 *     same weights as the uninterrupted run, bit for bit;
 *   - gradient accumulation: 4 batches of 8 at lr/4 equal one batch of 32 at lr (SGD, mean loss), within a
 *     bound derived from float32 rounding of the gradient sums;
 *   - checkpoints every N steps and every M epochs land when they should; a best checkpoint is written; a
 *     non-finite loss stops the run naming epoch and batch;
 *   - FedAvg of 3 clients, all picked, one full local batch each, equals full-batch SGD on the union;
 *     the round callback can stop the simulation. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "testutil.h"

#define N_SAMPLES 96
#define N_FEAT    8
#define N_CLASS   4

static char g_art[512]; /* artifacts folder */

static otter_status write_artifacts(void) {
    otter_model *m = NULL;
    otter_builder *b = NULL;
    otter_status st = otter_model_create(&m, "tiny", 14);
    if (st == OTTER_OK) st = otter_builder_create(&b, m, 3);
    if (st == OTTER_OK) {
        int64_t dims[2] = {-1, N_FEAT};
        const char *x = otter_block_input(b, "input", OTTER_DTYPE_FLOAT, 2, dims);
        const char *h = otter_block_relu(b, otter_block_linear(b, "fc1", x, N_FEAT, 16));
        otter_block_output(b, otter_block_linear(b, "fc2", h, 16, N_CLASS), "output");
        st = otter_builder_finish(b);
    }
    const char *extra[1] = {"output"};
    otter_artifacts_options o = {.loss = OTTER_LOSS_CROSS_ENTROPY,
                                 .optimizer = OTTER_OPTIM_SGD,
                                 .n_additional_outputs = 1,
                                 .additional_outputs = extra};
    otter_artifacts a = {0};
    if (st == OTTER_OK) st = otter_artifacts_build(&a, m, &o);
    snprintf(g_art, sizeof g_art, "%s", tu_tmp_path("loop_artifacts"));
    if (st == OTTER_OK) st = otter_artifacts_write(&a, g_art, &o);
    otter_artifacts_free(&a);
    otter_model_free(m);
    return st;
}

/* Samples of class i % 4 around center c_i (coordinates +-2) with uniform noise in [-1.5, 1.5). */
static otter_dataset *make_dataset(unsigned seed) {
    int64_t dx[2] = {N_SAMPLES, N_FEAT}, dy[1] = {N_SAMPLES};
    otter_tensor *x = NULL, *y = NULL;
    otter_dataset *ds = NULL;
    CHECK_OK(otter_tensor_create(&x, "x", OTTER_DTYPE_FLOAT, 2, dx));
    CHECK_OK(otter_tensor_create(&y, "y", OTTER_DTYPE_INT64, 1, dy));
    if (!x || !y) return NULL;
    unsigned long long s = seed;
    float *xf = x->data;
    int64_t *yl = y->data;
    for (int i = 0; i < N_SAMPLES; i++) {
        yl[i] = i % N_CLASS;
        for (int j = 0; j < N_FEAT; j++) {
            s = (s * 6364136223846793005ull + 1442695040888963407ull);
            double noise = 3.0 * ((double)(s >> 11) / 9007199254740992.0) - 1.5;
            double center = ((j % N_CLASS) == yl[i]) ? 2.0 : -(double)((j + (int)yl[i]) % 3) * 0.7;
            xf[i * N_FEAT + j] = (float)(center + noise);
        }
    }
    CHECK_OK(otter_dataset_from_tensors(&ds, x, y, NULL));
    otter_tensor_free(x), otter_tensor_free(y);
    return ds;
}

static otter_training_session *open_session(const char *ckpt) {
    otter_training_session *s = NULL;
    CHECK_OK(otter_training_session_create_from_dir(&s, g_art, NULL, ckpt, &(otter_training_options){.n_threads = 1}));
    return s;
}

static float *params_of(otter_training_session *s, size_t *n) {
    *n = otter_training_params_size(s, true);
    float *p = malloc(*n * sizeof *p);
    if (p) CHECK_OK(otter_training_copy_params_to_buffer(s, p, *n, true));
    return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= w)) w = isnan(d) ? INFINITY : d;
    }
    return w;
}

static double max_abs(const float *a, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i]));
    return w;
}

/* ---- events, loss, learning ---------------------------------------------------------------------- */

typedef struct counts {
    int begin, step, epoch_end, stopped;
    double first_loss, last_loss, last_acc;
    int64_t stop_at; /* > 0: return false at this global step */
} counts;

static bool count_events(const otter_train_progress *p, void *user) {
    counts *c = user;
    if (p->event == OTTER_TRAIN_BEGIN) c->begin++;
    if (p->event == OTTER_TRAIN_STEP) c->step++;
    if (p->event == OTTER_TRAIN_STOPPED) c->stopped++;
    if (p->event == OTTER_TRAIN_EPOCH_END) {
        if (c->epoch_end++ == 0) c->first_loss = p->loss;
        c->last_loss = p->loss;
        c->last_acc = p->has_eval && p->eval.has_accuracy ? p->eval.accuracy : -1;
    }
    return !(p->event == OTTER_TRAIN_STEP && c->stop_at > 0 && p->global_step == c->stop_at);
}

static void test_learns(const otter_dataset *ds, const otter_dataset *eval) {
    otter_training_session *s = open_session(NULL);
    if (!s) return;
    counts c = {0};
    otter_train_options o = {.batch_size = 16,
                             .epochs = 6,
                             .seed = 5,
                             .set_lr = true,
                             .lr = 0.1f,
                             .eval_data = eval,
                             .best_checkpoint = tu_tmp_path("loop_best.ckpt"),
                             .on_progress = count_events,
                             .user = &c};
    remove(o.best_checkpoint);
    otter_train_result r;
    CHECK_OK(otter_training_run(s, ds, &o, &r));
    printf("6 epochs x 6 batches: events begin %d, step %d, epoch_end %d, stopped %d; epoch loss %.4f -> %.4f, "
           "eval accuracy %.3f\n",
           c.begin, c.step, c.epoch_end, c.stopped, c.first_loss, c.last_loss, c.last_acc);
    CHECK(c.begin == 1 && c.step == 36 && c.epoch_end == 6 && c.stopped == 0);
    CHECK(r.steps == 36 && r.samples == 6 * N_SAMPLES && r.samples_per_epoch == N_SAMPLES && !r.stopped);
    CHECK(otter_training_step_count(s) == 36);
    CHECK(c.last_loss < 0.5 * c.first_loss);
    CHECK(c.last_acc > 0.9);
    size_t n = 0;
    void *best = tu_read_file(o.best_checkpoint, &n);
    CHECK(best != NULL && n > 0);
    free(best);
    otter_training_session_free(s);
}

/* ---- stop, checkpoint, resume ---------------------------------------------------------------------- */

static void test_stop_and_resume(const otter_dataset *ds) {
    const char *ck = tu_tmp_path("loop_stop.ckpt");
    otter_training_session *full = open_session(NULL), *part = open_session(NULL);
    if (!full || !part) return;
    otter_train_options o = {.batch_size = 16, .epochs = 2, .seed = 9, .set_lr = true, .lr = 0.05f};
    CHECK_OK(otter_training_run(full, ds, &o, NULL));
    counts c = {.stop_at = 8};
    otter_train_options op = o;
    op.checkpoint = ck, op.on_progress = count_events, op.user = &c;
    otter_train_result r;
    CHECK_OK(otter_training_run(part, ds, &op, &r));
    printf("stopped by the callback at global step %lld: epoch %lld, batch %lld, STOPPED events %d\n",
           (long long)r.steps, (long long)r.epoch, (long long)r.batch, c.stopped);
    CHECK(r.stopped && r.steps == 8 && r.epoch == 1 && r.batch == 2 && c.stopped == 1);
    otter_training_session_free(part);

    otter_training_session *res = open_session(ck);
    if (!res) return;
    otter_train_position pos;
    CHECK_OK(otter_training_get_position(res, &pos));
    CHECK(pos.epoch == 1 && pos.batch == 2 && pos.global_step == 8 && pos.has_seed && pos.seed == 9 &&
          pos.batch_size == 16);
    otter_train_options orr = o;
    orr.resume = true;
    CHECK_OK(otter_training_run(res, ds, &orr, &r));
    size_t na = 0, nb = 0;
    float *a = params_of(full, &na), *b = params_of(res, &nb);
    double d = a && b && na == nb ? max_abs_diff(a, b, na) : INFINITY;
    printf("resumed for %lld steps from step %lld: max |uninterrupted - resumed| = %g over %zu weights\n",
           (long long)r.steps, (long long)r.start_step, d, na);
    CHECK(r.start_step == 8 && r.steps == 4 && d == 0);
    orr.batch_size = 32; /* another batch size can't follow the interrupted run */
    CHECK_STATUS(otter_training_run(res, ds, &orr, NULL), OTTER_ERR_INVALID);
    free(a), free(b);
    otter_training_session_free(res);
    otter_training_session_free(full);
}

/* ---- checkpoint policy ------------------------------------------------------------------------------ */

typedef struct peek {
    const char *ck;
    int64_t saved_at[20]; /* saved_at[g]: the checkpoint file's global step seen after step g */
} peek;

static bool peek_checkpoint(const otter_train_progress *p, void *user) {
    peek *k = user;
    if (p->event != OTTER_TRAIN_STEP || p->global_step >= 20) return true;
    otter_training_session *s = NULL;
    otter_train_position pos;
    k->saved_at[p->global_step] = -1;
    if (otter_training_session_create_from_dir(&s, g_art, NULL, k->ck, NULL) == OTTER_OK &&
        otter_training_get_position(s, &pos) == OTTER_OK)
        k->saved_at[p->global_step] = pos.global_step;
    otter_training_session_free(s);
    return true;
}

static void test_checkpoint_policy(const otter_dataset *ds) {
    otter_training_session *s = open_session(NULL);
    if (!s) return;
    peek k = {.ck = tu_tmp_path("loop_policy.ckpt")};
    remove(k.ck);
    otter_train_options o = {.batch_size = 16,
                             .epochs = 3,
                             .checkpoint = k.ck,
                             .save_every_steps = 4,
                             .save_every_epochs = 2,
                             .on_progress = peek_checkpoint,
                             .user = &k};
    CHECK_OK(otter_training_run(s, ds, &o, NULL));
    otter_training_session *last = open_session(k.ck);
    otter_train_position pos = {0};
    if (last) CHECK_OK(otter_training_get_position(last, &pos));
    printf("every 4 steps and 2 epochs (6 steps each): the file holds step %lld after step 3, %lld after 5, %lld "
           "after 7 (epoch 1 not saved), %lld after 13 (epoch 2 saved), %lld at the end\n",
           (long long)k.saved_at[3], (long long)k.saved_at[5], (long long)k.saved_at[7], (long long)k.saved_at[13],
           (long long)pos.global_step);
    CHECK(k.saved_at[3] == -1 && k.saved_at[5] == 4 && k.saved_at[7] == 4 && k.saved_at[13] == 12);
    CHECK(pos.global_step == 18 && pos.epoch == 3 && pos.batch == 0);
    otter_training_session_free(last);
    otter_training_session_free(s);
}

/* ---- gradient accumulation --------------------------------------------------------------------------- */

static void test_grad_accum(const otter_dataset *ds) {
    otter_training_session *one = open_session(NULL), *acc = open_session(NULL);
    if (!one || !acc) return;
    size_t n = 0;
    float *w0 = params_of(one, &n);
    const float lr = 0.2f;
    otter_train_options o1 = {.batch_size = 32, .max_steps = 1, .keep_order = true, .set_lr = true, .lr = lr};
    otter_train_options o4 = {
        .batch_size = 8, .max_steps = 4, .grad_accum = 4, .keep_order = true, .set_lr = true, .lr = lr / 4};
    CHECK_OK(otter_training_run(one, ds, &o1, NULL));
    CHECK_OK(otter_training_run(acc, ds, &o4, NULL));
    size_t n1, n4;
    float *w1 = params_of(one, &n1), *w4 = params_of(acc, &n4);
    if (w0 && w1 && w4 && n1 == n && n4 == n) {
        /* The mean loss over 32 samples has the gradient of the four means over 8 divided by 4; the two runs
         * differ only in float32 rounding: each gradient element is a sum over 32 samples (relative error up to
         * ~32 eps of the update), and the weight update itself rounds once (eps/2 of |w|). */
        float *u = malloc(n * sizeof *u);
        for (size_t i = 0; u && i < n; i++) u[i] = w1[i] - w0[i];
        double d = max_abs_diff(w1, w4, n), upd = u ? max_abs(u, n) : 0;
        double bound = 32 * FLT_EPSILON * upd + FLT_EPSILON * max_abs(w1, n);
        printf("grad accumulation: 4 x batch 8 at lr/4 vs batch 32 at lr: max |diff| %.3g (bound %.3g, update %.3g), "
               "optimizer steps %lld and %lld\n",
               d, bound, upd, (long long)otter_training_step_count(one), (long long)otter_training_step_count(acc));
        CHECK(upd > 1e-3 && d <= bound);
        free(u);
    } else {
        CHECK(!"parameters");
    }
    CHECK(otter_training_step_count(one) == 1 && otter_training_step_count(acc) == 1);
    free(w0), free(w1), free(w4);
    otter_training_session_free(one);
    otter_training_session_free(acc);
}

static void test_nan_loss(const otter_dataset *ds) {
    otter_training_session *s = open_session(NULL);
    if (!s) return;
    otter_train_options o = {.batch_size = 16, .epochs = 3, .set_lr = true, .lr = 1e30f};
    otter_status st = otter_training_run(s, ds, &o, NULL);
    printf("lr 1e30: %s: %s\n", otter_status_name(st), otter_last_error());
    CHECK(st == OTTER_ERR_INVALID && strstr(otter_last_error(), "loss") && strstr(otter_last_error(), "batch"));
    otter_training_session_free(s);
}

/* ---- federated simulation ---------------------------------------------------------------------------- */

typedef struct sim_counts {
    int reports, evals;
    int64_t stop_round;
} sim_counts;

static bool on_round(const otter_fl_sim_report *r, void *user) {
    sim_counts *c = user;
    c->reports++;
    c->evals += r->has_eval;
    return !(c->stop_round > 0 && r->round == c->stop_round);
}

static void test_fl_simulate(const otter_dataset *ds, const otter_dataset *eval) {
    const int rounds = 3;
    const float lr = 0.1f;
    sim_counts c = {0};
    otter_fl_sim_options so = {.num_clients = 3,
                               .fraction = 1,
                               .rounds = rounds,
                               .seed = 4,
                               .partition = {.kind = OTTER_PARTITION_DIRICHLET, .alpha = 0.5},
                               .local = {.epochs = 1, .batch_size = N_SAMPLES, .set_lr = true, .lr = lr},
                               .eval_data = eval,
                               .n_threads = 1,
                               .on_round = on_round,
                               .user = &c};
    otter_training_session *g = NULL, *central = open_session(NULL);
    otter_fl_sim_result res;
    CHECK_OK(otter_fl_simulate(g_art, ds, &so, &g, &res));
    CHECK(g && res.rounds == rounds && !res.stopped && c.reports == rounds + 1 && c.evals == rounds);
    /* FedAvg weighted by examples, one full-batch step per client: sum_i n_i (w - lr g_i) / n = w - lr g. */
    otter_train_options o = {.batch_size = N_SAMPLES, .epochs = rounds, .keep_order = true, .set_lr = true, .lr = lr};
    if (central) CHECK_OK(otter_training_run(central, ds, &o, NULL));
    size_t ng = 0, nc = 0, n0 = 0;
    otter_training_session *init = open_session(NULL);
    float *wg = g ? params_of(g, &ng) : NULL, *wc = central ? params_of(central, &nc) : NULL,
          *w0 = init ? params_of(init, &n0) : NULL;
    if (wg && wc && w0 && ng == nc && nc == n0) {
        for (size_t i = 0; i < n0; i++) w0[i] = wc[i] - w0[i];
        /* Per round the two differ by float32 rounding of sums over 96 samples (the clients' gradients and
         * the weighted average): 96 eps of the update plus one rounding of w, over 3 rounds. */
        double d = max_abs_diff(wg, wc, ng), upd = max_abs(w0, n0);
        double bound = rounds * (N_SAMPLES * FLT_EPSILON * upd + FLT_EPSILON * max_abs(wc, nc));
        printf("FedAvg of 3 clients (full local batches) vs full-batch SGD, %d rounds: max |diff| %.3g (bound %.3g, "
               "update %.3g)\n",
               rounds, d, bound, upd);
        CHECK(upd > 1e-3 && d <= bound);
    } else {
        CHECK(!"parameters");
    }
    free(wg), free(wc), free(w0);
    otter_training_session_free(init);
    otter_training_session_free(central);
    otter_training_session_free(g);

    sim_counts stop = {.stop_round = 2};
    so.user = &stop, so.rounds = 5;
    CHECK_OK(otter_fl_simulate(g_art, ds, &so, NULL, &res));
    printf("stopped by the round callback: %lld rounds, stopped %d\n", (long long)res.rounds, res.stopped);
    CHECK(res.rounds == 2 && res.stopped && stop.reports == 3);
    CHECK_STATUS(otter_fl_simulate(tu_tmp_path("no_such_artifacts"), ds, &so, NULL, NULL), OTTER_ERR_NOT_FOUND);
}

int main(void) {
    CHECK_OK(write_artifacts());
    otter_dataset *ds = make_dataset(1), *eval = make_dataset(2);
    if (ds && eval) {
        test_learns(ds, eval);
        test_stop_and_resume(ds);
        test_checkpoint_policy(ds);
        test_grad_accum(ds);
        test_nan_loss(ds);
        test_fl_simulate(ds, eval);
    }
    otter_dataset_free(ds);
    otter_dataset_free(eval);
    return tu_finish("test_training_loop");
}
