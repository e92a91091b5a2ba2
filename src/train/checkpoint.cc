#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "base/atomic_file.h"
#include "base/json_text.h"
#include "base/status.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/safetensors.h"
#include "model/tokenizer_files.h"

namespace spillway::train {

namespace fs = std::filesystem;

namespace {

std::string step_folder_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%07lld", static_cast<long long>(step));
  return buf;
}

// Only `step-` and digits name a checkpoint: the temporaries a checkpoint
// is written under (`step-N.tmp.<pid>`) and the names old ones leave under
// (`step-N.deleting`) never do, so no reader ever takes one for a checkpoint.
bool is_step_folder_name(const std::string& name) {
  constexpr size_t prefix = sizeof "step-" - 1;
  return name.size() > prefix && name.starts_with("step-") &&
         std::all_of(name.begin() + prefix, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::vector<fs::path> step_folders(const fs::path& run) {
  std::vector<fs::path> steps;
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.is_directory() && is_step_folder_name(entry.path().filename().string())) steps.push_back(entry.path());
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

constexpr const char* kDeletingSuffix = ".deleting";

// Removes a checkpoint folder in one step, as far as readers can tell: it
// is renamed out of the way first (atomic), then deleted file by file. A
// kill during the deletion leaves a `.deleting` folder, which no reader
// takes for a checkpoint and the next run removes, never a step folder
// missing files.
void remove_checkpoint_folder(const fs::path& dir) {
  const fs::path doomed = dir.string() + kDeletingSuffix;
  fs::remove_all(doomed);  // one a killed run left; it is no checkpoint
  fs::rename(dir, doomed);
  fsync_directory(dir.parent_path().string());
  fs::remove_all(doomed);
}

// Whether `name` is what a write through AtomicFile (base/atomic_file.h)
// leaves when killed: `<file>.tmp.` and six characters from mkstemp.
bool is_atomic_file_temporary(const std::string& name, const std::string& file) {
  const std::string prefix = file + ".tmp.";
  return name.size() == prefix.size() + 6 && name.starts_with(prefix);
}

// optimizer.safetensors: both moments of every trained tensor, as fp32.
SafetensorsWriter moments_writer(const CheckpointState& state) {
  SafetensorsWriter moments;
  if (state.lora) {  // AdamW's moments are the adapters'
    const auto& trained = state.lora->adapters.tensors();
    for (size_t i = 0; i < trained.size(); ++i) {
      moments.add("exp_avg." + trained[i].name, DType::f32, trained[i].shape, state.lora->m.tensors()[i].data.data());
      moments.add("exp_avg_sq." + trained[i].name, DType::f32, trained[i].shape, state.lora->v.tensors()[i].data.data());
    }
    moments.add_metadata("steps_taken", std::to_string(state.optimizer_steps));
    return moments;
  }
  const std::vector<model::ParameterSpec> specs = model::parameter_specs(state.config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto n = static_cast<size_t>(specs[i].shape.numel());
    for (StatePart part : {StatePart::m, StatePart::v}) {
      moments.add((part == StatePart::m ? "exp_avg." : "exp_avg_sq.") + specs[i].name, DType::f32, specs[i].shape,
                  [&state, part, i, n](std::span<std::byte> out) {
                    state.read(part, i, std::span<float>(reinterpret_cast<float*>(out.data()), n));
                  });
    }
  }
  moments.add_metadata("steps_taken", std::to_string(state.optimizer_steps));
  return moments;
}

model::ParameterReader master_reader(const CheckpointState& state) {
  return [&state](size_t i, std::span<float> out) { state.read(StatePart::master, i, out); };
}

}  // namespace

CheckpointState host_checkpoint_state(const model::LlamaWeights& weights, const AdamW& optimizer) {
  CheckpointState state;
  state.config = weights.config();
  state.optimizer_steps = optimizer.steps_taken;
  state.read = [&weights, &optimizer](StatePart part, size_t i, std::span<float> out) {
    const model::LlamaWeights& from = part == StatePart::master ? weights : part == StatePart::m ? optimizer.m : optimizer.v;
    if (from.tensors().empty()) {  // moments never made: a run that took no step keeps them zero
      std::fill(out.begin(), out.end(), 0.0f);
      return;
    }
    const std::vector<float>& data = from.tensors()[i].data;
    SPW_CHECK(data.size() == out.size(), from.tensors()[i].name, "holds ", data.size(), " values; the checkpoint expects ",
              out.size());
    std::copy(data.begin(), data.end(), out.begin());
  };
  return state;
}

void walk_checkpoint_reads(const CheckpointState& state) {
  model::walk_llama_reads(state.config, master_reader(state));
  moments_writer(state).walk();
}

void remove_stale_temporaries(const std::string& run_dir) {
  const fs::path run(run_dir);
  std::error_code ec;
  if (!fs::is_directory(run, ec)) return;
  // The files of a run folder that are replaced atomically.
  const char* replaced[] = {"latest", "run_config.toml", "loss.svg"};
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(run)) {
    const std::string name = entry.path().filename().string();
    const bool step_leftover = name.starts_with("step-") && !is_step_folder_name(name) &&
                               (name.find(".tmp.") != std::string::npos || name.ends_with(kDeletingSuffix));
    const bool file_leftover = std::any_of(std::begin(replaced), std::end(replaced),
                                           [&](const char* file) { return is_atomic_file_temporary(name, file); });
    if (step_leftover || file_leftover) stale.push_back(entry.path());
  }
  // The data a run prepared for itself (train/dataset.h) is written file by
  // file through AtomicFile too, and is spillway's alone: any temporary
  // there is a killed run's.
  const fs::path data = run / "data";
  if (fs::is_directory(data, ec)) {
    for (const auto& entry : fs::directory_iterator(data)) {
      const std::string name = entry.path().filename().string();
      const size_t dot = name.rfind(".tmp.");
      if (dot != std::string::npos && dot > 0 && is_atomic_file_temporary(name, name.substr(0, dot))) {
        stale.push_back(entry.path());
      }
    }
  }
  for (const fs::path& path : stale) fs::remove_all(path);
}

void remove_checkpoints(const std::string& run_dir) {
  const fs::path run(run_dir);
  std::error_code ec;
  if (!fs::is_directory(run, ec)) return;
  // `latest` first: a kill midway then leaves complete checkpoints and
  // nothing naming a removed one.
  fs::remove(run / "latest");
  fsync_directory(run.string());
  for (const fs::path& step : step_folders(run)) remove_checkpoint_folder(step);
  remove_stale_temporaries(run_dir);
}

std::string save_checkpoint(const std::string& run_dir, int64_t step, const CheckpointState& state,
                            const Tokenizer& tokenizer, const nlohmann::json& trainer_state, int64_t keep) {
  const fs::path run(run_dir);
  fs::create_directories(run);
  const fs::path final_dir = run / step_folder_name(step);
  const fs::path temp_dir = run / (step_folder_name(step) + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(temp_dir);
  try {
    model::save_llama(temp_dir.string(), state.config, master_reader(state));
    save_tokenizer_files(tokenizer, temp_dir.string());
    moments_writer(state).write((temp_dir / "optimizer.safetensors").string());
    if (state.lora) model::save_peft_adapter(temp_dir.string(), state.lora->adapters, state.base_model);
    nlohmann::json trainer = trainer_state;
    trainer["format"] = kTrainerStateFormat;
    trainer["step"] = step;
    write_text_file_atomically((temp_dir / "trainer_state.json").string(), trainer.dump(2) + "\n");
    fsync_directory(temp_dir.string());
    // A checkpoint of the same step from an abandoned run (one killed after
    // renaming its step folder into place, before `latest` named it).
    if (fs::exists(final_dir)) remove_checkpoint_folder(final_dir);
    fs::rename(temp_dir, final_dir);
    fsync_directory(run.string());
  } catch (const Error& e) {
    std::error_code ignored;
    fs::remove_all(temp_dir, ignored);
    // A file of the temporary folder is named as the checkpoint's, which is
    // what the user knows; the temporary is gone already.
    const std::string temp = temp_dir.string() + "/";
    if (!e.thing().starts_with(temp)) throw;
    throw Error((final_dir / e.thing().substr(temp.size())).string(),
                e.problem() + "; the checkpoint of step " + std::to_string(step) +
                    " was not written; earlier checkpoints are untouched");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp_dir, ignored);
    throw;
  }
  write_text_file_atomically((run / "latest").string(), final_dir.filename().string() + "\n");
  auto steps = step_folders(run);
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < steps.size(); ++i) {
    if (steps[i] != final_dir) remove_checkpoint_folder(steps[i]);
  }
  return final_dir.string();
}

