// Folding the loss's backward into its forward on a real LLaMA step: exactly
// one fusion, the same loss and gradients bit for bit (the CPU's fused pass
// does the separate passes' arithmetic), the logits last read by the loss,
// no more memory, and recomputation keeping the gradient the loss makes.
#include "graph/fuse_loss_gradient.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/fuse_step.h"
#include "graph/liveness.h"
#include "graph/recompute.h"
#include "ops/add_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/fill_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"
#include "testing/numeric.h"

namespace spillway::graph {
namespace {

testing::LlamaStep<float> build_step(bool tied, GradientOutput output = GradientOutput::fresh) {
  return testing::build_llama_step<float>(testing::llama_config(13, 16, 24, 2, 4, 2, tied), 2, 7, output);
}

// One target is -100, a row that does not count.
const testing::LlamaStepInputs kInputs = {
    .token_seed = 1, .target_seed = 2, .parameter_seed = 40, .ignored_target = 3};

void expect_same_step(const Graph& got, const Graph& want, const testing::LlamaStep<float>& s) {
  testing::expect_same_bits(testing::run_llama_step(got, s, kInputs), testing::run_llama_step(want, s, kInputs), s);
}

// The index of the only cross_entropy node.
int32_t loss_node(const Graph& g) {
  int32_t at = -1;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].kind != OpKind::cross_entropy) continue;
    EXPECT_EQ(at, -1) << "two cross_entropy nodes";
    at = static_cast<int32_t>(i);
  }
  EXPECT_GE(at, 0);
  return at;
}

uint64_t allocator_cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

class FuseLossGradient : public ::testing::TestWithParam<bool> {};

TEST_P(FuseLossGradient, OneFusionGivesTheSameStepBitForBit) {
  const auto s = build_step(GetParam());
  const Graph& g = s.graph;
  ASSERT_EQ(testing::count_nodes(g, OpKind::cross_entropy_backward), 1);
  Value dlogits;
  for (const Node& n : g.nodes()) {
    if (n.kind == OpKind::cross_entropy_backward) dlogits = n.outputs[0];
  }

  LossGradientFused f = fuse_loss_gradient(g);
  EXPECT_EQ(f.fused, 1);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::cross_entropy_backward), 0);
  // The backward node and the seed's fill are gone; every value keeps its id.
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size() - 2);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::fill), testing::count_nodes(g, OpKind::fill) - 1);
  EXPECT_EQ(f.graph.values().size(), g.values().size());
  EXPECT_EQ(f.graph.outputs(), g.outputs());

  // The loss, where it was, now also writes dlogits, and is still a forward node.
  const int32_t at = loss_node(f.graph);
  EXPECT_EQ(at, loss_node(g));
  const Node& loss = f.graph.nodes()[static_cast<size_t>(at)];
  ASSERT_EQ(loss.outputs.size(), 3u);
  EXPECT_EQ(loss.outputs[0], s.model.loss);
  EXPECT_EQ(loss.outputs[2], dlogits);
  EXPECT_EQ(loss.attrs.dloss, 1.0);
  EXPECT_FALSE(loss.backward);

  // Valid order; the one value left without a producer (the seed) is read by nobody.
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  EXPECT_EQ(testing::orphans(f.graph), 1);

  // The logits die at the loss, and the peak does not grow.
  const Liveness before = analyze_liveness(g, allocator_cost);
  const Liveness after = analyze_liveness(f.graph, allocator_cost);
  EXPECT_GT(before.of[static_cast<size_t>(s.model.logits.id)].last_use, at);
  EXPECT_EQ(after.of[static_cast<size_t>(s.model.logits.id)].last_use, at);
  EXPECT_LE(after.peak_bytes, before.peak_bytes);
  // ... and dlogits is written over them (graph::in_place_input), which the
  // run below checks gives the same bits.
  EXPECT_EQ(after.of[static_cast<size_t>(dlogits.id)].takes_over, s.model.logits.id);

  expect_same_step(f.graph, g, s);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, FuseLossGradient, ::testing::Bool());

// The training step as the engines build it (gradients accumulated into
// caller memory, every fusion): the loss is folded once, and folding again
// finds nothing.
TEST(FuseLossGradientInFuseStep, TheTrainingStepGetsExactlyOneFusion) {
  const auto s = build_step(false, GradientOutput::accumulated);
  const Graph fused = fuse_step(s.graph);
  EXPECT_EQ(testing::count_nodes(fused, OpKind::cross_entropy_backward), 0);
  EXPECT_EQ(fused.nodes()[static_cast<size_t>(loss_node(fused))].outputs.size(), 3u);
  EXPECT_EQ(fuse_loss_gradient(fused).fused, 0);
}

