#include "model/llama_weights_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_io.h"

namespace spillway::model {
namespace {

namespace fs = std::filesystem;

LlamaConfig small(int64_t layers = 4, bool tied = false) {
  LlamaConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.tie_word_embeddings = tied;
  return c;
}

class LlamaWeightsCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("llama_check_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The weights of `w` plus `extra` (name -> a copy of the tensor `like`).
  void write(const LlamaWeights& w, const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    save_llama(dir_.string(), w);
    WeightDirectoryWriter writer;
    for (const NamedTensor& t : w.tensors()) writer.add(t.name, DType::f32, t.shape, t.data.data());
    for (const auto& [name, like] : extra) {
      const NamedTensor& t = w.at(like);
      writer.add(name, DType::f32, t.shape, t.data.data());
    }
    writer.write(dir_.string());
  }
  void set_config(const LlamaConfig& c) { std::ofstream(dir_ / "config.json") << config_to_json(c).dump(); }
  std::string error() {
    try {
      load_llama(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir_;
};

TEST_F(LlamaWeightsCheck, FewerLayersInTheConfigThanInTheWeightsAreRefusedNamingBoth) {
  write(LlamaWeights::random(small(4), 1));
  for (int64_t layers : {1, 2, 3}) {
    set_config(small(layers));
    EXPECT_EQ(error(), (dir_ / "config.json").string() + ": num_hidden_layers is " + std::to_string(layers) +
                           " but the weights in " + dir_.string() + " hold 4 layers");
  }
}

TEST_F(LlamaWeightsCheck, MoreLayersInTheConfigThanInTheWeightsAreRefusedNamingBoth) {
  write(LlamaWeights::random(small(2), 1));
  set_config(small(5));
  EXPECT_EQ(error(), (dir_ / "config.json").string() + ": num_hidden_layers is 5 but the weights in " + dir_.string() +
                         " hold 2 layers");
}

TEST_F(LlamaWeightsCheck, AnUnexpectedTensorIsRefusedNamingTheFileAndTheTensor) {
  write(LlamaWeights::random(small(2), 1), {{"model.extra.weight", "model.norm.weight"}});
  EXPECT_EQ(error(), (dir_ / "model.safetensors").string() +
                         ": tensor 'model.extra.weight' is not part of the model " + (dir_ / "config.json").string() +
                         " describes");
}

TEST_F(LlamaWeightsCheck, AnUnexpectedTensorInAShardNamesTheShard) {
  LlamaWeights w = LlamaWeights::random(small(2), 1);
  save_llama(dir_.string(), w, 8'000);
  WeightDirectoryWriter writer;
  for (const NamedTensor& t : w.tensors()) writer.add(t.name, DType::f32, t.shape, t.data.data());
  writer.add("zz.extra", DType::f32, w.at("model.norm.weight").shape, w.at("model.norm.weight").data.data());
  const std::vector<std::string> files = writer.write(dir_.string(), 8'000);
  const std::string last_shard = files[files.size() - 2];  // names in order: zz.extra is in the last
  EXPECT_EQ(error(), (dir_ / last_shard).string() + ": tensor 'zz.extra' is not part of the model " +
                         (dir_ / "config.json").string() + " describes");
}

TEST_F(LlamaWeightsCheck, AnUntiedHeadBesideTiedEmbeddingsIsRefused) {
  LlamaWeights w = LlamaWeights::random(small(2, /*tied=*/true), 1);
  NamedTensor other = w.at("model.embed_tokens.weight");
  other.data[7] += 1.0f;
  save_llama(dir_.string(), w);
  WeightDirectoryWriter writer;
  for (const NamedTensor& t : w.tensors()) writer.add(t.name, DType::f32, t.shape, t.data.data());
  writer.add("lm_head.weight", DType::f32, other.shape, other.data.data());
  writer.write(dir_.string());
  EXPECT_EQ(error(), (dir_ / "model.safetensors").string() +
                         ": tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' but " +
                         (dir_ / "config.json").string() +
                         " ties them (tie_word_embeddings: true), which would discard it");
}

TEST_F(LlamaWeightsCheck, AHeadEqualToTiedEmbeddingsAndRotaryBuffersAreAccepted) {
  LlamaWeights w = LlamaWeights::random(small(2, /*tied=*/true), 1);
  write(w, {{"lm_head.weight", "model.embed_tokens.weight"},
            {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers.0.input_layernorm.weight"},
            {"model.layers.1.self_attn.rotary_emb.inv_freq", "model.layers.0.input_layernorm.weight"}});
  LlamaWeights back = load_llama(dir_.string());
  EXPECT_EQ(back.at("model.embed_tokens.weight").data, w.at("model.embed_tokens.weight").data);
  EXPECT_EQ(back.tensors().size(), w.tensors().size());
}

TEST_F(LlamaWeightsCheck, AHeadBesideUntiedEmbeddingsIsAParameter) {
  LlamaWeights w = LlamaWeights::random(small(2, /*tied=*/false), 1);
  write(w);
  EXPECT_EQ(load_llama(dir_.string()).at("lm_head.weight").data, w.at("lm_head.weight").data);
}

}  // namespace
}  // namespace spillway::model
