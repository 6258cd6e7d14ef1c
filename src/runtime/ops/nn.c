/* Neural-network kernels: Conv, ConvTranspose, pooling, normalization, LRN and the losses.
 *
 * Everything computes in float: float tensors directly, other float types (double, float16,
 * bfloat16) and the integer types MaxPool accepts are converted in and out. Spatial kernels treat
 * 1-D and 2-D as 3-D with leading size-1 dimensions, so one im2col / pooling loop serves all. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/core.h"
#include "ops/shape_math.h"
#include "runtime/op.h"
#include "runtime/ops/kernels.h"
#include "runtime/ops/conv_direct.h"
#include "runtime/ops/conv_geom.h"
#include "runtime/ops/im2col.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/gemm.h"

static const char *in_name(const ot_kernel_ctx *ctx, size_t i) { return ot_ctx_input_name(ctx, i); }

static bool float_like(otter_dtype t) {
    return t == OTTER_DTYPE_FLOAT || t == OTTER_DTYPE_DOUBLE || t == OTTER_DTYPE_FLOAT16 || t == OTTER_DTYPE_BFLOAT16;
}

/* Input as float: the tensor's own data for float, else a converted copy in *tmp. */
static otter_status in_f32(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, const float **out,
                           float **tmp) {
    *tmp = NULL;
    if (t->dtype == OTTER_DTYPE_FLOAT) {
        *out = t->data;
        return OTTER_OK;
    }
    int64_t n = otter_tensor_numel(t);
    float *f = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!f) return OT_NOMEM();
    if (!ot_convert(f, OTTER_DTYPE_FLOAT, t->data, t->dtype, n)) {
        ot_free(f);
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "input %zu '%s': dtype %s not supported", idx,
                            in_name(ctx, idx), otter_dtype_name(t->dtype));
    }
    *out = f;
    *tmp = f;
    return OTTER_OK;
}

/* Output buffer as float: the tensor's data for float, else a scratch buffer (*tmp) that
 * out_f32_done converts back. */
static otter_status out_f32(otter_tensor *y, float **out, float **tmp) {
    *tmp = NULL;
    if (y->dtype == OTTER_DTYPE_FLOAT) {
        *out = y->data;
        return OTTER_OK;
    }
    int64_t n = otter_tensor_numel(y);
    *tmp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!*tmp) return OT_NOMEM();
    *out = *tmp;
    return OTTER_OK;
}

static void out_f32_done(otter_tensor *y, float *tmp) {
    if (!tmp) return;
    ot_convert(y->data, y->dtype, tmp, OTTER_DTYPE_FLOAT, otter_tensor_numel(y));
    ot_free(tmp);
}

/* ---- spatial geometry (runtime/ops/conv_geom.h) ---------------------------------------------- */

/* ot_conv_geom_forward over X (N, C, spatial...); the kernel dims are in g->k already. */
static otter_status geom_forward(const ot_kernel_ctx *ctx, const otter_tensor *x, ot_conv_geom *g, bool ceil_mode) {
    g->nd = x->rank - 2;
    g->N = x->dims[0], g->C = x->dims[1];
    for (int i = 0; i < g->nd; i++) g->in[i] = x->dims[2 + i];
    return ot_conv_geom_forward(ctx, g, ceil_mode);
}

static otter_status check_x(const ot_kernel_ctx *ctx, const otter_tensor *x, int min_rank) {
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < min_rank || x->rank > 2 + OT_SP) {
        char b[128];
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' %s: expected rank %d to %d (N, C, spatial...)",
                            in_name(ctx, 0), ot_shape_str(b, sizeof b, x->rank, x->dims), min_rank, 2 + OT_SP);
    }
    return OTTER_OK;
}

/* ---- im2col / col2im (3-D) ---------------------------------------------------------------------- */

/* Valid output positions [lo, hi) along one axis for kernel tap offset off = kk*dil - pad. */

/* col[(c, kd, kh, kw)][od, oh, ow] from x[c][d][h][w] (C channels). */
static void im2col3(const float *x, int64_t C, const ot_conv_geom *g, float *col) {
    const ot_conv_window w = ot_conv_geom_window(g);
    ot_im2col(x, C, &w, col, g->out_size);
}

/* y[c][d][h][w] += col[(c, kd, kh, kw)][positions of x] for ConvTranspose: here g->in is the
 * *output* (image) size and g->out the input (column) size, as in the forward conv it inverts. */
static void col2im3(const float *col, int64_t C, const ot_conv_geom *g, float *y) {
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2], OD = g->out[0], OH = g->out[1], OW = g->out[2];
    const int64_t osz = g->out_size;
    for (int64_t c = 0; c < C; c++)
        for (int64_t kd = 0; kd < g->k[0]; kd++)
            for (int64_t kh = 0; kh < g->k[1]; kh++)
                for (int64_t kw = 0; kw < g->k[2]; kw++) {
                    const float *src = col + (((c * g->k[0] + kd) * g->k[1] + kh) * g->k[2] + kw) * osz;
                    int64_t offw = kw * g->dil[2] - g->pb[2], wlo, whi;
                    ot_conv_valid_range(offw, g->stride[2], W, OW, &wlo, &whi);
                    for (int64_t od = 0; od < OD; od++) {
                        int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0];
                        if (id < 0 || id >= D) continue;
                        for (int64_t oh = 0; oh < OH; oh++) {
                            int64_t ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1];
                            if (ih < 0 || ih >= H) continue;
                            const float *srow = src + (od * OH + oh) * OW;
                            float *dst = y + ((c * D + id) * H + ih) * W + offw;
                            for (int64_t ow = wlo; ow < whi; ow++) dst[ow * g->stride[2]] += srow[ow];
                        }
                    }
                }
}

/* ---- Conv ---------------------------------------------------------------------------------------- */

/* Work is (image, group) tasks: each im2cols its input into a column buffer (scratch planned
 * into the arena) and runs one sgemm, then an epilogue adds the bias, the fused sum input Z
 * (com.otter FusedConv) and applies the fused activation while the output block is in cache.
 * With more tasks than threads the tasks run on the session's threads (each sgemm single-threaded,
 * never oversubscribing the cores); otherwise they run one after another with threads inside the
 * sgemm. */

enum { ACT_NONE, ACT_RELU };

typedef struct conv_args {
    const ot_kernel_ctx *ctx;
    const ot_conv_geom *g;
    const float *X, *Wt, *B, *Z; /* Z: fused sum input shaped like Y, or NULL */
    float *Y;
    int64_t M, group, Cg, Mg;
    int act;
    bool direct; /* 1x1, stride 1, no pad: X is its own column matrix */
    bool inner_threads;
    float *cols;       /* n_slots column buffers of col_elems */
    int64_t col_elems; /* rows x out_size */
    int64_t n_tasks, n_slots;
    atomic_int failed;
} conv_args;

/* y[m][j] = act(y[m][j] + b[m] + z[m][j]) over rows of one task's output block. */
static void conv_epilogue(float *restrict y, const float *restrict z, const float *b, int64_t rows, int64_t osz,
                          int act) {
    const ot_v4 zero = {0, 0, 0, 0};
    for (int64_t m = 0; m < rows; m++) {
        float *restrict yr = y + m * osz;
        const float bm = b ? b[m] : 0.0f;
        const ot_v4 bv = {bm, bm, bm, bm};
        int64_t j = 0;
        if (z) {
            const float *restrict zr = z + m * osz;
            if (act == ACT_RELU) {
                for (; j + 4 <= osz; j += 4) {
                    ot_v4 v = ot_v4_load(yr + j) + bv + ot_v4_load(zr + j);
                    ot_v4_store(yr + j, (ot_v4)((ot_i4)v & (v > zero)));
                }
                for (; j < osz; j++) {
                    float v = yr[j] + bm + zr[j];
                    yr[j] = v > 0.0f ? v : 0.0f;
                }
            } else {
                for (; j + 4 <= osz; j += 4) ot_v4_store(yr + j, ot_v4_load(yr + j) + bv + ot_v4_load(zr + j));
                for (; j < osz; j++) yr[j] = yr[j] + bm + zr[j];
            }
        } else if (act == ACT_RELU) {
            for (; j + 4 <= osz; j += 4) {
                ot_v4 v = ot_v4_load(yr + j) + bv;
                ot_v4_store(yr + j, (ot_v4)((ot_i4)v & (v > zero)));
            }
            for (; j < osz; j++) {
                float v = yr[j] + bm;
                yr[j] = v > 0.0f ? v : 0.0f;
            }
        } else if (b) {
            for (; j + 4 <= osz; j += 4) ot_v4_store(yr + j, ot_v4_load(yr + j) + bv);
            for (; j < osz; j++) yr[j] += bm;
        }
    }
}

