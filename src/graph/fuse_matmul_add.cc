#include "graph/fuse_matmul_add.h"

#include <vector>

namespace spillway::graph {

FusedGraph fuse_matmul_add(const Graph& g) {
  const auto& nodes = g.nodes();
  const auto& values = g.values();
  std::vector<int> readers(values.size(), 0);
  for (const Node& n : nodes) {
    for (Value v : n.inputs) ++readers[static_cast<size_t>(v.id)];
  }
  // For each matmul that absorbs an add: the add, and which of its inputs
  // is the addend. The fused node runs where the matmul ran, so nothing
  // lives longer than before; that needs the addend to exist by then.
  std::vector<int32_t> absorbed(nodes.size(), -1);
  std::vector<int> addend_input(nodes.size(), -1);
  std::vector<bool> folded_add(nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& add = nodes[i];
    if (add.kind != OpKind::add || add.attrs.accumulate || add.inputs.size() != 2) continue;
    const ValueInfo& out = values[static_cast<size_t>(add.outputs[0].id)];
    for (int side = 1; side >= 0; --side) {
      const Value y = add.inputs[static_cast<size_t>(side)];
      const Value x = add.inputs[static_cast<size_t>(1 - side)];
      const ValueInfo& yi = values[static_cast<size_t>(y.id)];
      const ValueInfo& xi = values[static_cast<size_t>(x.id)];
      if (yi.producer < 0 || x == y) continue;
      const auto m = static_cast<size_t>(yi.producer);
      const Node& mm = nodes[m];
      if (mm.kind != OpKind::matmul || mm.inputs.size() != 2 || mm.attrs.accumulate || absorbed[m] >= 0) continue;
      if (readers[static_cast<size_t>(y.id)] != 1 || g.is_output(y) || yi.accumulated) continue;
      if (xi.dtype != out.dtype || yi.dtype != out.dtype || xi.shape != out.shape || yi.shape != out.shape) continue;
      if (xi.role == ValueRole::computed && xi.producer >= static_cast<int32_t>(m)) continue;
      absorbed[m] = static_cast<int32_t>(i);
      addend_input[m] = 1 - side;
      folded_add[i] = true;
      ++folded;
      break;
    }
  }

  FusedGraph f;
  f.adds_folded = folded;
  for (const ValueInfo& v : values) {
    ValueInfo copy = v;
    copy.producer = -1;
    f.graph.add_value(std::move(copy));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (folded_add[i]) continue;
    Node n = nodes[i];
    if (absorbed[i] >= 0) {
      const Node& add = nodes[static_cast<size_t>(absorbed[i])];
      n.inputs.push_back(add.inputs[static_cast<size_t>(addend_input[i])]);
      n.outputs = add.outputs;
    }
    f.graph.add_node(std::move(n));
  }
  for (Value out : g.outputs()) f.graph.mark_output(out);
  return f;
}

}  // namespace spillway::graph
