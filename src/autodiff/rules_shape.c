/* Gradient rules for operators that move, select or reduce elements. */
#include <ctype.h>
#include <string.h>

#include "autodiff/grad.h"
#include "core/core.h"

#define IN(i)  (n->inputs[i])
#define OUT(i) (n->outputs[i])

static void nomem(ot_grad *g) { ot_grad_fail(g, OTTER_ERR_NOMEM, "out of memory building gradients"); }

static const char *shape_of(ot_grad *g, const char *x) { return OT_G1(g, "Shape", ot_grad_tmp(g, "x_shape"), x); }

/* Reshape, Flatten, Squeeze, Unsqueeze: dX = Reshape(dY, shape(X)). */
void ot_grad_reshape_like(ot_grad *g, otter_node *n) {
    OT_G1(g, "Reshape", ot_grad_dx(g, 0), ot_grad_dy(g, 0), shape_of(g, IN(0)));
}

void ot_grad_transpose(ot_grad *g, otter_node *n) {
    const otter_attr *p = otter_node_attr(n, "perm");
    int rank = p ? (int)p->n_ints : ot_grad_rank(g, IN(0));
    if (rank < 0) OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Transpose without perm needs a known input rank");
    int64_t inv[OTTER_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int64_t src = p ? p->ints[i] : rank - 1 - i;
        if (src < 0 || src >= rank) OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "bad perm");
        inv[src] = i;
    }
    const char *dx = ot_grad_dx(g, 0), *dy = ot_grad_dy(g, 0);
    otter_node *t = ot_grad_emit(g, "Transpose", "", 1, &dy, 1, &dx);
    if (t && otter_node_set_attr_ints(t, "perm", (size_t)rank, inv) != OTTER_OK) nomem(g);
}

/* Concat: Split dY along the axis into pieces sized like the inputs. */
void ot_grad_concat(ot_grad *g, otter_node *n) {
    int64_t axis = otter_node_attr_int(n, "axis", 0);
    const char **outs = ot_calloc(n->n_inputs, sizeof *outs);
    const char **sizes = ot_calloc(n->n_inputs, sizeof *sizes);
    if (!outs || !sizes) {
        ot_free(outs);
        ot_free(sizes);
        OT_GRAD_NOMEM(g);
    }
    const char *ax = ot_grad_const_i64(g, "axis", 1, &axis, false);
    for (size_t i = 0; i < n->n_inputs; i++) {
        outs[i] = ot_grad_dx(g, i);
        if (!outs[i]) outs[i] = ot_grad_tmp(g, "unused_piece");
        sizes[i] = OT_G1(g, "Gather", ot_grad_tmp(g, "split_size"), shape_of(g, IN(i)), ax);
    }
    const char *split = ot_grad_tmp(g, "split_sizes");
    otter_node *c = ot_grad_emit(g, "Concat", "", n->n_inputs, sizes, 1, &split);
    if (c && otter_node_set_attr_int(c, "axis", 0) != OTTER_OK) nomem(g);
    otter_node *s = ot_grad_emit(g, "Split", "", 2, (const char *[]){ot_grad_dy(g, 0), split}, n->n_inputs, outs);
    if (s && otter_node_set_attr_int(s, "axis", axis) != OTTER_OK) nomem(g);
    ot_free(outs);
    ot_free(sizes);
}

/* Split: Concat the output gradients (zeros for outputs the loss ignores). */
void ot_grad_split(ot_grad *g, otter_node *n) {
    const char **parts = ot_calloc(n->n_outputs, sizeof *parts);
    if (!parts) OT_GRAD_NOMEM(g);
    for (size_t j = 0; j < n->n_outputs; j++) {
        parts[j] = ot_grad_dy(g, j);
        if (!parts[j]) parts[j] = ot_grad_zeros_like(g, OUT(j), IN(0), NULL);
    }
    const char *dx = ot_grad_dx(g, 0);
    otter_node *c = ot_grad_emit(g, "Concat", "", n->n_outputs, parts, 1, &dx);
    if (c && otter_node_set_attr_int(c, "axis", otter_node_attr_int(n, "axis", 0)) != OTTER_OK) nomem(g);
    ot_free(parts);
}

void ot_grad_slice(ot_grad *g, otter_node *n) {
    if (ot_grad_opset(g) < 10)
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Slice gradient needs opset >= 10 (starts/ends as inputs)");
    const char *ins[6] = {ot_grad_dy(g, 0), shape_of(g, IN(0))};
    size_t k = 2;
    for (size_t i = 1; i < n->n_inputs && k < 6; i++) ins[k++] = IN(i);
    const char *dx = ot_grad_dx(g, 0);
    ot_grad_emit(g, "SliceGrad", "com.microsoft", k, ins, 1, &dx);
}

