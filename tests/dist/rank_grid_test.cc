#include "dist/rank_grid.h"

#include <gtest/gtest.h>

#include <set>

#include "base/status.h"

namespace spillway::dist {
namespace {

TEST(RankGrid, TensorParallelismIsInnermost) {
  const RankGrid g(2, 1, 2, 2, 8);  // dp 2, pp 1, cp 2, tp 2
  EXPECT_EQ(g.degree(Dim::dp), 2);
  const Coordinates c = g.coordinates(5);  // 5 = ((1 * 1 + 0) * 2 + 0) * 2 + 1
  EXPECT_EQ(c[Dim::dp], 1);
  EXPECT_EQ(c[Dim::pp], 0);
  EXPECT_EQ(c[Dim::cp], 0);
  EXPECT_EQ(c[Dim::tp], 1);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(g.rank_of(g.coordinates(r)), r);
  EXPECT_EQ(g.group(Dim::tp, 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group(Dim::cp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(g.group(Dim::dp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(g.group(Dim::pp, 5), (std::vector<int>{5}));
  // The same layers' state: dp x cp, the same tp coordinate.
  EXPECT_EQ(g.replicas(5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(g.replica_position(5), 2);
  EXPECT_EQ(g.replica_group_index(5), 1);
  EXPECT_EQ(g.replica_group_index(4), 0);
}

// Along each dimension the groups cover the world once, each numbered once.
TEST(RankGrid, GroupsPartitionTheWorld) {
  const RankGrid g(0, 2, 1, 2, 12);  // dp takes the rest: 3
  EXPECT_EQ(g.degree(Dim::dp), 3);
  for (Dim d : {Dim::dp, Dim::pp, Dim::cp, Dim::tp}) {
    std::set<int> seen;
    std::set<int> indices;
    for (int r = 0; r < 12; ++r) {
      const auto members = g.group(d, r);
      EXPECT_EQ(static_cast<int>(members.size()), g.degree(d));
      EXPECT_EQ(members[static_cast<size_t>(g.coordinates(r)[d])], r);
      if (members.front() == r) {
        for (int m : members) EXPECT_TRUE(seen.insert(m).second);
        EXPECT_TRUE(indices.insert(g.group_index(d, r)).second);
      }
      for (int m : members) EXPECT_EQ(g.group_index(d, m), g.group_index(d, r));
    }
    EXPECT_EQ(seen.size(), 12u) << dim_name(d);
    EXPECT_EQ(static_cast<int>(indices.size()), 12 / g.degree(d)) << dim_name(d);
  }
}

TEST(RankGrid, AMismatchNamesTheDegreesAndTheWorld) {
  try {
    RankGrid(2, 1, 1, 2, 6);
    FAIL() << "2 x 2 accepted for 6 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "--dp: dp x pp x cp x tp = 2 x 1 x 1 x 2 = 4, but the run has 6 ranks");
  }
  EXPECT_THROW(RankGrid(0, 4, 1, 1, 6), Error);
  EXPECT_THROW(RankGrid(1, 0, 1, 1, 1), Error);
}

}  // namespace
}  // namespace spillway::dist
