// The registry: graph::op_def's table, one entry per line of graph/op_list.h.
#include <iterator>

#include "ops/op_defs.h"

namespace spillway::graph {

namespace {

constexpr const OpDef* kDefs[] = {
#define SPW_OP(kind) &ops::kind##_def,
#include "graph/op_list.h"
#undef SPW_OP
};
static_assert(std::size(kDefs) == kOpKinds);

}  // namespace

const OpDef& op_def(OpKind kind) { return *kDefs[static_cast<size_t>(kind)]; }

}  // namespace spillway::graph
