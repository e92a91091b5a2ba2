// SIGINT and SIGTERM as something one thread waits for. A handler, not
// sigwait alone: sigwait sees a signal only while every thread blocks it,
// and threads that libraries start (the CUDA driver's among them) need not
// keep the mask they were started with; a signal one of them took would
// then end the process. The signals stay blocked in the threads started
// after the constructor, so that they reach the one in wait() (or a
// library's that unblocked them); the handler writes the signal's number
// to a pipe, which wait() reads.
#pragma once

#include <signal.h>

namespace spillway::cli {

class StopSignals {
 public:
  // Installs the handlers (one StopSignals at a time), blocks the signals
  // in this thread, and ignores SIGPIPE: a closed client socket must not
  // end the process.
  StopSignals();
  // Puts the previous handlers and this thread's mask back.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Blocks until SIGINT or SIGTERM arrives (returns it) or wake() is called
  // (returns 0); the signals are unblocked in the calling thread.
  int wait();
  void wake();

 private:
  sigset_t previous_mask_;
};

}  // namespace spillway::cli
