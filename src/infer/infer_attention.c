/* Shape rules of the transformer operators: Attention, FlexAttention, LinearAttention,
 * CausalConvWithState, RMSNormalization (RotaryEmbedding, Swish, SwiGLU, TensorScatter are shaped
 * like their first input). */
#include "infer/infer_internal.h"

/* Attention: Y is Q's layout with V's head size; present key/value [B, kv_heads, past + kv, D];
 * qk_matmul_output [B, q_heads, q_len, past + kv]. */
otter_status ot_infer_attention(ot_inode *n) {
    otter_dtype qt = ot_in_dtype(n, 0), vt = ot_in_dtype(n, 2);
    for (size_t o = 0; o < n->n_out; o++) ot_out_type(n, o, o == 2 ? vt : qt);
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 1) || !ot_in_has_shape(n, 2)) return OTTER_OK;
    const ot_ival *q = ot_in(n, 0), *k = ot_in(n, 1), *v = ot_in(n, 2);
    if (q->rank != k->rank || q->rank != v->rank || (q->rank != 3 && q->rank != 4))
        return ot_inf_fail(n, OTTER_ERR_INVALID, "Q, K and V must all be 3D or all 4D, not ranks %d, %d, %d", q->rank,
                           k->rank, v->rank);
    ot_idim batch = q->dims[0], q_len = q->dims[q->rank - 2], kv_len = k->dims[k->rank - 2];
    ot_idim q_heads = OT_DIM_UNKNOWN, kv_heads = OT_DIM_UNKNOWN, head = OT_DIM_UNKNOWN, v_head = OT_DIM_UNKNOWN;
    if (q->rank == 4) {
        q_heads = q->dims[1], kv_heads = k->dims[1], head = q->dims[3], v_head = v->dims[3];
    } else {
        int64_t qh = ot_attr_int(n, "q_num_heads", 0), kvh = ot_attr_int(n, "kv_num_heads", 0);
        if (qh < 1 || kvh < 1)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "3D inputs need attributes q_num_heads and kv_num_heads");
        q_heads = ot_dim_known(qh), kv_heads = ot_dim_known(kvh);
        if (ot_dim_is_known(q->dims[2])) head = ot_dim_known(q->dims[2].v / qh);
        if (ot_dim_is_known(v->dims[2])) v_head = ot_dim_known(v->dims[2].v / kvh);
    }
    ot_idim total = kv_len;
    if (ot_in(n, 4)) {
        ot_idim past = ot_in_dim(n, 4, 2);
        total = ot_dim_is_known(past) && ot_dim_is_known(kv_len) ? ot_dim_known(past.v + kv_len.v) : OT_DIM_UNKNOWN;
    }
    ot_idim ydims[4] = {batch, q_heads, q_len, v_head};
    if (q->rank == 3) {
        ydims[1] = q_len;
        ydims[2] = ot_dim_is_known(v_head) ? ot_dim_known(q_heads.v * v_head.v) : OT_DIM_UNKNOWN;
    }
    OT_TRY(ot_out_shape(n, 0, qt, q->rank, ydims));
    const ot_idim pk[4] = {batch, kv_heads, total, head}, pv[4] = {batch, kv_heads, total, v_head};
    const ot_idim qk[4] = {batch, q_heads, q_len, total};
    if (n->n_out > 1) OT_TRY(ot_out_shape(n, 1, qt, 4, pk));
    if (n->n_out > 2) OT_TRY(ot_out_shape(n, 2, vt, 4, pv));
    if (n->n_out > 3) OT_TRY(ot_out_shape(n, 3, qt, 4, qk));
    return OTTER_OK;
}

/* RMSNormalization: X's shape, scale's element type (V). */
otter_status ot_infer_rms_normalization(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    otter_dtype st = ot_in_dtype(n, 1);
    if (st != OTTER_DTYPE_UNDEFINED && n->out[0].kind == OTTER_TYPE_TENSOR) n->out[0].dtype = st;
    return OTTER_OK;
}

/* FlexAttention: [B, Hq, L, Dv] from Q [B, Hq, L, D] and V [B, Hkv, S, Dv]. */
otter_status ot_infer_flex_attention(ot_inode *n) {
    otter_dtype qt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 2)) return ot_out_shape(n, 0, qt, 4, NULL);
    const ot_ival *q = ot_in(n, 0), *v = ot_in(n, 2);
    if (q->rank != 4 || v->rank != 4)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "Q and V must be rank 4, not %d and %d", q->rank, v->rank);
    const ot_idim y[4] = {q->dims[0], q->dims[1], q->dims[2], v->dims[3]};
    return ot_out_shape(n, 0, qt, 4, y);
}

/* LinearAttention: output [B, T, q_heads * d_v], present_state [B, kv_heads, d_k, d_v]. */
otter_status ot_infer_linear_attention(ot_inode *n) {
    otter_dtype qt = ot_in_dtype(n, 0), st = ot_in(n, 3) ? ot_in_dtype(n, 3) : qt;
    int64_t qh = ot_attr_int(n, "q_num_heads", 0), kvh = ot_attr_int(n, "kv_num_heads", 0);
    ot_out_type(n, 0, qt);
    ot_out_type(n, 1, st);
    if (qh < 1 || kvh < 1)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "attributes q_num_heads and kv_num_heads are required");
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 2)) return OTTER_OK;
    const ot_ival *q = ot_in(n, 0), *v = ot_in(n, 2);
    if (q->rank != 3 || v->rank != 3)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "query and value must be [B, T, heads * dim], not ranks %d and %d",
                           q->rank, v->rank);
    ot_idim dk = ot_dim_is_known(q->dims[2]) ? ot_dim_known(q->dims[2].v / qh) : OT_DIM_UNKNOWN;
    ot_idim dv = ot_dim_is_known(v->dims[2]) ? ot_dim_known(v->dims[2].v / kvh) : OT_DIM_UNKNOWN;
    const ot_idim y[3] = {q->dims[0], q->dims[1], ot_dim_is_known(dv) ? ot_dim_known(qh * dv.v) : OT_DIM_UNKNOWN};
    const ot_idim state[4] = {q->dims[0], ot_dim_known(kvh), dk, dv};
    OT_TRY(ot_out_shape(n, 0, qt, 3, y));
    return n->n_out > 1 ? ot_out_shape(n, 1, st, 4, state) : OTTER_OK;
}

/* CausalConvWithState: output like input [B, C, L], present_state [B, C, k - 1]. */
otter_status ot_infer_causal_conv_with_state(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    otter_dtype xt = ot_in_dtype(n, 0);
    ot_out_type(n, 1, xt);
    if (n->n_out < 2 || !ot_in_has_shape(n, 0)) return OTTER_OK;
    const ot_ival *x = ot_in(n, 0);
    if (x->rank != 3)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must be [batch, channels, length], not rank %d",
                           n->node->inputs[0], x->rank);
    ot_idim k = ot_in_dim(n, 1, 2);
    const ot_idim state[3] = {x->dims[0], x->dims[1], ot_dim_is_known(k) ? ot_dim_known(k.v - 1) : OT_DIM_UNKNOWN};
    return ot_out_shape(n, 1, xt, 3, state);
}
