/* otter_training_run: the training loop `otter train`, `otter fl client` and `otter fl simulate` share.
 *
 * Each batch is a train step; every grad_accum batches (and at an epoch's end for its leftover batches) come
 * the optimizer step, the scheduler step and a lazy gradient reset. After every epoch: evaluation, the
 * checkpoint policy, the callback. The batch order of an epoch depends on (seed, epoch_offset + epoch) only,
 * so a run resumed from its saved position (checkpoint properties) follows the uninterrupted one. */
#include <math.h>
#include <string.h>

#include "core/clock.h"
#include "core/core.h"
#include "training/training_internal.h"

typedef struct loop {
    otter_training_session *s;
    const otter_dataset *ds;
    otter_train_options o; /* defaults filled in */
    otter_batch_iter *it;
    otter_tensor *x, *y, *loss; /* x, y: inputs and targets, unless the dataset feeds columns */
    bool columns;
    ot_training_feed feed;
    bool schedule;
    int64_t per_epoch, total;      /* batches per epoch, global step at which the run is complete */
    int64_t epoch, batch, pending; /* position; train steps since the last optimizer step */
    int64_t global, start_global;
    double t_start, t_epoch;
    double epoch_loss_sum, run_loss_sum; /* batch losses weighted by their samples */
    int64_t epoch_samples, run_samples;
    bool have_best;
    double best_loss;
    bool stop_requested;
} loop;

static bool get_int(const otter_training_session *s, const char *name, int64_t *out) {
    const otter_property *p = NULL;
    if (otter_training_get_property(s, name, &p) != OTTER_OK || p->type != OTTER_PROPERTY_INT) return false;
    *out = p->i;
    return true;
}

otter_status otter_training_get_position(const otter_training_session *s, otter_train_position *out) {
    if (!s || !out) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_get_position: NULL argument");
    memset(out, 0, sizeof *out);
    int64_t seed = 0;
    bool found = get_int(s, "otter.epoch", &out->epoch) && get_int(s, "otter.batch", &out->batch) &&
                 get_int(s, "otter.global_step", &out->global_step);
    out->has_seed = get_int(s, "otter.seed", &seed);
    out->seed = (uint64_t)seed;
    out->has_batch_size = get_int(s, "otter.batch_size", &out->batch_size);
    otter_clear_error(); /* the lookups of absent properties */
    if (!found)
        return ot_error(OTTER_ERR_NOT_FOUND, "the checkpoint has no otter.epoch/otter.batch/otter.global_step "
                                             "properties (not saved by the training loop)");
    return OTTER_OK;
}

static otter_status save_position(loop *l, const char *path) {
    otter_training_session *s = l->s;
    otter_status st = otter_training_set_property_int(s, "otter.epoch", l->epoch);
    if (st == OTTER_OK) st = otter_training_set_property_int(s, "otter.batch", l->batch);
    if (st == OTTER_OK) st = otter_training_set_property_int(s, "otter.global_step", l->global);
    if (st == OTTER_OK) st = otter_training_set_property_int(s, "otter.seed", (int64_t)l->o.seed);
    if (st == OTTER_OK) st = otter_training_set_property_int(s, "otter.batch_size", l->o.batch_size);
    if (st == OTTER_OK) st = otter_training_save_checkpoint(s, path, true);
    return st;
}

static void progress(const loop *l, otter_train_event ev, otter_train_progress *p) {
    memset(p, 0, sizeof *p);
    double now = ot_now_seconds();
    p->event = ev;
    p->epoch = l->epoch;
    p->batch = l->batch;
    p->batches_per_epoch = l->per_epoch;
    p->epochs = (l->total + l->per_epoch - 1) / l->per_epoch;
    p->global_step = l->global;
    p->total_steps = l->total;
    p->run_samples = l->run_samples;
    p->samples = l->epoch_samples;
    p->loss = l->epoch_samples ? l->epoch_loss_sum / (double)l->epoch_samples : NAN;
    p->lr = otter_training_get_lr(l->s);
    p->optimizer_steps = otter_training_step_count(l->s);
    p->seconds = now - l->t_start;
    p->epoch_seconds = now - l->t_epoch;
}

