/* otter: running ONNX graphs on the CPU.
 *
 *     otter_session *s = NULL;
 *     otter_session_options o = {.n_threads = 2};          // zero-initialized: the defaults
 *     if (otter_session_create_from_file(&s, "model.onnx", &o) != OTTER_OK) die(otter_last_error());
 *     const otter_tensor *in[] = {x};
 *     otter_tensor *out[1] = {NULL};                          // NULL: the session allocates it
 *     otter_session_run(s, 1, NULL, in, 1, NULL, out);        // names NULL: graph order
 *     ...
 *     otter_tensor_free(out[0]);
 *     otter_session_free(s);
 *
 * At create every node's kernel is resolved from the operator table with the model's opset for
 * the node's domain (an operator or version otter lacks is an error naming the node), the graph is
 * optimized (opt_level >= 1: Identity and inference-mode Dropout dropped, nodes over constants run
 * once; >= 2, the default: fusions) and a thread pool is started. The first run with a given set of input shapes
 * records the size of every intermediate; the session then plans all of them into one arena by liveness (a buffer is
 * reused after its last reader; elementwise kernels write over an input that dies at that node) and later runs with the
 * same shapes reuse the plan: they allocate nothing when the caller passes its output tensors in. New input shapes
 * re-plan. */
#ifndef OTTER_RUNTIME_H
#define OTTER_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "otter/ir.h"
#include "otter/status.h"
#include "otter/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct otter_session otter_session;

/* ---- sequences and run arguments ------------------------------------------------------------- */

/* A sequence of tensors of one element type (ONNX seq(tensor(T))). Each element is either owned
 * by the sequence (freed with it) or a view the caller keeps alive: a sequence of views lets a
 * graph update the caller's tensors in place (ONNX Runtime's optimizer graphs do). */
typedef struct otter_sequence otter_sequence;

/* elem_type UNDEFINED: taken from the first tensor added. */
OTTER_API otter_status otter_sequence_create(otter_sequence **out, otter_dtype elem_type);
/* Frees the sequence and the elements it owns (not views). NULL is fine. */
OTTER_API void otter_sequence_free(otter_sequence *q);
/* Add t at the end. append takes ownership of t on success (on failure t stays the caller's);
 * append_view borrows t: the caller keeps it alive (and frees it) after the sequence is gone.
 * t's element type must be the sequence's. */
OTTER_API otter_status otter_sequence_append(otter_sequence *q, otter_tensor *t);
OTTER_API otter_status otter_sequence_append_view(otter_sequence *q, otter_tensor *t);
OTTER_API size_t otter_sequence_length(const otter_sequence *q);
OTTER_API otter_dtype otter_sequence_elem_type(const otter_sequence *q);
/* Element i (NULL when i is out of range); writable: the sequence's structure is what is const. */
OTTER_API otter_tensor *otter_sequence_at(const otter_sequence *q, size_t i);

/* One value a run takes or gives: a tensor, a sequence, or NONE (an ONNX optional without a
 * value; an optional with a value is just its tensor or sequence). */
typedef enum otter_arg_kind {
    OTTER_ARG_UNSET = 0, /* outputs: nothing given, the session makes the value */
    OTTER_ARG_TENSOR,
    OTTER_ARG_SEQUENCE,
    OTTER_ARG_NONE
} otter_arg_kind;

typedef struct otter_arg {
    otter_arg_kind kind;
    otter_tensor *tensor;     /* TENSOR */
    otter_sequence *sequence; /* SEQUENCE */
} otter_arg;

static inline otter_arg otter_arg_of_tensor(otter_tensor *t) {
    otter_arg a = {OTTER_ARG_TENSOR, t, NULL};
    return a;
}
static inline otter_arg otter_arg_of_sequence(otter_sequence *q) {
    otter_arg a = {OTTER_ARG_SEQUENCE, NULL, q};
    return a;
}
static inline otter_arg otter_arg_none(void) {
    otter_arg a = {OTTER_ARG_NONE, NULL, NULL};
    return a;
}
/* Free the tensor and the sequence a holds (whatever its kind) and reset it to UNSET. */
OTTER_API void otter_arg_free(otter_arg *a);

/* Zero-initialized (or NULL): the defaults. */
typedef struct otter_session_options {
    /* Threads every kernel may use, the caller's included (0: the available cores; 1: no pool). */
    int n_threads;
    /* 0: run the graph as written; 1: drop Identity and inference-mode Dropout, fold constant
     * subexpressions; 2 (default when left 0 and opt_level_set is false): also fuse (Conv/Gemm
     * with bias, BatchNormalization, residual Add, ReLU, 2x2 MaxPool) and let 3x3 convolutions use
     * Winograd F(2x2, 3x3), whose rounding error is the direct kernel's; 3: Winograd F(4x4, 3x3)
     * instead, about 4x fewer operations than direct but a rounding error up to ~1e-4 of the
     * output's scale (levels 0-2 stay within ~1e-6). */
    int opt_level;
    bool opt_level_set; /* take opt_level literally, so 0 can be asked for */
    /* Don't fold nodes that read initializers (only Constant nodes and what follows from them),
     * for callers that change initializer values between runs (training). */
    bool no_fold_initializers;
    /* Time every node's kernel (read with otter_session_profile); costs two clock reads a node. */
    bool profile;
    /* Memory budget for the values the session holds (planned arena, heap fallbacks, scratch, folded
     * constants), in bytes; 0: the machine's physical memory. An allocation past it fails with
     * OTTER_ERR_NOMEM naming the node and the sizes, before anything is touched. */
    size_t max_memory_bytes;
} otter_session_options;

