// Checkpoints in a run folder: retention keeps the newest, old ones leave in
// one step (renamed to `.deleting` before deletion), what killed runs left
// (half-written or half-deleted checkpoints, temporaries) is removed at a
// run's start without touching anything else, and a run killed before its
// first `latest` resolves to its step folder.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/llama_weights.h"
#include "model/safetensors.h"

namespace spillway::train {
namespace {

namespace fs = std::filesystem;

class Checkpoint : public ::testing::Test {
 protected:
  Checkpoint()
      : run_(fs::path(::testing::TempDir()) / ("checkpoint_test_" + std::to_string(::getpid()))),
        weights_(model::LlamaWeights::random(config(), 1)),
        optimizer_(config()),
        tokenizer_(train_bpe("some text to train on", 270, {"<|end_of_text|>"})) {
    fs::remove_all(run_);
    fs::create_directories(run_);
  }
  ~Checkpoint() override { fs::remove_all(run_); }

  static model::LlamaConfig config() {
    model::LlamaConfig c;
    c.vocab_size = 270;
    c.hidden_size = 8;
    c.intermediate_size = 16;
    c.num_hidden_layers = 1;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.tie_word_embeddings = true;
    return c;
  }
  std::string save(int64_t step, int64_t keep = 2) {
    return save_checkpoint(run_.string(), step, weights_, optimizer_, tokenizer_, {{"options", nlohmann::json::object()}},
                           keep);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(run_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  void touch(const std::string& rel) const {
    fs::create_directories((run_ / rel).parent_path());
    std::ofstream(run_ / rel) << "x";
  }

  fs::path run_;
  model::LlamaWeights weights_;
  AdamW optimizer_;
  BpeTokenizer tokenizer_;
};

TEST_F(Checkpoint, RetentionKeepsTheNewestAndLeavesNothingBehind) {
  for (int64_t step = 1; step <= 4; ++step) save(step);
  EXPECT_EQ(entries(), (std::vector<std::string>{"latest", "step-0000003", "step-0000004"}));
  EXPECT_EQ(resolve_checkpoint(run_.string()), (run_ / "step-0000004").string());
}

// What a kill during an old checkpoint's deletion leaves: no step folder
// missing files, but a `.deleting` one, which is no checkpoint: it neither
// makes a run folder nor counts towards the kept ones, and a later deletion
// of the same step replaces it.
TEST_F(Checkpoint, AFolderLeftMidDeletionIsNoCheckpoint) {
  save(1);
  fs::rename(run_ / "step-0000001", run_ / "step-0000001.deleting");
  fs::remove(run_ / "step-0000001.deleting/model.safetensors");
  fs::remove(run_ / "latest");
  EXPECT_FALSE(is_run_folder(run_.string()));

  save(2);
  save(3);
  touch("step-0000002.deleting/leftover");  // as if step 2's own deletion had been killed before
  save(4);
  EXPECT_EQ(entries(), (std::vector<std::string>{"latest", "step-0000001.deleting", "step-0000003", "step-0000004"}));
  remove_stale_temporaries(run_.string());
  EXPECT_EQ(entries(), (std::vector<std::string>{"latest", "step-0000003", "step-0000004"}));
}

TEST_F(Checkpoint, StaleTemporariesAreRemovedAndNothingElse) {
  save(1);
  touch("step-0000002.tmp.4242/model.safetensors");
  touch("step-0000002.tmp.4242/model.safetensors.tmp.Ab12Cd");
  touch("step-0000001.deleting/optimizer.safetensors");
  touch("latest.tmp.Zq9xW1");
  touch("run_config.toml.tmp.a1b2c3");
  touch("loss.svg.tmp.QQQQQQ");
  // Not spillway's temporaries: a user's files, and names the patterns do
  // not quite match.
  touch("notes.txt");
  touch("notes.txt.tmp.abcdef");
  touch("latest.tmp.toolong7");
  touch("data/train.bin");
  touch("data/train.bin.tmp.Xy12Zw");
  touch("data/train.bin.json.tmp.Xy12Zw");
  touch("data/tokenizer.json.tmp.000000");
  touch("data/notes.tmp.1");
  touch("stepper.tmp.1");
  remove_stale_temporaries(run_.string());
  std::vector<std::string> data;
  for (const auto& e : fs::directory_iterator(run_ / "data")) data.push_back(e.path().filename().string());
  std::sort(data.begin(), data.end());
  EXPECT_EQ(data, (std::vector<std::string>{"notes.tmp.1", "train.bin"}));
  EXPECT_EQ(entries(), (std::vector<std::string>{"data", "latest", "latest.tmp.toolong7", "notes.txt",
                                                 "notes.txt.tmp.abcdef", "step-0000001", "stepper.tmp.1"}));
  EXPECT_TRUE(fs::exists(run_ / "data/train.bin"));
  EXPECT_TRUE(fs::exists(run_ / "step-0000001/model.safetensors"));
  EXPECT_EQ(resolve_checkpoint(run_.string()), (run_ / "step-0000001").string());
}

TEST_F(Checkpoint, AFolderThatIsNoRunFolderIsLeftAlone) {
  remove_stale_temporaries((run_ / "absent").string());
  touch("readme.md");
  remove_stale_temporaries(run_.string());
  EXPECT_EQ(entries(), (std::vector<std::string>{"readme.md"}));
}

// A step folder an abandoned run renamed into place before `latest` named
// it is replaced whole by the resumed run's checkpoint of that step.
TEST_F(Checkpoint, AnAbandonedStepFolderIsReplacedWhole) {
  save(1);
  const std::string abandoned = save(2);
  touch("step-0000002/from-the-abandoned-run");
  std::ofstream(run_ / "latest") << "step-0000001\n";
  save(2);
  EXPECT_FALSE(fs::exists(run_ / "step-0000002/from-the-abandoned-run"));
  EXPECT_EQ(entries(), (std::vector<std::string>{"latest", "step-0000001", "step-0000002"}));
}

// Killed between its first step folder's rename and `latest`'s write, a
// run resumes from that folder, which is complete.
TEST_F(Checkpoint, ARunWithoutLatestResolvesToItsNewestStepFolder) {
  save(1);
  save(2);
  fs::remove(run_ / "latest");
  touch("step-0000003.tmp.77/model.safetensors");
  EXPECT_TRUE(is_run_folder(run_.string()));
  EXPECT_EQ(resolve_checkpoint(run_.string()), (run_ / "step-0000002").string());
}

TEST_F(Checkpoint, RemovingTheCheckpointsLeavesOtherFiles) {
  save(1);
  save(2);
  touch("step-0000003.tmp.77/model.safetensors");
  touch("latest.tmp.Ab12Cd");
  touch("train_log.jsonl");
  remove_checkpoints(run_.string());
  EXPECT_EQ(entries(), (std::vector<std::string>{"train_log.jsonl"}));
  EXPECT_FALSE(is_run_folder(run_.string()));
}

// What the trainer-state fuzzer found: a format of another JSON type and a
// steps_taken that is no number were library exceptions; each is one line.
TEST_F(Checkpoint, ForeignStateFieldsAreOneLineErrors) {
  const fs::path dir = save(1);
  std::ofstream(dir / "trainer_state.json") << R"({"format": 1})";
  try {
    load_trainer_state(dir.string());
    FAIL() << "a numeric format was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "trainer_state.json").string() +
                                         ": not a spillway trainer state (expected format 'spillway-trainer-state/1')");
  }
  SafetensorsWriter moments;
  moments.add_metadata("steps_taken", "x");
  for (size_t i = 0; i < weights_.tensors().size(); ++i) {
    const auto& t = weights_.tensors()[i];
    moments.add("exp_avg." + t.name, DType::f32, t.shape, optimizer_.m.tensors()[i].data.data());
    moments.add("exp_avg_sq." + t.name, DType::f32, t.shape, optimizer_.v.tensors()[i].data.data());
  }
  moments.write((dir / "optimizer.safetensors").string());
  try {
    load_optimizer(dir.string(), config());
    FAIL() << "steps_taken 'x' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "optimizer.safetensors").string() +
                                         ": metadata steps_taken is 'x'; expected a whole number >= 0");
  }
}

// A checkpoint read tensor by tensor from an engine (CheckpointState) holds
// what one of the same state in host memory does, and the reads a rank
// that does not write makes (walk_checkpoint_reads) are the writer's, in
// its order: with sharded state each is a collective both must join.
TEST_F(Checkpoint, StateReadTensorByTensorIsTheCheckpointOfTheSameState) {
  optimizer_.m = model::LlamaWeights::random(config(), 2);
  optimizer_.v = model::LlamaWeights::random(config(), 3);
  optimizer_.steps_taken = 7;
  const std::string whole = save(1);
  const CheckpointState host = host_checkpoint_state(weights_, optimizer_);
  std::vector<std::pair<StatePart, size_t>> written, walked;
  std::vector<std::pair<StatePart, size_t>>* log = &written;
  CheckpointState engine{config(), [&](StatePart part, size_t i, std::span<float> out) {
                           log->emplace_back(part, i);
                           host.read(part, i, out);
                         },
                         7};
  const std::string read = save_checkpoint(run_.string(), 2, engine, tokenizer_, {{"options", nlohmann::json::object()}});
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    std::ifstream a(fs::path(whole) / file, std::ios::binary), b(fs::path(read) / file, std::ios::binary);
    const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
    EXPECT_FALSE(x.empty());
    EXPECT_EQ(x, y) << file;
  }
  EXPECT_EQ(written.size(), 3 * weights_.tensors().size());  // each tensor's master and moments, once
  log = &walked;
  walk_checkpoint_reads(engine);
  EXPECT_EQ(walked, written);
}

}  // namespace
}  // namespace spillway::train
