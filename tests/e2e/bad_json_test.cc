// Every kind of JSON file spillway reads, malformed, through the command
// line: one line naming the file, the line and column, and the problem in
// plain words; never nlohmann's "[json.exception.parse_error.101] ..." text.
#include <gtest/gtest.h>

#include <cstring>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

// A trailing comma on the third line: the same words wherever it is read.
constexpr const char* kBadJson = "{\n  \"a\": 1,\n}\n";
const std::string kProblem =
    ": not valid JSON at line 3, column 1: unexpected '}'; expected string literal (reading object key)\n";

class BadJson : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(200, 3));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  // A copy of a trained micro run's checkpoint, its `file` replaced by `text`.
  std::string broken_checkpoint(const std::string& name, const std::string& file, const std::string& text) {
    if (!fs::exists(dir_ / "good")) {
      const CommandResult r = run_spillway(train("good") + " --data " + (dir_ / "corpus.txt") + " --separator %");
      EXPECT_EQ(r.exit_code, 0) << r.out;
    }
    fs::copy(dir_ / "good/step-0000002", dir_ / name, fs::copy_options::recursive);
    write_file(dir_ / (name + "/" + file), text);
    return dir_ / name;
  }
  std::string train(const std::string& out) {
    return "train --config " + (dir_ / "micro.json") +
           " --vocab 300 --steps 2 --batch 2 --seq 16 --sample-tokens 0 --out " +
           (dir_ / out);
  }
  ScratchDir dir_{"bad_json"};
};

// The whole output: the error line and nothing else.
void expect_only(const CommandResult& r, const std::string& line) {
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out, line);
}

TEST_F(BadJson, ModelConfigGivenByPath) {
  write_file(dir_ / "bad.json", kBadJson);
  expect_only(run_spillway("train --config " + (dir_ / "bad.json") + " --data " + (dir_ / "corpus.txt") + " --out " +
                           (dir_ / "r")),
              "spillway: " + (dir_ / "bad.json") + kProblem);
}

TEST_F(BadJson, RunConfigFile) {
  write_file(dir_ / "run.json", kBadJson);
  expect_only(run_spillway("train " + (dir_ / "run.json") + " --out " + (dir_ / "r")),
              "spillway: " + (dir_ / "run.json") + kProblem);
}

TEST_F(BadJson, EveryJsonFileOfACheckpoint) {
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const std::string model = broken_checkpoint(std::string("broken_") + file, file, kBadJson);
    expect_only(run_spillway("generate --model " + model + " --prompt hi"),
                "spillway: " + (fs::path(model) / file).string() + kProblem);
  }
  // A safetensors header: 8 bytes of length, then the JSON.
  std::string header = "{\"a\": 1,}";
  std::string weights(8, '\0');
  const uint64_t size = header.size();
  std::memcpy(weights.data(), &size, 8);
  const std::string model = broken_checkpoint("broken_weights", "model.safetensors", weights + header);
  expect_only(run_spillway("generate --model " + model + " --prompt hi"),
              "spillway: " + (fs::path(model) / "model.safetensors").string() +
                  ": header is not valid JSON at line 1, column 9: unexpected '}'; expected string literal "
                  "(reading object key)\n");
  // A sharded checkpoint's index, read when there is no model.safetensors.
  const std::string sharded = broken_checkpoint("broken_index", "model.safetensors.index.json", kBadJson);
  fs::remove(fs::path(sharded) / "model.safetensors");
  expect_only(run_spillway("generate --model " + sharded + " --prompt hi"),
              "spillway: " + (fs::path(sharded) / "model.safetensors.index.json").string() + kProblem);
}

TEST_F(BadJson, TrainerStateOfAResumedRun) {
  broken_checkpoint("unused", "trainer_state.json", "{}");  // trains "good"
  fs::copy(dir_ / "good", dir_ / "resume", fs::copy_options::recursive);
  write_file(dir_ / "resume/step-0000002/trainer_state.json", kBadJson);
  expect_only(run_spillway("train --resume --out " + (dir_ / "resume")),
              "spillway: " + (dir_ / "resume/step-0000002/trainer_state.json") + kProblem);
}

TEST_F(BadJson, TokenFileSidecar) {
  ASSERT_EQ(run_spillway("tokenize " + (dir_ / "corpus.txt") + " --separator % --train-vocab 300 --out " +
                         (dir_ / "tok"))
                .exit_code, 0);
  write_file(dir_ / "tok/train.bin.json", kBadJson);
  expect_only(run_spillway(train("r") + " --data " + (dir_ / "tok")),
              "spillway: " + (dir_ / "tok/train.bin.json") + kProblem);
}

TEST_F(BadJson, EmptyAndHugeNumbers) {
  write_file(dir_ / "empty.json", "");
  expect_only(run_spillway("train " + (dir_ / "empty.json") + " --out " + (dir_ / "r")),
              "spillway: " + (dir_ / "empty.json") + ": not valid JSON: there is nothing in it\n");
  std::string config = micro_config_json();
  config.insert(1, "\"rope_scaling\": 1e999, ");
  write_file(dir_ / "huge.json", config);
  expect_only(run_spillway("train --config " + (dir_ / "huge.json") + " --data " + (dir_ / "corpus.txt") + " --out " +
                           (dir_ / "r")),
              "spillway: " + (dir_ / "huge.json") +
                  ": not valid JSON at line 1, column 18: the number 1e999 is too large\n");
}

}  // namespace
}  // namespace spillway::e2e
