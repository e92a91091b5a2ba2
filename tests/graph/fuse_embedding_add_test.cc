// Folding a tied table's gradient sum into embedding_backward on a real LLaMA
// step: the tied step loses exactly that add and the untied one nothing,
// every value keeps its id, and the step's loss and gradients stay the same
// bit for bit (the fused kernel rounds as the add did), also when the
// gradients accumulate into caller memory over two micro-batches. Then the
// rules that keep an add where it is.
#include "graph/fuse_embedding_add.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/fuse_step.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/embedding_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"
#include "testing/numeric.h"

namespace spillway::graph {
namespace {

// A vocabulary larger than a micro-batch's tokens, so that some rows of the
// table get only lm_head's part of the gradient.
testing::LlamaStep<float> build_step(bool tied, GradientOutput output) {
  return testing::build_llama_step<float>(testing::llama_config(40, 16, 24, 2, 4, 2, tied), 2, 8, output);
}

// The table the embedding node reads.
Value embedding_table(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.kind == OpKind::embedding) return n.inputs[0];
  }
  ADD_FAILURE() << "no embedding node";
  return Value{};
}

const Node* only_embedding_backward(const Graph& g) {
  const Node* found = nullptr;
  for (const Node& n : g.nodes()) {
    if (n.kind != OpKind::embedding_backward) continue;
    EXPECT_EQ(found, nullptr) << "two embedding_backward nodes";
    found = &n;
  }
  EXPECT_NE(found, nullptr);
  return found;
}

uint64_t allocator_cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

class FuseEmbeddingAdd : public ::testing::TestWithParam<std::tuple<bool, GradientOutput>> {};

TEST_P(FuseEmbeddingAdd, FoldsTheTiedTablesGradientSumAndKeepsTheStep) {
  const auto [tied, output] = GetParam();
  const auto s = build_step(tied, output);
  const Graph& g = s.graph;
  FusedGraph f = fuse_embedding_add(g);
  EXPECT_EQ(f.adds_folded, tied ? 1 : 0);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::add), testing::count_nodes(g, OpKind::add) - f.adds_folded);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size() - static_cast<size_t>(f.adds_folded));

  const Value table = embedding_table(g);
  const Value grad = s.grads[table];
  const Node* eb = only_embedding_backward(f.graph);
  ASSERT_NE(eb, nullptr);
  if (tied) {
    // It writes the table's gradient, which the add wrote, adding lm_head's
    // part (a matmul's output) to its own; accumulating into the caller's
    // buffer where the add did.
    ASSERT_EQ(eb->inputs.size(), 3u);
    EXPECT_EQ(eb->outputs[0], grad);
    EXPECT_TRUE(f.graph.value(grad).name.ends_with(".grad_sum")) << f.graph.value(grad).name;
    const ValueInfo& base = f.graph.value(eb->inputs[2]);
    ASSERT_GE(base.producer, 0);
    EXPECT_EQ(f.graph.nodes()[static_cast<size_t>(base.producer)].kind, OpKind::matmul) << base.name;
    EXPECT_EQ(eb->attrs.accumulate, output == GradientOutput::accumulated);
    EXPECT_EQ(f.graph.value(grad).accumulated, output == GradientOutput::accumulated);
  } else {
    EXPECT_EQ(eb->inputs.size(), 2u);
  }

  ASSERT_NO_FATAL_FAILURE(testing::expect_values_kept(g, f.graph));

  // Valid order; a value left without its producer (the old scatter) is read by nobody.
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  EXPECT_EQ(testing::orphans(f.graph), f.adds_folded);

  EXPECT_LE(analyze_liveness(f.graph, allocator_cost).peak_bytes, analyze_liveness(g, allocator_cost).peak_bytes);

  // Accumulated: two micro-batches into caller buffers that start out
  // holding an earlier sum.
  const testing::LlamaStepInputs inputs = {.token_seed = 10,
                                           .target_seed = 11,
                                           .parameter_seed = 60,
                                           .micro_batches = output == GradientOutput::accumulated ? 2 : 1,
                                           .accumulated_seed = 80};
  testing::expect_same_bits(testing::run_llama_step(f.graph, s, inputs), testing::run_llama_step(g, s, inputs), s);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, FuseEmbeddingAdd,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(GradientOutput::fresh, GradientOutput::accumulated)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "tied_" : "untied_") +
                                  (std::get<1>(info.param) == GradientOutput::fresh ? "fresh" : "accumulated");
                         });

// The training step as the engines build it (accumulated gradients, every
// fusion): the tied table's gradient sum is folded after the other passes
// have run, and folding again finds nothing.
TEST(FuseEmbeddingAddInFuseStep, TheTiedTrainingStepFoldsItsGradientSum) {
  const auto s = build_step(true, GradientOutput::accumulated);
  const Graph fused = fuse_step(s.graph);
  const Node* eb = only_embedding_backward(fused);
  ASSERT_NE(eb, nullptr);
  ASSERT_EQ(eb->inputs.size(), 3u);
  EXPECT_EQ(eb->outputs[0], s.grads[embedding_table(s.graph)]);
  EXPECT_TRUE(eb->attrs.accumulate);
  EXPECT_EQ(fuse_embedding_add(fused).adds_folded, 0);
}

