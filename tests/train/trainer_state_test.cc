// trainer_state.json is read field by field and checked against the run it
// resumes: each kind of damage gives one line naming the file and the field.
#include "train/trainer_state.h"

#include <gtest/gtest.h>

#include "base/status.h"

namespace spillway::train {
namespace {

using nlohmann::json;

const std::string kPath = "run/step-0000005/trainer_state.json";

// What a run of batch 4, seq 16, 2 micro-batches and seed 9 saves after 5
// steps, one of them skipped.
json saved() {
  TrainerState s;
  s.step = 5;
  s.skipped_steps = 1;
  s.sampler = {9, 40, 640};
  s.options = json::object();
  s.curves.train = {{1, 4.0}, {2, 3.5}};
  json j = trainer_state_json(s);
  j["step"] = 5;
  return j;
}

ScheduleConfig schedule() {
  ScheduleConfig s;
  s.batch = 4;
  s.seq = 16;
  s.grad_accum = 2;
  s.seed = 9;
  return s;
}

std::string error_of(const json& j, int64_t optimizer_steps = 4) {
  try {
    check_trainer_state(read_trainer_state(j, kPath), schedule(), optimizer_steps, SampledRows::windows, kPath);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerState, WhatASaveWritesReadsBack) {
  const TrainerState s = read_trainer_state(saved(), kPath);
  EXPECT_EQ(s.step, 5);
  EXPECT_EQ(s.skipped_steps, 1);
  EXPECT_EQ(s.sampler.draws, 40u);
  EXPECT_EQ(s.sampler.tokens_consumed, 640u);
  ASSERT_EQ(s.curves.train.size(), 2u);
  EXPECT_EQ(s.curves.train[1].second, 3.5);
  EXPECT_EQ(error_of(saved()), "");
}

TEST(TrainerState, EachDamageNamesTheField) {
  struct Case {
    std::string what;
    std::function<void(json&)> damage;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"negative step", [](json& j) { j["step"] = -5; }, kPath + ": step is -5; expected 1 to 1099511627776"},
      {"fractional step", [](json& j) { j["step"] = 2.5; }, kPath + ": step is 2.5; expected a whole number"},
      {"step as text", [](json& j) { j["step"] = "5"; }, kPath + ": step is \"5\"; expected a whole number"},
      {"no sampler", [](json& j) { j.erase("sampler"); }, kPath + ": sampler is missing"},
      {"huge draws", [](json& j) { j["sampler"]["draws"] = uint64_t{1} << 40; },
       kPath + ": sampler.draws is 1099511627776 but 5 steps of 2 micro-batches of 4 rows draw 40"},
      {"negative draws", [](json& j) { j["sampler"]["draws"] = -4; },
       kPath + ": sampler.draws is -4; expected a number >= 0"},
      {"tokens", [](json& j) { j["sampler"]["tokens_consumed"] = 641; },
       kPath + ": sampler.tokens_consumed is 641 but 40 rows of 16 tokens are 640"},
      {"seed", [](json& j) { j["sampler"]["seed"] = 10; }, kPath + ": sampler.seed is 10 but the run's seed is 9"},
      {"skipped past step", [](json& j) { j["skipped_steps"] = 6; },
       kPath + ": skipped_steps is 6; expected 0 to 5"},
      {"curve point", [](json& j) { j["train_curve"][1] = json::array({2}); },
       kPath + ": train_curve[1] is [2]; expected [step, loss]"},
      {"no options", [](json& j) { j.erase("options"); }, kPath + ": options is missing"},
  };
  for (const Case& c : cases) {
    json j = saved();
    c.damage(j);
    EXPECT_EQ(error_of(j), c.error) << c.what;
  }
  EXPECT_EQ(error_of(saved(), 5), kPath + ": step 5 with 1 skipped updates does not match the optimizer's 5 updates "
                                          "(optimizer.safetensors steps_taken)");
}

// Packed rows take one example or more each: fewer draws than rows is
// damage, more is not (the trainer replays the walk for the exact count).
TEST(TrainerState, PackedRowsDrawAtLeastOneExampleEach) {
  auto error_with_draws = [](uint64_t draws) -> std::string {
    json j = saved();
    j["sampler"]["draws"] = draws;
    j["sampler"]["tokens_consumed"] = 100;
    try {
      check_trainer_state(read_trainer_state(j, kPath), schedule(), 4, SampledRows::packed, kPath);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_with_draws(40), "");
  EXPECT_EQ(error_with_draws(97), "");
  EXPECT_EQ(error_with_draws(39),
            kPath + ": sampler.draws is 39 but 5 steps of 2 micro-batches of 4 rows draw at least 40");
}

}  // namespace
}  // namespace spillway::train
