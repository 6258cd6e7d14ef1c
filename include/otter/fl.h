/* otter: federated learning, server side. An aggregator holds the global model as one flat float32 vector
 * (the training session's trainable slab order, see training.h), the strategy and its state, and runs
 * rounds:
 *
 *     otter_fl_layout *lay;  otter_fl_aggregator *agg;
 *     otter_fl_layout_from_session(&lay, ts);                          // names, dtypes, shapes, offsets
 *     otter_fl_strategy st = otter_fl_strategy_default(OTTER_FL_FEDAVG);
 *     otter_fl_aggregator_create(&agg, lay, slab, n, &st);             // copies layout and vector
 *     for (round...) {
 *         otter_fl_aggregator_begin_round(agg);
 *         for (each client update) {                                   // refused ones change nothing
 *             otter_fl_update u = {.layout = NULL, .params = w, .n = n, .num_examples = k};
 *             if (otter_fl_aggregator_add_update(agg, &u) != OTTER_OK) log(otter_last_error());
 *         }
 *         otter_fl_round_summary sum;
 *         otter_fl_aggregator_finish_round(agg, &sum);                 // new global vector
 *         memcpy(slab, otter_fl_aggregator_global(agg, NULL), n * sizeof(float));
 *         otter_fl_aggregator_save(agg, "state/fl_state.bin");         // atomic; load on restart
 *     }
 *
 * An update is a flat float32 vector with the client's layout (parameter names, dtypes, shapes in the
 * client's order; NULL: exactly the global layout). Every global parameter must be present once with the
 * same dtype and shape and nothing else may be there: a missing, extra, duplicated or mismatched parameter
 * is an error naming it; so is a NaN or an infinity (naming the parameter and the element). A refused
 * update leaves the round's aggregate untouched. Nothing is skipped silently.
 *
 * Strategies (x: global vector, x_i: client i's vector, n_i its example count, S the round's clients):
 *   FEDAVG      x <- sum n_i x_i / sum n_i                                 (McMahan et al. 2017)
 *   FEDAVGM     d = sum n_i (x_i - x) / sum n_i;  v <- momentum v + d;  x <- x + server_lr v
 *                                                                         (Hsu et al. 2019; server_lr 1,
 *                                                                          momentum 0 is FEDAVG)
 *   FEDADAM     d as above; m <- beta1 m + (1 - beta1) d;  v <- beta2 v + (1 - beta2) d^2;
 *               x <- x + server_lr m / (sqrt(v) + tau)        (Reddi et al. 2021, Algorithm 2: no bias
 *                                                            correction, m starts at 0, v at tau^2)
 *   FEDYOGI     as FEDADAM but v <- v - (1 - beta2) d^2 sign(v - d^2)
 *   MEDIAN      x <- coordinate-wise median of the x_i (unweighted; mean of the two middle values for an
 *               even count)                                               (Yin et al. 2018)
 *   TRIMMED_MEAN  per coordinate, drop the k = floor(trim_fraction |S|) smallest and k largest x_i and
 *               average the rest (unweighted)                             (Yin et al. 2018)
 * Sums, the deltas and the server optimizer's state are kept in double; the global vector is float32.
 * MEDIAN and TRIMMED_MEAN keep every update of the round (|S| x n floats); the others accumulate as they go.
 *
 * An aggregator is not thread-safe: a server serializes begin/add/finish/save. otter_fl_aggregator_check_update
 * only reads and may run concurrently with other checks (not with add/finish). */
#ifndef OTTER_FL_H
#define OTTER_FL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/status.h"
#include "otter/tensor.h"
#include "otter/training.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter layout ------------------------------------------------------------------------------ */

typedef struct otter_fl_param {
    const char *name;
    otter_dtype dtype; /* an aggregator's global layout is all OTTER_DTYPE_FLOAT */
    int rank;          /* 0..OTTER_MAX_RANK */
    int64_t dims[OTTER_MAX_RANK];
} otter_fl_param;

typedef struct otter_fl_layout otter_fl_layout;

/* A layout from entries (copied). Names must be non-empty and distinct, dims >= 0. The flat vector is the
 * parameters' elements one after the other in this order. */
OTTER_API otter_status otter_fl_layout_create(otter_fl_layout **out, size_t n, const otter_fl_param *params);
/* The session's trainable float32 parameters in trainable-slab order (what otter_training_trainable_slab and
 * otter_training_copy_params_to_buffer(..., true) hold). */
