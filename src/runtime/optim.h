/* Optimizer update math as plain functions over float arrays and over lists of tensors.
 *
 * One implementation for every caller: the ai.onnx.preview.training kernels (Adam, Adagrad,
 * Momentum), the com.microsoft AdamWOptimizer / SGDOptimizerV2 / InplaceClipGradNorm kernels over
 * tensor sequences (ops/sequence.c), and the training session, which applies the optimizer
 * model's node to its flat parameter slab in one pass (ot_adamw_params_from_node + the array
 * functions).
 *
 * AdamW (ORT's definition, see specs/ort-training-format.md "Optimizer model"), t = step:
 *   correct_bias: bc1 = 1 - alpha^t, bc2 = 1 - beta^t, else bc1 = bc2 = 1
 *   adam_mode 0 (PyTorch AdamW): w -= lr*wd*w; m = a*m + (1-a)*g; v = b*v + (1-b)*g*g;
 *                                w -= lr*m / (bc1*(sqrt(v/bc2) + eps))
 *   adam_mode 1 (HF AdamW):      m, v as above; w -= (lr*sqrt(bc2)/bc1)*m / (sqrt(v) + eps); w -= lr*wd*w
 * SGD: w -= lr*g. Everything updates in place. */
#ifndef OTTER_RUNTIME_OPTIM_H
#define OTTER_RUNTIME_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/ir.h"
#include "otter/status.h"
#include "otter/tensor.h"

typedef struct ot_adamw_params {
    float alpha;        /* beta1 */
    float beta;         /* beta2 */
    float epsilon;      /* added to the root of the second moment */
    float weight_decay; /* decoupled weight decay */
    bool correct_bias;  /* bias-correct both moments */
    int adam_mode;      /* 0: PyTorch AdamW, 1: Hugging Face AdamW */
} ot_adamw_params;

/* The schema defaults of com.microsoft::AdamWOptimizer: 0.9, 0.999, 1e-8, 1e-2, true, mode 0. */
void ot_adamw_params_default(ot_adamw_params *p);
/* Defaults overridden by the node's attributes alpha, beta, epsilon, weight_decay, correct_bias,
 * adam_mode. Fails (naming the node) for an adam_mode other than 0 or 1. */
otter_status ot_adamw_params_from_node(const otter_node *node, ot_adamw_params *p);

/* One AdamW step over n elements: w[n], g[n], m[n] (first moment), v[n] (second moment). */
void ot_adamw_update(const ot_adamw_params *p, float lr, int64_t step, int64_t n, float *w, const float *g, float *m,
                     float *v);
/* w[n] -= lr * g[n]. */
void ot_sgd_update(float lr, int64_t n, float *w, const float *g);

/* The same over n_params parallel lists of float tensors (every list entry of one index must have
 * one shape). Shapes and dtypes are checked before anything changes: on error nothing is updated
 * and the message names the tensor. step must be >= 1 when correct_bias is set. */
otter_status ot_adamw_step(const ot_adamw_params *p, float lr, int64_t step, size_t n_params, otter_tensor *const *w,
                           const otter_tensor *const *g, otter_tensor *const *m, otter_tensor *const *v);
otter_status ot_sgd_step(float lr, size_t n_params, otter_tensor *const *w, const otter_tensor *const *g);

/* InplaceClipGradNorm: total = Frobenius norm over every gradient; when total exceeds max_norm,
 * every gradient is scaled by max_norm / (total + 1e-6) (ORT's and PyTorch's rule). norm_type must
 * be "fro" (NULL means "fro"). *total_norm (may be NULL) receives the norm before clipping. */
otter_status ot_clip_grad_norm(size_t n, otter_tensor *const *g, float max_norm, const char *norm_type,
                               float *total_norm);

/* ai.onnx.preview.training update rules for one tensor of n elements (r: learning rate R as fed,
 * t: the step count T). Outputs may alias inputs. */
typedef struct ot_onnx_adagrad_params {
    float decay_factor, epsilon, norm_coefficient;
} ot_onnx_adagrad_params;
/* r' = r / (1 + t*decay); g' = norm*x + g; h' = h + g'^2; x' = x - r' * g' / (sqrt(h') + eps). */
void ot_onnx_adagrad_update(const ot_onnx_adagrad_params *p, float r, int64_t t, int64_t n, const float *x,
                            const float *g, const float *h, float *x_new, float *h_new);

typedef struct ot_onnx_momentum_params {
    float alpha, beta, norm_coefficient;
    bool nesterov; /* mode "nesterov" (else "standard") */
} ot_onnx_momentum_params;
/* g' = norm*x + g; b' = t > 0 ? beta : 1; v' = alpha*v + b'*g';
 * standard: x' = x - r*v'; nesterov: x' = x - r*(g' + alpha*v'). */
void ot_onnx_momentum_update(const ot_onnx_momentum_params *p, float r, int64_t t, int64_t n, const float *x,
                             const float *g, const float *v, float *x_new, float *v_new);

typedef struct ot_onnx_adam_params {
    float alpha, beta, epsilon, norm_coefficient, norm_coefficient_post;
} ot_onnx_adam_params;
/* g' = norm*x + g; v' = alpha*v + (1-alpha)*g'; h' = beta*h + (1-beta)*g'^2;
 * r' = t > 0 ? r*sqrt(1 - beta^t)/(1 - alpha^t) : r; x' = (1 - norm_post) * (x - r'*v'/(sqrt(h') + eps)). */
void ot_onnx_adam_update(const ot_onnx_adam_params *p, float r, int64_t t, int64_t n, const float *x, const float *g,
                         const float *v, const float *h, float *x_new, float *v_new, float *h_new);

#endif
