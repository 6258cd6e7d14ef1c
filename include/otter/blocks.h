/* otter: building forward models and custom losses from blocks.
 *
 * A builder appends nodes to a model's graph. Every block returns the name of the tensor it
 * produces, or NULL once anything failed; errors are sticky, so a whole model reads straight
 * through and otter_builder_finish reports the first failure:
 *
 *     otter_builder *b;
 *     otter_builder_create(&b, model, seed);
 *     const char *h = otter_block_relu(b, otter_block_linear(b, "fc1", x, 784, 200));
 *     const char *loss = otter_block_add(b,
 *         otter_block_mul(b, otter_block_constant(b, 0.4f), otter_block_mse_loss(b, out1, "target1",
 * OTTER_REDUCE_MEAN)), otter_block_mul(b, otter_block_constant(b, 0.6f), otter_block_mse_loss(b, out2, "target2",
 * OTTER_REDUCE_MEAN))); otter_status s = otter_builder_finish(b);   // frees the builder
 *
 * Names are made unique within the graph ("<op>_<n>", or "<name>.weight" for layers). */
#ifndef OTTER_BLOCKS_H
#define OTTER_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "otter/ir.h"
#include "otter/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_builder otter_builder;

typedef enum otter_reduction { OTTER_REDUCE_MEAN = 0, OTTER_REDUCE_SUM = 1, OTTER_REDUCE_NONE = 2 } otter_reduction;
OTTER_API const char *otter_reduction_name(otter_reduction r);

/* Builds into m's graph (m stays the caller's). seed drives layer initialization. */
OTTER_API otter_status otter_builder_create(otter_builder **out, otter_model *m, uint64_t seed);
/* The first error (or OTTER_OK); frees the builder. */
OTTER_API otter_status otter_builder_finish(otter_builder *b);
OTTER_API otter_model *otter_builder_model(otter_builder *b);

/* Graph inputs and outputs. dims: -1 for a symbolic dimension (named "batch_size"). */
OTTER_API const char *otter_block_input(otter_builder *b, const char *name, otter_dtype dtype, int rank,
                                        const int64_t *dims);
/* Expose tensor x as a graph output named `name` (an Identity when the names differ). */
OTTER_API const char *otter_block_output(otter_builder *b, const char *x, const char *name);

/* Arithmetic and elementwise blocks. */
OTTER_API const char *otter_block_add(otter_builder *b, const char *x, const char *y);
OTTER_API const char *otter_block_sub(otter_builder *b, const char *x, const char *y);
OTTER_API const char *otter_block_mul(otter_builder *b, const char *x, const char *y);
OTTER_API const char *otter_block_div(otter_builder *b, const char *x, const char *y);
OTTER_API const char *otter_block_pow(otter_builder *b, const char *x, const char *y);
OTTER_API const char *otter_block_constant(otter_builder *b, float value); /* a float scalar */
OTTER_API const char *otter_block_sigmoid(otter_builder *b, const char *x);
OTTER_API const char *otter_block_log(otter_builder *b, const char *x);
OTTER_API const char *otter_block_neg(otter_builder *b, const char *x);
OTTER_API const char *otter_block_abs(otter_builder *b, const char *x);
OTTER_API const char *otter_block_relu(otter_builder *b, const char *x);
OTTER_API const char *otter_block_clip(otter_builder *b, const char *x, float lo, float hi);
OTTER_API const char *otter_block_cast(otter_builder *b, const char *x, otter_dtype to);
/* n_axes 0: every axis; keepdims as in ONNX. */
OTTER_API const char *otter_block_reduce_mean(otter_builder *b, const char *x, size_t n_axes, const int64_t *axes,
                                              int keepdims);
OTTER_API const char *otter_block_reduce_sum(otter_builder *b, const char *x, size_t n_axes, const int64_t *axes,
                                             int keepdims);

/* Losses, as ONNX Runtime's training tool builds them; target/labels inputs are added to the graph
 * when they don't exist yet (float like x for `target`, INT64 without the class axis for `labels`). */
OTTER_API const char *otter_block_mse_loss(otter_builder *b, const char *x, const char *target, otter_reduction r);
OTTER_API const char *otter_block_l1_loss(otter_builder *b, const char *x, const char *target, otter_reduction r);
/* weight: per-class weights (NULL: none); ignore_index: class to ignore (pass has_ignore = 0 for none). */
OTTER_API const char *otter_block_cross_entropy_loss(otter_builder *b, const char *logits, const char *labels,
                                                     otter_reduction r, const float *weight, size_t n_weight,
                                                     int has_ignore, int64_t ignore_index);
/* pos_weight: per-class positive weights (NULL: none). */
OTTER_API const char *otter_block_bce_with_logits_loss(otter_builder *b, const char *x, const char *target,
                                                       otter_reduction r, const float *pos_weight, size_t n_pos_weight);

/* Layers, initialized like PyTorch's defaults (kaiming-uniform weights, uniform(+-1/sqrt(fan_in)) bias);
 * parameters are initializers named "<name>.weight" and "<name>.bias". */
OTTER_API const char *otter_block_linear(otter_builder *b, const char *name, const char *x, int64_t in, int64_t out);
OTTER_API const char *otter_block_conv2d(otter_builder *b, const char *name, const char *x, int64_t in_ch,
                                         int64_t out_ch, int64_t kernel, int64_t stride, int64_t pad);
OTTER_API const char *otter_block_maxpool2d(otter_builder *b, const char *x, int64_t kernel, int64_t stride);
OTTER_API const char *otter_block_flatten(otter_builder *b, const char *x);

/* The seeds' models, built from blocks and initialized like PyTorch (same seed, same bytes):
 * MNIST DNN: input [batch_size, 784] -> fc1 784-200 -> ReLU -> fc2 200-200 -> ReLU -> fc3 200-10 -> output.
 * CIFAR-10 CNN: input [batch_size, 3, 32, 32] -> 3 x (Conv 3x3 pad 1 -> ReLU -> MaxPool 2) with 32, 64, 128
 * channels -> Flatten -> fc1 2048-512 -> ReLU -> fc2 512-10 -> output. Opset 14. */
OTTER_API otter_status otter_model_mnist_dnn(otter_model **out, uint64_t seed);
OTTER_API otter_status otter_model_cifar10_cnn(otter_model **out, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
