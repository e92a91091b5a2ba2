// Folding the MLP's SwiGLU gate into its gate|up projection, and its
// backward into down_proj's dX product, on a real LLaMA step with fused
// projections: one fusion of each per layer, the same loss and gradients
// bit for bit (the CPU runs the product, then the gate or its backward), no
// more memory; and the rules that keep other shapes apart.
#include "graph/fuse_matmul_swiglu.h"

#include <gtest/gtest.h>

#include <vector>

#include "device/cpu/cpu_device.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/fuse_step.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/matmul_op.h"
#include "ops/swiglu_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"

namespace spillway::graph {
namespace {

using testing::kFusionTestInputs;

uint64_t allocator_cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

int forward_swiglus(const Graph& g) {
  int count = 0;
  for (const Node& n : g.nodes()) count += n.kind == OpKind::swiglu && !n.backward;
  return count;
}

class FuseMatmulSwiglu : public ::testing::TestWithParam<GradientOutput> {};

TEST_P(FuseMatmulSwiglu, OneFusionPerLayerGivesTheSameStepBitForBit) {
  const auto s = testing::fusion_test_step(GetParam());
  const Graph g = fuse_step(s.graph);  // as the resident GPU engine runs it
  ASSERT_EQ(forward_swiglus(g), 2);

  ASSERT_EQ(testing::count_nodes(g, OpKind::swiglu_backward), 2);

  const SwigluFused f = fuse_matmul_swiglu(g);
  EXPECT_EQ(f.fused, 2);
  EXPECT_EQ(f.fused_backward, 2);
  EXPECT_EQ(forward_swiglus(f.graph), 0);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::swiglu_backward), 0);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size() - 4);
  EXPECT_EQ(f.graph.values().size(), g.values().size());
  EXPECT_EQ(f.graph.outputs(), g.outputs());
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  // Each layer's dout of SwiGLU is no longer made.
  EXPECT_EQ(testing::orphans(f.graph), testing::orphans(g) + 2);

  // Each gate|up projection writes its product and, second, the gate's
  // output, which the swiglu made before; the product keeps its readers
  // (the backward's swiglu_backward).
  int projections = 0;
  for (const Node& n : f.graph.nodes()) {
    if (n.kind != OpKind::matmul || n.outputs.size() != 2) continue;
    ++projections;
    EXPECT_NE(n.name.find("mlp.gate_up_proj"), std::string::npos) << n.name;
    EXPECT_EQ(g.value(n.outputs[1]).shape, g.value(n.outputs[0]).shape.with_last(g.value(n.outputs[0]).shape.last() / 2));
    const Node& old_gate = g.nodes()[static_cast<size_t>(g.value(n.outputs[1]).producer)];
    EXPECT_EQ(old_gate.kind, OpKind::swiglu);
    EXPECT_EQ(old_gate.inputs[0], n.outputs[0]);
  }
  EXPECT_EQ(projections, 2);

  // Each down_proj dX product takes the forward's gate|up and writes, instead
  // of dout, the d(gate|up) the swiglu_backward wrote from it.
  int backward_products = 0;
  for (const Node& n : f.graph.nodes()) {
    if (n.kind != OpKind::matmul || n.attrs.fused != Fused::swiglu_backward) continue;
    ++backward_products;
    ASSERT_EQ(n.inputs.size(), 3u);
    ASSERT_EQ(n.outputs.size(), 1u);
    const Node& old_backward = g.nodes()[static_cast<size_t>(g.value(n.outputs[0]).producer)];
    EXPECT_EQ(old_backward.kind, OpKind::swiglu_backward);
    EXPECT_EQ(old_backward.inputs[1], n.inputs[2]);
    const Node& old_product = g.nodes()[static_cast<size_t>(g.value(old_backward.inputs[0]).producer)];
    EXPECT_EQ(old_product.kind, OpKind::matmul);
    EXPECT_EQ(old_product.name, n.name);
    EXPECT_EQ(old_product.inputs, std::vector<Value>(n.inputs.begin(), n.inputs.begin() + 2));
    EXPECT_NE(n.name.find("down_proj"), std::string::npos) << n.name;
  }
  EXPECT_EQ(backward_products, 2);

  // The gate's output is born one node earlier, beside the product it is
  // made from, as it was at the swiglu, and dout is never made: the peak
  // does not grow.
  EXPECT_LE(analyze_liveness(f.graph, allocator_cost).peak_bytes, analyze_liveness(g, allocator_cost).peak_bytes);

  testing::expect_same_bits(testing::run_llama_step(f.graph, s, kFusionTestInputs),
                            testing::run_llama_step(g, s, kFusionTestInputs), s);
  // Folding again finds nothing.
  const SwigluFused again = fuse_matmul_swiglu(f.graph);
  EXPECT_EQ(again.fused, 0);
  EXPECT_EQ(again.fused_backward, 0);
}

// A dout that something else reads (here: the caller, as a graph output)
// must stay a value: that layer's backward is not folded, the other is.
TEST(FuseMatmulSwigluRules, KeepsADoutThatIsRead) {
  const auto s = testing::fusion_test_step(GradientOutput::fresh);
  Graph g = fuse_step(s.graph);
  const Node* backward = testing::first_node(g, OpKind::swiglu_backward);
  ASSERT_NE(backward, nullptr);
  g.mark_output(backward->inputs[0]);
  const SwigluFused f = fuse_matmul_swiglu(g);
  EXPECT_EQ(f.fused, 2);
  EXPECT_EQ(f.fused_backward, 1);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::swiglu_backward), 1);
  testing::expect_same_bits(testing::run_llama_step(f.graph, s, kFusionTestInputs),
                            testing::run_llama_step(g, s, kFusionTestInputs), s);
}

INSTANTIATE_TEST_SUITE_P(FreshAndAccumulated, FuseMatmulSwiglu,
                         ::testing::Values(GradientOutput::fresh, GradientOutput::accumulated));

// Separate gate and up projections (an unpacked swiglu) and a product that
// already adds an addend stay as they are.
TEST(FuseMatmulSwigluRules, LeavesWhatTheKernelCannotFold) {
  Graph g;
  Builder b(g, DType::f32);
  const Value x = b.input("x", Shape{4, 8}, DType::f32);
  const Value w = b.parameter("w", Shape{6, 8});
  const Value gate = ops::linear(b, x, w, "gate"), up = ops::linear(b, x, w, "up");
  g.mark_output(ops::swiglu(b, gate, up, "unpacked"));
  EXPECT_EQ(fuse_matmul_swiglu(g).fused, 0);

  Graph added;
  Builder ba(added, DType::f32);
  const Value x2 = ba.input("x", Shape{4, 8}, DType::f32);
  const Value w2 = ba.parameter("w", Shape{6, 8});
  const Value r = ba.input("r", Shape{4, 6}, DType::f32);
  added.mark_output(ops::swiglu_packed(ba, ops::add(ba, ops::linear(ba, x2, w2, "proj"), r, "residual"), "gate"));
  const Graph folded = fuse_step(added);  // the add goes into the matmul: three inputs
  EXPECT_EQ(testing::count_nodes(folded, OpKind::add), 0);
  EXPECT_EQ(fuse_matmul_swiglu(folded).fused, 0);
}

}  // namespace
}  // namespace spillway::graph
