// The paged cache's bookkeeping: blocks handed out as sequences grow, given
// back when they end, and an error with the numbers when none are left.
#include "infer/paged_kv_blocks.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "base/status.h"

namespace spillway::infer {
namespace {

TEST(PagedKvBlocks, SequencesGrowByWholeBlocksAndShareThePool) {
  PagedKvBlocks b(6, 4);
  const int64_t s = b.open(), t = b.open();
  EXPECT_NE(s, t);
  b.reserve(s, 1);
  EXPECT_EQ(b.table(s).size(), 1u);
  b.reserve(s, 4);
  EXPECT_EQ(b.table(s).size(), 1u);  // still one block of 4
  b.reserve(t, 9);
  EXPECT_EQ(b.table(t).size(), 3u);
  b.reserve(s, 5);
  EXPECT_EQ(b.table(s).size(), 2u);
  EXPECT_EQ(b.reserved_tokens(s), 8);
  EXPECT_EQ(b.free_blocks(), 1);
  std::set<int32_t> all(b.table(s).begin(), b.table(s).end());
  all.insert(b.table(t).begin(), b.table(t).end());
  EXPECT_EQ(all.size(), 5u);  // no block in two tables
  EXPECT_EQ(*all.rbegin(), 4);  // the lowest numbers first
}

TEST(PagedKvBlocks, ClosingGivesTheBlocksBack) {
  PagedKvBlocks b(3, 2);
  const int64_t s = b.open();
  b.reserve(s, 6);
  EXPECT_EQ(b.free_blocks(), 0);
  b.close(s);
  EXPECT_EQ(b.free_blocks(), 3);
  EXPECT_FALSE(b.has(s));
  EXPECT_THROW(b.table(s), Error);
  const int64_t t = b.open();
  EXPECT_NE(t, s);  // ids are never reused
  b.reserve(t, 6);
  EXPECT_EQ(b.used_blocks(), 3);
}

TEST(PagedKvBlocks, RunningOutNamesTheNumbersAndChangesNothing) {
  PagedKvBlocks b(4, 16);
  const int64_t s = b.open(), t = b.open();
  b.reserve(s, 40);
  try {
    b.reserve(t, 33);
    FAIL() << "reserved past the pool";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("33 tokens needs 3 blocks of 16"), std::string::npos) << what;
    EXPECT_NE(what.find("1 of the cache's 4 are free"), std::string::npos) << what;
  }
  EXPECT_TRUE(b.table(t).empty());
  EXPECT_EQ(b.free_blocks(), 1);
  EXPECT_THROW(PagedKvBlocks(0, 16), Error);
  EXPECT_THROW(PagedKvBlocks(4, 0), Error);
}

}  // namespace
}  // namespace spillway::infer
