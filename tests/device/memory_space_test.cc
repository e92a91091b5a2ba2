#include "device/memory_space.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"

namespace spillway {
namespace {

// Serves from the heap and remembers what it was asked for, so the tests can
// see the sizes a space passes down and what it gives back.
class RecordingBacking final : public MemoryBacking {
 public:
  explicit RecordingBacking(std::map<void*, uint64_t>* live) : live_(live) {}
  void* allocate(uint64_t bytes, std::string_view) override {
    void* p = std::aligned_alloc(MemorySpace::kAlignment, bytes);
    (*live_)[p] = bytes;
    return p;
  }
  void free(void* ptr, uint64_t bytes) override {
    EXPECT_EQ(live_->at(ptr), bytes);
    live_->erase(ptr);
    std::free(ptr);
  }

 private:
  std::map<void*, uint64_t>* live_;
};

class FailingBacking final : public MemoryBacking {
 public:
  void* allocate(uint64_t bytes, std::string_view what) override {
    throw Error("test:space", detail::concat("backing refuses '", what, "' of ", bytes));
  }
  void free(void*, uint64_t) override {}
};

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemorySpace, AccountedBytesRoundUpToTheAlignment) {
  EXPECT_EQ(MemorySpace::kAlignment, 256u);
  EXPECT_EQ(MemorySpace::accounted_bytes(0), 256u);
  EXPECT_EQ(MemorySpace::accounted_bytes(1), 256u);
  EXPECT_EQ(MemorySpace::accounted_bytes(255), 256u);
  EXPECT_EQ(MemorySpace::accounted_bytes(256), 256u);
  EXPECT_EQ(MemorySpace::accounted_bytes(257), 512u);
  EXPECT_EQ(MemorySpace::accounted_bytes(1000003), 1000192u);
  static_assert(MemorySpace::accounted_bytes(3 << 20) == 3u << 20);
}

TEST(MemorySpace, AccountsAlignsAndTracksThePeak) {
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> size_dist(0, 5000);
  struct Block { unsigned char* ptr; uint64_t bytes; unsigned char fill; };
  std::vector<Block> live;
  uint64_t expected_in_use = 0, expected_peak = 0;
  for (int step = 0; step < 400; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      uint64_t bytes = size_dist(rng);
      auto* p = static_cast<unsigned char*>(space->allocate(bytes, "block"));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % MemorySpace::kAlignment, 0u);
      auto fill = static_cast<unsigned char>(rng());
      std::memset(p, fill, bytes);
      live.push_back({p, bytes, fill});
      expected_in_use += MemorySpace::accounted_bytes(bytes);
      expected_peak = std::max(expected_peak, expected_in_use);
    } else {
      size_t i = rng() % live.size();
      // Nothing else wrote into this block while it was live.
      for (uint64_t b = 0; b < live[i].bytes; ++b) ASSERT_EQ(live[i].ptr[b], live[i].fill);
      space->free(live[i].ptr);
      expected_in_use -= MemorySpace::accounted_bytes(live[i].bytes);
      live.erase(live.begin() + static_cast<long>(i));
    }
    ASSERT_EQ(space->in_use(), expected_in_use);
    ASSERT_EQ(space->peak(), expected_peak);
    ASSERT_EQ(space->allocation_count(), live.size());
  }
  ASSERT_GT(expected_peak, expected_in_use);
  space->reset_peak();
  EXPECT_EQ(space->peak(), expected_in_use);
  for (auto& b : live) space->free(b.ptr);
  EXPECT_EQ(space->in_use(), 0u);
  EXPECT_EQ(space->peak(), expected_in_use);
  space->reset_peak();
  EXPECT_EQ(space->peak(), 0u);
}

TEST(MemorySpace, PassesRoundedSizesToTheBackingAndReturnsLeftoversAtTheEnd) {
  std::map<void*, uint64_t> live;
  {
    MemorySpace space("test:space", 1 << 20, std::make_unique<RecordingBacking>(&live));
    void* a = space.allocate(1, "a");
    space.allocate(300, "b");
    space.allocate(0, "c");
    ASSERT_EQ(live.size(), 3u);
    EXPECT_EQ(live.at(a), 256u);
    uint64_t total = 0;
    for (auto& [p, n] : live) total += n;
    EXPECT_EQ(total, 256u + 512u + 256u);
    space.free(a);
    EXPECT_EQ(live.size(), 2u);
  }
  EXPECT_TRUE(live.empty());
}

