/* otter: on-device training of ONNX models. The umbrella header. */
#ifndef OTTER_OTTER_H
#define OTTER_OTTER_H

#include "otter/status.h"
#include "otter/tensor.h"
#include "otter/ir.h"
#include "otter/io.h"

#endif
