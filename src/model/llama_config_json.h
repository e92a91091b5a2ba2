// LlamaConfig to and from Hugging Face config.json, and the named presets.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/llama_config.h"

namespace spillway::model {

// Reads a Hugging Face LLaMA config. Keys that would change the model in a
// way spillway does not implement (an activation other than silu, biases, an
// unknown rope type) and keys it does not know at all are errors naming
// `source` and the key: a silently ignored key is a silently wrong model.
LlamaConfig config_from_json(const nlohmann::json& j, const std::string& source);
LlamaConfig load_config(const std::string& path);
nlohmann::json config_to_json(const LlamaConfig& c);

// "tiny" (trains on two CPU cores in minutes), and the shapes of LLaMA-3.2-1B,
// LLaMA-3-8B, LLaMA-2-7B and LLaMA-2-13B. An unknown name is an error that
// lists the presets.
LlamaConfig preset_config(std::string_view name);
std::vector<std::string> preset_names();
// A preset name, or a path to a config.json (anything ending in .json, or an
// existing file).
LlamaConfig resolve_config(const std::string& name_or_path);
// Whether resolve_config reads `name_or_path` as a config.json file.
bool is_config_file(const std::string& name_or_path);

// Matmul weights (lm_head included, the embedding lookup excluded unless it
// is tied to lm_head), as DESIGN.md's MFU formula counts them.
int64_t matmul_parameter_count(const LlamaConfig& c);
int64_t parameter_count(const LlamaConfig& c);
// 6 P + 6 L s d: training FLOPs per token at sequence length `seq`.
double training_flops_per_token(const LlamaConfig& c, int64_t seq);

}  // namespace spillway::model
