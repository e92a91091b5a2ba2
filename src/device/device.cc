#include "device/device.h"

#include <exception>

#include "base/log.h"
#include "base/status.h"

namespace spillway {

std::string_view stream_kind_name(StreamKind kind) {
  switch (kind) {
    case StreamKind::compute: return "compute";
    case StreamKind::h2d: return "h2d";
    case StreamKind::d2h: return "d2h";
    case StreamKind::comm: return "comm";
  }
  return "unknown";
}

Device::Device(std::string name, std::unique_ptr<MemorySpace> device_memory,
               std::unique_ptr<MemorySpace> host_memory, Streams streams)
    : name_(std::move(name)),
      device_memory_(std::move(device_memory)),
      host_memory_(std::move(host_memory)),
      streams_(std::move(streams)) {
  SPW_CHECK(device_memory_ && host_memory_, name_, "device needs both memory spaces");
  for (const auto& s : streams_) SPW_CHECK(s != nullptr, name_, "device needs all four streams");
}

Device::~Device() {
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (const std::exception& e) {
      log_warn(std::string(s->name()) + ": error left unreported at device shutdown: " + e.what());
    }
  }
}

void Device::synchronize() {
  // Every stream is drained even when one fails, so nothing still runs when
  // the error reaches the caller.
  std::exception_ptr first_error;
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

void Device::synchronize_at_end(std::string_view owner) noexcept {
  try {
    synchronize();
  } catch (const std::exception& e) {
    log_warn(std::string(owner) + ": an error left unreported at its end: " + e.what());
  }
}

}  // namespace spillway
