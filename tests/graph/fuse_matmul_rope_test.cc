// Folding the rope of q and k into the fused q|k|v projection that feeds it,
// on a real LLaMA step with fused projections: one fusion per layer, the
// backward's ropes untouched, the same loss and gradients bit for bit (the
// CPU runs the product, then rotates it in place), no more memory, also
// after the SwiGLU fusion as the GPU engine orders them; and the rules that
// keep other shapes apart.
#include "graph/fuse_matmul_rope.h"

#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "exec/executor.h"
#include "graph/builder.h"
#include "graph/fuse_matmul_swiglu.h"
#include "graph/fuse_step.h"
#include "graph/liveness.h"
#include "ops/add_op.h"
#include "ops/matmul_op.h"
#include "ops/rope.h"
#include "ops/rope_op.h"
#include "testing/graph_checks.h"
#include "testing/llama.h"
#include "testing/llama_step.h"
#include "testing/numeric.h"

namespace spillway::graph {
namespace {

using testing::kFusionTestInputs;

uint64_t allocator_cost(uint64_t n) { return MemorySpace::accounted_bytes(n); }

int roped_products(const Graph& g) {
  int count = 0;
  for (const Node& n : g.nodes()) count += n.kind == OpKind::matmul && n.attrs.fused == Fused::rope;
  return count;
}

class FuseMatmulRope : public ::testing::TestWithParam<GradientOutput> {};

TEST_P(FuseMatmulRope, OneFusionPerLayerGivesTheSameStepBitForBit) {
  const auto s = testing::fusion_test_step(GetParam());
  const Graph g = fuse_step(s.graph);  // as the resident GPU engine runs it
  ASSERT_EQ(testing::count_nodes(g, OpKind::rope), 2);
  ASSERT_EQ(testing::count_nodes(g, OpKind::rope_backward), 2);

  const RopeFused f = fuse_matmul_rope(g);
  EXPECT_EQ(f.fused, 2);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::rope), 0);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::rope_backward), 2);
  EXPECT_EQ(roped_products(f.graph), 2);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size() - 2);
  ASSERT_NO_FATAL_FAILURE(testing::expect_values_kept(g, f.graph));
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  // Each layer's unrotated q|k|v product is no longer made.
  EXPECT_EQ(testing::orphans(f.graph), testing::orphans(g) + 2);

  // Each q|k|v projection keeps its inputs and writes, instead of its
  // product, the roped q|k|v the rope made from it, with that rope's
  // attributes.
  for (const Node& n : f.graph.nodes()) {
    if (n.kind != OpKind::matmul || n.attrs.fused != Fused::rope) continue;
    EXPECT_NE(n.name.find("self_attn.qkv_proj"), std::string::npos) << n.name;
    ASSERT_EQ(n.inputs.size(), 2u);
    ASSERT_EQ(n.outputs.size(), 1u);
    const Node& old_rope = g.nodes()[static_cast<size_t>(g.value(n.outputs[0]).producer)];
    ASSERT_EQ(old_rope.kind, OpKind::rope);
    const Node& old_product = g.nodes()[static_cast<size_t>(g.value(old_rope.inputs[0]).producer)];
    EXPECT_EQ(old_product.kind, OpKind::matmul);
    EXPECT_EQ(old_product.name, n.name);
    EXPECT_EQ(old_product.inputs, n.inputs);
    EXPECT_EQ(old_product.attrs.trans_a, n.attrs.trans_a);
    EXPECT_EQ(old_product.attrs.trans_b, n.attrs.trans_b);
    EXPECT_EQ(n.attrs.heads, old_rope.attrs.heads);
    EXPECT_EQ(n.attrs.rotated_heads, old_rope.attrs.rotated_heads);
    EXPECT_GT(n.attrs.rotated_heads, 0);  // v is carried, not rotated
    EXPECT_LT(n.attrs.rotated_heads, n.attrs.heads);
    EXPECT_EQ(n.attrs.pos0, old_rope.attrs.pos0);
    EXPECT_EQ(n.attrs.inv_freq, old_rope.attrs.inv_freq);
    // Nothing reads the product any more.
    for (const Node& reader : f.graph.nodes()) {
      for (const Value in : reader.inputs) EXPECT_NE(in, old_rope.inputs[0]) << reader.name;
    }
  }

  // The rope ran in place over the product, so the rotated q|k|v took the
  // product's buffer already: the peak does not grow.
  EXPECT_LE(analyze_liveness(f.graph, allocator_cost).peak_bytes, analyze_liveness(g, allocator_cost).peak_bytes);

  testing::expect_same_bits(testing::run_llama_step(f.graph, s, kFusionTestInputs),
                            testing::run_llama_step(g, s, kFusionTestInputs), s);
  // Folding again finds nothing.
  EXPECT_EQ(fuse_matmul_rope(f.graph).fused, 0);
}

