#include "device/cpu/cpu_stream.h"

#include <utility>

#include "base/status.h"
#include "device/cpu/cpu_event.h"

namespace spillway {

namespace {

const CpuEvent& as_cpu_event(const Event& event, const std::string& stream_name) {
  const auto* cpu = dynamic_cast<const CpuEvent*>(&event);
  SPW_CHECK(cpu != nullptr, stream_name, "event is not a CPU event");
  return *cpu;
}

}  // namespace

CpuStream::CpuStream(std::string name) : Stream(std::move(name)) {
  worker_ = std::thread([this] { run_worker(); });
}

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> work) {
  SPW_CHECK(static_cast<bool>(work), name(), "enqueue of empty work");
  push({std::move(work), false});
}

void CpuStream::record(Event& event) {
  auto state = as_cpu_event(event, name()).state();
  const uint64_t generation = state->begin_record();
  push({[state, generation] { state->complete(generation); }, true});
}

void CpuStream::wait(const Event& event) {
  auto state = as_cpu_event(event, name()).state();
  // The generation is taken now: a record made after this call must not
  // hold up (or release) this wait.
  const uint64_t generation = state->latest_generation();
  if (state->is_complete(generation)) return;
  push({[state, generation] { state->wait_for(generation); }, true});
}

void CpuStream::synchronize() {
  SPW_CHECK(std::this_thread::get_id() != worker_.get_id(), name(),
            "synchronize() called from the stream's own work would wait forever");
  std::unique_lock lock(mutex_);
  const uint64_t target = enqueued_;
  work_done_.wait(lock, [&] { return finished_ >= target; });
  if (error_) {
    std::exception_ptr error = std::exchange(error_, nullptr);
    std::rethrow_exception(error);
  }
}

void CpuStream::push(Task task) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(task));
    ++enqueued_;
  }
  work_ready_.notify_one();
}

void CpuStream::run_worker() {
  for (;;) {
    Task task;
    bool skip = false;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      skip = error_ && !task.runs_after_error;
    }
    if (!skip) {
      try {
        task.run();
      } catch (...) {
        std::lock_guard lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
    // Captures go before synchronize() can return, so whatever they own
    // (buffers, shared state) is released by then.
    task.run = nullptr;
    {
      std::lock_guard lock(mutex_);
      ++finished_;
    }
    work_done_.notify_all();
  }
}

CpuStream& as_cpu_stream(Stream& stream) {
  auto* cpu = dynamic_cast<CpuStream*>(&stream);
  SPW_CHECK(cpu != nullptr, stream.name(), "not a CPU stream");
  return *cpu;
}

}  // namespace spillway
