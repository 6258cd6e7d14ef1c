/* Shape inference: unary and binary elementwise math, comparisons, logic, activations, Where,
 * the variadic Max / Min / Sum / Mean, with value propagation for integer arithmetic. */
#include <string.h>

#include "infer/infer_internal.h"

/* Output 0 (and any others) like input 0. */
otter_status ot_infer_like_input(ot_inode *n) { return ot_out_like(n, 0, 0); }

otter_status ot_infer_unary_bool(ot_inode *n) {
    const ot_ival *x = ot_in(n, 0);
    if (!x || x->kind != OTTER_TYPE_TENSOR) {
        ot_out_type(n, 0, OTTER_DTYPE_BOOL);
        return OTTER_OK;
    }
    return ot_out_shape(n, 0, OTTER_DTYPE_BOOL, x->rank, x->dims);
}

/* Not: like input, and the value when known. */
otter_status ot_infer_not(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    const ot_idim *d;
    int64_t c;
    if (ot_in_ints(n, 0, &d, &c)) {
        ot_idim *r = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(c + 1));
        if (!r) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < c; i++) r[i] = ot_data_is_value(d[i]) ? ot_dim_known(d[i].v == 0) : d[i];
        OT_TRY(ot_out_idata(n, 0, c, r));
    }
    return OTTER_OK;
}

/* Integer value propagation for binary ops over scalars / 1-D known data. */
typedef enum {
    DOP_ADD,
    DOP_SUB,
    DOP_MUL,
    DOP_DIV,
    DOP_MOD,
    DOP_MAX,
    DOP_MIN,
    DOP_EQ,
    DOP_LT,
    DOP_GT,
    DOP_LE,
    DOP_GE
} dop;

static ot_idim data_op(dop op, ot_idim a, ot_idim b) {
    const ot_idim unk = {OT_DATA_UNKNOWN, NULL};
    if (!ot_data_is_value(a) || !ot_data_is_value(b)) {
        /* symbol + 0, symbol * 1, symbol - 0, symbol / 1 keep the symbol; equal symbols compare */
        if (op == DOP_ADD && ot_data_is_value(b) && b.v == 0) return a;
        if (op == DOP_ADD && ot_data_is_value(a) && a.v == 0) return b;
        if ((op == DOP_SUB) && ot_data_is_value(b) && b.v == 0) return a;
        if ((op == DOP_MUL || op == DOP_DIV) && ot_data_is_value(b) && b.v == 1) return a;
        if (op == DOP_MUL && ot_data_is_value(a) && a.v == 1) return b;
        if (a.param && b.param && strcmp(a.param, b.param) == 0) {
            if (op == DOP_EQ || op == DOP_LE || op == DOP_GE) return ot_dim_known(1);
            if (op == DOP_LT || op == DOP_GT) return ot_dim_known(0);
            if (op == DOP_MAX || op == DOP_MIN) return a;
        }
        return unk;
    }
    int64_t x = a.v, y = b.v;
    switch (op) {
    case DOP_ADD:
        return ot_dim_known(x + y);
    case DOP_SUB:
        return ot_dim_known(x - y);
    case DOP_MUL:
        return ot_dim_known(x * y);
    case DOP_DIV:
        return y == 0 ? unk : ot_dim_known(x / y);
    case DOP_MOD: {
        if (y == 0) return unk;
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y; /* fmod=0: sign of the divisor */
        return ot_dim_known(r);
    }
    case DOP_MAX:
        return ot_dim_known(x > y ? x : y);
    case DOP_MIN:
        return ot_dim_known(x < y ? x : y);
    case DOP_EQ:
        return ot_dim_known(x == y);
    case DOP_LT:
        return ot_dim_known(x < y);
    case DOP_GT:
        return ot_dim_known(x > y);
    case DOP_LE:
        return ot_dim_known(x <= y);
    case DOP_GE:
        return ot_dim_known(x >= y);
    }
    return unk;
}

