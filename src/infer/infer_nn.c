/* Shape inference: Conv, ConvTranspose, pooling, normalization, Dropout, Gemm, MatMul, Einsum,
 * and the loss operators. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infer/infer_internal.h"
#include "ops/shape_math.h"

/* ---- convolution and pooling ---- */

typedef struct conv_attrs {
    int k; /* number of spatial dims */
    int64_t kernel[OTTER_MAX_RANK], strides[OTTER_MAX_RANK], dil[OTTER_MAX_RANK], pads[2 * OTTER_MAX_RANK];
    bool kernel_known;
    const char *auto_pad;
} conv_attrs;

/* Read kernel_shape (or W's spatial dims), strides, dilations, pads, auto_pad, each named with prefix ("": the
 * operator's own; "maxpool_": a MaxPool joined to a blocked FusedConv, runtime/layout.c). */
static otter_status conv_attrs_read(ot_inode *n, const char *prefix, int k, const ot_ival *w, conv_attrs *c) {
    memset(c, 0, sizeof *c);
    c->k = k;
    const int64_t *v;
    size_t cnt;
    char name[64];
    c->kernel_known = true;
    snprintf(name, sizeof name, "%skernel_shape", prefix);
    if (ot_attr_ints(n, name, &v, &cnt)) {
        if ((int)cnt != k)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "%s has %zu entries for %d spatial dimensions", name, cnt, k);
        memcpy(c->kernel, v, sizeof(int64_t) * cnt);
    } else if (w && w->kind == OTTER_TYPE_TENSOR && w->rank == k + 2) {
        for (int i = 0; i < k; i++) {
            c->kernel[i] = w->dims[i + 2].v;
            if (c->kernel[i] < 0) c->kernel_known = false;
        }
    } else {
        c->kernel_known = false;
    }
    for (int i = 0; i < k; i++) c->strides[i] = c->dil[i] = 1;
    static const char *const lists[3] = {"strides", "dilations", "pads"};
    int64_t *into[3] = {c->strides, c->dil, c->pads};
    for (int a = 0; a < 3; a++) {
        snprintf(name, sizeof name, "%s%s", prefix, lists[a]);
        if (!ot_attr_ints(n, name, &v, &cnt)) continue;
        if ((int)cnt != (a == 2 ? 2 * k : k))
            return ot_inf_fail(n, OTTER_ERR_INVALID, "%s has %zu entries for %d spatial dimensions", name, cnt, k);
        memcpy(into[a], v, sizeof(int64_t) * cnt);
    }
    for (int i = 0; i < k; i++)
        if (c->strides[i] <= 0 || c->dil[i] <= 0)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "strides and dilations must be positive");
    snprintf(name, sizeof name, "%sauto_pad", prefix);
    c->auto_pad = ot_attr_str(n, name, "NOTSET");
    return OTTER_OK;
}

/* Spatial output sizes of a convolution or pooling window (the kernels' ot_window_axis): unknown
 * where the input size or the kernel is; an error where the kernels would refuse the input. */
static otter_status conv_spatial(const ot_inode *n, const ot_ival *x, const conv_attrs *c, bool ceil_mode,
                                 ot_idim *out) {
    ot_auto_pad pad = ot_auto_pad_from(c->auto_pad);
    for (int i = 0; i < c->k; i++) {
        out[i] = OT_DIM_UNKNOWN;
        int64_t in = x->dims[i + 2].v, pb = c->pads[i], pe = c->pads[i + c->k], o;
        if (in < 0 || !c->kernel_known) continue;
        ot_window_status ws = ot_window_axis(in, c->kernel[i], c->strides[i], c->dil[i], pad, ceil_mode, &pb, &pe, &o);
        if (ws == OT_WINDOW_BAD_PARAM)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "invalid kernel/stride/dilation/pad along spatial axis %d", i);
        if (ws == OT_WINDOW_TOO_SMALL)
            return ot_inf_fail(n, OTTER_ERR_INVALID,
                               "spatial axis %d of input '%s' (size %lld with pads) is smaller than the kernel (%lld)",
                               i, n->node->inputs[0], (long long)in, (long long)((c->kernel[i] - 1) * c->dil[i] + 1));
        out[i] = ot_dim_known(o);
    }
    return OTTER_OK;
}

