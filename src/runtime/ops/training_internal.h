/* Shared by the training kernels (training.c, training_norm.c, training_conv.c, training_pool.c,
 * training_losses.c, training_shape.c). Kernels compute in float: float tensors directly, other
 * float types (double, float16, bfloat16) through converted copies. */
#ifndef OTTER_RUNTIME_OPS_TRAINING_INTERNAL_H
#define OTTER_RUNTIME_OPS_TRAINING_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/broadcast.h"

/* Input i as float (NULL in *tmp when it is the tensor's own data; else ot_free(*tmp) later).
 * Fails naming the input when it is missing or not a float type. */
otter_status ot_train_in(const ot_kernel_ctx *ctx, size_t i, const float **out, float **tmp);
/* Allocate output i (dtype dt) and give a float buffer for it: the data itself for float, else a
 * temporary that ot_output_f32_done converts back (and frees). */
otter_status ot_train_out(ot_kernel_ctx *ctx, size_t i, otter_dtype dt, int rank, const int64_t *dims, otter_tensor **t,
                          float **p, float **tmp);
/* A kernel's end: on success, output k gets its float temporary tout[k] converted back (as
 * ot_output_f32_done); on failure the temporaries are only freed; the inputs' temporaries tin[]
 * are freed. Returns s. */
otter_status ot_train_finish(otter_status s, size_t n_out, otter_tensor *const *o, float *const *tout, size_t n_in,
                             float *const *tin);
/* True when the node names output i (an omitted optional output is "" or absent). */
bool ot_train_wanted(const ot_kernel_ctx *ctx, size_t i);
bool ot_train_is_float(otter_dtype t);
/* Required input i (error naming it as `what` when missing). */
otter_status ot_train_need(const ot_kernel_ctx *ctx, size_t i, const char *what, const otter_tensor **t);
/* A shape given as a 1-D int64 tensor (input i) into rank/dims. */
otter_status ot_train_shape_input(const ot_kernel_ctx *ctx, size_t i, int *rank, int64_t *dims);
bool ot_train_same_shape(const otter_tensor *a, const otter_tensor *b);
/* A scalar (one element) numeric input as double; def when the input is omitted. */
otter_status ot_train_scalar(const ot_kernel_ctx *ctx, size_t i, double def, double *out);

/* One line of SoftmaxGrad (LogSoftmaxGrad with log): dX from dY and Y, mid elements `in` apart; the sum of dY
 * (log) or dY * Y in four running sums (one would wait on every add's latency). dx may be dy. */
void ot_softmax_grad_line(bool log, const float *dy, const float *y, float *dx, int64_t mid, int64_t in);

/* Kernels in training_nn.c */

/* Kernels in training_shape.c */

/* dY's spatial dims must be the computed output dims (training_conv.c; the pooling gradients too). */
typedef struct ot_conv_geom ot_conv_geom;
otter_status ot_train_check_dy(const ot_kernel_ctx *ctx, const ot_conv_geom *g, const otter_tensor *dy,
                               const int64_t *want);
/* Whether the CPU runs AVX2 (the gradient kernels' AVX2 paths, compiled where OT_TR_X86 is set). */
bool ot_train_cpu_has_avx2(void);
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define OT_TR_X86 1
#endif

#endif
