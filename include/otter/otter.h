/* otter: on-device training of ONNX models. The umbrella header. */
#ifndef OTTER_OTTER_H
#define OTTER_OTTER_H

#include "otter/status.h"
#include "otter/tensor.h"
#include "otter/ir.h"
#include "otter/io.h"
#include "otter/edit.h"
#include "otter/print.h"
#include "otter/check.h"
#include "otter/infer.h"
#include "otter/runtime.h"
#include "otter/autodiff.h"
#include "otter/blocks.h"
#include "otter/artifacts.h"
#include "otter/checkpoint.h"
#include "otter/data.h"
#include "otter/training.h"
#include "otter/fl.h"
#include "otter/plot.h"
#include "otter/ops.h"

#endif
