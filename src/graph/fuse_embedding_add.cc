#include "graph/fuse_embedding_add.h"

namespace spillway::graph {

// Unlike the other add folds, an accumulating add folds too: the node can
// add into its output (NodeAttrs::accumulate), and that add is the one a
// tied table's gradient ends in when it is accumulated.
FusedGraph fuse_embedding_add(const Graph& g) {
  return fold_adds(g, {.absorbs = [](const Node& n, Value) {
                         return n.kind == OpKind::embedding_backward && n.attrs.fused == Fused::none &&
                                !n.attrs.accumulate;
                       },
                       .accumulating_adds = true});
}

}  // namespace spillway::graph
