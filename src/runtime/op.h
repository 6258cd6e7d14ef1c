/* The kernel interface: how the runtime calls an operator implementation.
 *
 * A kernel reads its inputs, asks the runtime for each output with ot_ctx_output() (which
 * allocates it, from the planned arena once shapes are known) and fills it. Shape logic and
 * compute live together in the kernel, so data-dependent shapes (NonZero, Range, ...) work. */
#ifndef OTTER_RUNTIME_OP_H
#define OTTER_RUNTIME_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/registry.h"
#include "otter/ir.h"
#include "otter/runtime.h"
#include "otter/tensor.h"

struct ot_schema; /* check/schema.h */

struct ot_kernel_ctx {
    const otter_node *node;
    /* The ONNX schema of the operator version in effect at opset, resolved once at session create;
     * NULL for operators without one (com.microsoft, com.otter). Source of the attribute defaults. */
    const struct ot_schema *schema;
    const otter_model *model; /* for subgraph attributes and opsets */
    int64_t opset;            /* version the model imports for the node's domain */
    size_t n_inputs;
    otter_tensor *const *inputs; /* NULL entries for omitted optional inputs */
    size_t n_outputs;
    otter_tensor **outputs; /* set by ot_ctx_output */
    int n_threads;
    int winograd;  /* the largest Winograd tile 3x3 convolutions may use: 2 (opt level 2, the direct kernel's
                      rounding error) or 4 (opt level 3, ~1e-4 of the output's scale); 0: none */
    void *runtime; /* the session that runs this node (opaque to kernels) */
    /* Why the last ot_ctx_output call failed (an invalid or unsupported output, or out of memory):
     * a kernel returns it, `if (!y) return ctx->output_status;`, with the message already set. */
    otter_status output_status;
};

/* Allocate output i with this type and shape; NULL on failure (error set, its status in
 * ctx->output_status). The returned tensor's data may hold garbage: the kernel writes every element.
 * i < ctx->n_outputs (an output named "" in the model still gets a buffer, so kernels may always
 * write outputs below n_outputs). STRING outputs come zeroed; the kernel stores strings allocated
 * with ot_malloc (ot_strdup) in each otter_bytes, and the runtime frees them when the value dies.
 * With OT_OP_INPLACE0 (3), output 0 may be the same memory as input 0 (3): read element k before
 * writing element k. */
otter_tensor *ot_ctx_output(ot_kernel_ctx *ctx, size_t i, otter_dtype dtype, int rank, const int64_t *dims);
/* Scratch memory for this kernel call (64-byte aligned, garbage), valid until the kernel returns.
 * Planned into the arena like the outputs, so a steady-state run allocates nothing. Several calls
 * per kernel call are fine (each returns a new block). NULL (error set) on failure. */
void *ot_ctx_scratch(ot_kernel_ctx *ctx, size_t nbytes);
/* Memory the kernel keeps across runs of this node, for data derived from constant inputs (packed
 * weights): NULL at first; the kernel stores what it allocates there, and the runtime calls
 * free_fn on it with the session. */
void **ot_ctx_cache(ot_kernel_ctx *ctx, void (*free_fn)(void *));
/* Input i holds the same values for the session's life (a folded constant, or an initializer the
 * caller can't override or change): what is derived from it may go in ot_ctx_cache. */
bool ot_ctx_input_constant(const ot_kernel_ctx *ctx, size_t i);
/* Input i or NULL when omitted / beyond n_inputs. */
static inline const otter_tensor *ot_ctx_input(const ot_kernel_ctx *ctx, size_t i) {
    return i < ctx->n_inputs ? ctx->inputs[i] : NULL;
}
/* Name of input i ("" when omitted). */
const char *ot_ctx_input_name(const ot_kernel_ctx *ctx, size_t i);
/* Input i, or an INVALID error naming the node when it is omitted. */
otter_status ot_ctx_need_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t);
/* Input i, required, of a floating-point type (float16, bfloat16, float, double); else an INVALID
 * error naming the node and the input. */
otter_status ot_ctx_float_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t);
/* Tensor t (the node's input idx, named in errors) as float: its own data when float, else a
 * widened copy in *tmp (float16, bfloat16, ...) that the kernel frees with ot_free. */
otter_status ot_ctx_input_f32(const ot_kernel_ctx *ctx, size_t idx, const otter_tensor *t, const float **out,
                              float **tmp);
/* Output y's buffer as float: its own data when float, else a scratch buffer (*tmp) that
 * ot_output_f32_done converts into y and frees (y NULL: only frees). */
