#include "device/memory_space.h"

#include <cstdio>

#include "base/status.h"

namespace spillway {

namespace {

std::string budget_text(uint64_t budget) {
  return budget == MemorySpace::kUnlimited ? std::string("unlimited") : format_bytes(budget);
}

std::string pointer_text(const void* ptr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", ptr);
  return buf;
}

}  // namespace

MemorySpace::MemorySpace(std::string name, uint64_t budget, std::unique_ptr<MemoryBacking> backing)
    : name_(std::move(name)), budget_(budget), backing_(std::move(backing)) {
  SPW_CHECK(backing_ != nullptr, name_, "memory space needs a backing");
}

MemorySpace::~MemorySpace() {
  for (const auto& [ptr, bytes] : accounted_by_ptr_) backing_->free(ptr, bytes);
}

void* MemorySpace::allocate(uint64_t bytes, std::string_view what) {
  SPW_CHECK(bytes <= UINT64_MAX - kAlignment, name_, "cannot allocate '", what, "': ", bytes,
            " bytes is not a size");
  const uint64_t accounted = accounted_bytes(bytes);
  std::lock_guard lock(mutex_);
  // Written as a subtraction so an unlimited budget cannot overflow.
  SPW_CHECK(accounted <= budget_ - in_use_, name_, "cannot allocate '", what, "' of ",
            format_bytes(bytes), ": ", format_bytes(in_use_), " in use of a ",
            budget_text(budget_), " budget");
  void* ptr = backing_->allocate(accounted, what);
  accounted_by_ptr_.emplace(ptr, accounted);
  in_use_ += accounted;
  if (in_use_ > peak_) peak_ = in_use_;
  return ptr;
}

void MemorySpace::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = accounted_by_ptr_.find(ptr);
  SPW_CHECK(it != accounted_by_ptr_.end(), name_, "free of ", pointer_text(ptr),
            ", which this space did not allocate (or already freed)");
  backing_->free(ptr, it->second);
  in_use_ -= it->second;
  accounted_by_ptr_.erase(it);
}

uint64_t MemorySpace::in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

uint64_t MemorySpace::peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

void MemorySpace::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_ = in_use_;
}

size_t MemorySpace::allocation_count() const {
  std::lock_guard lock(mutex_);
  return accounted_by_ptr_.size();
}

}  // namespace spillway