static otter_status propagate_binary(ot_inode *n, dop op) {
    const ot_idim *a, *b;
    int64_t ca, cb;
    if (n->n_in < 2 || !ot_in_ints(n, 0, &a, &ca) || !ot_in_ints(n, 1, &b, &cb)) return OTTER_OK;
    if (ca != cb && ca != 1 && cb != 1) return OTTER_OK;
    if (n->out[0].rank > 1) return OTTER_OK;
    int64_t c = ca > cb ? ca : cb;
    if (ca == 0 || cb == 0) c = 0;
    ot_idim *r = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(c + 1));
    if (!r) return OT_INF_NOMEM(n);
    for (int64_t i = 0; i < c; i++) r[i] = data_op(op, a[ca == 1 ? 0 : i], b[cb == 1 ? 0 : i]);
    return ot_out_idata(n, 0, c, r);
}

static otter_status broadcast_out(ot_inode *n, size_t first, size_t count, otter_dtype dt) {
    const ot_ival *shapes[64];
    if (count > 64) count = 64;
    for (size_t i = 0; i < count; i++) shapes[i] = ot_in(n, first + i);
    int rank;
    ot_idim *dims;
    OT_TRY(ot_broadcast(n, count, shapes, &rank, &dims));
    return ot_out_shape(n, 0, dt, rank, dims);
}

static otter_status binary_same(ot_inode *n, dop op, bool propagate) {
    OT_TRY(ot_same_dtype(n, 0, 1));
    otter_dtype dt = ot_in_dtype(n, 0);
    if (dt == OTTER_DTYPE_UNDEFINED) dt = ot_in_dtype(n, 1);
    OT_TRY(broadcast_out(n, 0, 2, dt));
    return propagate ? propagate_binary(n, op) : OTTER_OK;
}

otter_status ot_infer_add(ot_inode *n) { return binary_same(n, DOP_ADD, true); }
otter_status ot_infer_sub(ot_inode *n) { return binary_same(n, DOP_SUB, true); }
otter_status ot_infer_mul(ot_inode *n) { return binary_same(n, DOP_MUL, true); }
otter_status ot_infer_div(ot_inode *n) { return binary_same(n, DOP_DIV, true); }
otter_status ot_infer_mod(ot_inode *n) {
    OT_TRY(binary_same(n, DOP_MOD, false));
    return ot_attr_int(n, "fmod", 0) ? OTTER_OK : propagate_binary(n, DOP_MOD);
}
otter_status ot_infer_binary_plain(ot_inode *n) { return binary_same(n, DOP_ADD, false); }

/* com.otter ClipGrad(dY, X, min?, max?): dY's type, dY and X broadcast (as the Where it replaces). */
otter_status ot_infer_clip_grad(ot_inode *n) { return broadcast_out(n, 0, 2, ot_in_dtype(n, 0)); }

/* Pow: the base's type (exponent may differ from opset 12). */
otter_status ot_infer_pow(ot_inode *n) { return broadcast_out(n, 0, 2, ot_in_dtype(n, 0)); }

static otter_status compare(ot_inode *n, dop op) {
    OT_TRY(ot_same_dtype(n, 0, 1));
    OT_TRY(broadcast_out(n, 0, 2, OTTER_DTYPE_BOOL));
    return propagate_binary(n, op);
}
otter_status ot_infer_equal(ot_inode *n) { return compare(n, DOP_EQ); }
otter_status ot_infer_less(ot_inode *n) { return compare(n, DOP_LT); }
otter_status ot_infer_greater(ot_inode *n) { return compare(n, DOP_GT); }
otter_status ot_infer_less_eq(ot_inode *n) { return compare(n, DOP_LE); }
otter_status ot_infer_greater_eq(ot_inode *n) { return compare(n, DOP_GE); }
otter_status ot_infer_logic(ot_inode *n) {
    OT_TRY(ot_same_dtype(n, 0, 1));
    return broadcast_out(n, 0, 2, OTTER_DTYPE_BOOL);
}

