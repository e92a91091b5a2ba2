#include "graph/fuse_matmul_swiglu.h"

#include <vector>

namespace spillway::graph {

SwigluFused fuse_matmul_swiglu(const Graph& g) {
  const auto& nodes = g.nodes();
  // For each matmul that absorbs a swiglu: the swiglu's output.
  std::vector<Value> gate_of(nodes.size());
  std::vector<bool> gone(nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& s = nodes[i];
    if (s.kind != OpKind::swiglu || !s.attrs.packed || s.attrs.accumulate || s.inputs.size() != 1 ||
        s.outputs.size() != 1 || g.value(s.outputs[0]).accumulated) {
      continue;
    }
    const int32_t p = g.value(s.inputs[0]).producer;
    if (p < 0) continue;
    const Node& product = nodes[static_cast<size_t>(p)];
    if (product.kind != OpKind::matmul || product.inputs.size() != 2 || product.outputs.size() != 1 ||
        product.attrs.accumulate || g.value(product.outputs[0]).accumulated || gate_of[static_cast<size_t>(p)].valid()) {
      continue;
    }
    gate_of[static_cast<size_t>(p)] = s.outputs[0];
    gone[i] = true;
    ++fused;
  }

  SwigluFused out;
  out.fused = fused;
  out.graph = values_of(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (gone[i]) continue;
    Node n = nodes[i];
    if (gate_of[i].valid()) n.outputs.push_back(gate_of[i]);
    out.graph.add_node(std::move(n));
  }
  return out;
}

}  // namespace spillway::graph