void ot_grad_gather(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *x = ot_grad_emit(g, "GatherGrad", "com.microsoft", 3,
                                 (const char *[]){shape_of(g, IN(0)), IN(1), ot_grad_dy(g, 0)}, 1, &dx);
    if (x && otter_node_set_attr_int(x, "axis", otter_node_attr_int(n, "axis", 0)) != OTTER_OK) nomem(g);
}

void ot_grad_expand(ot_grad *g, otter_node *n) {
    ot_grad_unbroadcast(g, ot_grad_dy(g, 0), IN(0), OUT(0), ot_grad_dx(g, 0));
}

/* Tile: view dY as [r0, d0, r1, d1, ...] and sum over the repeat axes. */
void ot_grad_tile(ot_grad *g, otter_node *n) {
    int rank = ot_grad_rank(g, IN(0));
    if (rank < 0) OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Tile gradient needs a known input rank");
    int64_t one = 1, minus_one = -1;
    const char *axis1 = ot_grad_const_i64(g, "axes", 1, &one, false);
    const char *shape2d = OT_G1(g, "Unsqueeze", ot_grad_tmp(g, "2d_orig_shape"), shape_of(g, IN(0)), axis1);
    const char *rep2d = OT_G1(g, "Unsqueeze", ot_grad_tmp(g, "2d_repeats"), IN(1), axis1);
    const char *pairs = ot_grad_tmp(g, "concated_dims");
    otter_node *c = ot_grad_emit(g, "Concat", "", 2, (const char *[]){rep2d, shape2d}, 1, &pairs);
    if (c && otter_node_set_attr_int(c, "axis", 1) != OTTER_OK) nomem(g);
    const char *flat = OT_G1(g, "Reshape", ot_grad_tmp(g, "concated_dims_flatten"), pairs,
                             ot_grad_const_i64(g, "minus_one", 1, &minus_one, false));
    const char *view = OT_G1(g, "Reshape", ot_grad_tmp(g, "tile_grad_view"), ot_grad_dy(g, 0), flat);
    int64_t even[OTTER_MAX_RANK];
    for (int i = 0; i < rank; i++) even[i] = 2 * i;
    const char *dx = ot_grad_dx(g, 0);
    otter_node *r =
        ot_grad_emit(g, "ReduceSum", "", 2,
                     (const char *[]){view, ot_grad_const_i64(g, "even_axes", (size_t)rank, even, false)}, 1, &dx);
    if (r && otter_node_set_attr_int(r, "keepdims", 0) != OTTER_OK) nomem(g);
}

/* Whether tensor `name` is an int64 initializer with a negative value (pads that crop). */
static bool has_negative_initializer(ot_grad *g, const char *name) {
    otter_graph *gr = ot_grad_graph(g);
    ptrdiff_t i = otter_graph_find_initializer(gr, name);
    if (i < 0 || gr->initializers[i]->dtype != OTTER_DTYPE_INT64) return false;
    const otter_tensor *t = gr->initializers[i];
    for (int64_t k = 0; k < otter_tensor_numel(t); k++)
        if (((const int64_t *)t->data)[k] < 0) return true;
    return false;
}

/* Constant Pad's gradient is the un-padded window of dY: pads = [b0, b1, ..., e0, e1, ...] give
 * starts = b, ends = shape(dY) - e, a Slice in plain ONNX (wrong for negative pads, which crop). */
static void pad_grad_slice(ot_grad *g, otter_node *n) {
    int64_t half_len = ot_grad_rank(g, IN(0));
    if (half_len < 0) OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Pad gradient needs a known input rank");
    int64_t zero = 0, h = half_len, two_h = 2 * half_len;
    const char *starts = OT_G1(g, "Slice", ot_grad_tmp(g, "pad_begin"), IN(1),
                               ot_grad_const_i64(g, "z", 1, &zero, false), ot_grad_const_i64(g, "h", 1, &h, false));
    const char *ends_pad = OT_G1(g, "Slice", ot_grad_tmp(g, "pad_end"), IN(1), ot_grad_const_i64(g, "h", 1, &h, false),
                                 ot_grad_const_i64(g, "2h", 1, &two_h, false));
    const char *ends = OT_G1(g, "Sub", ot_grad_tmp(g, "ends"), shape_of(g, OUT(0)), ends_pad);
    OT_G1(g, "Slice", ot_grad_dx(g, 0), ot_grad_dy(g, 0), starts, ends);
}

/* Pad: mode constant with pads as an input (opset 11), no axes and no known negative pad takes the
 * Slice above; everything else (reflect, edge and wrap fold the border back onto X; opset 18's axes;
 * opsets before 11, whose pads are an attribute) com.otter PadGrad, as ONNX Runtime has no kernel. */
