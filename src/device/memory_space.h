// A memory space is one place a tensor can live ("cpu:device", "cuda:0",
// "cuda:0:pinned_host") with a byte budget the planner must stay under. The
// space does the accounting; a backing (host heap, a pre-reserved pool) hands
// out the bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/bytes.h"

namespace spillway {

// Where a space's bytes come from. Called with the space's lock held, so a
// backing need not be thread-safe itself. `bytes` is already rounded up to
// MemorySpace::kAlignment, and the pointer returned must be aligned to it.
class MemoryBacking {
 public:
  virtual ~MemoryBacking() = default;
  // Throws Error (naming the space and `what`) when it cannot serve the
  // request even though the budget allows it: the host is out of memory, or
  // a pool is too fragmented.
  virtual void* allocate(uint64_t bytes, std::string_view what) = 0;
  virtual void free(void* ptr, uint64_t bytes) = 0;
};

class MemorySpace {
 public:
  // Every request is accounted in whole units of this size, and every
  // pointer is aligned to it, so vector loads and cuBLAS never see a ragged
  // start.
  static constexpr uint64_t kAlignment = 256;
  // A budget of kUnlimited means the space has no limit of its own.
  static constexpr uint64_t kUnlimited = UINT64_MAX;

  // What an allocation of `bytes` costs against the budget. A zero-byte
  // request still takes one unit, so every allocation has its own address.
  // The planner uses this to predict a space's peak exactly.
  static constexpr uint64_t accounted_bytes(uint64_t bytes) {
    return bytes == 0 ? kAlignment : align_up(bytes, kAlignment);
  }

  MemorySpace(std::string name, uint64_t budget, std::unique_ptr<MemoryBacking> backing);
  // Gives back whatever is still allocated.
  ~MemorySpace();
  MemorySpace(const MemorySpace&) = delete;
  MemorySpace& operator=(const MemorySpace&) = delete;

  // `what` names the request in the error when the budget would be exceeded
  // ("layer 3 attention scores").
  void* allocate(uint64_t bytes, std::string_view what);
  // Throws on a pointer this space did not hand out; freeing nullptr does
  // nothing.
  void free(void* ptr);

  const std::string& name() const { return name_; }
  uint64_t budget() const { return budget_; }
  uint64_t in_use() const;
  uint64_t peak() const;
  // Starts a new peak measurement from what is in use now (one per step).
  void reset_peak();
  size_t allocation_count() const;

 private:
  const std::string name_;
  const uint64_t budget_;
  std::unique_ptr<MemoryBacking> backing_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, uint64_t> accounted_by_ptr_;
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
};

}  // namespace spillway
