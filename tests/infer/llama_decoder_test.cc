#include "infer/llama_decoder.h"

#include <gtest/gtest.h>

#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "infer/generate.h"
#include "testing/numeric.h"
#include "train/train_step.h"
#include "testing/llama.h"

namespace spillway::infer {
namespace {

model::LlamaConfig small(bool tied) {
  model::LlamaConfig c = testing::llama_config(40, 32, 48, 2, 4, 2, tied);
  c.rope_scaling.llama3 = true;
  c.rope_scaling.original_max_position_embeddings = 8;
  return c;
}

// The cached path, fed in uneven chunks, gives the logits of one full forward.
TEST(LlamaDecoder, CachedLogitsEqualTheFullForward) {
  for (bool tied : {false, true}) {
    const int64_t seq = 23;
    auto weights = model::LlamaWeights::random(small(tied), 5, 0.2);
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < seq; ++i) tokens.push_back(static_cast<int32_t>((i * 17 + 3) % 40));

    auto space = make_host_heap_space("cpu:device", MemorySpace::kUnlimited);
    train::TrainStep full(small(tied), 1, seq, *space, /*with_backward=*/false);
    full.run(weights, tokens, tokens);
    std::vector<float> want_f(full.logits().begin(), full.logits().end());
    std::vector<double> want(want_f.begin(), want_f.end());

    LlamaDecoder decoder(weights, 32);
    std::vector<float> got;
    std::span<const int32_t> all(tokens);
    for (auto [start, len] : {std::pair<size_t, size_t>{0, 7}, {7, 1}, {8, 1}, {9, 10}, {19, 4}}) {
      auto logits = decoder.forward(all.subspan(start, len));
      got.insert(got.end(), logits.begin(), logits.end());
    }
    EXPECT_EQ(decoder.position(), seq);
    EXPECT_LT(testing::rel_error(got, want), 1e-5) << "tied " << tied;
  }
}

TEST(LlamaDecoder, FullContextIsAnError) {
  auto weights = model::LlamaWeights::random(small(true), 5);
  LlamaDecoder decoder(weights, 4);
  std::vector<int32_t> tokens{1, 2, 3};
  decoder.forward(tokens);
  EXPECT_THROW(decoder.forward(tokens), Error);
}

TEST(Generate, SameSeedSameTokensAndStopToken) {
  auto weights = model::LlamaWeights::random(small(false), 9, 0.5);
  std::vector<int32_t> prompt{1, 5, 9};
  GenerateOptions opts;
  opts.max_new_tokens = 20;
  opts.sampling.temperature = 1.0;
  opts.sampling.top_k = 10;
  opts.sampling.seed = 42;
  LlamaDecoder a(weights, 64), b(weights, 64);
  std::vector<int32_t> streamed;
  auto first = generate(a, prompt, opts, [&](int32_t t) { streamed.push_back(t); });
  auto second = generate(b, prompt, opts);
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, streamed);
  EXPECT_EQ(first.size(), 20u);

  opts.sampling.seed = 43;
  LlamaDecoder c(weights, 64);
  EXPECT_NE(generate(c, prompt, opts), first);

  opts.sampling.seed = 42;
  opts.stop_token = first[5];
  LlamaDecoder d(weights, 64);
  auto stopped = generate(d, prompt, opts);
  auto cut = std::find(first.begin(), first.end(), first[5]) - first.begin();
  EXPECT_EQ(stopped, std::vector<int32_t>(first.begin(), first.begin() + cut));
}

}  // namespace
}  // namespace spillway::infer
