// Every registered op and fused form in a small graph: the op sweep's cases
// (testing/op_sweep.h). Adding an op, or a fused form, adds a case here;
// the sweep fails for a registered one without.
#pragma once

#include <memory>
#include <vector>

#include "graph/fuse_embedding_add.h"
#include "graph/fuse_linear_loss.h"
#include "graph/fuse_loss_gradient.h"
#include "graph/fuse_matmul_add.h"
#include "graph/fuse_matmul_rope.h"
#include "graph/fuse_matmul_swiglu.h"
#include "graph/fuse_rmsnorm_add.h"
#include "ops/add_op.h"
#include "ops/attention_op.h"
#include "ops/cast_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/dropout_op.h"
#include "ops/rows_op.h"
#include "ops/embedding_op.h"
#include "ops/fill_op.h"
#include "ops/matmul_op.h"
#include "ops/rmsnorm_op.h"
#include "ops/rope.h"
#include "ops/rope_op.h"
#include "ops/swiglu_op.h"
#include "testing/op_sweep.h"

namespace spillway::testing {

namespace sweep {

using graph::Fused;
using graph::OpKind;
using graph::Value;
using Outputs = std::vector<Value>;

// head_dim 4: two rotary frequencies.
inline std::shared_ptr<const std::vector<float>> inv_freq() {
  return std::make_shared<const std::vector<float>>(ops::rope_inv_freq(4, 10000.0, {}));
}

// A rope of 4 heads, 3 of them rotated, from position 3.
inline graph::NodeAttrs rope_attrs() {
  graph::NodeAttrs a;
  a.heads = 4;
  a.rotated_heads = 3;
  a.pos0 = 3;
  a.inv_freq = inv_freq();
  return a;
}

// GQA: 4 query heads over 2 kv heads of head_dim 8, batch 2, seq 5.
constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 8;
constexpr double kScale = 0.35;

// The output of the node `n` made last, by index.
inline Value made(SweepInputs& in, size_t n) { return in.b.graph().nodes().back().outputs[n]; }

inline Outputs attention_qkv(SweepInputs& in) {
  const Value q = in.activation("q", Shape{2, 5, kHeads * kHeadDim});
  const Value k = in.activation("k", Shape{2, 5, kKvHeads * kHeadDim});
  const Value v = in.activation("v", Shape{2, 5, kKvHeads * kHeadDim});
  return {ops::attention(in.b, q, k, v, kHeads, kKvHeads, kScale), made(in, 1), q, k, v};
}

inline Outputs attention_packed_qkv(SweepInputs& in) {
  const Value qkv = in.activation("qkv", Shape{2, 5, (kHeads + 2 * kKvHeads) * kHeadDim});
  return {ops::attention_packed(in.b, qkv, kHeads, kKvHeads, kScale), made(in, 1), qkv};
}

inline Outputs softmax_loss(SweepInputs& in) {
  const Value logits = in.activation("logits", Shape{2, 5, 7}, -2, 2);
  const Value targets = in.ids("targets", Shape{2, 5}, 7, true);
  return {ops::cross_entropy(in.b, logits, targets), made(in, 1), logits, targets};
}

// The weighted loss: outputs as softmax_loss's, then the weights.
inline Outputs weighted_softmax_loss(SweepInputs& in) {
  const Value logits = in.activation("logits", Shape{2, 5, 7}, -2, 2);
  const Value targets = in.ids("targets", Shape{2, 5}, 7, true);
  const Value weights = in.weights("weights", Shape{2, 5}, 0, 0.5);
  return {ops::cross_entropy_weighted(in.b, logits, targets, weights), made(in, 1), logits, targets, weights};
}

// lm_head and its loss over 10 rows of a vocabulary of 7, one row not
// counted; training adds the loss's gradient and lm_head's two backward
// products: what fuse_linear_loss chunks (here by 4 rows: 4, 4 and 2).
inline Outputs linear_loss_head(SweepInputs& in, bool weighted, bool training) {
  const Value h = in.activation("h", Shape{2, 5, 6});
  const Value w = in.parameter("w", Shape{7, 6});
  const Value logits = ops::linear(in.b, h, w, "lm_head");
  const Value targets = in.ids("targets", Shape{2, 5}, 7, true);
  const Value weights = weighted ? in.weights("weights", Shape{2, 5}, 0, 0.5) : Value{};
  const Value loss = weighted ? ops::cross_entropy_weighted(in.b, logits, targets, weights, "loss")
                              : ops::cross_entropy(in.b, logits, targets, "loss");
  const Value lse = made(in, 1);
  if (!training) return {loss, lse};
  const Value dloss = ops::fill(in.b, "dloss", Shape{}, 0.75, in.b.info(loss).dtype);
  const Value dlogits = ops::cross_entropy_backward(in.b, logits, targets, lse, dloss, "loss.backward", weights);
  const Shape h_shape = in.b.info(h).shape, w_shape = in.b.info(w).shape;
  const Value dh = ops::matmul(in.b, dlogits, w, false, false, "lm_head.backward.da", &h_shape);
  const Value dw = ops::matmul(in.b, dlogits, h, true, false, "lm_head.backward.db", &w_shape,
                               graph::accumulation_dtype(in.b.dtype()));
  return {loss, lse, dh, dw};
}

inline graph::Graph chunk_linear_loss(const graph::Graph& g) {
  return graph::fuse_linear_loss(graph::fuse_loss_gradient(g).graph, 4).graph;
}

}  // namespace sweep

inline std::vector<SweepCase> sweep_cases() {
  using namespace sweep;
  std::vector<SweepCase> c;
  c.push_back({.label = "fill", .kind = OpKind::fill, .build = [](SweepInputs& in) -> Outputs {
                 return {ops::fill(in.b, "c", Shape{3, 5}, 0.75, in.b.dtype())};
               }});
  c.push_back({.label = "embedding", .kind = OpKind::embedding, .build = [](SweepInputs& in) -> Outputs {
                 const Value table = in.parameter("table", Shape{11, 6});
                 return {ops::embedding(in.b, table, in.ids("ids", Shape{2, 5}, 11))};
               }, .gradient = true});
  c.push_back({.label = "embedding_backward", .kind = OpKind::embedding_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value ids = in.ids("ids", Shape{2, 5}, 11);
                 return {ops::embedding_backward(in.b, ids, in.activation("dout", Shape{2, 5, 6}), 11, "dtable")};
               }});
  c.push_back({.label = "embedding_backward_addend", .kind = OpKind::embedding_backward, .fused = Fused::addend,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value ids = in.ids("ids", Shape{2, 5}, 11);
                 const Value dout = in.activation("dout", Shape{2, 5, 6});
                 const Value base = in.statistic("base", Shape{11, 6});
                 return {ops::add(in.b, ops::embedding_backward(in.b, ids, dout, 11, "dtable"), base, "sum")};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_embedding_add(g).graph; },
               .same_bits = true});
  c.push_back({.label = "rmsnorm", .kind = OpKind::rmsnorm, .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 8}, -2, 2);
                 const Value w = in.parameter("w", Shape{8}, 0.5, 1.5);
                 return {ops::rmsnorm(in.b, x, w, 1e-5), made(in, 1)};
               }, .gradient = true});
  c.push_back({.label = "rmsnorm_backward", .kind = OpKind::rmsnorm_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 8}, -2, 2);
                 const Value w = in.parameter("w", Shape{8}, 0.5, 1.5);
                 ops::rmsnorm(in.b, x, w, 1e-5, "norm");
                 const Value dy = in.activation("dy", Shape{2, 3, 8});
                 return ops::rmsnorm_backward(in.b, dy, x, w, in.b.graph().find("norm.rstd"), "norm.backward");
               }});
  c.push_back({.label = "rmsnorm_backward_addend", .kind = OpKind::rmsnorm_backward, .fused = Fused::addend,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 8}, -2, 2);
                 const Value w = in.parameter("w", Shape{8}, 0.5, 1.5);
                 ops::rmsnorm(in.b, x, w, 1e-5, "norm");
                 const Value dy = in.activation("dy", Shape{2, 3, 8});
                 const Value skip = in.activation("skip", Shape{2, 3, 8});
                 const auto d = ops::rmsnorm_backward(in.b, dy, x, w, in.b.graph().find("norm.rstd"), "norm.backward");
                 return {ops::add(in.b, d[0], skip, "sum"), d[1]};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_rmsnorm_add(g).graph; }});
  c.push_back({.label = "matmul", .kind = OpKind::matmul, .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 4});
                 return {ops::linear(in.b, x, in.parameter("w", Shape{5, 4}))};
               }, .gradient = true});
  c.push_back({.label = "matmul_transposed", .kind = OpKind::matmul, .build = [](SweepInputs& in) -> Outputs {
                 const Value a = in.activation("a", Shape{6, 4});
                 const Value b = in.activation("b", Shape{5, 6});
                 return {ops::matmul(in.b, a, b, true, true)};
               }, .gradient = true});
  c.push_back({.label = "matmul_addend", .kind = OpKind::matmul, .fused = Fused::addend,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 4});
                 const Value w = in.parameter("w", Shape{5, 4});
                 const Value residual = in.activation("residual", Shape{2, 3, 5});
                 return {ops::add(in.b, residual, ops::linear(in.b, x, w, "proj"), "sum")};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_matmul_add(g).graph; }});
  c.push_back({.label = "matmul_swiglu_gate", .kind = OpKind::matmul, .fused = Fused::swiglu_gate,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 4});
                 const Value gate_up = ops::linear(in.b, x, in.parameter("w", Shape{12, 4}), "gate_up_proj");
                 return {ops::swiglu_packed(in.b, gate_up), gate_up};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_matmul_swiglu(g).graph; },
               .same_bits = true});
  c.push_back({.label = "matmul_swiglu_backward", .kind = OpKind::matmul, .fused = Fused::swiglu_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value dy = in.activation("dy", Shape{2, 3, 4});
                 const Value w_down = in.parameter("w_down", Shape{4, 6});
                 const Value gate_up = in.activation("gate_up", Shape{2, 3, 12});
                 const Value dact = ops::matmul(in.b, dy, w_down, false, false, "down.da");
                 return {ops::swiglu_packed_backward(in.b, dact, gate_up, "swiglu.backward")};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_matmul_swiglu(g).graph; },
               .same_bits = true});
  c.push_back({.label = "matmul_rope", .kind = OpKind::matmul, .fused = Fused::rope,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 3, 8});
                 const Value product = ops::linear(in.b, x, in.parameter("w", Shape{16, 8}), "qkv_proj");
                 const graph::NodeAttrs r = rope_attrs();
                 return {ops::rope(in.b, product, r.heads, r.inv_freq, r.pos0, "rope", r.rotated_heads)};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_matmul_rope(g).graph; },
               .same_bits = true});
  c.push_back({.label = "rope", .kind = OpKind::rope, .build = [](SweepInputs& in) -> Outputs {
                 const graph::NodeAttrs r = rope_attrs();
                 const Value x = in.activation("x", Shape{2, 3, 16});
                 return {ops::rope(in.b, x, r.heads, r.inv_freq, r.pos0, "rope", r.rotated_heads)};
               }, .gradient = true});
  c.push_back({.label = "rope_backward", .kind = OpKind::rope_backward, .build = [](SweepInputs& in) -> Outputs {
                 return {ops::rope_backward(in.b, in.activation("dout", Shape{2, 3, 16}), rope_attrs(), "dx")};
               }});
  c.push_back({.label = "attention", .kind = OpKind::attention, .build = [](SweepInputs& in) -> Outputs {
                 const Outputs a = attention_qkv(in);
                 return {a[0], a[1]};
               }, .gradient = true});
  // Context parallelism's chunk: queries at positions 3-5 of 9 keys (cuDNN
  // alone on the GPU).
  c.push_back({.label = "attention_offset", .kind = OpKind::attention, .build = [](SweepInputs& in) -> Outputs {
                 const Value q = in.activation("q", Shape{1, 3, kHeads * kHeadDim});
                 const Value k = in.activation("k", Shape{1, 9, kKvHeads * kHeadDim});
                 const Value v = in.activation("v", Shape{1, 9, kKvHeads * kHeadDim});
                 return {ops::attention(in.b, q, k, v, kHeads, kKvHeads, kScale, "attention", {}, 3), made(in, 1)};
               }, .gradient = true});
  c.push_back({.label = "attention_packed", .kind = OpKind::attention, .build = [](SweepInputs& in) -> Outputs {
                 const Outputs a = attention_packed_qkv(in);
                 return {a[0], a[1]};
               }, .gradient = true});
  c.push_back({.label = "attention_backward", .kind = OpKind::attention_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs a = attention_qkv(in);
                 const Value dout = in.activation("dout", Shape{2, 5, kHeads * kHeadDim});
                 const graph::NodeAttrs attrs = in.b.graph().nodes().back().attrs;
                 return ops::attention_backward(in.b, dout, a[2], a[3], a[4], a[0], a[1], attrs, "backward");
               }, .bf16_tolerance = 3e-2});
  c.push_back({.label = "attention_packed_backward", .kind = OpKind::attention_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs a = attention_packed_qkv(in);
                 const Value dout = in.activation("dout", Shape{2, 5, kHeads * kHeadDim});
                 const graph::NodeAttrs attrs = in.b.graph().nodes().back().attrs;
                 return {ops::attention_packed_backward(in.b, dout, a[2], a[0], a[1], attrs, "backward")};
               }, .bf16_tolerance = 3e-2});
  c.push_back({.label = "swiglu", .kind = OpKind::swiglu, .build = [](SweepInputs& in) -> Outputs {
                 const Value gate = in.activation("gate", Shape{2, 3, 6}, -3, 3);
                 return {ops::swiglu(in.b, gate, in.activation("up", Shape{2, 3, 6}))};
               }, .gradient = true});
  c.push_back({.label = "swiglu_packed", .kind = OpKind::swiglu, .build = [](SweepInputs& in) -> Outputs {
                 return {ops::swiglu_packed(in.b, in.activation("gate_up", Shape{2, 3, 12}, -3, 3))};
               }, .gradient = true});
  c.push_back({.label = "swiglu_backward", .kind = OpKind::swiglu_backward, .build = [](SweepInputs& in) -> Outputs {
                 const Value dout = in.activation("dout", Shape{2, 3, 6});
                 const Value gate = in.activation("gate", Shape{2, 3, 6}, -3, 3);
                 return ops::swiglu_backward(in.b, dout, gate, in.activation("up", Shape{2, 3, 6}), "backward");
               }});
  c.push_back({.label = "swiglu_packed_backward", .kind = OpKind::swiglu_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Value dout = in.activation("dout", Shape{2, 3, 6});
                 const Value gate_up = in.activation("gate_up", Shape{2, 3, 12}, -3, 3);
                 return {ops::swiglu_packed_backward(in.b, dout, gate_up, "backward")};
               }});
  // 8 x 37 elements: the GPU's 16-byte vectors and a scalar tail.
  c.push_back({.label = "dropout", .kind = OpKind::dropout, .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{2, 4, 37});
                 return {ops::dropout(in.b, x, in.ids("key", Shape{2}, 1 << 30), 0.3, 5)};
               }, .gradient = true});
  c.push_back({.label = "take_rows", .kind = OpKind::take_rows, .build = [](SweepInputs& in) -> Outputs {
                 return {ops::take_rows(in.b, in.activation("x", Shape{2, 6, 5}), 2, 3)};
               }, .gradient = true});
  c.push_back({.label = "take_rows_first", .kind = OpKind::take_rows, .build = [](SweepInputs& in) -> Outputs {
                 return {ops::take_rows(in.b, in.activation("x", Shape{1, 4, 2, 3}), 0, 2)};
               }, .gradient = true});
  c.push_back({.label = "concat_rows", .kind = OpKind::concat_rows, .build = [](SweepInputs& in) -> Outputs {
                 const Value a = in.activation("a", Shape{2, 2, 5}), b = in.activation("b", Shape{2, 1, 5});
                 return {ops::concat_rows(in.b, {a, b, in.activation("c", Shape{2, 3, 5})})};
               }, .gradient = true});
  c.push_back({.label = "add", .kind = OpKind::add, .build = [](SweepInputs& in) -> Outputs {
                 const Value a = in.activation("a", Shape{2, 3, 5});
                 return {ops::add(in.b, a, in.activation("b", Shape{2, 3, 5}))};
               }, .gradient = true});
  c.push_back({.label = "cross_entropy", .kind = OpKind::cross_entropy, .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = softmax_loss(in);
                 return {l[0], l[1]};
               }, .gradient = true});
  c.push_back({.label = "cross_entropy_backward", .kind = OpKind::cross_entropy_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = softmax_loss(in);
                 const Value dloss = in.statistic("dloss", Shape{}, 0.5, 2);
                 return {ops::cross_entropy_backward(in.b, l[2], l[3], l[1], dloss, "backward")};
               }});
  c.push_back({.label = "cross_entropy_loss_gradient", .kind = OpKind::cross_entropy, .fused = Fused::loss_gradient,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = softmax_loss(in);
                 const Value dloss = ops::fill(in.b, "dloss", Shape{}, 0.75, in.b.info(l[0]).dtype);
                 return {l[0], l[1], ops::cross_entropy_backward(in.b, l[2], l[3], l[1], dloss, "backward")};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_loss_gradient(g).graph; },
               .same_bits = true});
  c.push_back({.label = "cross_entropy_weighted", .kind = OpKind::cross_entropy,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = weighted_softmax_loss(in);
                 return {l[0], l[1]};
               }, .gradient = true});
  c.push_back({.label = "cross_entropy_weighted_backward", .kind = OpKind::cross_entropy_backward,
               .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = weighted_softmax_loss(in);
                 const Value dloss = in.statistic("dloss", Shape{}, 0.5, 2);
                 return {ops::cross_entropy_backward(in.b, l[2], l[3], l[1], dloss, "backward", l[4])};
               }});
  c.push_back({.label = "cross_entropy_weighted_loss_gradient", .kind = OpKind::cross_entropy,
               .fused = Fused::loss_gradient, .build = [](SweepInputs& in) -> Outputs {
                 const Outputs l = weighted_softmax_loss(in);
                 const Value dloss = ops::fill(in.b, "dloss", Shape{}, 0.75, in.b.info(l[0]).dtype);
                 return {l[0], l[1], ops::cross_entropy_backward(in.b, l[2], l[3], l[1], dloss, "backward", l[4])};
               }, .fuse = [](const graph::Graph& g) { return graph::fuse_loss_gradient(g).graph; },
               .same_bits = true});
  for (bool weighted : {false, true}) {
    for (bool training : {false, true}) {
      c.push_back({.label = std::string("linear_cross_entropy") + (weighted ? "_weighted" : "") +
                            (training ? "_with_gradients" : ""),
                   .kind = OpKind::linear_cross_entropy,
                   .build = [weighted, training](SweepInputs& in) { return linear_loss_head(in, weighted, training); },
                   .fuse = chunk_linear_loss});
    }
  }
  c.push_back({.label = "cast", .kind = OpKind::cast, .build = [](SweepInputs& in) -> Outputs {
                 const Value x = in.activation("x", Shape{3, 5});
                 return {ops::cast(in.b, x, graph::accumulation_dtype(in.b.dtype()))};
               }, .gradient = true});
  return c;
}

}  // namespace spillway::testing
