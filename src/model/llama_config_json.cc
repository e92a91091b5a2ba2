#include "model/llama_config_json.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "base/json_text.h"
#include "base/regular_file.h"
#include "base/status.h"

namespace spillway::model {

using nlohmann::json;

namespace {

// Keys of Hugging Face LLaMA configs that carry no information spillway
// needs (bookkeeping, generation defaults, dtypes chosen at load time).
const std::set<std::string> kIgnoredKeys = {
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "pretraining_tp",
    "attention_dropout", "_name_or_path", "output_attentions", "output_hidden_states",
    "return_dict", "tokenizer_class", "layer_types", "use_return_dict",
};

int64_t get_int(const json& j, const char* key, const std::string& source) {
  const json& v = j.at(key);
  SPW_CHECK(v.is_number_integer(), source, key, " must be an integer, got ", v.dump());
  // Above int64 it would wrap to a negative count.
  SPW_CHECK(!v.is_number_unsigned() || v.get<uint64_t>() <= uint64_t{INT64_MAX}, source, key, " is ", v.dump(),
            "; too large");
  return v.get<int64_t>();
}

double get_number(const json& j, const char* key, const std::string& source) {
  const json& v = j.at(key);
  SPW_CHECK(v.is_number(), source, key, " must be a number, got ", v.dump());
  return v.get<double>();
}

ops::RopeScaling rope_scaling_from_json(const json& j, const std::string& source) {
  ops::RopeScaling s;
  if (j.is_null()) return s;
  SPW_CHECK(j.is_object(), source, "rope_scaling must be an object or null");
  std::string type = "default";
  for (const char* key : {"type", "rope_type"}) {  // rope_type wins where both are given
    if (!j.contains(key)) continue;
    SPW_CHECK(j[key].is_string(), source, "rope_scaling.", key, " must be a string, got ", j[key].dump());
    type = j[key].get<std::string>();
  }
  if (type == "default") return s;
  SPW_CHECK(type == "llama3", source, "rope_scaling type '", type,
            "' is not supported (spillway implements default and llama3)");
  s.llama3 = true;
  s.factor = get_number(j, "factor", source);
  s.low_freq_factor = get_number(j, "low_freq_factor", source);
  s.high_freq_factor = get_number(j, "high_freq_factor", source);
  s.original_max_position_embeddings = get_int(j, "original_max_position_embeddings", source);
  return s;
}

}  // namespace

LlamaConfig config_from_json(const json& j, const std::string& source) {
  SPW_CHECK(j.is_object(), source, "a config must be a JSON object");
  LlamaConfig c;
  for (const auto& [key, value] : j.items()) {
    try {
      if (key == "vocab_size") c.vocab_size = get_int(j, "vocab_size", source);
      else if (key == "hidden_size") c.hidden_size = get_int(j, "hidden_size", source);
      else if (key == "intermediate_size") c.intermediate_size = get_int(j, "intermediate_size", source);
      else if (key == "num_hidden_layers") c.num_hidden_layers = get_int(j, "num_hidden_layers", source);
      else if (key == "num_attention_heads") c.num_attention_heads = get_int(j, "num_attention_heads", source);
      else if (key == "num_key_value_heads") c.num_key_value_heads = get_int(j, "num_key_value_heads", source);
      else if (key == "max_position_embeddings") c.max_position_embeddings = get_int(j, "max_position_embeddings", source);
      else if (key == "rms_norm_eps") c.rms_norm_eps = get_number(j, "rms_norm_eps", source);
      else if (key == "rope_theta") c.rope_theta = get_number(j, "rope_theta", source);
      else if (key == "rope_scaling") c.rope_scaling = rope_scaling_from_json(value, source);
      else if (key == "rope_parameters") {
        // transformers 5 writes rope_theta and the scaling together here.
        SPW_CHECK(value.is_object(), source, "rope_parameters must be an object");
        if (value.contains("rope_theta")) c.rope_theta = get_number(value, "rope_theta", source);
        c.rope_scaling = rope_scaling_from_json(value, source);
      }
      else if (key == "tie_word_embeddings") {
        SPW_CHECK(value.is_boolean(), source, "tie_word_embeddings must be true or false");
        c.tie_word_embeddings = value.get<bool>();
      } else if (key == "hidden_act") {
        SPW_CHECK(value == "silu", source, "hidden_act ", value.dump(), " is not supported (LLaMA uses silu)");
      } else if (key == "attention_bias" || key == "mlp_bias") {
        SPW_CHECK(value == false, source, key, " = true is not supported (LLaMA has no biases)");
      } else if (key == "head_dim") {
        // Checked after the loop, once hidden_size and the head count are known.
      } else if (!kIgnoredKeys.count(key)) {
        throw Error(source, "unknown config key '" + key +
                                "': --config takes a model's config.json (hidden_size, num_hidden_layers, ...) or "
                                "a preset; training settings go in a run file (`spillway train RUN.toml`, "
                                "docs/run_config.md)");
      }
    } catch (const json::exception&) {
      // The checks above name the type each key needs; this is their net.
      throw Error(source, "'" + key + "' has a value of the wrong type: " + value.dump());
    }
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  c.validate(source);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    SPW_CHECK(get_int(j, "head_dim", source) == c.head_dim(), source, "head_dim ", j["head_dim"].dump(),
              " differs from hidden_size / num_attention_heads = ", c.head_dim(), " (not supported)");
  }
  return c;
}

LlamaConfig load_config(const std::string& path) {
  std::error_code ec;
  SPW_CHECK(std::filesystem::exists(path, ec), path, "no such config file");
  const std::string text = read_regular_file(path, "a config.json");
  return config_from_json(json_from_text(text, path), path);
}

json config_to_json(const LlamaConfig& c) {
  json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_act", "silu"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
  };
  if (c.rope_scaling.llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j;
}

namespace {
struct Preset {
  const char* name;
  LlamaConfig config;
};

LlamaConfig make(int64_t vocab, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                 int64_t max_pos, double eps, double theta, bool tied) {
  LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.max_position_embeddings = max_pos;
  c.rms_norm_eps = eps;
  c.rope_theta = theta;
  c.tie_word_embeddings = tied;
  return c;
}

LlamaConfig with_llama3_rope(LlamaConfig c, double factor) {
  c.rope_scaling.llama3 = true;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      // vocab_size is the default tokenizer's; training from scratch replaces
      // it with the size of the tokenizer it trains.
      {"tiny", make(4096, 256, 768, 4, 8, 4, 1024, 1e-5, 10000.0, true)},
      {"llama3.2-1b", with_llama3_rope(make(128256, 2048, 8192, 16, 32, 8, 131072, 1e-5, 500000.0, true), 32.0)},
      {"llama3-8b", make(128256, 4096, 14336, 32, 32, 8, 8192, 1e-5, 500000.0, false)},
      {"llama2-7b", make(32000, 4096, 11008, 32, 32, 32, 4096, 1e-5, 10000.0, false)},
      {"llama2-13b", make(32000, 5120, 13824, 40, 40, 40, 4096, 1e-5, 10000.0, false)},
      {"llama2-70b", make(32000, 8192, 28672, 80, 64, 8, 4096, 1e-5, 10000.0, false)},
      {"llama3-70b", make(128256, 8192, 28672, 80, 64, 8, 8192, 1e-5, 500000.0, false)},
  };
  return kPresets;
}
}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

