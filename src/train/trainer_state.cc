#include "train/trainer_state.h"

#include "base/status.h"

namespace spillway::train {

using nlohmann::json;

namespace {

const json& field(const json& j, const char* key, const std::string& name, const std::string& path) {
  SPW_CHECK(j.is_object() && j.contains(key), path, name, " is missing");
  return j.at(key);
}

// An integer JSON value in [low, high]; the name is the field's dotted path.
template <typename T>
T integer(const json& v, const std::string& name, const std::string& path, T low, T high) {
  const bool is_int = v.is_number_integer() || v.is_number_unsigned();
  SPW_CHECK(is_int, path, name, " is ", v.dump(), "; expected a whole number");
  if constexpr (std::is_unsigned_v<T>) {
    SPW_CHECK(v.is_number_unsigned() || v.get<int64_t>() >= 0, path, name, " is ", v.dump(),
              "; expected a number >= 0");
  }
  const T x = v.get<T>();
  SPW_CHECK(x >= low && x <= high, path, name, " is ", x, "; expected ", low, " to ", high);
  return x;
}

std::vector<std::pair<double, double>> curve(const json& state, const char* key, const std::string& path) {
  std::vector<std::pair<double, double>> points;
  if (!state.contains(key)) return points;  // older states, and runs that never evaluated
  const json& c = state.at(key);
  SPW_CHECK(c.is_array(), path, key, " is ", c.type_name(), "; expected a list of [step, loss] pairs");
  for (size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    SPW_CHECK(p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number(), path, key, "[", i, "] is ",
              p.dump(), "; expected [step, loss]");
    points.emplace_back(p[0].get<double>(), p[1].get<double>());
  }
  return points;
}

}  // namespace

json trainer_state_json(const TrainerState& s) {
  json j = {{"options", s.options},
            {"skipped_steps", s.skipped_steps},
            {"sampler", {{"seed", s.sampler.seed}, {"draws", s.sampler.draws},
                         {"tokens_consumed", s.sampler.tokens_consumed}}},
            {"train_curve", json::array()},
            {"validation_curve", json::array()}};
  for (auto [x, y] : s.curves.train) j["train_curve"].push_back({x, y});
  for (auto [x, y] : s.curves.validation) j["validation_curve"].push_back({x, y});
  return j;
}

TrainerState read_trainer_state(const json& j, const std::string& path) {
  constexpr int64_t kMaxSteps = int64_t{1} << 40;  // far past any schedule, far below overflow
  TrainerState s;
  s.step = integer<int64_t>(field(j, "step", "step", path), "step", path, 1, kMaxSteps);
  if (j.contains("skipped_steps")) {
    s.skipped_steps = integer<int64_t>(j.at("skipped_steps"), "skipped_steps", path, 0, s.step);
  }
  const json& sampler = field(j, "sampler", "sampler", path);
  SPW_CHECK(sampler.is_object(), path, "sampler is ", sampler.dump(), "; expected a table");
  constexpr uint64_t kAny = ~uint64_t{0};
  s.sampler.seed = integer<uint64_t>(field(sampler, "seed", "sampler.seed", path), "sampler.seed", path, 0, kAny);
  s.sampler.draws =
      integer<uint64_t>(field(sampler, "draws", "sampler.draws", path), "sampler.draws", path, 0, kAny);
  s.sampler.tokens_consumed = integer<uint64_t>(field(sampler, "tokens_consumed", "sampler.tokens_consumed", path),
                                                "sampler.tokens_consumed", path, 0, kAny);
  s.curves.train = curve(j, "train_curve", path);
  s.curves.validation = curve(j, "validation_curve", path);
  s.options = field(j, "options", "options", path);
  return s;
}

void check_trainer_state(const TrainerState& s, const ScheduleConfig& schedule, int64_t optimizer_steps,
                         SampledRows sampled, const std::string& path) {
  SPW_CHECK(s.sampler.seed == schedule.seed, path, "sampler.seed is ", s.sampler.seed, " but the run's seed is ",
            schedule.seed);
  // Every rank draws every micro-batch's rows (each trains on its share),
  // one draw per row. The products stay far below 2^64: step < 2^40, and
  // the options were checked when restored.
  const auto rows = static_cast<unsigned __int128>(s.step) * static_cast<uint64_t>(schedule.grad_accum) *
                    static_cast<uint64_t>(schedule.batch);
  const bool packed = sampled == SampledRows::packed;
  SPW_CHECK(packed ? rows <= s.sampler.draws : rows == s.sampler.draws, path, "sampler.draws is ", s.sampler.draws,
            " but ", s.step, " steps of ", schedule.grad_accum, " micro-batches of ", schedule.batch, " rows draw ",
            packed ? "at least " : "", static_cast<uint64_t>(rows));
  const unsigned __int128 tokens = rows * static_cast<uint64_t>(schedule.seq);
  const bool windows = sampled == SampledRows::windows;
  const bool fits = windows ? tokens == s.sampler.tokens_consumed : tokens >= s.sampler.tokens_consumed;
  SPW_CHECK(fits, path, "sampler.tokens_consumed is ", s.sampler.tokens_consumed, " but ",
            static_cast<uint64_t>(rows), " rows of ", schedule.seq, " tokens are ", windows ? "" : "at most ",
            static_cast<uint64_t>(tokens));
  SPW_CHECK(optimizer_steps == s.step - s.skipped_steps, path, "step ", s.step, " with ", s.skipped_steps,
            " skipped updates does not match the optimizer's ", optimizer_steps,
            " updates (optimizer.safetensors steps_taken)");
}

}  // namespace spillway::train