/* Max, Min, Sum, Mean: variadic with multidirectional broadcast. */
static otter_status variadic(ot_inode *n, dop op, bool propagate) {
    if (n->n_in == 0) return OTTER_OK;
    OT_TRY(ot_same_dtype(n, 0, n->n_in - 1));
    otter_dtype dt = OTTER_DTYPE_UNDEFINED;
    for (size_t i = 0; i < n->n_in && dt == OTTER_DTYPE_UNDEFINED; i++) dt = ot_in_dtype(n, i);
    OT_TRY(broadcast_out(n, 0, n->n_in, dt));
    if (propagate && n->n_in == 2) return propagate_binary(n, op);
    if (propagate && n->n_in == 1) {
        const ot_idim *d;
        int64_t c;
        if (ot_in_ints(n, 0, &d, &c)) return ot_out_idata(n, 0, c, d);
    }
    return OTTER_OK;
}
otter_status ot_infer_max(ot_inode *n) { return variadic(n, DOP_MAX, true); }
otter_status ot_infer_min(ot_inode *n) { return variadic(n, DOP_MIN, true); }
otter_status ot_infer_sum(ot_inode *n) { return variadic(n, DOP_ADD, n->n_in <= 2); }
otter_status ot_infer_mean(ot_inode *n) { return variadic(n, DOP_ADD, false); }

otter_status ot_infer_where(ot_inode *n) {
    if (ot_in_dtype(n, 0) != OTTER_DTYPE_UNDEFINED && ot_in_dtype(n, 0) != OTTER_DTYPE_BOOL)
        return ot_inf_fail(n, OTTER_ERR_INVALID, "condition '%s' must be bool, not %s", n->node->inputs[0],
                           otter_dtype_name(ot_in_dtype(n, 0)));
    OT_TRY(ot_same_dtype(n, 1, 2));
    otter_dtype dt = ot_in_dtype(n, 1);
    if (dt == OTTER_DTYPE_UNDEFINED) dt = ot_in_dtype(n, 2);
    OT_TRY(broadcast_out(n, 0, 3, dt));
    const ot_idim *c, *x, *y;
    int64_t cc, cx, cy;
    if (n->out[0].rank <= 1 && ot_in_ints(n, 0, &c, &cc) && ot_in_ints(n, 1, &x, &cx) && ot_in_ints(n, 2, &y, &cy)) {
        int64_t m = cc > cx ? cc : cx;
        m = m > cy ? m : cy;
        if ((cc != m && cc != 1) || (cx != m && cx != 1) || (cy != m && cy != 1)) return OTTER_OK;
        ot_idim *r = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(m + 1));
        if (!r) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < m; i++) {
            ot_idim ci = c[cc == 1 ? 0 : i];
            r[i] = !ot_data_is_value(ci) ? (ot_idim){OT_DATA_UNKNOWN, NULL}
                   : ci.v                ? x[cx == 1 ? 0 : i]
                                         : y[cy == 1 ? 0 : i];
        }
        return ot_out_idata(n, 0, m, r);
    }
    return OTTER_OK;
}

/* Neg / Abs on known integer values. */
otter_status ot_infer_neg(ot_inode *n) {
    OT_TRY(ot_out_like(n, 0, 0));
    const ot_idim *d;
    int64_t c;
    if (ot_in_ints(n, 0, &d, &c)) {
        ot_idim *r = ot_inf_alloc(n->cx, sizeof(ot_idim) * (size_t)(c + 1));
        if (!r) return OT_INF_NOMEM(n);
        for (int64_t i = 0; i < c; i++)
            r[i] = ot_data_is_value(d[i]) ? ot_dim_known(-d[i].v) : (ot_idim){OT_DATA_UNKNOWN, NULL};
        OT_TRY(ot_out_idata(n, 0, c, r));
    }
    return OTTER_OK;
}

/* Clip: like input 0; min/max (inputs from opset 11) must share its type. */
otter_status ot_infer_clip(ot_inode *n) {
    if (n->opset >= 11) OT_TRY(ot_same_dtype(n, 0, 2));
    return ot_out_like(n, 0, 0);
}

/* PRelu: slope broadcasts to X (unidirectionally); the output is X's shape. */
otter_status ot_infer_prelu(ot_inode *n) {
    OT_TRY(ot_same_dtype(n, 0, 1));
    return ot_out_like(n, 0, 0);
}
