#include "model/llama_weights_io.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/safetensors.h"

namespace spillway::model {
namespace {

namespace fs = std::filesystem;

LlamaConfig small() {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  return c;
}

class LlamaWeightsIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("llama_io_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(LlamaWeightsIo, RoundTripsBitExactlyWholeAndSharded) {
  auto w = LlamaWeights::random(small(), 3);
  for (uint64_t shard : {uint64_t{5'000'000'000}, uint64_t{8'000}}) {
    fs::remove_all(dir_);
    save_llama(dir_.string(), w, shard);
    EXPECT_EQ(fs::exists(dir_ / "model.safetensors.index.json"), shard == 8'000);
    LlamaWeights back = load_llama(dir_.string());
    ASSERT_EQ(back.tensors().size(), w.tensors().size());
    for (size_t i = 0; i < w.tensors().size(); ++i) {
      EXPECT_EQ(back.tensors()[i].data, w.tensors()[i].data) << w.tensors()[i].name;
    }
    EXPECT_EQ(config_to_json(back.config()), config_to_json(w.config()));
  }
}

TEST_F(LlamaWeightsIo, ShapeThatDisagreesWithTheConfigIsNamed) {
  save_llama(dir_.string(), LlamaWeights::random(small(), 3));
  LlamaConfig bigger = small();
  bigger.intermediate_size = 32;
  std::ofstream(dir_ / "config.json") << config_to_json(bigger).dump();
  try {
    load_llama(dir_.string());
    FAIL();
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << msg;
  }
}

TEST_F(LlamaWeightsIo, MissingDirectoryIsNamed) {
  try {
    load_llama((dir_ / "nope").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope: not a model directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spillway::model