TEST(MemorySpace, BudgetErrorNamesSpaceRequestInUseAndBudget) {
  auto space = make_host_heap_space("cpu:device", 4096);
  EXPECT_EQ(space->budget(), 4096u);
  void* a = space->allocate(3000, "weights");  // accounts 3072
  std::string msg = error_text([&] { space->allocate(2000, "layer 3 attention scores"); });
  ASSERT_FALSE(msg.empty());
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("cpu:device: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("layer 3 attention scores"), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(2000)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(3072)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(4096)), std::string::npos) << msg;
  // A failed request changes nothing, and the budget can be filled exactly.
  EXPECT_EQ(space->in_use(), 3072u);
  EXPECT_EQ(space->peak(), 3072u);
  void* b = space->allocate(1024, "exact fit");
  EXPECT_EQ(space->in_use(), 4096u);
  EXPECT_THROW(space->allocate(0, "one unit more"), Error);
  space->free(a);
  space->free(b);
  EXPECT_THROW(space->allocate(4097, "too big"), Error);
  EXPECT_THROW(space->allocate(UINT64_MAX, "absurd"), Error);
}

TEST(MemorySpace, ZeroBudgetHoldsNothingAndUnlimitedNeverOverflows) {
  auto empty = make_host_heap_space("cpu:none", 0);
  EXPECT_THROW(empty->allocate(0, "x"), Error);
  auto unlimited = make_host_heap_space("cpu:all", MemorySpace::kUnlimited);
  void* p = unlimited->allocate(1 << 20, "x");
  std::string msg = error_text([&] { unlimited->allocate(UINT64_MAX - 100, "absurd"); });
  EXPECT_NE(msg.find("cpu:all"), std::string::npos) << msg;
  unlimited->free(p);
}

TEST(MemorySpace, UnknownAndDoubleFreesThrow) {
  auto space = make_host_heap_space("cpu:pinned_host", MemorySpace::kUnlimited);
  int on_stack = 0;
  std::string msg = error_text([&] { space->free(&on_stack); });
  EXPECT_EQ(msg.rfind("cpu:pinned_host: free of ", 0), 0u) << msg;
  void* p = space->allocate(100, "x");
  auto* inside = static_cast<char*>(p) + 8;
  EXPECT_THROW(space->free(inside), Error);
  space->free(p);
  EXPECT_THROW(space->free(p), Error);
  space->free(nullptr);
  EXPECT_EQ(space->in_use(), 0u);
}

TEST(MemorySpace, BackingFailureLeavesAccountingUnchanged) {
  MemorySpace space("test:space", MemorySpace::kUnlimited, std::make_unique<FailingBacking>());
  std::string msg = error_text([&] { space.allocate(10, "x"); });
  EXPECT_NE(msg.find("backing refuses 'x' of 256"), std::string::npos) << msg;
  EXPECT_EQ(space.in_use(), 0u);
  EXPECT_EQ(space.peak(), 0u);
}

TEST(MemorySpace, ConcurrentUseNeverPassesTheBudget) {
  constexpr uint64_t kBudget = 64 * 1024;
  auto space = make_host_heap_space("cpu:device", kBudget);
  std::atomic<uint64_t> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<void*> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.empty() || rng() % 2 == 0) {
          try {
            mine.push_back(space->allocate(rng() % 6000, "x"));
          } catch (const Error&) {
            refused.fetch_add(1);
          }
        } else {
          space->free(mine.back());
          mine.pop_back();
        }
        EXPECT_LE(space->in_use(), kBudget);
      }
      for (void* p : mine) space->free(p);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(space->in_use(), 0u);
  EXPECT_EQ(space->allocation_count(), 0u);
  EXPECT_LE(space->peak(), kBudget);
  EXPECT_GT(refused.load(), 0u);  // the budget really was in play
}

}  // namespace
}  // namespace spillway
