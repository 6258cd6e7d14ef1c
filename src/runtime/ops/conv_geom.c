#include "runtime/ops/conv_geom.h"

#include <stdio.h>

#include "core/core.h"
#include "ops/shape_math.h"
#include "runtime/ops/broadcast.h"

otter_status ot_conv_geom_forward(const ot_kernel_ctx *ctx, ot_conv_geom *g, bool ceil_mode) {
    return ot_conv_geom_forward_named(ctx, g, ceil_mode, "");
}

/* prefix + name, in buf unless prefix is empty (most calls: a run's every convolution formatted four names) */
static const char *prefixed(char *buf, size_t size, const char *prefix, const char *name) {
    if (!prefix[0]) return name;
    snprintf(buf, size, "%s%s", prefix, name);
    return buf;
}

otter_status ot_conv_geom_forward_named(const ot_kernel_ctx *ctx, ot_conv_geom *g, bool ceil_mode, const char *prefix) {
    char name[64];
    bool has;
    for (int i = 0; i < g->nd; i++) g->stride[i] = 1, g->dil[i] = 1, g->pb[i] = 0, g->pe[i] = 0, g->opad[i] = 0;
    OT_TRY(ot_ctx_ints_attr(ctx, prefixed(name, sizeof name, prefix, "strides"), g->nd, g->stride, &has));
    OT_TRY(ot_ctx_ints_attr(ctx, prefixed(name, sizeof name, prefix, "dilations"), g->nd, g->dil, &has));
    int64_t pads[2 * OT_SP];
    OT_TRY(ot_ctx_ints_attr(ctx, prefixed(name, sizeof name, prefix, "pads"), 2 * g->nd, pads, &has));
    if (has)
        for (int i = 0; i < g->nd; i++) g->pb[i] = pads[i], g->pe[i] = pads[g->nd + i];
    const char *auto_pad = "NOTSET";
    if (prefix[0])
        auto_pad = ot_ctx_attr_string_or(ctx, prefixed(name, sizeof name, prefix, "auto_pad"), "NOTSET");
    else
        OT_TRY(ot_ctx_attr_string(ctx, "auto_pad", &auto_pad));
    ot_auto_pad pad = ot_auto_pad_from(auto_pad);
    for (int i = 0; i < g->nd; i++) {
        ot_window_status ws = ot_window_axis(g->in[i], g->k[i], g->stride[i], g->dil[i], pad, ceil_mode, &g->pb[i],
                                             &g->pe[i], &g->out[i]);
        if (ws == OT_WINDOW_BAD_PARAM)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID, "invalid kernel/stride/dilation/pad along spatial axis %d", i);
        if (ws == OT_WINDOW_TOO_SMALL)
            return ot_ctx_error(ctx, OTTER_ERR_INVALID,
                                "spatial axis %d of the input (size %lld with pads) is smaller than the kernel (%lld)",
                                i, (long long)g->in[i], (long long)((g->k[i] - 1) * g->dil[i] + 1));
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
