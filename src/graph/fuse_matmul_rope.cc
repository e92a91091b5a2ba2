#include "graph/fuse_matmul_rope.h"

#include <vector>

namespace spillway::graph {

namespace {

// A rope (not its backward) that overwrites its output. A rope with per-token
// positions (packed rows) is left alone: the epilogue's angle table is
// indexed by row mod seq.
bool plain_rope(const Graph& g, const Node& n) {
  return n.kind == OpKind::rope && n.inputs.size() == 1 && !n.attrs.accumulate && !g.value(n.outputs[0]).accumulated;
}

}  // namespace

RopeFused fuse_matmul_rope(const Graph& g) {
  const auto& nodes = g.nodes();
  const std::vector<int> readers = reader_counts(g);
  // For each matmul that absorbs a rope: that rope.
  std::vector<const Node*> rope_of(nodes.size(), nullptr);
  std::vector<bool> gone(nodes.size(), false);
  RopeFused out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& r = nodes[i];
    if (!plain_rope(g, r)) continue;
    const Value product = r.inputs[0];
    const int32_t p = g.value(product).producer;
    if (p < 0) continue;
    const auto at = static_cast<size_t>(p);
    if (!is_plain_product(g, nodes[at]) || readers[static_cast<size_t>(product.id)] != 1 || g.is_output(product)) {
      continue;
    }
    rope_of[at] = &r;
    gone[i] = true;
    ++out.fused;
  }

  out.graph = values_of(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (gone[i]) continue;
    Node n = nodes[i];
    if (const Node* r = rope_of[i]; r != nullptr) {
      n.outputs = r->outputs;
      n.attrs.heads = r->attrs.heads;
      n.attrs.rotated_heads = r->attrs.rotated_heads;
      n.attrs.pos0 = r->attrs.pos0;
      n.attrs.inv_freq = r->attrs.inv_freq;
      n.attrs.fused = Fused::rope;
    }
    out.graph.add_node(std::move(n));
  }
  return out;
}

}  // namespace spillway::graph
