// Host memory the GPU copies from and to at full speed: the caller's own
// arrays pinned where they lie (no second copy of tens of gigabytes), and
// pinned buffers of the engine's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "device/device.h"

namespace spillway {

// Pinned host memory of its own pages.
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

// The caller's arrays pinned where they lie, without pinning a page an
// array shares with anything else: CUDA registers whole pages, and a
// pageable buffer that runs from a registered page onto one that is not is
// refused as an invalid argument by every copy that touches it, however
// unrelated to the array. So only the whole pages inside each array are
// registered; its partial first and last pages (all of an array too short
// for a whole page) are shadowed in a pinned buffer, which holds that part
// of the array while it is pinned. Copies go piece by piece to where each
// part lives; write_back() puts the shadows back into the arrays.
class PinnedArrays {
 public:
  PinnedArrays() = default;
  PinnedArrays(const PinnedArrays&) = delete;
  PinnedArrays& operator=(const PinnedArrays&) = delete;
  ~PinnedArrays();

  // Returns the array's index. Arrays must not overlap.
  size_t add(void* data, uint64_t bytes);
  // Registers every array's whole pages and fills the shadows from the arrays.
  void pin();
  // Copies `bytes` from `offset` into array `i` (from the device) or out of
  // it (to the device), in `stream`'s order.
  void copy_to_device(size_t i, uint64_t offset, void* device, uint64_t bytes, Device& d, Stream& stream) const;
  void copy_from_device(size_t i, uint64_t offset, const void* device, uint64_t bytes, Device& d,
                        Stream& stream) const;
  // The arrays hold what the copies wrote; call with no copy in flight.
  void write_back() const;

 private:
  struct Array {
    char* data;
    uint64_t bytes;
    uint64_t head;          // bytes before the first whole page
    uint64_t tail;          // bytes after the last whole page (0 where head takes it all)
    char* shadow = nullptr;  // head bytes, then tail bytes
  };
  // Calls piece(host, at, n) for each stretch of [offset, offset + bytes) of
  // `a`, where `host` is the pinned memory holding it and `at` its offset
  // in the copy.
  template <typename Piece>
  static void pieces(const Array& a, uint64_t offset, uint64_t bytes, Piece piece);

  std::vector<Array> arrays_;
  std::unique_ptr<PinnedBuffer> shadows_;
  std::vector<void*> registered_;
};

}  // namespace spillway