static void conv_task(conv_args *a, int64_t t, float *col) {
    const ot_conv_geom *g = a->g;
    int64_t n = t / a->group, gr = t % a->group, rows = a->Cg * g->k_size, osz = g->out_size;
    const float *xg = a->X + (n * g->C + gr * a->Cg) * g->in_size;
    float *yg = a->Y + (n * a->M + gr * a->Mg) * osz;
    if (!a->direct) im2col3(xg, a->Cg, g, col);
    if (ot_sgemm(a->inner_threads ? a->ctx : NULL, false, false, a->Mg, osz, rows, 1.0f, a->Wt + gr * a->Mg * rows,
                 rows, a->direct ? xg : col, osz, 0.0f, yg, osz) != OTTER_OK)
        atomic_store(&a->failed, 1);
    if (a->B || a->Z || a->act != ACT_NONE)
        conv_epilogue(yg, a->Z ? a->Z + (n * a->M + gr * a->Mg) * osz : NULL, a->B ? a->B + gr * a->Mg : NULL, a->Mg,
                      osz, a->act);
}

/* Slots [s0, s1): slot s runs its share of the tasks with column buffer s. */
static void conv_slots(void *arg, int64_t s0, int64_t s1) {
    conv_args *a = arg;
    for (int64_t s = s0; s < s1; s++) {
        float *col = a->direct ? NULL : a->cols + s * a->col_elems;
        for (int64_t t = s * a->n_tasks / a->n_slots; t < (s + 1) * a->n_tasks / a->n_slots; t++) conv_task(a, t, col);
    }
}

/* A com.otter fused node (sum input, pooling attributes), not a plain ONNX one. */
static bool is_fused_node(const ot_kernel_ctx *ctx) {
    return ctx->node->domain && strcmp(ctx->node->domain, "com.otter") == 0;
}

/* The fused activation of a com.otter FusedConv / FusedGemm node ("" when none). */
static otter_status fused_act(const ot_kernel_ctx *ctx, int *act) {
    const char *s = is_fused_node(ctx) ? otter_node_attr_string(ctx->node, "activation", "") : "";
    if (!s[0])
        *act = ACT_NONE;
    else if (strcmp(s, "Relu") == 0)
        *act = ACT_RELU;
    else
        return ot_ctx_error(ctx, OTTER_ERR_UNSUPPORTED, "fused activation '%s' is not supported", s);
    return OTTER_OK;
}

/* y[p][i][j] = max of x[p][2i .. 2i + 1][2j .. 2j + 1] (MaxPool 2x2, stride 2, floor), planes p. */
static void maxpool_2x2(const float *x, int64_t planes, int64_t H, int64_t W, float *y) {
    const int64_t PH = H / 2, PW = W / 2;
    for (int64_t p = 0; p < planes; p++)
        for (int64_t i = 0; i < PH; i++) {
            const float *r0 = x + (p * H + 2 * i) * W, *r1 = r0 + W;
            float *yr = y + (p * PH + i) * PW;
            for (int64_t j = 0; j < PW; j++) {
                float a = r0[2 * j] > r0[2 * j + 1] ? r0[2 * j] : r0[2 * j + 1];
                float b = r1[2 * j] > r1[2 * j + 1] ? r1[2 * j] : r1[2 * j + 1];
                yr[j] = a > b ? a : b;
            }
        }
}

static void maxpool_2x2_indices(const ot_kernel_ctx *ctx, const float *x, int64_t planes, int64_t H, int64_t W,
                                float *y, int64_t *ind);

otter_status ot_kernel_conv(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    char s1[128], s2[128];
    int act = ACT_NONE;
    OT_TRY(fused_act(ctx, &act));
    const otter_tensor *z = is_fused_node(ctx) ? ot_ctx_input(ctx, 3) : NULL;
    OT_TRY(check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of X %s", in_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims));
    if (!float_like(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and B must share one float dtype (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    if (z && (z->dtype != OTTER_DTYPE_FLOAT || x->dtype != OTTER_DTYPE_FLOAT))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' needs float X and Z (got %s, %s)",
                            in_name(ctx, 3), otter_dtype_name(x->dtype), otter_dtype_name(z->dtype));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    int nd = x->rank - 2;
    bool has;
    for (int i = 0; i < nd; i++) g.k[i] = w->dims[2 + i];
    int64_t ks[OT_SP];
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, ks, &has));
    if (has)
        for (int i = 0; i < nd; i++)
            if (ks[i] != g.k[i])
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "kernel_shape disagrees with weight '%s' %s",
                                    in_name(ctx, 1), ot_shape_str(s1, sizeof s1, w->rank, w->dims));
    OT_TRY(geom_forward(ctx, x, &g, false));
    int64_t group = otter_node_attr_int(ctx->node, "group", 1), M = w->dims[0];
    if (group < 1 || g.C % group != 0 || M % group != 0 || w->dims[1] * group != g.C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s, weight '%s' %s and group %lld don't agree",
                            in_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims), in_name(ctx, 1),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld", in_name(ctx, 2),
                            (long long)otter_tensor_numel(b), (long long)M);
    int64_t yd[2 + OT_SP] = {g.N, M};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.out[i];
    /* A fused sum input of another shape: broadcast like Add, after the conv (into scratch). */
    bool z_bcast = z && (z->rank != x->rank || memcmp(z->dims, yd, sizeof(int64_t) * (size_t)x->rank) != 0);
    int ord = x->rank;
    int64_t od[OTTER_MAX_RANK];
    memcpy(od, yd, sizeof(int64_t) * (size_t)x->rank);
    if (z_bcast && !ot_broadcast_shape2(x->rank, yd, z->rank, z->dims, &ord, od))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "fused sum input '%s' %s does not broadcast with %s",
                            in_name(ctx, 3), ot_shape_str(s1, sizeof s1, z->rank, z->dims),
                            ot_shape_str(s2, sizeof s2, x->rank, yd));
    /* com.otter FusedConv with maxpool_2x2: the result is max-pooled 2x2, stride 2 (fuse.c) */
    bool pool = is_fused_node(ctx) && otter_node_attr_int(ctx->node, "maxpool_2x2", 0) != 0;
    if (pool && (ord != 4 || x->dtype != OTTER_DTYPE_FLOAT))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "maxpool_2x2 needs a float 2-D convolution");
    int64_t pd[OTTER_MAX_RANK];
    memcpy(pd, od, sizeof(int64_t) * (size_t)ord);
    if (pool) pd[2] = od[2] / 2, pd[3] = od[3] / 2;
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, ord, pd), *ind = NULL;
    if (!y) return ctx->output_status;
    /* outputs 1 and 2 with pooling (fuse.c, from a training graph): MaxPool's Indices, the unpooled shape */
    if (pool && ctx->n_outputs > 1 && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) &&
        !(ind = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, ord, pd)))
        return ctx->output_status;
    if (pool && ctx->n_outputs > 2 && ctx->node->n_outputs > 2 && !ot_str_empty(ctx->node->outputs[2])) {
        int64_t r = ord;
        otter_tensor *sh = ot_ctx_output(ctx, 2, OTTER_DTYPE_INT64, 1, &r);
        if (!sh) return ctx->output_status;
        memcpy(sh->data, od, sizeof(int64_t) * (size_t)ord);
    }
    ot_conv_geom_to3(&g);
    if (otter_tensor_numel(y) == 0) return OTTER_OK;
    conv_args a = {.ctx = ctx, .g = &g, .M = M, .group = group, .Cg = g.C / group, .Mg = M / group, .act = act};
    atomic_init(&a.failed, 0);
    a.direct = g.k_size == 1 && g.pb[0] + g.pb[1] + g.pb[2] == 0 && g.stride[0] * g.stride[1] * g.stride[2] == 1 &&
               g.in_size == g.out_size;
    float *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL;
    otter_status s = in_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = in_f32(ctx, 1, w, &a.Wt, &tw);
    if (s == OTTER_OK && b) s = in_f32(ctx, 2, b, &a.B, &tb);
    const ot_conv_window win = ot_conv_geom_window(&g);
    const bool direct = !a.direct && ot_conv_direct_supported(&win);
    /* Y may be Z's buffer (OT_OP_INPLACE3). The direct kernel without pooling reads each element of
     * Z just before it writes that element of Y; the other paths write Y first and get a copy of Z. */
    const float *zdata = z ? z->data : NULL;
    if (s == OTTER_OK && z && z->data == y->data && !(direct && !pool && !z_bcast)) {
        float *copy = ot_ctx_scratch(ctx, otter_tensor_nbytes(z));
        if (!copy)
            s = OTTER_ERR_NOMEM;
        else
            zdata = memcpy(copy, z->data, otter_tensor_nbytes(z));
    }
    /* the unpooled result, when the direct kernel doesn't pool as it stores */
    float *full = NULL;
    if (s == OTTER_OK && pool && (!direct || z_bcast) &&
        !(full = ot_ctx_scratch(ctx, (size_t)(od[0] * od[1] * od[2] * od[3]) * sizeof(float))))
        s = OTTER_ERR_NOMEM;
    if (s == OTTER_OK && z_bcast) {
        /* conv (+ bias) into scratch; sum and activation below */
        if (!(a.Y = ot_ctx_scratch(ctx, (size_t)(g.N * M * g.out_size) * sizeof(float)))) s = OTTER_ERR_NOMEM;
        a.act = ACT_NONE;
    } else if (s == OTTER_OK) {
        if (full)
            a.Y = full;
        else
            s = out_f32(y, &a.Y, &ty);
        a.Z = zdata;
    }
    if (s == OTTER_OK && direct) {
        const ot_conv_direct d = {.x = a.X,
                                  .w = a.Wt,
                                  .bias = a.B,
                                  .sum = a.Z,
                                  .y = a.Y,
                                  .N = g.N,
                                  .C = g.C,
                                  .M = M,
                                  .group = group,
                                  .win = win,
                                  .relu = a.act == ACT_RELU,
                                  .maxpool_2x2 = pool && !full,
                                  .indices = ind && !full ? ind->data : NULL,
                                  .winograd = ctx->winograd,
                                  .constant_w = ot_ctx_input_constant(ctx, 1)};
        s = ot_conv_direct_run(ctx, &d);
    } else if (s == OTTER_OK) {
        a.n_tasks = g.N * group;
        a.inner_threads = !(ctx->n_threads > 1 && a.n_tasks >= ctx->n_threads);
        a.n_slots = a.inner_threads ? 1 : (a.n_tasks < 2 * ctx->n_threads ? a.n_tasks : 2 * ctx->n_threads);
        a.col_elems = a.Cg * g.k_size * g.out_size;
        if (!a.direct && !(a.cols = ot_ctx_scratch(ctx, (size_t)(a.n_slots * a.col_elems) * sizeof(float))))
            s = OTTER_ERR_NOMEM;
        else if (a.inner_threads)
            conv_slots(&a, 0, 1);
        else
            ot_parallel_for(ctx, a.n_slots, 1, conv_slots, &a);
        if (s == OTTER_OK && atomic_load(&a.failed)) s = OT_NOMEM();
    }
    if (s == OTTER_OK && z_bcast) {
        /* y = act(conv + z), broadcast */
        float *yo = full ? full : y->data;
        const float *zc = zdata;
        ot_bcast bc;
        const int ranks[2] = {x->rank, z->rank};
        const int64_t *dims[2] = {yd, z->dims};
        ot_bcast_init(&bc, ord, od, 2, ranks, dims);
        int64_t idx[OTTER_MAX_RANK] = {0};
        for (int64_t i = 0; i < bc.numel; i++) {
            int64_t o1 = 0, o2 = 0;
            for (int d = 0; d < bc.rank; d++) o1 += idx[d] * bc.strides[1][d], o2 += idx[d] * bc.strides[2][d];
            float v = a.Y[o1] + zc[o2];
            yo[i] = act == ACT_RELU && !(v > 0.0f) ? 0.0f : v;
            for (int d = bc.rank - 1; d >= 0 && ++idx[d] == bc.dims[d]; d--) idx[d] = 0;
        }
    }
    if (s == OTTER_OK && full && ind)
        maxpool_2x2_indices(ctx, full, od[0] * od[1], od[2], od[3], y->data, ind->data);
    else if (s == OTTER_OK && full)
        maxpool_2x2(full, od[0] * od[1], od[2], od[3], y->data);
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tw), ot_free(tb);
    return s;
}

