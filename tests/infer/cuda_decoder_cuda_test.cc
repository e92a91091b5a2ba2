// The CUDA decoder against the CPU decoder on tiny random LLaMAs whose
// weights are rounded to bf16 first, so that both read the same weights and
// only the GPU's bf16 activations set them apart.
//
// Tolerances: the CPU emulating the GPU's roundings (every op's output to
// bf16) differs from the fp32 CPU by 0.8% (relative, over all logits) and by
// 1.4% in the worst row on these models, and by at most 0.04 in any logit
// (logits of size ~3). The checks allow 3% overall, 5% per row, and compare
// greedy choices only where the CPU's top two logits are more than
// kClearMargin = 0.15 apart, which rounding noise of that size cannot flip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_device.h"
#include "infer/cuda/cuda_decoder.h"
#include "infer/decoder.h"
#include "infer/generate.h"
#include "infer/llama_decoder.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::infer {
namespace {

constexpr double kLogitsTolerance = 3e-2;
constexpr double kRowTolerance = 5e-2;
constexpr float kClearMargin = 0.15f;
constexpr int64_t kVocab = 300;
constexpr int64_t kPromptLen = 200;  // past 128 keys: decoding takes the split-key path
constexpr int64_t kSteps = 20;
constexpr int64_t kMaxLen = 400;

struct Model {
  const char* name;
  model::LlamaConfig config;
  uint64_t seed;
};

std::vector<Model> models() {
  model::LlamaConfig base;
  base.vocab_size = kVocab;
  base.hidden_size = 256;
  base.num_hidden_layers = 2;
  base.rope_scaling.llama3 = true;
  base.rope_scaling.original_max_position_embeddings = 64;
  model::LlamaConfig a = base;  // head dim 64, two query heads per kv head
  a.intermediate_size = 512;
  a.num_attention_heads = 4;
  a.num_key_value_heads = 2;
  model::LlamaConfig b = base;  // head dim 128, one kv head, tied embeddings
  b.intermediate_size = 384;
  b.num_attention_heads = 2;
  b.num_key_value_heads = 1;
  b.tie_word_embeddings = true;
  return {{"head_dim 64, untied", a, 7}, {"head_dim 128, tied", b, 4}};
}

model::LlamaWeights bf16_weights(const Model& m) { return testing::bf16_random_weights(m.config, m.seed, 0.05); }

std::vector<int32_t> prompt_tokens() {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < kPromptLen; ++i) p.push_back(static_cast<int32_t>((i * 37 + 11) % kVocab));
  return p;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Greedy choice and its lead over the runner-up.
std::pair<int32_t, float> top1(std::span<const float> logits) {
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  float second = -INFINITY;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (static_cast<ptrdiff_t>(i) != best) second = std::max(second, logits[i]);
  }
  return {static_cast<int32_t>(best), logits[static_cast<size_t>(best)] - second};
}

// Rows of [rows, vocab] logits each within kRowTolerance, and the whole
// within kLogitsTolerance.
void expect_logits_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LT(testing::rel_error(got, as_double(want)), kLogitsTolerance) << what;
  for (size_t r = 0; r < want.size() / kVocab; ++r) {
    std::vector<float> g(got.begin() + r * kVocab, got.begin() + (r + 1) * kVocab);
    std::vector<float> w(want.begin() + r * kVocab, want.begin() + (r + 1) * kVocab);
    ASSERT_LT(testing::rel_error(g, as_double(w)), kRowTolerance) << what << ", row " << r;
  }
}

// Prefill in chunks (64 tokens a pass, logits copied 16 rows at a time), then
// kSteps tokens fed one at a time, each the CPU's greedy choice (so both sides
// see the same tokens): the logits match at every step, and the GPU's greedy
// choice equals the CPU's wherever the CPU's is clear.
TEST(CudaDecoder, PrefillAndStepsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Model& m : models()) {
    SCOPED_TRACE(m.name);
    const auto weights = bf16_weights(m);
    const auto prompt = prompt_tokens();
    LlamaDecoder cpu(weights, kMaxLen);
    auto gpu = make_cuda_decoder(weights, kMaxLen, CudaDecoderOptions{0, 64, 16});

    const std::vector<float> want = cpu.forward(prompt);
    const std::vector<float> got = gpu->forward(prompt);
    expect_logits_near(got, want, "prefill");
    EXPECT_EQ(gpu->position(), kPromptLen);
    std::vector<float> cpu_last(want.end() - kVocab, want.end());
    std::vector<float> gpu_last(got.end() - kVocab, got.end());
    // The last row again, from a decoder fed the whole prompt in one pass.
    expect_logits_near(make_cuda_decoder(weights, kMaxLen)->forward_last(prompt), cpu_last,
                       "prefill in one pass, last row");
    int clear = 0;
    for (int64_t step = 0; step < kSteps; ++step) {
      const auto [token, margin] = top1(cpu_last);
      if (margin > kClearMargin) {
        ++clear;
        EXPECT_EQ(top1(gpu_last).first, token) << "step " << step << ", CPU margin " << margin;
      }
      cpu_last = cpu.forward_last(std::span<const int32_t>(&token, 1));
      gpu_last = gpu->forward_last(std::span<const int32_t>(&token, 1));
      expect_logits_near(gpu_last, cpu_last, "step " + std::to_string(step));
    }
    EXPECT_EQ(gpu->position(), kPromptLen + kSteps);
    // A property of the CPU side alone (fixed weights and tokens): enough
    // clear choices that the comparison above means something.
    EXPECT_GE(clear, 8);
  }
}

