// Bad input through the command line: one clear line naming the file and the
// problem, a non-zero exit, and nothing half-written left behind.
#include <gtest/gtest.h>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

// Exactly one line starts with "spillway: ", and it holds every part.
void expect_one_error_line(const CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line, error;
  int errors = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("spillway: ", 0) == 0) {
      ++errors;
      error = line;
    }
  }
  ASSERT_EQ(errors, 1) << r.out;
  for (const auto& p : parts) EXPECT_NE(error.find(p), std::string::npos) << "'" << p << "' not in: " << error;
}

bool has_checkpoint_or_temp(const fs::path& run) {
  if (!fs::exists(run)) return false;
  for (const auto& e : fs::directory_iterator(run)) {
    auto name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 || name.find(".tmp") != std::string::npos || name == "latest") return true;
  }
  return false;
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(200, 3));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  std::string train_args(const std::string& out) {
    return "train --config " + (dir_ / "micro.json") + " --vocab 300 --steps 2 --batch 2 --seq 16 --sample-tokens 0 --out " +
           (dir_ / out);
  }
  ScratchDir dir_{"bad_input"};
};

TEST_F(BadInput, MissingAndEmptyCorpus) {
  expect_one_error_line(run_spillway(train_args("r1") + " --data " + (dir_ / "nope.txt")),
                        {"nope.txt", "no such corpus"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "r1"));
  write_file(dir_ / "empty.txt", "");
  expect_one_error_line(run_spillway(train_args("r2") + " --data " + (dir_ / "empty.txt")), {"empty.txt", "empty"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "r2"));
}

TEST_F(BadInput, TruncatedTokenFile) {
  ASSERT_EQ(run_spillway("tokenize " + (dir_ / "corpus.txt") + " --separator % --train-vocab 300 --out " + (dir_ / "tok"))
                .exit_code, 0);
  fs::resize_file(dir_ / "tok/train.bin", fs::file_size(dir_ / "tok/train.bin") - 3);
  expect_one_error_line(run_spillway(train_args("r") + " --data " + (dir_ / "tok")), {"train.bin", "truncated"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "r"));
}

TEST_F(BadInput, UnknownConfigKeyAndPreset) {
  std::string config = micro_config_json();
  config.insert(1, "\"sliding_window\": 64, ");
  write_file(dir_ / "odd.json", config);
  expect_one_error_line(run_spillway("train --config " + (dir_ / "odd.json") + " --data " + (dir_ / "corpus.txt") +
                                     " --out " + (dir_ / "r")),
                        {"odd.json", "unknown config key 'sliding_window'"});
  expect_one_error_line(run_spillway("train --config llama7 --out " + (dir_ / "r")), {"unknown preset 'llama7'"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "r"));
}

TEST_F(BadInput, CorruptForeignAndMismatchedCheckpoints) {
  ASSERT_EQ(run_spillway(train_args("good") + " --data " + (dir_ / "corpus.txt") + " --separator %").exit_code, 0);
  const fs::path ckpt = dir_ / "good/step-0000002";

  // A truncated weights file.
  fs::copy(ckpt, dir_ / "cut", fs::copy_options::recursive);
  fs::resize_file(dir_ / "cut/model.safetensors", fs::file_size(dir_ / "cut/model.safetensors") / 2);
  expect_one_error_line(run_spillway("generate --model " + (dir_ / "cut") + " --prompt hi"),
                        {"model.safetensors", "truncated"});

  // A model folder that is not a spillway run cannot be resumed.
  fs::create_directories(dir_ / "foreign");
  fs::copy(ckpt, dir_ / "foreign/step-0000002", fs::copy_options::recursive);
  write_file(dir_ / "foreign/latest", "step-0000002\n");
  write_file(dir_ / "foreign/step-0000002/trainer_state.json", R"({"global_step": 2})");
  expect_one_error_line(run_spillway("train --resume --out " + (dir_ / "foreign")),
                        {"trainer_state.json", "not a spillway trainer state"});

  // Data tokenized by another tokenizer than the model's.
  ASSERT_EQ(run_spillway("tokenize " + (dir_ / "corpus.txt") + " --separator % --train-vocab 280 --out " + (dir_ / "other"))
                .exit_code, 0);
  expect_one_error_line(run_spillway("finetune --model " + (dir_ / "good") + " --steps 1 --batch 2 --seq 16 --data " +
                                     (dir_ / "other") + " --out " + (dir_ / "ft")),
                        {"tokenizer"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "ft"));
}