otter_status ot_infer_conv(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *w = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    OT_TRY(ot_same_dtype(n, 0, 2));
    int rank = ot_in_has_shape(n, 0) ? x->rank : ot_in_has_shape(n, 1) ? w->rank : -1;
    if (rank < 0) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (rank < 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", n->node->inputs[0]);
    if (ot_in_has_shape(n, 0) && ot_in_has_shape(n, 1) && w->rank != x->rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "weight '%s' has rank %d but input '%s' has rank %d",
                           n->node->inputs[1], w->rank, n->node->inputs[0], x->rank);
    int64_t group = ot_attr_int(n, "group", 1);
    if (ot_in_has_shape(n, 0) && ot_in_has_shape(n, 1) && x->dims[1].v >= 0 && w->dims[1].v >= 0 &&
        x->dims[1].v != w->dims[1].v * group)
        return ot_inf_fail(n, OTTER_ERR_INVALID,
                           "input '%s' has %lld channels but weight '%s' expects %lld (group %lld)", n->node->inputs[0],
                           (long long)x->dims[1].v, n->node->inputs[1], (long long)(w->dims[1].v * group),
                           (long long)group);
    conv_attrs c;
    OT_TRY(conv_attrs_read(n, "", rank - 2, ot_in_has_shape(n, 1) ? w : NULL, &c));
    OT_TRY(ot_out_shape(n, 0, dt, rank, NULL));
    ot_idim *out = n->out[0].dims;
    if (ot_in_has_shape(n, 0)) out[0] = x->dims[0];
    if (ot_in_has_shape(n, 1)) out[1] = w->dims[0];
    if (ot_in_has_shape(n, 0)) OT_TRY(conv_spatial(n, x, &c, false, out + 2));
    return OTTER_OK;
}

otter_status ot_infer_conv_transpose(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0), *w = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    OT_TRY(ot_same_dtype(n, 0, 2));
    int rank = ot_in_has_shape(n, 0) ? x->rank : ot_in_has_shape(n, 1) ? w->rank : -1;
    if (rank < 0) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (rank < 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", n->node->inputs[0]);
    int k = rank - 2;
    conv_attrs c;
    OT_TRY(conv_attrs_read(n, "", k, ot_in_has_shape(n, 1) ? w : NULL, &c));
    int64_t group = ot_attr_int(n, "group", 1);
    OT_TRY(ot_out_shape(n, 0, dt, rank, NULL));
    ot_idim *out = n->out[0].dims;
    if (ot_in_has_shape(n, 0)) out[0] = x->dims[0];
    if (ot_in_has_shape(n, 1) && w->dims[1].v >= 0) out[1] = ot_dim_known(w->dims[1].v * group);
    const int64_t *os, *op;
    size_t nos, nop;
    bool has_os = ot_attr_ints(n, "output_shape", &os, &nos);
    int64_t opad[OTTER_MAX_RANK] = {0};
    if (ot_attr_ints(n, "output_padding", &op, &nop)) {
        if ((int)nop != k)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "output_padding has %zu entries for %d spatial dimensions", nop,
                               k);
        memcpy(opad, op, sizeof(int64_t) * nop);
    }
    if (has_os && (int)nos != k && (int)nos != rank)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "output_shape has %zu entries for %d spatial dimensions", nos, k);
    ot_auto_pad pad = ot_auto_pad_from(c.auto_pad);
    for (int i = 0; i < k; i++) {
        int64_t target = has_os ? os[(int)nos == k ? i : i + 2] : -1;
        int64_t in = ot_in_has_shape(n, 0) ? x->dims[2 + i].v : -1, pb = c.pads[i], pe = c.pads[i + k], o;
        if (in < 0 || !c.kernel_known) {
            if (target >= 0) out[2 + i] = ot_dim_known(target);
            continue;
        }
        ot_window_status ws = ot_window_transpose_axis(in, c.kernel[i], c.strides[i], c.dil[i], opad[i], pad, target,
                                                       ot_attr(n, "pads") != NULL, &pb, &pe, &o);
        if (ws != OT_WINDOW_OK)
            return ot_inf_fail(n, OTTER_ERR_INVALID, "negative output size along spatial axis %d", i);
        out[2 + i] = ot_dim_known(o);
    }
    return OTTER_OK;
}

otter_status ot_infer_pool(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    ot_out_type(n, 0, dt);
    ot_out_type(n, 1, OTTER_DTYPE_INT64);
    if (!ot_in_has_shape(n, 0)) return OTTER_OK;
    if (x->rank < 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 3", n->node->inputs[0]);
    conv_attrs c;
    OT_TRY(conv_attrs_read(n, "", x->rank - 2, NULL, &c));
    if (!ot_attr(n, "kernel_shape")) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'kernel_shape' is required");
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, NULL));
    ot_idim *out = n->out[0].dims;
    out[0] = x->dims[0];
    out[1] = x->dims[1];
    OT_TRY(conv_spatial(n, x, &c, ot_attr_int(n, "ceil_mode", 0) != 0, out + 2));
    if (n->n_out > 1) OT_TRY(ot_out_shape(n, 1, OTTER_DTYPE_INT64, x->rank, out));
    return OTTER_OK;
}

