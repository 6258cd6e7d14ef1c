/* BitwiseAnd, BitwiseOr, BitwiseXor (numpy broadcasting) and BitwiseNot over the integer types. */
#include "core/core.h"
#include "runtime/ops/broadcast.h"
#include "runtime/ops/kernels.h"

typedef struct bitwise_args {
    void *y;
    const void *a, *b;
} bitwise_args;

/* One broadcast row: y = a OP b, operand k starting at off[k] and advancing step[k]. */
#define BITWISE_ROW(NAME, OP, E, T, S)                                                                                 \
    static void NAME##_##S(void *arg, const int64_t *off, const int64_t *step, int64_t len) {                          \
        const bitwise_args *g = arg;                                                                                   \
        T *y = (T *)g->y + off[0];                                                                                     \
        const T *a = (const T *)g->a + off[1], *b = (const T *)g->b + off[2];                                          \
        for (int64_t i = 0; i < len; i++) y[i * step[0]] = (T)(a[i * step[1]] OP b[i * step[2]]);                      \
    }
#define AND_ROW(E, T, S) BITWISE_ROW(and, &, E, T, S)
#define OR_ROW(E, T, S)  BITWISE_ROW(or, |, E, T, S)
#define XOR_ROW(E, T, S) BITWISE_ROW(xor, ^, E, T, S)
OT_FOR_INTS(AND_ROW)
OT_FOR_INTS(OR_ROW)
OT_FOR_INTS(XOR_ROW)
#define AND_ENTRY(E, T, S) [E] = and_##S,
#define OR_ENTRY(E, T, S)  [E] = or_##S,
#define XOR_ENTRY(E, T, S) [E] = xor_##S,
static const ot_bcast_row_fn and_rows[OTTER_DTYPE_COUNT_] = {OT_FOR_INTS(AND_ENTRY)};
static const ot_bcast_row_fn or_rows[OTTER_DTYPE_COUNT_] = {OT_FOR_INTS(OR_ENTRY)};
static const ot_bcast_row_fn xor_rows[OTTER_DTYPE_COUNT_] = {OT_FOR_INTS(XOR_ENTRY)};

/* The integer input i, required; else an error naming the node and the input. */
static otter_status integer_input(const ot_kernel_ctx *ctx, size_t i, const otter_tensor **t) {
    OT_TRY(ot_ctx_need_input(ctx, i, t));
    if ((*t)->dtype >= OTTER_DTYPE_COUNT_ || !and_rows[(*t)->dtype])
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "input %zu '%s' has element type %s, expected an integer type", i,
                            ot_ctx_input_name(ctx, i), otter_dtype_name((*t)->dtype));
    return OTTER_OK;
}

static otter_status bitwise_binary(ot_kernel_ctx *ctx, const ot_bcast_row_fn *rows) {
    const otter_tensor *a, *b;
    OT_TRY(integer_input(ctx, 0, &a));
    OT_TRY(integer_input(ctx, 1, &b));
    if (a->dtype != b->dtype)
        return ot_ctx_error(ctx, OTTER_ERR_INVALID, "inputs '%s' (%s) and '%s' (%s) differ in element type",
                            ot_ctx_input_name(ctx, 0), otter_dtype_name(a->dtype), ot_ctx_input_name(ctx, 1),
                            otter_dtype_name(b->dtype));
    int rank;
    int64_t dims[OTTER_MAX_RANK];
    OT_TRY(ot_broadcast_inputs(ctx, 2, (const size_t[]){0, 1}, &rank, dims));
    otter_tensor *y = ot_ctx_output(ctx, 0, a->dtype, rank, dims);
    if (!y) return OTTER_ERR_NOMEM;
    ot_bcast bc;
    ot_bcast_init_tensors(&bc, y, 2, (const otter_tensor *const[]){a, b});
    if (bc.numel == 0) return OTTER_OK;
    bitwise_args g = {y->data, a->data, b->data};
    ot_bcast_parallel(ctx, &bc, OT_GRAIN_ELEMWISE, rows[a->dtype], &g);
    return OTTER_OK;
}

otter_status ot_kernel_bitwise_and(ot_kernel_ctx *ctx) { return bitwise_binary(ctx, and_rows); }
otter_status ot_kernel_bitwise_or(ot_kernel_ctx *ctx) { return bitwise_binary(ctx, or_rows); }
otter_status ot_kernel_bitwise_xor(ot_kernel_ctx *ctx) { return bitwise_binary(ctx, xor_rows); }

otter_status ot_kernel_bitwise_not(ot_kernel_ctx *ctx) {
    const otter_tensor *x;
    OT_TRY(integer_input(ctx, 0, &x));
    otter_tensor *y = ot_ctx_output(ctx, 0, x->dtype, x->rank, x->dims);
    if (!y) return OTTER_ERR_NOMEM;
    int64_t n = otter_tensor_numel(x);
    switch (x->dtype) {
#define NOT_CASE(E, T, S)                                                                                              \
    case E:                                                                                                            \
        for (int64_t i = 0; i < n; i++) ((T *)y->data)[i] = (T) ~((const T *)x->data)[i];                              \
        break;
        OT_FOR_INTS(NOT_CASE)
#undef NOT_CASE
    default:
        OT_ASSERT(!"integer_input admits integer types only");
    }
    return OTTER_OK;
}