TEST_F(BadInput, ImpossibleBudgetsAndUnknownOffloadMode) {
  expect_one_error_line(run_spillway("bench --config tiny --steps 1 --offload sometimes"),
                        {"--offload", "unknown value 'sometimes'"});
  expect_one_error_line(run_spillway("plan --config tiny --seq 64 --recompute sometimes"),
                        {"--recompute", "unknown policy 'sometimes'"});
  expect_one_error_line(run_spillway("plan --config tiny --seq 64 --batch two"), {"--batch", "'two'"});
  expect_one_error_line(run_spillway("bench --config tiny --steps 1 --projections stacked"),
                        {"--projections", "unknown value 'stacked'"});
  expect_one_error_line(run_spillway("plan --config tiny --seq 64 --projections stacked"),
                        {"--projections", "unknown value 'stacked'"});
  expect_one_error_line(run_spillway("plan --config tiny --seq 64 --offload sometimes"),
                        {"--offload", "unknown value 'sometimes'"});
  expect_one_error_line(run_spillway("bench --config tiny --steps 1 --device cpu --bf16-moments"),
                        {"--bf16-moments", "GPU engine"});
  expect_one_error_line(run_spillway("plan --config llama3-8b --seq 8192 --device-mem 2GiB --host-mem 125GiB --bf16-moments"),
                        {"--device-mem", "2.00 GiB"});
  expect_one_error_line(run_spillway("plan --config llama3-8b --seq 8192 --device-mem 76GiB --host-mem 64GiB"),
                        {"--host-mem", "64.00 GiB"});
}

TEST_F(BadInput, RunFilesWithUnknownKeysWrongTypesOrBadSyntax) {
  write_file(dir_ / "typo.toml", "[memory]\nofload = \"on\"\n");
  expect_one_error_line(run_spillway("train " + (dir_ / "typo.toml") + " --out " + (dir_ / "r")),
                        {"typo.toml: unknown key memory.ofload"});
  write_file(dir_ / "word.toml", "[memory]\noffload = \"maybe\"\n");
  expect_one_error_line(run_spillway("bench " + (dir_ / "word.toml")),
                        {"word.toml: memory.offload is \"maybe\"; one of auto, on, off, stream"});
  write_file(dir_ / "type.json", R"({"schedule": {"steps": "ten"}})");
  expect_one_error_line(run_spillway("train " + (dir_ / "type.json") + " --out " + (dir_ / "r")),
                        {"type.json: schedule.steps is \"ten\"; expected a whole number"});
  write_file(dir_ / "syntax.toml", "[schedule]\nsteps = = 3\n");
  expect_one_error_line(run_spillway("plan " + (dir_ / "syntax.toml")), {"syntax.toml:2:9: "});
  expect_one_error_line(run_spillway("train " + (dir_ / "absent.toml")), {"absent.toml", "cannot read"});
  expect_one_error_line(run_spillway("train --steps 0 --out " + (dir_ / "r")), {"--steps", "at least 1"});
  expect_one_error_line(run_spillway("train --dp 2 --out " + (dir_ / "r")), {"--dp", "--nproc-per-node 2"});
  expect_one_error_line(run_spillway("train --cp 2 --out " + (dir_ / "r")), {"--cp", "--nproc-per-node 2"});
  expect_one_error_line(run_spillway("train --pp 2 --out " + (dir_ / "r")), {"--pp", "--nproc-per-node 2"});
  expect_one_error_line(run_spillway("train --tp 2 --out " + (dir_ / "r")), {"--tp", "--nproc-per-node 2"});
  expect_one_error_line(run_spillway("train --nproc-per-node 2 --dp 3 --out " + (dir_ / "r")),
                        {"--dp", "3 x 1 x 1 x 1 = 3", "2 ranks"});
  expect_one_error_line(run_spillway("finetune --steps 1"), {"--model", "finetune needs"});
  EXPECT_FALSE(has_checkpoint_or_temp(dir_ / "r"));
}

}  // namespace
}  // namespace spillway::e2e
