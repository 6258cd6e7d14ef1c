#include <string.h>

#include "core/core.h"
#include "runtime/op.h"
#include "runtime/ops/gaps.h"

static const ot_op_def *const FAMILIES[] = {
    ot_ops_elementwise, ot_ops_reduce,  ot_ops_linalg,  ot_ops_nn,    ot_ops_shape,      ot_ops_misc,
    ot_ops_training,    ot_ops_rnn,     ot_ops_quant,   ot_ops_extra, ot_ops_sequence,   ot_ops_autodiff,
    ot_ops_random,      ot_ops_lp_norm, ot_ops_bitwise, ot_ops_gelu,  ot_ops_group_norm,
};

static bool same_domain(const char *a, const char *b) {
    bool a_default = ot_str_empty(a) || strcmp(a, "ai.onnx") == 0;
    bool b_default = ot_str_empty(b) || strcmp(b, "ai.onnx") == 0;
    if (a_default || b_default) return a_default == b_default;
    return strcmp(a, b) == 0;
}

const ot_op_def *ot_op_lookup(const char *domain, const char *op_type, int64_t opset) {
    const ot_op_def *best = NULL;
    for (size_t f = 0; f < sizeof FAMILIES / sizeof FAMILIES[0]; f++)
        for (const ot_op_def *d = FAMILIES[f]; d->op_type; d++)
            if (strcmp(d->op_type, op_type) == 0 && same_domain(d->domain, domain) && d->since_version <= opset &&
                (!best || d->since_version > best->since_version))
                best = d;
    return best;
}
