#include "model/lora_io.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/json_text.h"
#include "base/regular_file.h"
#include "base/status.h"
#include "model/safetensors.h"

namespace spillway::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A field PEFT writes with a value that changes what the adapter computes
// from what spillway computes: refused unless it holds the plain value.
void refuse_unless(const json& config, const char* key, const json& plain, const std::string& path,
                   const char* why) {
  if (!config.contains(key) || config[key].is_null() || config[key] == plain) return;
  throw Error(path, detail::concat(key, " is ", config[key].dump(), "; ", why));
}

}  // namespace

void save_peft_adapter(const std::string& dir, const LoraWeights& adapters, const std::string& base_model) {
  const LoraConfig& lora = adapters.lora();
  check_lora_config(lora, dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  SPW_CHECK(!ec, dir, "cannot create the adapter folder: ", ec.message());
  const json config = {{"peft_type", "LORA"},
                       {"task_type", "CAUSAL_LM"},
                       {"base_model_name_or_path", base_model},
                       {"r", lora.rank},
                       {"lora_alpha", lora.alpha},
                       {"lora_dropout", lora.dropout},
                       {"target_modules", lora.targets},
                       {"bias", "none"},
                       {"fan_in_fan_out", false},
                       {"use_rslora", false},
                       {"use_dora", false},
                       {"init_lora_weights", true},
                       {"inference_mode", true},
                       {"modules_to_save", nullptr},
                       {"layers_to_transform", nullptr},
                       {"rank_pattern", json::object()},
                       {"alpha_pattern", json::object()}};
  SafetensorsWriter writer;
  for (const NamedTensor& t : adapters.tensors()) {
    writer.add(kPeftTensorPrefix + t.name, DType::f32, t.shape, t.data.data());
  }
  writer.add_metadata("format", "pt");
  writer.write(dir + "/adapter_model.safetensors");
  write_text_file_atomically(dir + "/adapter_config.json", config.dump(2) + "\n");
}

bool holds_peft_adapter(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "adapter_config.json", ec);
}

LoraWeights load_peft_adapter(const std::string& dir, const LlamaConfig& config) {
  const std::string path = dir + "/adapter_config.json";
  std::error_code ec;
  SPW_CHECK(fs::is_directory(dir, ec), dir, "is not a folder; a LoRA adapter is a folder holding adapter_config.json ",
            "and adapter_model.safetensors (as PEFT saves one)");
  SPW_CHECK(fs::exists(path, ec), path, "is missing: the folder is not a PEFT adapter");
  const json j = json_from_text(read_regular_file(path, "an adapter_config.json"), path);
  SPW_CHECK(j.is_object(), path, "holds ", j.type_name(), "; expected an object of PEFT's settings");
  SPW_CHECK(j.contains("peft_type") && j["peft_type"] == "LORA", path, "peft_type is ",
            j.contains("peft_type") ? j["peft_type"].dump() : "missing", "; only LoRA adapters (\"LORA\") are read");
  SPW_CHECK(j.contains("r") && j["r"].is_number_integer(), path, "r is ", j.contains("r") ? j["r"].dump() : "missing",
            "; expected the rank, a whole number");
  SPW_CHECK(j.contains("lora_alpha") && j["lora_alpha"].is_number(), path, "lora_alpha is ",
            j.contains("lora_alpha") ? j["lora_alpha"].dump() : "missing", "; expected a number");
  refuse_unless(j, "use_rslora", false, path, "rank-stabilized scaling (alpha / sqrt(r)) is not supported");
  refuse_unless(j, "use_dora", false, path, "DoRA adapters are not supported");
  refuse_unless(j, "bias", "none", path, "adapters that train biases are not supported (LLaMA has none)");
  refuse_unless(j, "fan_in_fan_out", false, path, "spillway's projections are stored [out, in]");
  refuse_unless(j, "rank_pattern", json::object(), path, "ranks per module are not supported");
  refuse_unless(j, "alpha_pattern", json::object(), path, "alphas per module are not supported");
  refuse_unless(j, "layers_to_transform", nullptr, path, "adapters on some layers only are not supported");
  refuse_unless(j, "modules_to_save", nullptr, path, "fully trained modules beside the adapters are not supported");
  refuse_unless(j, "lora_bias", false, path, "adapters with a bias on B are not supported");
  refuse_unless(j, "use_qalora", false, path, "QA-LoRA's pooled inputs are not supported");
  refuse_unless(j, "trainable_token_indices", nullptr, path, "trained embedding rows are not supported");
  refuse_unless(j, "target_parameters", nullptr, path, "adapters on parameters rather than modules are not supported");

  LoraConfig lora;
  lora.rank = j["r"].get<int64_t>();
  lora.alpha = j["lora_alpha"].get<double>();
  if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) {
    SPW_CHECK(j["lora_dropout"].is_number(), path, "lora_dropout is ", j["lora_dropout"].dump(),
              "; expected a probability");
    lora.dropout = j["lora_dropout"].get<double>();
  }
  SPW_CHECK(j.contains("target_modules") && j["target_modules"].is_array(), path, "target_modules is ",
            j.contains("target_modules") ? j["target_modules"].dump() : "missing",
            "; expected a list of module names (q_proj, ...), not a pattern");
  std::string list;
  for (const json& m : j["target_modules"]) {
    SPW_CHECK(m.is_string(), path, "target_modules holds ", m.dump(), "; expected module names");
    list += m.get<std::string>() + ",";
  }
  lora.targets = parse_lora_targets(list, path + ": target_modules");
  check_lora_config(lora, path);

  LoraWeights w = LoraWeights::zeros(config, lora);
  const SafetensorsFile file(dir + "/adapter_model.safetensors");
  std::set<std::string> expected;
  for (NamedTensor& t : w.tensors()) {
    const std::string name = kPeftTensorPrefix + t.name;
    expected.insert(name);
    file.read_tensor_as_f32(name, t.shape, t.data);
  }
  for (const SafetensorsTensor& t : file.tensors()) {
    SPW_CHECK(expected.count(t.name), file.path(), "holds tensor '", t.name, "' that a rank-", lora.rank,
              " adapter on ", list.substr(0, list.size() - 1), " of this model has no place for");
  }
  return w;
}

}  // namespace spillway::model
