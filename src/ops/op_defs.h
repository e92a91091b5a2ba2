// The definition of every op of graph/op_list.h: ops::<kind>_def, each in
// its family's src/ops/<family>_op.cc beside the kernels it calls, all
// tabled by ops/op_registry.cc. An op listed without a definition does not
// link.
#pragma once

#include "graph/op_def.h"

namespace spillway::ops {

#define SPW_OP(kind) extern const graph::OpDef kind##_def;
#include "graph/op_list.h"
#undef SPW_OP

}  // namespace spillway::ops
