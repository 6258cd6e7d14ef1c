/* RandomNormal, RandomUniform, RandomNormalLike, RandomUniformLike, Bernoulli, Multinomial.
 *
 * Each node draws from its own splitmix64 stream (core/rng.h), kept with the session: seeded from
 * the 'seed' attribute when given, so two sessions of one model draw the same values run after
 * run, while successive runs of a session continue the stream (fresh noise each training step, as
 * ONNX Runtime's kernels keep their generator). Without a seed every stream starts somewhere new.
 * Their registry rows flag them OT_OP_NOFOLD: a constant-folded draw would repeat every run. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/rng.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

/* A seed for a node without one: a process-wide count mixed with the clock. */
static uint64_t fresh_seed(void) {
    static atomic_uint_fast64_t count;
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    ot_rng mix = {(uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec};
    return ot_rng_next(&mix) ^ (atomic_fetch_add(&count, 1) * 0x9e3779b97f4a7c15ull);
}

/* The node's stream, created on its first run. The float seed's bit pattern picks the stream, so
 * seeds 0.5 and 0.7 differ as much as 1 and 2. */
static otter_status node_stream(ot_kernel_ctx *ctx, ot_rng **rng) {
    void **slot = ot_ctx_cache(ctx, ot_free);
    if (!*slot) {
        ot_rng *r = ot_malloc(sizeof *r);
        if (!r) return ot_ctx_error(ctx, OTTER_ERR_NOMEM, "out of memory for the generator state");
        const otter_attr *seed = otter_node_attr(ctx->node, "seed");
        if (seed && seed->type == OTTER_ATTR_FLOAT) {
            uint32_t bits;
            memcpy(&bits, &seed->f, sizeof bits);
            r->state = bits;
        } else {
            r->state = fresh_seed();
        }
        *slot = r;
    }
    *rng = *slot;
    return OTTER_OK;
}

/* The output element type, floating types only: the 'dtype' attribute or its schema default; for the
 * *Like operators, whose schemas give none, `like` (input 0's type); UNDEFINED for the others. */
static otter_status float_dtype(const ot_kernel_ctx *ctx, otter_dtype like, otter_dtype *dt) {
    int64_t v = like;
    if (like == OTTER_DTYPE_UNDEFINED)
        OT_TRY(ot_ctx_attr_int(ctx, "dtype", &v));
    else
        v = ot_ctx_attr_int_or(ctx, "dtype", like);
    *dt = (otter_dtype)v;
    if (!otter_dtype_is_float(*dt))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output element type %s is not a floating type",
                            otter_dtype_name(*dt));
    return OTTER_OK;
}

/* Output 0 for RandomNormal / RandomUniform: dtype and 'shape' attributes. */
static otter_status generator_output(ot_kernel_ctx *ctx, otter_tensor **y) {
    otter_dtype dt;
    OT_TRY(float_dtype(ctx, OTTER_DTYPE_UNDEFINED, &dt));
    const otter_attr *shape = otter_node_attr(ctx->node, "shape");
    if (!shape || shape->type != OTTER_ATTR_INTS)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'shape' is required");
    if (shape->n_ints > OTTER_MAX_RANK)
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "shape has rank %zu (at most %d)", shape->n_ints,
                            OTTER_MAX_RANK);
    for (size_t i = 0; i < shape->n_ints; i++)
        if (shape->ints[i] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "shape entry %zu is negative (%lld)", i,
                                (long long)shape->ints[i]);
    *y = ot_ctx_output(ctx, 0, dt, (int)shape->n_ints, shape->ints);
    return *y ? OTTER_OK : OTTER_ERR_NOMEM;
}

/* Output 0 for the *Like generators: input 0's shape, the dtype attribute or input 0's type. */
static otter_status like_output(ot_kernel_ctx *ctx, otter_tensor **y) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input 0 is missing");
    otter_dtype dt;
    OT_TRY(float_dtype(ctx, x->dtype, &dt));
    *y = ot_ctx_output(ctx, 0, dt, x->rank, x->dims);
    return *y ? OTTER_OK : OTTER_ERR_NOMEM;
}

/* y = mean + scale * z, z standard normal (Box-Muller: two uniforms give two normals). */
static otter_status fill_normal(ot_kernel_ctx *ctx, otter_tensor *y) {
    ot_rng *rng = NULL;
    OT_TRY(node_stream(ctx, &rng));
    float mean, scale;
    OT_TRY(ot_ctx_attr_float(ctx, "mean", &mean));
    OT_TRY(ot_ctx_attr_float(ctx, "scale", &scale));
    int64_t n = otter_tensor_numel(y);
    for (int64_t i = 0; i < n; i += 2) {
        double radius = sqrt(-2.0 * log(1.0 - ot_rng_uniform(rng))); /* 1 - u is in (0, 1] */
        double angle = 2.0 * M_PI * ot_rng_uniform(rng);
        ot_set_f64(y->data, y->dtype, i, mean + scale * radius * cos(angle));
        if (i + 1 < n) ot_set_f64(y->data, y->dtype, i + 1, mean + scale * radius * sin(angle));
    }
    return OTTER_OK;
}

