#include "train/run_config.h"

#include <cmath>
#include <cstdlib>
#include <map>

#include "base/config_file.h"
#include "base/limits.h"
#include "base/status.h"
#include "train/run_config_fields.h"

namespace spillway::train {

const std::array<std::string_view, 4> EnumNames<OffloadMode>::names{
    plan::offload_mode_name(OffloadMode::automatic), plan::offload_mode_name(OffloadMode::on),
    plan::offload_mode_name(OffloadMode::off), plan::offload_mode_name(OffloadMode::stream)};

const std::array<std::string_view, 4> EnumNames<RecomputeChoice>::names{
    graph::recompute_policy_name(graph::RecomputePolicy::none),
    graph::recompute_policy_name(graph::RecomputePolicy::layers),
    graph::recompute_policy_name(graph::RecomputePolicy::selective), "auto"};

std::optional<graph::RecomputePolicy> recompute_policy(RecomputeChoice choice) {
  switch (choice) {
    case RecomputeChoice::none: return graph::RecomputePolicy::none;
    case RecomputeChoice::layers: return graph::RecomputePolicy::layers;
    case RecomputeChoice::selective: return graph::RecomputePolicy::selective;
    case RecomputeChoice::automatic: return std::nullopt;
  }
  return std::nullopt;
}

std::string_view command_name(Command command) {
  switch (command) {
    case Command::train: return "train";
    case Command::finetune: return "finetune";
    case Command::bench: return "bench";
    case Command::plan: return "plan";
  }
  return "?";
}

RunConfig default_run_config(Command command) {
  RunConfig config;
  for (const Field& f : run_config_fields()) {
    const std::string_view text = command_default(f, command);
    if (!text.empty()) set_field_text(f, config, std::vector<std::string>{std::string(text)}, f.key);
  }
  return config;
}

namespace {

// What set each field, to name it in errors: a flag, a variable, or a file.
struct Source {
  std::string thing;
  bool file = false;
};
using Blame = std::map<std::string_view, Source>;  // by dotted key

// The flag, variable or file that set `key`, else its flag.
std::string blamed(const Blame& blame, std::string_view key, std::string_view flag) {
  const auto it = blame.find(key);
  return it == blame.end() ? std::string(flag) : it->second.thing;
}

void check(const RunConfig& config, Command command, const Blame& blame) {
  for (const Field& f : run_config_fields()) {
    if (!uses(f, command)) continue;
    const auto it = blame.find(f.key);
    if (it == blame.end()) check_field_range(f, config, f.flag);
    else check_field_range(f, config, it->second.thing, it->second.file);
  }
  // Each is within its limit; their product sizes every activation.
  const ScheduleConfig& s = config.schedule;
  SPW_CHECK(s.batch * s.seq <= limits::kMaxBatchTokens, blamed(blame, "schedule.batch", "--batch"), "batch ",
            s.batch, " x seq ", s.seq, " is ", s.batch * s.seq, " tokens per micro-batch; at most ",
            limits::kMaxBatchTokens);
  SPW_CHECK(command != Command::finetune || !config.model.init_from.empty(), "--model",
            "finetune needs the model or run folder to start from (--model, or model.init_from in a run file)");
  const LoraRunConfig& l = config.lora;
  if (l.rank > 0) {
    SPW_CHECK(std::isfinite(l.alpha) && l.alpha > 0, blamed(blame, "lora.alpha", "--lora-alpha"), l.alpha,
              " must be a positive number");
    SPW_CHECK(std::isfinite(l.dropout) && l.dropout >= 0 && l.dropout < 1,
              blamed(blame, "lora.dropout", "--lora-dropout"), l.dropout, " must be at least 0 and below 1");
    model::parse_lora_targets(l.targets, blamed(blame, "lora.targets", "--lora-targets"));
  }
}

}  // namespace

RunConfig resolve_run_config(Command command, const RunSources& sources) {
  RunConfig config = default_run_config(command);
  Blame blame;
  if (!sources.file.empty()) {
    apply_run_config_json(config, command, read_settings_file(sources.file), sources.file,
                          [&](const Field& f) { blame[f.key] = {sources.file, true}; });
  }
  std::map<std::string_view, const std::vector<std::string>*> flags;
  for (const auto& [key, texts] : sources.flags) {
    const Field* f = find_field(key);
    SPW_CHECK(f != nullptr && uses(*f, command), key, "is not a setting of ", command_name(command));
    flags[f->key] = &texts;
  }
  // A variable is read only where no flag overrides it, so that a malformed
  // one stops only the runs that would use it.
  const auto getenv =
      sources.getenv ? sources.getenv : [](const char* name) -> const char* { return std::getenv(name); };
  for (const Field& f : run_config_fields()) {
    if (f.env.empty() || !uses(f, command) || flags.count(f.key)) continue;
    if (const char* value = getenv(std::string(f.env).c_str())) {
      set_field_text(f, config, std::vector<std::string>{value}, f.env);
      blame[f.key] = {std::string(f.env)};
    }
  }
  for (const auto& [key, texts] : flags) {
    const Field& f = *find_field(key);
    set_field_text(f, config, *texts, f.flag);
    blame[f.key] = {std::string(f.flag)};
  }
  for (std::string_view key : {"parallel.dp", "parallel.tp", "parallel.pp", "parallel.cp"}) {
    config.parallel.degrees_given = config.parallel.degrees_given || blame.count(key) > 0;
  }
  check(config, command, blame);
  return config;
}

void check_run_config(const RunConfig& config, Command command) { check(config, command, {}); }

model::LoraConfig lora_config(const RunConfig& config) {
  const LoraRunConfig& l = config.lora;
  if (l.rank <= 0) return {};
  return {.rank = l.rank, .alpha = l.alpha, .dropout = l.dropout,
          .targets = model::parse_lora_targets(l.targets, "--lora-targets")};
}

}  // namespace spillway::train
