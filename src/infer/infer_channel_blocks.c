/* Shape rules of the channel-blocked operators (runtime/layout.c): com.otter FromChannelBlocks,
 * BlockedMaxPool, BlockedGlobalAveragePool, and FusedConv with channel_blocks. The pooling and convolution
 * rules are the planar ones applied to the planar view [N, C, H, W] of the blocked
 * [N, C / B, H, W, B], their results put back into blocks of the same B (FusedConv: its channel_blocks). */
#include "infer/infer_internal.h"

/* dims[1] times (up) or over (down) the block size b, when both are known (b > 0). */
static ot_idim scaled(ot_idim d, int64_t b, bool up) {
    if (!ot_dim_is_known(d) || b <= 0) return OT_DIM_UNKNOWN;
    return ot_dim_known(up ? d.v * b : d.v / b);
}

/* The block size of blocked v (its last dimension), 0 when unknown. */
static int64_t block_of(const ot_ival *v) {
    return v && v->kind == OTTER_TYPE_TENSOR && v->rank == 5 && ot_dim_is_known(v->dims[4]) ? v->dims[4].v : 0;
}

/* The planar view of blocked v (rank 5), or v as it is (unknown, or another rank: the planar rule
 * then reports it). */
static const ot_ival *planar(ot_inode *n, const ot_ival *v) {
    if (!v || v->kind != OTTER_TYPE_TENSOR || v->rank != 5) return v;
    ot_ival *p = ot_inf_alloc(n->cx, sizeof *p);
    ot_idim *dims = ot_inf_alloc(n->cx, sizeof(ot_idim) * 4);
    if (!p || !dims) return NULL;
    *p = *v;
    p->rank = 4, p->dims = dims, p->n_data = -1, p->idata = NULL, p->fdata = NULL;
    dims[0] = v->dims[0], dims[1] = scaled(v->dims[1], block_of(v), true), dims[2] = v->dims[2], dims[3] = v->dims[3];
    return p;
}

/* Output i (planar, rank 4) put into blocks of b channels (0: unknown). */
static otter_status to_blocks(ot_inode *n, size_t i, int64_t b) {
    const ot_ival *o = &n->out[i];
    if (o->kind != OTTER_TYPE_TENSOR || o->rank != 4) return OTTER_OK;
    const ot_idim d[5] = {o->dims[0], scaled(o->dims[1], b, false), o->dims[2], o->dims[3],
                          b > 0 ? ot_dim_known(b) : OT_DIM_UNKNOWN};
    return ot_out_shape(n, i, o->dtype, 5, d);
}

/* The planar rule over the node's first n_in inputs seen through `planar`, its result in blocks of b. */
static otter_status as_planar(ot_inode *n, ot_infer_fn rule, int64_t opset, size_t n_in, int64_t b) {
    if (n_in > n->n_in) n_in = n->n_in;
    const ot_ival **in = ot_inf_alloc(n->cx, sizeof(ot_ival *) * (n_in + 1));
    if (!in) return OT_INF_NOMEM(n);
    for (size_t i = 0; i < n_in; i++)
        if ((in[i] = planar(n, ot_in(n, i))) == NULL && ot_in(n, i)) return OT_INF_NOMEM(n);
    OT_TRY(ot_infer_as(n, rule, opset, n_in, in, (const char *const *)n->node->inputs));
    return to_blocks(n, 0, b);
}

otter_status ot_infer_from_channel_blocks(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, ot_in_dtype(n, 0));
        return OTTER_OK;
    }
    if (x->rank != 5) return ot_inf_fail(n, OTTER_ERR_INVALID, "FromChannelBlocks needs [N, C/B, H, W, B]");
    const ot_ival *p = planar(n, x);
    if (!p) return OT_INF_NOMEM(n);
    return ot_out_shape(n, 0, x->dtype, 4, p->dims);
}

/* the planar [N, C, 1, 1] */
otter_status ot_infer_blocked_global_pool(ot_inode *n) {
    const ot_ival *in[1] = {planar(n, ot_in(n, 0))};
    if (!in[0] && ot_in(n, 0)) return OT_INF_NOMEM(n);
    return ot_infer_as(n, ot_infer_global_pool, 1, 1, in, (const char *const *)n->node->inputs);
}

otter_status ot_infer_blocked_maxpool(ot_inode *n) { return as_planar(n, ot_infer_pool, 12, 1, block_of(ot_in(n, 0))); }

/* X, W, B of the blocked FusedConv (the sum input Z is shaped like the result); with maxpool_kernel_shape
 * (runtime/layout.c: a MaxPool joined to it) the window of its maxpool_ attributes over the result */
otter_status ot_infer_blocked_conv(ot_inode *n) {
    OT_TRY(as_planar(n, ot_infer_conv, 11, 3, ot_attr_int(n, "channel_blocks", 0)));
    ot_ival *y = n->n_out > 0 ? &n->out[0] : NULL;
    if (!otter_node_attr(n->node, "maxpool_kernel_shape") || !y || y->kind != OTTER_TYPE_TENSOR || y->rank != 5)
        return OTTER_OK;
    const ot_ival *p = planar(n, y);
    if (!p) return OT_INF_NOMEM(n);
    return ot_infer_pool_window(n, "maxpool_", p, y->dims + 2);
}
