// The device buffers a GPU decoder needs, asked for before any is made, so
// that its device pool is sized to exactly their sum and a model that does
// not fit fails before a byte is copied, with the sizes in the error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device/memory_space.h"

namespace spillway::infer {

class DeviceRequests {
 public:
  // `ptr` is set by allocate(); it must outlive that call.
  template <typename T>
  void add(T*& ptr, int64_t count, std::string what) {
    requests_.push_back(Request{static_cast<uint64_t>(count) * sizeof(T), std::move(what),
                                [&ptr](void* p) { ptr = static_cast<T*>(p); }});
  }
  // What the requests take from a MemorySpace, alignment included.
  uint64_t bytes() const;
  // Allocates every request from `memory`, sets its pointer and forgets it.
  void allocate(MemorySpace& memory);

 private:
  struct Request {
    uint64_t bytes;
    std::string what;
    std::function<void(void*)> set;
  };
  std::vector<Request> requests_;
};

}  // namespace spillway::infer
