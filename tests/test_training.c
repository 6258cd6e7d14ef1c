/* Training session API on the ORT-made fixture (tests/data/ort-flat-mnist) and on artifacts otter builds in
 * memory: input classification and buffer layout (199,210 trainable floats in shapes.json order), gradient
 * accumulation and lazy reset, AdamW and SGD steps against a double-precision reference of ORT's formulas,
 * schedules, save/resume giving the same trajectory, nominal checkpoints, mixed artifacts refused, export,
 * seeded Dropout masks in a training model the runtime fuses. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "otter/otter.h"
#include "testutil.h"

#define FIX OTTER_SOURCE_DIR "/tests/data/ort-flat-mnist"
#define B   64

/* The batch test_checkpoint_ort.py feeds ORT: inputs from an LCG in [0, 1), labels i % 10. */
static void make_batch(otter_tensor **x, otter_tensor **y, unsigned seed) {
    int64_t dx[2] = {B, 784}, dy[1] = {B};
    otter_tensor_create(x, "input", OTTER_DTYPE_FLOAT, 2, dx);
    otter_tensor_create(y, "labels", OTTER_DTYPE_INT64, 1, dy);
    float *xf = (*x)->data;
    int64_t *yl = (*y)->data;
    unsigned long long s = seed;
    for (int i = 0; i < B * 784; i++) {
        s = (s * 1103515245ull + 12345ull) % 2147483648ull;
        xf[i] = (float)((double)s / 2147483648.0);
    }
    for (int i = 0; i < B; i++) yl[i] = (i + (int)seed) % 10;
}

static float train_loss(otter_training_session *s, otter_tensor *x, otter_tensor *y) {
    const otter_tensor *in[2] = {x, y};
    otter_tensor *loss = NULL;
    CHECK_OK(otter_training_train_step(s, 2, NULL, in, 1, &loss));
    if (!loss) return NAN;
    float v = ((float *)loss->data)[0];
    otter_tensor_free(loss);
    return v;
}

static otter_training_session *open_fixture_threads(int threads) {
    otter_training_session *s = NULL;
    CHECK_OK(
        otter_training_session_create_from_dir(&s, FIX, NULL, NULL, &(otter_training_options){.n_threads = threads}));
    return s;
}

static otter_training_session *open_fixture(void) { return open_fixture_threads(1); }

static double max_rel(const float *a, const float *b, size_t n, double floor_) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        w = tu_worse(w, fabs((double)a[i] - (double)b[i]) / fmax(fabs((double)b[i]), floor_));
    }
    return w;
}

