/* The gradient builder's rule interface.
 *
 * A rule gets one forward node whose outputs have gradients, and appends nodes that turn those
 * into gradients of the node's inputs. Errors are sticky: helpers return NULL once something
 * failed and the builder reports the first failure, so rules read straight through. */
#ifndef OTTER_AUTODIFF_GRAD_H
#define OTTER_AUTODIFF_GRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "otter/ir.h"

typedef struct ot_grad ot_grad;
typedef void (*ot_grad_rule_fn)(ot_grad *g, otter_node *n);

typedef struct ot_grad_rule {
    const char *domain; /* "" for ai.onnx */
    const char *op_type;
    ot_grad_rule_fn fn;
    uint32_t diff_inputs; /* bit i: input i can receive a gradient */
} ot_grad_rule;

/* Rule tables, {0}-terminated, one per family. */
extern const ot_grad_rule ot_grad_rules_elementwise[];
extern const ot_grad_rule ot_grad_rules_nn[];
extern const ot_grad_rule ot_grad_rules_shape[];

/* ---- what a rule reads --------------------------------------------------------------------- */

/* Gradient of the node's output i, or NULL when the loss doesn't depend on it (zero). */
const char *ot_grad_dy(ot_grad *g, size_t out_index);
/* Whether the node's input i needs a gradient. */
bool ot_grad_needs(ot_grad *g, size_t in_index);
/* Name to write input i's gradient to (registers the contribution); NULL when not needed. */
const char *ot_grad_dx(ot_grad *g, size_t in_index);
/* Opset of the default domain. */
int64_t ot_grad_opset(const ot_grad *g);
/* The graph being rewritten (for initializers a rule adds itself). */
otter_graph *ot_grad_graph(ot_grad *g);
/* Static type of a tensor (from inputs, initializers, value_info after shape inference); NULL if unknown. */
const otter_type *ot_grad_type(ot_grad *g, const char *name);
/* Fixed rank of a tensor or -1. */
int ot_grad_rank(ot_grad *g, const char *name);

/* ---- what a rule writes -------------------------------------------------------------------- */

/* A fresh tensor name "<node>_Grad/<hint>" (unique in the graph). */
const char *ot_grad_tmp(ot_grad *g, const char *hint);
/* Append a node; NULL on failure. outs entries are tensor names (e.g. from ot_grad_tmp / ot_grad_dx). */
otter_node *ot_grad_emit(ot_grad *g, const char *op_type, const char *domain, size_t n_in, const char *const *ins,
                         size_t n_out, const char *const *outs);
/* Convenience: one-output node writing to `out`; returns out (NULL on failure). */
const char *ot_grad_op1(ot_grad *g, const char *op_type, const char *out, size_t n_in, const char *const *ins);
#define OT_G1(g, op, out, ...)                                                                                         \
    ot_grad_op1((g), (op), (out), sizeof((const char *[]){__VA_ARGS__}) / sizeof(const char *),                        \
                (const char *[]){__VA_ARGS__})
/* Constant initializers; returns the name. */
const char *ot_grad_const_i64(ot_grad *g, const char *hint, size_t count, const int64_t *v, bool scalar);
const char *ot_grad_const_f32(ot_grad *g, const char *hint, float v, otter_dtype dtype);
/* Sticky failure from a rule (message names the node). */
void ot_grad_fail(ot_grad *g, otter_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
bool ot_grad_failed(const ot_grad *g);
/* Fail and return from the (void) rule. */
#define OT_GRAD_FAIL(g, ...)                                                                                           \
    do {                                                                                                               \
        ot_grad_fail((g), __VA_ARGS__);                                                                                \
        return;                                                                                                        \
    } while (0)
#define OT_GRAD_NOMEM(g) OT_GRAD_FAIL((g), OTTER_ERR_NOMEM, "out of memory building gradients")

/* Write `grad` (shaped like `y`, the broadcast result) reduced to the shape of `x` into `out`:
 * ReduceSum over the broadcast axes (and Reshape when some kept axes were reduced), or Identity. */
void ot_grad_unbroadcast(ot_grad *g, const char *grad, const char *x, const char *y, const char *out);
/* Declare in value_info that `name` has the static type of `like` (for gradient kernels, such as
 * MaxPoolGrad, whose output shape their inputs don't determine). */
void ot_grad_declare_like(ot_grad *g, const char *name, const char *like);
/* Copy every attribute of the forward node `src` onto the gradient node `dst` (as ORT does). */
void ot_grad_copy_attrs(ot_grad *g, otter_node *dst, const otter_node *src);
/* Add an output to the forward node (e.g. MaxPool's indices) when it lacks one; returns its name. */
const char *ot_grad_forward_output(ot_grad *g, otter_node *n, size_t index, const char *hint);

#endif