// Recomputation of a fused step: the gradient the loss made is a forward
// value made outside the layers, which every policy keeps, so the loss is
// never run again and the logits still die at it; and the step's results
// stay bit for bit the same.
class FuseLossGradientRecompute : public ::testing::TestWithParam<std::tuple<bool, RecomputePolicy>> {};

TEST_P(FuseLossGradientRecompute, KeepsTheLossGradientAndTheResults) {
  auto [tied, policy] = GetParam();
  const auto s = build_step(tied);
  const Graph fused = fuse_loss_gradient(s.graph).graph;
  const Recomputed r = recompute(fused, policy);
  const int32_t at = loss_node(r.graph);
  for (const Node& n : r.graph.nodes()) {
    EXPECT_FALSE(n.recompute && n.kind == OpKind::cross_entropy) << n.name;
  }
  const Value logits = s.model.logits;
  EXPECT_EQ(analyze_liveness(r.graph, allocator_cost).of[static_cast<size_t>(logits.id)].last_use, at);
  expect_same_step(r.graph, fused, s);
}

INSTANTIATE_TEST_SUITE_P(Policies, FuseLossGradientRecompute,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(RecomputePolicy::none, RecomputePolicy::layers,
                                                              RecomputePolicy::selective)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "tied_" : "untied_") +
                                  std::string(recompute_policy_name(std::get<1>(info.param)));
                         });

// A loss over [4, 5] logits by hand, its backward fed `dloss`.
struct SmallLoss {
  Graph g;
  Value logits, targets, loss, lse, dlogits;
  explicit SmallLoss(const std::function<Value(Builder&)>& dloss) {
    Builder b(g, DType::f32);
    logits = b.input("logits", Shape{4, 5}, DType::f32);
    targets = b.input("targets", Shape{4}, DType::i32);
    loss = ops::cross_entropy(b, logits, targets, "ce");
    lse = g.find("ce.lse");
    dlogits = ops::cross_entropy_backward(b, logits, targets, lse, dloss(b), "ce.backward");
    g.mark_output(loss);
    g.mark_output(dlogits);
  }
};

TEST(FuseLossGradientRules, LeavesABackwardWhoseDlossIsNotAConstantOfTheLossDtype) {
  SmallLoss fed([](Builder& b) { return b.input("dloss", Shape{}, DType::f32); });
  EXPECT_EQ(fuse_loss_gradient(fed.g).fused, 0);
  // An f64 fill rounds 0.1 differently from the f32 the kernel would use.
  SmallLoss wide([](Builder& b) { return ops::fill(b, "dloss", Shape{}, 0.1, DType::f64); });
  EXPECT_EQ(fuse_loss_gradient(wide.g).fused, 0);
}

// A seed read elsewhere too stays; the fused node takes its value, and the
// results are those of the unfused graph, bit for bit.
TEST(FuseLossGradientRules, KeepsASeedReadElsewhereAndTakesItsValue) {
  Value seed, twice;
  SmallLoss l([&](Builder& b) {
    seed = ops::fill(b, "dloss", Shape{}, 0.3, DType::f32);
    twice = ops::add(b, seed, seed, "twice");
    return seed;
  });
  l.g.mark_output(twice);
  LossGradientFused f = fuse_loss_gradient(l.g);
  ASSERT_EQ(f.fused, 1);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::fill), 1);
  EXPECT_EQ(f.graph.nodes()[static_cast<size_t>(loss_node(f.graph))].attrs.dloss, 0.3);

  auto run = [&](const Graph& g) {
    std::vector<float> logits = testing::random_vector<float>(20, 9, -3, 3);
    std::vector<int32_t> targets = {4, -100, 0, 2};
    auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
    exec::CpuExecutor e(g, *space);
    e.bind(l.logits, std::span<float>(logits));
    e.bind(l.targets, std::span<int32_t>(targets));
    e.run();
    std::vector<float> out;
    for (Value v : {l.loss, l.dlogits, twice}) {
      for (float x : e.read<float>(v)) out.push_back(x);
    }
    return out;
  };
  const std::vector<float> want = run(l.g), got = run(f.graph);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace spillway::graph
