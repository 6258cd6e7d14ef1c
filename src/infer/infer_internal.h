/* Shape inference internals: the value records the driver keeps per tensor, and the interface
 * between the driver (infer.c) and the per-family rules (infer_*.c).
 *
 * Everything a run allocates comes from one arena (freed at the end), so rules never free. */
#ifndef OTTER_INFER_INTERNAL_H
#define OTTER_INFER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "otter/infer.h"
#include "ops/registry.h"
#include "otter/ir.h"

/* One dimension (or one element of a known int tensor): v >= 0 a fixed size; otherwise the
 * symbol `param`, or unknown when param is NULL. Params point into arena or IR strings. */
typedef struct ot_idim {
    int64_t v;
    const char *param;
} ot_idim;

#define OT_DIM_UNKNOWN ((ot_idim){-1, NULL})
static inline ot_idim ot_dim_known(int64_t v) { return (ot_idim){v, NULL}; }
static inline bool ot_dim_is_known(ot_idim d) { return d.v >= 0; }

/* Known integer data uses the same struct, but values may be negative: an element is symbolic
 * when param is set, unknown when v == OT_DATA_UNKNOWN, else the value v. */
#define OT_DATA_UNKNOWN INT64_MIN
static inline ot_idim ot_dim_to_data(ot_idim d) { return d.v >= 0 || d.param ? d : (ot_idim){OT_DATA_UNKNOWN, NULL}; }
static inline ot_idim ot_data_to_dim(ot_idim x) {
    return x.param ? (ot_idim){-1, x.param} : x.v >= 0 ? x : OT_DIM_UNKNOWN;
}
static inline bool ot_data_is_value(ot_idim x) { return !x.param && x.v != OT_DATA_UNKNOWN; }

/* What is known about one tensor. */
typedef struct ot_ival {
    otter_type_kind kind;    /* NONE: nothing known; TENSOR; others are carried opaquely in `other` */
    otter_dtype dtype;       /* UNDEFINED when the element type is unknown */
    int rank;                /* -1: unknown */
    ot_idim *dims;           /* rank entries */
    const otter_type *other; /* non-tensor kinds: the declared/inferred type (IR-owned) */
    /* Known value for small tensors (rank <= 1): integer values (as dims, so symbols can flow
     * from Shape through to Reshape), or float values (floating dtypes, constants only). */
    int64_t n_data; /* -1: value not known */
    ot_idim *idata; /* integer dtypes (and bool) */
    double *fdata;  /* floating dtypes */
} ot_ival;

typedef struct ot_arena_block ot_arena_block;
typedef struct ot_scope ot_scope;

typedef struct ot_infer {
    const otter_infer_options *opts;
    otter_infer_stats *stats;
    size_t n_opsets;
    const otter_opset *opsets;
    ot_arena_block *arena;
} ot_infer;

/* The node being inferred. Inputs are never NULL for a named input (a record with kind NONE
 * stands for "nothing known"); in[i] is NULL for an omitted optional input or i >= n_in. */
typedef struct ot_inode {
    ot_infer *cx;
    ot_scope *scope;
    otter_node *node;
    int64_t opset;
    size_t n_in, n_out;
    const ot_ival **in;
    ot_ival *out; /* n_out records, initialized unknown */
} ot_inode;

/* ---- arena ---- */
void *ot_inf_alloc(ot_infer *cx, size_t n); /* zeroed; NULL on out of memory */
ot_idim *ot_inf_dims(ot_infer *cx, int n);  /* n unknown dims (n may be 0) */
const char *ot_inf_strdup(ot_infer *cx, const char *s);