/* ---- ConvInteger / QLinearConv: direct integer convolution ------------------------------------- */

/* acc[n][m][out] = sum (x - xzp) * (w - wzp[m]) over the receptive field, in int32. */
static void int_conv(const ot_conv_geom *g, const otter_tensor *x, const otter_tensor *w, int32_t xzp,
                     const otter_tensor *wzp, int64_t M, int64_t group, int32_t *acc) {
    int64_t Cg = g->C / group, Mg = M / group, nw = wzp ? otter_tensor_numel(wzp) : 0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t gr = m / Mg;
            int32_t zw = nw == 0 ? 0 : (int32_t)ot_get_i64(wzp->data, wzp->dtype, nw == 1 ? 0 : m);
            for (int64_t od = 0; od < g->out[0]; od++)
                for (int64_t oh = 0; oh < g->out[1]; oh++)
                    for (int64_t ow = 0; ow < g->out[2]; ow++) {
                        int32_t sum = 0;
                        for (int64_t c = 0; c < Cg; c++)
                            for (int64_t kd = 0; kd < g->k[0]; kd++) {
                                int64_t id = od * g->stride[0] - g->pb[0] + kd * g->dil[0];
                                if (id < 0 || id >= g->in[0]) continue;
                                for (int64_t kh = 0; kh < g->k[1]; kh++) {
                                    int64_t ih = oh * g->stride[1] - g->pb[1] + kh * g->dil[1];
                                    if (ih < 0 || ih >= g->in[1]) continue;
                                    for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                        int64_t iw = ow * g->stride[2] - g->pb[2] + kw * g->dil[2];
                                        if (iw < 0 || iw >= g->in[2]) continue;
                                        int64_t xi =
                                            (((n * g->C + gr * Cg + c) * g->in[0] + id) * g->in[1] + ih) * g->in[2] +
                                            iw;
                                        int64_t wi = (((m * Cg + c) * g->k[0] + kd) * g->k[1] + kh) * g->k[2] + kw;
                                        sum += ((int32_t)ot_get_i64(x->data, x->dtype, xi) - xzp) *
                                               ((int32_t)ot_get_i64(w->data, w->dtype, wi) - zw);
                                    }
                                }
                            }
                        acc[((n * M + m) * g->out[0] + od) * g->out[1] * g->out[2] + oh * g->out[2] + ow] = sum;
                    }
        }
}

/* Shared setup: x at input 0, w at input wi; output dims into yd. */
static otter_status int_conv_setup(ot_kernel_ctx *ctx, size_t wi, ot_conv_geom *g, int64_t *group, int64_t *M,
                                   int64_t *yd) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, wi);
    char s1[128], s2[128];
    OT_TRY(check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of x", in_name(ctx, wi));
    if ((x->dtype != OTTER_DTYPE_UINT8 && x->dtype != OTTER_DTYPE_INT8) ||
        (w->dtype != OTTER_DTYPE_UINT8 && w->dtype != OTTER_DTYPE_INT8))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "x and w must be int8 or uint8 (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    memset(g, 0, sizeof *g);
    int nd = x->rank - 2;
    for (int i = 0; i < nd; i++) g->k[i] = w->dims[2 + i];
    OT_TRY(geom_forward(ctx, x, g, false));
    *group = otter_node_attr_int(ctx->node, "group", 1), *M = w->dims[0];
    if (*group < 1 || g->C % *group != 0 || *M % *group != 0 || w->dims[1] * *group != g->C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "x '%s' %s, w '%s' %s and group %lld don't agree", in_name(ctx, 0),
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims), in_name(ctx, wi),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)*group);
    yd[0] = g->N, yd[1] = *M;
    for (int i = 0; i < nd; i++) yd[2 + i] = g->out[i];
    ot_conv_geom_to3(g);
    return OTTER_OK;
}

otter_status ot_kernel_convinteger(ot_kernel_ctx *ctx) {
    ot_conv_geom g;
    int64_t group = 1, M = 0, yd[2 + OT_SP];
    OT_TRY(int_conv_setup(ctx, 1, &g, &group, &M, yd));
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *xz = ot_ctx_input(ctx, 2),
                       *wz = ot_ctx_input(ctx, 3);
    otter_tensor *y = ot_ctx_output(ctx, 0, OTTER_DTYPE_INT32, x->rank, yd);
    if (!y) return ctx->output_status;
    int32_t xzp = xz && otter_tensor_numel(xz) > 0 ? (int32_t)ot_get_i64(xz->data, xz->dtype, 0) : 0;
    int_conv(&g, x, w, xzp, wz, M, group, y->data);
    return OTTER_OK;
}

otter_status ot_kernel_qlinearconv(ot_kernel_ctx *ctx) {
    for (size_t i = 0; i < 8; i++)
        if (!ot_ctx_input(ctx, i)) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu is missing", i);
    ot_conv_geom g;
    int64_t group = 1, M = 0, yd[2 + OT_SP];
    OT_TRY(int_conv_setup(ctx, 3, &g, &group, &M, yd));
    const otter_tensor *x = ot_ctx_input(ctx, 0), *xs = ot_ctx_input(ctx, 1), *xz = ot_ctx_input(ctx, 2),
                       *w = ot_ctx_input(ctx, 3), *ws = ot_ctx_input(ctx, 4), *wz = ot_ctx_input(ctx, 5),
                       *ys = ot_ctx_input(ctx, 6), *yz = ot_ctx_input(ctx, 7), *b = ot_ctx_input(ctx, 8);
    int64_t nws = otter_tensor_numel(ws);
    if (nws != 1 && nws != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "w_scale '%s' must have 1 or %lld elements", in_name(ctx, 4),
                            (long long)M);
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "B '%s' must have %lld elements", in_name(ctx, 8), (long long)M);
    otter_tensor *y = ot_ctx_output(ctx, 0, yz->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    int64_t n = otter_tensor_numel(y), osz = g.out_size;
    int32_t *acc = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!acc) return OT_NOMEM();
    int_conv(&g, x, w, (int32_t)ot_get_i64(xz->data, xz->dtype, 0), wz, M, group, acc);
    double xsc = ot_get_f64(xs->data, xs->dtype, 0), ysc = ot_get_f64(ys->data, ys->dtype, 0);
    double yzp = (double)ot_get_i64(yz->data, yz->dtype, 0);
    double lo = yz->dtype == OTTER_DTYPE_UINT8 ? 0 : -128, hi = yz->dtype == OTTER_DTYPE_UINT8 ? 255 : 127;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = (i / osz) % M;
        double v = (double)acc[i] + (b ? (double)ot_get_i64(b->data, b->dtype, m) : 0.0);
        v = nearbyint(v * xsc * ot_get_f64(ws->data, ws->dtype, nws == 1 ? 0 : m) / ysc) + yzp;
        ot_set_f64(y->data, y->dtype, i, v < lo ? lo : v > hi ? hi : v);
    }
    ot_free(acc);
    return OTTER_OK;
}

