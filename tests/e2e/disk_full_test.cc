// A disk that fills up during a checkpoint write, made with a file size
// limit (RLIMIT_FSIZE, SIGXFSZ ignored so that write() fails with EFBIG, as
// a full disk fails it with ENOSPC): the run ends with one error line naming
// the file and the limit, exit 1, the previous checkpoint intact and named,
// nothing half-written left, and the run resumes once there is room.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <sstream>

#include "e2e/e2e_util.h"
#include "e2e/processes.h"
#include "train/checkpoint.h"

namespace spillway::e2e {
namespace {

using namespace std::chrono_literals;

class DiskFull : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(300, 9));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  std::vector<std::string> train_args(const std::string& extra) const {
    return words_of("train --config " + (dir_ / "micro.json") + " --vocab 300 --data " +
                             (dir_ / "corpus.txt") +
                             " --separator % --batch 2 --seq 16 --steps 10 --checkpoint-every 1 --eval-batches 1"
                             " --sample-tokens 0 --threads 1 --quiet --out " + (dir_ / "run") + " " + extra);
  }
  ScratchDir dir_{"disk_full"};
};

TEST_F(DiskFull, ACheckpointWriteThatHitsTheLimitLeavesThePreviousOne) {
  pid_t pid = start_spillway(train_args("--stop-after 2"), {}, dir_ / "first.log");
  ASSERT_EQ(wait_for(pid, 120s), 0) << read_file(dir_ / "first.log");
  const std::string previous = dir_ / "run/step-0000002";
  const std::string optimizer = read_file(previous + "/optimizer.safetensors");
  const std::string model = read_file(previous + "/model.safetensors");
  // The moments (twice the weights) outgrow the limit, every other file of
  // the run fits under it.
  ASSERT_GT(optimizer.size(), model.size() + 1000);
  const rlim_t limit = optimizer.size() - 1000;

  pid = start_spillway(train_args("--resume"), {}, dir_ / "full.log", [limit] {
    ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: write() fails with EFBIG instead
    const rlimit lim{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &lim);
  });
  ASSERT_EQ(wait_for(pid, 120s), 1) << read_file(dir_ / "full.log");
  const std::string out = read_file(dir_ / "full.log");
  EXPECT_EQ(out, "spillway: " + (dir_ / "run/step-0000003/optimizer.safetensors") +
                     ": cannot write: File too large (the file size limit was hit: see `ulimit -f`); the checkpoint "
                     "of step 3 was not written; earlier checkpoints are untouched\n");

  // The previous checkpoint is as it was and named; nothing of step 3 is left.
  EXPECT_EQ(read_file(previous + "/optimizer.safetensors"), optimizer);
  EXPECT_EQ(read_file(previous + "/model.safetensors"), model);
  EXPECT_EQ(train::resolve_checkpoint(dir_ / "run"), previous);
  for (const auto& e : fs::directory_iterator(dir_ / "run")) {
    EXPECT_FALSE(e.path().filename().string().starts_with("step-0000003")) << e.path();
  }

  // With room again the run resumes from it.
  pid = start_spillway(train_args("--resume --stop-after 4"), {}, dir_ / "again.log");
  ASSERT_EQ(wait_for(pid, 120s), 0) << read_file(dir_ / "again.log");
  EXPECT_EQ(train::resolve_checkpoint(dir_ / "run"), dir_ / "run/step-0000004");
}

}  // namespace
}  // namespace spillway::e2e