otter_status ot_output_f32(otter_tensor *y, float **out, float **tmp);
void ot_output_f32_done(otter_tensor *y, float *tmp);
/* The UNSUPPORTED error for input i, whose element type t the operator does not take. */
otter_status ot_ctx_bad_type(const ot_kernel_ctx *ctx, size_t i, otter_dtype t);
/* Fail with a message naming the node and operator: "node 'n1' (Conv): <message>". */
otter_status ot_ctx_error(const ot_kernel_ctx *ctx, otter_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- attributes ----------------------------------------------------------------------------------
 * The node's attribute `name`, or when the node leaves it unset, the default ONNX gives it in the schema
 * of the operator version in effect (Softmax's axis is 1 before opset 13 and -1 from 13), so kernels hold
 * no second copy of ONNX's defaults. An attribute a later version introduced takes that version's default
 * (the behaviour before it existed; where ONNX changed the behaviour with it, as RoiAlign-16's
 * coordinate_transformation_mode, the kernel reads it only from that version). Unset and required, or unset without a
 * schema default, or set with another type: an INVALID error naming the node and the attribute. */
otter_status ot_ctx_attr_int(const ot_kernel_ctx *ctx, const char *name, int64_t *v);
otter_status ot_ctx_attr_float(const ot_kernel_ctx *ctx, const char *name, float *v);
otter_status ot_ctx_attr_string(const ot_kernel_ctx *ctx, const char *name, const char **v);
/* *v points into the node or the schema table; *n elements. */
otter_status ot_ctx_attr_ints(const ot_kernel_ctx *ctx, const char *name, const int64_t **v, size_t *n);
/* Whether the node sets the attribute (for kernels whose behaviour depends on its presence). */
static inline bool ot_ctx_attr_set(const ot_kernel_ctx *ctx, const char *name) {
    return otter_node_attr(ctx->node, name) != NULL;
}
/* For an attribute no ONNX 1.12 schema describes (operators of com.microsoft / com.otter, attributes
 * added after opset 17): the caller's default, which it owns. Use the schema forms above otherwise. */
static inline int64_t ot_ctx_attr_int_or(const ot_kernel_ctx *ctx, const char *name, int64_t def) {
    return otter_node_attr_int(ctx->node, name, def);
}
static inline float ot_ctx_attr_float_or(const ot_kernel_ctx *ctx, const char *name, float def) {
    return otter_node_attr_float(ctx->node, name, def);
}
static inline const char *ot_ctx_attr_string_or(const ot_kernel_ctx *ctx, const char *name, const char *def) {
    return otter_node_attr_string(ctx->node, name, def);
}

/* Run fn over [0, n) split into chunks of at least `grain` items on the session's threads (inline
 * when ctx->n_threads is 1). */
typedef void (*ot_range_fn)(void *arg, int64_t begin, int64_t end);
void ot_parallel_for(const ot_kernel_ctx *ctx, int64_t n, int64_t grain, ot_range_fn fn, void *arg);
/* At most this many chunks a thread per ot_parallel_for. A kernel that splits its work into slots
 * of its own (a scratch buffer each) gives each thread this many: a thread that finishes its share
 * first takes the others' last slots, where one slot a thread leaves the fast thread idle (a VM's
 * CPUs can differ by 2x on memory-bound layers). */
#define OT_PARALLEL_CHUNKS_PER_THREAD 4

/* Run a graph attribute of ctx->node (If's branches, Loop's and Scan's body) on the given inputs,
 * bound positionally to g's inputs; names g reads from the outer scope resolve to the values the
 * running graph holds. The runtime builds one sub-session per subgraph at session create (unknown
 * operators inside are create-time errors) and reuses it, so calling this in a loop is cheap.
 * Outputs, positionally g's outputs: where out[i] is NULL on entry it receives a new tensor the
 * caller frees with otter_tensor_free; a non-NULL out[i] is filled in place (same dtype; its data
 * is reallocated when it owns it and the size changes). Errors name the node and the subgraph. */
otter_status ot_ctx_run_subgraph(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, otter_tensor *const *in,
                                 size_t n_out, otter_tensor **out);

/* Same with values of any kind (sequences, optionals): in[i] are read (kind UNSET: an omitted
 * optional input); out[i] UNSET on entry receives a new value the caller frees with
 * otter_arg_free, a TENSOR / SEQUENCE given is filled as otter_session_run_args does. */
otter_status ot_ctx_run_subgraph_args(ot_kernel_ctx *ctx, const otter_graph *g, size_t n_in, const otter_arg *in,
                                      size_t n_out, otter_arg *out);

/* ---- sequences and optionals --------------------------------------------------------------------
 * Only kernels flagged OT_OP_VALUES are given non-tensor inputs (for them ctx->inputs[i] is NULL
 * where input i is a sequence or an optional without a value; others fail before they run). */

/* Input i as an argument: kind UNSET when omitted (or beyond n_inputs), TENSOR, SEQUENCE or NONE.
 * The sequence's elements may be written by in-place kernels; its structure is not to change. */
otter_arg ot_ctx_input_arg(const ot_kernel_ctx *ctx, size_t i);
/* Output i as a new, empty sequence of elem_type owned by the runtime; the kernel adds elements
 * (otter_sequence_append / ot_seq_insert from runtime/value.h). NULL (error set) on failure. */
otter_sequence *ot_ctx_output_sequence(ot_kernel_ctx *ctx, size_t i, otter_dtype elem_type);
/* Output i is an optional without a value. */
otter_status ot_ctx_output_none(ot_kernel_ctx *ctx, size_t i);
/* Output i gets v: a tensor is copied into the planned output, a sequence is taken over
 * (v->sequence becomes NULL), NONE is no value. The caller still frees v (otter_arg_free). */
otter_status ot_ctx_output_arg(ot_kernel_ctx *ctx, size_t i, otter_arg *v);
/* Output o is the sequence of input i after an in-place update (ONNX Runtime's aliased outputs):
 * the same sequence when input i outlives the run or dies at this node, else an owned copy. */
otter_status ot_ctx_output_sequence_inplace(ot_kernel_ctx *ctx, size_t o, size_t i);

/* Flags describing a kernel to the planner. */
enum {
    OT_OP_INPLACE0 = 1u << 0, /* output 0 may share input 0's buffer when input 0 dies here */
    OT_OP_NOFOLD = 1u << 1,   /* never constant-fold (random ops: results differ per run) */
    OT_OP_VALUES = 1u << 2,   /* takes sequences / optionals (see above); never folded */
    OT_OP_INPLACE3 = 1u << 3, /* output 0 may share input 3's buffer (a fused sum input) when it dies here */
    /* output 0 holds input 0's elements unchanged (Reshape, Flatten, Squeeze, Unsqueeze, Identity): the
     * planner may give it input 0's buffer while input 0 lives on, and the kernel then copies nothing
     * (it copies only when the two pointers differ) */
    OT_OP_VIEW0 = 1u << 4,
};

#endif