bool is_run_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  return fs::exists(fs::path(path) / "latest") || !step_folders(path).empty();
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return path;  // a GGUF file, or a file whose reader says what it is not
  SPW_CHECK(fs::is_directory(p), path, "no such model or run folder, nor a GGUF file");
  const fs::path latest = p / "latest";
  if (!fs::exists(latest)) {
    // A run killed between its first step folder's rename and `latest`'s
    // write: that folder is complete, and the run's newest.
    const std::vector<fs::path> steps = step_folders(p);
    return steps.empty() ? path : steps.back().string();
  }
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  SPW_CHECK(!name.empty() && name.find('/') == std::string::npos, latest.string(),
            "does not name a checkpoint folder");
  const fs::path dir = p / name;
  SPW_CHECK(fs::is_directory(dir), latest.string(), "names '", name, "', which does not exist");
  return dir.string();
}

namespace {

// The optimizer's step count that optimizer.safetensors records.
int64_t steps_taken(const SafetensorsFile& file) {
  auto it = file.metadata().find("steps_taken");
  SPW_CHECK(it != file.metadata().end(), file.path(), "metadata lacks steps_taken");
  const std::string& taken = it->second;
  int64_t steps = -1;
  const auto [end, ec] = std::from_chars(taken.data(), taken.data() + taken.size(), steps);
  SPW_CHECK(ec == std::errc() && end == taken.data() + taken.size() && steps >= 0, file.path(),
            "metadata steps_taken is '", taken, "'; expected a whole number >= 0");
  return steps;
}

// Reads the moments of `params` into m and v, laid out alike.
void read_moments(const SafetensorsFile& file, std::vector<model::NamedTensor>& m, std::vector<model::NamedTensor>& v) {
  for (size_t i = 0; i < m.size(); ++i) {
    file.read_tensor_as_f32("exp_avg." + m[i].name, m[i].shape, std::span<float>(m[i].data));
    file.read_tensor_as_f32("exp_avg_sq." + v[i].name, v[i].shape, std::span<float>(v[i].data));
  }
}

std::string optimizer_file(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "optimizer.safetensors").string();
  SPW_CHECK(fs::exists(path), path, "missing: the checkpoint holds no optimizer state to resume from");
  return path;
}

}  // namespace