// The order the resident GPU engine applies them in: the SwiGLU fusion
// first, then the rope's. Neither takes the other's matmul.
TEST_P(FuseMatmulRope, AfterTheSwigluFusionGivesTheSameStepBitForBit) {
  const auto s = testing::fusion_test_step(GetParam());
  const Graph g = fuse_step(s.graph);
  const SwigluFused swiglu = fuse_matmul_swiglu(g);
  ASSERT_EQ(swiglu.fused, 2);
  ASSERT_EQ(swiglu.fused_backward, 2);
  const RopeFused f = fuse_matmul_rope(swiglu.graph);
  EXPECT_EQ(f.fused, 2);
  EXPECT_EQ(f.graph.nodes().size(), g.nodes().size() - 6);
  ASSERT_NO_FATAL_FAILURE(testing::expect_values_kept(g, f.graph));
  ASSERT_NO_FATAL_FAILURE(testing::expect_producers_first(f.graph));
  for (const Node& n : f.graph.nodes()) {
    if (n.kind == OpKind::matmul && n.attrs.fused == Fused::rope) {
      EXPECT_NE(n.attrs.fused, Fused::swiglu_backward) << n.name;
      EXPECT_EQ(n.outputs.size(), 1u) << n.name;
    }
  }
  EXPECT_LE(analyze_liveness(f.graph, allocator_cost).peak_bytes, analyze_liveness(g, allocator_cost).peak_bytes);
  testing::expect_same_bits(testing::run_llama_step(f.graph, s, kFusionTestInputs),
                            testing::run_llama_step(g, s, kFusionTestInputs), s);
}

INSTANTIATE_TEST_SUITE_P(FreshAndAccumulated, FuseMatmulRope,
                         ::testing::Values(GradientOutput::fresh, GradientOutput::accumulated));

// A product that something else reads (here: the caller, as a graph output)
// must stay a value: that layer's rope is not folded, the other is.
TEST(FuseMatmulRopeRules, KeepsAProductThatIsAGraphOutput) {
  const auto s = testing::fusion_test_step(GradientOutput::fresh);
  Graph g = fuse_step(s.graph);
  const Node* rope = testing::first_node(g, OpKind::rope);
  ASSERT_NE(rope, nullptr);
  g.mark_output(rope->inputs[0]);
  const RopeFused f = fuse_matmul_rope(g);
  EXPECT_EQ(f.fused, 1);
  EXPECT_EQ(testing::count_nodes(f.graph, OpKind::rope), 1);
  testing::expect_same_bits(testing::run_llama_step(f.graph, s, kFusionTestInputs),
                            testing::run_llama_step(g, s, kFusionTestInputs), s);
}

// One projection and its rope, [2, 3, 4 heads * 4], on its own; the roped
// product is the graph's output unless something else is to read it.
struct SmallRope {
  Graph graph;
  Value x, w, product, roped;
};

SmallRope small_rope(int64_t rotated_heads, bool roped_is_output = true) {
  SmallRope r;
  Builder b(r.graph, DType::f32);
  r.x = b.input("x", Shape{2, 3, 8}, DType::f32);
  r.w = b.parameter("w", Shape{16, 8});
  r.product = ops::linear(b, r.x, r.w, "proj");
  auto inv_freq = std::make_shared<const std::vector<float>>(ops::rope_inv_freq(4, 10000.0, {}));
  r.roped = ops::rope(b, r.product, 4, std::move(inv_freq), 5, "rope", rotated_heads);
  if (roped_is_output) r.graph.mark_output(r.roped);
  return r;
}

std::vector<float> run_small(const SmallRope& r) {
  std::vector<float> x = testing::random_vector<float>(2 * 3 * 8, 7);
  std::vector<float> w = testing::random_vector<float>(16 * 8, 8);
  auto space = make_host_heap_space("test:device", MemorySpace::kUnlimited);
  exec::CpuExecutor e(r.graph, *space);
  e.bind(r.x, std::span<float>(x));
  e.bind(r.w, std::span<float>(w));
  e.run();
  const std::span<const float> out = e.read<float>(r.roped);
  return {out.begin(), out.end()};
}