/* ---- MaxUnpool ------------------------------------------------------------------------------------ */

otter_status ot_kernel_maxunpool(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *ind = ot_ctx_input(ctx, 1), *os = ot_ctx_input(ctx, 2);
    OT_TRY(check_x(ctx, x, 3));
    if (!ind || ind->dtype != OTTER_DTYPE_INT64 || otter_tensor_numel(ind) != otter_tensor_numel(x))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' must be int64 with the shape of X", in_name(ctx, 1));
    int nd = x->rank - 2;
    int64_t k[OT_SP], st[OT_SP], pads[2 * OT_SP] = {0}, yd[2 + OT_SP] = {x->dims[0], x->dims[1]};
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    for (int i = 0; i < nd; i++) st[i] = 1;
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", nd, st, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * nd, pads, &has));
    for (int i = 0; i < nd; i++) yd[2 + i] = (x->dims[2 + i] - 1) * st[i] + k[i] - pads[i] - pads[nd + i];
    int64_t dd[2 + OT_SP]; /* the default shape: indices are positions in it */
    memcpy(dd, yd, sizeof dd);
    if (os) {
        int64_t n;
        OT_TRY(ot_ctx_input_ints(ctx, 2, yd, 2 + OT_SP, &n));
        if (n != x->rank)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output_shape '%s' must have %d values", in_name(ctx, 2),
                                x->rank);
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    int64_t ny = otter_tensor_numel(y), nx = otter_tensor_numel(x);
    size_t es = otter_dtype_size(x->dtype);
    memset(y->data, 0, (size_t)ny * es);
    const int64_t *I = ind->data;
    int64_t nd_total = 1;
    for (int i = 0; i < x->rank; i++) nd_total *= dd[i];
    for (int64_t i = 0; i < nx; i++) {
        int64_t q = I[i], o = 0, mul = 1;
        if (q < 0 || q >= nd_total)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "indices '%s' value %lld out of range [0, %lld)",
                                in_name(ctx, 1), (long long)q, (long long)nd_total);
        for (int d = x->rank - 1; d >= 0; d--) {
            o += (q % dd[d]) * mul;
            q /= dd[d];
            mul *= yd[d];
        }
        if (o >= ny) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "output_shape is smaller than the pooled input");
        memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)i * es, es);
    }
    return OTTER_OK;
}

static double cubic_coef(double t) {
    const double A = -0.75;
    t = fabs(t);
    if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
    if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
    return 0;
}

/* ---- GridSample (opset 16, 4-D) ----------------------------------------------------------------- */

static double gs_reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        double dx = lo - x, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi, n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? hi - r : lo + r;
    }
    return x;
}

/* pad: 0 zeros, 1 border, 2 reflection */
static float gs_pixel(const float *img, int64_t H, int64_t W, int64_t y, int64_t x, int pad) {
    if (pad == 0) return (x < 0 || x >= W || y < 0 || y >= H) ? 0.0f : img[y * W + x];
    x = x < 0 ? 0 : x >= W ? W - 1 : x;
    y = y < 0 ? 0 : y >= H ? H - 1 : y;
    return img[y * W + x];
}

otter_status ot_kernel_gridsample(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *grid = ot_ctx_input(ctx, 1);
    char s1[128], s2[128];
    if (!x || !grid) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs X and grid");
    if (x->rank != 4 || grid->rank != 4 || grid->dims[0] != x->dims[0] || grid->dims[3] != 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s must be (N,C,H,W) and grid '%s' %s (N,Ho,Wo,2)",
                            in_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims), in_name(ctx, 1),
                            ot_shape_str(s2, sizeof s2, grid->rank, grid->dims));
    const char *ms = otter_node_attr_string(ctx->node, "mode", "bilinear");
    const char *ps = otter_node_attr_string(ctx->node, "padding_mode", "zeros");
    int mode = strcmp(ms, "bilinear") == 0 ? 0 : strcmp(ms, "nearest") == 0 ? 1 : strcmp(ms, "bicubic") == 0 ? 2 : -1;
    int pad = strcmp(ps, "zeros") == 0 ? 0 : strcmp(ps, "border") == 0 ? 1 : strcmp(ps, "reflection") == 0 ? 2 : -1;
    if (mode < 0 || pad < 0)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown mode '%s' or padding_mode '%s'", ms, ps);
    bool ac = otter_node_attr_int(ctx->node, "align_corners", 0) != 0;
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], Ho = grid->dims[1], Wo = grid->dims[2];
    int64_t yd[4] = {N, C, Ho, Wo};
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, 4, yd);
    if (!y) return ctx->output_status;
    const float *X, *G;
    float *tx = NULL, *tg = NULL, *ty = NULL, *Y = NULL;
    otter_status s = in_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = in_f32(ctx, 1, grid, &G, &tg);
    if (s == OTTER_OK) s = out_f32(y, &Y, &ty);
    double xlo = ac ? 0 : -0.5, xhi = ac ? (double)W - 1 : (double)W - 0.5;
    double ylo = ac ? 0 : -0.5, yhi = ac ? (double)H - 1 : (double)H - 0.5;
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t i = 0; i < Ho * Wo; i++) {
            double gx = G[(n * Ho * Wo + i) * 2], gy = G[(n * Ho * Wo + i) * 2 + 1];
            double px = ac ? (gx + 1) / 2 * (double)(W - 1) : ((gx + 1) * (double)W - 1) / 2;
            double py = ac ? (gy + 1) / 2 * (double)(H - 1) : ((gy + 1) * (double)H - 1) / 2;
            if (pad == 1 && mode != 2) {
                px = px < 0 ? 0 : px > (double)(W - 1) ? (double)(W - 1) : px;
                py = py < 0 ? 0 : py > (double)(H - 1) ? (double)(H - 1) : py;
            } else if (pad == 2) {
                px = gs_reflect(px, xlo, xhi);
                py = gs_reflect(py, ylo, yhi);
            }
            for (int64_t c = 0; c < C; c++) {
                const float *img = X + (n * C + c) * H * W;
                double v;
                if (mode == 1) {
                    v = gs_pixel(img, H, W, (int64_t)nearbyint(py), (int64_t)nearbyint(px), pad);
                } else if (mode == 0) {
                    int64_t x0 = (int64_t)floor(px), y0 = (int64_t)floor(py);
                    double fx = px - (double)x0, fy = py - (double)y0;
                    v = (1 - fy) *
                            ((1 - fx) * gs_pixel(img, H, W, y0, x0, pad) + fx * gs_pixel(img, H, W, y0, x0 + 1, pad)) +
                        fy * ((1 - fx) * gs_pixel(img, H, W, y0 + 1, x0, pad) +
                              fx * gs_pixel(img, H, W, y0 + 1, x0 + 1, pad));
                } else {
                    int64_t x0 = (int64_t)floor(px) - 1, y0 = (int64_t)floor(py) - 1;
                    double fx = px - floor(px), fy = py - floor(py), wx[4], wy[4];
                    for (int k = 0; k < 4; k++) wx[k] = cubic_coef(fx - (k - 1)), wy[k] = cubic_coef(fy - (k - 1));
                    v = 0;
                    for (int a = 0; a < 4; a++)
                        for (int b = 0; b < 4; b++) v += wy[a] * wx[b] * gs_pixel(img, H, W, y0 + a, x0 + b, pad);
                }
                Y[((n * C + c) * Ho * Wo) + i] = (float)v;
            }
        }
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tg);
    return s;
}

/* ---- ConvTranspose ---------------------------------------------------------------------------- */

