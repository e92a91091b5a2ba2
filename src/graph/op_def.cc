#include "graph/op_def.h"

namespace spillway::graph {

double operand_bytes(const Graph& g, const Node& n) {
  double bytes = 0;
  for (Value v : n.inputs) bytes += static_cast<double>(g.value(v).bytes());
  for (Value v : n.outputs) bytes += static_cast<double>(g.value(v).bytes());
  return bytes;
}

OpCost memory_bound(const Graph& g, const Node& n) { return OpCost{0, operand_bytes(g, n), RateClass::memory}; }

std::string backward_name(const Node& forward) { return forward.name + ".backward"; }

}  // namespace spillway::graph
