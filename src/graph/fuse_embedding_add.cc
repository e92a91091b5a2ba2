#include "graph/fuse_embedding_add.h"

#include <vector>

namespace spillway::graph {

EmbeddingAddFused fuse_embedding_add(const Graph& g) {
  const auto& nodes = g.nodes();
  const auto& values = g.values();
  std::vector<int> readers(values.size(), 0);
  for (const Node& n : nodes) {
    for (Value v : n.inputs) ++readers[static_cast<size_t>(v.id)];
  }
  // For each embedding_backward that absorbs an add: the add, and which of
  // its inputs is the base. The fused node runs where the embedding_backward
  // ran, so nothing lives longer than before; that needs the base to exist
  // by then. Unlike the other add folds, an accumulating add folds too: the
  // node can add into its output (NodeAttrs::accumulate), and that add is
  // the one a tied table's gradient ends in when it is accumulated.
  std::vector<int32_t> absorbed(nodes.size(), -1);
  std::vector<int> base_input(nodes.size(), -1);
  std::vector<bool> folded_add(nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& add = nodes[i];
    if (add.kind != OpKind::add || add.inputs.size() != 2) continue;
    const ValueInfo& out = values[static_cast<size_t>(add.outputs[0].id)];
    for (int side = 1; side >= 0; --side) {
      const Value d = add.inputs[static_cast<size_t>(side)];
      const Value other = add.inputs[static_cast<size_t>(1 - side)];
      const ValueInfo& di = values[static_cast<size_t>(d.id)];
      const ValueInfo& oi = values[static_cast<size_t>(other.id)];
      if (di.producer < 0 || d == other) continue;
      const auto e = static_cast<size_t>(di.producer);
      const Node& eb = nodes[e];
      if (eb.kind != OpKind::embedding_backward || eb.inputs.size() != 2 || eb.attrs.accumulate ||
          absorbed[e] >= 0) {
        continue;
      }
      if (readers[static_cast<size_t>(d.id)] != 1 || g.is_output(d) || di.accumulated) continue;
      if (oi.dtype != out.dtype || di.dtype != out.dtype || oi.shape != out.shape || di.shape != out.shape) continue;
      if (oi.role == ValueRole::computed && oi.producer >= static_cast<int32_t>(e)) continue;
      absorbed[e] = static_cast<int32_t>(i);
      base_input[e] = 1 - side;
      folded_add[i] = true;
      ++folded;
      break;
    }
  }

  EmbeddingAddFused f;
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
      n.inputs.push_back(add.inputs[static_cast<size_t>(base_input[i])]);
      n.outputs = add.outputs;
      n.attrs.accumulate = add.attrs.accumulate;
    }
    f.graph.add_node(std::move(n));
  }
  for (Value out : g.outputs()) f.graph.mark_output(out);
  return f;
}

}  // namespace spillway::graph