otter_status ot_kernel_convtranspose(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *w = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    char s1[128], s2[128];
    OT_TRY(check_x(ctx, x, 3));
    if (!w || w->rank != x->rank)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' must have the rank of X %s", in_name(ctx, 1),
                            ot_shape_str(s1, sizeof s1, x->rank, x->dims));
    if (!float_like(x->dtype) || w->dtype != x->dtype || (b && b->dtype != x->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X, W and B must share one float dtype (got %s, %s)",
                            otter_dtype_name(x->dtype), otter_dtype_name(w->dtype));
    int nd = x->rank - 2;
    int64_t group = otter_node_attr_int(ctx->node, "group", 1), C = x->dims[1], N = x->dims[0];
    if (group < 1 || C % group != 0 || w->dims[0] != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "X '%s' %s, weight '%s' %s and group %lld don't agree",
                            in_name(ctx, 0), ot_shape_str(s1, sizeof s1, x->rank, x->dims), in_name(ctx, 1),
                            ot_shape_str(s2, sizeof s2, w->rank, w->dims), (long long)group);
    int64_t Mg = w->dims[1], M = Mg * group, Cg = C / group;
    /* g describes the equivalent forward conv: g.in = our output (image), g.out = our input. */
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nd = nd;
    bool has;
    int64_t pads[2 * OT_SP] = {0}, oshape[OT_SP];
    for (int i = 0; i < nd; i++) {
        g.k[i] = w->dims[2 + i], g.stride[i] = 1, g.dil[i] = 1, g.opad[i] = 0;
        g.out[i] = x->dims[2 + i];
    }
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", nd, g.stride, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "dilations", nd, g.dil, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "output_padding", nd, g.opad, &has));
    bool has_pads;
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * nd, pads, &has_pads));
    bool has_oshape;
    const otter_attr *osa = otter_node_attr(ctx->node, "output_shape");
    has_oshape = osa && osa->n_ints > 0;
    if (has_oshape) {
        if ((int)osa->n_ints != nd && (int)osa->n_ints != nd + 2)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'output_shape' has %zu values, expected %d",
                                osa->n_ints, nd);
        for (int i = 0; i < nd; i++) oshape[i] = osa->ints[osa->n_ints - (size_t)nd + (size_t)i];
    }
    ot_auto_pad pad = ot_auto_pad_from(otter_node_attr_string(ctx->node, "auto_pad", "NOTSET"));
    for (int i = 0; i < nd; i++) {
        g.pb[i] = pads[i], g.pe[i] = pads[nd + i];
        ot_window_status ws =
            ot_window_transpose_axis(g.out[i], g.k[i], g.stride[i], g.dil[i], g.opad[i], pad,
                                     has_oshape ? oshape[i] : -1, has_pads, &g.pb[i], &g.pe[i], &g.in[i]);
        if (ws == OT_WINDOW_BAD_PARAM)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "invalid stride/dilation along spatial axis %d", i);
        if (ws == OT_WINDOW_TOO_SMALL)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "negative output size along spatial axis %d", i);
    }
    if (b && otter_tensor_numel(b) != M)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "bias '%s' has %lld elements, expected %lld", in_name(ctx, 2),
                            (long long)otter_tensor_numel(b), (long long)M);
    int64_t yd[2 + OT_SP] = {N, M};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.in[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    ot_conv_geom_to3(&g);
    const float *X, *Wt, *B = NULL;
    float *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL, *Y, *col = NULL;
    otter_status s = in_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = in_f32(ctx, 1, w, &Wt, &tw);
    if (s == OTTER_OK && b) s = in_f32(ctx, 2, b, &B, &tb);
    if (s == OTTER_OK) s = out_f32(y, &Y, &ty);
    int64_t rows = Mg * g.k_size, isz = g.out_size, osz = g.in_size;
    if (s == OTTER_OK && !(col = ot_malloc((size_t)(rows * isz > 0 ? rows * isz : 1) * sizeof(float)))) s = OT_NOMEM();
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t gr = 0; s == OTTER_OK && gr < group; gr++) {
            float *yg = Y + (n * M + gr * Mg) * osz;
            for (int64_t m = 0; m < Mg; m++) {
                float bv = B ? B[gr * Mg + m] : 0.0f;
                for (int64_t j = 0; j < osz; j++) yg[m * osz + j] = bv;
            }
            /* col (Mg*k x isz) = W_g^T (Mg*k x Cg) * X_g (Cg x isz) */
            s = ot_sgemm(ctx, true, false, rows, isz, Cg, 1.0f, Wt + gr * Cg * rows, rows, X + (n * C + gr * Cg) * isz,
                         isz, 0.0f, col, isz);
            if (s == OTTER_OK) col2im3(col, Mg, &g, yg);
        }
    ot_free(col);
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx), ot_free(tw), ot_free(tb);
    return s;
}

/* ---- pooling -------------------------------------------------------------------------------------- */

enum { POOL_MAX, POOL_AVG, POOL_LP };

typedef struct pool_args {
    const ot_conv_geom *g;
    int kind;
    const float *X;
    float *Y;
    int64_t *I; /* MaxPool indices or NULL */
    bool include_pad, col_major;
    float p;
} pool_args;

/* 2-D max / average pooling without dilation or indices: clipped windows, no per-tap tests. */
static void pool2d_fast(pool_args *a, int64_t p0, int64_t p1) {
    const ot_conv_geom *g = a->g;
    const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], kh = g->k[1], kw = g->k[2];
    const int64_t sh = g->stride[1], sw = g->stride[2], ph = g->pb[1], pw = g->pb[2];
    const bool max = a->kind == POOL_MAX;
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        float *y = a->Y + pl * g->out_size;
        if (max && kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && OH * 2 <= H && OW * 2 <= W) {
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *r0 = x + 2 * oh * W, *r1 = r0 + W;
                float *yr = y + oh * OW;
                for (int64_t ow = 0; ow < OW; ow++) {
                    float m0 = r0[2 * ow] > r0[2 * ow + 1] ? r0[2 * ow] : r0[2 * ow + 1];
                    float m1 = r1[2 * ow] > r1[2 * ow + 1] ? r1[2 * ow] : r1[2 * ow + 1];
                    yr[ow] = m0 > m1 ? m0 : m1;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t hs = oh * sh - ph, he = hs + kh, hp = he < H + g->pe[1] ? he : H + g->pe[1];
            if (he > H) he = H;
            int64_t cnt_h = hp - hs;
            if (hs < 0) hs = 0;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t ws = ow * sw - pw, we = ws + kw, wp = we < W + g->pe[2] ? we : W + g->pe[2];
                if (we > W) we = W;
                int64_t cnt_w = wp - ws;
                if (ws < 0) ws = 0;
                float acc = max ? -INFINITY : 0.0f;
                for (int64_t ih = hs; ih < he; ih++) {
                    const float *r = x + ih * W;
                    if (max)
                        for (int64_t iw = ws; iw < we; iw++) acc = r[iw] > acc ? r[iw] : acc;
                    else
                        for (int64_t iw = ws; iw < we; iw++) acc += r[iw];
                }
                if (max) {
                    y[oh * OW + ow] = acc;
                } else {
                    int64_t c = a->include_pad ? cnt_h * cnt_w : (he - hs) * (we - ws);
                    y[oh * OW + ow] = c > 0 ? acc / (float)c : 0.0f;
                }
            }
        }
    }
}

static void pool_planes(void *arg, int64_t p0, int64_t p1) {
    pool_args *a = arg;
    const ot_conv_geom *g = a->g;
    if (g->nd == 2 && !a->I && a->kind != POOL_LP && g->dil[1] == 1 && g->dil[2] == 1) {
        pool2d_fast(a, p0, p1);
        return;
    }
    const int64_t D = g->in[0], H = g->in[1], W = g->in[2];
    if (g->nd == 2 && a->I && !a->col_major && a->kind == POOL_MAX && g->k[1] == 2 && g->k[2] == 2 &&
        g->stride[1] == 2 && g->stride[2] == 2 && g->dil[1] == 1 && g->dil[2] == 1 && g->pb[1] == 0 && g->pb[2] == 0 &&
        g->out[1] * 2 <= H && g->out[2] * 2 <= W) {
        /* 2x2 stride 2 with indices (training): the general loop's scan order and ties (first max).
         * The winning tap's offset is chosen with masks: GCC turns selects of it into branches, which
         * mispredict (the winner is data-dependent) and keep the loop from vectorizing. */
        const int64_t OH = g->out[1], OW = g->out[2];
        for (int64_t pl = p0; pl < p1; pl++)
            for (int64_t oh = 0; oh < OH; oh++) {
                const float *restrict r0 = a->X + pl * g->in_size + 2 * oh * W, *restrict r1 = r0 + W;
                float *restrict y = a->Y + pl * g->out_size + oh * OW;
                int64_t *restrict ind = a->I + pl * g->out_size + oh * OW;
                const int64_t row = pl * g->in_size + 2 * oh * W;
                for (int64_t ow = 0; ow < OW; ow++) {
                    float v0 = r0[2 * ow], v1 = r0[2 * ow + 1], v2 = r1[2 * ow], v3 = r1[2 * ow + 1], acc = v0;
                    int64_t best = 0, m;
                    m = -(int64_t)(v1 > acc), acc = v1 > acc ? v1 : acc, best = (best & ~m) | (1 & m);
                    m = -(int64_t)(v2 > acc), acc = v2 > acc ? v2 : acc, best = (best & ~m) | (W & m);
                    m = -(int64_t)(v3 > acc), acc = v3 > acc ? v3 : acc, best = (best & ~m) | ((W + 1) & m);
                    y[ow] = acc;
                    ind[ow] = row + 2 * ow + best;
                }
            }
        return;
    }
    for (int64_t pl = p0; pl < p1; pl++) {
        const float *x = a->X + pl * g->in_size;
        float *y = a->Y + pl * g->out_size;
        int64_t *ind = a->I ? a->I + pl * g->out_size : NULL;
        for (int64_t od = 0; od < g->out[0]; od++)
            for (int64_t oh = 0; oh < g->out[1]; oh++)
                for (int64_t ow = 0; ow < g->out[2]; ow++) {
                    int64_t s0 = od * g->stride[0] - g->pb[0], s1 = oh * g->stride[1] - g->pb[1],
                            s2 = ow * g->stride[2] - g->pb[2];
                    float acc = a->kind == POOL_MAX ? -INFINITY : 0.0f;
                    int64_t best = -1, cnt = 0, cnt_pad = 0;
                    for (int64_t kd = 0; kd < g->k[0]; kd++) {
                        int64_t id = s0 + kd * g->dil[0];
                        bool okd = id >= 0 && id < D;
                        if (id >= D + g->pe[0]) continue;
                        for (int64_t kh = 0; kh < g->k[1]; kh++) {
                            int64_t ih = s1 + kh * g->dil[1];
                            bool okh = okd && ih >= 0 && ih < H;
                            if (ih >= H + g->pe[1]) continue;
                            for (int64_t kw = 0; kw < g->k[2]; kw++) {
                                int64_t iw = s2 + kw * g->dil[2];
                                if (iw >= W + g->pe[2]) continue;
                                cnt_pad++;
                                if (!okh || iw < 0 || iw >= W) continue;
                                int64_t off = (id * H + ih) * W + iw;
                                float v = x[off];
                                cnt++;
                                if (a->kind == POOL_MAX) {
                                    if (v > acc || best < 0) acc = v, best = off;
                                } else if (a->kind == POOL_AVG) {
                                    acc += v;
                                } else {
                                    acc += powf(fabsf(v), a->p);
                                }
                            }
                        }
                    }
                    int64_t o = (od * g->out[1] + oh) * g->out[2] + ow;
                    if (a->kind == POOL_MAX) {
                        y[o] = acc;
                        if (ind) {
                            int64_t bi = best < 0 ? 0 : best;
                            if (a->col_major) { /* (h, w) -> h + w * H (2-D), general: reversed strides */
                                int64_t bw = bi % W, bh = (bi / W) % H, bd = bi / (W * H);
                                bi = bd + bh * D + bw * D * H;
                                if (g->nd == 2) bi = bh + bw * H;
                            }
                            ind[o] = pl * g->in_size + bi;
                        }
                    } else if (a->kind == POOL_AVG) {
                        int64_t c = a->include_pad ? cnt_pad : cnt;
                        y[o] = c ? acc / (float)c : 0.0f;
                    } else {
                        y[o] = powf(acc, 1.0f / a->p);
                    }
                }
    }
}