static void test_layout(void) {
    otter_training_session *s = open_fixture();
    if (!s) return;
    CHECK(otter_training_input_count(s, OTTER_TRAINING_GRAPH) == 2);
    CHECK(strcmp(otter_training_input_name(s, OTTER_TRAINING_GRAPH, 0), "input") == 0);
    CHECK(strcmp(otter_training_input_name(s, OTTER_TRAINING_GRAPH, 1), "labels") == 0);
    CHECK(otter_training_output_count(s, OTTER_TRAINING_GRAPH) == 2);
    CHECK(strcmp(otter_training_output_name(s, OTTER_TRAINING_GRAPH, 0), "onnx::loss::2") == 0);
    CHECK(otter_training_input_count(s, OTTER_EVAL_GRAPH) == 2);
    CHECK(otter_training_has_eval(s) && otter_training_has_optimizer(s));
    size_t n = otter_training_params_size(s, true);
    CHECK(n == 199210);
    CHECK(otter_training_params_size(s, false) == 199210);
    /* shapes.json order: fc1.weight, fc1.bias, fc2.weight, fc2.bias, fc3.weight, fc3.bias */
    const char *order[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"};
    size_t sizes[] = {156800, 200, 40000, 200, 2000, 10}, off = 0;
    CHECK(otter_training_param_count(s) == 6);
    for (int i = 0; i < 6; i++) {
        otter_param_info info;
        CHECK_OK(otter_training_describe_param(s, order[i], &info));
        CHECK(strcmp(otter_training_param_name(s, (size_t)i), order[i]) == 0);
        CHECK(info.offset_trainable == off && info.offset_all == off && info.trainable);
        /* the buffer holds the checkpoint's values at that offset */
        otter_tensor *t = NULL;
        CHECK_OK(otter_training_get_param(s, order[i], &t));
        float *buf = malloc(n * sizeof(float));
        CHECK_OK(otter_training_copy_params_to_buffer(s, buf, n, true));
        CHECK(t && (size_t)otter_tensor_numel(t) == sizes[i] && memcmp(buf + off, t->data, sizes[i] * 4) == 0);
        free(buf);
        otter_tensor_free(t);
        off += sizes[i];
    }
    otter_param_info info;
    CHECK_STATUS(otter_training_describe_param(s, "fc9.weight", &info), OTTER_ERR_NOT_FOUND);
    CHECK(strstr(otter_last_error(), "fc9.weight") != NULL);
    float *small = calloc(10, sizeof(float));
    CHECK_STATUS(otter_training_copy_params_to_buffer(s, small, 10, true), OTTER_ERR_ARGUMENT);
    free(small);
    printf("layout: %zu trainable floats in shapes.json order\n", n);
    otter_training_session_free(s);
}

/* options.profile: every node of the train step timed once a step, the eval model's apart; none without. */
static void test_profile(void) {
    otter_training_session *s = NULL, *plain = open_fixture();
    CHECK_OK(otter_training_session_create_from_dir(&s, FIX, NULL, NULL,
                                                    &(otter_training_options){.n_threads = 1, .profile = true}));
    if (!s || !plain) return;
    otter_tensor *x, *y;
    make_batch(&x, &y, 4242);
    CHECK(otter_training_profile(s, OTTER_TRAINING_GRAPH, NULL, 0) == 0); /* nothing has run */
    for (int i = 0; i < 3; i++) train_loss(s, x, y), train_loss(plain, x, y);
    const size_t n = otter_training_profile(s, OTTER_TRAINING_GRAPH, NULL, 0);
    otter_node_profile *p = calloc(n + 1, sizeof *p);
    CHECK(n > 10 && p && otter_training_profile(s, OTTER_TRAINING_GRAPH, p, n) == n);
    bool calls = true, gemm = false;
    double total = 0;
    for (size_t i = 0; p && i < n; i++) {
        calls = calls && p[i].calls == 3 && p[i].total_ms >= 0;
        gemm = gemm || strstr(p[i].op_type, "Gemm") != NULL;
        total += p[i].total_ms;
    }
    CHECK(calls && gemm && total > 0);
    CHECK(otter_training_profile(s, OTTER_EVAL_GRAPH, NULL, 0) == 0); /* no eval step yet */
    const otter_tensor *in[2] = {x, y};
    otter_tensor *loss = NULL;
    CHECK_OK(otter_training_eval_step(s, 2, NULL, in, 1, &loss));
    otter_tensor_free(loss);
    CHECK(otter_training_profile(s, OTTER_EVAL_GRAPH, NULL, 0) > 0);
    CHECK(otter_training_profile(plain, OTTER_TRAINING_GRAPH, NULL, 0) == 0);
    CHECK(otter_training_profile(NULL, OTTER_TRAINING_GRAPH, NULL, 0) == 0);
    printf("profile: %zu nodes timed 3 times, %.3f ms a step\n", n, total / 3);
    free(p);
    otter_tensor_free(x), otter_tensor_free(y);
    otter_training_session_free(s);
    otter_training_session_free(plain);
}

/* Gradients: first step overwrites, later steps add, lazy reset overwrites again. */
static void test_accumulation(void) {
    otter_training_session *s = open_fixture();
    if (!s) return;
    otter_tensor *x, *y, *x2, *y2;
    make_batch(&x, &y, 12345);
    make_batch(&x2, &y2, 777);
    size_t n;
    const float *g = otter_training_grad_slab(s, &n);
    float *g1 = malloc(n * 4), *g2 = malloc(n * 4);
    train_loss(s, x, y);
    memcpy(g1, g, n * 4);
    train_loss(s, x2, y2);
    memcpy(g2, g, n * 4); /* g(x) + g(x2) */
    CHECK_OK(otter_training_lazy_reset_grad(s));
    train_loss(s, x2, y2); /* overwrite: g(x2) */
    double worst = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double want = (double)g1[i] + (double)g[i];
        worst = tu_worse(worst, fabs(want - g2[i]));
        norm = tu_worse(norm, fabs(g1[i]));
    }
    CHECK(norm > 0 && worst < 1e-6);
    train_loss(s, x2, y2); /* accumulates: 2 g(x2) */
    double w2 = 0;
    for (size_t i = 0; i < n; i++) w2 = tu_worse(w2, fabs(2.0 * (g2[i] - g1[i]) - g[i]));
    CHECK(w2 < 1e-6);
    printf("accumulation: |g1+g2 - acc| max %.3g, |2 g2 - acc| max %.3g (grad max %.3g)\n", worst, w2, norm);
    free(g1);
    free(g2);
    otter_tensor_free(x), otter_tensor_free(y), otter_tensor_free(x2), otter_tensor_free(y2);
    otter_training_session_free(s);
}

