#include "device/cpu/cpu_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <latch>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "device/cpu/cpu_event.h"

namespace spillway {
namespace {

using std::chrono::microseconds;

void sleep_us(int us) { std::this_thread::sleep_for(microseconds(us)); }

TEST(CpuStream, RunsWorkInTheOrderItWasEnqueued) {
  CpuStream stream("cpu:compute");
  std::vector<int> seen;  // touched only by the stream's worker until synchronize()
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    int pause = rng() % 50 == 0 ? 200 : 0;
    stream.enqueue([&seen, i, pause] {
      if (pause) sleep_us(pause);
      seen.push_back(i);
    });
  }
  stream.synchronize();
  ASSERT_EQ(seen.size(), 2000u);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(seen[i], i);
}

// How stream B's wait meets stream A's record in one round of the ping-pong.
enum class Race {
  producer_slow,      // A sleeps, so B reaches its wait long before A's marker
  producer_finished,  // A is drained before B's wait is enqueued
  consumer_slow,      // B is busy when A's marker completes
  random_mix,
};

// A writes a fresh pattern into a shared buffer and records `written`; B
// waits on it, checks the whole pattern and records `read`; A waits on
// `read` before the next round's writes. The same two events are
// re-recorded every round. If either wait let its stream run ahead, B would
// see a stale or half-written pattern (A's slow start makes that likely).
void ping_pong(Race race, int rounds, uint64_t seed) {
  CpuStream a("cpu:a");
  CpuStream b("cpu:b");
  CpuEvent written, read;
  std::vector<int64_t> buffer(4099, -1);
  std::atomic<int> writes_done{-1};
  std::atomic<int> bad_rounds{0};
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int round = 0; round < rounds; ++round) {
    Race r = race == Race::random_mix ? static_cast<Race>(rng() % 3) : race;
    int producer_pause = r == Race::producer_slow ? 300 + static_cast<int>(rng() % 700) : 0;
    int consumer_pause = r == Race::consumer_slow ? 300 + static_cast<int>(rng() % 700) : 0;

    a.wait(read);
    a.enqueue([&, round, producer_pause] {
      if (producer_pause) sleep_us(producer_pause);
      for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = round * 1000003LL + static_cast<int64_t>(i);
      writes_done.store(round);
    });
    a.record(written);
    if (r == Race::producer_finished) {
      a.synchronize();
      ASSERT_TRUE(written.query());
    }

    if (consumer_pause) b.enqueue([consumer_pause] { sleep_us(consumer_pause); });
    b.wait(written);
    b.enqueue([&, round] {
      bool ok = writes_done.load() == round;
      for (size_t i = 0; i < buffer.size(); ++i) {
        ok = ok && buffer[i] == round * 1000003LL + static_cast<int64_t>(i);
      }
      if (!ok) bad_rounds.fetch_add(1);
    });
    b.record(read);
  }
  a.synchronize();
  b.synchronize();
  EXPECT_EQ(bad_rounds.load(), 0);
  EXPECT_EQ(writes_done.load(), rounds - 1);
}

TEST(CpuStream, WaitingStreamNeverRunsAheadOfASlowProducer) { ping_pong(Race::producer_slow, 150, 1); }
TEST(CpuStream, WaitOnAnAlreadyCompletedRecordDoesNotBlock) { ping_pong(Race::producer_finished, 300, 2); }
TEST(CpuStream, EventCompletingWhileTheWaiterIsBusyStillOrders) { ping_pong(Race::consumer_slow, 150, 3); }
TEST(CpuStream, EventOrderingHoldsOverAMixOfRaces) { ping_pong(Race::random_mix, 400, 4); }

TEST(CpuEvent, NeverRecordedIsCompleteAndRecordedCompletesWhenReached) {
  CpuStream stream("cpu:compute");
  CpuEvent event;
  EXPECT_TRUE(event.query());
  event.synchronize();

  std::latch gate(1);
  stream.enqueue([&] { gate.wait(); });
  stream.record(event);
  EXPECT_FALSE(event.query());
  gate.count_down();
  event.synchronize();
  EXPECT_TRUE(event.query());
  stream.synchronize();
}

TEST(CpuEvent, AWaitKeepsTheGenerationItSawWhenReRecorded) {
  CpuStream a("cpu:a"), b("cpu:b"), c("cpu:c");
  CpuEvent event;
  std::latch a_gate(1), b_gate(1);
  a.enqueue([&] { a_gate.wait(); });
  a.record(event);  // generation 1: held back by a_gate
  // b reaches its wait only after the re-record below, so a wait that looked
  // at the event when it ran (not when it was enqueued) would be released.
  b.enqueue([&] { b_gate.wait(); });
  b.wait(event);
  std::atomic<bool> b_ran{false};
  b.enqueue([&] { b_ran = true; });

  c.record(event);  // generation 2 completes at once on an idle stream
  c.synchronize();
  event.synchronize();
  EXPECT_TRUE(event.query());  // the event reports its latest recording
  b_gate.count_down();
  sleep_us(20000);             // give b every chance to run ahead wrongly
  EXPECT_FALSE(b_ran.load());  // b still waits for generation 1

  a_gate.count_down();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
  a.synchronize();
}

