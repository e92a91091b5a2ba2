#include "graph/fuse_matmul_swiglu.h"

#include <vector>

namespace spillway::graph {

namespace {

// A packed swiglu or swiglu_backward that overwrites its one output.
bool plain_packed(const Graph& g, const Node& n, OpKind kind) {
  return n.kind == kind && n.attrs.packed && !n.attrs.accumulate && !g.value(n.outputs[0]).accumulated;
}

}  // namespace

SwigluFused fuse_matmul_swiglu(const Graph& g) {
  const auto& nodes = g.nodes();
  const std::vector<int> readers = reader_counts(g);
  // For each matmul that absorbs a swiglu: the swiglu's output; for each
  // that absorbs a swiglu_backward: that node.
  std::vector<Value> gate_of(nodes.size());
  std::vector<const Node*> backward_of(nodes.size(), nullptr);
  std::vector<bool> gone(nodes.size(), false);
  SwigluFused out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& s = nodes[i];
    const bool forward = plain_packed(g, s, OpKind::swiglu);
    if (!forward && !plain_packed(g, s, OpKind::swiglu_backward)) continue;
    const Value product_out = s.inputs[0];
    const int32_t p = g.value(product_out).producer;
    if (p < 0) continue;
    const auto at = static_cast<size_t>(p);
    if (!is_plain_product(g, nodes[at]) || gate_of[at].valid() || backward_of[at] != nullptr) continue;
    if (forward) {
      gate_of[at] = s.outputs[0];
      ++out.fused;
    } else {
      if (readers[static_cast<size_t>(product_out.id)] != 1 || g.is_output(product_out)) continue;
      backward_of[at] = &s;
      ++out.fused_backward;
    }
    gone[i] = true;
  }

  out.graph = values_of(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (gone[i]) continue;
    Node n = nodes[i];
    if (gate_of[i].valid()) {
      n.outputs.push_back(gate_of[i]);
      n.attrs.fused = Fused::swiglu_gate;
    }
    if (backward_of[i] != nullptr) {
      n.inputs.push_back(backward_of[i]->inputs[1]);  // the forward's gate|up
      n.outputs = backward_of[i]->outputs;
      n.attrs.fused = Fused::swiglu_backward;
    }
    out.graph.add_node(std::move(n));
  }
  return out;
}

}  // namespace spillway::graph