/* AdamW (fixture: alpha 0.9, beta 0.999, eps 1e-6, wd 0, correct_bias, mode 1) against double math;
 * with 3 threads the update runs in chunks split over them. */
static void test_adamw(int threads) {
    otter_training_session *s = open_fixture_threads(threads);
    if (!s) return;
    otter_tensor *x, *y;
    make_batch(&x, &y, 12345);
    size_t n;
    float *w = otter_training_trainable_slab(s, &n);
    const float *g = otter_training_grad_slab(s, NULL);
    double *rw = malloc(n * sizeof(double)), *rm = calloc(n, sizeof(double)), *rv = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) rw[i] = w[i];
    CHECK(fabsf(otter_training_get_lr(s) - 0.001f) < 1e-9f);
    double worst = 0;
    for (int t = 1; t <= 3; t++) {
        train_loss(s, x, y);
        double a = 0.9, b = 0.999, eps = 1e-6, lr = 0.001;
        double step = lr * sqrt(1 - pow(b, t)) / (1 - pow(a, t));
        for (size_t i = 0; i < n; i++) {
            rm[i] = a * rm[i] + (1 - a) * g[i];
            rv[i] = b * rv[i] + (1 - b) * (double)g[i] * g[i];
        }
        CHECK_OK(otter_training_optimizer_step(s));
        CHECK_OK(otter_training_lazy_reset_grad(s));
        for (size_t i = 0; i < n; i++) {
            rw[i] -= step * rm[i] / (sqrt(rv[i]) + eps);
            worst = tu_worse(worst, fabs(rw[i] - w[i]));
            rw[i] = w[i]; /* follow otter's weights so the next gradient is the same input */
        }
    }
    CHECK(otter_training_step_count(s) == 3);
    CHECK(worst < 1e-7);
    printf("AdamW mode 1, %d thread(s): 3 steps, max |w - reference| %.3g\n", threads, worst);
    free(rw), free(rm), free(rv);
    otter_tensor_free(x), otter_tensor_free(y);
    otter_training_session_free(s);
}

static void test_schedules(void) {
    otter_lr_schedule lin = {.kind = OTTER_LR_LINEAR, .initial_lr = 0.1f, .warmup_steps = 10, .total_steps = 110};
    CHECK(otter_lr_schedule_at(&lin, 0) == 0.0f);
    CHECK(fabsf(otter_lr_schedule_at(&lin, 5) - 0.05f) < 1e-7f);
    CHECK(fabsf(otter_lr_schedule_at(&lin, 10) - 0.1f) < 1e-7f);
    CHECK(fabsf(otter_lr_schedule_at(&lin, 60) - 0.05f) < 1e-7f);
    CHECK(otter_lr_schedule_at(&lin, 110) == 0.0f && otter_lr_schedule_at(&lin, 500) == 0.0f);
    otter_lr_schedule cosv = {.kind = OTTER_LR_COSINE, .initial_lr = 1.0f, .total_steps = 100, .min_lr = 0.1f};
    CHECK(fabsf(otter_lr_schedule_at(&cosv, 0) - 1.0f) < 1e-6f);
    CHECK(fabsf(otter_lr_schedule_at(&cosv, 50) - 0.55f) < 1e-6f);
    CHECK(fabsf(otter_lr_schedule_at(&cosv, 100) - 0.1f) < 1e-6f);
    otter_lr_schedule stp = {.kind = OTTER_LR_STEP, .initial_lr = 1.0f, .step_size = 10, .gamma = 0.5f};
    CHECK(otter_lr_schedule_at(&stp, 9) == 1.0f && otter_lr_schedule_at(&stp, 10) == 0.5f &&
          otter_lr_schedule_at(&stp, 25) == 0.25f);

    otter_training_session *s = open_fixture();
    if (!s) return;
    CHECK_OK(otter_training_set_schedule(s, &lin));
    CHECK(otter_training_get_lr(s) == 0.0f); /* factor at step 0 */
    otter_tensor *x, *y;
    make_batch(&x, &y, 1);
    for (int i = 0; i < 5; i++) {
        train_loss(s, x, y);
        CHECK_OK(otter_training_optimizer_step(s));
        CHECK_OK(otter_training_scheduler_step(s));
        CHECK_OK(otter_training_lazy_reset_grad(s));
    }
    CHECK(fabsf(otter_training_get_lr(s) - 0.05f) < 1e-7f);
    printf("schedules: linear/cosine/step values; after 5 optimizer + scheduler steps lr %.4g (want 0.05)\n",
           otter_training_get_lr(s));
    CHECK_STATUS(otter_training_set_lr(s, -1.0f), OTTER_ERR_ARGUMENT);
    CHECK_OK(otter_training_set_lr(s, 0.5f));
    CHECK(otter_training_get_lr(s) == 0.5f);
    otter_lr_schedule bad = {.kind = OTTER_LR_LINEAR, .initial_lr = 0.1f, .warmup_steps = 10, .total_steps = 5};
    CHECK_STATUS(otter_training_set_schedule(s, &bad), OTTER_ERR_ARGUMENT);
    otter_tensor_free(x), otter_tensor_free(y);
    otter_training_session_free(s);
}

