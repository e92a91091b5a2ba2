// Events of the CPU backend. Each record() starts a new generation; a stream
// worker completes that generation when it reaches the record's marker, and
// a wait blocks on the generation it captured, so re-recording an event
// never disturbs a wait already enqueued. Markers on different streams can
// finish out of order, so completion is kept per generation, not as a
// high-water mark.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>

#include "device/event.h"

namespace spillway {

// Shared between the event and every queued marker or wait that names it,
// so an event may be destroyed while its work is still pending.
class CpuEventState {
 public:
  // Generation 0 means "never recorded" and is always complete.
  uint64_t begin_record();
  void complete(uint64_t generation);
  void wait_for(uint64_t generation);
  bool is_complete(uint64_t generation);
  uint64_t latest_generation();
  // When the latest completed recording completed.
  std::chrono::steady_clock::time_point completed_at();

 private:
  std::mutex mutex_;
  std::condition_variable completed_;
  uint64_t latest_ = 0;
  std::set<uint64_t> pending_;
  std::chrono::steady_clock::time_point completed_at_{};
};

class CpuEvent final : public Event {
 public:
  CpuEvent() : state_(std::make_shared<CpuEventState>()) {}
  void synchronize() override;
  bool query() override;
  double seconds_since(const Event& earlier) const override;
  const std::shared_ptr<CpuEventState>& state() const { return state_; }

 private:
  std::shared_ptr<CpuEventState> state_;
};

}  // namespace spillway
