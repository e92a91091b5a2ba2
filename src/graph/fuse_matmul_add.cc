#include "graph/fuse_matmul_add.h"

namespace spillway::graph {

// A matmul that already adds (an addend, or beta = 1 into caller memory)
// takes no second addend, nor does one with another fused form: a folded
// rope (graph/fuse_matmul_rope.h) would rotate the addend too, and the
// SwiGLU forms write something other than the product.
FusedGraph fuse_matmul_add(const Graph& g) {
  return fold_adds(g, {.absorbs = [](const Node& n, Value) {
                         return n.kind == OpKind::matmul && n.attrs.fused == Fused::none && !n.attrs.accumulate;
                       }});
}

}  // namespace spillway::graph