// With every head rotated (rotated_heads 0) and with some carried, at a
// first position other than 0: the CPU runner rotates the product as the
// rope did.
TEST(FuseMatmulRopeRules, RotatesAsTheRopeDid) {
  for (const int64_t rotated : {0, 3}) {
    SCOPED_TRACE(rotated);
    SmallRope r = small_rope(rotated);
    const std::vector<float> want = run_small(r);
    const RopeFused f = fuse_matmul_rope(r.graph);
    ASSERT_EQ(f.fused, 1);
    ASSERT_EQ(f.graph.nodes().size(), 1u);
    EXPECT_EQ(f.graph.nodes()[0].attrs.fused, Fused::rope);
    EXPECT_EQ(f.graph.nodes()[0].attrs.pos0, 5);
    SmallRope fused = r;
    fused.graph = f.graph;
    EXPECT_EQ(testing::bytes_of<float>(run_small(fused)), testing::bytes_of<float>(want));
  }
}

// A product with a second reader, and a rope that adds into its output,
// stay as they are.
TEST(FuseMatmulRopeRules, LeavesWhatCannotBeFolded) {
  SmallRope read_twice = small_rope(0);
  {
    Builder b(read_twice.graph, DType::f32);
    read_twice.graph.mark_output(ops::add(b, read_twice.product, read_twice.roped, "second_reader"));
  }
  const RopeFused kept = fuse_matmul_rope(read_twice.graph);
  EXPECT_EQ(kept.fused, 0);
  EXPECT_EQ(testing::count_nodes(kept.graph, OpKind::rope), 1);

  // No graph builds a rope that accumulates (mark_accumulated refuses one);
  // a node set so by hand is left alone all the same.
  const SmallRope r = small_rope(0);
  Graph accumulating = values_of(r.graph);
  for (Node n : r.graph.nodes()) {
    if (n.kind == OpKind::rope) n.attrs.accumulate = true;
    accumulating.add_node(std::move(n));
  }
  EXPECT_EQ(fuse_matmul_rope(accumulating).fused, 0);

  // A rope's backward is not a forward rope, and a product that already adds
  // an addend (three inputs) is not a plain product.
  Graph added;
  Builder ba(added, DType::f32);
  const Value x = ba.input("x", Shape{2, 3, 8}, DType::f32);
  const Value w = ba.parameter("w", Shape{16, 8});
  const Value addend = ba.input("addend", Shape{2, 3, 16}, DType::f32);
  auto inv_freq = std::make_shared<const std::vector<float>>(ops::rope_inv_freq(4, 10000.0, {}));
  const Value roped =
      ops::rope(ba, ops::add(ba, ops::linear(ba, x, w, "proj"), addend, "residual"), 4, inv_freq, 0, "rope");
  added.mark_output(roped);
  const NodeAttrs rope_attrs = added.nodes().back().attrs;
  const Value product = ops::linear(ba, x, w, "proj2");
  added.mark_output(ops::rope_backward(ba, product, rope_attrs, "rope_backward"));
  const Graph folded = fuse_step(added);  // the add goes into the matmul: three inputs
  EXPECT_EQ(testing::count_nodes(folded, OpKind::add), 0);
  EXPECT_EQ(fuse_matmul_rope(folded).fused, 0);
}

// A matmul that rotates its product cannot add into caller memory, nor take
// an addend: the sum would be rotated too.
TEST(FuseMatmulRopeRules, ARotatingProductNeitherAccumulatesNorAdds) {
  const SmallRope r = small_rope(0);
  const RopeFused f = fuse_matmul_rope(r.graph);
  ASSERT_EQ(f.fused, 1);
  EXPECT_FALSE(f.graph.can_accumulate(r.roped));

  SmallRope then_add = small_rope(0, /*roped_is_output=*/false);
  {
    Builder b(then_add.graph, DType::f32);
    const Value addend = b.input("addend", Shape{2, 3, 16}, DType::f32);
    then_add.graph.mark_output(ops::add(b, then_add.roped, addend, "residual"));
  }
  const RopeFused roped = fuse_matmul_rope(then_add.graph);
  ASSERT_EQ(roped.fused, 1);
  EXPECT_EQ(testing::count_nodes(fuse_step(roped.graph), OpKind::add), 1);
}

}  // namespace
}  // namespace spillway::graph
