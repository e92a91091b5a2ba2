#include "train/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "base/status.h"

namespace spillway::train {
namespace {

// Every pass of every stage and micro-batch, each once, placed after what
// it reads: the order is a schedule.
void expect_complete(int ranks, int chunks, int64_t micro_batches, bool backward) {
  const PipelineTimeline t = pipeline_timeline(ranks, chunks, micro_batches, backward);
  std::set<std::tuple<bool, int, int64_t>> seen;
  for (size_t tick = 0; tick < t.ticks.size(); ++tick) {
    std::set<std::tuple<bool, int, int64_t>> made;
    for (int r = 0; r < ranks; ++r) {
      const auto& p = t.ticks[tick][static_cast<size_t>(r)];
      if (!p) continue;
      const int stage = t.stage_of(r, *p);
      // What it reads was made at an earlier tick.
      if (p->backward) {
        EXPECT_TRUE(seen.count({false, stage, p->micro_batch}));
        if (stage + 1 < t.stages()) {
          EXPECT_TRUE(seen.count({true, stage + 1, p->micro_batch}));
        }
      } else if (stage > 0) {
        EXPECT_TRUE(seen.count({false, stage - 1, p->micro_batch}));
      }
      EXPECT_FALSE(seen.count({p->backward, stage, p->micro_batch})) << "twice";
      made.insert({p->backward, stage, p->micro_batch});
    }
    seen.insert(made.begin(), made.end());  // read from the next tick on
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(t.stages() * micro_batches * (backward ? 2 : 1)));
}

TEST(PipelineSchedule, EveryPassRunsOnceAfterWhatItReads) {
  for (int ranks : {1, 2, 3, 4}) {
    for (int64_t m : {1, 2, 5, 8}) expect_complete(ranks, 1, m, true);
    for (int chunks : {2, 3}) {
      for (int64_t m : {ranks, 2 * ranks, 4 * ranks}) {
        expect_complete(ranks, chunks, m, true);
        expect_complete(ranks, chunks, m, false);
      }
    }
  }
}

// What each tick hands over: every pass's output reaches the rank of the
// stage that reads it, named by the stage and micro-batch it is for, and
// nothing else arrives.
TEST(PipelineSchedule, ArrivalsAreWhatThePassesOfTheTickSend) {
  for (int chunks : {1, 2}) {
    const int ranks = 3;
    const PipelineTimeline t = pipeline_timeline(ranks, chunks, 6, true);
    for (size_t tick = 0; tick < t.ticks.size(); ++tick) {
      std::multiset<std::tuple<int, bool, int, int64_t>> sent, arrived;
      for (int r = 0; r < ranks; ++r) {
        if (const auto& p = t.ticks[tick][static_cast<size_t>(r)]) {
          const int stage = t.stage_of(r, *p);
          if (const auto to = t.receiver(stage, *p)) {
            sent.insert({*to, p->backward, p->backward ? stage - 1 : stage + 1, p->micro_batch});
          }
        }
        for (const PipelineTimeline::Arrival& a : t.arrivals(tick, r)) {
          EXPECT_NE(a.from, r);
          EXPECT_EQ(a.stage % ranks, r) << "a stage this rank does not hold";
          arrived.insert({r, a.gradient, a.stage, a.micro_batch});
        }
      }
      EXPECT_EQ(sent, arrived) << "tick " << tick;
    }
  }
}

// 1F1B's bound: rank r keeps at most ranks - r micro-batches' inputs.
TEST(PipelineSchedule, OneFOneBKeepsFewMicroBatchesInFlight) {
  const int ranks = 4;
  for (int r = 0; r < ranks; ++r) {
    int64_t in_flight = 0, most = 0;
    for (const PipelinePass& p : pipeline_order(r, ranks, 1, 8, true)) {
      in_flight += p.backward ? -1 : 1;
      most = std::max(most, in_flight);
    }
    EXPECT_EQ(most, ranks - r) << "rank " << r;
  }
}

// Four ranks, eight micro-batches: 1F1B idles 2(S-1) of 2m + 2(S-1) ticks
// a rank; two chunks a rank halve the passes' length, so in the same work
// the idle ticks count half as much.
TEST(PipelineSchedule, InterleavingShrinksTheBubble) {
  const PipelineTimeline plain = pipeline_timeline(4, 1, 8, true);
  EXPECT_EQ(plain.ticks.size(), 2u * 8 + 2 * 3);
  EXPECT_NEAR(plain.idle_fraction(), 6.0 / 22.0, 1e-12);
  const PipelineTimeline interleaved = pipeline_timeline(4, 2, 8, true);
  // Each tick half as long: compare the time in plain ticks.
  EXPECT_LT(interleaved.ticks.size() / 2.0, static_cast<double>(plain.ticks.size()));
  EXPECT_LT(interleaved.idle_fraction(), plain.idle_fraction());
}

TEST(PipelineSchedule, InterleavingNeedsMicroBatchesInGroupsOfTheRanks) {
  try {
    pipeline_order(0, 4, 2, 6, true);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "--grad-accum: interleaved stages take micro-batches in groups of --pp; 6 micro-batches a pipeline "
                 "are not a multiple of 4");
  }
}

}  // namespace
}  // namespace spillway::train
