// The common shape of the passes that fold an add into the node making one
// of its operands (fuse_matmul_add, fuse_rmsnorm_add, fuse_embedding_add):
// y = op(...) read only by add(y, x) becomes op(..., x) writing the add's
// output, one pass over memory instead of two. What differs per op is which
// producers can take the extra input; everything else is here.
#pragma once

#include <functional>

#include "graph/graph.h"

namespace spillway::graph {

struct FusedGraph {
  Graph graph;
  int adds_folded = 0;
};

struct AddFold {
  // Whether `producer`, whose output `made` is one operand of an add, can
  // take the add's other operand as one more (last) input and write the
  // add's output in place of `made` (Fused::addend, which its op must run).
  std::function<bool(const Node& producer, Value made)> absorbs;
  // An add that accumulates into caller memory folds too, its accumulate
  // flag moving to the producer (which must not accumulate itself).
  bool accumulating_adds = false;
};

// A new graph in which every add whose operand comes from a producer the
// rule accepts, that nothing else reads (same dtype and shape, not a graph
// output, not accumulated), and whose other operand is made before the
// producer, is folded into that producer, which stays where it was: no value
// lives longer than before. Every value keeps its id; the producers' old
// outputs are left without a producer or reader (never allocated). A
// producer absorbs at most one add.
FusedGraph fold_adds(const Graph& graph, const AddFold& rule);

}  // namespace spillway::graph
