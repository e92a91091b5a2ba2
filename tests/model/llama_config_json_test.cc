#include "model/llama_config_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

#include "base/status.h"

namespace spillway::model {
namespace {

using nlohmann::json;

json llama32_1b_config() {
  // The fields of meta-llama/Llama-3.2-1B's config.json (values as published).
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

TEST(LlamaConfigJson, ReadsHuggingFaceConfig) {
  LlamaConfig c = config_from_json(llama32_1b_config(), "config.json");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  LlamaConfig preset = preset_config("llama3.2-1b");
  EXPECT_EQ(config_to_json(c), config_to_json(preset));
  // 1.24 billion parameters, as published.
  EXPECT_NEAR(static_cast<double>(parameter_count(c)), 1.2358e9, 0.001e9);
}

TEST(LlamaConfigJson, ReadsTransformers5RopeParameters) {
  json j = llama32_1b_config();
  json rope = j["rope_scaling"];
  rope["rope_theta"] = 500000.0;
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = rope;
  EXPECT_EQ(config_to_json(config_from_json(j, "config.json")), config_to_json(preset_config("llama3.2-1b")));
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  LlamaConfig c = config_from_json(j, "config.json");
  EXPECT_FALSE(c.rope_scaling.llama3);
  EXPECT_EQ(c.rope_theta, 10000.0);
}

TEST(LlamaConfigJson, RoundTrips) {
  for (const auto& name : preset_names()) {
    LlamaConfig c = preset_config(name);
    EXPECT_EQ(config_to_json(config_from_json(config_to_json(c), name)), config_to_json(c)) << name;
  }
}

void expect_error(json j, const std::string& part) {
  try {
    config_from_json(j, "my/config.json");
    FAIL() << "expected an error with " << part;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("my/config.json: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(LlamaConfigJson, RejectsWhatItCannotHonour) {
  json j = llama32_1b_config();
  j["sliding_window"] = 4096;
  expect_error(j, "unknown config key 'sliding_window'");
  j = llama32_1b_config();
  j["hidden_act"] = "gelu";
  expect_error(j, "hidden_act");
  j = llama32_1b_config();
  j["num_key_value_heads"] = 5;
  expect_error(j, "num_key_value_heads 5");
  j = llama32_1b_config();
  j["hidden_size"] = "big";
  expect_error(j, "hidden_size must be an integer");
  j = llama32_1b_config();
  j["rope_scaling"]["rope_type"] = "yarn";
  expect_error(j, "rope_scaling type 'yarn'");
  j = llama32_1b_config();
  j.erase("vocab_size");
  expect_error(j, "vocab_size must be positive");
}

// Sizes that are valid JSON but would overflow or exhaust memory, and values
// of the wrong JSON type: each one exact line naming the field.
TEST(LlamaConfigJson, HugeSizesAndWrongTypesGiveExactLines) {
  const auto error_of = [](const json& j) -> std::string {
    try {
      config_from_json(j, "config.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  struct Case {
    const char* key;
    json value;
    std::string line;
  };
  const std::vector<Case> cases = {
      {"num_hidden_layers", 2147483648, "config.json: num_hidden_layers is 2147483648; at most 100000"},
      {"vocab_size", 2147483648, "config.json: vocab_size is 2147483648; at most 4194304"},
      {"hidden_size", int64_t{1} << 40, "config.json: hidden_size is 1099511627776; at most 65536"},
      {"intermediate_size", 2147483648, "config.json: intermediate_size is 2147483648; at most 262144"},
      {"max_position_embeddings", int64_t{1} << 40,
       "config.json: max_position_embeddings is 1099511627776; at most 16777216"},
      {"num_hidden_layers", uint64_t{1} << 63, "config.json: num_hidden_layers is 9223372036854775808; too large"},
      {"num_hidden_layers", 16.5, "config.json: num_hidden_layers must be an integer, got 16.5"},
      {"vocab_size", -5, "config.json: vocab_size must be positive, got -5"},
      {"tie_word_embeddings", "yes", "config.json: tie_word_embeddings must be true or false"},
      {"rope_scaling", json{{"rope_type", 3}}, "config.json: rope_scaling.rope_type must be a string, got 3"},
  };
  for (const Case& c : cases) {
    json j = llama32_1b_config();
    j[c.key] = c.value;
    EXPECT_EQ(error_of(j), c.line) << c.key;
  }
}

TEST(LlamaConfigJson, UnknownPresetListsTheKnownOnes) {
  try {
    preset_config("llama5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown preset 'llama5' (known: tiny, llama3.2-1b"), std::string::npos);
  }
}

// The presets are the published models' shapes: their parameter counts.
TEST(LlamaConfigJson, PresetsHaveThePublishedModelsParameterCounts) {
  const std::pair<const char*, int64_t> counts[] = {{"llama3.2-1b", 1235814400},  {"llama3-8b", 8030261248},
                                                    {"llama2-7b", 6738415616},    {"llama2-13b", 13015864320},
                                                    {"llama2-70b", 68976648192}, {"llama3-70b", 70553706496}};
  for (const auto& [name, count] : counts) EXPECT_EQ(parameter_count(preset_config(name)), count) << name;
}

TEST(LlamaConfigJson, FlopsPerTokenFollowDesign) {
  LlamaConfig c = preset_config("llama3.2-1b");
  // 6 P + 6 L s d with P the matmul weights (lm_head counted once).
  double p = 16.0 * (2048.0 * 2048 * 2 + 2048.0 * 512 * 2 + 3.0 * 2048 * 8192) + 128256.0 * 2048;
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 4096), 6 * p + 6.0 * 16 * 4096 * 2048);
}

}  // namespace
}  // namespace spillway::model
