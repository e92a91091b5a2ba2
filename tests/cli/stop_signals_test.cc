#include "cli/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace spillway::cli {
namespace {

// A library's thread that unblocked SIGTERM for itself (as the CUDA
// driver's threads may) takes the process's signal; the waiting thread
// still hears of it, and the process does not end.
TEST(StopSignals, ASignalAnotherThreadTakesStillReachesWait) {
  StopSignals stop;
  std::atomic<bool> ready{false}, done{false};
  std::thread library([&] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    ready = true;
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (!ready) std::this_thread::yield();
  ::kill(::getpid(), SIGTERM);
  EXPECT_EQ(stop.wait(), SIGTERM);
  done = true;
  library.join();
}

TEST(StopSignals, WakeEndsTheWaitWithoutASignal) {
  StopSignals stop;
  stop.wake();
  EXPECT_EQ(stop.wait(), 0);
}

void marker(int) {}

TEST(StopSignals, PutsThePreviousHandlersAndMaskBack) {
  struct sigaction mine {};
  mine.sa_handler = marker;
  sigemptyset(&mine.sa_mask);
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGINT, &mine, &before), 0);
  sigset_t mask_before;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask_before);
  {
    StopSignals stop;
    sigset_t inside;
    pthread_sigmask(SIG_SETMASK, nullptr, &inside);
    EXPECT_EQ(sigismember(&inside, SIGINT), 1);  // threads started now keep it blocked
    EXPECT_EQ(sigismember(&inside, SIGTERM), 1);
  }
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, &marker);
  sigset_t mask_after;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask_after);
  EXPECT_EQ(sigismember(&mask_after, SIGINT), sigismember(&mask_before, SIGINT));
  EXPECT_EQ(sigismember(&mask_after, SIGTERM), sigismember(&mask_before, SIGTERM));
  ::sigaction(SIGINT, &before, nullptr);
}

}  // namespace
}  // namespace spillway::cli