otter_status ot_infer_pool_window(ot_inode *n, const char *prefix, const ot_ival *x, ot_idim *out) {
    conv_attrs c;
    char ceil_mode[64];
    snprintf(ceil_mode, sizeof ceil_mode, "%sceil_mode", prefix);
    OT_TRY(conv_attrs_read(n, prefix, x->rank - 2, NULL, &c));
    return conv_spatial(n, x, &c, ot_attr_int(n, ceil_mode, 0) != 0, out);
}

otter_status ot_infer_global_pool(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (x->rank < 2) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", n->node->inputs[0]);
    OT_TRY(ot_out_shape(n, 0, dt, x->rank, x->dims));
    for (int i = 2; i < x->rank; i++) n->out[0].dims[i] = ot_dim_known(1);
    return OTTER_OK;
}

/* ---- normalization, dropout ---- */

otter_status ot_infer_batch_norm(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    /* training outputs: running mean / var (opset 14+) or mean, var, saved mean, saved var */
    for (size_t i = 1; i < n->n_out; i++) OT_TRY(ot_out_like(n, i, i <= 2 ? 2 + i : 3));
    return OTTER_OK;
}

otter_status ot_infer_layer_norm(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    OT_TRY(ot_out_like(n, 0, 0));
    otter_dtype st = (otter_dtype)ot_attr_int(n, "stash_type", OTTER_DTYPE_FLOAT);
    for (size_t i = 1; i < n->n_out && i < 3; i++) ot_out_type(n, i, st);
    if (!ot_in_has_shape(n, 0) || n->n_out < 2) return OTTER_OK;
    int64_t axis;
    OT_TRY(ot_norm_axis(n, ot_attr_int(n, "axis", -1), x->rank, &axis));
    for (size_t i = 1; i < n->n_out && i < 3; i++) {
        OT_TRY(ot_out_shape(n, i, st, x->rank, x->dims));
        for (int k = (int)axis; k < x->rank; k++) n->out[i].dims[k] = ot_dim_known(1);
    }
    return OTTER_OK;
}

otter_status ot_infer_dropout(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    if (n->n_out > 1) {
        OT_TRY(ot_out_like(n, 1, 0));
        if (n->opset >= 10) n->out[1].dtype = OTTER_DTYPE_BOOL;
        if (n->out[1].kind == OTTER_TYPE_NONE) ot_out_type(n, 1, OTTER_DTYPE_BOOL);
    }
    return OTTER_OK;
}

/* ---- Gemm, MatMul, Einsum ---- */

otter_status ot_infer_gemm(ot_inode *n) {
    const ot_ival *a = ot_in(n, 0), *b = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    OT_TRY(ot_same_dtype(n, 0, 2));
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 1)) return ot_out_shape(n, 0, dt, 2, NULL);
    if (a->rank != 2 || b->rank != 2)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "inputs '%s' (rank %d) and '%s' (rank %d) must be matrices",
                           n->node->inputs[0], a->rank, n->node->inputs[1], b->rank);
    bool ta = ot_attr_int(n, "transA", 0) != 0, tb = ot_attr_int(n, "transB", 0) != 0;
    ot_idim m = a->dims[ta ? 1 : 0], ka = a->dims[ta ? 0 : 1];
    ot_idim kb = b->dims[tb ? 1 : 0], nn = b->dims[tb ? 0 : 1];
    if (ka.v >= 0 && kb.v >= 0 && ka.v != kb.v)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "inner dimensions differ: '%s' has %lld and '%s' has %lld",
                           n->node->inputs[0], (long long)ka.v, n->node->inputs[1], (long long)kb.v);
    ot_idim out[2] = {m, nn};
    return ot_out_shape(n, 0, dt, 2, out);
}

