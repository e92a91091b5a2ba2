#include "graph/fuse_linear_loss.h"

#include <optional>
#include <vector>

namespace spillway::graph {

namespace {

struct Head {
  int32_t product = -1, loss = -1, dh = -1, dw = -1;  // node indices
};

}  // namespace

LinearLossFused fuse_linear_loss(const Graph& g, int64_t chunk_rows) {
  const auto& nodes = g.nodes();
  const std::vector<int> readers = reader_counts(g);
  auto producer = [&](Value v) { return g.value(v).producer; };
  auto read_once_inside = [&](Value v, int count) {
    return readers[static_cast<size_t>(v.id)] == count && !g.is_output(v) && !g.value(v).accumulated;
  };
  // The heads to fuse, by their loss node.
  std::vector<std::optional<Head>> heads(nodes.size());
  std::vector<bool> gone(nodes.size(), false);
  int fused = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& loss = nodes[i];
    if (loss.kind != OpKind::cross_entropy) continue;
    const bool training = loss.attrs.fused == Fused::loss_gradient;
    if (!training && loss.attrs.fused != Fused::none) continue;
    const Value logits = loss.inputs[0];
    const int32_t p = producer(logits);
    if (p < 0 || !read_once_inside(logits, 1)) continue;
    const Node& product = nodes[static_cast<size_t>(p)];
    if (!is_plain_product(g, product) || product.attrs.trans_a || !product.attrs.trans_b) continue;
    const Value h = product.inputs[0], w = product.inputs[1];
    Head head{.product = p, .loss = static_cast<int32_t>(i)};
    if (training) {
      // dlogits read by lm_head's dX (dlogits W) and dW (dlogits^T h) alone.
      const Value dlogits = loss.outputs[2];
      if (!read_once_inside(dlogits, 2)) continue;
      for (size_t j = i + 1; j < nodes.size(); ++j) {
        const Node& n = nodes[j];
        if (n.kind != OpKind::matmul || n.inputs[0] != dlogits) continue;
        if (is_plain_product(g, n) && !n.attrs.trans_a && !n.attrs.trans_b && n.inputs[1] == w) {
          head.dh = static_cast<int32_t>(j);
        } else if (n.attrs.fused == Fused::none && n.attrs.trans_a && !n.attrs.trans_b && n.inputs[1] == h &&
                   readers[static_cast<size_t>(n.outputs[0].id)] == 0) {
          head.dw = static_cast<int32_t>(j);
        }
      }
      if (head.dh < 0 || head.dw < 0) continue;
      gone[static_cast<size_t>(head.dh)] = gone[static_cast<size_t>(head.dw)] = true;
    }
    gone[static_cast<size_t>(p)] = true;
    heads[i] = head;
    ++fused;
  }

  LinearLossFused out;
  out.fused = fused;
  out.graph = values_of(g);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (gone[i]) continue;
    if (!heads[i]) {
      out.graph.add_node(nodes[i]);
      continue;
    }
    const Head& head = *heads[i];
    const Node& loss = nodes[i];
    const Node& product = nodes[static_cast<size_t>(head.product)];
    Node n{.kind = OpKind::linear_cross_entropy, .name = loss.name};
    n.inputs = {product.inputs[0], product.inputs[1], loss.inputs[1]};
    if (loss.inputs.size() > 2) n.inputs.push_back(loss.inputs[2]);  // the weighted loss's weights
    n.outputs = {loss.outputs[0], loss.outputs[1]};
    n.attrs.chunk_rows = chunk_rows;
    if (head.dh >= 0) {
      const Node& dw = nodes[static_cast<size_t>(head.dw)];
      n.outputs.push_back(nodes[static_cast<size_t>(head.dh)].outputs[0]);
      n.outputs.push_back(dw.outputs[0]);
      n.attrs.dloss = loss.attrs.dloss;
      n.attrs.accumulate = dw.attrs.accumulate;
    }
    out.graph.add_node(std::move(n));
  }
  return out;
}

}  // namespace spillway::graph