OTTER_API otter_status otter_fl_layout_from_session(otter_fl_layout **out, const otter_training_session *s);
OTTER_API void otter_fl_layout_free(otter_fl_layout *l);
OTTER_API size_t otter_fl_layout_count(const otter_fl_layout *l);
/* The i-th entry (NULL when out of range); valid while l lives. */
OTTER_API const otter_fl_param *otter_fl_layout_at(const otter_fl_layout *l, size_t i);
/* Element offset of entry i in the flat vector (SIZE_MAX when out of range). */
OTTER_API size_t otter_fl_layout_offset(const otter_fl_layout *l, size_t i);
/* Elements in the flat vector. */
OTTER_API size_t otter_fl_layout_numel(const otter_fl_layout *l);
/* OTTER_OK when `other` holds the same parameters (names, dtypes, shapes; any order) as `global`; else
 * OTTER_ERR_INVALID naming the first parameter missing, extra, duplicated or mismatched. */
OTTER_API otter_status otter_fl_layout_match(const otter_fl_layout *global, const otter_fl_layout *other);

/* ---- strategy -------------------------------------------------------------------------------------- */

typedef enum otter_fl_strategy_kind {
    OTTER_FL_FEDAVG = 0,
    OTTER_FL_FEDAVGM = 1,
    OTTER_FL_FEDADAM = 2,
    OTTER_FL_FEDYOGI = 3,
    OTTER_FL_MEDIAN = 4,
    OTTER_FL_TRIMMED_MEAN = 5
} otter_fl_strategy_kind;

/* Fields a strategy doesn't use are ignored. Values are used as given: start from otter_fl_strategy_default. */
typedef struct otter_fl_strategy {
    otter_fl_strategy_kind kind;
    double server_lr;     /* FEDAVGM (default 1), FEDADAM / FEDYOGI (default 0.01); > 0 */
    double momentum;      /* FEDAVGM, in [0, 1) (default 0.9) */
    double beta1, beta2;  /* FEDADAM / FEDYOGI, in [0, 1) (defaults 0.9, 0.99) */
    double tau;           /* FEDADAM / FEDYOGI adaptivity, > 0 (default 1e-3) */
    double trim_fraction; /* TRIMMED_MEAN, in [0, 0.5) (default 0.1) */
} otter_fl_strategy;

OTTER_API otter_fl_strategy otter_fl_strategy_default(otter_fl_strategy_kind kind);
/* Parse "fedavg", "fedavgm[:lr=1,momentum=0.9]", "fedadam[:lr=0.01,beta1=0.9,beta2=0.99,tau=1e-3]",
 * "fedyogi[:...]", "median", "trimmed-mean[:fraction=0.1]" (unset keys keep the defaults). Errors name the
 * bad part. */
OTTER_API otter_status otter_fl_strategy_parse(const char *text, otter_fl_strategy *out);
/* Ranges as documented above; OTTER_ERR_ARGUMENT naming the field. */
OTTER_API otter_status otter_fl_strategy_check(const otter_fl_strategy *s);
/* "fedavg", "fedavgm", "fedadam", "fedyogi", "median", "trimmed-mean". */
OTTER_API const char *otter_fl_strategy_name(otter_fl_strategy_kind kind);
/* The strategy with its hyperparameters as otter_fl_strategy_parse reads them back ("fedadam:lr=0.01,..."). */
OTTER_API void otter_fl_strategy_format(const otter_fl_strategy *s, char *buf, size_t cap);

/* ---- aggregator ------------------------------------------------------------------------------------ */

typedef struct otter_fl_aggregator otter_fl_aggregator;

/* layout: the global model's (every entry float32); global: its n = numel(layout) values (finite). Both are
 * copied. The server optimizer state starts as documented above; the round counter at 0. */
OTTER_API otter_status otter_fl_aggregator_create(otter_fl_aggregator **out, const otter_fl_layout *layout,
                                                  const float *global, size_t n, const otter_fl_strategy *strategy);
OTTER_API void otter_fl_aggregator_free(otter_fl_aggregator *a);

