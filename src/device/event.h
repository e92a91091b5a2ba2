// A point in a stream's work. Recording captures everything enqueued on the
// stream so far; the event completes when that work has run. Events can be
// recorded again (each record starts a new generation, as CUDA events do), and
// an event never recorded counts as complete.
#pragma once

namespace spillway {

class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks the calling thread until the latest recording has completed.
  virtual void synchronize() = 0;
  // True when the latest recording has completed; never blocks.
  virtual bool query() = 0;
  // Seconds from `earlier`'s latest recording to this one's, both complete;
  // only between events made for timing (Device::new_event(true)).
  virtual double seconds_since(const Event& earlier) const = 0;

 protected:
  Event() = default;
};

}  // namespace spillway
