#include "graph/builder.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "ops/add_op.h"
#include "ops/attention_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/embedding_op.h"
#include "ops/matmul_op.h"
#include "ops/rmsnorm_op.h"

namespace spillway::graph {
namespace {

// The error must name the op (kind and scoped name) and both shapes.
void expect_error(const std::function<void()>& build, const std::vector<std::string>& parts) {
  try {
    build();
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(Builder, MatmulMismatchNamesOpAndBothShapes) {
  Graph g;
  Builder b(g, DType::f32);
  auto layer = b.scope("layers.3");
  Value x = b.input("x", Shape{2, 5, 8}, DType::f32);
  Value w = b.parameter("w", Shape{6, 7});
  expect_error([&] { ops::linear(b, x, w, "q_proj"); },
               {"matmul 'layers.3.q_proj'", "[2, 5, 8]", "[6, 7]", "inner dimensions differ"});
}

TEST(Builder, AddAndAttentionMismatches) {
  Graph g;
  Builder b(g, DType::f32);
  Value a = b.input("a", Shape{2, 3}, DType::f32);
  Value c = b.input("c", Shape{3, 2}, DType::f32);
  expect_error([&] { ops::add(b, a, c, "residual"); }, {"add 'residual'", "[2, 3]", "[3, 2]"});

  Value q = b.input("q", Shape{1, 4, 16}, DType::f32);
  Value k = b.input("k", Shape{1, 4, 12}, DType::f32);
  expect_error([&] { ops::attention(b, q, k, k, 4, 2, 0.5, "attn"); },
               {"attention 'attn'", "[1, 4, 12]", "[1, 4, 16]"});
  expect_error([&] { ops::attention(b, q, k, k, 4, 3, 0.5, "attn"); },
               {"attention 'attn'", "4 query heads", "3 kv heads"});
}

TEST(Builder, RmsnormAndCrossEntropyMismatches) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{2, 3, 8}, DType::f32);
  Value w = b.parameter("norm", Shape{7});
  expect_error([&] { ops::rmsnorm(b, x, w, 1e-5, "ln"); }, {"rmsnorm 'ln'", "[7]", "[2, 3, 8]"});
  Value t = b.input("targets", Shape{2, 4}, DType::i32);
  expect_error([&] { ops::cross_entropy(b, x, t, "loss"); }, {"cross_entropy 'loss'", "[2, 4]", "[2, 3, 8]"});
  Value tf = b.input("targets_f", Shape{2, 3}, DType::f32);
  expect_error([&] { ops::cross_entropy(b, x, tf, "loss"); }, {"cross_entropy 'loss'", "i32", "f32"});
}

TEST(Builder, ShapesFollowTheContracts) {
  Graph g;
  Builder b(g, DType::f32);
  Value ids = b.input("ids", Shape{2, 5}, DType::i32);
  Value table = b.parameter("table", Shape{11, 8});
  Value h = ops::embedding(b, table, ids);
  EXPECT_EQ(g.value(h).shape, (Shape{2, 5, 8}));
  Value w = b.parameter("w", Shape{6, 8});
  EXPECT_EQ(g.value(ops::linear(b, h, w)).shape, (Shape{2, 5, 6}));
  EXPECT_EQ(g.value(ops::matmul(b, h, h, true, false)).shape, (Shape{8, 8}));
  Value loss = ops::cross_entropy(b, h, ids);
  EXPECT_EQ(g.value(loss).shape.numel(), 1);
  EXPECT_EQ(g.nodes().back().outputs.size(), 2u);  // loss and lse
}

}  // namespace
}  // namespace spillway::graph