/* The callback's answer; a stop is remembered for the loop. */
static bool notify(loop *l, const otter_train_progress *p) {
    if (l->o.on_progress && !l->o.on_progress(p, l->o.user)) l->stop_requested = true;
    return !l->stop_requested;
}

static otter_status optimizer_step(loop *l) {
    otter_status st = otter_training_optimizer_step(l->s);
    if (st == OTTER_OK && l->schedule) st = otter_training_scheduler_step(l->s);
    if (st == OTTER_OK) st = otter_training_lazy_reset_grad(l->s);
    l->pending = 0;
    return st == OTTER_OK ? st : ot_error_context(st, "optimizer step %lld: ", (long long)l->s->step + 1);
}

/* Fill the defaults, read the resume position, check what the run needs. */
static otter_status loop_plan(loop *l, const otter_train_options *opts) {
    if (opts) l->o = *opts;
    otter_train_options *o = &l->o;
    if (o->batch_size <= 0) o->batch_size = 64;
    if (o->epochs <= 0) o->epochs = 1;
    if (o->grad_accum <= 0) o->grad_accum = 1;
    if (o->save_every_epochs <= 0) o->save_every_epochs = 1;
    if (!otter_training_has_optimizer(l->s)) return ot_error(OTTER_ERR_INVALID, "the session has no optimizer model");
    if ((o->eval_data || o->best_checkpoint) && !otter_training_has_eval(l->s))
        return ot_error(OTTER_ERR_INVALID, "evaluation asked for but the session has no eval model");
    if (o->best_checkpoint && !o->eval_data)
        return ot_error(OTTER_ERR_ARGUMENT, "best_checkpoint needs eval_data (the best epoch is the lowest eval loss)");
    if (o->checkpoint) OT_TRY(otter_training_check_checkpoint(l->s, o->checkpoint, true));
    if (o->best_checkpoint) OT_TRY(otter_training_check_checkpoint(l->s, o->best_checkpoint, true));
    if (o->resume) {
        otter_train_position pos;
        OT_TRY(otter_training_get_position(l->s, &pos));
        if (pos.has_batch_size && pos.batch_size != o->batch_size)
            return ot_error(OTTER_ERR_INVALID, "the checkpoint was trained with batches of %lld, not %lld",
                            (long long)pos.batch_size, (long long)o->batch_size);
        l->epoch = pos.epoch, l->batch = pos.batch, l->global = l->start_global = pos.global_step;
    }
    otter_batch_options bo = {.batch_size = o->batch_size,
                              .shuffle = !o->keep_order,
                              .seed = o->seed,
                              .drop_last = o->drop_last,
                              .indices = o->indices,
                              .num_indices = o->num_indices};
    OT_TRY(otter_batch_iter_create(&l->it, l->ds, &bo));
    l->columns = otter_training_feeds_columns(l->s, l->ds);
    if (l->columns)
        OT_TRY(ot_training_feed_columns_init(l->s, OTTER_TRAINING_GRAPH, l->ds, o->batch_size, &l->feed));
    else
        OT_TRY(otter_batch_iter_alloc(l->it, &l->x, &l->y));
    l->per_epoch = otter_batch_iter_num_batches(l->it);
    if (l->per_epoch <= 0)
        return ot_error(OTTER_ERR_INVALID, "'%s' has no samples%s", otter_dataset_description(l->ds),
                        o->drop_last ? " once the partial batch is dropped" : "");
    OT_TRY(ot_training_check_batch_dim(l->s, OTTER_TRAINING_GRAPH, o->batch_size,
                                       o->indices ? o->num_indices : otter_dataset_size(l->ds), o->drop_last));
    l->total = o->max_steps > 0 ? o->max_steps : o->epochs * l->per_epoch;
    if (l->batch >= l->per_epoch) l->epoch++, l->batch = 0;
    return OTTER_OK;
}

