// A stream of the CPU backend: an in-order queue of host work run by one
// worker thread of its own, so two streams really do run concurrently and a
// missing event between them shows up as a race, as it would on a GPU.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "device/stream.h"

namespace spillway {

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name);
  // Runs what is still queued, then stops the worker. An error not yet
  // reported by synchronize() is dropped.
  ~CpuStream() override;

  void enqueue(std::function<void()> work);
  void record(Event& event) override;
  void wait(const Event& event) override;
  // Rethrows the first exception thrown by enqueued work since the last
  // synchronize(). After a failure the stream drops later work (its event
  // markers and waits still run, so no other stream is left waiting) until
  // synchronize() has reported the error; then it runs work again.
  void synchronize() override;

 private:
  struct Task {
    std::function<void()> run;
    bool runs_after_error;  // event markers and waits
  };
  void push(Task task);
  void run_worker();

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t finished_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;  // last: starts once everything it uses exists
};

// The CpuStream behind `stream`; throws Error when it is another backend's.
CpuStream& as_cpu_stream(Stream& stream);

}  // namespace spillway
