#include "graph/liveness.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "graph/builder.h"
#include "ops/add_op.h"
#include "ops/rope_op.h"

namespace spillway::graph {
namespace {

uint64_t exact(uint64_t n) { return n; }

TEST(Liveness, FirstAndLastUseAndPeak) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{4}, DType::f32);   // 16 bytes, the caller's
  Value a = ops::add(b, x, x, "a");                      // node 0
  Value c = ops::add(b, a, a, "c");                      // node 1: a dies here
  Value d = ops::add(b, c, x, "d");                      // node 2: c dies here
  Value e = ops::add(b, x, x, "e");                      // node 3: never read, dies at once
  g.mark_output(d);
  Liveness live = analyze_liveness(g, exact);

  EXPECT_FALSE(live.of[static_cast<size_t>(x.id)].managed);
  EXPECT_EQ(live.of[static_cast<size_t>(a.id)].def, 0);
  EXPECT_EQ(live.of[static_cast<size_t>(a.id)].last_use, 1);
  EXPECT_EQ(live.of[static_cast<size_t>(c.id)].last_use, 2);
  EXPECT_EQ(live.of[static_cast<size_t>(d.id)].last_use, Liveness::kEndOfStep);
  EXPECT_EQ(live.of[static_cast<size_t>(e.id)].last_use, 3);
  // In use while each node runs: {a}, {a, c}, {c, d}, {d, e}.
  EXPECT_EQ(live.bytes_in_use, (std::vector<uint64_t>{16, 32, 32, 32}));
  EXPECT_EQ(live.peak_bytes, 32u);
  EXPECT_EQ(live.peak_node, 1);
}

TEST(Liveness, CountsBytesAsTheAllocatorDoes) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{3}, DType::f32);
  g.mark_output(ops::add(b, x, x));
  Liveness live = analyze_liveness(g, [](uint64_t n) { return (n + 255) / 256 * 256; });
  EXPECT_EQ(live.peak_bytes, 256u);
}

std::shared_ptr<const std::vector<float>> inv_freq() {
  return std::make_shared<const std::vector<float>>(std::vector<float>{1.0f, 0.5f});
}

TEST(Liveness, RopeWritesOverAnInputThatDiesThere) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{1, 2, 8}, DType::f32);  // 64 bytes, the caller's
  Value a = ops::add(b, x, x, "a");                          // node 0
  Value r = ops::rope(b, a, 2, inv_freq());                  // node 1: a dies here
  Value d = ops::add(b, r, x, "d");                          // node 2
  g.mark_output(d);
  Liveness live = analyze_liveness(g, exact);

  EXPECT_EQ(live.of[static_cast<size_t>(r.id)].takes_over, a.id);
  ASSERT_EQ(live.handed_over_at[1].size(), 1u);
  EXPECT_EQ(live.handed_over_at[1][0].from, a);
  EXPECT_EQ(live.handed_over_at[1][0].to, r);
  EXPECT_TRUE(live.born_at[1].empty());  // r allocates nothing ...
  EXPECT_TRUE(live.dies_at[1].empty());  // ... and a's buffer lives on as r
  EXPECT_EQ(live.dies_at[2], std::vector<Value>{r});
  EXPECT_EQ(live.bytes_in_use, (std::vector<uint64_t>{64, 64, 128}));
}

TEST(Liveness, AnInputReadLaterKeepsItsBuffer) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{1, 2, 8}, DType::f32);
  Value a = ops::add(b, x, x, "a");
  Value r = ops::rope(b, a, 2, inv_freq());
  g.mark_output(ops::add(b, r, a, "d"));  // a is read after the rope
  Liveness live = analyze_liveness(g, exact);

  EXPECT_EQ(live.of[static_cast<size_t>(r.id)].takes_over, -1);
  EXPECT_TRUE(live.handed_over_at[1].empty());
  EXPECT_EQ(live.bytes_in_use, (std::vector<uint64_t>{64, 128, 192}));
}

TEST(Liveness, OnlyOpsThatMayWriteInPlaceTakeOver) {
  Graph g;
  Builder b(g, DType::f32);
  Value x = b.input("x", Shape{4}, DType::f32);
  Value a = ops::add(b, x, x, "a");
  g.mark_output(ops::add(b, a, x, "c"));  // add's kernels may alias, but it is not listed
  Liveness live = analyze_liveness(g, exact);
  EXPECT_TRUE(live.handed_over_at[1].empty());
  EXPECT_EQ(live.bytes_in_use, (std::vector<uint64_t>{16, 32}));
}

}  // namespace
}  // namespace spillway::graph
