#include "device/cpu/cpu_event.h"

#include "base/status.h"

namespace spillway {

uint64_t CpuEventState::begin_record() {
  std::lock_guard lock(mutex_);
  pending_.insert(++latest_);
  return latest_;
}

void CpuEventState::complete(uint64_t generation) {
  {
    std::lock_guard lock(mutex_);
    pending_.erase(generation);
    completed_at_ = std::chrono::steady_clock::now();
  }
  completed_.notify_all();
}

void CpuEventState::wait_for(uint64_t generation) {
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [&] { return !pending_.contains(generation); });
}

bool CpuEventState::is_complete(uint64_t generation) {
  std::lock_guard lock(mutex_);
  return !pending_.contains(generation);
}

uint64_t CpuEventState::latest_generation() {
  std::lock_guard lock(mutex_);
  return latest_;
}

std::chrono::steady_clock::time_point CpuEventState::completed_at() {
  std::lock_guard lock(mutex_);
  return completed_at_;
}

void CpuEvent::synchronize() { state_->wait_for(state_->latest_generation()); }

bool CpuEvent::query() { return state_->is_complete(state_->latest_generation()); }

double CpuEvent::seconds_since(const Event& earlier) const {
  const auto* cpu = dynamic_cast<const CpuEvent*>(&earlier);
  SPW_CHECK(cpu != nullptr, "timing", "event is not a CPU event");
  return std::chrono::duration<double>(state_->completed_at() - cpu->state()->completed_at()).count();
}

}  // namespace spillway