AdamW load_optimizer(const std::string& checkpoint_dir, const model::LlamaConfig& config) {
  SafetensorsFile file(optimizer_file(checkpoint_dir));
  AdamW opt(config);
  read_moments(file, opt.m.tensors(), opt.v.tensors());
  opt.steps_taken = steps_taken(file);
  return opt;
}

LoraState load_lora_checkpoint(const std::string& checkpoint_dir, const model::LlamaConfig& config,
                               AdamW& optimizer) {
  LoraState state;
  state.adapters = model::load_peft_adapter(checkpoint_dir, config);
  state.m = model::LoraWeights::zeros(config, state.adapters.lora());
  state.v = model::LoraWeights::zeros(config, state.adapters.lora());
  SafetensorsFile file(optimizer_file(checkpoint_dir));
  read_moments(file, state.m.tensors(), state.v.tensors());
  optimizer.steps_taken = steps_taken(file);
  return state;
}

nlohmann::json load_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  std::ifstream in(path);
  SPW_CHECK(in.good(), path, "missing: not a spillway training checkpoint");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json state = json_from_text(text, path);
  const bool ours = state.is_object() && state.contains("format") && state["format"].is_string() &&
                    state["format"].get<std::string>() == kTrainerStateFormat;
  SPW_CHECK(ours, path,
            "not a spillway trainer state (expected format '", kTrainerStateFormat, "')");
  return state;
}

}  // namespace spillway::train