TEST(CpuEvent, AWaitEnqueuedBeforeTheRecordDoesNotWaitForIt) {
  // As with CUDA events, wait() sees only recordings made before it.
  CpuStream a("cpu:a"), b("cpu:b");
  CpuEvent event;
  std::latch gate(1);
  a.enqueue([&] { gate.wait(); });
  b.wait(event);
  a.record(event);
  std::atomic<bool> b_ran{false};
  b.enqueue([&] { b_ran = true; });
  b.synchronize();  // would hang if b waited for a's gated record
  EXPECT_TRUE(b_ran.load());
  EXPECT_FALSE(event.query());
  gate.count_down();
  a.synchronize();
  EXPECT_TRUE(event.query());
}

TEST(CpuEvent, MayBeDestroyedWhileItsRecordIsPending) {
  CpuStream a("cpu:a"), b("cpu:b");
  std::latch gate(1);
  a.enqueue([&] { gate.wait(); });
  {
    CpuEvent event;
    a.record(event);
    b.wait(event);
  }
  std::atomic<bool> b_ran{false};
  b.enqueue([&] { b_ran = true; });
  sleep_us(5000);
  EXPECT_FALSE(b_ran.load());
  gate.count_down();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
}

TEST(CpuStream, AnExceptionIsRethrownBySynchronizeAndLaterWorkIsDropped) {
  CpuStream stream("cpu:compute");
  CpuEvent event;
  std::atomic<int> ran_after{0};
  stream.enqueue([] { throw std::runtime_error("kernel exploded"); });
  stream.enqueue([&] { ran_after.fetch_add(1); });
  stream.enqueue([] { throw std::logic_error("second failure"); });
  stream.record(event);
  event.synchronize();  // markers still complete, so waiters are not stranded
  try {
    stream.synchronize();
    FAIL() << "synchronize() did not rethrow";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "kernel exploded");
  }
  EXPECT_EQ(ran_after.load(), 0);
  stream.synchronize();  // reported once, then the stream is clean
  stream.enqueue([&] { ran_after.fetch_add(1); });
  stream.synchronize();
  EXPECT_EQ(ran_after.load(), 1);
}

TEST(CpuStream, SynchronizeFromItsOwnWorkIsAnErrorNotADeadlock) {
  CpuStream stream("cpu:compute");
  stream.enqueue([&] { stream.synchronize(); });
  try {
    stream.synchronize();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu:compute: synchronize() called from the stream's own work"),
              std::string::npos) << e.what();
  }
}

TEST(CpuStream, RejectsOtherBackendsEvents) {
  class ForeignEvent final : public Event {
   public:
    void synchronize() override {}
    bool query() override { return true; }
    double seconds_since(const Event&) const override { return 0; }
  } foreign;
  CpuStream stream("cpu:compute");
  EXPECT_THROW(stream.record(foreign), Error);
  EXPECT_THROW(stream.wait(foreign), Error);
  EXPECT_THROW(stream.enqueue(nullptr), Error);
}

TEST(CpuStream, DestructorFinishesQueuedWork) {
  std::atomic<int> done{0};
  {
    CpuStream stream("cpu:compute");
    for (int i = 0; i < 50; ++i) stream.enqueue([&] { sleep_us(100); done.fetch_add(1); });
  }
  EXPECT_EQ(done.load(), 50);
}

