// Every kind of parallelism at once on the CPU backend, ranks as processes,
// through the command line users get: pipeline stages whose sequences are
// split by context parallelism, and the rank grid's four dimensions
// together (dp x pp x cp x tp, 16 ranks), train what one rank trains; the
// checkpoint is the whole model, so a run saved in one layout resumes in
// another.
#include <gtest/gtest.h>

#include <string>

#include "e2e/split_runs.h"

namespace spillway::e2e {
namespace {

class ComposedParallel : public SplitRuns {
 protected:
  // One sequence a micro-batch (context parallelism takes no more).
  ComposedParallel() : SplitRuns("composed_parallel") { schedule_ = "--batch 1 --seq 32 --grad-accum 8"; }
};

TEST_F(ComposedParallel, StagesOfSplitSequencesTrainWhatOneRankTrains) {
  train("one", "");
  train("pp2-cp2", "--nproc-per-node 4 --pp 2 --cp 2");
  expect_same_training("pp2-cp2", "one");
}

// tp innermost, then cp, pp and dp: each of the 16 ranks holds half of two
// of the four layers' matrices (interleaved stages) for a quarter of every
// sequence, of half the step's sequences.
TEST_F(ComposedParallel, AllFourDimensionsTrainWhatOneRankTrains) {
  train("one4", "", "micro4.json");
  train("dp2-pp2-cp2-tp2", "--nproc-per-node 16 --pp 2 --virtual-stages 2 --cp 2 --tp 2", "micro4.json");
  expect_same_training("dp2-pp2-cp2-tp2", "one4");
}

// Saved as tp2 x pp2, resumed as dp4; saved on one rank, resumed in all
// four dimensions.
TEST_F(ComposedParallel, ARunResumesInAnotherLayout) {
  train("one4", "", "micro4.json");
  train("tp-pp-then-dp", "--nproc-per-node 4 --tp 2 --pp 2 --stop-after 5", "micro4.json");
  train("tp-pp-then-dp", "--nproc-per-node 4 --resume", "micro4.json");
  expect_same_training("tp-pp-then-dp", "one4");
  train("one-then-all", "--stop-after 5", "micro4.json");
  train("one-then-all", "--nproc-per-node 8 --pp 2 --cp 2 --tp 2 --resume", "micro4.json");
  expect_same_training("one-then-all", "one4");
}

}  // namespace
}  // namespace spillway::e2e
