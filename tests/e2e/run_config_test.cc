// Run configuration files through the command line: a run from a file and
// the same run from flags write the same checkpoints; the configuration a
// run writes runs it again; a resume keeps its schedule; --help works
// whatever the environment holds.
#include <gtest/gtest.h>

#include <cstdlib>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

class RunConfigE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(300, 11));
    write_file(dir_ / "micro.json", micro_config_json());
    write_file(dir_ / "run.toml", "[model]\nconfig = \"" + (dir_ / "micro.json") + "\"\n" + "[data]\npaths = [\"" +
                                      (dir_ / "corpus.txt") + "\"]\n" +
                                      "separator = \"%\"\nvocab_size = 300\n"
                                      "[optimizer]\nlr = 1e-2\nwarmup = 2\n"
                                      "[schedule]\nsteps = 6\nbatch = 4\nseq = 32\neval_every = 0\n"
                                      "checkpoint_every = 2\n"
                                      "[sample]\ntokens = 0\n");
  }
  // The same run as run.toml, in flags.
  std::string flags() const {
    return " --config " + (dir_ / "micro.json") + " --data " + (dir_ / "corpus.txt") +
           " --separator % --vocab 300 --lr 1e-2 --warmup 2 --steps 6 --batch 4 --seq 32 --eval-every 0"
           " --checkpoint-every 2 --sample-tokens 0";
  }
  void expect_same_checkpoints(const std::string& a, const std::string& b) {
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      const std::string x = read_file(dir_ / (a + "/step-0000006/" + file));
      const std::string y = read_file(dir_ / (b + "/step-0000006/" + file));
      ASSERT_GT(x.size(), 1000u) << a << "/" << file;
      EXPECT_TRUE(x == y) << file << " differs between " << a << " and " << b;
    }
  }
  ScratchDir dir_{"run_config_e2e"};
};

TEST_F(RunConfigE2E, AFileAndTheSameFlagsWriteTheSameCheckpoints) {
  const CommandResult file = run_spillway("train " + (dir_ / "run.toml") + " --out " + (dir_ / "file"));
  ASSERT_EQ(file.exit_code, 0) << file.out;
  const CommandResult flag = run_spillway("train" + flags() + " --out " + (dir_ / "flags"));
  ASSERT_EQ(flag.exit_code, 0) << flag.out;
  expect_same_checkpoints("file", "flags");

  // What the run wrote down runs it again.
  const std::string written = read_file(dir_ / "flags/run_config.toml");
  EXPECT_NE(written.find("[memory]"), std::string::npos) << written;
  const CommandResult again = run_spillway("train " + (dir_ / "flags/run_config.toml") + " --out " + (dir_ / "again"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  expect_same_checkpoints("flags", "again");
}

TEST_F(RunConfigE2E, AResumeKeepsTheScheduleItStartedWith) {
  const std::string run = " --out " + (dir_ / "halves");
  ASSERT_EQ(run_spillway("train " + (dir_ / "run.toml") + run + " --stop-after 3").exit_code, 0);
  const CommandResult rest = run_spillway("train " + (dir_ / "run.toml") + run + " --resume --lr 99 --steps 50");
  ASSERT_EQ(rest.exit_code, 0) << rest.out;
  EXPECT_NE(rest.out.find("done: 6 steps"), std::string::npos) << rest.out;
  ASSERT_EQ(run_spillway("train " + (dir_ / "run.toml") + " --out " + (dir_ / "straight")).exit_code, 0);
  expect_same_checkpoints("straight", "halves");
}

// SPILLWAY_DEVICE_MEM=lots spillway --help: help reads no variable, and a
// command that uses the malformed one says so in one line.
TEST(RunConfigHelp, WorksWhateverTheEnvironmentHolds) {
  ::setenv("SPILLWAY_DEVICE_MEM", "lots", 1);  // the children inherit it
  for (const char* command : {"--help", "train --help", "finetune --help", "bench --help", "plan --help"}) {
    const CommandResult r = run_spillway(command);
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  }
  const CommandResult used = run_spillway("plan --config tiny --seq 64");
  EXPECT_EQ(used.exit_code, 1) << used.out;
  EXPECT_EQ(used.out, "spillway: SPILLWAY_DEVICE_MEM: 'lots' is not a byte size (try 24GiB, 512MB or 4096)\n");
  const CommandResult overridden = run_spillway("plan --config tiny --seq 64 --device-mem 8GiB");
  EXPECT_EQ(overridden.exit_code, 0) << overridden.out;
  ::unsetenv("SPILLWAY_DEVICE_MEM");
}

}  // namespace
}  // namespace spillway::e2e
