/* Session internals shared by session.c, session_run.c, session_kernel.c and plan.c. */
#ifndef OTTER_RUNTIME_SESSION_H
#define OTTER_RUNTIME_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/core.h"
#include "core/strmap.h"
#include "otter/runtime.h"
#include "runtime/op.h"
#include "runtime/threadpool.h"
#include "runtime/value.h"

#define OT_NO_INDEX     SIZE_MAX       /* no slot or node: an omitted optional input, a name not found */
#define OT_LIVE_FOREVER (SIZE_MAX - 1) /* last_use of a graph output */
#define OT_ARENA_ALIGN  64

typedef enum ot_slot_kind {
    OT_SLOT_INPUT, /* graph input the caller gives */
    OT_SLOT_INIT,  /* initializer (overridable when decl != NULL) */
    OT_SLOT_CONST, /* folded at create: owned by the session */
    OT_SLOT_VALUE, /* produced by a node each run */
    OT_SLOT_OUTER  /* a value of an enclosing graph (subgraph sessions) */
} ot_slot_kind;

/* One tensor name of the graph. */
typedef struct ot_slot {
    const char *name; /* points into the model ("" for an unnamed optional output) */
    ot_slot_kind kind;
    otter_tensor *cur;   /* the value now when a tensor (NULL: none, or not a tensor) */
    otter_sequence *seq; /* the value now when a sequence */
    bool seq_owned;      /* seq is freed when the value dies (else the caller's or a parent's) */
    bool none;           /* the value now is an optional without a value */
    otter_tensor tensor; /* header for VALUE / CONST slots */
    const otter_tensor *init;
    const otter_value *decl; /* graph-input declaration (INPUT, overridable INIT) */
    int *dim_sym;            /* per declared dim: index of its symbol in the session's list, or -1 */
    struct otter_session *outer_session;
    size_t outer_slot;
    size_t producer; /* exec index of the producing node (VALUE) */
    size_t last_use; /* exec index of the last reader; OT_LIVE_FOREVER for graph outputs */
    void *heap;      /* data allocated outside the arena (this run or CONST) */
    size_t size;     /* bytes requested this run */
    bool is_string;  /* last requested dtype was STRING */
    bool planned;
    size_t offset, plan_size;
} ot_slot;

typedef struct ot_exec_node {
    ot_kernel_ctx ctx; /* first: kernels get &ctx, the runtime finds the node from it */
    size_t index;      /* position in the model's graph */
    const otter_node *node;
    const ot_op_def *def;
    bool alive;       /* false: dropped or folded */
    size_t *in_slots; /* n_inputs */
    size_t *out_slots;
    otter_tensor **in_ptrs;
    otter_tensor **out_ptrs;
    size_t *outer_reads, n_outer_reads; /* slots its subgraphs read */
    size_t *dying, n_dying, cap_dying;  /* slots whose last reader is this node */
    size_t n_subs;
    const otter_graph **sub_graphs;
    struct otter_session **subs;
    /* scratch */
    size_t scratch_used, scratch_size; /* this call; bytes requested this run (aligned sum) */
    size_t scratch_offset, scratch_plan;
    bool scratch_planned;
    void **scratch_heap;
    size_t n_scratch_heap, cap_scratch_heap;
    uint64_t prof_calls, prof_ns; /* options.profile */
    void *cache;                  /* ot_ctx_cache */
    void (*cache_free)(void *);
} ot_exec_node;

typedef struct ot_shape_key {
    bool given;
    otter_arg_kind kind; /* sequences and NONE key on their kind only */
    otter_dtype dtype;
    int rank;
    int64_t dims[OTTER_MAX_RANK];
} ot_shape_key;

typedef struct ot_dim_sym {
    const char *param;
    int64_t value;
    bool bound;
} ot_dim_sym;

/* A plan kept for one set of input shapes (plan.c); up to OT_MAX_PLANS are cached, least recently
 * used replaced, so alternating shapes (a training batch, a last partial batch, an evaluation batch)
 * each run from the arena. */
#define OT_MAX_PLANS 4
typedef struct ot_saved_plan {
    ot_shape_key *key;            /* n_all_inputs */
    size_t *slot_off, *slot_size; /* per slot; size 0: not planned */
    size_t *scr_off, *scr_size;   /* per node */
    size_t arena_size, naive, n_planned, n_inplace;
    uint64_t used; /* tick of the last use */
} ot_saved_plan;

struct otter_session {
    otter_model *owned_model;
    otter_model *fused_model; /* opt_level >= 2: runtime/fuse.c's copy of the model, run instead of it */
    const otter_model *model;
    const otter_graph *graph;
    struct otter_session *parent;
    otter_session_options opts;
    ot_pool *pool;
    bool owns_pool;
    int n_threads;

    ot_slot *slots;
    size_t n_slots, cap_slots;
    ot_strmap names; /* tensor name -> slot index (keys are the slots' names) */

    ot_exec_node *nodes; /* one per model node */
    size_t n_nodes;
    size_t *order; /* exec order: indices of alive nodes */
    size_t n_order;

    size_t *inputs, n_inputs;         /* required inputs (API order) */
    size_t *all_inputs, n_all_inputs; /* every graph input (incl. overridable initializers) */
    size_t *outputs, n_outputs;
    ot_dim_sym *syms;
    size_t n_syms;

