#include "device/cuda/pinned_host.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway {

namespace {

constexpr uint64_t kPage = 4096;

}  // namespace

PinnedBuffer::PinnedBuffer(uint64_t bytes) : bytes_(bytes) {
  if (bytes > 0) SPW_CUDA(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) SPW_CUDA_WARN(cudaFreeHost(data_));
}

size_t PinnedArrays::add(void* data, uint64_t bytes) {
  SPW_CHECK(registered_.empty(), "pinned arrays", "an array was added after pinning");
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first_page = (begin + kPage - 1) / kPage * kPage;
  const uintptr_t end_page = (begin + bytes) / kPage * kPage;
  Array a{static_cast<char*>(data), bytes, 0, 0};
  if (end_page > first_page) {
    a.head = first_page - begin;
    a.tail = begin + bytes - end_page;
  } else {
    a.head = bytes;  // no whole page: all of it is shadowed
  }
  arrays_.push_back(a);
  return arrays_.size() - 1;
}

void PinnedArrays::pin() {
  uint64_t shadow_bytes = 0;
  for (const Array& a : arrays_) shadow_bytes += a.head + a.tail;
  shadows_ = std::make_unique<PinnedBuffer>(std::max<uint64_t>(shadow_bytes, 1));
  char* next = shadows_->as<char>();
  for (Array& a : arrays_) {
    a.shadow = next;
    next += a.head + a.tail;
    std::memcpy(a.shadow, a.data, a.head);
    std::memcpy(a.shadow + a.head, a.data + a.bytes - a.tail, a.tail);
    const uint64_t whole = a.bytes - a.head - a.tail;
    if (whole == 0) continue;
    SPW_CUDA(cudaHostRegister(a.data + a.head, whole, cudaHostRegisterDefault));
    registered_.push_back(a.data + a.head);
  }
}

PinnedArrays::~PinnedArrays() {
  for (void* p : registered_) SPW_CUDA_WARN(cudaHostUnregister(p));
}

template <typename Piece>
void PinnedArrays::pieces(const Array& a, uint64_t offset, uint64_t bytes, Piece piece) {
  SPW_CHECK(offset + bytes <= a.bytes, "pinned arrays", "a copy of ", bytes, " bytes at ", offset,
            " runs past an array of ", a.bytes);
  const uint64_t tail_at = a.bytes - a.tail;
  const uint64_t end = offset + bytes;
  for (uint64_t at = offset; at < end;) {
    if (at < a.head) {
      const uint64_t n = std::min(end, a.head) - at;
      piece(a.shadow + at, at - offset, n);
      at += n;
    } else if (at < tail_at) {
      const uint64_t n = std::min(end, tail_at) - at;
      piece(a.data + at, at - offset, n);
      at += n;
    } else {
      piece(a.shadow + a.head + (at - tail_at), at - offset, end - at);
      at = end;
    }
  }
}

void PinnedArrays::copy_to_device(size_t i, uint64_t offset, void* device, uint64_t bytes, Device& d,
                                  Stream& stream) const {
  pieces(arrays_.at(i), offset, bytes, [&](const char* host, uint64_t at, uint64_t n) {
    d.copy_async(static_cast<char*>(device) + at, host, n, stream);
  });
}

void PinnedArrays::copy_from_device(size_t i, uint64_t offset, const void* device, uint64_t bytes, Device& d,
                                    Stream& stream) const {
  pieces(arrays_.at(i), offset, bytes, [&](char* host, uint64_t at, uint64_t n) {
    d.copy_async(host, static_cast<const char*>(device) + at, n, stream);
  });
}

void PinnedArrays::write_back() const {
  for (const Array& a : arrays_) {
    std::memcpy(a.data, a.shadow, a.head);
    std::memcpy(a.data + a.bytes - a.tail, a.shadow + a.head, a.tail);
  }
}

}  // namespace spillway
