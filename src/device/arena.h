// An offset sub-allocator over one block reserved up front (the CUDA device
// pool, the pinned host pool), so that nothing inside a training step calls
// cudaMalloc or cudaFree. It deals in offsets only; the owner adds its base
// pointer. Not thread-safe: the MemorySpace that owns it serialises calls.
//
// Best fit: a request takes the smallest free block that holds it (the lowest
// offset among equals), which keeps large blocks whole for large tensors.
// Freed blocks merge with free neighbours at once, so free space is never
// split by a boundary that no allocation needs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

namespace spillway {

class Arena {
 public:
  // `capacity` is rounded down to `alignment`, which must be a power of two.
  Arena(std::string name, uint64_t capacity, uint64_t alignment);

  // The offset of a block of at least `bytes` (rounded up to the alignment;
  // zero bytes takes one unit). Throws Error naming the arena, `what`, the
  // request and the free space when no free block is large enough.
  uint64_t allocate(uint64_t bytes, std::string_view what);
  std::optional<uint64_t> try_allocate(uint64_t bytes);
  // Throws on an offset that is not the start of a live allocation.
  void free(uint64_t offset);

  const std::string& name() const { return name_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t in_use() const { return in_use_; }
  uint64_t free_bytes() const { return capacity_ - in_use_; }
  uint64_t largest_free_block() const;
  size_t free_block_count() const { return free_by_offset_.size(); }
  size_t allocation_count() const { return allocated_by_offset_.size(); }
  // The rounded size of the live allocation at `offset`; throws if none.
  uint64_t allocation_size(uint64_t offset) const;

 private:
  void insert_free(uint64_t offset, uint64_t size);
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);

  const std::string name_;
  const uint64_t alignment_;
  const uint64_t capacity_;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;            // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset)
  std::map<uint64_t, uint64_t> allocated_by_offset_;       // offset -> size
};

}  // namespace spillway
