// What a training run does with faults that come from its own state rather
// than its flags: a damaged trainer_state.json, steps whose loss is not
// finite, a sequence past the model's context. Each gives one line naming
// the thing and exit 1, or the documented behaviour (docs/training.md).
#include <gtest/gtest.h>

#include <cmath>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

using nlohmann::json;

class TrainingFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", make_corpus(300, 3));
    write_file(dir_ / "micro.json", micro_config_json());
  }
  std::string data_flags(int seq = 16) const {
    return " --data " + (dir_ / "corpus.txt") + " --separator % --batch 2 --seq " + std::to_string(seq) +
           " --eval-batches 2 --sample-tokens 0 --quiet ";
  }
  std::string train(const std::string& out, const std::string& extra, int seq = 16) const {
    return "train --config " + (dir_ / "micro.json") + " --vocab 300 -o " + (dir_ / out) + data_flags(seq) + extra;
  }
  // The one line a failed command printed.
  static std::string error_line(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 1) << r.out;
    std::string out = r.out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << "more than one line: " << r.out;
    return out;
  }
  ScratchDir dir_{"training_faults"};
};

TEST_F(TrainingFaults, ADamagedTrainerStateIsRefusedNotTrusted) {
  ASSERT_EQ(run_spillway(train("run", "--steps 4 --stop-after 2")).exit_code, 0);
  const std::string state_path = dir_ / "run/step-0000002/trainer_state.json";
  const json good = json::parse(read_file(state_path));
  struct Case {
    std::function<void(json&)> damage;
    std::string error;
  };
  const std::vector<Case> cases = {
      // Once a hang: the sampler skipped 2^40 draws one by one.
      {[](json& j) { j["sampler"]["draws"] = uint64_t{1} << 40; },
       "sampler.draws is 1099511627776 but 2 steps of 1 micro-batches of 2 rows draw 4"},
      {[](json& j) { j["sampler"]["draws"] = -4; }, "sampler.draws is -4; expected a number >= 0"},
      {[](json& j) { j["step"] = -5; }, "step is -5; expected 1 to 1099511627776"},
      {[](json& j) {
         j["step"] = 3;
         j["sampler"]["draws"] = 6;
         j["sampler"]["tokens_consumed"] = 96;
       },
       "step 3 with 0 skipped updates does not match the optimizer's 2 updates"},
  };
  for (const Case& c : cases) {
    json j = good;
    c.damage(j);
    write_file(state_path, j.dump(2));
    const std::string line = error_line(run_spillway(train("run", "--resume")));
    EXPECT_NE(line.find("spillway: " + state_path + ": " + c.error), std::string::npos) << line;
  }
  write_file(state_path, good.dump(2));
  EXPECT_EQ(run_spillway(train("run", "--resume")).exit_code, 0);
}

TEST_F(TrainingFaults, StepsWithANonFiniteLossAreSkippedAndARunOfThemStops) {
  ASSERT_EQ(run_spillway(train("base", "--steps 1")).exit_code, 0);
  // A model whose final norm is NaN: every logit, every loss.
  const std::string base = dir_ / "base/step-0000001";
  auto weights = model::load_llama(base);
  for (auto& t : weights.tensors()) {
    if (t.name == "model.norm.weight") std::fill(t.data.begin(), t.data.end(), NAN);
  }
  fs::copy(base, dir_ / "nan_model", fs::copy_options::recursive);
  model::save_llama(dir_ / "nan_model", weights);

  const CommandResult r = run_spillway("finetune --model " + (dir_ / "nan_model") + " -o " + (dir_ / "ft") +
                                       data_flags() + "--steps 10 --max-skipped-steps 3");
  EXPECT_EQ(error_line(r), "spillway: training: steps 1 to 3 all had a non-finite loss or gradient norm, 3 in a row "
                           "(--max-skipped-steps); the run stops, its last checkpoint untouched (try a lower --lr, or "
                           "check the data and the weights)");
  // Each skipped step is in the log, by its number.
  std::vector<int64_t> skipped;
  std::ifstream log(dir_ / "ft/train_log.jsonl");
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line);
    if (j.value("event", "") == "skipped") skipped.push_back(j.at("step"));
  }
  EXPECT_EQ(skipped, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(dir_ / "ft/latest"));
}

TEST_F(TrainingFaults, ASequencePastTheModelsContextIsRefused) {
  ASSERT_EQ(run_spillway(train("base", "--steps 1")).exit_code, 0);
  const std::string line = error_line(
      run_spillway("finetune --model " + (dir_ / "base") + " -o " + (dir_ / "ft") + data_flags(300) + "--steps 1"));
  EXPECT_EQ(line, "spillway: --seq: 300 is past the model's context of 256 tokens (max_position_embeddings in its "
                  "config.json); train on sequences at most that long, or raise it there to extend the context on "
                  "purpose");
  // A new model's context covers what it trains on.
  ASSERT_EQ(run_spillway(train("long", "--steps 1", 300)).exit_code, 0);
  const json config = json::parse(read_file(dir_ / "long/step-0000001/config.json"));
  EXPECT_EQ(config.at("max_position_embeddings"), 300);
}

}  // namespace
}  // namespace spillway::e2e
