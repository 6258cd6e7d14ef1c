/* The operator registry: everything otter knows about each operator, declared once.
 *
 * One row per (domain, op_type) in src/ops/table.c, sorted, names the operator's kernels (one per
 * since-version, with the planner's flags), its shape-inference rule and its gradient rule with the
 * inputs that rule differentiates; its schema is the check/schema.h entry of the same (domain,
 * op_type). The functions a row names live in files of the operator's family name:
 *
 *     kernels      src/runtime/ops/<family>.c   ot_kernel_*   (declared in runtime/ops/kernels.h)
 *     shape rules  src/infer/infer_<family>.c   ot_infer_*    (declared in infer/infer_internal.h)
 *     gradients    src/autodiff/rules_<family>.c ot_grad_*    (declared in autodiff/grad.h)
 *
 * Layering: this header sits at the bottom, beside check/schema.h (it names the three function
 * types over opaque structs and includes only public headers), so the runtime, shape inference and
 * the gradient builder look operators up here without knowing one another; only table.c, at the
 * top, includes all three families to bind them. */
#ifndef OTTER_OPS_REGISTRY_H
#define OTTER_OPS_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/ir.h"
#include "otter/status.h"

typedef struct ot_kernel_ctx ot_kernel_ctx; /* runtime/op.h */
typedef struct ot_inode ot_inode;           /* infer/infer_internal.h */
typedef struct ot_grad ot_grad;             /* autodiff/grad.h */

typedef otter_status (*ot_kernel_fn)(ot_kernel_ctx *ctx);
typedef otter_status (*ot_infer_fn)(ot_inode *n);
typedef void (*ot_grad_rule_fn)(ot_grad *g, otter_node *n);

/* One kernel version: it runs models importing the operator's domain at opsets >= since_version
 * (until the operator's next kernel version). flags: OT_OP_* of runtime/op.h, for the planner. */
typedef struct ot_op_def {
    int since_version;
    ot_kernel_fn run;
    unsigned flags;
} ot_op_def;

typedef struct ot_op_entry {
    const char *domain; /* "" for ai.onnx */
    const char *op_type;
    const ot_op_def *kernels; /* oldest first, ended by a {0} entry; NULL: no kernel */
    ot_infer_fn infer;        /* NULL: inference leaves the outputs unknown */
    ot_grad_rule_fn grad;     /* NULL: not differentiable by otter */
    uint32_t diff_inputs;     /* bit i: input i can receive a gradient from `grad`; bit 31 also every later
                                 input (variadic operators, an If's outer-scope reads): ot_op_diff_input */
    /* Differentiated by unrolling its body before the builder runs (autodiff/rules_control.c; the trip
     * count must be known when artifacts are made), not by a rule. */
    bool grad_by_unrolling;
    /* Why the operator has a kernel but no shape rule, or a shape rule but no kernel (NULL when
     * it has both); tests/test_registry.c fails on any other mismatch and on a stale reason. */
    const char *gap;
    /* An ai.onnx operator whose attributes this one takes (a fused or gradient operator otter or ONNX
     * Runtime derives from it): kernels read their attribute defaults from that operator's schema at
     * the model's ai.onnx opset. NULL: the operator's own schema, when it has one. */
    const char *attrs_of;
} ot_op_entry;

/* The table (src/ops/table.c), sorted by (domain, op_type) in strcmp order. */
extern const ot_op_entry ot_op_table[];
extern const size_t ot_op_table_count;

/* Whether input i of the row's operator can receive a gradient (diff_inputs, bit 31 standing for the rest). */
static inline bool ot_op_diff_input(const ot_op_entry *e, size_t i) {
    return (e->diff_inputs >> (i < 31 ? i : 31)) & 1u;
}

/* The row for (domain, op_type) or NULL; NULL, "" and "ai.onnx" are the default domain. */
const ot_op_entry *ot_op_find(const char *domain, const char *op_type);
/* The kernel version of (domain, op_type) in effect at opset, or NULL. */
const ot_op_def *ot_op_lookup(const char *domain, const char *op_type, int64_t opset);
/* The shape rule or gradient rule of (domain, op_type), or NULL. */
ot_infer_fn ot_op_infer_rule(const char *domain, const char *op_type);
const ot_op_entry *ot_op_grad_rule(const char *domain, const char *op_type);

#endif
