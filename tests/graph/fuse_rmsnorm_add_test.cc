// Folding the residual-gradient adds into rmsnorm_backward on a real LLaMA
// step: exactly the two residual-stream sums of each layer go, every value
// keeps its id, the step computes the same loss and gradients, and it needs
// no more memory. Then the rules that keep an add where it is.
#include "graph/fuse_rmsnorm_add.h"

#include <gtest/gtest.h>

#include <string>

#include "device/memory_space.h"
#include "graph/builder.h"
#include "graph/fuse_matmul_add.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/rmsnorm_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"

namespace spillway::graph {
namespace {

model::LlamaConfig tiny(bool tied) { return testing::llama_config(13, 16, 24, 3, 4, 2, tied); }

// The same loss and gradients up to the rounding of the intermediates the
// fusion drops.
void expect_same_step(const Graph& got, const Graph& want, const testing::LlamaStep<double>& s) {
  const testing::LlamaStepInputs inputs = {.token_seed = 3, .target_seed = 4, .parameter_seed = 70};
  testing::expect_close(testing::run_llama_step(got, s, inputs), testing::run_llama_step(want, s, inputs), s, 1e-12);
}

// The layer norms' backward nodes, "model.layers.<i>.*", as against the
// final norm's ("model.norm.backward").
bool in_a_layer(const Node& n) { return n.name.starts_with("model.layers."); }

class FuseRmsnormAdd : public ::testing::TestWithParam<bool> {};

// Each layer's residual stream feeds its two norms and a skip connection, so
// autodiff sums the skip's gradient with each norm's dx: two adds a layer.
// The final norm's input feeds nothing else, so its dx has no add.
TEST_P(FuseRmsnormAdd, FoldsBothResidualSumsOfEveryLayerAndKeepsTheStep) {
  const auto c = tiny(GetParam());
  const auto s = testing::build_llama_step<double>(c, 2, 8);
  FusedGraph f = fuse_rmsnorm_add(s.graph);
  const int layers = static_cast<int>(c.num_hidden_layers);
  EXPECT_EQ(f.adds_folded, 2 * layers);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::add), testing::count_nodes(s.graph, OpKind::add) - 2 * layers);
  EXPECT_EQ(f.graph.nodes().size(), s.graph.nodes().size() - static_cast<size_t>(f.adds_folded));
  int layer_norms = 0;
  for (const Node& n : f.graph.nodes()) {
    if (n.kind != OpKind::rmsnorm_backward) continue;
    EXPECT_EQ(n.inputs.size(), in_a_layer(n) ? 5u : 4u) << n.name;
    layer_norms += in_a_layer(n);
    if (n.inputs.size() == 5) {
      // It writes what the add wrote: the residual stream's gradient.
      EXPECT_TRUE(f.graph.value(n.outputs[0]).name.ends_with(".grad_sum")) << n.name;
    }
  }
  EXPECT_EQ(layer_norms, 2 * layers);

  ASSERT_NO_FATAL_FAILURE(testing::expect_values_kept(s.graph, f.graph));

  // Valid order; a value left without its producer (an old dx) is read by nobody.
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  EXPECT_EQ(testing::orphans(f.graph), f.adds_folded);

  expect_same_step(f.graph, s.graph, s);

  auto cost = [](uint64_t n) { return MemorySpace::accounted_bytes(n); };
  EXPECT_LE(analyze_liveness(f.graph, cost).peak_bytes, analyze_liveness(s.graph, cost).peak_bytes);
}

// After the matmul epilogue fusion (fuse_step's order) the same two adds a
// layer fold, and the matmuls keep every add they had taken.
TEST_P(FuseRmsnormAdd, FoldsTheSameAddsAfterTheMatmulFusion) {
  const auto c = tiny(GetParam());
  const auto s = testing::build_llama_step<double>(c, 2, 8);
  FusedGraph m = fuse_matmul_add(s.graph);
  FusedGraph f = fuse_rmsnorm_add(m.graph);
  EXPECT_EQ(f.adds_folded, 2 * static_cast<int>(c.num_hidden_layers));
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::add),
            testing::count_nodes(s.graph, OpKind::add) - m.adds_folded - f.adds_folded);
  int epilogues = 0;
  for (const Node& n : f.graph.nodes()) epilogues += n.kind == OpKind::matmul && n.inputs.size() == 3;
  EXPECT_EQ(epilogues, m.adds_folded);

  expect_same_step(f.graph, s.graph, s);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, FuseRmsnormAdd, ::testing::Bool());

// A norm and its backward on h; returns the backward node's dx and dweight.
struct Norm {
  Value h, dy, dx, dweight;
};
Norm norm_backward(Builder& b) {
  Norm n;
  n.h = b.input("h", Shape{4, 8}, DType::f32);
  Value w = b.parameter("w", Shape{8});
  ops::rmsnorm(b, n.h, w, 1e-5, "norm");
  const Value rstd = b.graph().nodes().back().outputs[1];
  n.dy = b.input("dy", Shape{4, 8}, DType::f32);
  auto d = ops::rmsnorm_backward(b, n.dy, n.h, w, rstd, "norm.backward");
  n.dx = d[0];
  n.dweight = d[1];
  return n;
}

TEST(FuseRmsnormAddRules, FoldsWhenDweightAccumulates) {
  Graph g;
  Builder b(g, DType::f32);
  Value skip = b.input("skip", Shape{4, 8}, DType::f32);
  Norm n = norm_backward(b);
  Value sum = ops::add(b, skip, n.dx, "sum");
  g.mark_output(sum);
  g.mark_accumulated(n.dweight);  // about dweight only: dx can still take the add
  FusedGraph f = fuse_rmsnorm_add(g);
  ASSERT_EQ(f.adds_folded, 1);
  const Node& fused = f.graph.nodes().back();
  EXPECT_EQ(fused.kind, OpKind::rmsnorm_backward);
  EXPECT_EQ(fused.inputs.back(), skip);
  EXPECT_EQ(fused.outputs[0], sum);
  EXPECT_EQ(fused.outputs[1], n.dweight);
  EXPECT_TRUE(fused.attrs.accumulate);
}

TEST(FuseRmsnormAddRules, LeavesADxThatIsReadTwice) {
  Graph g;
  Builder b(g, DType::f32);
  Value skip = b.input("skip", Shape{4, 8}, DType::f32);
  Norm n = norm_backward(b);
  Value s1 = ops::add(b, skip, n.dx, "s1");
  Value s2 = ops::add(b, s1, n.dx, "s2");  // dx read a second time: it must stay
  g.mark_output(s2);
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

TEST(FuseRmsnormAddRules, LeavesADxThatIsAGraphOutput) {
  Graph g;
  Builder b(g, DType::f32);
  Value skip = b.input("skip", Shape{4, 8}, DType::f32);
  Norm n = norm_backward(b);
  g.mark_output(ops::add(b, skip, n.dx, "sum"));
  g.mark_output(n.dx);
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

// The fused node runs where the norm's backward ran, before the addend exists.
TEST(FuseRmsnormAddRules, LeavesAnAddWhoseOtherOperandIsMadeLater) {
  Graph g;
  Builder b(g, DType::f32);
  Norm n = norm_backward(b);
  Value later = ops::add(b, n.dy, n.h, "later");
  g.mark_output(ops::add(b, later, n.dx, "sum"));
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

}  // namespace
}  // namespace spillway::graph