/* Save after k steps, reload, continue: same losses as an uninterrupted run. */
static void test_resume(void) {
    otter_tensor *xs[6], *ys[6];
    for (int i = 0; i < 6; i++) make_batch(&xs[i], &ys[i], 100u + (unsigned)i);
    float full[6], resumed[6];
    otter_training_session *s = open_fixture();
    if (!s) return;
    const char *ck = tu_tmp_path("training_resume.ckpt");
    for (int i = 0; i < 6; i++) {
        full[i] = train_loss(s, xs[i], ys[i]);
        CHECK_OK(otter_training_optimizer_step(s));
        CHECK_OK(otter_training_lazy_reset_grad(s));
        if (i == 2) {
            CHECK_OK(otter_training_set_property_int(s, "epoch", 3));
            CHECK_OK(otter_training_set_property_float(s, "best", 0.25f));
            CHECK_OK(otter_training_set_property_string(s, "note", "resume test"));
            CHECK_OK(otter_training_save_checkpoint(s, ck, true));
        }
    }
    otter_training_session_free(s);
    s = NULL;
    CHECK_OK(otter_training_session_create_from_dir(&s, FIX, NULL, ck, &(otter_training_options){.n_threads = 1}));
    if (!s) return;
    CHECK(otter_training_step_count(s) == 3);
    const otter_property *p = NULL;
    CHECK_OK(otter_training_get_property(s, "epoch", &p));
    CHECK(p && p->type == OTTER_PROPERTY_INT && p->i == 3);
    CHECK_OK(otter_training_get_property(s, "note", &p));
    CHECK(p && p->type == OTTER_PROPERTY_STRING && strcmp(p->s, "resume test") == 0);
    CHECK_STATUS(otter_training_get_property(s, "nope", &p), OTTER_ERR_NOT_FOUND);
    double worst = 0;
    for (int i = 3; i < 6; i++) {
        resumed[i] = train_loss(s, xs[i], ys[i]);
        CHECK_OK(otter_training_optimizer_step(s));
        CHECK_OK(otter_training_lazy_reset_grad(s));
        worst = tu_worse(worst, fabs((double)resumed[i] - full[i]));
    }
    CHECK(worst == 0.0);
    printf("resume: losses of steps 4-6 after save/load equal the uninterrupted run (max diff %.3g; %.6f %.6f %.6f)\n",
           worst, resumed[3], resumed[4], resumed[5]);
    /* without optimizer state: momentums start over, the step too */
    CHECK_OK(otter_training_save_checkpoint(s, ck, false));
    otter_training_session_free(s);
    otter_checkpoint *c = NULL;
    CHECK_OK(otter_checkpoint_load(&c, ck));
    CHECK(c && otter_checkpoint_group_count(c) == 0);
    otter_checkpoint_free(c);
    for (int i = 0; i < 6; i++) otter_tensor_free(xs[i]), otter_tensor_free(ys[i]);
}

