#include "graph/fuse_loss_gradient.h"

#include <vector>

namespace spillway::graph {

LossGradientFused fuse_loss_gradient(const Graph& g) {
  const auto& nodes = g.nodes();
  const auto& values = g.values();
  const std::vector<int> readers = reader_counts(g);
  auto producer = [&](Value v) { return values[static_cast<size_t>(v.id)].producer; };

  // For each cross_entropy that absorbs a backward: that backward node. The
  // fused node runs where the forward ran, which only moves dlogits earlier:
  // its readers all come after the backward node.
  std::vector<int32_t> absorbed(nodes.size(), -1);
  std::vector<bool> gone(nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& back = nodes[i];
    if (back.kind != OpKind::cross_entropy_backward) continue;
    const Value logits = back.inputs[0], targets = back.inputs[1], lse = back.inputs[2], dloss = back.inputs[3];
    const int32_t f = producer(lse), s = producer(dloss);
    if (f < 0 || s < 0) continue;
    const Node& forward = nodes[static_cast<size_t>(f)];
    const Node& seed = nodes[static_cast<size_t>(s)];
    if (forward.kind != OpKind::cross_entropy || forward.attrs.fused != Fused::none ||
        absorbed[static_cast<size_t>(f)] >= 0) {
      continue;
    }
    if (forward.inputs[0] != logits || forward.inputs[1] != targets || forward.outputs[1] != lse) continue;
    // The same weights, or none on either (the weighted loss's third input,
    // its backward's fifth).
    const bool forward_weighted = forward.inputs.size() > 2, back_weighted = back.inputs.size() > 4;
    if (forward_weighted != back_weighted || (forward_weighted && forward.inputs[2] != back.inputs[4])) continue;
    // The fused kernel takes dloss as a constant rounded to the loss's dtype,
    // which is what the fill wrote only when it has that dtype.
    const ValueInfo& seed_value = values[static_cast<size_t>(dloss.id)];
    if (seed.kind != OpKind::fill || seed.attrs.accumulate || seed_value.shape.numel() != 1 ||
        seed_value.dtype != values[static_cast<size_t>(forward.outputs[0].id)].dtype) {
      continue;
    }
    absorbed[static_cast<size_t>(f)] = static_cast<int32_t>(i);
    gone[i] = true;
    if (readers[static_cast<size_t>(dloss.id)] == 1 && !g.is_output(dloss)) gone[static_cast<size_t>(s)] = true;
    ++fused;
  }

  LossGradientFused out;
  out.fused = fused;
  out.graph = values_of(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (gone[i]) continue;
    Node n = nodes[i];
    if (absorbed[i] >= 0) {
      const Node& back = nodes[static_cast<size_t>(absorbed[i])];
      n.outputs.push_back(back.outputs[0]);
      n.attrs.dloss = nodes[static_cast<size_t>(producer(back.inputs[3]))].attrs.fill_value;
      n.attrs.fused = Fused::loss_gradient;
    }
    out.graph.add_node(std::move(n));
  }
  return out;
}

}  // namespace spillway::graph