static otter_status matmul_dims(ot_inode *n, otter_dtype dt) {
    const ot_ival *a = ot_in(n, 0), *b = ot_in(n, 1);
    if (!ot_in_has_shape(n, 0) || !ot_in_has_shape(n, 1)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (a->rank == 0 || b->rank == 0) return ot_inf_fail(n, OTTER_ERR_INVALID, "inputs must not be scalars");
    /* batch parts, as shapes to broadcast */
    ot_ival ba = *a, bb = *b;
    ba.rank = a->rank >= 2 ? a->rank - 2 : 0;
    bb.rank = b->rank >= 2 ? b->rank - 2 : 0;
    const ot_ival *shapes[2] = {&ba, &bb};
    int br;
    ot_idim *bd;
    OT_TRY(ot_broadcast(n, 2, shapes, &br, &bd));
    ot_idim ka = a->dims[a->rank - 1], kb = b->dims[b->rank >= 2 ? b->rank - 2 : 0];
    if (ka.v >= 0 && kb.v >= 0 && ka.v != kb.v)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "inner dimensions differ: '%s' has %lld and '%s' has %lld",
                           n->node->inputs[0], (long long)ka.v, n->node->inputs[1], (long long)kb.v);
    int r = br + (a->rank >= 2) + (b->rank >= 2);
    ot_idim *out = ot_inf_dims(n->cx, r);
    if (!out) return OT_INF_NOMEM(n);
    memcpy(out, bd, sizeof(ot_idim) * (size_t)br);
    int k = br;
    if (a->rank >= 2) out[k++] = a->dims[a->rank - 2];
    if (b->rank >= 2) out[k++] = b->dims[b->rank - 1];
    return ot_out_shape(n, 0, dt, r, out);
}

otter_status ot_infer_matmul(ot_inode *n) {
    OT_TRY(ot_same_dtype(n, 0, 1));
    return matmul_dims(n, ot_in_dtype(n, 0));
}

otter_status ot_infer_matmul_integer(ot_inode *n) { return matmul_dims(n, OTTER_DTYPE_INT32); }

otter_status ot_infer_einsum(ot_inode *n) {
    otter_dtype dt = ot_in_dtype(n, 0);
    OT_TRY(ot_same_dtype(n, 0, n->n_in ? n->n_in - 1 : 0));
    const char *eq = ot_attr_str(n, "equation", NULL);
    if (!eq) return ot_inf_fail(n, OTTER_ERR_INVALID, "attribute 'equation' is required");
    for (size_t i = 0; i < n->n_in; i++)
        if (!ot_in_has_shape(n, i)) {
            ot_out_type(n, 0, dt);
            return OTTER_OK;
        }
    ot_idim letter[128];
    int count[128] = {0};
    for (int i = 0; i < 128; i++) letter[i] = OT_DIM_UNKNOWN;
    bool seen[128] = {false};
    const ot_ival *ell[64];
    ot_ival ell_store[64];
    size_t n_ell = 0;
    int ell_rank = 0;
    const char *p = eq;
    size_t term = 0;
    while (*p && !(p[0] == '-' && p[1] == '>')) {
        if (term >= n->n_in) return ot_inf_fail(n, OTTER_ERR_INVALID, "equation '%s' has more terms than inputs", eq);
        const ot_ival *x = ot_in(n, term);
        /* count letters in this term to place the ellipsis */
        int letters = 0;
        bool has_ell = false;
        for (const char *q = p; *q && *q != ',' && *q != '-'; q++) {
            if (*q == '.')
                has_ell = true;
            else if (*q != ' ')
                letters++;
        }
        int erank = has_ell ? x->rank - letters : 0;
        if (erank < 0 || (!has_ell && letters != x->rank))
            return ot_inf_fail(n, OTTER_ERR_INVALID, "equation term %zu does not match the rank %d of input '%s'", term,
                               x->rank, n->node->inputs[term]);
        int axis = 0;
        while (*p && *p != ',' && !(p[0] == '-' && p[1] == '>')) {
            char ch = *p;
            if (ch == '.') {
                p += 3;
                if (n_ell < 64) {
                    ell_store[n_ell] = *x;
                    ell_store[n_ell].rank = erank;
                    ell_store[n_ell].dims = x->dims + axis;
                    ell[n_ell] = &ell_store[n_ell];
                    n_ell++;
                }
                if (erank > ell_rank) ell_rank = erank;
                axis += erank;
                continue;
            }
            p++;
            if (ch == ' ') continue;
            unsigned char c = (unsigned char)ch;
            if (c >= 128) return ot_inf_fail(n, OTTER_ERR_INVALID, "equation '%s' has a bad character", eq);
            ot_idim d = x->dims[axis++];
            if (!seen[c]) {
                seen[c] = true;
                letter[c] = d;
            } else if (letter[c].v >= 0 && d.v >= 0 && letter[c].v != d.v && letter[c].v != 1 && d.v != 1) {
                return ot_inf_fail(n, OTTER_ERR_INVALID, "label '%c' has sizes %lld and %lld", ch,
                                   (long long)letter[c].v, (long long)d.v);
            } else if (letter[c].v < 0 && d.v >= 0) {
                letter[c] = d;
            }
            count[c]++;
        }
        if (*p == ',') p++;
        term++;
    }
    int er = 0;
    ot_idim *ed = NULL;
    if (n_ell) OT_TRY(ot_broadcast(n, n_ell, ell, &er, &ed));
    ot_idim out[OTTER_MAX_RANK * 2];
    int r = 0;
    if (p[0] == '-') {
        p += 2;
        while (*p) {
            if (*p == '.') {
                for (int i = 0; i < er && r < OTTER_MAX_RANK * 2; i++) out[r++] = ed[i];
                p += 3;
                continue;
            }
            unsigned char c = (unsigned char)*p++;
            if (c == ' ') continue;
            if (c >= 128 || !seen[c])
                return ot_inf_fail(n, OTTER_ERR_INVALID, "output label '%c' is not in any input", c);
            if (r < OTTER_MAX_RANK * 2) out[r++] = letter[c];
        }
    } else {
        for (int i = 0; i < er && r < OTTER_MAX_RANK * 2; i++) out[r++] = ed[i];
        for (int c = 0; c < 128; c++)
            if (seen[c] && count[c] == 1 && r < OTTER_MAX_RANK * 2) out[r++] = letter[c];
    }
    (void)ell_rank;
    return ot_out_shape(n, 0, dt, r, out);
}