// An embedding_backward over a [9, 4] table, with 6 tokens that leave rows
// 1, 3, 5, 6 and 8 unused, and a base made before it.
struct Small {
  Graph g;
  Value ids, dout, base, d;
  Small() {
    Builder b(g, DType::f32);
    ids = b.input("ids", Shape{6}, DType::i32);
    dout = b.input("dout", Shape{6, 4}, DType::f32);
    base = b.input("base", Shape{9, 4}, DType::f32);
    d = ops::embedding_backward(b, ids, dout, 9, "eb");
  }
};

// The accumulating add a tied table's gradient ends in folds, on either
// side, and the fused node rounds as the add did: base + 0 in the unused
// rows (the base has -0s there, as does the running sum).
TEST(FuseEmbeddingAddRules, FoldsAnAccumulatingAddOnEitherSideBitForBit) {
  for (bool scatter_first : {false, true}) {
    Small s;
    Builder b(s.g, DType::f32);
    const Value sum = scatter_first ? ops::add(b, s.d, s.base, "sum") : ops::add(b, s.base, s.d, "sum");
    s.g.mark_accumulated(sum);
    FusedGraph f = fuse_embedding_add(s.g);
    ASSERT_EQ(f.adds_folded, 1);
    ASSERT_EQ(f.graph.nodes().size(), 1u);
    const Node& fused = f.graph.nodes()[0];
    EXPECT_EQ(fused.kind, OpKind::embedding_backward);
    EXPECT_EQ(fused.inputs, (std::vector<Value>{s.ids, s.dout, s.base}));
    EXPECT_EQ(fused.outputs, std::vector<Value>{sum});
    EXPECT_TRUE(fused.attrs.accumulate);
    EXPECT_TRUE(f.graph.value(sum).accumulated);

    auto run = [&](const Graph& g) {
      std::vector<int32_t> ids = {0, 2, 4, 2, 7, 0};
      std::vector<float> dout = testing::random_vector<float>(24, 5);
      std::vector<float> base = testing::with_negative_zeros<float>(36, 6);
      std::vector<float> acc = testing::with_negative_zeros<float>(36, 7);
      auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
      exec::CpuExecutor e(g, *space);
      e.bind(s.ids, std::span<int32_t>(ids));
      e.bind(s.dout, std::span<float>(dout));
      e.bind(s.base, std::span<float>(base));
      e.bind(sum, std::span<float>(acc));
      e.run();
      e.run();
      return testing::bytes_of<float>(acc);
    };
    EXPECT_EQ(run(f.graph), run(s.g)) << (scatter_first ? "add(scatter, base)" : "add(base, scatter)");
  }
}

TEST(FuseEmbeddingAddRules, LeavesAnOutputThatIsReadTwice) {
  Small s;
  Builder b(s.g, DType::f32);
  const Value s1 = ops::add(b, s.base, s.d, "s1");
  s.g.mark_output(ops::add(b, s1, s.d, "s2"));  // d read a second time: it must stay
  EXPECT_EQ(fuse_embedding_add(s.g).adds_folded, 0);
}

TEST(FuseEmbeddingAddRules, LeavesAnOutputThatIsAGraphOutput) {
  Small s;
  Builder b(s.g, DType::f32);
  s.g.mark_output(ops::add(b, s.base, s.d, "sum"));
  s.g.mark_output(s.d);
  EXPECT_EQ(fuse_embedding_add(s.g).adds_folded, 0);
}

// The fused node runs where the embedding_backward ran, before the base exists.
TEST(FuseEmbeddingAddRules, LeavesAnAddWhoseOtherOperandIsMadeLater) {
  Small s;
  Builder b(s.g, DType::f32);
  const Value later = ops::add(b, s.base, s.base, "later");
  s.g.mark_output(ops::add(b, later, s.d, "sum"));
  EXPECT_EQ(fuse_embedding_add(s.g).adds_folded, 0);
}

// A fused node's output added to something else again keeps that add: the
// node takes one base.
TEST(FuseEmbeddingAddRules, TakesOneBaseOnly) {
  Small s;
  Builder b(s.g, DType::f32);
  const Value other = b.input("other", Shape{9, 4}, DType::f32);
  const Value s1 = ops::add(b, s.base, s.d, "s1");
  s.g.mark_output(ops::add(b, other, s1, "s2"));
  FusedGraph once = fuse_embedding_add(s.g);
  ASSERT_EQ(once.adds_folded, 1);
  EXPECT_EQ(fuse_embedding_add(once.graph).adds_folded, 0);
}

}  // namespace
}  // namespace spillway::graph
