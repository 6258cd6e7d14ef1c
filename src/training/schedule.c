/* Learning rate and schedules. A schedule's value depends only on the optimizer step t (the state's
 * step), so a resumed run gets the same rates as an uninterrupted one. */
#include <math.h>

#include "core/core.h"
#include "training/training_internal.h"

float otter_training_get_lr(const otter_training_session *s) { return s ? s->lr : 0.0f; }

otter_status otter_training_set_lr(otter_training_session *s, float lr) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_set_lr: NULL session");
    if (!(lr >= 0.0f) || isinf(lr)) return ot_error(OTTER_ERR_ARGUMENT, "learning rate %g must be finite and >= 0", lr);
    s->lr = lr;
    return OTTER_OK;
}

float otter_lr_schedule_at(const otter_lr_schedule *sc, int64_t t) {
    if (!sc) return 0.0f;
    double lr0 = sc->initial_lr;
    if (sc->kind == OTTER_LR_CONSTANT) return sc->initial_lr;
    if (t < 0) t = 0;
    int64_t w = sc->warmup_steps > 0 ? sc->warmup_steps : 0;
    if (t < w) return (float)(lr0 * (double)t / (double)w);
    switch (sc->kind) {
    case OTTER_LR_LINEAR: { /* ORT: max(0, (total - t) / max(1, total - warmup)) */
        int64_t span = sc->total_steps - w > 1 ? sc->total_steps - w : 1;
        double f = (double)(sc->total_steps - t) / (double)span;
        return (float)(lr0 * (f > 0.0 ? f : 0.0));
    }
    case OTTER_LR_COSINE: {
        int64_t span = sc->total_steps - w > 1 ? sc->total_steps - w : 1;
        double x = (double)(t - w) / (double)span;
        if (x > 1.0) x = 1.0;
        return (float)(sc->min_lr + (lr0 - sc->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * x)));
    }
    case OTTER_LR_STEP: {
        int64_t size = sc->step_size > 0 ? sc->step_size : 1;
        return (float)(lr0 * pow((double)sc->gamma, (double)((t - w) / size)));
    }
    default:
        return sc->initial_lr;
    }
}

otter_status otter_training_set_schedule(otter_training_session *s, const otter_lr_schedule *sc) {
    if (!s || !sc) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_set_schedule: NULL argument");
    if (sc->kind == OTTER_LR_CONSTANT) {
        s->have_sched = false;
        return OTTER_OK;
    }
    if (sc->kind != OTTER_LR_LINEAR && sc->kind != OTTER_LR_COSINE && sc->kind != OTTER_LR_STEP)
        return ot_error(OTTER_ERR_ARGUMENT, "learning-rate schedule: unknown kind %d", (int)sc->kind);
    if (!(sc->initial_lr >= 0.0f) || isinf(sc->initial_lr))
        return ot_error(OTTER_ERR_ARGUMENT, "learning-rate schedule: initial rate %g must be finite and >= 0",
                        sc->initial_lr);
    if (sc->warmup_steps < 0) return ot_error(OTTER_ERR_ARGUMENT, "learning-rate schedule: warm-up steps < 0");
    if (sc->kind != OTTER_LR_STEP && (sc->total_steps <= 0 || sc->total_steps < sc->warmup_steps))
        return ot_error(OTTER_ERR_ARGUMENT,
                        "learning-rate schedule: total steps %lld must be > 0 and >= the warm-up steps %lld",
                        (long long)sc->total_steps, (long long)sc->warmup_steps);
    if (sc->kind == OTTER_LR_STEP && (sc->step_size <= 0 || !(sc->gamma > 0.0f)))
        return ot_error(OTTER_ERR_ARGUMENT, "learning-rate step schedule: step size must be > 0 and gamma > 0");
    s->sched = *sc;
    s->have_sched = true;
    s->lr = otter_lr_schedule_at(sc, s->step);
    return OTTER_OK;
}

otter_status otter_training_scheduler_step(otter_training_session *s) {
    if (!s) return ot_error(OTTER_ERR_ARGUMENT, "otter_training_scheduler_step: NULL session");
    if (!s->have_sched) return ot_error(OTTER_ERR_ARGUMENT, "scheduler step: no learning-rate schedule is registered");
    s->lr = otter_lr_schedule_at(&s->sched, s->step);
    return OTTER_OK;
}
