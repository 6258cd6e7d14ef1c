#include "runtime/op.h"

const ot_op_def ot_ops_elementwise[] = {
    {0},
};
