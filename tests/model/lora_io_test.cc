// PEFT's adapter folder (model/lora_io.h): what spillway writes reads back
// exactly, under PEFT's file and tensor names, and what PEFT can write that
// spillway would misread is refused in one line naming the file and field.
#include "model/lora_io.h"

#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/safetensors.h"
#include "testing/files.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::model {
namespace {

using nlohmann::json;

class LoraIo : public testing::TempDirTest {
 protected:
  LlamaConfig config_ = testing::llama_config(13, 16, 24, 2, 4, 2);
  LoraConfig lora_ = {.rank = 4, .alpha = 8, .targets = parse_lora_targets("q,v,down", "test")};

  // An adapter whose B is not zero, saved to `name`.
  LoraWeights saved(const std::string& name) {
    LoraWeights w = LoraWeights::init(config_, lora_, 3);
    for (size_t i = 0; i < w.tensors().size(); ++i) {
      auto& t = w.tensors()[i];
      if (t.name.ends_with(".lora_B.weight")) t.data = testing::random_vector<float>(t.shape.numel(), 90 + i);
    }
    save_peft_adapter(file(name), w, "base/model");
    return w;
  }
  json config_json(const std::string& name) { return json::parse(testing::read_bytes(file(name) + "/adapter_config.json")); }
  void write_config(const std::string& name, const json& j) {
    std::ofstream(file(name) + "/adapter_config.json") << j.dump();
  }
  std::string load_error(const std::string& name) {
    try {
      load_peft_adapter(file(name), config_);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(LoraIo, WhatIsSavedLoadsBackExactly) {
  const LoraWeights w = saved("adapter");
  const LoraWeights back = load_peft_adapter(file("adapter"), config_);
  EXPECT_EQ(back.lora().rank, 4);
  EXPECT_EQ(back.lora().alpha, 8);
  EXPECT_EQ(back.lora().targets, lora_.targets);
  ASSERT_EQ(back.tensors().size(), w.tensors().size());
  for (size_t i = 0; i < w.tensors().size(); ++i) {
    EXPECT_EQ(back.tensors()[i].name, w.tensors()[i].name);
    EXPECT_EQ(back.tensors()[i].data, w.tensors()[i].data) << w.tensors()[i].name;
  }
}

TEST_F(LoraIo, FilesFollowPeftsLayout) {
  saved("adapter");
  const json j = config_json("adapter");
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 4);
  EXPECT_EQ(j["lora_alpha"], 8.0);
  EXPECT_EQ(j["target_modules"], json({"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(j["base_model_name_or_path"], "base/model");
  const SafetensorsFile f(file("adapter") + "/adapter_model.safetensors");
  ASSERT_NE(f.find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"), nullptr);
  const SafetensorsTensor* b = f.find("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (Shape{16, 4}));
  EXPECT_EQ(b->dtype, DType::f32);
  EXPECT_EQ(f.tensors().size(), 12u);
}

TEST_F(LoraIo, WhatWouldBeMisreadIsRefusedInOneLine) {
  saved("adapter");
  const std::string path = file("adapter") + "/adapter_config.json";
  struct Case {
    const char* key;
    json value;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"use_rslora", true, path + ": use_rslora is true; rank-stabilized scaling (alpha / sqrt(r)) is not supported"},
      {"use_dora", true, path + ": use_dora is true; DoRA adapters are not supported"},
      {"bias", "all", path + ": bias is \"all\"; adapters that train biases are not supported (LLaMA has none)"},
      {"rank_pattern", json{{"q_proj", 8}}, path + ": rank_pattern is {\"q_proj\":8}; ranks per module are not supported"},
      {"target_modules", ".*proj", path + ": target_modules is \".*proj\"; expected a list of module names (q_proj, "
                                          "...), not a pattern"},
      {"target_modules", json({"q_proj", "lm_head"}), path + ": target_modules: 'lm_head' is not a projection LoRA "
                                                             "can adapt: q, k, v, o, gate, up, down (or all)"},
      {"peft_type", "IA3", path + ": peft_type is \"IA3\"; only LoRA adapters (\"LORA\") are read"},
      {"r", 2.5, path + ": r is 2.5; expected the rank, a whole number"},
  };
  const json good = config_json("adapter");
  for (const Case& c : cases) {
    json j = good;
    j[c.key] = c.value;
    write_config("adapter", j);
    EXPECT_EQ(load_error("adapter"), c.error) << c.key;
  }
}

TEST_F(LoraIo, TensorsOfAnotherShapeOrPlaceAreRefused) {
  saved("adapter");
  json j = config_json("adapter");
  j["r"] = 2;  // the file's tensors are rank 4
  write_config("adapter", j);
  EXPECT_NE(load_error("adapter").find("adapter_model.safetensors"), std::string::npos);

  j["r"] = 4;
  j["target_modules"] = json({"q_proj", "down_proj"});  // the file holds v_proj's too
  write_config("adapter", j);
  EXPECT_NE(load_error("adapter").find("holds tensor 'base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight' "
                                       "that a rank-4 adapter on q_proj,down_proj of this model has no place for"),
            std::string::npos)
      << load_error("adapter");
  EXPECT_NE(load_error("missing").find("is not a folder"), std::string::npos);
}

}  // namespace
}  // namespace spillway::model