/* MaxPool 2x2, stride 2, floor with Indices over planes of H x W, by the MaxPool kernel's loop. */
static void maxpool_2x2_indices(const ot_kernel_ctx *ctx, const float *x, int64_t planes, int64_t H, int64_t W,
                                float *y, int64_t *ind) {
    ot_conv_geom g = {.nd = 2, .in = {H, W}, .k = {2, 2}, .out = {H / 2, W / 2}, .stride = {2, 2}, .dil = {1, 1}};
    ot_conv_geom_to3(&g);
    pool_args a = {.g = &g, .kind = POOL_MAX, .X = x, .Y = y, .I = ind};
    ot_parallel_for(ctx, planes, 1 + 4096 / (g.out_size * g.k_size + 1), pool_planes, &a);
}

static otter_status pool_common(ot_kernel_ctx *ctx, int kind) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(check_x(ctx, x, 3));
    bool int_ok = kind == POOL_MAX && (x->dtype == OTTER_DTYPE_UINT8 || x->dtype == OTTER_DTYPE_INT8);
    if (!float_like(x->dtype) && !int_ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': dtype %s not supported", in_name(ctx, 0),
                            otter_dtype_name(x->dtype));
    ot_conv_geom g;
    memset(&g, 0, sizeof g);
    int nd = x->rank - 2;
    bool has;
    OT_TRY(ot_ctx_ints_attr(ctx, "kernel_shape", nd, g.k, &has));
    if (!has) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'kernel_shape' is missing");
    bool ceil_mode = otter_node_attr_int(ctx->node, "ceil_mode", 0) != 0;
    OT_TRY(geom_forward(ctx, x, &g, ceil_mode));
    if (kind != POOL_MAX)
        for (int i = 0; i < nd; i++) g.dil[i] = g.dil[i] ? g.dil[i] : 1;
    int64_t yd[2 + OT_SP] = {g.N, g.C};
    for (int i = 0; i < nd; i++) yd[2 + i] = g.out[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    otter_tensor *ind = NULL;
    if (kind == POOL_MAX && ctx->n_outputs > 1 && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1])) {
        ind = ot_ctx_output(ctx, 1, OTTER_DTYPE_INT64, x->rank, yd);
        if (!ind) return ctx->output_status;
    }
    ot_conv_geom_to3(&g);
    pool_args a = {.g = &g,
                   .kind = kind,
                   .I = ind ? ind->data : NULL,
                   .include_pad = otter_node_attr_int(ctx->node, "count_include_pad", 0) != 0,
                   .col_major = otter_node_attr_int(ctx->node, "storage_order", 0) != 0,
                   .p = 2.0f};
    const otter_attr *pa = otter_node_attr(ctx->node, "p");
    if (pa) a.p = pa->type == OTTER_ATTR_FLOAT ? pa->f : (float)pa->i;
    float *tx = NULL, *ty = NULL;
    otter_status s = in_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = out_f32(y, &a.Y, &ty);
    if (s == OTTER_OK) ot_parallel_for(ctx, g.N * g.C, 1 + 4096 / (g.out_size * g.k_size + 1), pool_planes, &a);
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}

otter_status ot_kernel_maxpool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_MAX); }
otter_status ot_kernel_averagepool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_AVG); }
otter_status ot_kernel_lppool(ot_kernel_ctx *ctx) { return pool_common(ctx, POOL_LP); }

typedef struct gpool_args {
    const float *X;
    float *Y;
    int64_t sp;
    bool max;
} gpool_args;

static void gpool_planes(void *arg, int64_t p0, int64_t p1) {
    gpool_args *a = arg;
    for (int64_t p = p0; p < p1; p++) {
        const float *x = a->X + p * a->sp;
        if (a->max) {
            float m = -INFINITY;
            for (int64_t i = 0; i < a->sp; i++) m = x[i] > m ? x[i] : m;
            a->Y[p] = m;
        } else {
            double s = 0;
            for (int64_t i = 0; i < a->sp; i++) s += x[i];
            a->Y[p] = (float)(s / (double)a->sp);
        }
    }
}

static otter_status global_pool(ot_kernel_ctx *ctx, bool max) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < 2) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", in_name(ctx, 0));
    int64_t yd[OTTER_MAX_RANK];
    gpool_args a = {.sp = 1, .max = max};
    for (int i = 0; i < x->rank; i++) {
        yd[i] = i < 2 ? x->dims[i] : 1;
        if (i >= 2) a.sp *= x->dims[i];
    }
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, yd);
    if (!y) return ctx->output_status;
    float *tx = NULL, *ty = NULL;
    otter_status s = in_f32(ctx, 0, x, &a.X, &tx);
    if (s == OTTER_OK) s = out_f32(y, &a.Y, &ty);
    if (s == OTTER_OK) ot_parallel_for(ctx, x->dims[0] * x->dims[1], 1 + 16384 / (a.sp + 1), gpool_planes, &a);
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}

otter_status ot_kernel_globalaveragepool(ot_kernel_ctx *ctx) { return global_pool(ctx, false); }
otter_status ot_kernel_globalmaxpool(ot_kernel_ctx *ctx) { return global_pool(ctx, true); }

/* ---- BatchNormalization / InstanceNormalization ------------------------------------------------ */

typedef struct bn_args {
    const float *X, *scale, *bias, *mean, *var;
    float *Y;
    int64_t C, sp;
    float eps;
} bn_args;

static void bn_planes(void *arg, int64_t p0, int64_t p1) {
    bn_args *a = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % a->C;
        float k = a->scale[c] / sqrtf(a->var[c] + a->eps), sh = a->bias[c] - a->mean[c] * k;
        const float *x = a->X + p * a->sp;
        float *y = a->Y + p * a->sp;
        for (int64_t i = 0; i < a->sp; i++) y[i] = x[i] * k + sh;
    }
}