/* y = low + (high - low) * u, u uniform in [0, 1). */
static otter_status fill_uniform(ot_kernel_ctx *ctx, otter_tensor *y) {
    ot_rng *rng = NULL;
    OT_TRY(node_stream(ctx, &rng));
    float low, high;
    OT_TRY(ot_ctx_attr_float(ctx, "low", &low));
    OT_TRY(ot_ctx_attr_float(ctx, "high", &high));
    if (!(low <= high)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "low %g is greater than high %g", low, high);
    int64_t n = otter_tensor_numel(y);
    for (int64_t i = 0; i < n; i++) ot_set_f64(y->data, y->dtype, i, low + (high - low) * ot_rng_uniform(rng));
    return OTTER_OK;
}

otter_status ot_kernel_random_normal(ot_kernel_ctx *ctx) {
    otter_tensor *y = NULL;
    OT_TRY(generator_output(ctx, &y));
    return fill_normal(ctx, y);
}

otter_status ot_kernel_random_uniform(ot_kernel_ctx *ctx) {
    otter_tensor *y = NULL;
    OT_TRY(generator_output(ctx, &y));
    return fill_uniform(ctx, y);
}

otter_status ot_kernel_random_normal_like(ot_kernel_ctx *ctx) {
    otter_tensor *y = NULL;
    OT_TRY(like_output(ctx, &y));
    return fill_normal(ctx, y);
}

otter_status ot_kernel_random_uniform_like(ot_kernel_ctx *ctx) {
    otter_tensor *y = NULL;
    OT_TRY(like_output(ctx, &y));
    return fill_uniform(ctx, y);
}

/* y[i] = 1 with probability p[i], else 0, in the dtype attribute's type (default: p's). */
otter_status ot_kernel_bernoulli(ot_kernel_ctx *ctx) {
    const otter_tensor *p;
    OT_TRY(ot_ctx_float_input(ctx, 0, &p));
    otter_dtype dt = (otter_dtype)ot_ctx_attr_int_or(ctx, "dtype", p->dtype); /* no schema default: p's type */
    if (dt <= OTTER_DTYPE_UNDEFINED || dt >= OTTER_DTYPE_COUNT_ || dt == OTTER_DTYPE_STRING ||
        dt == OTTER_DTYPE_COMPLEX64 || dt == OTTER_DTYPE_COMPLEX128)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output element type %s is not numeric", otter_dtype_name(dt));
    ot_rng *rng = NULL;
    OT_TRY(node_stream(ctx, &rng));
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, p->rank, p->dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t n = otter_tensor_numel(p);
    for (int64_t i = 0; i < n; i++) {
        double prob = ot_get_f64(p->data, p->dtype, i);
        if (!(prob >= 0 && prob <= 1))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "probability %g at element %lld of input '%s' is outside [0, 1]", prob, (long long)i,
                                ot_ctx_input_name(ctx, 0));
        ot_set_f64(y->data, dt, i, ot_rng_uniform(rng) < prob ? 1.0 : 0.0);
    }
    return OTTER_OK;
}

/* input [batch, classes] of unnormalized log-probabilities -> [batch, sample_size] class indices,
 * each drawn with probability softmax(input[b]) by inverting the cumulative distribution. */
otter_status ot_kernel_multinomial(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(ot_ctx_float_input(ctx, 0, &x));
    if (x->rank != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has rank %d, expected 2 [batch, classes]",
                            ot_ctx_input_name(ctx, 0), x->rank);
    int64_t dt_attr, samples;
    OT_TRY(ot_ctx_attr_int(ctx, "dtype", &dt_attr));
    OT_TRY(ot_ctx_attr_int(ctx, "sample_size", &samples));
    otter_dtype dt = (otter_dtype)dt_attr;
    if (dt != OTTER_DTYPE_INT32 && dt != OTTER_DTYPE_INT64)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "dtype %s is not int32 or int64", otter_dtype_name(dt));
    int64_t batch = x->dims[0], classes = x->dims[1];
    if (samples < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "sample_size %lld is negative", (long long)samples);
    if (classes == 0 && batch * samples > 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' has no classes to draw from",
                            ot_ctx_input_name(ctx, 0));
    ot_rng *rng = NULL;
    OT_TRY(node_stream(ctx, &rng));
    otter_tensor *y = ot_ctx_output(ctx, 0, dt, 2, (int64_t[]){batch, samples});
    if (!y) return OTTER_ERR_NOMEM;
    double *cdf = ot_ctx_scratch(ctx, sizeof(double) * (size_t)(classes > 0 ? classes : 1));
    if (!cdf) return OTTER_ERR_NOMEM;
    for (int64_t b = 0; b < batch; b++) {
        double max = -INFINITY, total = 0;
        for (int64_t c = 0; c < classes; c++) max = fmax(max, ot_get_f64(x->data, x->dtype, b * classes + c));
        for (int64_t c = 0; c < classes; c++)
            cdf[c] = total += exp(ot_get_f64(x->data, x->dtype, b * classes + c) - max);
        if (!(total > 0 && isfinite(total)))
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "row %lld of input '%s' is not a distribution (NaN or all -inf)", (long long)b,
                                ot_ctx_input_name(ctx, 0));
        for (int64_t s = 0; s < samples; s++) {
            double target = ot_rng_uniform(rng) * total;
            int64_t lo = 0, hi = classes - 1; /* the first class whose cumulative weight exceeds target */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (cdf[mid] > target)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            ot_set_f64(y->data, dt, b * samples + s, (double)lo);
        }
    }
    return OTTER_OK;
}