// generate() on the GPU: greedy tokens equal the CPU's until the CPU's first
// unclear choice, and two runs give the same tokens.
TEST(CudaDecoder, GreedyGenerationFollowsCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Model& m : models()) {
    SCOPED_TRACE(m.name);
    const auto weights = bf16_weights(m);
    const auto prompt = prompt_tokens();
    GenerateOptions options;
    options.max_new_tokens = kSteps;
    options.sampling.temperature = 0;

    LlamaDecoder cpu(weights, kMaxLen);
    std::vector<int32_t> want;
    int64_t clear_prefix = -1;  // tokens before the CPU's first unclear choice
    {
      std::vector<float> logits = cpu.forward_last(prompt);
      for (int64_t i = 0; i < kSteps; ++i) {
        const auto [token, margin] = top1(logits);
        if (margin <= kClearMargin && clear_prefix < 0) clear_prefix = i;
        want.push_back(token);
        logits = cpu.forward_last(std::span<const int32_t>(&token, 1));
      }
      if (clear_prefix < 0) clear_prefix = kSteps;
    }
    LlamaDecoder cpu_again(weights, kMaxLen);
    EXPECT_EQ(generate(cpu_again, prompt, options), want);

    auto gpu = make_cuda_decoder(weights, kMaxLen);
    GenerateStats stats;
    const std::vector<int32_t> got = generate(*gpu, prompt, options, nullptr, &stats);
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + clear_prefix),
              std::vector<int32_t>(want.begin(), want.begin() + clear_prefix))
        << "the CPU's choices are clear for the first " << clear_prefix << " tokens";
    EXPECT_EQ(stats.prompt_tokens, kPromptLen);
    EXPECT_EQ(stats.decode_steps, kSteps - 1);
    EXPECT_EQ(gpu->position(), kPromptLen + kSteps - 1);

    gpu->reset();
    EXPECT_EQ(generate(*gpu, prompt, options), got);
  }
}

// The same inputs give the same bits, after reset() too.
TEST(CudaDecoder, ResetRepeatsBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const Model m = models()[0];
  const auto weights = bf16_weights(m);
  const auto prompt = prompt_tokens();
  auto gpu = make_cuda_decoder(weights, kMaxLen, CudaDecoderOptions{0, 48, 64});
  std::vector<std::vector<float>> first;
  for (int run = 0; run < 2; ++run) {
    std::vector<std::vector<float>> logits;
    logits.push_back(gpu->forward(prompt));
    for (int32_t token : {5, 77, 299, 0}) logits.push_back(gpu->forward_last(std::span<const int32_t>(&token, 1)));
    if (run == 0) {
      first = logits;
      gpu->reset();
      EXPECT_EQ(gpu->position(), 0);
    } else {
      for (size_t i = 0; i < logits.size(); ++i) EXPECT_TRUE(logits[i] == first[i]) << "call " << i;
    }
  }
}

TEST(CudaDecoder, BadInputThrowsAndLeavesThePosition) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto weights = bf16_weights(models()[1]);
  auto gpu = make_cuda_decoder(weights, 4);
  std::vector<int32_t> three{1, 2, 3};
  gpu->forward(three);
  EXPECT_THROW(gpu->forward(three), Error);  // the context is full
  EXPECT_EQ(gpu->position(), 3);
  std::vector<int32_t> outside{static_cast<int32_t>(kVocab)};
  EXPECT_THROW(gpu->forward_last(outside), Error);
  EXPECT_THROW(gpu->forward_last({}), Error);
  EXPECT_EQ(gpu->position(), 3);
  const std::vector<float> last = gpu->forward_last(std::vector<int32_t>{4});
  EXPECT_EQ(last.size(), static_cast<size_t>(kVocab));
  EXPECT_TRUE(std::all_of(last.begin(), last.end(), [](float x) { return std::isfinite(x); }));
}

TEST(CudaDecoder, MakeDecoderChoosesByDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const auto weights = bf16_weights(models()[0]);
  EXPECT_EQ(make_decoder(weights, 8, "auto")->description().rfind("cuda:0 ", 0), 0u);
  EXPECT_EQ(make_decoder(weights, 8, "cuda")->description().rfind("cuda:0 ", 0), 0u);
  EXPECT_EQ(make_decoder(weights, 8, "cpu")->description().rfind("cpu", 0), 0u);
}

}  // namespace
}  // namespace spillway::infer