/* ---- losses ---- */

otter_status ot_infer_nll_loss(ot_inode *n) {
    const ot_ival *t = ot_in(n, 1);
    otter_dtype dt = ot_in_dtype(n, 0);
    const char *red = ot_attr_str(n, "reduction", "mean");
    if (strcmp(red, "none") != 0) return ot_out_shape(n, 0, dt, 0, NULL);
    if (!ot_in_has_shape(n, 1)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    return ot_out_shape(n, 0, dt, t->rank, t->dims);
}

otter_status ot_infer_sce_loss(ot_inode *n) {
    OT_TRY(ot_infer_nll_loss(n));
    if (n->n_out > 1) OT_TRY(ot_out_like(n, 1, 0));
    return OTTER_OK;
}

/* ---- recurrent layers ---- */

/* RNN, GRU, LSTM: Y [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs, hidden] (layout 1);
 * Y_h (and LSTM's Y_c) [dirs, batch, hidden] or [batch, dirs, hidden]. */
otter_status ot_infer_recurrent(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    for (size_t i = 0; i < n->n_out; i++) ot_out_type(n, i, dt);
    int64_t layout = n->opset >= 14 ? ot_attr_int(n, "layout", 0) : 0;
    int64_t hidden = ot_attr_int(n, "hidden_size", -1);
    const char *dir = ot_attr_str(n, "direction", "forward");
    ot_idim dirs = ot_dim_known(strcmp(dir, "bidirectional") == 0 ? 2 : 1);
    ot_idim h = hidden >= 0 ? ot_dim_known(hidden) : OT_DIM_UNKNOWN;
    /* without hidden_size, W's rows per gate */
    int gates = strcmp(n->node->op_type, "LSTM") == 0 ? 4 : strcmp(n->node->op_type, "GRU") == 0 ? 3 : 1;
    if (hidden < 0 && ot_dim_is_known(ot_in_dim(n, 1, 1))) h = ot_dim_known(ot_in_dim(n, 1, 1).v / gates);
    ot_idim seq = OT_DIM_UNKNOWN, batch = OT_DIM_UNKNOWN;
    if (ot_in_has_shape(n, 0)) {
        if (x->rank != 3) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank 3", n->node->inputs[0]);
        seq = x->dims[layout ? 1 : 0];
        batch = x->dims[layout ? 0 : 1];
    }
    ot_idim y[4] = {seq, dirs, batch, h};
    if (layout) y[0] = batch, y[1] = seq, y[2] = dirs;
    ot_idim yh[3] = {dirs, batch, h};
    if (layout) yh[0] = batch, yh[1] = dirs;
    if (n->n_out > 0 && !ot_str_empty(n->node->outputs[0])) OT_TRY(ot_out_shape(n, 0, dt, 4, y));
    for (size_t i = 1; i < n->n_out && i < 3; i++) OT_TRY(ot_out_shape(n, i, dt, 3, yh));
    return OTTER_OK;
}

otter_status ot_infer_det(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    otter_dtype dt = ot_in_dtype(n, 0);
    if (!ot_in_has_shape(n, 0)) {
        ot_out_type(n, 0, dt);
        return OTTER_OK;
    }
    if (x->rank < 2) return ot_inf_fail(n, OTTER_ERR_INVALID, "input '%s' must have rank >= 2", n->node->inputs[0]);
    return ot_out_shape(n, 0, dt, x->rank - 2, x->dims);
}