/* The session's checkpoint borrows the slabs (no second copy of the state), and a run's checkpoint path is
 * checked before training. */
static void test_checkpoint_state(void) {
    otter_training_session *s = open_fixture();
    if (!s) return;
    otter_tensor *x, *y;
    make_batch(&x, &y, 7);
    train_loss(s, x, y);
    CHECK_OK(otter_training_optimizer_step(s));
    const otter_checkpoint *c = NULL;
    CHECK_OK(otter_training_sync_checkpoint(s, &c));
    train_loss(s, x, y);
    CHECK_OK(otter_training_optimizer_step(s)); /* no sync: the checkpoint sees the slabs */
    const char *name = otter_training_param_name(s, 0);
    otter_tensor *live = NULL;
    const otter_tensor *held = NULL, *m = NULL;
    CHECK_OK(otter_training_get_param(s, name, &live));
    CHECK_OK(otter_checkpoint_get_param(c, name, &held, NULL));
    CHECK(live && held && otter_tensor_equal(live, held));
    CHECK_OK(otter_checkpoint_get_optimizer_state(c, "group0", name, "momentum1", &m));
    CHECK(m && m->data);
    printf("checkpoint state: parameter '%s' after an unsynced step %s the session's\n", name,
           live && held && otter_tensor_equal(live, held) ? "equals" : "DIFFERS FROM");
    CHECK_OK(otter_training_check_checkpoint(s, tu_tmp_path("training_check.ckpt"), true));
    CHECK_STATUS(otter_training_check_checkpoint(s, "/nonexistent-otter-folder/ckpt", true), OTTER_ERR_IO);
    CHECK(strstr(otter_last_error(), "/nonexistent-otter-folder") != NULL);
    printf("check before training: %s\n", otter_last_error());
    otter_tensor_free(live);
    otter_tensor_free(x);
    otter_tensor_free(y);
    otter_training_session_free(s);
}

/* A nominal checkpoint refuses to run until every parameter is set. */
static void test_nominal(void) {
    otter_checkpoint *c = NULL, *ref = NULL;
    CHECK_OK(otter_checkpoint_load(&c, FIX "/checkpoint"));
    CHECK_OK(otter_checkpoint_load(&ref, FIX "/checkpoint"));
    CHECK_OK(otter_checkpoint_set_nominal(c, true));
    otter_training_session *s = NULL, *r = NULL;
    CHECK_OK(otter_training_session_create(&s, c, FIX "/training_model.onnx", FIX "/eval_model.onnx",
                                           FIX "/optimizer_model.onnx", NULL));
    CHECK_OK(otter_training_session_create(&r, ref, FIX "/training_model.onnx", FIX "/eval_model.onnx",
                                           FIX "/optimizer_model.onnx", NULL));
    if (!s || !r) return;
    otter_tensor *x, *y;
    make_batch(&x, &y, 5);
    const otter_tensor *in[2] = {x, y};
    otter_tensor *out[1] = {NULL};
    CHECK_STATUS(otter_training_train_step(s, 2, NULL, in, 1, out), OTTER_ERR_INVALID);
    CHECK(strstr(otter_last_error(), "fc1.weight") && strstr(otter_last_error(), "nominal"));
    printf("nominal: %s\n", otter_last_error());
    CHECK_STATUS(otter_training_eval_step(s, 2, NULL, in, 1, out), OTTER_ERR_INVALID);
    size_t n = otter_training_params_size(r, false);
    float *buf = malloc(n * 4);
    CHECK_OK(otter_training_copy_params_to_buffer(r, buf, n, false));
    CHECK_OK(otter_training_copy_buffer_to_params(s, buf, n, true)); /* trainable only: still all set here */
    CHECK_OK(otter_training_copy_buffer_to_params(s, buf, n, false));
    float a = train_loss(s, x, y), b = train_loss(r, x, y);
    CHECK(a == b && !isnan(a));
    const otter_checkpoint *synced = NULL;
    CHECK_OK(otter_training_sync_checkpoint(s, &synced));
    CHECK(synced && !otter_checkpoint_is_nominal(synced));
    free(buf);
    otter_tensor_free(x), otter_tensor_free(y);
    otter_training_session_free(s);
    otter_training_session_free(r);
}

