// The predicted step replays the planned executor's streams: compute waits
// for a load its node reads and for a store before the stored value is
// freed; copies issued early enough hide under compute.
#include "plan/cost_model.h"

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/fuse_loss_gradient.h"
#include "graph/fuse_matmul_swiglu.h"
#include "ops/attention_op.h"
#include "ops/collective_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/fill_op.h"
#include "ops/matmul_op.h"
#include "ops/swiglu_op.h"

namespace spillway::plan {
namespace {

constexpr int64_t kRows = 32768;  // each matmul (1.6 ms) outlasts a weight's copy (1 ms)

// Three matmuls in a row, each reading its own weight from home.
struct Chain {
  graph::Graph g;
  std::vector<graph::Value> weights, outputs;
};

Chain chain() {
  Chain c;
  graph::Builder b(c.g, DType::f32);
  graph::Value x = b.input("x", Shape{kRows, 4096}, DType::f32);
  for (int i = 0; i < 3; ++i) {
    c.weights.push_back(b.parameter("w" + std::to_string(i), Shape{4096, 4096}));
    x = ops::matmul(b, x, c.weights.back(), false, false, "mm" + std::to_string(i));
    c.outputs.push_back(x);
  }
  c.g.mark_output(x);
  return c;
}

// Every weight loaded by the node `issue_ahead` nodes before the one that
// reads it (or by the first), freed after it.
Placement loads_ahead(const Chain& c, int issue_ahead) {
  Placement p;
  p.nodes.resize(c.g.nodes().size());
  p.resident.assign(c.g.values().size(), false);
  for (int i = 0; i < 3; ++i) {
    p.nodes[static_cast<size_t>(std::max(0, i - issue_ahead))].load.push_back(c.weights[static_cast<size_t>(i)]);
    p.nodes[static_cast<size_t>(i)].allocate.push_back(c.outputs[static_cast<size_t>(i)]);
    p.nodes[static_cast<size_t>(i)].drop.push_back(c.weights[static_cast<size_t>(i)]);
  }
  return p;
}

MachineRates rates() {
  MachineRates r = h100_rates();
  r.h2d_bytes = r.d2h_bytes = 64e9;  // a 64 MiB weight: about 1 ms
  return r;
}

TEST(PredictStep, ALoadIssuedAtItsNodeMakesComputeWait) {
  const Chain c = chain();
  const StepPrediction p = predict_step(c.g, loads_ahead(c, 0), rates());
  const double load = 4096.0 * 4096 * 4 / rates().h2d_bytes;
  EXPECT_NEAR(p.wait_seconds, 3 * load, 1e-12);
  EXPECT_NEAR(p.step_seconds, p.compute_seconds + 3 * load, 1e-12);
  EXPECT_NEAR(p.h2d_seconds, 3 * load, 1e-12);
}

TEST(PredictStep, LoadsIssuedANodeAheadHideUnderCompute) {
  const Chain c = chain();
  const StepPrediction p = predict_step(c.g, loads_ahead(c, 1), rates());
  const double load = 4096.0 * 4096 * 4 / rates().h2d_bytes;
  ASSERT_LT(load, p.node_seconds[0]);  // each matmul outlasts the next weight's copy
  // Only the first weight, which nothing runs before, is waited for.
  EXPECT_NEAR(p.wait_seconds, load, 1e-12);
  EXPECT_NEAR(p.step_seconds, p.compute_seconds + load, 1e-12);
}

TEST(PredictStep, FreeingAStoredValueWaitsForItsCopy) {
  const Chain c = chain();
  Placement p = loads_ahead(c, 1);
  // The first output goes home as soon as it is made and is freed right
  // after the next node: compute waits for the rest of the copy.
  p.nodes[0].store.push_back(c.outputs[0]);
  p.nodes[1].drop.push_back(c.outputs[0]);
  const MachineRates slow_store = [] {
    MachineRates r = rates();
    r.d2h_bytes = 4e9;  // a 512 MiB output in about 134 ms
    return r;
  }();
  const StepPrediction held = predict_step(c.g, p, slow_store);
  const double load = 4096.0 * 4096 * 4 / slow_store.h2d_bytes;
  const double store = static_cast<double>(kRows) * 4096 * 4 / slow_store.d2h_bytes;
  // Made at the end of node 0 (after the first load), freed after node 1.
  const double made = load + held.node_seconds[0];
  const double freed = made + held.node_seconds[1];
  EXPECT_NEAR(held.wait_seconds, load + (made + store - freed), 1e-12);
  EXPECT_NEAR(held.step_seconds, made + store + held.node_seconds[2], 1e-12);
  EXPECT_NEAR(held.d2h_seconds, store, 1e-12);
}

// The loss that writes its gradient too (graph/fuse_loss_gradient.h) reads
// the logits from memory once where the forward and backward nodes read them
// twice (its second pass over a row is meant to hit the L2): counting each
// operand once, the model predicts the two nodes' time less one read of them.
TEST(NodeCost, TheLossWithItsGradientReadsTheLogitsOnce) {
  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  const graph::Value logits = b.input("logits", Shape{4096, 128256}, DType::bf16);
  const graph::Value targets = b.input("targets", Shape{4096}, DType::i32);
  const graph::Value loss = ops::cross_entropy(b, logits, targets, "loss");
  b.set_backward(true);
  const graph::Value dloss = ops::fill(b, "loss.grad", Shape{}, 1.0, DType::f32);
  g.mark_output(ops::cross_entropy_backward(b, logits, targets, g.find("loss.lse"), dloss, "loss.backward"));
  g.mark_output(loss);
  const graph::Graph fused = graph::fuse_loss_gradient(g).graph;
  ASSERT_EQ(fused.nodes().size(), 1u);

  const MachineRates r = h100_rates();
  double separate = 0;
  for (const auto& n : g.nodes()) separate += node_cost(g, n, r).seconds;
  const double logits_read = static_cast<double>(g.value(logits).bytes()) / r.memory_bytes;
  EXPECT_NEAR(node_cost(fused, fused.nodes()[0], r).seconds, separate - logits_read, 1e-3 * logits_read);
}

// A product with SwiGLU's backward folded in (graph/fuse_matmul_swiglu.h)
// writes d(gate|up), twice the product's size: its FLOPs are still the
// product's, counted from the operands, not from the output.
TEST(NodeCost, AProductWithSwigluBackwardCountsTheProductsFlops) {
  constexpr int64_t kTokens = 4096, kDim = 2048, kFfn = 8192;
  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  const graph::Value dy = b.input("dy", Shape{kTokens, kDim}, DType::bf16);
  const graph::Value w = b.parameter("w_down", Shape{kDim, kFfn});
  const graph::Value gate_up = b.input("gate_up", Shape{kTokens, 2 * kFfn}, DType::bf16);
  const graph::Value dout = ops::matmul(b, dy, w, false, false, "down.dx");
  g.mark_output(ops::swiglu_packed_backward(b, dout, gate_up, "swiglu.backward"));
  const graph::Graph fused = graph::fuse_matmul_swiglu(g).graph;
  ASSERT_EQ(fused.nodes().size(), 1u);
  ASSERT_EQ(fused.nodes()[0].attrs.fused, graph::Fused::swiglu_backward);

  const MachineRates r = h100_rates();
  const double product_flops = 2.0 * kTokens * kFfn * kDim;
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes()[0], r).flops, product_flops);
  EXPECT_DOUBLE_EQ(node_cost(fused, fused.nodes()[0], r).flops, product_flops);
}

