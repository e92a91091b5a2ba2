#include "graph/fold_add.h"

#include <algorithm>
#include <vector>

namespace spillway::graph {

FusedGraph fold_adds(const Graph& g, const AddFold& rule) {
  const auto& nodes = g.nodes();
  const auto& values = g.values();
  const std::vector<int> readers = reader_counts(g);
  // For each producer that absorbs an add: the add, and which of its inputs
  // the producer takes. The fused node runs where the producer ran, so that
  // input must exist by then.
  std::vector<int32_t> absorbed(nodes.size(), -1);
  std::vector<int> taken_input(nodes.size(), -1);
  std::vector<bool> folded_add(nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& add = nodes[i];
    if (add.kind != OpKind::add) continue;
    if (add.attrs.accumulate && !rule.accumulating_adds) continue;
    const ValueInfo& out = values[static_cast<size_t>(add.outputs[0].id)];
    for (int side = 1; side >= 0; --side) {
      const Value made = add.inputs[static_cast<size_t>(side)];
      const Value other = add.inputs[static_cast<size_t>(1 - side)];
      const ValueInfo& mi = values[static_cast<size_t>(made.id)];
      const ValueInfo& oi = values[static_cast<size_t>(other.id)];
      if (mi.producer < 0 || made == other) continue;
      const auto p = static_cast<size_t>(mi.producer);
      if (absorbed[p] >= 0 || !rule.absorbs(nodes[p], made)) continue;
      if (add.attrs.accumulate && nodes[p].attrs.accumulate) continue;
      if (readers[static_cast<size_t>(made.id)] != 1 || g.is_output(made) || mi.accumulated) continue;
      if (oi.dtype != out.dtype || mi.dtype != out.dtype || oi.shape != out.shape || mi.shape != out.shape) continue;
      if (oi.role == ValueRole::computed && oi.producer >= static_cast<int32_t>(p)) continue;
      absorbed[p] = static_cast<int32_t>(i);
      taken_input[p] = 1 - side;
      folded_add[i] = true;
      ++folded;
      break;
    }
  }

  FusedGraph f{values_of(g), folded};
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (folded_add[i]) continue;
    Node n = nodes[i];
    if (absorbed[i] >= 0) {
      const Node& add = nodes[static_cast<size_t>(absorbed[i])];
      const Value made = add.inputs[static_cast<size_t>(1 - taken_input[i])];
      n.inputs.push_back(add.inputs[static_cast<size_t>(taken_input[i])]);
      *std::find(n.outputs.begin(), n.outputs.end(), made) = add.outputs[0];
      if (add.attrs.accumulate) n.attrs.accumulate = true;
      n.attrs.fused = Fused::addend;
    }
    f.graph.add_node(std::move(n));
  }
  return f;
}

}  // namespace spillway::graph
