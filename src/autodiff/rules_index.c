/* Gradient rules for operators that pick or rearrange elements by index or position: CumSum, TopK,
 * GatherElements, GatherND, ScatterElements, ScatterND, DepthToSpace, SpaceToDepth. Picks scatter dY
 * back with ONNX Runtime's GatherElementsGrad / GatherNDGrad; rearrangements apply their inverse. */
#include <string.h>

#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static void nomem(ot_grad *g) { ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients"); }

static const char *shape_of(ot_grad *g, const char *x) { return OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x); }

static void set_int(ot_grad *g, otter_node *m, const char *name, int64_t v) {
    if (m && otter_node_set_attr_int(m, name, v) != OTTER_OK) nomem(g);
}

/* CumSum: each input element reaches the outputs on its other side, so dX is CumSum(dY) the other
 * way round with the same exclusivity. */
void ot_grad_cumsum(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *c = ot_grad_emit(g, "CumSum", "", 2, (const char *[]){ot_grad_dy(g, 0), IN(1)}, 1, &dx);
    set_int(g, c, "exclusive", otter_node_attr_int(n, "exclusive", 0));
    set_int(g, c, "reverse", !otter_node_attr_int(n, "reverse", 0));
}

/* TopK: dValues goes back to the positions Indices names (as ONNX Runtime's rule). */
void ot_grad_topk(ot_grad *g, otter_node *n) {
    const char *indices = n->n_outputs > 1 && OUT(1)[0] ? OUT(1) : ot_grad_forward_output(g, n, 1, "topk_indices");
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m = ot_grad_emit(g, "GatherElementsGrad", "com.microsoft", 3,
                                 (const char *[]){ot_grad_dy(g, 0), shape_of(g, IN(0)), indices}, 1, &dx);
    set_int(g, m, "axis", otter_node_attr_int(n, "axis", -1));
}

void ot_grad_gather_elements(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m = ot_grad_emit(g, "GatherElementsGrad", "com.microsoft", 3,
                                 (const char *[]){ot_grad_dy(g, 0), shape_of(g, IN(0)), IN(1)}, 1, &dx);
    set_int(g, m, "axis", otter_node_attr_int(n, "axis", 0));
}

void ot_grad_gather_nd(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m = ot_grad_emit(g, "GatherNDGrad", "com.microsoft", 3,
                                 (const char *[]){shape_of(g, IN(0)), IN(1), ot_grad_dy(g, 0)}, 1, &dx);
    set_int(g, m, "batch_dims", otter_node_attr_int(n, "batch_dims", 0));
}

/* ScatterElements (Scatter before opset 11) / ScatterND (reduction none): data's gradient is dY with the overwritten
 * positions zeroed (the same scatter of zeros), the updates' is dY read back at those positions. */
void ot_grad_scatter(ot_grad *g, otter_node *n) {
    const char *reduction = otter_node_attr_string(n, "reduction", "none");
    if (strcmp(reduction, "none") != 0)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "%s gradient supports reduction 'none' only, not '%s'", n->op_type,
                     reduction);
    bool elements = !ot_streq(n->op_type, "ScatterND"); /* ScatterElements or its opset 9 name Scatter */
    const char *dy = ot_grad_dy(g, 0);
    if (ot_grad_needs(g, 0)) {
        const char *zeros = ot_grad_zeros_like(g, IN(2), IN(0), NULL);
        const char *dx = ot_grad_dx(g, 0);
        otter_node *m = ot_grad_emit(g, n->op_type, "", 3, (const char *[]){dy, IN(1), zeros}, 1, &dx);
        if (elements) set_int(g, m, "axis", otter_node_attr_int(n, "axis", 0));
    }
    if (ot_grad_needs(g, 2)) {
        const char *du = ot_grad_dx(g, 2);
        otter_node *m =
            ot_grad_emit(g, elements ? "GatherElements" : "GatherND", "", 2, (const char *[]){dy, IN(1)}, 1, &du);
        if (elements) set_int(g, m, "axis", otter_node_attr_int(n, "axis", 0));
    }
}

static otter_node *block_op(ot_grad *g, const char *op, int64_t blocksize, const char *x, const char *out) {
    otter_node *m = ot_grad_emit(g, op, "", 1, &x, 1, &out);
    set_int(g, m, "blocksize", blocksize);
    return m;
}

/* DepthToSpace: SpaceToDepth undoes mode DCR. Mode CRD is DCR after a channel permutation P (CRD's
 * channel c*b*b + k is DCR's k*C' + c), so dX = P^-1(SpaceToDepth(dY)): view [N, b*b, C', H, W],
 * swap the two channel axes, flatten back to X's shape. */
void ot_grad_depth_to_space(ot_grad *g, otter_node *n) {
    int64_t b = otter_node_attr_int(n, "blocksize", 0);
    const char *dx = ot_grad_dx(g, 0), *dy = ot_grad_dy(g, 0);
    if (strcmp(otter_node_attr_string(n, "mode", "DCR"), "CRD") != 0) {
        block_op(g, "SpaceToDepth", b, dy, dx);
        return;
    }
    const char *dcr = ot_grad_tmp(g, "dcr_grad");
    block_op(g, "SpaceToDepth", b, dy, dcr);
    int64_t zero = 0, one = 1, two = 2, four = 4, view[2] = {b * b, -1};
    const char *x_shape = shape_of(g, IN(0));
    const char *batch = OT_G1(g, "Slice", ot_grad_tmp(g, "N"), x_shape, ot_grad_const_i64(g, "0", 1, &zero, false),
                              ot_grad_const_i64(g, "1", 1, &one, false));
    const char *spatial = OT_G1(g, "Slice", ot_grad_tmp(g, "HW"), x_shape, ot_grad_const_i64(g, "2", 1, &two, false),
                                ot_grad_const_i64(g, "4", 1, &four, false));
    const char *shape5 = ot_grad_tmp(g, "channel_view");
    otter_node *c =
        ot_grad_emit(g, "Concat", "", 3,
                     (const char *[]){batch, ot_grad_const_i64(g, "bb_rest", 2, view, false), spatial}, 1, &shape5);
    set_int(g, c, "axis", 0);
    const char *viewed = OT_G1(g, "Reshape", ot_grad_tmp(g, "viewed"), dcr, shape5);
    const char *swapped = ot_grad_tmp(g, "swapped");
    otter_node *t = ot_grad_emit(g, "Transpose", "", 1, &viewed, 1, &swapped);
    static const int64_t perm[5] = {0, 2, 1, 3, 4};
    if (t && otter_node_set_attr_ints(t, "perm", 5, perm) != OTTER_OK) nomem(g);
    OT_G1(g, "Reshape", dx, swapped, x_shape);
}

/* SpaceToDepth: DepthToSpace in mode DCR is its inverse. */
void ot_grad_space_to_depth(ot_grad *g, otter_node *n) {
    block_op(g, "DepthToSpace", otter_node_attr_int(n, "blocksize", 0), ot_grad_dy(g, 0), ot_grad_dx(g, 0));
}
