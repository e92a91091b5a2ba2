// Folding adds into matmuls on a real LLaMA step: the same loss and
// gradients (up to the rounding of one fewer intermediate), five adds fewer
// per layer, nothing reads a folded matmul's old output, and no more memory.
#include "graph/fuse_matmul_add.h"

#include <gtest/gtest.h>

#include <cmath>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/liveness.h"
#include "model/llama_graph.h"
#include "testing/numeric.h"
#include "testing/llama.h"

namespace spillway::graph {
namespace {

model::LlamaConfig tiny(bool tied) {
  return testing::llama_config(13, 16, 24, 3, 4, 2, tied);
}

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
  std::vector<int32_t> tokens, targets;
  for (int i = 0; i < 16; ++i) {
    tokens.push_back(static_cast<int32_t>((i * 7 + 3) % c.vocab_size));
    targets.push_back(static_cast<int32_t>((i * 5 + 1) % c.vocab_size));
  }
  std::vector<std::vector<double>> params;
  for (size_t i = 0; i < s.model.parameters.size(); ++i) {
    params.push_back(testing::random_vector<double>(g.value(s.model.parameters[i]).shape.numel(), 50 + i, -0.5, 0.5));
  }
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  e.bind(s.model.tokens, std::span<int32_t>(tokens));
  e.bind(s.model.targets, std::span<int32_t>(targets));
  for (size_t i = 0; i < params.size(); ++i) e.bind(s.model.parameters[i], std::span<double>(params[i]));
  e.run();
  EXPECT_EQ(space->peak(), e.liveness().peak_bytes);
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

class FuseMatmulAdd : public ::testing::TestWithParam<bool> {};

TEST_P(FuseMatmulAdd, SameStepWithFiveAddsFewerPerLayer) {
  const auto c = tiny(GetParam());
  Step s;
  build(s, c);
  FusedGraph f = fuse_matmul_add(s.graph);
  EXPECT_GE(f.adds_folded, 5 * c.num_hidden_layers);
  EXPECT_EQ(count(f.graph, OpKind::add), count(s.graph, OpKind::add) - f.adds_folded);
  EXPECT_EQ(f.graph.nodes().size(), s.graph.nodes().size() - static_cast<size_t>(f.adds_folded));
  EXPECT_EQ(f.graph.values().size(), s.graph.values().size());
  EXPECT_EQ(f.graph.outputs(), s.graph.outputs());

  // Valid order; a value left without its producer is read by nobody.
  int orphans = 0;
  for (size_t i = 0; i < f.graph.nodes().size(); ++i) {
    for (Value in : f.graph.nodes()[i].inputs) {
      const ValueInfo& info = f.graph.value(in);
      if (info.role != ValueRole::computed) continue;
      ASSERT_GE(info.producer, 0) << info.name << " is read but no longer made";
      EXPECT_LT(info.producer, static_cast<int32_t>(i)) << info.name;
    }
  }
  for (const ValueInfo& v : f.graph.values()) orphans += v.role == ValueRole::computed && v.producer < 0;
  EXPECT_EQ(orphans, f.adds_folded);

  const std::vector<double> want = run(s.graph, s, c);
  const std::vector<double> got = run(f.graph, s, c);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;

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
  Value y = b.matmul(a, w, false, false, "mm");
  Value s1 = b.add(x, y, "s1");
  Value s2 = b.add(s1, y, "s2");  // y read a second time: it must stay
  g.mark_output(s2);
  FusedGraph f = fuse_matmul_add(g);
  EXPECT_EQ(f.adds_folded, 0);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size());
}

}  // namespace
}  // namespace spillway::graph