OTTER_API const otter_fl_layout *otter_fl_aggregator_layout(const otter_fl_aggregator *a);
OTTER_API const otter_fl_strategy *otter_fl_aggregator_strategy(const otter_fl_aggregator *a);
/* The global vector (n may be NULL); valid until the next finish/load/set_global. */
OTTER_API const float *otter_fl_aggregator_global(const otter_fl_aggregator *a, size_t *n);
/* Replace the global vector (n values, finite); the strategy state is kept. Not during a round. */
OTTER_API otter_status otter_fl_aggregator_set_global(otter_fl_aggregator *a, const float *global, size_t n);
/* Rounds completed (finish_round increments it). */
OTTER_API int64_t otter_fl_aggregator_round(const otter_fl_aggregator *a);
OTTER_API bool otter_fl_aggregator_in_round(const otter_fl_aggregator *a);
/* Updates accepted in the open round. */
OTTER_API size_t otter_fl_aggregator_num_updates(const otter_fl_aggregator *a);

typedef struct otter_fl_update {
    const otter_fl_layout *layout; /* the update's layout; NULL: the global layout */
    const float *params;           /* n values in that layout */
    size_t n;
    int64_t num_examples; /* > 0: the weight for FEDAVG/FEDAVGM/FEDADAM/FEDYOGI */
    bool has_loss;        /* the client's training loss, averaged over the round weighted by examples */
    double loss;
    const char *client; /* for messages (may be NULL) */
} otter_fl_update;

/* Open round number round() + 1. OTTER_ERR_INVALID when a round is open. */
OTTER_API otter_status otter_fl_aggregator_begin_round(otter_fl_aggregator *a);
/* Everything add_update checks (layout, size, finite values, example count, loss finite), without adding. */
OTTER_API otter_status otter_fl_aggregator_check_update(const otter_fl_aggregator *a, const otter_fl_update *u);
/* Check, then add the update to the open round. On failure the round is as before the call. */
OTTER_API otter_status otter_fl_aggregator_add_update(otter_fl_aggregator *a, const otter_fl_update *u);

typedef struct otter_fl_round_summary {
    int64_t round;        /* the round just finished (1, 2, ...) */
    size_t num_updates;   /* clients aggregated */
    int64_t num_examples; /* their examples */
    bool has_loss;        /* some update carried a loss */
    double mean_loss;     /* weighted by examples over the updates with a loss */
    double update_norm;   /* L2 norm of new global - old global */
} otter_fl_round_summary;

/* Aggregate the open round into the new global vector and close it. A round without updates is
 * OTTER_ERR_INVALID and stays open (the caller may add more or abort). summary may be NULL. */
OTTER_API otter_status otter_fl_aggregator_finish_round(otter_fl_aggregator *a, otter_fl_round_summary *summary);
/* Close the open round, dropping its updates; global vector, strategy state and round counter unchanged. */
OTTER_API void otter_fl_aggregator_abort_round(otter_fl_aggregator *a);

/* ---- state for a restarting server ----------------------------------------------------------------- */

/* Write layout, strategy, round counter, global vector and server optimizer state to a small binary file
 * (magic "OTFLSTAT", version, checksum), atomically (temporary file, fsync, rename: the previous file stays
 * intact on failure). An open round's updates are not saved: a restarted server resumes after the last
 * finished round. */
OTTER_API otter_status otter_fl_aggregator_save(const otter_fl_aggregator *a, const char *path);
/* Read a file written by save (errors name the path and what is wrong: magic, version, checksum, sizes). */
OTTER_API otter_status otter_fl_aggregator_load(otter_fl_aggregator **out, const char *path);
/* The same as a buffer allocated with the library's allocator (free with otter_free) and back. */
OTTER_API otter_status otter_fl_aggregator_save_to_memory(const otter_fl_aggregator *a, void **data, size_t *size);
OTTER_API otter_status otter_fl_aggregator_load_from_memory(otter_fl_aggregator **out, const void *data, size_t size);

/* ---- client selection ------------------------------------------------------------------------------ */

/* max(floor(fraction * num_clients), 1) distinct clients out of num_clients (fraction in (0, 1]), chosen
 * uniformly from (seed, round) alone and written to out (room for num_clients) in increasing order.
 * Returns how many. */
OTTER_API size_t otter_fl_sample_clients(size_t num_clients, double fraction, uint64_t seed, int64_t round,
                                         size_t *out);

#ifdef __cplusplus
}
#endif
#endif
