#include "device/arena.h"

#include "base/bytes.h"
#include "base/status.h"

namespace spillway {

Arena::Arena(std::string name, uint64_t capacity, uint64_t alignment)
    : name_(std::move(name)), alignment_(alignment), capacity_(capacity & ~(alignment - 1)) {
  SPW_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0, name_,
            "arena alignment must be a power of two, not ", alignment);
  if (capacity_ > 0) insert_free(0, capacity_);
}

std::optional<uint64_t> Arena::try_allocate(uint64_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const uint64_t size = bytes == 0 ? alignment_ : align_up(bytes, alignment_);
  auto best = free_by_size_.lower_bound({size, 0});
  if (best == free_by_size_.end()) return std::nullopt;
  const auto [block_size, offset] = *best;
  erase_free(free_by_offset_.find(offset));
  // The front of the block is taken, so the remainder keeps its place in
  // offset order and a later free can merge with it.
  if (block_size > size) insert_free(offset + size, block_size - size);
  allocated_by_offset_.emplace(offset, size);
  in_use_ += size;
  return offset;
}

uint64_t Arena::allocate(uint64_t bytes, std::string_view what) {
  if (auto offset = try_allocate(bytes)) return *offset;
  throw Error(name_, detail::concat("no free block of ", format_bytes(bytes), " for '", what,
                                    "': ", format_bytes(free_bytes()), " free of ",
                                    format_bytes(capacity_), " in ", free_block_count(),
                                    " blocks, the largest ", format_bytes(largest_free_block())));
}

void Arena::free(uint64_t offset) {
  auto it = allocated_by_offset_.find(offset);
  SPW_CHECK(it != allocated_by_offset_.end(), name_, "free of offset ", offset,
            ", which is not a live allocation");
  uint64_t start = offset;
  uint64_t size = it->second;
  allocated_by_offset_.erase(it);
  in_use_ -= size;

  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    next = std::next(next);
    erase_free(std::prev(next));
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, size);
}

uint64_t Arena::largest_free_block() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

uint64_t Arena::allocation_size(uint64_t offset) const {
  auto it = allocated_by_offset_.find(offset);
  SPW_CHECK(it != allocated_by_offset_.end(), name_, "offset ", offset,
            " is not a live allocation");
  return it->second;
}

void Arena::insert_free(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Arena::erase_free(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

}  // namespace spillway