/* ---- errors: "node 'name' (Op): message" ---- */
otter_status ot_inf_fail(const ot_inode *n, otter_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define OT_INF_NOMEM(n) ot_inf_fail((n), OTTER_ERR_NOMEM, "out of memory")

/* ---- inputs, attributes ---- */
static inline const ot_ival *ot_in(const ot_inode *n, size_t i) { return i < n->n_in ? n->in[i] : NULL; }
static inline bool ot_in_has_shape(const ot_inode *n, size_t i) {
    const ot_ival *v = ot_in(n, i);
    return v && v->kind == OTTER_TYPE_TENSOR && v->rank >= 0;
}
static inline otter_dtype ot_in_dtype(const ot_inode *n, size_t i) {
    const ot_ival *v = ot_in(n, i);
    return v && v->kind == OTTER_TYPE_TENSOR ? v->dtype : OTTER_DTYPE_UNDEFINED;
}
/* Dimension d of input i; unknown when the input's shape is not known or has no such dim. */
static inline ot_idim ot_in_dim(const ot_inode *n, size_t i, int d) {
    const ot_ival *v = ot_in(n, i);
    return ot_in_has_shape(n, i) && d < v->rank ? v->dims[d] : OT_DIM_UNKNOWN;
}
/* Known integer values of input i (n_data >= 0 and idata set), else false. */
bool ot_in_ints(const ot_inode *n, size_t i, const ot_idim **vals, int64_t *count);
/* Same, all fixed (no symbols/unknowns), copied into the arena as int64. */
bool ot_in_int64s(const ot_inode *n, size_t i, int64_t **vals, int64_t *count);
/* Known numeric values of input i as doubles (float or integer data, all fixed). */
bool ot_in_doubles(const ot_inode *n, size_t i, double **vals, int64_t *count);
const otter_attr *ot_attr(const ot_inode *n, const char *name);
int64_t ot_attr_int(const ot_inode *n, const char *name, int64_t def);
float ot_attr_float(const ot_inode *n, const char *name, float def);
/* INTS attribute: true and vals/count set when present. */
bool ot_attr_ints(const ot_inode *n, const char *name, const int64_t **vals, size_t *count);
const char *ot_attr_str(const ot_inode *n, const char *name, const char *def);
/* Normalize axis into [0, rank) (error naming the node when out of range). */
otter_status ot_norm_axis(const ot_inode *n, int64_t axis, int rank, int64_t *out);

/* ---- outputs ---- */
/* Output i gets a tensor type with the given dtype and unknown shape (i beyond n_out ignored). */
void ot_out_type(ot_inode *n, size_t i, otter_dtype dt);
/* Output i gets dtype and rank `rank` with dims copied from `dims` (NULL: all unknown). */
otter_status ot_out_shape(ot_inode *n, size_t i, otter_dtype dt, int rank, const ot_idim *dims);
/* Output i = a copy of input j's type and shape (not its value). */
otter_status ot_out_like(ot_inode *n, size_t i, size_t j);
/* Attach known integer values (copied) to output i. */
otter_status ot_out_idata(ot_inode *n, size_t i, int64_t count, const ot_idim *vals);

/* ---- shared shape helpers ---- */
/* Multidirectional (numpy) broadcast of the shapes of inputs; out rank -1 if any is unknown. */
otter_status ot_broadcast(ot_inode *n, size_t n_shapes, const ot_ival *const *shapes, int *rank, ot_idim **dims);
/* Product of the dims (false if any not fixed). */
bool ot_dims_product(const ot_idim *d, int rank, int64_t *out);
bool ot_dim_equal(ot_idim a, ot_idim b); /* both fixed and equal, or same param */
/* Check that all inputs with a known dtype share one (type constraint T); names the inputs. */
otter_status ot_same_dtype(const ot_inode *n, size_t first, size_t last);

/* ---- operators whose shapes are another operator's (the quantized, fused and training variants;
 * infer_extra.c) ---- */
/* Run `rule` on this node seen with other inputs: n_in records `in` (NULL: omitted) named `names`,
 * at `opset`; its outputs land in n->out, and its errors name the tensors the other operator sees. */
otter_status ot_infer_as(ot_inode *n, ot_infer_fn rule, int64_t opset, size_t n_in, const ot_ival *const *in,
                         const char *const *names);
/* Same with the node's own inputs picked by index (-1: omitted), element types hidden on request. */
otter_status ot_infer_as_picked(ot_inode *n, ot_infer_fn rule, int64_t opset, size_t n_pick, const int *pick,
                                bool hide_types);

/* ---- subgraphs (control flow) ---- */
/* Infer a subgraph with the given types for its formal inputs (NULL entries: keep declared),
 * reading outer values from n's scope. outs (n_outs records) receives its output types. */
otter_status ot_infer_subgraph(ot_inode *n, otter_graph *g, size_t n_given, const ot_ival *const *given, ot_ival *outs,
                               size_t n_outs);
/* Record for a tensor (initializer, Constant value): type, shape and, when small, its values. */
otter_status ot_ival_from_tensor(ot_infer *cx, const otter_tensor *t, ot_ival *v);
/* Copy an ival into the arena (dims and data deep-copied). */
otter_status ot_ival_copy(ot_infer *cx, ot_ival *dst, const ot_ival *src);

/* ---- shape rules, by the file that defines them (src/infer/infer_<file>.c); the operator registry
 * (src/ops/table.c) names them ---- */
/* infer_elementwise.c */
otter_status ot_infer_like_input(ot_inode *n);
otter_status ot_infer_unary_bool(ot_inode *n);
otter_status ot_infer_not(ot_inode *n);
otter_status ot_infer_neg(ot_inode *n);
otter_status ot_infer_clip(ot_inode *n);
otter_status ot_infer_prelu(ot_inode *n);
otter_status ot_infer_add(ot_inode *n);
otter_status ot_infer_sub(ot_inode *n);
otter_status ot_infer_mul(ot_inode *n);
otter_status ot_infer_div(ot_inode *n);
otter_status ot_infer_mod(ot_inode *n);
otter_status ot_infer_pow(ot_inode *n);
otter_status ot_infer_binary_plain(ot_inode *n);
otter_status ot_infer_clip_grad(ot_inode *n);
otter_status ot_infer_equal(ot_inode *n);
otter_status ot_infer_less(ot_inode *n);
otter_status ot_infer_greater(ot_inode *n);
otter_status ot_infer_less_eq(ot_inode *n);
otter_status ot_infer_greater_eq(ot_inode *n);
otter_status ot_infer_logic(ot_inode *n);
otter_status ot_infer_max(ot_inode *n);
otter_status ot_infer_min(ot_inode *n);
otter_status ot_infer_sum(ot_inode *n);
otter_status ot_infer_mean(ot_inode *n);
otter_status ot_infer_where(ot_inode *n);
/* infer_misc.c */
otter_status ot_infer_constant(ot_inode *n);
otter_status ot_infer_constant_of_shape(ot_inode *n);
otter_status ot_infer_cast(ot_inode *n);
otter_status ot_infer_cast_like(ot_inode *n);
otter_status ot_infer_bitcast(ot_inode *n);
otter_status ot_infer_range(ot_inode *n);
otter_status ot_infer_resize(ot_inode *n);
otter_status ot_infer_upsample(ot_inode *n);
otter_status ot_infer_random_gen(ot_inode *n);
otter_status ot_infer_like_with_dtype(ot_inode *n);
otter_status ot_infer_if(ot_inode *n);
otter_status ot_infer_loop(ot_inode *n);
otter_status ot_infer_scan(ot_inode *n);
/* infer_nn.c */
otter_status ot_infer_conv(ot_inode *n);
otter_status ot_infer_conv_transpose(ot_inode *n);
otter_status ot_infer_pool(ot_inode *n);
/* The spatial sizes out[0 .. rank - 2) of a pooling window over x whose attributes are named with prefix
 * (prefix + "kernel_shape", "strides", ..., "ceil_mode"; infer_nn.c). */
otter_status ot_infer_pool_window(ot_inode *n, const char *prefix, const ot_ival *x, ot_idim *out);
otter_status ot_infer_global_pool(ot_inode *n);
otter_status ot_infer_batch_norm(ot_inode *n);
otter_status ot_infer_layer_norm(ot_inode *n);
otter_status ot_infer_dropout(ot_inode *n);
otter_status ot_infer_gemm(ot_inode *n);
otter_status ot_infer_matmul(ot_inode *n);
otter_status ot_infer_matmul_integer(ot_inode *n);
otter_status ot_infer_einsum(ot_inode *n);
otter_status ot_infer_nll_loss(ot_inode *n);
otter_status ot_infer_sce_loss(ot_inode *n);
otter_status ot_infer_recurrent(ot_inode *n);
otter_status ot_infer_det(ot_inode *n);
/* infer_reduce.c */
otter_status ot_infer_reduce_sum(ot_inode *n);
otter_status ot_infer_reduce_other(ot_inode *n);
otter_status ot_infer_arg_reduce(ot_inode *n);
otter_status ot_infer_topk(ot_inode *n);
/* infer_shape.c */
otter_status ot_infer_identity(ot_inode *n);
otter_status ot_infer_reshape(ot_inode *n);
otter_status ot_infer_flatten(ot_inode *n);
otter_status ot_infer_squeeze(ot_inode *n);
otter_status ot_infer_unsqueeze(ot_inode *n);
otter_status ot_infer_transpose(ot_inode *n);
otter_status ot_infer_concat(ot_inode *n);
otter_status ot_infer_split(ot_inode *n);
otter_status ot_infer_slice(ot_inode *n);
otter_status ot_infer_gather(ot_inode *n);
otter_status ot_infer_gather_elements(ot_inode *n);
otter_status ot_infer_gather_nd(ot_inode *n);
otter_status ot_infer_pad(ot_inode *n);
otter_status ot_infer_tile(ot_inode *n);
otter_status ot_infer_expand(ot_inode *n);
otter_status ot_infer_shape(ot_inode *n);
otter_status ot_infer_size(ot_inode *n);
otter_status ot_infer_one_hot(ot_inode *n);
otter_status ot_infer_non_zero(ot_inode *n);
otter_status ot_infer_compress(ot_inode *n);
otter_status ot_infer_depth_to_space(ot_inode *n);
otter_status ot_infer_space_to_depth(ot_inode *n);
/* infer_training.c */
otter_status ot_infer_adagrad(ot_inode *n);
otter_status ot_infer_adam(ot_inode *n);
otter_status ot_infer_quantize(ot_inode *n);
otter_status ot_infer_dequantize(ot_inode *n);
otter_status ot_infer_dynamic_quantize(ot_inode *n);

/* infer_extra.c */
otter_status ot_infer_conv_integer(ot_inode *n);
otter_status ot_infer_qlinear_conv(ot_inode *n);
otter_status ot_infer_qlinear_matmul(ot_inode *n);
otter_status ot_infer_gridsample(ot_inode *n);
otter_status ot_infer_maxunpool(ot_inode *n);
otter_status ot_infer_roialign(ot_inode *n);
otter_status ot_infer_nonmaxsuppression(ot_inode *n);
otter_status ot_infer_unique(ot_inode *n);
otter_status ot_infer_dft(ot_inode *n);
otter_status ot_infer_stft(ot_inode *n);
otter_status ot_infer_window(ot_inode *n); /* HannWindow, HammingWindow, BlackmanWindow */
otter_status ot_infer_melweightmatrix(ot_inode *n);
otter_status ot_infer_stringnormalizer(ot_inode *n);
otter_status ot_infer_tfidfvectorizer(ot_inode *n);
otter_status ot_infer_multinomial(ot_inode *n);
/* infer_sequence.c */
otter_status ot_infer_sequence_empty(ot_inode *n);
otter_status ot_infer_sequence_construct(ot_inode *n);
otter_status ot_infer_sequence_insert(ot_inode *n);
otter_status ot_infer_sequence_at(ot_inode *n);
otter_status ot_infer_sequence_length(ot_inode *n);
otter_status ot_infer_split_to_sequence(ot_inode *n);
otter_status ot_infer_concat_from_sequence(ot_inode *n);
otter_status ot_infer_sequence_map(ot_inode *n);
otter_status ot_infer_optional(ot_inode *n);
otter_status ot_infer_optional_has_element(ot_inode *n);
otter_status ot_infer_optional_get_element(ot_inode *n);
/* infer_image.c */
otter_status ot_infer_center_crop_pad(ot_inode *n);
otter_status ot_infer_col2im(ot_inode *n);
otter_status ot_infer_affine_grid(ot_inode *n);
/* infer_training_ops.c: com.microsoft training operators, com.otter fused operators, Gradient */
otter_status ot_infer_adamw_optimizer(ot_inode *n);
otter_status ot_infer_batch_norm_grad(ot_inode *n);
otter_status ot_infer_concat_training(ot_inode *n);
otter_status ot_infer_conv_grad(ot_inode *n);
otter_status ot_infer_conv_transpose_grad(ot_inode *n);
otter_status ot_infer_otter_fused_conv(ot_inode *n);
/* infer_channel_blocks.c */
otter_status ot_infer_from_channel_blocks(ot_inode *n);
otter_status ot_infer_blocked_maxpool(ot_inode *n);
otter_status ot_infer_blocked_global_pool(ot_inode *n);
otter_status ot_infer_blocked_conv(ot_inode *n);
otter_status ot_infer_otter_fused_gemm(ot_inode *n);
otter_status ot_infer_ms_fused_matmul(ot_inode *n);
otter_status ot_infer_attention_core_grad(ot_inode *n);
otter_status ot_infer_otter_fused_matmul(ot_inode *n);
otter_status ot_infer_broadcast_gradient_args(ot_inode *n);
otter_status ot_infer_gather_elements_grad(ot_inode *n);
otter_status ot_infer_gather_grad(ot_inode *n);
otter_status ot_infer_gather_nd_grad(ot_inode *n);
otter_status ot_infer_gradient(ot_inode *n);
otter_status ot_infer_inplace_accumulator_v2(ot_inode *n);
otter_status ot_infer_layer_norm_grad(ot_inode *n);
otter_status ot_infer_pad_grad(ot_inode *n);
otter_status ot_infer_pool_grad(ot_inode *n);
otter_status ot_infer_reduce_all_l2(ot_inode *n);
otter_status ot_infer_reduce_sum_training(ot_inode *n);
otter_status ot_infer_sce_loss_grad(ot_inode *n);
otter_status ot_infer_sce_loss_internal(ot_inode *n);
otter_status ot_infer_sgd_optimizer_v2(ot_inode *n);
otter_status ot_infer_simplified_layer_norm(ot_inode *n);
otter_status ot_infer_slice_grad(ot_inode *n);
otter_status ot_infer_split_training(ot_inode *n);
/* infer_rnn_train.c: LSTMTraining, GRUTraining, LSTMGrad, GRUGrad, RNNGrad */
otter_status ot_infer_lstm_training(ot_inode *n);
otter_status ot_infer_gru_training(ot_inode *n);
otter_status ot_infer_lstm_grad(ot_inode *n);
otter_status ot_infer_gru_grad(ot_inode *n); /* and RNNGrad's, whose outputs are GRUGrad's */
/* infer_grad_nn.c: gradient operators whose outputs are shaped like their forward inputs */
otter_status ot_infer_grad_like_inputs(ot_inode *n);
/* infer_strings.c: StringSplit */
otter_status ot_infer_string_split(ot_inode *n);
/* infer_image_decoder.c: ImageDecoder */
otter_status ot_infer_image_decoder(ot_inode *n);
/* infer_ml.c: ai.onnx.ml operators */
otter_status ot_infer_array_feature_extractor(ot_inode *n);
otter_status ot_infer_label_encoder(ot_inode *n);
otter_status ot_infer_tree_ensemble(ot_inode *n);
otter_status ot_infer_tree_ensemble_classifier(ot_inode *n);
otter_status ot_infer_tree_ensemble_regressor(ot_inode *n);

/* infer_attention.c: the transformer operators */
otter_status ot_infer_attention(ot_inode *n);
otter_status ot_infer_rms_normalization(ot_inode *n);
otter_status ot_infer_flex_attention(ot_inode *n);
otter_status ot_infer_linear_attention(ot_inode *n);
otter_status ot_infer_causal_conv_with_state(ot_inode *n);

#endif