static otter_status build_artifacts(const char *which, otter_loss_kind loss, otter_optimizer_kind opt,
                                    otter_artifacts *a) {
    otter_model *m = NULL;
    otter_status st = strcmp(which, "mnist") == 0 ? otter_model_mnist_dnn(&m, 0) : otter_model_cifar10_cnn(&m, 0);
    if (st != OTTER_OK) return st;
    otter_artifacts_options o = {.loss = loss, .optimizer = opt};
    st = otter_artifacts_build(a, m, &o);
    otter_model_free(m);
    return st;
}

static otter_status session_from(otter_artifacts *a, otter_model *train, otter_model *eval, otter_checkpoint *ck,
                                 otter_training_session **s) {
    otter_model *t = NULL, *e = NULL, *o = NULL;
    otter_checkpoint *c = NULL;
    void *data = NULL;
    size_t size = 0;
    otter_model_clone(&t, train);
    if (eval) otter_model_clone(&e, eval);
    otter_model_clone(&o, a->optimizer);
    otter_checkpoint_save_to_memory(ck, NULL, &data, &size);
    otter_checkpoint_load_from_memory(&c, data, size);
    otter_free(data);
    otter_status st = otter_training_session_create_from_models(s, c, t, e, o, NULL);
    if (st != OTTER_OK) {
        otter_model_free(t), otter_model_free(e), otter_model_free(o);
        otter_checkpoint_free(c);
    }
    return st;
}

