// Folding the residual-gradient adds into rmsnorm_backward on a real LLaMA
// step: exactly the two residual-stream sums of each layer go, every value
// keeps its id, the step computes the same loss and gradients, and it needs
// no more memory. Then the rules that keep an add where it is.
#include "graph/fuse_rmsnorm_add.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/fuse_matmul_add.h"
#include "graph/liveness.h"
#include "model/llama_graph.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::graph {
namespace {

model::LlamaConfig tiny(bool tied) { return testing::llama_config(13, 16, 24, 3, 4, 2, tied); }

struct Step {
  Graph graph;
  model::LlamaGraph model;
  Gradients grads;
};

void build(Step& s, const model::LlamaConfig& c) {
  Builder b(s.graph, DType::f64);
  s.model = model::build_llama(b, c, 2, 8);
  s.graph.mark_output(s.model.loss);
  s.grads = append_backward(b, s.model.loss, s.model.parameters);
}

// Loss, then every parameter's gradient, flattened.
std::vector<double> run(const Graph& g, const Step& s, const model::LlamaConfig& c) {
  const std::vector<int32_t> tokens = testing::random_tokens(16, 3, static_cast<int32_t>(c.vocab_size));
  const std::vector<int32_t> targets = testing::random_tokens(16, 4, static_cast<int32_t>(c.vocab_size));
  std::vector<std::vector<double>> params;
  for (size_t i = 0; i < s.model.parameters.size(); ++i) {
    params.push_back(testing::random_vector<double>(g.value(s.model.parameters[i]).shape.numel(), 70 + i, -0.5, 0.5));
  }
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  std::vector<int32_t> tok = tokens, tgt = targets;
  e.bind(s.model.tokens, std::span<int32_t>(tok));
  e.bind(s.model.targets, std::span<int32_t>(tgt));
  for (size_t i = 0; i < params.size(); ++i) e.bind(s.model.parameters[i], std::span<double>(params[i]));
  e.run();
  std::vector<double> out{e.read<double>(s.model.loss)[0]};
  for (Value p : s.model.parameters) {
    for (double x : e.read<double>(s.grads[p])) out.push_back(x);
  }
  return out;
}

int count(const Graph& g, OpKind kind) {
  int n = 0;
  for (const Node& node : g.nodes()) n += node.kind == kind;
  return n;
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
  Step s;
  build(s, c);
  FusedGraph f = fuse_rmsnorm_add(s.graph);
  const int layers = static_cast<int>(c.num_hidden_layers);
  EXPECT_EQ(f.adds_folded, 2 * layers);
  EXPECT_EQ(count(f.graph, OpKind::add), count(s.graph, OpKind::add) - 2 * layers);
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

  // Every value keeps its id, name, shape and dtype; the outputs stay.
  ASSERT_EQ(f.graph.values().size(), s.graph.values().size());
  for (size_t v = 0; v < s.graph.values().size(); ++v) {
    const ValueInfo& a = s.graph.values()[v];
    const ValueInfo& b = f.graph.values()[v];
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.shape, a.shape) << a.name;
    EXPECT_EQ(b.dtype, a.dtype) << a.name;
    EXPECT_EQ(b.accumulated, a.accumulated) << a.name;
  }
  EXPECT_EQ(f.graph.outputs(), s.graph.outputs());

  // Valid order; a value left without its producer (an old dx) is read by nobody.
  for (size_t i = 0; i < f.graph.nodes().size(); ++i) {
    for (Value in : f.graph.nodes()[i].inputs) {
      const ValueInfo& info = f.graph.value(in);
      if (info.role != ValueRole::computed) continue;
      ASSERT_GE(info.producer, 0) << info.name << " is read but no longer made";
      EXPECT_LT(info.producer, static_cast<int32_t>(i)) << info.name;
    }
  }
  int orphans = 0;
  for (const ValueInfo& v : f.graph.values()) orphans += v.role == ValueRole::computed && v.producer < 0;
  EXPECT_EQ(orphans, f.adds_folded);

  const std::vector<double> want = run(s.graph, s, c);
  const std::vector<double> got = run(f.graph, s, c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;

  auto cost = [](uint64_t n) { return MemorySpace::accounted_bytes(n); };
  EXPECT_LE(analyze_liveness(f.graph, cost).peak_bytes, analyze_liveness(s.graph, cost).peak_bytes);
}

// After the matmul epilogue fusion (fuse_step's order) the same two adds a
// layer fold, and the matmuls keep every add they had taken.
TEST_P(FuseRmsnormAdd, FoldsTheSameAddsAfterTheMatmulFusion) {
  const auto c = tiny(GetParam());
  Step s;
  build(s, c);
  FusedGraph m = fuse_matmul_add(s.graph);
  FusedGraph f = fuse_rmsnorm_add(m.graph);
  EXPECT_EQ(f.adds_folded, 2 * static_cast<int>(c.num_hidden_layers));
  EXPECT_EQ(count(f.graph, OpKind::add), count(s.graph, OpKind::add) - m.adds_folded - f.adds_folded);
  int epilogues = 0;
  for (const Node& n : f.graph.nodes()) epilogues += n.kind == OpKind::matmul && n.inputs.size() == 3;
  EXPECT_EQ(epilogues, m.adds_folded);

  const std::vector<double> want = run(s.graph, s, c);
  const std::vector<double> got = run(f.graph, s, c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
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
  b.rmsnorm(n.h, w, 1e-5, "norm");
  const Value rstd = b.graph().nodes().back().outputs[1];
  n.dy = b.input("dy", Shape{4, 8}, DType::f32);
  auto d = b.rmsnorm_backward(n.dy, n.h, w, rstd, "norm.backward");
  n.dx = d[0];
  n.dweight = d[1];
  return n;
}

TEST(FuseRmsnormAddRules, FoldsWhenDweightAccumulates) {
  Graph g;
  Builder b(g, DType::f32);
  Value skip = b.input("skip", Shape{4, 8}, DType::f32);
  Norm n = norm_backward(b);
  Value sum = b.add(skip, n.dx, "sum");
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
  Value s1 = b.add(skip, n.dx, "s1");
  Value s2 = b.add(s1, n.dx, "s2");  // dx read a second time: it must stay
  g.mark_output(s2);
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

TEST(FuseRmsnormAddRules, LeavesADxThatIsAGraphOutput) {
  Graph g;
  Builder b(g, DType::f32);
  Value skip = b.input("skip", Shape{4, 8}, DType::f32);
  Norm n = norm_backward(b);
  g.mark_output(b.add(skip, n.dx, "sum"));
  g.mark_output(n.dx);
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

// The fused node runs where the norm's backward ran, before the addend exists.
TEST(FuseRmsnormAddRules, LeavesAnAddWhoseOtherOperandIsMadeLater) {
  Graph g;
  Builder b(g, DType::f32);
  Norm n = norm_backward(b);
  Value later = b.add(n.dy, n.h, "later");
  g.mark_output(b.add(later, n.dx, "sum"));
  EXPECT_EQ(fuse_rmsnorm_add(g).adds_folded, 0);
}

}  // namespace
}  // namespace spillway::graph
