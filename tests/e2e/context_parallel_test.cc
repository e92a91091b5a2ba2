// Context-parallel training on the CPU backend, ranks as processes, through
// the command line users get (`--cp C` with `--nproc-per-node`): ranks that
// each take two chunks of every sequence (an early and a late one),
// attention reading every rank's keys and values, train what one rank
// trains, beside data and tensor parallelism; the
// weights are replicated, so a run resumes on any number of ranks; a split
// the run does not allow is one clear error.
#include <gtest/gtest.h>

#include <string>

#include "e2e/split_runs.h"

namespace spillway::e2e {
namespace {

class ContextParallel : public SplitRuns {
 protected:
  // One sequence a micro-batch: the chunks are of the sequence.
  ContextParallel() : SplitRuns("context_parallel") { schedule_ = "--batch 1 --seq 32 --grad-accum 8"; }
};

TEST_F(ContextParallel, RanksSplittingEachSequenceTrainWhatOneRankTrains) {
  train("one", "");
  train("cp2", "--nproc-per-node 2 --cp 2");
  train("cp4", "--nproc-per-node 4 --cp 4");
  train("cp2-dp2", "--nproc-per-node 4 --cp 2");
  // Each chunk's layers split over two ranks too.
  train("cp2-tp2", "--nproc-per-node 4 --cp 2 --tp 2");
  for (const char* run : {"cp2", "cp4", "cp2-dp2", "cp2-tp2"}) expect_same_training(run, "one");
}

TEST_F(ContextParallel, ARunWithSplitSequencesResumesOnOneRank) {
  train("one", "");
  train("moved", "--nproc-per-node 2 --cp 2 --stop-after 5");
  train("moved", "--resume");
  expect_same_training("moved", "one");
}

TEST_F(ContextParallel, ASplitTheRunDoesNotAllowIsOneClearError) {
  schedule_ = "--batch 2 --seq 32 --grad-accum 4";
  const CommandResult batch = run("batch", "--nproc-per-node 2 --cp 2");
  EXPECT_NE(batch.exit_code, 0);
  EXPECT_NE(batch.out.find("takes one sequence a micro-batch (batch 1)"), std::string::npos) << batch.out;
  schedule_ = "--batch 1 --seq 30 --grad-accum 8";
  const CommandResult uneven = run("uneven", "--nproc-per-node 4 --cp 4");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.out.find("--cp: a sequence of 30 tokens does not cut into 8 chunks (two for each of 4 ranks)"),
            std::string::npos)
      << uneven.out;
}

}  // namespace
}  // namespace spillway::e2e
