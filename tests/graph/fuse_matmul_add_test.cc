// Folding adds into matmuls on a real LLaMA step: the same loss and
// gradients (up to the rounding of one fewer intermediate), five adds fewer
// per layer, nothing reads a folded matmul's old output, and no more memory.
#include "graph/fuse_matmul_add.h"

#include <gtest/gtest.h>

#include "device/memory_space.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/matmul_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"

namespace spillway::graph {
namespace {

model::LlamaConfig tiny(bool tied) {
  return testing::llama_config(13, 16, 24, 3, 4, 2, tied);
}

// The same loss and gradients up to the rounding of the intermediates the
// fusion drops.
void expect_same_step(const Graph& got, const Graph& want, const testing::LlamaStep<double>& s) {
  const testing::LlamaStepInputs inputs = {.token_seed = 1, .target_seed = 2, .parameter_seed = 50};
  testing::expect_close(testing::run_llama_step(got, s, inputs), testing::run_llama_step(want, s, inputs), s, 1e-12);
}

class FuseMatmulAdd : public ::testing::TestWithParam<bool> {};

TEST_P(FuseMatmulAdd, SameStepWithFiveAddsFewerPerLayer) {
  const auto c = tiny(GetParam());
  const auto s = testing::build_llama_step<double>(c, 2, 8);
  FusedGraph f = fuse_matmul_add(s.graph);
  EXPECT_GE(f.adds_folded, 5 * c.num_hidden_layers);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::add), testing::count_nodes(s.graph, OpKind::add) - f.adds_folded);
  EXPECT_EQ(f.graph.nodes().size(), s.graph.nodes().size() - static_cast<size_t>(f.adds_folded));
  EXPECT_EQ(f.graph.values().size(), s.graph.values().size());
  EXPECT_EQ(f.graph.outputs(), s.graph.outputs());

  // Valid order; a value left without its producer is read by nobody.
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  EXPECT_EQ(testing::orphans(f.graph), f.adds_folded);

  expect_same_step(f.graph, s.graph, s);

  auto cost = [](uint64_t n) { return MemorySpace::accounted_bytes(n); };
  EXPECT_LE(analyze_liveness(f.graph, cost).peak_bytes, analyze_liveness(s.graph, cost).peak_bytes);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, FuseMatmulAdd, ::testing::Bool());

TEST(FuseMatmulAddRules, LeavesAMatmulWhoseOutputIsReadTwice) {
  Graph g;
  Builder b(g, DType::f32);
  Value a = b.input("a", Shape{4, 8}, DType::f32);
  Value w = b.parameter("w", Shape{8, 8});
  Value x = b.input("x", Shape{4, 8}, DType::f32);
  Value y = ops::matmul(b, a, w, false, false, "mm");
  Value s1 = ops::add(b, x, y, "s1");
  Value s2 = ops::add(b, s1, y, "s2");  // y read a second time: it must stay
  g.mark_output(s2);
  FusedGraph f = fuse_matmul_add(g);
  EXPECT_EQ(f.adds_folded, 0);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size());
}

}  // namespace
}  // namespace spillway::graph
