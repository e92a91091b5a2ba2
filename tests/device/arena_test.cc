#include "device/arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"

namespace spillway {
namespace {

constexpr uint64_t kUnit = 256;

TEST(Arena, RoundsCapacityAndRequestsToTheAlignment) {
  Arena arena("pool", 10 * kUnit + 100, kUnit);
  EXPECT_EQ(arena.capacity(), 10 * kUnit);
  uint64_t a = arena.allocate(1, "a");
  uint64_t b = arena.allocate(kUnit + 1, "b");
  uint64_t c = arena.allocate(0, "c");
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, kUnit);
  EXPECT_EQ(c, 3 * kUnit);
  EXPECT_EQ(arena.allocation_size(b), 2 * kUnit);
  EXPECT_EQ(arena.in_use(), 4 * kUnit);
  EXPECT_EQ(arena.free_bytes(), 6 * kUnit);
  EXPECT_THROW(Arena("bad", 1024, 48), Error);
}

TEST(Arena, FragmentationBlocksALargeRequestUntilNeighboursMerge) {
  Arena arena("cuda:0", 10 * kUnit, kUnit);
  std::vector<uint64_t> offsets;
  for (int i = 0; i < 10; ++i) offsets.push_back(arena.allocate(kUnit, "slot"));
  EXPECT_FALSE(arena.try_allocate(1).has_value());
  for (int i = 0; i < 10; i += 2) arena.free(offsets[i]);
  EXPECT_EQ(arena.free_bytes(), 5 * kUnit);
  EXPECT_EQ(arena.free_block_count(), 5u);
  EXPECT_EQ(arena.largest_free_block(), kUnit);

  std::string msg;
  try {
    arena.allocate(2 * kUnit, "layer 7 activations");
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_EQ(msg.rfind("cuda:0: no free block of " + format_bytes(2 * kUnit), 0), 0u) << msg;
  EXPECT_NE(msg.find("layer 7 activations"), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(5 * kUnit) + " free"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 blocks"), std::string::npos) << msg;

  arena.free(offsets[3]);  // joins the free slots 2, 3 and 4
  EXPECT_EQ(arena.free_block_count(), 4u);
  EXPECT_EQ(arena.largest_free_block(), 3 * kUnit);
  EXPECT_EQ(arena.allocate(3 * kUnit, "fits now"), 2 * kUnit);
}

TEST(Arena, FreeingEverythingLeavesOneBlock) {
  Arena arena("pool", 64 * kUnit, kUnit);
  uint64_t a = arena.allocate(5 * kUnit, "a");
  uint64_t b = arena.allocate(7 * kUnit, "b");
  uint64_t c = arena.allocate(9 * kUnit, "c");
  arena.free(a);
  arena.free(c);  // merges with the tail
  EXPECT_EQ(arena.free_block_count(), 2u);
  arena.free(b);  // merges with both sides
  EXPECT_EQ(arena.free_block_count(), 1u);
  EXPECT_EQ(arena.largest_free_block(), 64 * kUnit);
  EXPECT_EQ(arena.in_use(), 0u);
  EXPECT_EQ(arena.allocate(64 * kUnit, "all"), 0u);
}

TEST(Arena, TakesTheSmallestBlockThatFits) {
  Arena arena("pool", 20 * kUnit, kUnit);
  uint64_t a = arena.allocate(4 * kUnit, "a");  // [0, 4)
  arena.allocate(kUnit, "pin1");                // [4, 5)
  uint64_t b = arena.allocate(2 * kUnit, "b");  // [5, 7)
  arena.allocate(kUnit, "pin2");                // [7, 8); tail [8, 20) free
  arena.free(a);
  arena.free(b);
  EXPECT_EQ(arena.allocate(2 * kUnit, "x"), 5 * kUnit);
  EXPECT_EQ(arena.allocate(3 * kUnit, "y"), 0u);
  EXPECT_EQ(arena.allocate(5 * kUnit, "z"), 8 * kUnit);
}

TEST(Arena, ExhaustionAndBadFreesThrow) {
  Arena arena("cuda:0:pinned_host", 4 * kUnit, kUnit);
  EXPECT_THROW(arena.allocate(5 * kUnit, "big"), Error);
  EXPECT_THROW(arena.allocate(UINT64_MAX, "absurd"), Error);
  uint64_t a = arena.allocate(4 * kUnit, "all");
  EXPECT_THROW(arena.allocate(1, "one more"), Error);
  EXPECT_THROW(arena.free(a + kUnit), Error);
  arena.free(a);
  EXPECT_THROW(arena.free(a), Error);
  Arena empty("empty", 100, kUnit);
  EXPECT_EQ(empty.capacity(), 0u);
  EXPECT_FALSE(empty.try_allocate(0).has_value());
}

// Replays random allocations and frees against a plain list of live ranges:
// no overlaps, everything inside the arena, best fit chosen, a refusal only
// when no gap is large enough, and free blocks exactly the gaps (so
// neighbours were merged).
void check_against_model(uint64_t capacity, uint64_t alignment, uint64_t max_request, uint64_t seed) {
  Arena arena("pool", capacity, alignment);
  std::map<uint64_t, uint64_t> live;  // offset -> rounded size
  std::mt19937_64 rng(seed);
  auto gaps = [&] {
    std::vector<std::pair<uint64_t, uint64_t>> out;  // (offset, size)
    uint64_t cursor = 0;
    for (auto [off, size] : live) {
      if (off > cursor) out.emplace_back(cursor, off - cursor);
      cursor = off + size;
    }
    if (arena.capacity() > cursor) out.emplace_back(cursor, arena.capacity() - cursor);
    return out;
  };
  int refusals = 0;
  for (int step = 0; step < 6000; ++step) {
    bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      uint64_t bytes = rng() % (max_request + 1);
      uint64_t rounded = bytes == 0 ? alignment : align_up(bytes, alignment);
      auto before = gaps();
      std::optional<std::pair<uint64_t, uint64_t>> best;
      for (auto g : before) {
        if (g.second >= rounded && (!best || g.second < best->second)) best = g;
      }
      auto got = arena.try_allocate(bytes);
      ASSERT_EQ(got.has_value(), best.has_value()) << "step " << step;
      if (!got) {
        ++refusals;
        continue;
      }
      ASSERT_EQ(*got, best->first) << "step " << step;  // best fit, lowest offset
      ASSERT_EQ(*got % alignment, 0u);
      ASSERT_LE(*got + rounded, arena.capacity());
      auto next = live.lower_bound(*got);
      if (next != live.end()) {
        ASSERT_LE(*got + rounded, next->first);
      }
      if (next != live.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, *got);
      }
      live.emplace(*got, rounded);
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      arena.free(it->first);
      live.erase(it);
    }
    uint64_t sum = 0;
    for (auto [off, size] : live) sum += size;
    ASSERT_EQ(arena.in_use(), sum);
    auto now = gaps();
    ASSERT_EQ(arena.free_block_count(), now.size()) << "step " << step;
    uint64_t largest = 0;
    for (auto g : now) largest = std::max(largest, g.second);
    ASSERT_EQ(arena.largest_free_block(), largest);
  }
  EXPECT_GT(refusals, 0);  // the arena was driven to exhaustion
}

TEST(Arena, RandomSequencesMatchASimpleModel) {
  check_against_model(64 * 1024, 256, 6000, 1);
  check_against_model(100003, 64, 9000, 2);
  check_against_model(1 << 20, 4096, 200000, 3);
}

}  // namespace
}  // namespace spillway