static void test_mixed(void) {
    otter_artifacts mn = {0}, cf = {0};
    CHECK_OK(build_artifacts("mnist", OTTER_LOSS_CROSS_ENTROPY, OTTER_OPTIM_ADAMW, &mn));
    CHECK_OK(build_artifacts("cifar", OTTER_LOSS_CROSS_ENTROPY, OTTER_OPTIM_ADAMW, &cf));
    otter_training_session *s = NULL;
    CHECK_OK(session_from(&mn, mn.training, mn.eval, mn.checkpoint, &s));
    otter_training_session_free(s);
    s = NULL;
    CHECK_STATUS(session_from(&mn, mn.training, cf.eval, mn.checkpoint, &s), OTTER_ERR_INVALID);
    printf("mixed eval: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "eval model") != NULL);
    CHECK_STATUS(session_from(&mn, mn.training, mn.eval, cf.checkpoint, &s), OTTER_ERR_INVALID);
    printf("mixed checkpoint: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "checkpoint") != NULL);
    /* same names, one shape different */
    otter_checkpoint *bad = NULL;
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(otter_checkpoint_save_to_memory(mn.checkpoint, NULL, &data, &size));
    CHECK_OK(otter_checkpoint_load_from_memory(&bad, data, size));
    otter_free(data);
    otter_tensor *t = NULL;
    int64_t d[1] = {11};
    otter_tensor_create(&t, "fc3.bias", OTTER_DTYPE_FLOAT, 1, d);
    CHECK_OK(otter_checkpoint_remove_param(bad, "fc3.bias"));
    CHECK_OK(otter_checkpoint_add_param(bad, OTTER_PARAM_TRAINABLE, t));
    otter_tensor_free(t);
    CHECK_STATUS(session_from(&mn, mn.training, mn.eval, bad, &s), OTTER_ERR_INVALID);
    printf("mismatched shape: %s\n", otter_last_error());
    CHECK(strstr(otter_last_error(), "fc3.bias") && strstr(otter_last_error(), "[11]"));
    otter_checkpoint_free(bad);
    otter_artifacts_free(&mn);
    otter_artifacts_free(&cf);
}

static bool runs_early(const otter_node *n) {
    return strcmp(n->op_type, "InPlaceAccumulatorV2") == 0 || strcmp(n->op_type, "Shape") == 0;
}

/* The session moves each gradient accumulator to right after the node producing its gradient, so the
 * gradient dies there rather than at the end of the backward pass (the artifacts list them last); and
 * each Shape to right after its input's producer, so a backward Shape of a forward activation (the
 * CIFAR CNN's MaxPool and Relu outputs, for the gradients of Flatten and MaxPool) does not keep the
 * activation alive until backward reaches it. */
static void test_run_early(void) {
    otter_artifacts cf = {0};
    CHECK_OK(build_artifacts("cifar", OTTER_LOSS_CROSS_ENTROPY, OTTER_OPTIM_SGD, &cf));
    otter_model *t = NULL;
    otter_training_session *s = NULL;
    CHECK_OK(otter_model_clone(&t, cf.training));
    const otter_model *before = cf.training;
    size_t n_acc = 0, last_other = 0;
    for (size_t i = 0; t && i < before->graph->n_nodes; i++)
        if (strcmp(before->graph->nodes[i]->op_type, "InPlaceAccumulatorV2") == 0)
            n_acc++;
        else
            last_other = i;
    CHECK(n_acc > 0 && last_other < before->graph->n_nodes - n_acc); /* made last, as ORT makes them */
    otter_checkpoint *c = NULL;
    void *data = NULL;
    size_t size = 0;
    CHECK_OK(otter_checkpoint_save_to_memory(cf.checkpoint, NULL, &data, &size));
    CHECK_OK(otter_checkpoint_load_from_memory(&c, data, size));
    otter_free(data);
    CHECK_OK(otter_training_session_create_from_models(&s, c, t, NULL, NULL, NULL));
    size_t placed = 0, seen = 0, shapes = 0, shapes_placed = 0;
    for (size_t i = 0; s && i < t->graph->n_nodes; i++) {
        const otter_node *n = t->graph->nodes[i];
        const bool acc = strcmp(n->op_type, "InPlaceAccumulatorV2") == 0;
        if (!runs_early(n)) continue;
        seen += acc, shapes += !acc;
        /* what it reads (an accumulator's gradient, input 1) comes from the nearest node before it
         * that is not moved itself */
        size_t j = i;
        while (j > 0 && runs_early(t->graph->nodes[j - 1])) j--;
        const otter_node *p = j > 0 ? t->graph->nodes[j - 1] : NULL;
        for (size_t o = 0; p && o < p->n_outputs; o++)
            if (strcmp(p->outputs[o], n->inputs[acc ? 1 : 0]) == 0) acc ? placed++ : shapes_placed++;
    }
    printf("accumulators: %zu of %zu run right after their gradient's node; Shape: %zu of %zu right after the "
           "producer of what it reads\n",
           placed, n_acc, shapes_placed, shapes);
    CHECK(s && seen == n_acc && placed == n_acc && shapes >= 4 && shapes_placed == shapes);
    otter_training_session_free(s);
    otter_artifacts_free(&cf);
}

/* Seeded Dropout in a training model the runtime fuses (Gemm + Relu): the seed has to reach the graph
 * the session runs, so two sessions with one seed draw the same masks (same losses, step by step, no
 * optimizer step between) and another seed draws others. */
static void test_dropout_seed(void) {
    otter_model *m = NULL;
    otter_builder *b = NULL;
    CHECK_OK(otter_model_create(&m, "dropout", 14));
    CHECK_OK(otter_builder_create(&b, m, 1));
    const char *x = otter_block_input(b, "input", OTTER_DTYPE_FLOAT, 2, (const int64_t[]){-1, 784});
    const char *h = otter_block_relu(b, otter_block_linear(b, "fc1", x, 784, 32));
    otter_tensor *ratio = NULL, *mode = NULL;
    const float half = 0.5f;
    const uint8_t on = 1;
    CHECK_OK(otter_tensor_from_data(&ratio, NULL, OTTER_DTYPE_FLOAT, 0, NULL, &half));
    CHECK_OK(otter_tensor_from_data(&mode, NULL, OTTER_DTYPE_BOOL, 0, NULL, &on));
    CHECK_OK(otter_graph_add_constant(m->graph, "ratio", ratio));
    CHECK_OK(otter_graph_add_constant(m->graph, "mode", mode));
    otter_tensor_free(ratio), otter_tensor_free(mode);
    otter_node *d = NULL;
    CHECK_OK(otter_node_create(&d, "Dropout", "drop", 3, (const char *[]){h, "ratio", "mode"}, 1,
                               (const char *[]){"dropped"}));
    CHECK_OK(otter_graph_add_node(m->graph, d));
    otter_block_output(b, otter_block_linear(b, "fc2", "dropped", 32, 10), "output");
    CHECK_OK(otter_builder_finish(b));
    otter_artifacts a = {0};
    otter_artifacts_options o = {.loss = OTTER_LOSS_CROSS_ENTROPY, .optimizer = OTTER_OPTIM_SGD};
    CHECK_OK(otter_artifacts_build(&a, m, &o));
    otter_tensor *bx, *by;
    make_batch(&bx, &by, 3);
    float loss[3][3];
    const uint64_t seeds[3] = {5, 5, 6};
    for (int k = 0; k < 3; k++) {
        otter_training_session *s = NULL;
        CHECK_OK(session_from(&a, a.training, a.eval, a.checkpoint, &s));
        if (!s) break;
        otter_training_set_seed(s, seeds[k]);
        for (int step = 0; step < 3; step++) loss[k][step] = train_loss(s, bx, by);
        otter_training_session_free(s);
    }
    printf("dropout seed 5: losses %.6f %.6f %.6f, again %.6f %.6f %.6f; seed 6: %.6f %.6f %.6f\n", loss[0][0],
           loss[0][1], loss[0][2], loss[1][0], loss[1][1], loss[1][2], loss[2][0], loss[2][1], loss[2][2]);
    CHECK(!memcmp(loss[0], loss[1], sizeof loss[0]));
    CHECK(loss[0][0] != loss[0][1] && loss[0][1] != loss[0][2]);
    CHECK(loss[0][0] != loss[2][0] && loss[0][1] != loss[2][1] && loss[0][2] != loss[2][2]);
    otter_tensor_free(bx), otter_tensor_free(by);
    otter_artifacts_free(&a);
    otter_model_free(m);
}

/* Export: eval model with its non-loss outputs, parameters as initializers; runs like the eval step. */
static void test_export(void) {
    otter_training_session *s = open_fixture();
    if (!s) return;
    otter_tensor *x, *y;
    make_batch(&x, &y, 9);
    train_loss(s, x, y);
    CHECK_OK(otter_training_optimizer_step(s));
    otter_model *m = NULL;
    CHECK_OK(otter_training_export_model(s, 0, NULL, &m));
    if (!m) return;
    CHECK(m->graph->n_inputs == 1 && strcmp(m->graph->inputs[0].name, "input") == 0);
    CHECK(m->graph->n_outputs == 1 && strcmp(m->graph->outputs[0].name, "output") == 0);
    CHECK(m->graph->n_initializers == 6);
    CHECK(m->graph->n_nodes == 5); /* the loss is pruned */
    otter_session *rs = NULL;
    CHECK_OK(otter_session_create(&rs, m, NULL));
    const otter_tensor *in[1] = {x};
    otter_tensor *o1[1] = {NULL}, *o2[2] = {NULL, NULL};
    CHECK_OK(otter_session_run(rs, 1, NULL, in, 1, NULL, o1));
    const otter_tensor *ein[2] = {x, y};
    CHECK_OK(otter_training_eval_step(s, 2, NULL, ein, 2, o2));
    double ew = o1[0] && o2[1] ? max_rel(o1[0]->data, o2[1]->data, (size_t)otter_tensor_numel(o2[1]), 1.0) : INFINITY;
    CHECK(o1[0] && o2[1] && otter_tensor_numel(o1[0]) == otter_tensor_numel(o2[1]) && ew < 1e-6);
    const char *bad[] = {"nope"};
    otter_model *m2 = NULL;
    CHECK_STATUS(otter_training_export_model(s, 1, bad, &m2), OTTER_ERR_NOT_FOUND);
    const char *both[] = {"output", "onnx::loss::2"};
    CHECK_OK(otter_training_export_model(s, 2, both, &m2));
    CHECK(m2 && m2->graph->n_outputs == 2 && strcmp(m2->graph->outputs[1].name, "onnx::loss::2") == 0 &&
          m2->graph->n_inputs == 2);
    printf("export: 1 input, 1 output, 6 initializers, %zu nodes; output vs the eval step's: max rel diff %.3g\n",
           m->graph->n_nodes, ew);
    otter_model_free(m2);
    otter_tensor_free(o1[0]), otter_tensor_free(o2[0]), otter_tensor_free(o2[1]);
    otter_session_free(rs);
    otter_model_free(m);
    otter_tensor_free(x), otter_tensor_free(y);
    otter_training_session_free(s);
}

int main(void) {
    test_layout();
    test_accumulation();
    test_profile();
    test_adamw(1);
    test_adamw(3);
    test_schedules();
    test_resume();
    test_checkpoint_state();
    test_nominal();
    test_mixed();
    test_run_early();
    test_dropout_seed();
    test_export();
    return tu_finish("test_training");
}
