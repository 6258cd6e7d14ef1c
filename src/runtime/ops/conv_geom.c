#include "runtime/ops/conv_geom.h"

#include <string.h>

#include "core/core.h"
#include "runtime/ops/broadcast.h"

otter_status ot_conv_geom_forward(const ot_kernel_ctx *ctx, ot_conv_geom *g, bool ceil_mode) {
    bool has;
    for (int i = 0; i < g->nd; i++) g->stride[i] = 1, g->dil[i] = 1, g->pb[i] = 0, g->pe[i] = 0, g->opad[i] = 0;
    OT_TRY(ot_ctx_ints_attr(ctx, "strides", g->nd, g->stride, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, "dilations", g->nd, g->dil, &has));
    int64_t pads[2 * OT_SP];
    OT_TRY(ot_ctx_ints_attr(ctx, "pads", 2 * g->nd, pads, &has));
    if (has)
        for (int i = 0; i < g->nd; i++) g->pb[i] = pads[i], g->pe[i] = pads[g->nd + i];
    const char *ap = otter_node_attr_string(ctx->node, "auto_pad", "NOTSET");
    bool same_u = strcmp(ap, "SAME_UPPER") == 0, same_l = strcmp(ap, "SAME_LOWER") == 0;
    if (strcmp(ap, "VALID") == 0)
        for (int i = 0; i < g->nd; i++) g->pb[i] = g->pe[i] = 0;
    for (int i = 0; i < g->nd; i++) {
        if (g->stride[i] < 1 || g->dil[i] < 1 || g->k[i] < 1 || g->pb[i] < 0 || g->pe[i] < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "invalid kernel/stride/dilation/pad along spatial axis %d", i);
        int64_t ke = (g->k[i] - 1) * g->dil[i] + 1;
        if (same_u || same_l) {
            int64_t o = (g->in[i] + g->stride[i] - 1) / g->stride[i];
            int64_t tot = (o - 1) * g->stride[i] + ke - g->in[i];
            if (tot < 0) tot = 0;
            g->pb[i] = same_u ? tot / 2 : tot - tot / 2;
            g->pe[i] = tot - g->pb[i];
            g->out[i] = o;
            continue;
        }
        int64_t span = g->in[i] + g->pb[i] + g->pe[i] - ke;
        if (span < 0)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "spatial axis %d of the input (size %lld with pads) is smaller than the kernel (%lld)",
                                i, (long long)g->in[i], (long long)ke);
        int64_t o = (ceil_mode ? (span + g->stride[i] - 1) / g->stride[i] : span / g->stride[i]) + 1;
        if (ceil_mode && (o - 1) * g->stride[i] >= g->in[i] + g->pb[i]) o--;
        g->out[i] = o;
    }
    return OTTER_OK;
}

void ot_conv_geom_to3(ot_conv_geom *g) {
    int sh = OT_SP - g->nd;
    for (int i = OT_SP - 1; sh > 0 && i >= 0; i--) {
        int j = i - sh;
        g->in[i] = j >= 0 ? g->in[j] : 1;
        g->k[i] = j >= 0 ? g->k[j] : 1;
        g->out[i] = j >= 0 ? g->out[j] : 1;
        g->stride[i] = j >= 0 ? g->stride[j] : 1;
        g->dil[i] = j >= 0 ? g->dil[j] : 1;
        g->pb[i] = j >= 0 ? g->pb[j] : 0;
        g->pe[i] = j >= 0 ? g->pe[j] : 0;
        g->opad[i] = j >= 0 ? g->opad[j] : 0;
    }
    g->in_size = g->in[0] * g->in[1] * g->in[2];
    g->k_size = g->k[0] * g->k[1] * g->k[2];
    g->out_size = g->out[0] * g->out[1] * g->out[2];
}

ot_conv_window ot_conv_geom_window(const ot_conv_geom *g) {
    ot_conv_window w;
    for (int i = 0; i < OT_SP; i++)
        w.in[i] = g->in[i], w.out[i] = g->out[i], w.k[i] = g->k[i], w.stride[i] = g->stride[i], w.dil[i] = g->dil[i],
        w.pad_begin[i] = g->pb[i];
    return w;
}
