#include "graph/fuse_matmul_add.h"

namespace spillway::graph {

// A matmul that already adds (a third input, or beta = 1 into caller
// memory) takes no second addend, nor does one whose output a folded rope
// rotates (graph/fuse_matmul_rope.h): the addend would be rotated too.
FusedGraph fuse_matmul_add(const Graph& g) {
  return fold_adds(g, {.absorbs = [](const Node& n, Value) {
                         return n.kind == OpKind::matmul && n.inputs.size() == 2 && !n.attrs.accumulate &&
                                !n.attrs.rope;
                       }});
}

}  // namespace spillway::graph