void ot_grad_pad(ot_grad *g, otter_node *n) {
    const char *mode = otter_node_attr_string(n, "mode", "constant");
    bool pads_input = ot_grad_opset(g) >= 11, axes = pads_input && n->n_inputs > 3 && IN(3)[0];
    const char *pads = pads_input ? IN(1) : NULL;
    if (!pads_input) {
        const otter_attr *a = otter_node_attr(n, ot_grad_opset(g) < 2 ? "paddings" : "pads");
        if (!a) OT_GRAD_FAIL(g, OTTER_ERR_INVALID, "Pad has no pads attribute");
        pads = ot_grad_const_i64(g, "pads", a->n_ints, a->ints, false);
    }
    if (strcmp(mode, "constant") == 0 && pads_input && !axes && !has_negative_initializer(g, pads)) {
        pad_grad_slice(g, n);
        return;
    }
    const char *dx = ot_grad_dx(g, 0);
    otter_node *m =
        ot_grad_emit(g, "PadGrad", "com.otter", axes ? 4 : 3,
                     (const char *[]){ot_grad_dy(g, 0), shape_of(g, IN(0)), pads, axes ? IN(3) : NULL}, 1, &dx);
    if (m && otter_node_set_attr_string(m, "mode", mode) != OTTER_OK) nomem(g);
}

/* Einsum with two operands: dA = einsum("<out>,<B>-><A>", dY, B), valid when every label of A
 * appears in B or the output (no label is summed out of A alone) and no label repeats in A. */
static bool einsum_terms(const char *eq, char terms[3][64]) {
    const char *arrow = strstr(eq, "->");
    const char *comma = strchr(eq, ',');
    if (!arrow || !comma || comma > arrow) return false;
    const char *second = strchr(comma + 1, ',');
    if (second && second < arrow) return false; /* more than two operands */
    size_t k = 0;
    const char *parts[3][2] = {{eq, comma}, {comma + 1, arrow}, {arrow + 2, eq + strlen(eq)}};
    for (int t = 0; t < 3; t++) {
        k = 0;
        for (const char *p = parts[t][0]; p < parts[t][1]; p++)
            if (!isspace((unsigned char)*p)) {
                if (k + 1 >= 64) return false;
                terms[t][k++] = *p;
            }
        terms[t][k] = '\0';
    }
    return true;
}

static bool labels_covered(const char *a, const char *b, const char *out) {
    for (const char *p = a; *p; p++) {
        if (*p == '.') continue;
        if (strchr(p + 1, *p)) return false; /* a repeated label (a diagonal) */
        if (!strchr(b, *p) && !strchr(out, *p)) return false;
    }
    return true;
}

void ot_grad_einsum(ot_grad *g, otter_node *n) {
    char terms[3][64];
    const char *eq = otter_node_attr_string(n, "equation", "");
    if (n->n_inputs != 2 || !einsum_terms(eq, terms))
        OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Einsum gradient supports two operands with an explicit output ('%s')",
                     eq);
    for (int i = 0; i < 2; i++) {
        if (!ot_grad_needs(g, (size_t)i)) continue;
        const char *self = terms[i], *other = terms[1 - i];
        if (!labels_covered(self, other, terms[2]))
            OT_GRAD_FAIL(g, OTTER_ERR_UNSUPPORTED, "Einsum gradient of '%s' for operand %d is not supported", eq, i);
        char *geq = ot_sprintf("%s,%s->%s", terms[2], other, self);
        const char *dx = ot_grad_dx(g, (size_t)i);
        otter_node *e = ot_grad_emit(g, "Einsum", "", 2, (const char *[]){ot_grad_dy(g, 0), IN(1 - i)}, 1, &dx);
        if (!geq || (e && otter_node_set_attr_string(e, "equation", geq) != OTTER_OK)) nomem(g);
        ot_free(geq);
    }
}

void ot_grad_convtranspose(ot_grad *g, otter_node *n) {
    const char *outs[3];
    for (size_t i = 0; i < 3; i++) {
        outs[i] = i < n->n_inputs ? ot_grad_dx(g, i) : NULL;
        if (!outs[i]) outs[i] = "";
    }
    otter_node *x = ot_grad_emit(g, "ConvTransposeGrad", "com.microsoft", 3,
                                 (const char *[]){ot_grad_dy(g, 0), IN(0), IN(1)}, n->n_inputs > 2 ? 3 : 2, outs);
    ot_grad_copy_attrs(g, x, n);
}

/* ReverseSequence permutes each sequence's first sequence_lens[b] steps; the permutation is its
 * own inverse, so dX = ReverseSequence(dY) alike. */
void ot_grad_reverse_sequence(ot_grad *g, otter_node *n) {
    const char *dx = ot_grad_dx(g, 0);
    otter_node *r = ot_grad_emit(g, "ReverseSequence", "", 2, (const char *[]){ot_grad_dy(g, 0), n->inputs[1]}, 1, &dx);
    ot_grad_copy_attrs(g, r, n);
}
