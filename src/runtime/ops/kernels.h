/* Every kernel, by the file that defines it (src/runtime/ops/<file>.c). The operator registry
 * (src/ops/table.c) names them; nothing else calls them directly. */
#ifndef OTTER_RUNTIME_OPS_KERNELS_H
#define OTTER_RUNTIME_OPS_KERNELS_H

#include "runtime/op.h"

/* elementwise.c: unary/binary math, comparison, logic, activations */
otter_status ot_kernel_abs(ot_kernel_ctx *ctx);
otter_status ot_kernel_neg(ot_kernel_ctx *ctx);
otter_status ot_kernel_sign(ot_kernel_ctx *ctx);
otter_status ot_kernel_ceil(ot_kernel_ctx *ctx);
otter_status ot_kernel_floor(ot_kernel_ctx *ctx);
otter_status ot_kernel_round(ot_kernel_ctx *ctx);
otter_status ot_kernel_reciprocal(ot_kernel_ctx *ctx);
otter_status ot_kernel_sqrt(ot_kernel_ctx *ctx);
otter_status ot_kernel_exp(ot_kernel_ctx *ctx);
otter_status ot_kernel_log(ot_kernel_ctx *ctx);
otter_status ot_kernel_sin(ot_kernel_ctx *ctx);
otter_status ot_kernel_cos(ot_kernel_ctx *ctx);
otter_status ot_kernel_tan(ot_kernel_ctx *ctx);
otter_status ot_kernel_asin(ot_kernel_ctx *ctx);
otter_status ot_kernel_acos(ot_kernel_ctx *ctx);
otter_status ot_kernel_atan(ot_kernel_ctx *ctx);
otter_status ot_kernel_sinh(ot_kernel_ctx *ctx);
otter_status ot_kernel_cosh(ot_kernel_ctx *ctx);
otter_status ot_kernel_asinh(ot_kernel_ctx *ctx);
otter_status ot_kernel_acosh(ot_kernel_ctx *ctx);
otter_status ot_kernel_atanh(ot_kernel_ctx *ctx);
otter_status ot_kernel_erf(ot_kernel_ctx *ctx);
otter_status ot_kernel_tanh(ot_kernel_ctx *ctx);
otter_status ot_kernel_sigmoid(ot_kernel_ctx *ctx);
otter_status ot_kernel_hardsigmoid(ot_kernel_ctx *ctx);
otter_status ot_kernel_hardswish(ot_kernel_ctx *ctx);
otter_status ot_kernel_relu(ot_kernel_ctx *ctx);
otter_status ot_kernel_leakyrelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_elu(ot_kernel_ctx *ctx);
otter_status ot_kernel_selu(ot_kernel_ctx *ctx);
otter_status ot_kernel_celu(ot_kernel_ctx *ctx);
otter_status ot_kernel_thresholdedrelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_softplus(ot_kernel_ctx *ctx);
otter_status ot_kernel_softsign(ot_kernel_ctx *ctx);
otter_status ot_kernel_mish(ot_kernel_ctx *ctx);
otter_status ot_kernel_shrink(ot_kernel_ctx *ctx);
otter_status ot_kernel_not(ot_kernel_ctx *ctx);
otter_status ot_kernel_isnan(ot_kernel_ctx *ctx);
otter_status ot_kernel_isinf(ot_kernel_ctx *ctx);
otter_status ot_kernel_add(ot_kernel_ctx *ctx);
otter_status ot_kernel_sub(ot_kernel_ctx *ctx);
otter_status ot_kernel_mul(ot_kernel_ctx *ctx);
otter_status ot_kernel_div(ot_kernel_ctx *ctx);
otter_status ot_kernel_pow(ot_kernel_ctx *ctx);
otter_status ot_kernel_mod(ot_kernel_ctx *ctx);
otter_status ot_kernel_prelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_max(ot_kernel_ctx *ctx);
otter_status ot_kernel_min(ot_kernel_ctx *ctx);
otter_status ot_kernel_sum(ot_kernel_ctx *ctx);
otter_status ot_kernel_mean(ot_kernel_ctx *ctx);
otter_status ot_kernel_equal(ot_kernel_ctx *ctx);
otter_status ot_kernel_greater(ot_kernel_ctx *ctx);
otter_status ot_kernel_greater_equal(ot_kernel_ctx *ctx);
otter_status ot_kernel_less(ot_kernel_ctx *ctx);
otter_status ot_kernel_less_equal(ot_kernel_ctx *ctx);
otter_status ot_kernel_and(ot_kernel_ctx *ctx);
otter_status ot_kernel_or(ot_kernel_ctx *ctx);
otter_status ot_kernel_xor(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitshift(ot_kernel_ctx *ctx);
otter_status ot_kernel_where(ot_kernel_ctx *ctx);
otter_status ot_kernel_clip(ot_kernel_ctx *ctx);

/* reduce.c: Reduce*, ArgMax/ArgMin, softmax family, TopK, CumSum, CumProd */
otter_status ot_kernel_reduce_sum(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_mean(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_max(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_min(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_prod(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_l1(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_l2(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_log_sum(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_log_sum_exp(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_sum_square(ot_kernel_ctx *ctx);
otter_status ot_kernel_argmax(ot_kernel_ctx *ctx);
otter_status ot_kernel_argmin(ot_kernel_ctx *ctx);
otter_status ot_kernel_softmax(ot_kernel_ctx *ctx);
otter_status ot_kernel_logsoftmax(ot_kernel_ctx *ctx);
otter_status ot_kernel_hardmax(ot_kernel_ctx *ctx);
otter_status ot_kernel_cumprod(ot_kernel_ctx *ctx);
otter_status ot_kernel_cumprod_grad(ot_kernel_ctx *ctx); /* com.otter */
otter_status ot_kernel_cumsum(ot_kernel_ctx *ctx);
otter_status ot_kernel_topk(ot_kernel_ctx *ctx);

/* linalg.c: Gemm, MatMul, Einsum, integer and quantized matmul */
otter_status ot_kernel_matmul(ot_kernel_ctx *ctx);
otter_status ot_kernel_gemm(ot_kernel_ctx *ctx);
otter_status ot_kernel_matmulinteger(ot_kernel_ctx *ctx);
otter_status ot_kernel_qlinearmatmul(ot_kernel_ctx *ctx);
otter_status ot_kernel_einsum(ot_kernel_ctx *ctx);
/* Y_t = alpha op(A_t) op(B_t) for t < n_batch, each M x N at Y + t M N (rows N apart), A_t and B_t
 * at A + a_off and B + b_off (floats) as offsets(arg, t, &a_off, &b_off) says, their rows lda and
 * ldb apart: one product per task on the session's threads when there are at least two a thread,
 * else each product over the threads. */
typedef void (*ot_product_offsets)(const void *arg, int64_t t, int64_t *a_off, int64_t *b_off);
typedef struct ot_product_batch {
    bool ta, tb;
    int64_t n_batch, M, N, K, lda, ldb;
    float alpha;
    const float *A, *B;
    float *Y;
    const float *gate; /* NULL, or shaped as Y: each product's C = gate > 0 ? C : +0 (ReluGrad) */
    ot_product_offsets offsets;
    const void *arg;
} ot_product_batch;
otter_status ot_sgemm_batch(const ot_kernel_ctx *ctx, const ot_product_batch *p);

/* nn_conv.c: Conv, ConvInteger, QLinearConv, ConvTranspose */
otter_status ot_kernel_conv(ot_kernel_ctx *ctx);
otter_status ot_kernel_convinteger(ot_kernel_ctx *ctx);
otter_status ot_kernel_qlinearconv(ot_kernel_ctx *ctx);
otter_status ot_kernel_convtranspose(ot_kernel_ctx *ctx);

/* nn_pool.c: pooling, global pooling, MaxUnpool, com.otter BlockedMaxPool, BlockedGlobalAveragePool */
otter_status ot_kernel_maxpool(ot_kernel_ctx *ctx);
otter_status ot_kernel_blocked_maxpool(ot_kernel_ctx *ctx);
otter_status ot_kernel_blocked_globalaveragepool(ot_kernel_ctx *ctx);
otter_status ot_kernel_averagepool(ot_kernel_ctx *ctx);
otter_status ot_kernel_lppool(ot_kernel_ctx *ctx);
otter_status ot_kernel_globalaveragepool(ot_kernel_ctx *ctx);
otter_status ot_kernel_globalmaxpool(ot_kernel_ctx *ctx);
otter_status ot_kernel_maxunpool(ot_kernel_ctx *ctx);

/* channel_blocks.c: com.otter FromChannelBlocks */
otter_status ot_kernel_from_channel_blocks(ot_kernel_ctx *ctx);

/* nn_sample.c: GridSample, GridSampleGrad */
otter_status ot_kernel_gridsample(ot_kernel_ctx *ctx);
otter_status ot_kernel_gridsample_grad(ot_kernel_ctx *ctx); /* com.otter */

/* image.c: CenterCropPad, Col2Im, AffineGrid */
otter_status ot_kernel_center_crop_pad(ot_kernel_ctx *ctx);
otter_status ot_kernel_col2im(ot_kernel_ctx *ctx);
otter_status ot_kernel_affine_grid(ot_kernel_ctx *ctx);

/* deform_conv.c: DeformConv, DeformConvGrad */
otter_status ot_kernel_deform_conv(ot_kernel_ctx *ctx);
otter_status ot_kernel_deform_conv_grad(ot_kernel_ctx *ctx); /* com.otter */

/* nn_norm.c: BatchNormalization, InstanceNormalization, LayerNormalization, LRN */
otter_status ot_kernel_batchnorm(ot_kernel_ctx *ctx);
otter_status ot_kernel_instancenorm(ot_kernel_ctx *ctx);
otter_status ot_kernel_layernorm(ot_kernel_ctx *ctx);
otter_status ot_kernel_lrn(ot_kernel_ctx *ctx);

/* nn_losses.c: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss */
otter_status ot_kernel_nllloss(ot_kernel_ctx *ctx);
otter_status ot_kernel_sce(ot_kernel_ctx *ctx);

/* shape.c: Reshape, Transpose, Concat, Split, Slice, Tile, Expand, DepthToSpace, ... */
otter_status ot_kernel_reshape(ot_kernel_ctx *ctx);
otter_status ot_kernel_flatten(ot_kernel_ctx *ctx);
otter_status ot_kernel_squeeze(ot_kernel_ctx *ctx);
otter_status ot_kernel_unsqueeze(ot_kernel_ctx *ctx);
otter_status ot_kernel_transpose(ot_kernel_ctx *ctx);
otter_status ot_kernel_concat(ot_kernel_ctx *ctx);
otter_status ot_kernel_split(ot_kernel_ctx *ctx);
otter_status ot_kernel_slice(ot_kernel_ctx *ctx);
otter_status ot_kernel_pad(ot_kernel_ctx *ctx);
otter_status ot_kernel_pad_grad(ot_kernel_ctx *ctx); /* com.otter */
otter_status ot_kernel_tile(ot_kernel_ctx *ctx);
otter_status ot_kernel_expand(ot_kernel_ctx *ctx);
otter_status ot_kernel_depthtospace(ot_kernel_ctx *ctx);
otter_status ot_kernel_spacetodepth(ot_kernel_ctx *ctx);
otter_status ot_kernel_reversesequence(ot_kernel_ctx *ctx);
otter_status ot_kernel_compress(ot_kernel_ctx *ctx);

/* shape_index.c: Gather and Scatter families */
otter_status ot_kernel_gather(ot_kernel_ctx *ctx);
otter_status ot_kernel_gather_elements(ot_kernel_ctx *ctx);
otter_status ot_kernel_gathernd(ot_kernel_ctx *ctx);
otter_status ot_kernel_scatter_elements(ot_kernel_ctx *ctx);
otter_status ot_kernel_scatternd(ot_kernel_ctx *ctx);

/* resize.c: Resize, Upsample */
otter_status ot_kernel_resize(ot_kernel_ctx *ctx);
otter_status ot_kernel_resize_grad(ot_kernel_ctx *ctx); /* com.microsoft ResizeGrad */
otter_status ot_kernel_upsample(ot_kernel_ctx *ctx);

/* misc.c: Constant, Cast, Range, OneHot, Shape, Dropout, control flow */
otter_status ot_kernel_constant(ot_kernel_ctx *ctx);
otter_status ot_kernel_constant_of_shape(ot_kernel_ctx *ctx);
otter_status ot_kernel_cast(ot_kernel_ctx *ctx);
otter_status ot_kernel_castlike(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitcast(ot_kernel_ctx *ctx);
otter_status ot_kernel_range(ot_kernel_ctx *ctx);
otter_status ot_kernel_onehot(ot_kernel_ctx *ctx);
otter_status ot_kernel_eyelike(ot_kernel_ctx *ctx);
otter_status ot_kernel_trilu(ot_kernel_ctx *ctx);
otter_status ot_kernel_shape(ot_kernel_ctx *ctx);
otter_status ot_kernel_size(ot_kernel_ctx *ctx);
otter_status ot_kernel_identity(ot_kernel_ctx *ctx);
otter_status ot_kernel_dropout(ot_kernel_ctx *ctx);
otter_status ot_kernel_nonzero(ot_kernel_ctx *ctx);
otter_status ot_kernel_if(ot_kernel_ctx *ctx);
otter_status ot_kernel_loop(ot_kernel_ctx *ctx);
otter_status ot_kernel_scan(ot_kernel_ctx *ctx);

/* rnn.c: RNN, GRU, LSTM */
otter_status ot_kernel_rnn(ot_kernel_ctx *ctx);
otter_status ot_kernel_gru(ot_kernel_ctx *ctx);
otter_status ot_kernel_lstm(ot_kernel_ctx *ctx);
/* rnn_train.c: LSTMTraining, GRUTraining, LSTMGrad, GRUGrad, RNNGrad */
otter_status ot_kernel_lstm_training(ot_kernel_ctx *ctx);
otter_status ot_kernel_gru_training(ot_kernel_ctx *ctx);
otter_status ot_kernel_lstm_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_gru_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_rnn_grad(ot_kernel_ctx *ctx);

/* quant.c: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear */
otter_status ot_kernel_quantize(ot_kernel_ctx *ctx);
otter_status ot_kernel_dequantize(ot_kernel_ctx *ctx);
otter_status ot_kernel_dynamic_quantize(ot_kernel_ctx *ctx);

/* sequence.c: Sequence*, Optional*, com.microsoft optimizers over sequences */
otter_status ot_kernel_sequence_empty(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_construct(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_insert(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_at(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_erase(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_length(ot_kernel_ctx *ctx);
otter_status ot_kernel_split_to_sequence(ot_kernel_ctx *ctx);
otter_status ot_kernel_concat_from_sequence(ot_kernel_ctx *ctx);
otter_status ot_kernel_sequence_map(ot_kernel_ctx *ctx);
otter_status ot_kernel_optional_make(ot_kernel_ctx *ctx);
otter_status ot_kernel_optional_has_element(ot_kernel_ctx *ctx);
otter_status ot_kernel_optional_get_element(ot_kernel_ctx *ctx);
otter_status ot_kernel_adamw_optimizer(ot_kernel_ctx *ctx);
otter_status ot_kernel_sgd_optimizer_v2(ot_kernel_ctx *ctx);
otter_status ot_kernel_inplace_clip_grad_norm(ot_kernel_ctx *ctx);

/* extra.c: NonMaxSuppression, RoiAlign, TfIdfVectorizer, Unique, DFT/STFT/windows, MVN, Det */
otter_status ot_kernel_nms(ot_kernel_ctx *ctx);
otter_status ot_kernel_tfidf(ot_kernel_ctx *ctx);
otter_status ot_kernel_unique(ot_kernel_ctx *ctx);
otter_status ot_kernel_hann(ot_kernel_ctx *ctx);
otter_status ot_kernel_hamming(ot_kernel_ctx *ctx);
otter_status ot_kernel_blackman(ot_kernel_ctx *ctx);
otter_status ot_kernel_dft(ot_kernel_ctx *ctx);
otter_status ot_kernel_dft_grad(ot_kernel_ctx *ctx); /* com.otter */
otter_status ot_kernel_stft(ot_kernel_ctx *ctx);
otter_status ot_kernel_stft_grad(ot_kernel_ctx *ctx); /* com.otter */
otter_status ot_kernel_mel(ot_kernel_ctx *ctx);
otter_status ot_kernel_roialign(ot_kernel_ctx *ctx);
otter_status ot_kernel_roialign_grad(ot_kernel_ctx *ctx); /* com.otter */
otter_status ot_kernel_mvn(ot_kernel_ctx *ctx);
otter_status ot_kernel_det(ot_kernel_ctx *ctx);
otter_status ot_kernel_det_grad(ot_kernel_ctx *ctx); /* com.otter */

/* training.c: com.microsoft training ops, ai.onnx.preview.training optimizers */
otter_status ot_kernel_inplace_accumulator_v2(ot_kernel_ctx *ctx);
otter_status ot_kernel_inplace_accumulator(ot_kernel_ctx *ctx);
otter_status ot_kernel_zero_gradient(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_sum_training(ot_kernel_ctx *ctx);
otter_status ot_kernel_relu_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_sigmoid_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_quick_gelu_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_clip_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_tanh_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_gelu_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_fastgelu_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_bias_gelu_grad_dx(ot_kernel_ctx *ctx);
otter_status ot_kernel_bias_fastgelu_grad_dx(ot_kernel_ctx *ctx);
otter_status ot_kernel_gelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_fastgelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_biasgelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_softmax_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_softmax_grad13(ot_kernel_ctx *ctx);
otter_status ot_kernel_logsoftmax_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_logsoftmax_grad13(ot_kernel_ctx *ctx);
otter_status ot_kernel_dropout_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_scale(ot_kernel_ctx *ctx);
otter_status ot_kernel_reduce_all_l2(ot_kernel_ctx *ctx);
otter_status ot_kernel_fused_matmul(ot_kernel_ctx *ctx);
otter_status ot_kernel_fused_matmul_relu_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_adagrad(ot_kernel_ctx *ctx);
otter_status ot_kernel_momentum(ot_kernel_ctx *ctx);
otter_status ot_kernel_adam(ot_kernel_ctx *ctx);

/* training_norm.c: LayerNormalization and BatchNormalization gradients, SimplifiedLayerNormalization */
otter_status ot_kernel_layernorm_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_simplified_layernorm_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_simplified_layernorm(ot_kernel_ctx *ctx);
otter_status ot_kernel_batchnorm_internal(ot_kernel_ctx *ctx);
otter_status ot_kernel_batchnorm_grad(ot_kernel_ctx *ctx);

/* grad_nn.c: com.otter InstanceNormalizationGrad, GroupNormalizationGrad, AttentionGrad */
otter_status ot_kernel_instancenorm_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_group_normalization_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_attention_grad(ot_kernel_ctx *ctx);

/* training_conv.c: ConvGrad, ConvTransposeGrad */
otter_status ot_kernel_conv_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_conv_transpose_grad(ot_kernel_ctx *ctx);

/* training_pool.c: MaxPoolGrad, AveragePoolGrad */
otter_status ot_kernel_maxpool_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_avgpool_grad(ot_kernel_ctx *ctx);

/* training_losses.c: SoftmaxCrossEntropyLossInternal and its gradients */
otter_status ot_kernel_sce_loss_internal(ot_kernel_ctx *ctx);
otter_status ot_kernel_sce_loss_grad(ot_kernel_ctx *ctx);

/* training_shape.c: GatherGrad, GatherElementsGrad, GatherNDGrad, SliceGrad, ConcatTraining, SplitTraining,
 * BroadcastGradientArgs */
otter_status ot_kernel_gather_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_gather_elements_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_gather_nd_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_slice_grad(ot_kernel_ctx *ctx);
otter_status ot_kernel_concat_training(ot_kernel_ctx *ctx);
otter_status ot_kernel_split_training(ot_kernel_ctx *ctx);
otter_status ot_kernel_broadcast_gradient_args(ot_kernel_ctx *ctx);

/* training_attention.c: com.otter AttentionCoreGrad (the fused gradient of Softmax(Qs Kt) V) */
otter_status ot_kernel_attention_core_grad(ot_kernel_ctx *ctx);

/* gradient.c: ai.onnx.preview.training Gradient, through the public autodiff API */
otter_status ot_kernel_gradient(ot_kernel_ctx *ctx);

/* random.c: RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial; each node draws from its
 * own stream, kept with the session */
otter_status ot_kernel_random_normal(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_uniform(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_normal_like(ot_kernel_ctx *ctx);
otter_status ot_kernel_random_uniform_like(ot_kernel_ctx *ctx);
otter_status ot_kernel_bernoulli(ot_kernel_ctx *ctx);
otter_status ot_kernel_multinomial(ot_kernel_ctx *ctx);

/* lp_norm.c: LpNormalization, GlobalLpPool */
otter_status ot_kernel_lp_normalization(ot_kernel_ctx *ctx);
otter_status ot_kernel_global_lp_pool(ot_kernel_ctx *ctx);

/* bitwise.c: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot */
otter_status ot_kernel_bitwise_and(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_or(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_xor(ot_kernel_ctx *ctx);
otter_status ot_kernel_bitwise_not(ot_kernel_ctx *ctx);

/* gelu.c: ai.onnx Gelu (exact or tanh; com.microsoft Gelu is training.c's), com.microsoft QuickGelu, Swish, SwiGLU */
otter_status ot_kernel_onnx_gelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_quick_gelu(ot_kernel_ctx *ctx);
otter_status ot_kernel_swish(ot_kernel_ctx *ctx);
otter_status ot_kernel_swiglu(ot_kernel_ctx *ctx);

/* group_norm.c: GroupNormalization */
otter_status ot_kernel_group_normalization(ot_kernel_ctx *ctx);

/* strings.c: StringNormalizer, StringConcat, StringSplit, RegexFullMatch */
otter_status ot_kernel_string_normalizer(ot_kernel_ctx *ctx);
otter_status ot_kernel_string_concat(ot_kernel_ctx *ctx);
otter_status ot_kernel_string_split(ot_kernel_ctx *ctx);
otter_status ot_kernel_regex_full_match(ot_kernel_ctx *ctx);

/* image_decoder.c: ImageDecoder */
otter_status ot_kernel_image_decoder(ot_kernel_ctx *ctx);

/* ml.c: ai.onnx.ml operators */
otter_status ot_kernel_array_feature_extractor(ot_kernel_ctx *ctx);
otter_status ot_kernel_binarizer(ot_kernel_ctx *ctx);
otter_status ot_kernel_label_encoder(ot_kernel_ctx *ctx);
otter_status ot_kernel_label_encoder_v1(ot_kernel_ctx *ctx);
otter_status ot_kernel_tree_ensemble(ot_kernel_ctx *ctx);
otter_status ot_kernel_tree_ensemble_classifier(ot_kernel_ctx *ctx);
otter_status ot_kernel_tree_ensemble_regressor(ot_kernel_ctx *ctx);
/* attention.c: Attention (fused: gemm, bias, softmax, gemm per block of query rows) */
otter_status ot_kernel_attention(ot_kernel_ctx *ctx);

/* flex_attention.c: ai.onnx.preview FlexAttention */
otter_status ot_kernel_flex_attention(ot_kernel_ctx *ctx);

/* linear_attention.c: LinearAttention */
otter_status ot_kernel_linear_attention(ot_kernel_ctx *ctx);

/* causal_conv.c: CausalConvWithState */
otter_status ot_kernel_causal_conv_with_state(ot_kernel_ctx *ctx);

/* rms_norm.c: RMSNormalization */
otter_status ot_kernel_rms_normalization(ot_kernel_ctx *ctx);

/* rotary.c: RotaryEmbedding */
otter_status ot_kernel_rotary_embedding(ot_kernel_ctx *ctx);

/* tensor_scatter.c: TensorScatter */
otter_status ot_kernel_tensor_scatter(ot_kernel_ctx *ctx);

#endif
