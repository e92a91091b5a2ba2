// spillway train / finetune / generate, end to end, through the command line
// and the library, on a small generated corpus and a micro model.
#include <gtest/gtest.h>

#include <cmath>

#include "e2e/e2e_util.h"
#include "nlohmann/json.hpp"
#include "train/trainer.h"

namespace spillway::e2e {
namespace {

class TrainE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(400, 7));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  train::RunConfig options(const std::string& run, int64_t steps) {
    train::RunConfig o;
    o.run.out = dir_ / run;
    o.model.config = dir_ / "micro.json";
    o.data.paths = {dir_ / "corpus.txt"};
    o.data.document_separator = "%";
    o.data.vocab_size = 300;
    o.schedule.steps = steps;
    o.schedule.batch = 4;
    o.schedule.seq = 32;
    o.optimizer.lr = 1e-2;
    o.optimizer.min_lr = 1e-3;
    o.optimizer.warmup = 5;
    o.schedule.eval_every = 0;
    o.schedule.eval_batches = 4;
    o.schedule.checkpoint_every = 0;
    o.sample.tokens = 0;
    o.run.quiet = true;
    return o;
  }
  ScratchDir dir_{"train_e2e"};
};

TEST_F(TrainE2E, LossFallsBelowTheUnigramEntropy) {
  train::TrainResult r = train::train_model(options("run", 80));
  EXPECT_LT(r.validation_loss, r.unigram_entropy - 1.0) << "unigram entropy " << r.unigram_entropy;
  EXPECT_LT(r.train_loss, std::log(300.0) - 2.0);
  EXPECT_TRUE(fs::exists(dir_ / "run/latest"));
  EXPECT_TRUE(fs::exists(dir_ / "run/loss.svg"));
  // One JSON object per line, with a step and a loss for every step.
  std::istringstream log(read_file(dir_ / "run/train_log.jsonl"));
  std::string line;
  int steps = 0;
  while (std::getline(log, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) ++steps;
  }
  EXPECT_EQ(steps, 80);
}

TEST_F(TrainE2E, TheStepHookHearsEachStepsRecordAndCanStopTheRun) {
  std::vector<nlohmann::json> records;
  train::TrainResult r = train::train_model(options("hooked", 10), {}, {}, [&](const nlohmann::json& record) {
    records.push_back(record);
    return record["step"] < 4;
  });
  EXPECT_TRUE(r.stopped_by_caller);
  EXPECT_EQ(r.stop_signal, 0);
  EXPECT_EQ(r.steps_done, 4);
  EXPECT_TRUE(fs::exists(dir_ / "hooked/step-0000004/model.safetensors"));
  ASSERT_EQ(records.size(), 4u);
  // What the hook heard is what the log kept.
  std::istringstream log(read_file(dir_ / "hooked/train_log.jsonl"));
  std::string line;
  size_t i = 0;
  while (std::getline(log, line)) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) EXPECT_EQ(j, records.at(i++));
    else if (j["event"] == "stopped") EXPECT_EQ(j["by"], "caller");
  }
  EXPECT_EQ(i, 4u);
}

TEST_F(TrainE2E, ResumeIsBitIdentical) {
  train::RunConfig straight = options("straight", 10);
  straight.schedule.checkpoint_every = 3;
  straight.schedule.eval_every = 4;
  train::train_model(straight);

  train::RunConfig first = options("halves", 10);
  first.schedule.checkpoint_every = 3;
  first.schedule.eval_every = 4;
  first.schedule.stop_after = 5;
  train::train_model(first);
  train::RunConfig rest = options("halves", 10);
  rest.run.resume = true;
  rest.optimizer.lr = 99;  // ignored: a resumed run keeps the options it started with
  train::TrainResult r = train::train_model(rest);
  EXPECT_EQ(r.steps_done, 10);

  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    std::string a = read_file(dir_ / ("straight/step-0000010/" + std::string(file)));
    std::string b = read_file(dir_ / ("halves/step-0000010/" + std::string(file)));
    ASSERT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << file << " differs between the straight and the resumed run";
  }
}

TEST_F(TrainE2E, CommandLineTrainsGeneratesAndFinetunes) {
  const std::string common = " --data " + (dir_ / "corpus.txt") + " --separator % --batch 4 --seq 32 --eval-every 0 "
                             "--checkpoint-every 0 --warmup 2 --lr 1e-2";
  CommandResult t = run_spillway("train --config " + (dir_ / "micro.json") + " --vocab 300 --steps 12 --out " +
                                 (dir_ / "cli") + common + " --sample-tokens 10");
  ASSERT_EQ(t.exit_code, 0) << t.out;
  EXPECT_NE(t.out.find("validation loss"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("sample:"), std::string::npos) << t.out;

  CommandResult g1 = run_spillway("generate --model " + (dir_ / "cli") + " --prompt 'The cat' --max-tokens 12 --seed 5");
  CommandResult g2 = run_spillway("generate --model " + (dir_ / "cli") + " --prompt 'The cat' --max-tokens 12 --seed 5");
  ASSERT_EQ(g1.exit_code, 0) << g1.out;
  EXPECT_EQ(g1.out, g2.out);
  EXPECT_EQ(g1.out.rfind("The cat", 0), 0u) << g1.out;

  CommandResult f = run_spillway("finetune --model " + (dir_ / "cli") + " --steps 4 --out " + (dir_ / "ft") + common +
                                 " --sample-tokens 0");
  ASSERT_EQ(f.exit_code, 0) << f.out;
  EXPECT_TRUE(fs::exists(dir_ / "ft/step-0000004/model.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "ft/step-0000004/tokenizer.json"));
}

// A barely trained model's sample may cut a character's bytes apart: the
// log writes them as U+FFFD, and the run still ends as it should.
TEST_F(TrainE2E, ASampleThatIsNotUtf8IsLoggedNotFatal) {
  train::RunConfig o = options("broken_sample", 2);
  o.sample.tokens = 4;
  const train::TrainResult r = train::train_model(
      o, [](const model::LlamaWeights&, const Tokenizer&, const train::SampleConfig&, uint64_t) {
        return std::string("ok \xe2\x82 cut");
      });
  EXPECT_EQ(r.sample, "ok \xe2\x82 cut");
  const std::string log = read_file(dir_ / "broken_sample/train_log.jsonl");
  EXPECT_NE(log.find("\"text\":\"ok \xef\xbf\xbd cut\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"event\":\"end\""), std::string::npos) << log;
}

}  // namespace
}  // namespace spillway::e2e
