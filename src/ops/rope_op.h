// The rope ops in the graph: rotary position embedding and its backward
// (ops/rope.h).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "graph/builder.h"

namespace spillway::ops {

// x [batch, seq, heads * head_dim] rotated at positions pos0, pos0 + 1, ...
// (or pos0 + positions[b, t] where `positions`, i32 [batch, seq], is given)
// by inv_freq [head_dim / 2]; `rotated_heads` (0: all) rotates only the
// leading heads of x's `heads`, carrying the rest.
graph::Value rope(graph::Builder& b, graph::Value x, int64_t heads, std::shared_ptr<const std::vector<float>> inv_freq,
                  int64_t pos0 = 0, std::string_view name = "rope", int64_t rotated_heads = 0,
                  graph::Value positions = {});
// dx, rotating dout back by the forward's attributes (and positions).
graph::Value rope_backward(graph::Builder& b, graph::Value dout, const graph::NodeAttrs& forward_attrs,
                           std::string_view name, graph::Value positions = {});

// What a rope, a rope_backward or a matmul with Fused::rope rotates:
// [batch, seq, heads * head_dim] rows, the first rotated_heads heads of each.
struct RopeDims {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, rotated_heads = 0;
  int64_t rotated_cols() const { return rotated_heads * head_dim; }
};
RopeDims rope_dims(const graph::Graph& g, const graph::Node& n);

}  // namespace spillway::ops
