// The ways a run used to lose work or give a wrong result, each now an error
// before any work or the documented behaviour (docs/training.md), through the
// command line on a micro model.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "e2e/e2e_util.h"
#include "train/token_file.h"

namespace spillway::e2e {
namespace {

class LostWork : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(300, 3));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // A train command line on the micro model; `extra` adds or overrides.
  std::string train(const std::string& out, const std::string& extra, int vocab = 300) const {
    return "train --config " + (dir_ / "micro.json") + " --data " + (dir_ / "corpus.txt") +
           " --separator % --vocab " + std::to_string(vocab) + " --batch 2 --seq 16 --eval-batches 2 --sample-tokens 0 --quiet -o " +
           (dir_ / out) + " " + extra;
  }
  std::vector<std::string> steps_in(const std::string& run) const {
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(dir_ / run)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with("step-")) steps.push_back(name);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
  }
  ScratchDir dir_{"lost_work"};
};

TEST_F(LostWork, AnEmptyValidationSetIsRefusedBeforeTheFirstStep) {
  CommandResult r = run_spillway("tokenize " + (dir_ / "corpus.txt") + " --separator % --train-vocab 300 --validation 0 -o " +
                                 (dir_ / "data"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(TokenFile(dir_ / "data/val.bin").size(), 0u);
  r = run_spillway("train --config " + (dir_ / "micro.json") + " --data " + (dir_ / "data") +
                   " --steps 3 --batch 2 --seq 16 --sample-tokens 0 --quiet -o " + (dir_ / "run"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("spillway: " + (dir_ / "data/val.bin") + ": holds 0 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--validation-fraction 0"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ / "run/latest"));
  EXPECT_FALSE(fs::exists(dir_ / "run/train_log.jsonl"));

  // Validation turned off on purpose: the run ends with its checkpoint.
  r = run_spillway("train --config " + (dir_ / "micro.json") + " --data " + (dir_ / "data") +
                   " --steps 3 --batch 2 --seq 16 --sample-tokens 0 --validation-fraction 0 -o " + (dir_ / "run"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("validation off"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "run/step-0000003/model.safetensors"));
}

TEST_F(LostWork, TheSplitGoesByTokenShareAcrossFilesOfUnequalSize) {
  // A large file of many paragraphs and a small one: the held-out share is
  // a share of the tokens, never a whole file.
  std::string large, small = "A short note about the river.\n";
  for (int i = 0; i < 200; ++i) large += "Paragraph " + std::to_string(i) + ": the cat sees the moon again.\n\n";
  write_file(dir_ / "large.txt", large);
  write_file(dir_ / "small.txt", small);
  CommandResult r = run_spillway("tokenize " + (dir_ / "large.txt") + " " + (dir_ / "small.txt") +
                                 " --train-vocab 300 --validation 0.05 -o " + (dir_ / "data"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const double train = TokenFile(dir_ / "data/train.bin").size(), val = TokenFile(dir_ / "data/val.bin").size();
  EXPECT_GT(val, 0);
  EXPECT_LE(val / (train + val), 0.05);
  EXPECT_GT(val / (train + val), 0.03);
}

TEST_F(LostWork, AnExistingRunIsResumedOrOverwrittenOnlyOnPurpose) {
  ASSERT_EQ(run_spillway(train("run", "--steps 4 --checkpoint-every 2")).exit_code, 0);
  const std::vector<std::string> before = steps_in("run");
  ASSERT_EQ(before, (std::vector<std::string>{"step-0000002", "step-0000004"}));

  CommandResult r = run_spillway(train("run", "--steps 4"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: " + (dir_ / "run") + ": holds a run already; continue it with --resume, or start "
                       "over with --overwrite"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(steps_in("run"), before);

  r = run_spillway(train("run", "--resume"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("the run is finished (step 4 of 4); nothing to resume"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("tok/s"), std::string::npos) << r.out;

  r = run_spillway(train("run", "--resume --overwrite"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("exclude each other"), std::string::npos) << r.out;

  r = run_spillway(train("run", "--steps 3 --overwrite"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(steps_in("run"), (std::vector<std::string>{"step-0000003"}));
}

TEST_F(LostWork, KeepCheckpointsKeepsTheNewestN) {
  ASSERT_EQ(run_spillway(train("three", "--steps 5 --save-every 1 --keep-checkpoints 3")).exit_code, 0);
  EXPECT_EQ(steps_in("three"), (std::vector<std::string>{"step-0000003", "step-0000004", "step-0000005"}));
  ASSERT_EQ(run_spillway(train("all", "--steps 4 --save-every 1 --keep-checkpoints 0")).exit_code, 0);
  EXPECT_EQ(steps_in("all").size(), 4u);
  // The documented default keeps two.
  ASSERT_EQ(run_spillway(train("default", "--steps 4 --save-every 1")).exit_code, 0);
  EXPECT_EQ(steps_in("default").size(), 2u);
}

// Starts `spillway ARGS` with its output in `log`; returns its pid.
pid_t start_spillway(const std::string& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string command = "exec " + std::string(SPILLWAY_BIN) + " " + args + " >" + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST_F(LostWork, SigintWritesAResumableCheckpointAtTheNextStep) {
  const pid_t pid = start_spillway(train("run", "--steps 1000000 --eval-every 0 --checkpoint-every 0"), dir_ / "log");
  ASSERT_GT(pid, 0);
  // Wait until steps are being taken.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (read_file(dir_ / "run/train_log.jsonl").find("\"loss\"") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << read_file(dir_ / "log");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << read_file(dir_ / "log");
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << read_file(dir_ / "log");
  EXPECT_NE(read_file(dir_ / "log").find("stopped by SIGINT"), std::string::npos) << read_file(dir_ / "log");

  // A complete checkpoint, named by latest.
  std::string latest = read_file(dir_ / "run/latest");
  latest = latest.substr(0, latest.find('\n'));
  ASSERT_TRUE(latest.starts_with("step-")) << latest;
  for (const char* file : {"config.json", "model.safetensors", "optimizer.safetensors", "trainer_state.json",
                           "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(dir_ / ("run/" + latest + "/" + file))) << file;
  }
  const int64_t stopped_at = std::stoll(latest.substr(5));
  // It resumes: two more steps from where it stopped.
  CommandResult r = run_spillway(train("run", "--resume --stop-after " + std::to_string(stopped_at + 2)));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("done: " + std::to_string(stopped_at + 2) + " steps"), std::string::npos) << r.out;
}

TEST_F(LostWork, ConfigMistakesAreNamedBeforeAnyWork) {
  write_file(dir_ / "training_args.json", R"({"learning_rate": 3e-4, "num_train_epochs": 3})");
  CommandResult r = run_spillway("train --config " + (dir_ / "training_args.json") + " -o " + (dir_ / "run"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("unknown config key 'learning_rate': --config takes a model's config.json"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("run file"), std::string::npos) << r.out;

  // A config.json's vocab_size is kept, not silently replaced by --vocab's.
  r = run_spillway(train("run", "--steps 2", 400));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("spillway: " + (dir_ / "micro.json") + ": vocab_size is 300 but the tokenizer has"),
            std::string::npos)
      << r.out;
}

TEST(CommandLine, VersionAndShortForms) {
  CommandResult r = run_spillway("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(r.out.starts_with("spillway ")) << r.out;
  r = run_spillway("generate --help");
  for (const char* flag : {"-m,--model", "-p,--prompt", "-n,--max-tokens", "-t,--threads"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  }
  r = run_spillway("train --help");
  for (const char* flag : {"-o,--out", "-p,--prompt", "--keep-checkpoints", "--save-every", "--overwrite", "--threads"}) {
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag << "\n" << r.out;
  }
}

}  // namespace
}  // namespace spillway::e2e