otter_status ot_kernel_batchnorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    if (!x) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input X is missing");
    if (x->rank < 2) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", in_name(ctx, 0));
    int64_t N = x->dims[0], C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    const char *names[4] = {"scale", "B", "input_mean", "input_var"};
    for (size_t i = 1; i <= 4; i++) {
        const otter_tensor *t = ot_ctx_input(ctx, i);
        if (!t) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s is missing", names[i - 1]);
        if (otter_tensor_numel(t) != C)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %s '%s' has %lld elements, expected C = %lld",
                                names[i - 1], in_name(ctx, i), (long long)otter_tensor_numel(t), (long long)C);
    }
    bool training = ctx->opset >= 14 ? otter_node_attr_int(ctx->node, "training_mode", 0) != 0
                                     : (ctx->node->n_outputs > 1 && otter_node_attr_int(ctx->node, "is_test", 0) == 0);
    bn_args a = {.C = C, .sp = sp, .eps = otter_node_attr_float(ctx->node, "epsilon", 1e-5f)};
    float momentum = otter_node_attr_float(ctx->node, "momentum", 0.9f);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    float *tmp[5] = {0}, *ty = NULL, *bm = NULL, *bv = NULL;
    const float *in[5];
    otter_status s = OTTER_OK;
    for (size_t i = 0; s == OTTER_OK && i < 5; i++) s = in_f32(ctx, i, ot_ctx_input(ctx, i), &in[i], &tmp[i]);
    if (s == OTTER_OK) s = out_f32(y, &a.Y, &ty);
    a.X = in[0], a.scale = in[1], a.bias = in[2], a.mean = in[3], a.var = in[4];
    if (s == OTTER_OK && training) {
        bm = ot_calloc((size_t)C, sizeof(float)), bv = ot_calloc((size_t)C, sizeof(float));
        if (!bm || !bv) s = OT_NOMEM();
        for (int64_t c = 0; s == OTTER_OK && c < C; c++) {
            double sum = 0, sq = 0, cnt = (double)(N * sp);
            for (int64_t n = 0; n < N; n++) {
                const float *xp = in[0] + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) sum += xp[i];
            }
            double mu = cnt > 0 ? sum / cnt : 0;
            for (int64_t n = 0; n < N; n++) {
                const float *xp = in[0] + (n * C + c) * sp;
                for (int64_t i = 0; i < sp; i++) sq += (xp[i] - mu) * (xp[i] - mu);
            }
            bm[c] = (float)mu, bv[c] = (float)(cnt > 0 ? sq / cnt : 0);
        }
        a.mean = bm, a.var = bv;
    }
    if (s == OTTER_OK) ot_parallel_for(ctx, N * C, 1 + 16384 / (sp + 1), bn_planes, &a);
    if (s == OTTER_OK && training) {
        /* outputs 1, 2: running mean / var; (opset < 14) 3, 4: saved mean / var */
        for (size_t o = 1; s == OTTER_OK && o < ctx->node->n_outputs && o < 5; o++) {
            if (ot_str_empty(ctx->node->outputs[o])) continue;
            otter_tensor *t = ot_ctx_output(ctx, o, x->dtype, 1, &C);
            if (!t) {
                s = ctx->output_status;
                break;
            }
            float *v = ot_malloc((size_t)C * sizeof(float));
            if (!v) {
                s = OT_NOMEM();
                break;
            }
            for (int64_t c = 0; c < C; c++) {
                if (o == 1) v[c] = in[3][c] * momentum + bm[c] * (1 - momentum);
                if (o == 2) v[c] = in[4][c] * momentum + bv[c] * (1 - momentum);
                if (o == 3) v[c] = bm[c];
                if (o == 4) v[c] = bv[c];
            }
            ot_convert(t->data, t->dtype, v, OTTER_DTYPE_FLOAT, C);
            ot_free(v);
        }
    }
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    for (int i = 0; i < 5; i++) ot_free(tmp[i]);
    ot_free(bm), ot_free(bv);
    return s;
}

typedef struct inorm_args {
    const float *X, *scale, *bias;
    float *Y;
    int64_t C, sp;
    float eps;
} inorm_args;

static void inorm_planes(void *arg, int64_t p0, int64_t p1) {
    inorm_args *a = arg;
    for (int64_t p = p0; p < p1; p++) {
        int64_t c = p % a->C;
        const float *x = a->X + p * a->sp;
        float *y = a->Y + p * a->sp;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < a->sp; i++) sum += x[i];
        double mu = sum / (double)a->sp;
        for (int64_t i = 0; i < a->sp; i++) sq += (x[i] - mu) * (x[i] - mu);
        float k = a->scale[c] / sqrtf((float)(sq / (double)a->sp) + a->eps);
        float sh = a->bias[c] - (float)mu * k;
        for (int64_t i = 0; i < a->sp; i++) y[i] = x[i] * k + sh;
    }
}

otter_status ot_kernel_instancenorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *sc = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    if (!x || !sc || !b) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs input, scale and B");
    if (x->rank < 3) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", in_name(ctx, 0));
    int64_t C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    if (otter_tensor_numel(sc) != C || otter_tensor_numel(b) != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "scale '%s' and B '%s' must have C = %lld elements",
                            in_name(ctx, 1), in_name(ctx, 2), (long long)C);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    inorm_args a = {.C = C, .sp = sp, .eps = otter_node_attr_float(ctx->node, "epsilon", 1e-5f)};
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL;
    otter_status s = in_f32(ctx, 0, x, &a.X, &t0);
    if (s == OTTER_OK) s = in_f32(ctx, 1, sc, &a.scale, &t1);
    if (s == OTTER_OK) s = in_f32(ctx, 2, b, &a.bias, &t2);
    if (s == OTTER_OK) s = out_f32(y, &a.Y, &ty);
    if (s == OTTER_OK && sp > 0) ot_parallel_for(ctx, x->dims[0] * C, 1 + 8192 / (sp + 1), inorm_planes, &a);
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(t0), ot_free(t1), ot_free(t2);
    return s;
}

/* ---- LayerNormalization (opset 17) -------------------------------------------------------------- */

typedef struct lnorm_args {
    const float *X, *scale, *bias;
    const int64_t *sidx, *bidx; /* broadcast index maps over the normalized block (NULL: identity) */
    float *Y, *mean, *inv;
    int64_t inner;
    float eps;
} lnorm_args;

static void lnorm_rows(void *arg, int64_t r0, int64_t r1) {
    lnorm_args *a = arg;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = a->X + r * a->inner;
        float *y = a->Y + r * a->inner;
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < a->inner; i++) sum += x[i];
        double mu = sum / (double)a->inner;
        for (int64_t i = 0; i < a->inner; i++) sq += (x[i] - mu) * (x[i] - mu);
        float inv = 1.0f / sqrtf((float)(sq / (double)a->inner) + a->eps);
        if (a->mean) a->mean[r] = (float)mu;
        if (a->inv) a->inv[r] = inv;
        for (int64_t i = 0; i < a->inner; i++) {
            float v = ((float)(x[i] - mu)) * inv * a->scale[a->sidx ? a->sidx[i] : i];
            if (a->bias) v += a->bias[a->bidx ? a->bidx[i] : i];
            y[i] = v;
        }
    }
}

/* Index map of a tensor broadcast (right-aligned) to the normalized dims; NULL when identity. */
static otter_status bcast_map(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, int nr, const int64_t *nd,
                              int64_t inner, int64_t **map) {
    *map = NULL;
    if (t->rank == nr && otter_tensor_numel(t) == inner) {
        bool same = true;
        for (int i = 0; i < nr; i++) same &= t->dims[i] == nd[i];
        if (same) return OTTER_OK;
    }
    if (t->rank > nr) goto bad;
    for (int i = 0; i < t->rank; i++) {
        int64_t d = t->dims[t->rank - 1 - i];
        if (d != 1 && d != nd[nr - 1 - i]) goto bad;
    }
    *map = ot_malloc((size_t)(inner > 0 ? inner : 1) * sizeof(int64_t));
    if (!*map) return OT_NOMEM();
    for (int64_t e = 0; e < inner; e++) {
        int64_t r = e, off = 0, st = 1;
        for (int i = 0; i < nr; i++) {
            int64_t d = nd[nr - 1 - i], xi = r % d;
            r /= d;
            if (i < t->rank) {
                int64_t td = t->dims[t->rank - 1 - i];
                off += (td == 1 ? 0 : xi) * st;
                st *= td;
            }
        }
        (*map)[e] = off;
    }
    return OTTER_OK;
bad : {
    char b[128];
    return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' %s does not broadcast to the normalized shape", idx,
                        in_name(ctx, idx), ot_shape_str(b, sizeof b, t->rank, t->dims));
}
}

otter_status ot_kernel_layernorm(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0), *sc = ot_ctx_input(ctx, 1), *b = ot_ctx_input(ctx, 2);
    if (!x || !sc) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs X and Scale");
    int64_t axis = otter_node_attr_int(ctx->node, "axis", -1);
    if (!ot_norm_axis(&axis, x->rank))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "axis %lld out of range for input '%s' of rank %d", (long long)axis,
                            in_name(ctx, 0), x->rank);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < x->rank; i++) *(i < axis ? &outer : &inner) *= x->dims[i];
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t sd[OTTER_MAX_RANK];
    for (int i = 0; i < x->rank; i++) sd[i] = i < axis ? x->dims[i] : 1;
    otter_tensor *tm = NULL, *ti = NULL;
    otter_dtype st = OTTER_DTYPE_FLOAT;
    if (otter_node_attr_int(ctx->node, "stash_type", 1) != 1) st = x->dtype;
    if (ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1]) &&
        !(tm = ot_ctx_output(ctx, 1, st, x->rank, sd)))
        return ctx->output_status;
    if (ctx->node->n_outputs > 2 && !ot_str_empty(ctx->node->outputs[2]) &&
        !(ti = ot_ctx_output(ctx, 2, st, x->rank, sd)))
        return ctx->output_status;
    lnorm_args a = {.inner = inner, .eps = otter_node_attr_float(ctx->node, "epsilon", 1e-5f)};
    int64_t *smap = NULL, *bmap = NULL;
    float *t0 = NULL, *t1 = NULL, *t2 = NULL, *ty = NULL, *tmean = NULL, *tinv = NULL;
    otter_status s = bcast_map(ctx, 1, sc, x->rank - (int)axis, x->dims + axis, inner, &smap);
    if (s == OTTER_OK && b) s = bcast_map(ctx, 2, b, x->rank - (int)axis, x->dims + axis, inner, &bmap);
    if (s == OTTER_OK) s = in_f32(ctx, 0, x, &a.X, &t0);
    if (s == OTTER_OK) s = in_f32(ctx, 1, sc, &a.scale, &t1);
    if (s == OTTER_OK && b) s = in_f32(ctx, 2, b, &a.bias, &t2);
    if (s == OTTER_OK) s = out_f32(y, &a.Y, &ty);
    if (s == OTTER_OK && tm) s = out_f32(tm, &a.mean, &tmean);
    if (s == OTTER_OK && ti) s = out_f32(ti, &a.inv, &tinv);
    a.sidx = smap, a.bidx = bmap;
    if (s == OTTER_OK && inner > 0) ot_parallel_for(ctx, outer, 1 + 8192 / (inner + 1), lnorm_rows, &a);
    if (s == OTTER_OK) {
        out_f32_done(y, ty);
        if (tm) out_f32_done(tm, tmean);
        if (ti) out_f32_done(ti, tinv);
    } else {
        ot_free(ty), ot_free(tmean), ot_free(tinv);
    }
    ot_free(t0), ot_free(t1), ot_free(t2), ot_free(smap), ot_free(bmap);
    return s;
}

