#include "train/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/atomic_file.h"
#include "base/status.h"
#include "model/llama_weights_io.h"
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

std::vector<fs::path> step_folders(const fs::path& run) {
  std::vector<fs::path> steps;
  for (const auto& entry : fs::directory_iterator(run)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) {
      steps.push_back(entry.path());
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, int64_t step, const model::LlamaWeights& weights,
                            const AdamW& optimizer, const Tokenizer& tokenizer, const nlohmann::json& trainer_state,
                            int64_t keep) {
  const fs::path run(run_dir);
  fs::create_directories(run);
  const fs::path final_dir = run / step_folder_name(step);
  const fs::path temp_dir = run / (step_folder_name(step) + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(temp_dir);
  try {
    model::save_llama(temp_dir.string(), weights);
    save_tokenizer_files(tokenizer, temp_dir.string());
    SafetensorsWriter moments;
    for (size_t i = 0; i < weights.tensors().size(); ++i) {
      const auto& name = weights.tensors()[i].name;
      const auto& shape = weights.tensors()[i].shape;
      moments.add("exp_avg." + name, DType::f32, shape, optimizer.m.tensors()[i].data.data());
      moments.add("exp_avg_sq." + name, DType::f32, shape, optimizer.v.tensors()[i].data.data());
    }
    moments.add_metadata("steps_taken", std::to_string(optimizer.steps_taken));
    moments.write((temp_dir / "optimizer.safetensors").string());
    nlohmann::json state = trainer_state;
    state["format"] = kTrainerStateFormat;
    state["step"] = step;
    write_text_file_atomically((temp_dir / "trainer_state.json").string(), state.dump(2) + "\n");
    fsync_directory(temp_dir.string());
    fs::remove_all(final_dir);  // a checkpoint of the same step from an abandoned run
    fs::rename(temp_dir, final_dir);
    fsync_directory(run.string());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp_dir, ignored);
    throw;
  }
  write_text_file_atomically((run / "latest").string(), final_dir.filename().string() + "\n");
  auto steps = step_folders(run);
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < steps.size(); ++i) {
    if (steps[i] != final_dir) fs::remove_all(steps[i]);
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
  if (!fs::exists(latest)) return path;
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  SPW_CHECK(!name.empty() && name.find('/') == std::string::npos, latest.string(),
            "does not name a checkpoint folder");
  const fs::path dir = p / name;
  SPW_CHECK(fs::is_directory(dir), latest.string(), "names '", name, "', which does not exist");
  return dir.string();
}

AdamW load_optimizer(const std::string& checkpoint_dir, const model::LlamaConfig& config) {
  const std::string path = (fs::path(checkpoint_dir) / "optimizer.safetensors").string();
  SPW_CHECK(fs::exists(path), path, "missing: the checkpoint holds no optimizer state to resume from");
  SafetensorsFile file(path);
  AdamW opt(config);
  for (size_t i = 0; i < opt.m.tensors().size(); ++i) {
    auto& m = opt.m.tensors()[i];
    auto& v = opt.v.tensors()[i];
    file.read_tensor_as_f32("exp_avg." + m.name, m.shape, std::span<float>(m.data));
    file.read_tensor_as_f32("exp_avg_sq." + v.name, v.shape, std::span<float>(v.data));
  }
  auto it = file.metadata().find("steps_taken");
  SPW_CHECK(it != file.metadata().end(), path, "metadata lacks steps_taken");
  opt.steps_taken = std::stoll(it->second);
  return opt;
}

nlohmann::json load_trainer_state(const std::string& checkpoint_dir) {
  const std::string path = (fs::path(checkpoint_dir) / "trainer_state.json").string();
  std::ifstream in(path);
  SPW_CHECK(in.good(), path, "missing: not a spillway training checkpoint");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, std::string("not valid JSON: ") + e.what());
  }
  SPW_CHECK(state.is_object() && state.value("format", "") == kTrainerStateFormat, path,
            "not a spillway trainer state (expected format '", kTrainerStateFormat, "')");
  return state;
}

}  // namespace spillway::train