    /* plan */
    bool have_plan;
    ot_shape_key *key; /* n_all_inputs: the shapes the plan is for */
    unsigned char *arena_mem;
    unsigned char *arena; /* aligned into arena_mem */
    size_t arena_cap, arena_size;
    size_t n_fallbacks; /* allocations outside the plan this run */
    bool folding;       /* create-time: outputs become session-owned constants */
    ot_saved_plan plans[OT_MAX_PLANS];
    size_t n_saved;
    uint64_t tick;

    otter_memory_stats stats;
    size_t heap_live;   /* intermediate bytes on the heap now (this run) */
    size_t folded_live; /* bytes of constants folded at create time */
    size_t budget;      /* opts.max_memory_bytes, or physical memory */
    bool err_named;     /* the current error already names the node */
};

/* OTTER_OK when `nbytes` more fit the session's memory budget beside what it holds; otherwise an
 * OTTER_ERR_NOMEM error naming `what` and the sizes. */
otter_status ot_session_reserve(const otter_session *s, size_t nbytes, const char *what);

/* plan.c: lay out every VALUE slot and scratch block of the last run into one arena, for the input
 * shapes `key`, and keep the plan in the cache. */
otter_status ot_plan_build(otter_session *s, const ot_shape_key *key);
/* The slot of the input whose buffer output 0 of rn (out) may take over (OT_OP_INPLACE0 /
 * OT_OP_INPLACE3): a value whose last reader is rn, neither of the two a string; else OT_NO_INDEX. */
size_t ot_inplace_source(const otter_session *s, const ot_exec_node *rn, const ot_slot *out);
/* Make the cached plan for these input shapes the active one; false when there is none. */
bool ot_plan_activate(otter_session *s, const ot_shape_key *key);
bool ot_shape_key_equal(const ot_shape_key *a, const ot_shape_key *b, size_t n);
void ot_plans_free(otter_session *s);
/* Between runs: give the arena's pages back to the system (plans and arena stay; the next run faults
 * them in again), for a caller about to need the memory for something else. */
void ot_plan_release_pages(otter_session *s);

static inline ot_exec_node *ot_exec_node_of(const ot_kernel_ctx *ctx) { return (ot_exec_node *)(void *)(uintptr_t)ctx; }

/* ---- shared by session.c (create), session_run.c and session_kernel.c ---- */

static inline bool ot_is_default_domain(const char *d) { return ot_str_empty(d) || strcmp(d, "ai.onnx") == 0; }

/* The slot of a name in this session's table, or OT_NO_INDEX. */
static inline size_t ot_slot_find(const otter_session *s, const char *name) {
    intptr_t i;
    return ot_strmap_get(&s->names, name, &i) ? (size_t)i : OT_NO_INDEX;
}

/* Follow aliases and outer references to the slot that holds the value. */
static inline ot_slot *ot_slot_target(otter_session *s, size_t i) {
    ot_slot *sl = &s->slots[i];
    while (sl->kind == OT_SLOT_OUTER) sl = &sl->outer_session->slots[sl->outer_slot];
    return sl;
}

/* Slot i, or the value it names when it is an Identity's alias in s itself (aliases into an
 * enclosing session are left as they are). */
static inline size_t ot_slot_local_target(const otter_session *s, size_t i) {
    while (i != OT_NO_INDEX && s->slots[i].kind == OT_SLOT_OUTER && s->slots[i].outer_session == s)
        i = s->slots[i].outer_slot;
    return i;
}

static inline bool ot_slot_has_value(const ot_slot *sl) { return sl->cur || sl->seq || sl->none; }

static inline otter_arg ot_slot_arg(const ot_slot *sl) {
    if (sl->cur) return otter_arg_of_tensor(sl->cur);
    if (sl->seq) return otter_arg_of_sequence(sl->seq);
    if (sl->none) return otter_arg_none();
    return (otter_arg){0};
}

/* Drop the slot's value (its heap block, strings, an owned sequence). */
void ot_slot_release(ot_slot *sl);
/* A value fixed at create: folded, or an initializer no input overrides. */
bool ot_slot_is_const(const otter_session *s, size_t i);
/* "'name' (op_type)" or "#index (op_type, output 'y')", for messages that name a node. */
void ot_node_label(const otter_node *n, size_t index, char *buf, size_t cap);
/* Run one node's kernel over its slots' values; errors name the node. */
otter_status ot_exec_node_run(otter_session *s, ot_exec_node *rn);
void ot_exec_node_free_scratch(ot_exec_node *rn);

/* Where a run's inputs come from and its outputs go: tensors (otter_session_run,
 * ot_ctx_run_subgraph) or arguments of any kind. */
typedef struct ot_run_io {
    const otter_tensor *const *in_t;
    const otter_arg *in_a;
    otter_tensor **out_t;
    otter_arg *out_a;
} ot_run_io;
/* One run of s (a session or a subgraph's sub-session): inputs by position or by name, outputs
 * copied to io. */
otter_status ot_session_run_graph(otter_session *s, size_t n_in, const char *const *in_names, size_t n_out,
                                  const char *const *out_names, const ot_run_io *io);

#endif
