#include "graph/fuse_rmsnorm_add.h"

#include <vector>

namespace spillway::graph {

NormAddFused fuse_rmsnorm_add(const Graph& g) {
  const auto& nodes = g.nodes();
  const auto& values = g.values();
  std::vector<int> readers(values.size(), 0);
  for (const Node& n : nodes) {
    for (Value v : n.inputs) ++readers[static_cast<size_t>(v.id)];
  }
  // For each rmsnorm_backward that absorbs an add: the add, and which of its
  // inputs is the addend. The fused node runs where the rmsnorm_backward
  // ran, so nothing lives longer than before; that needs the addend to exist
  // by then. (Its accumulate flag is about dweight, not dx: it does not stop
  // the fold.)
  std::vector<int32_t> absorbed(nodes.size(), -1);
  std::vector<int> addend_input(nodes.size(), -1);
  std::vector<bool> folded_add(nodes.size(), false);
  int folded = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& add = nodes[i];
    if (add.kind != OpKind::add || add.attrs.accumulate || add.inputs.size() != 2) continue;
    const ValueInfo& out = values[static_cast<size_t>(add.outputs[0].id)];
    for (int side = 1; side >= 0; --side) {
      const Value dx = add.inputs[static_cast<size_t>(side)];
      const Value other = add.inputs[static_cast<size_t>(1 - side)];
      const ValueInfo& di = values[static_cast<size_t>(dx.id)];
      const ValueInfo& oi = values[static_cast<size_t>(other.id)];
      if (di.producer < 0 || dx == other) continue;
      const auto r = static_cast<size_t>(di.producer);
      const Node& norm = nodes[r];
      if (norm.kind != OpKind::rmsnorm_backward || norm.inputs.size() != 4 || norm.outputs[0] != dx ||
          absorbed[r] >= 0) {
        continue;
      }
      if (readers[static_cast<size_t>(dx.id)] != 1 || g.is_output(dx) || di.accumulated) continue;
      if (oi.dtype != out.dtype || di.dtype != out.dtype || oi.shape != out.shape || di.shape != out.shape) continue;
      if (oi.role == ValueRole::computed && oi.producer >= static_cast<int32_t>(r)) continue;
      absorbed[r] = static_cast<int32_t>(i);
      addend_input[r] = 1 - side;
      folded_add[i] = true;
      ++folded;
      break;
    }
  }

  NormAddFused f;
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
      n.outputs[0] = add.outputs[0];
    }
    f.graph.add_node(std::move(n));
  }
  for (Value out : g.outputs()) f.graph.mark_output(out);
  return f;
}

}  // namespace spillway::graph