/* ---- LRN ------------------------------------------------------------------------------------------ */

otter_status ot_kernel_lrn(ot_kernel_ctx *ctx) {
    const otter_tensor *x = ot_ctx_input(ctx, 0);
    OT_TRY(check_x(ctx, x, 3));
    int64_t size = otter_node_attr_int(ctx->node, "size", 0);
    if (size < 1) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "attribute 'size' must be >= 1");
    float alpha = otter_node_attr_float(ctx->node, "alpha", 1e-4f),
          beta = otter_node_attr_float(ctx->node, "beta", 0.75f), bias = otter_node_attr_float(ctx->node, "bias", 1.0f);
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return ctx->output_status;
    int64_t N = x->dims[0], C = x->dims[1], sp = 1;
    for (int i = 2; i < x->rank; i++) sp *= x->dims[i];
    const float *X;
    float *tx = NULL, *ty = NULL, *Y = NULL;
    otter_status s = in_f32(ctx, 0, x, &X, &tx);
    if (s == OTTER_OK) s = out_f32(y, &Y, &ty);
    int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
    for (int64_t n = 0; s == OTTER_OK && n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t i = 0; i < sp; i++) {
                float sq = 0;
                for (int64_t cc = c - lo; cc <= c + hi; cc++)
                    if (cc >= 0 && cc < C) {
                        float v = X[(n * C + cc) * sp + i];
                        sq += v * v;
                    }
                Y[(n * C + c) * sp + i] = X[(n * C + c) * sp + i] / powf(bias + alpha / (float)size * sq, beta);
            }
    if (s == OTTER_OK)
        out_f32_done(y, ty);
    else
        ot_free(ty);
    ot_free(tx);
    return s;
}

/* ---- NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss --------------------------------------- */

/* loss over log-probabilities lp (N, C, D) with targets (N, D). Writes the output tensor 0. */
static otter_status nll_common(ot_kernel_ctx *ctx, const otter_tensor *in, const double *lp, const otter_tensor *target,
                               const otter_tensor *weight) {
    char s1[128], s2[128];
    int64_t N = in->dims[0], C = in->dims[1], D = 1;
    for (int i = 2; i < in->rank; i++) D *= in->dims[i];
    bool shape_ok = target->rank == in->rank - 1 && target->dims[0] == N;
    for (int i = 2; shape_ok && i < in->rank; i++) shape_ok = target->dims[i - 1] == in->dims[i];
    if (!shape_ok)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' %s does not match input %s (N, C, d1, ...)",
                            in_name(ctx, 1), ot_shape_str(s1, sizeof s1, target->rank, target->dims),
                            ot_shape_str(s2, sizeof s2, in->rank, in->dims));
    if (target->dtype != OTTER_DTYPE_INT64 && target->dtype != OTTER_DTYPE_INT32)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' must be int32 or int64, not %s", in_name(ctx, 1),
                            otter_dtype_name(target->dtype));
    if (weight && otter_tensor_numel(weight) != C)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "weight '%s' has %lld elements, expected C = %lld", in_name(ctx, 2),
                            (long long)otter_tensor_numel(weight), (long long)C);
    const otter_attr *iia = otter_node_attr(ctx->node, "ignore_index");
    bool has_ii = iia != NULL;
    int64_t ii = has_ii ? iia->i : 0;
    const char *red = otter_node_attr_string(ctx->node, "reduction", "mean");
    int rmode = strcmp(red, "none") == 0 ? 0 : strcmp(red, "sum") == 0 ? 1 : strcmp(red, "mean") == 0 ? 2 : -1;
    if (rmode < 0) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "unknown reduction '%s'", red);
    otter_tensor *y;
    if (rmode == 0)
        y = ot_ctx_output(ctx, 0, in->dtype, target->rank, target->dims);
    else
        y = ot_ctx_output(ctx, 0, in->dtype, 0, NULL);
    if (!y) return ctx->output_status;
    int64_t nt = N * D;
    double *l = ot_malloc((size_t)(nt > 0 ? nt : 1) * sizeof(double));
    if (!l) return OT_NOMEM();
    double wsum = 0, lsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = ot_get_i64(target->data, target->dtype, n * D + d);
            if (has_ii && t == ii) {
                l[n * D + d] = 0;
                continue;
            }
            if (t < 0 || t >= C) {
                ot_free(l);
                return ot_ctx_error(ctx, OTTER_ERR_INVALID, "target '%s' value %lld out of range [0, %lld)",
                                    in_name(ctx, 1), (long long)t, (long long)C);
            }
            double w = weight ? ot_get_f64(weight->data, weight->dtype, t) : 1.0;
            double v = -lp[(n * C + t) * D + d] * w;
            l[n * D + d] = v;
            wsum += w, lsum += v;
        }
    if (rmode == 0)
        ot_convert(y->data, y->dtype, l, OTTER_DTYPE_DOUBLE, nt);
    else
        ot_set_f64(y->data, y->dtype, 0, rmode == 1 ? lsum : (wsum != 0 ? lsum / wsum : 0.0 * lsum / wsum));
    ot_free(l);
    return OTTER_OK;
}

static otter_status nll_check(const ot_kernel_ctx *ctx, const otter_tensor **in, const otter_tensor **target) {
    *in = ot_ctx_input(ctx, 0), *target = ot_ctx_input(ctx, 1);
    if (!*in || !*target) return ot_ctx_error(ctx, OTTER_ERR_INVALID, "needs inputs input and target");
    if ((*in)->rank < 2)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s' must have rank >= 2 (N, C, ...)", in_name(ctx, 0));
    if (!float_like((*in)->dtype))
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input '%s': dtype %s not supported", in_name(ctx, 0),
                            otter_dtype_name((*in)->dtype));
    return OTTER_OK;
}

otter_status ot_kernel_nllloss(ot_kernel_ctx *ctx) {
    const otter_tensor *in, *target;
    OT_TRY(nll_check(ctx, &in, &target));
    int64_t n = otter_tensor_numel(in);
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!lp) return OT_NOMEM();
    ot_convert(lp, OTTER_DTYPE_DOUBLE, in->data, in->dtype, n);
    otter_status s = nll_common(ctx, in, lp, target, ot_ctx_input(ctx, 2));
    ot_free(lp);
    return s;
}

otter_status ot_kernel_sce(ot_kernel_ctx *ctx) {
    const otter_tensor *in, *target;
    OT_TRY(nll_check(ctx, &in, &target));
    int64_t n = otter_tensor_numel(in), N = in->dims[0], C = in->dims[1], D = n / (N * C > 0 ? N * C : 1);
    double *lp = ot_malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!lp) return OT_NOMEM();
    ot_convert(lp, OTTER_DTYPE_DOUBLE, in->data, in->dtype, n);
    for (int64_t i = 0; i < N; i++)
        for (int64_t d = 0; d < D; d++) {
            double *p = lp + i * C * D + d, m = -INFINITY, s = 0;
            for (int64_t c = 0; c < C; c++) m = p[c * D] > m ? p[c * D] : m;
            for (int64_t c = 0; c < C; c++) s += exp(p[c * D] - m);
            double ls = m + log(s);
            for (int64_t c = 0; c < C; c++) p[c * D] -= ls;
        }
    otter_status s = nll_common(ctx, in, lp, target, ot_ctx_input(ctx, 2));
    if (s == OTTER_OK && ctx->node->n_outputs > 1 && !ot_str_empty(ctx->node->outputs[1])) {
        otter_tensor *y = ot_ctx_output(ctx, 1, in->dtype, in->rank, in->dims);
        if (!y)
            s = ctx->output_status;
        else
            ot_convert(y->data, y->dtype, lp, OTTER_DTYPE_DOUBLE, n);
    }
    ot_free(lp);
    return s;
}