static otter_status loop_set_lr(loop *l) {
    otter_train_options *o = &l->o;
    if (o->set_lr) OT_TRY(otter_training_set_lr(l->s, o->lr));
    if (o->schedule.kind == OTTER_LR_CONSTANT) return OTTER_OK;
    otter_lr_schedule sc = o->schedule;
    if (sc.initial_lr == 0) sc.initial_lr = otter_training_get_lr(l->s);
    if (sc.total_steps == 0 && sc.kind != OTTER_LR_STEP)
        sc.total_steps = (l->total + o->grad_accum - 1) / o->grad_accum;
    l->schedule = true;
    return otter_training_set_schedule(l->s, &sc);
}

static otter_status seek_epoch(loop *l) {
    return otter_batch_iter_seek(l->it, l->o.epoch_offset + (uint64_t)l->epoch, l->batch);
}

/* The next batch into the feed; *cnt 0 when the epoch is over. */
static otter_status next_batch(loop *l, int64_t *cnt) {
    if (!l->columns) {
        OT_TRY(otter_batch_iter_next(l->it, l->x, l->y, cnt));
        return *cnt ? ot_training_feed_batch(l->s, OTTER_TRAINING_GRAPH, l->x, l->y, &l->feed) : OTTER_OK;
    }
    const int64_t *idx;
    OT_TRY(otter_batch_iter_next_indices(l->it, &idx, cnt));
    return ot_training_feed_columns(l->ds, idx, *cnt, &l->feed);
}

/* Train step on the batch in the feed (cnt samples), then the optimizer step when one is due. */
static otter_status train_batch(loop *l, int64_t cnt) {
    const otter_tensor *pair[2] = {&l->feed.xv, &l->feed.yv};
    size_t n_in = l->columns ? l->feed.n_cols : 2;
    const otter_tensor *const *in = l->columns ? (const otter_tensor *const *)l->feed.cols : pair;
    otter_status st = otter_training_train_step(l->s, n_in, NULL, in, 1, &l->loss);
    if (st != OTTER_OK)
        return ot_error_context(st, "epoch %lld, batch %lld: ", (long long)l->epoch + 1, (long long)l->batch);
    float lv = ((const float *)l->loss->data)[0];
    if (!isfinite(lv))
        return ot_error(OTTER_ERR_INVALID, "epoch %lld, batch %lld: the training loss is %g (lower the learning rate?)",
                        (long long)l->epoch + 1, (long long)l->batch, lv);
    l->epoch_loss_sum += (double)lv * (double)cnt, l->epoch_samples += cnt;
    l->run_loss_sum += (double)lv * (double)cnt, l->run_samples += cnt;
    if (++l->pending == l->o.grad_accum) OT_TRY(optimizer_step(l));
    l->global++, l->batch++;
    otter_train_progress p;
    progress(l, OTTER_TRAIN_STEP, &p);
    p.samples = cnt, p.loss = lv;
    notify(l, &p);
    if (l->o.checkpoint && l->o.save_every_steps > 0 && l->global % l->o.save_every_steps == 0 &&
        l->batch < l->per_epoch) /* an epoch's end saves anyway */
        OT_TRY(save_position(l, l->o.checkpoint));
    return OTTER_OK;
}

