#include "runtime/op.h"

const ot_op_def ot_ops_training[] = {
    {0},
};
