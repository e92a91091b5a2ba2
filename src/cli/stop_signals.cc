#include "cli/stop_signals.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include "base/status.h"

namespace spillway::cli {

namespace {

int g_pipe[2] = {-1, -1};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

struct sigaction g_previous_int, g_previous_term, g_previous_pipe;

void on_stop_signal(int signal_number) {
  const int saved = errno;
  const char byte = static_cast<char>(signal_number);
  [[maybe_unused]] const ssize_t written = ::write(g_pipe[1], &byte, 1);
  errno = saved;
}

}  // namespace

StopSignals::StopSignals() {
  SPW_CHECK(g_pipe[0] < 0, "stop signals", "already taken");
  SPW_CHECK(::pipe(g_pipe) == 0, "stop signals", "cannot make a pipe");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &action, &g_previous_int);
  ::sigaction(SIGTERM, &action, &g_previous_term);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &g_previous_pipe);
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, &previous_mask_);
}

StopSignals::~StopSignals() {
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGPIPE, &g_previous_pipe, nullptr);
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

int StopSignals::wait() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  char byte = 0;
  for (;;) {
    const ssize_t got = ::read(g_pipe[0], &byte, 1);
    if (got == 1) return static_cast<unsigned char>(byte);
    if (got < 0 && errno == EINTR) continue;
    return 0;
  }
}

void StopSignals::wake() { on_stop_signal(0); }

}  // namespace spillway::cli
