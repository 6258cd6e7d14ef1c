/* Model-local functions, which the IR keeps as serialized FunctionProto bytes (otter_model.functions),
 * decoded for the tools that look inside them (the checker). */
#ifndef OTTER_FORMAT_FUNCTION_H
#define OTTER_FORMAT_FUNCTION_H

#include "otter/ir.h"

/* A function as a small model: domain, opsets (its opset_import) and a graph named after the function
 * whose inputs, outputs and value_info are the function's and whose nodes are its body. Free with
 * otter_model_free. */
otter_status ot_function_as_model(const otter_bytes *function, otter_model **out);

#endif
