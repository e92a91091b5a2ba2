// An in-order queue of work on a device. Streams run independently of each
// other; the only ordering between two streams is the one an Event gives.
#pragma once

#include <string>

#include "device/event.h"

namespace spillway {

class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  const std::string& name() const { return name_; }

  // Marks the point after all work enqueued so far on this stream; the event
  // completes when the stream reaches it.
  virtual void record(Event& event) = 0;
  // Work enqueued on this stream after this call starts only once the
  // recording `event` held when wait() was called has completed. A later
  // re-recording of the event does not affect this wait.
  virtual void wait(const Event& event) = 0;
  // Blocks until all work enqueued so far has run; rethrows the first error
  // that work raised.
  virtual void synchronize() = 0;

 protected:
  explicit Stream(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

}  // namespace spillway