// A step's copy pattern: host → device on h2d, a kernel on compute, device →
// host on d2h, each ordered after the one before by an event. The source is
// rewritten every round, so a copy that ran early would copy stale bytes.
TEST(CpuDevice, CopiesOnThreeStreamsFollowTheirEvents) {
  auto device = make_cpu_device(1 << 20, 1 << 20);
  auto& dev = static_cast<CpuDevice&>(*device);
  auto h2d_done = device->new_event();
  auto kernel_done = device->new_event();
  auto d2h_done = device->new_event();
  std::mt19937_64 rng(11);
  for (uint64_t n : {1ull, 255ull, 4099ull, 65537ull}) {
    auto* src = static_cast<unsigned char*>(device->host_memory().allocate(n, "src"));
    auto* dst = static_cast<unsigned char*>(device->host_memory().allocate(n, "dst"));
    auto* on_device = static_cast<unsigned char*>(device->device_memory().allocate(n, "buffer"));
    EXPECT_EQ(device->device_memory().in_use(), MemorySpace::accounted_bytes(n));
    EXPECT_EQ(device->host_memory().in_use(), 2 * MemorySpace::accounted_bytes(n));
    for (int round = 0; round < 20; ++round) {
      std::vector<unsigned char> want(n);
      // The host writes the source on the h2d stream, after the previous
      // round's copy out of it.
      auto fresh = std::make_shared<std::vector<unsigned char>>(n);
      for (auto& x : *fresh) x = static_cast<unsigned char>(rng());
      for (uint64_t i = 0; i < n; ++i) want[i] = static_cast<unsigned char>((*fresh)[i] * 3 + 1);
      dev.cpu_stream(StreamKind::h2d).wait(*d2h_done);
      dev.cpu_stream(StreamKind::h2d).enqueue([src, fresh, n] {
        sleep_us(200);
        std::memcpy(src, fresh->data(), n);
      });
      device->copy_async(on_device, src, n, device->stream(StreamKind::h2d));
      device->stream(StreamKind::h2d).record(*h2d_done);

      device->stream(StreamKind::compute).wait(*h2d_done);
      dev.cpu_stream(StreamKind::compute).enqueue([on_device, n] {
        for (uint64_t i = 0; i < n; ++i) on_device[i] = static_cast<unsigned char>(on_device[i] * 3 + 1);
      });
      device->stream(StreamKind::compute).record(*kernel_done);

      device->stream(StreamKind::d2h).wait(*kernel_done);
      device->copy_async(dst, on_device, n, device->stream(StreamKind::d2h));
      device->stream(StreamKind::d2h).record(*d2h_done);
      device->stream(StreamKind::d2h).synchronize();
      ASSERT_EQ(std::memcmp(dst, want.data(), n), 0) << "n=" << n << " round=" << round;
    }
    device->synchronize();
    device->host_memory().free(src);
    device->host_memory().free(dst);
    device->device_memory().free(on_device);
  }
}

TEST(CpuDevice, SpacesAreNamedAndBudgetedApart) {
  auto device = make_cpu_device(1 << 20, 4 << 20);
  EXPECT_EQ(device->name(), "cpu");
  EXPECT_EQ(device->device_memory().name(), "cpu:device");
  EXPECT_EQ(device->host_memory().name(), "cpu:pinned_host");
  EXPECT_EQ(device->device_memory().budget(), 1u << 20);
  EXPECT_EQ(device->host_memory().budget(), 4u << 20);
  void* host = device->host_memory().allocate(3 << 20, "offloaded activations");
  try {
    device->device_memory().allocate(3 << 20, "activations");
    FAIL() << "device budget not enforced";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cpu:device: cannot allocate 'activations'", 0), 0u) << e.what();
  }
  EXPECT_EQ(device->device_memory().in_use(), 0u);
  device->host_memory().free(host);
  EXPECT_EQ(device->stream(StreamKind::compute).name(), "cpu:compute");
  EXPECT_EQ(device->stream(StreamKind::comm).name(), "cpu:comm");
  EXPECT_EQ(make_cpu_device()->device_memory().budget(), MemorySpace::kUnlimited);
}

TEST(CpuDevice, SynchronizeDrainsEveryStreamAndReportsAFailure) {
  auto device = make_cpu_device();
  auto& dev = static_cast<CpuDevice&>(*device);
  std::atomic<bool> slow_done{false};
  dev.cpu_stream(StreamKind::d2h).enqueue([] { throw Error("copy", "failed"); });
  dev.cpu_stream(StreamKind::comm).enqueue([&] { sleep_us(20000); slow_done = true; });
  EXPECT_THROW(device->synchronize(), Error);
  EXPECT_TRUE(slow_done.load());
  device->synchronize();
}

}  // namespace
// zero_async is ordered like a copy: after the work before it on its stream.
TEST(CpuDevice, ZeroesInStreamOrder) {
  auto device = make_cpu_device();
  auto& dev = static_cast<CpuDevice&>(*device);
  std::vector<unsigned char> buffer(10000, 0xab);
  dev.cpu_stream(StreamKind::h2d).enqueue([] { sleep_us(2000); });
  device->zero_async(buffer.data() + 100, 9000, device->stream(StreamKind::h2d));
  EXPECT_EQ(buffer[100], 0xab);  // still queued behind the sleep
  device->synchronize();
  for (size_t i = 0; i < buffer.size(); ++i) ASSERT_EQ(buffer[i], i >= 100 && i < 9100 ? 0 : 0xab) << i;
  EXPECT_THROW(device->zero_async(nullptr, 8, device->stream(StreamKind::h2d)), Error);
}

// Timed events measure the work between their recordings.
TEST(CpuDevice, TimedEventsMeasureTheWorkBetweenThem) {
  auto device = make_cpu_device();
  auto& dev = static_cast<CpuDevice&>(*device);
  auto start = device->new_event(/*timed=*/true), end = device->new_event(/*timed=*/true);
  CpuStream& s = dev.cpu_stream(StreamKind::compute);
  s.record(*start);
  s.enqueue([] { sleep_us(20000); });
  s.record(*end);
  s.synchronize();
  EXPECT_GE(end->seconds_since(*start), 0.019);
  EXPECT_LT(end->seconds_since(*start), 1.0);
}

}  // namespace spillway
