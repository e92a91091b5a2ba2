// Host memory the GPU copies from and to at full speed: the caller's own
// arrays pinned where they lie (no second copy of tens of gigabytes), and
// pinned buffers of the engine's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace spillway {

// Pins ranges of the caller's memory in place until it goes. CUDA registers
// whole pages, and small arrays share pages, so the page-rounded ranges are
// merged and each merged range is registered once.
class PinnedRanges {
 public:
  PinnedRanges() = default;
  PinnedRanges(const PinnedRanges&) = delete;
  PinnedRanges& operator=(const PinnedRanges&) = delete;
  ~PinnedRanges();

  void add(const void* p, size_t bytes);
  // Registers every range added so far.
  void pin();

 private:
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges_;
  std::vector<void*> pinned_;
};

// Pinned host memory of its own pages. Copies of the caller's pageable
// arrays go through it: a pageable array can start on a page PinnedRanges
// registered (one it shares with an array pinned in place) and run past it,
// and CUDA refuses such a copy as an invalid argument.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(uint64_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  uint64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  uint64_t bytes_ = 0;
};

}  // namespace spillway
