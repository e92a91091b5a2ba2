#include "graph/fuse_rmsnorm_add.h"

namespace spillway::graph {

// Only dx (output 0) takes an addend; the node's accumulate flag is about
// dweight and does not stop the fold.
FusedGraph fuse_rmsnorm_add(const Graph& g) {
  return fold_adds(g, {.absorbs = [](const Node& n, Value made) {
                         return n.kind == OpKind::rmsnorm_backward && n.attrs.fused == Fused::none &&
                                n.outputs[0] == made;
                       }});
}

}  // namespace spillway::graph
