// The decoder interface on the CPU: forward_last, the device factory, and
// what generate() asks of a decoder (one pass per token it needs, no more).
#include "infer/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/generate.h"
#include "infer/llama_decoder.h"
#include "testing/llama.h"
#include "testing/numeric.h"

#ifdef SPILLWAY_HAS_CUDA
#include "device/cuda/cuda_device.h"
#endif

namespace spillway::infer {
namespace {

model::LlamaConfig small() {
  return testing::llama_config(40, 32, 48, 2, 4, 2);
}

bool gpu_visible() {
#ifdef SPILLWAY_HAS_CUDA
  return cuda_device_count() > 0;
#else
  return false;
#endif
}

TEST(Decoder, ForwardLastIsTheLastRowOfForward) {
  auto weights = model::LlamaWeights::random(small(), 3, 0.3);
  std::vector<int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
  auto all = make_decoder(weights, 16, "cpu");
  auto last = make_decoder(weights, 16, "cpu");
  for (auto chunk : {std::span<const int32_t>(prompt).first(5), std::span<const int32_t>(prompt).subspan(5)}) {
    const std::vector<float> rows = all->forward(chunk);
    const std::vector<float> want(rows.end() - 40, rows.end());
    const std::vector<float> got = last->forward_last(chunk);
    EXPECT_LT(testing::rel_error(got, std::vector<double>(want.begin(), want.end())), 1e-6);
    EXPECT_EQ(last->position(), all->position());
  }
  EXPECT_THROW(last->forward_last({}), Error);
  EXPECT_EQ(last->position(), 8);
}

TEST(Decoder, MakeDecoderChoosesByDevice) {
  auto weights = model::LlamaWeights::random(small(), 3);
  EXPECT_EQ(make_decoder(weights, 4, "cpu")->description().rfind("cpu, ", 0), 0u);
  EXPECT_THROW(make_decoder(weights, 4, "gpu"), Error);
  EXPECT_THROW(make_decoder(weights, 4, ""), Error);
  if (!gpu_visible()) {
    EXPECT_THROW(make_decoder(weights, 4, "cuda"), Error);
    EXPECT_EQ(make_decoder(weights, 4, "auto")->description().rfind("cpu, ", 0), 0u);
  }
}

// Counts the passes generate() asks for.
class CountingDecoder final : public Decoder {
 public:
  explicit CountingDecoder(LlamaDecoder& inner) : inner_(inner) {}
  std::vector<float> forward(std::span<const int32_t> tokens) override {
    ++passes;
    return inner_.forward(tokens);
  }
  std::vector<float> forward_last(std::span<const int32_t> tokens) override {
    ++passes;
    ++last_passes;
    return inner_.forward_last(tokens);
  }
  int64_t position() const override { return inner_.position(); }
  int64_t capacity() const override { return inner_.capacity(); }
  void reset() override { inner_.reset(); }
  std::string description() const override { return "counting " + inner_.description(); }
  int passes = 0, last_passes = 0;

 private:
  LlamaDecoder& inner_;
};

TEST(Generate, OnePassForThePromptAndOnePerTokenAfterTheFirst) {
  auto weights = model::LlamaWeights::random(small(), 9, 0.5);
  std::vector<int32_t> prompt{1, 5, 9};
  GenerateOptions opts;
  opts.max_new_tokens = 12;
  opts.sampling.temperature = 0;

  LlamaDecoder plain(weights, 64);
  CountingDecoder counting(plain);
  GenerateStats stats;
  const auto tokens = generate(counting, prompt, opts, nullptr, &stats);
  ASSERT_EQ(tokens.size(), 12u);
  EXPECT_EQ(counting.passes, 12);  // the prompt, then tokens 1..11; token 12 is never fed
  EXPECT_EQ(counting.last_passes, 12);
  EXPECT_EQ(plain.position(), 3 + 11);
  EXPECT_EQ(stats.prompt_tokens, 3);
  EXPECT_EQ(stats.decode_steps, 11);
  EXPECT_GT(stats.prefill_seconds, 0.0);
  EXPECT_GT(stats.decode_seconds, 0.0);
  EXPECT_GT(stats.decode_tokens_per_second(), 0.0);

  // Greedy tokens are the argmax of the full forward's last rows.
  LlamaDecoder check(weights, 64);
  std::vector<int32_t> fed = prompt;
  for (int32_t want : tokens) {
    check.reset();
    const auto logits = check.forward(fed);
    const auto last = std::span<const float>(logits).last(40);
    EXPECT_EQ(std::max_element(last.begin(), last.end()) - last.begin(), want);
    fed.push_back(want);
  }

  // No tokens asked for: the prompt is fed and nothing is drawn.
  opts.max_new_tokens = 0;
  plain.reset();
  EXPECT_TRUE(generate(plain, prompt, opts).empty());
}

TEST(Generate, StopsWhenTheContextIsFull) {
  auto weights = model::LlamaWeights::random(small(), 9, 0.5);
  std::vector<int32_t> prompt{1, 5, 9};
  GenerateOptions opts;
  opts.max_new_tokens = 50;
  LlamaDecoder decoder(weights, 8);
  // Tokens 1..5 fill positions 3..7; the sixth is drawn from the last logits.
  EXPECT_EQ(generate(decoder, prompt, opts).size(), 6u);
  EXPECT_EQ(decoder.position(), 8);
}

}  // namespace
}  // namespace spillway::infer