// Context parallelism's chunk of queries at an offset sees every key
// before it and half its own square: the last of four chunks does seven
// times the first's work.
TEST(NodeCost, AttentionFromAQueryOffsetCountsTheKeysBeforeIt) {
  constexpr int64_t kChunk = 1024, kWidth = 4096;
  auto cost_of_chunk = [&](int64_t rank) {
    graph::Graph g;
    graph::Builder b(g, DType::bf16);
    const graph::Value q = b.input("q", Shape{1, kChunk, kWidth}, DType::bf16);
    const graph::Value k = b.input("k", Shape{1, 4 * kChunk, kWidth / 4}, DType::bf16);
    const graph::Value v = b.input("v", Shape{1, 4 * kChunk, kWidth / 4}, DType::bf16);
    ops::attention(b, q, k, v, 32, 8, 0.1, "attention", {}, rank * kChunk);
    return node_cost(g, g.nodes().back(), h100_rates()).flops;
  };
  EXPECT_DOUBLE_EQ(cost_of_chunk(0), 2.0 * 2.0 * kChunk * kChunk * kWidth / 2.0);
  EXPECT_DOUBLE_EQ(cost_of_chunk(3), 7.0 * cost_of_chunk(0));
}

// A collective takes the time the bytes it sends over the links take (a
// ring's: (N - 1)/N of the whole per pass, two for an all-reduce).
TEST(NodeCost, CollectivesArePricedAtTheLinkRate) {
  constexpr int64_t kTokens = 8192, kDim = 4096;
  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  const graph::Value piece = b.input("piece", Shape{kTokens / 4, kDim}, DType::bf16);
  const graph::Value whole = ops::all_gather(b, piece, 3, 4, false, Shape{kTokens, kDim}, "gather");
  g.mark_output(ops::all_reduce(b, whole, 3, 4, "sum"));
  const MachineRates r = h100_rates();
  const double bytes = 2.0 * kTokens * kDim;
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes()[0], r).seconds, 0.75 * bytes / r.collective_bytes);
  EXPECT_DOUBLE_EQ(node_cost(g, g.nodes()[1], r).seconds, 1.5 * bytes / r.collective_bytes);
}

}  // namespace
}  // namespace spillway::plan
