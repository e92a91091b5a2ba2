// What an op's definition (src/ops/<family>_op.cc) is written with: the
// registry's declaration of the OpDef it defines, a node's operands, the
// context its CUDA hooks share, and the graph's names every definition
// uses. Only definition files include it: it brings those names into ops.
#pragma once

#include "base/status.h"
#include "graph/builder.h"
#include "graph/op_def.h"
#include "ops/op_defs.h"
#include "graph/tensor_parallel.h"
#include "ops/operands.h"
#ifdef SPILLWAY_HAS_CUDA
#include "ops/cuda_op_context.h"
#endif

namespace spillway::ops {

using graph::Fused;
using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Placement;
using graph::Sharder;

}  // namespace spillway::ops