/* The session reads the model (and its initializers, in place) for its whole life: keep the model
 * alive and don't edit its graph until otter_session_free. Changing initializer values (not their
 * shapes) between runs is fine when no_fold_initializers is set. */
OTTER_API otter_status otter_session_create(otter_session **out, const otter_model *m,
                                            const otter_session_options *opts);
/* These own the model they load. */
OTTER_API otter_status otter_session_create_from_file(otter_session **out, const char *path,
                                                      const otter_session_options *opts);
OTTER_API otter_status otter_session_create_from_memory(otter_session **out, const void *data, size_t size,
                                                        const otter_session_options *opts);
OTTER_API void otter_session_free(otter_session *s);

/* The model the session runs. */
OTTER_API const otter_model *otter_session_model(const otter_session *s);
OTTER_API int otter_session_threads(const otter_session *s);

/* Inputs the caller must give (graph inputs that are not initializers) and outputs, in graph
 * order. The type points into the model: dims with value -1 are symbolic (param) or unknown; its
 * kind tells tensors from sequences (OTTER_TYPE_SEQUENCE) and optionals. */
OTTER_API size_t otter_session_input_count(const otter_session *s);
OTTER_API size_t otter_session_output_count(const otter_session *s);
OTTER_API const char *otter_session_input_name(const otter_session *s, size_t i);
OTTER_API const char *otter_session_output_name(const otter_session *s, size_t i);
OTTER_API const otter_type *otter_session_input_type(const otter_session *s, size_t i);
OTTER_API const otter_type *otter_session_output_type(const otter_session *s, size_t i);

/* Run the graph.
 * Inputs: input_names NULL binds inputs[i] to otter_session_input_name(s, i); otherwise by name
 * (an initializer that is also a graph input may be overridden by name). Every required input must
 * be given; dtype, rank and fixed dimensions are checked against the declaration, and a symbolic
 * dimension must have one value across the inputs of a run. The caller's tensors are read in place.
 * Outputs: output_names NULL means the first n_outputs graph outputs. Where outputs[i] is NULL on
 * entry it receives a new tensor the caller frees (otter_tensor_free); a non-NULL outputs[i] is
 * filled in place: same dtype required; when its size differs its data is reallocated if it owns it
 * (an error for views). Errors name the input, output or node at fault. */
OTTER_API otter_status otter_session_run(otter_session *s, size_t n_inputs, const char *const *input_names,
                                         const otter_tensor *const *inputs, size_t n_outputs,
                                         const char *const *output_names, otter_tensor **outputs);

/* The same with any kind of value: sequences (seq(tensor) inputs and outputs) and optionals.
 * Inputs: a TENSOR or SEQUENCE is read in place (operators that update their inputs in place,
 * such as com.microsoft AdamWOptimizer, SGDOptimizerV2 and InplaceClipGradNorm, write into the
 * caller's tensors, a sequence's elements included); NONE binds an optional input to "no value".
 * The kind must fit the declaration: seq(...) takes a SEQUENCE, optional(T) takes T or NONE.
 * Outputs: an UNSET outputs[i] receives a new value (free it with otter_arg_free); a TENSOR with a
 * tensor is filled in place as otter_session_run does; a SEQUENCE with a sequence gets its
 * elements replaced by owned copies. When the output has no value (NONE) outputs[i].kind becomes
 * NONE and a tensor or sequence given stays in it, still the caller's. otter_session_run is this
 * call with TENSOR arguments; it refuses outputs that are not tensors. */
OTTER_API otter_status otter_session_run_args(otter_session *s, size_t n_inputs, const char *const *input_names,
                                              const otter_arg *inputs, size_t n_outputs,
                                              const char *const *output_names, otter_arg *outputs);

typedef struct otter_memory_stats {
    size_t arena_bytes;      /* planned peak: size of the arena holding every intermediate */
    size_t naive_bytes;      /* sum of the sizes of every intermediate (what no reuse would need) */
    size_t n_planned;        /* intermediates (and scratch blocks) placed in the arena */
    size_t n_inplace;        /* outputs planned over a dying input */
    size_t n_plans;          /* times a plan was made (new input shapes) */
    size_t n_runs;           /* runs so far */
    size_t n_heap_fallbacks; /* allocations outside the plan (data-dependent sizes) in the last run */
    size_t n_nodes;          /* nodes executed per run (after optimization) */
    size_t n_nodes_model;    /* nodes in the model's graph */
    size_t n_folded;         /* nodes run once at create (constant folding) */
    size_t n_dropped;        /* Identity / Dropout nodes removed */
    size_t constant_bytes;   /* bytes held by folded constants */
    size_t heap_peak_bytes;  /* most intermediate bytes held on the heap at once in a run so far (a run
                                before its plan exists, or values outside the plan); 0 if none */
} otter_memory_stats;

OTTER_API otter_status otter_session_memory_stats(const otter_session *s, otter_memory_stats *out);

/* Time spent in one node's kernel over the runs since create (options.profile). */
typedef struct otter_node_profile {
    const char *name;    /* the node's name ("" when unnamed) */
    const char *op_type; /* as run: fused chains show as their com.otter operator */
    uint64_t calls;
    double total_ms;
} otter_node_profile;

/* Fill out[0 .. cap) with the nodes run so far in execution order; returns how many there are
 * (0 without options.profile). Strings stay valid until the session is freed. */
OTTER_API size_t otter_session_profile(const otter_session *s, otter_node_profile *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