LlamaConfig preset_config(std::string_view name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.config;
  }
  std::string known;
  for (const auto& p : presets()) known += std::string(known.empty() ? "" : ", ") + p.name;
  throw Error("--config", "unknown preset '" + std::string(name) + "' (known: " + known +
                              ", or a path to a config.json)");
}

bool is_config_file(const std::string& name_or_path) {
  return name_or_path.ends_with(".json") || std::filesystem::exists(name_or_path);
}

LlamaConfig resolve_config(const std::string& name_or_path) {
  if (is_config_file(name_or_path)) return load_config(name_or_path);
  return preset_config(name_or_path);
}

int64_t matmul_parameter_count(const LlamaConfig& c) {
  const int64_t d = c.hidden_size, hd = c.head_dim();
  const int64_t attn = d * c.num_attention_heads * hd * 2 + d * c.num_key_value_heads * hd * 2;
  const int64_t mlp = 3 * d * c.intermediate_size;
  return c.num_hidden_layers * (attn + mlp) + c.vocab_size * d;  // + lm_head
}

int64_t parameter_count(const LlamaConfig& c) {
  int64_t norms = (2 * c.num_hidden_layers + 1) * c.hidden_size;
  int64_t embedding = c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size;
  return matmul_parameter_count(c) + embedding + norms;
}

double training_flops_per_token(const LlamaConfig& c, int64_t seq) {
  return 6.0 * static_cast<double>(matmul_parameter_count(c)) +
         6.0 * static_cast<double>(c.num_hidden_layers) * static_cast<double>(seq) *
             static_cast<double>(c.hidden_size);
}

}  // namespace spillway::model