/* The epoch is over: evaluation, checkpoints, the callback, the next epoch's order. */
static otter_status finish_epoch(loop *l) {
    otter_train_progress p;
    progress(l, OTTER_TRAIN_EPOCH_END, &p);
    if (l->o.eval_data) {
        OT_TRY(otter_training_evaluate(l->s, l->o.eval_data, l->o.eval_batch_size, &p.eval));
        p.has_eval = true;
    }
    l->epoch++, l->batch = 0;
    bool last = l->global == l->total || l->stop_requested;
    if (l->o.checkpoint && (last || l->epoch % l->o.save_every_epochs == 0)) {
        OT_TRY(save_position(l, l->o.checkpoint));
        p.checkpoint = l->o.checkpoint;
    }
    if (p.has_eval && l->o.best_checkpoint && (!l->have_best || p.eval.loss < l->best_loss)) {
        l->have_best = true, l->best_loss = p.eval.loss, p.new_best = true;
        OT_TRY(save_position(l, l->o.best_checkpoint));
    }
    p.seconds = ot_now_seconds() - l->t_start; /* evaluation and saving included */
    p.epoch_seconds = ot_now_seconds() - l->t_epoch;
    notify(l, &p);
    l->epoch_loss_sum = 0, l->epoch_samples = 0, l->t_epoch = ot_now_seconds();
    if (l->global < l->total && !l->stop_requested) OT_TRY(seek_epoch(l));
    return OTTER_OK;
}

/* The run ends inside an epoch: its leftover gradients get their optimizer step, the position is saved. */
static otter_status stop_inside_epoch(loop *l) {
    if (l->pending) OT_TRY(optimizer_step(l));
    if (l->o.checkpoint) OT_TRY(save_position(l, l->o.checkpoint));
    otter_train_progress p;
    progress(l, OTTER_TRAIN_STOPPED, &p);
    p.checkpoint = l->o.checkpoint;
    notify(l, &p);
    return OTTER_OK;
}

static otter_status loop_run(loop *l) {
    while (l->global < l->total && !l->stop_requested) {
        int64_t cnt = 0;
        OT_TRY(next_batch(l, &cnt));
        if (cnt > 0) OT_TRY(train_batch(l, cnt));
        bool epoch_end = cnt == 0 || l->batch == l->per_epoch;
        if (epoch_end) {
            if (l->pending) OT_TRY(optimizer_step(l));
            OT_TRY(finish_epoch(l));
        } else if (l->global == l->total || l->stop_requested) {
            return stop_inside_epoch(l);
        }
    }
    return OTTER_OK;
}

otter_status otter_training_run(otter_training_session *s, const otter_dataset *ds, const otter_train_options *opts,
                                otter_train_result *result) {
    if (!s || !ds) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_run: NULL session or dataset");
    loop l = {.s = s, .ds = ds};
    l.t_start = l.t_epoch = ot_now_seconds();
    otter_status st = loop_plan(&l, opts);
    bool work = st == OTTER_OK && l.global < l.total;
    if (work) st = loop_set_lr(&l);
    if (work && st == OTTER_OK) st = seek_epoch(&l);
    if (work && st == OTTER_OK) {
        otter_train_progress p;
        progress(&l, OTTER_TRAIN_BEGIN, &p);
        p.samples = otter_batch_iter_num_samples(l.it);
        if (notify(&l, &p)) st = loop_run(&l);
    }
    if (st != OTTER_OK) ot_error_context(st, "training on %s: ", otter_dataset_description(ds));
    if (result) {
        *result = (otter_train_result){.start_step = l.start_global,
                                       .total_steps = l.total,
                                       .steps = l.global - l.start_global,
                                       .samples = l.run_samples,
                                       .mean_loss = l.run_samples ? l.run_loss_sum / (double)l.run_samples : NAN,
                                       .samples_per_epoch = l.it ? otter_batch_iter_num_samples(l.it) : 0,
                                       .epoch = l.epoch,
                                       .batch = l.batch,
                                       .stopped = l.stop_requested,
                                       .seconds = ot_now_seconds() - l.t_start};
    }
    otter_tensor_free(l.loss), otter_tensor_free(l.x), otter_tensor_free(l.y);
    ot_training_feed_free(&l.feed);
    otter_batch_iter_free(l.it);
    return st;
}
