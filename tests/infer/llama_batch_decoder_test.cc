// The batched, paged CPU decoder: its logits equal the single-sequence
// decoder's, and a sequence's logits are the same bits whatever other
// sequences share its steps and however its prompt is cut into chunks.
#include "infer/llama_batch_decoder.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/decoder.h"
#include "infer/llama_decoder.h"
#include "testing/llama.h"
#include "testing/numeric.h"

namespace spillway::infer {
namespace {

constexpr int64_t kVocab = 50;

model::LlamaConfig config() {
  auto c = testing::llama_config(kVocab, 32, 48, 2, 4, 2);
  c.max_position_embeddings = 64;
  return c;
}

// A cache of `blocks` blocks of 4 tokens for config().
KvCacheOptions cache_of(int64_t blocks) {
  return KvCacheOptions{kv_bytes_per_token(config(), sizeof(float)) * 4 * static_cast<uint64_t>(blocks), 4};
}

std::vector<float> row(const std::vector<float>& logits, size_t i) {
  return {logits.begin() + static_cast<std::ptrdiff_t>(i * kVocab),
          logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * kVocab)};
}

TEST(LlamaBatchDecoder, LogitsEqualTheSingleSequenceDecoders) {
  const auto weights = model::LlamaWeights::random(config(), 7, 0.3);
  LlamaBatchDecoder batch(weights, cache_of(32));
  // Three sequences of different lengths, prompts in chunks that cross block
  // boundaries, then decoding side by side.
  const std::vector<std::vector<int32_t>> streams = {testing::random_tokens(13, 1, kVocab),
                                                     testing::random_tokens(6, 2, kVocab),
                                                     testing::random_tokens(21, 3, kVocab)};
  const std::vector<std::vector<size_t>> cuts = {{5, 8, 9, 10, 11, 12, 13}, {1, 2, 3, 4, 5, 6}, {7, 14, 21}};
  std::vector<int64_t> seqs;
  std::vector<std::unique_ptr<LlamaDecoder>> singles;
  for (size_t s = 0; s < streams.size(); ++s) {
    seqs.push_back(batch.open());
    singles.push_back(std::make_unique<LlamaDecoder>(weights, 64));
  }
  std::vector<size_t> done(streams.size(), 0);
  for (size_t step = 0;; ++step) {
    std::vector<SequenceChunk> chunks;
    std::vector<size_t> who;
    for (size_t s = 0; s < streams.size(); ++s) {
      if (step >= cuts[s].size()) continue;
      const size_t end = cuts[s][step];
      chunks.push_back({seqs[s], std::span<const int32_t>(streams[s]).subspan(done[s], end - done[s])});
      who.push_back(s);
    }
    if (chunks.empty()) break;
    const std::vector<float> logits = batch.step(chunks);
    ASSERT_EQ(logits.size(), chunks.size() * kVocab);
    for (size_t i = 0; i < chunks.size(); ++i) {
      const size_t s = who[i];
      const std::vector<float> want = singles[s]->forward_last(chunks[i].tokens);
      EXPECT_LT(testing::rel_error(row(logits, i), std::vector<double>(want.begin(), want.end())), 1e-5)
          << "sequence " << s << " step " << step;
      done[s] = cuts[s][step];
      EXPECT_EQ(batch.position(seqs[s]), static_cast<int64_t>(done[s]));
    }
  }
}

TEST(LlamaBatchDecoder, ASequencesLogitsDoNotDependOnItsCompanyOrItsChunks) {
  const auto weights = model::LlamaWeights::random(config(), 11, 0.3);
  const std::vector<int32_t> prompt = testing::random_tokens(10, 4, kVocab);
  const std::vector<int32_t> next = {3, 17, 42};
  // Alone: the prompt whole, then one token a step.
  LlamaBatchDecoder alone(weights, cache_of(16));
  const int64_t a = alone.open();
  std::vector<std::vector<float>> want{alone.step(std::vector<SequenceChunk>{{a, prompt}})};
  for (const int32_t& t : next) want.push_back(alone.step(std::vector<SequenceChunk>{{a, {&t, 1}}}));
  // In company: other sequences before and after it in every step, and its
  // prompt in pieces of 3, 3 and 4.
  LlamaBatchDecoder busy(weights, cache_of(16));
  const int64_t x = busy.open(), s = busy.open(), y = busy.open();
  const std::vector<int32_t> other = testing::random_tokens(12, 9, kVocab);
  std::vector<std::vector<float>> got;
  size_t fed = 0;
  for (size_t piece : {3, 3, 4}) {
    const std::vector<SequenceChunk> chunks = {{x, std::span<const int32_t>(other).subspan(fed, 1)},
                                               {s, std::span<const int32_t>(prompt).subspan(fed, piece)},
                                               {y, std::span<const int32_t>(other).subspan(fed, 2)}};
    got.push_back(row(busy.step(chunks), 1));
    fed += piece;
  }
  for (const int32_t& t : next) {
    got.push_back(row(busy.step(std::vector<SequenceChunk>{{y, {&t, 1}}, {s, {&t, 1}}}), 1));
  }
  EXPECT_EQ(got.back(), want.back());
  EXPECT_EQ(got[2], want[0]);  // the prompt's last logits
  for (size_t i = 1; i < want.size(); ++i) EXPECT_EQ(got[2 + i], want[i]) << "token " << i;
}

// step_view() shows the logits step() copies out, and moves the positions
// alike: two decoders fed the same chunks, one through each.
TEST(LlamaBatchDecoder, AStepsViewIsTheLogitsStepGives) {
  const auto weights = model::LlamaWeights::random(config(), 6);
  LlamaBatchDecoder viewed(weights, cache_of(16)), copied(weights, cache_of(16));
  const std::vector<int32_t> prompt = testing::random_tokens(7, 3, kVocab), other = testing::random_tokens(3, 4, kVocab);
  const int64_t a = viewed.open(), b = viewed.open(), x = copied.open(), y = copied.open();
  for (int round = 0; round < 2; ++round) {
    const std::span<const float> view = viewed.step_view(std::vector<SequenceChunk>{{a, prompt}, {b, other}});
    const std::vector<float> want = copied.step(std::vector<SequenceChunk>{{x, prompt}, {y, other}});
    EXPECT_EQ(std::vector<float>(view.begin(), view.end()), want) << "round " << round;
    EXPECT_EQ(viewed.position(a), copied.position(x));
  }
}

TEST(LlamaBatchDecoder, AFullCacheOrABadTokenFailsAndChangesNoPosition) {
  const auto weights = model::LlamaWeights::random(config(), 5);
  LlamaBatchDecoder d(weights, cache_of(3));
  EXPECT_EQ(d.blocks().num_blocks(), 3);
  const int64_t s = d.open(), t = d.open();
  const std::vector<int32_t> eight = testing::random_tokens(8, 1, kVocab), five = testing::random_tokens(5, 2, kVocab);
  d.step(std::vector<SequenceChunk>{{s, eight}});
  try {
    d.step(std::vector<SequenceChunk>{{t, five}});
    FAIL() << "ran past the cache";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 2 blocks of 4 tokens"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.position(t), 0);
  const std::vector<int32_t> bad = {1, kVocab};
  EXPECT_THROW(d.step(std::vector<SequenceChunk>{{s, bad}}), Error);
  EXPECT_EQ(d.position(s), 8);
  EXPECT_THROW(d.step(std::vector<SequenceChunk>{{s, {}}}), Error);
  EXPECT_THROW(d.step(std::vector<SequenceChunk>{{s, {&eight[0], 1}}, {s, {&eight[1], 1}}}), Error);
  d.close(s);
  d.step(std::vector<SequenceChunk>{{t, five}});  // room again
  EXPECT_EQ(d.position(t), 5);
}

TEST(LlamaBatchDecoder, TheBudgetDecidesTheBlocks) {
  const auto c = config();
  // 2 layers x 2 kv heads x 8 dims x (k, v) x 4 bytes = 256 bytes a token.
  EXPECT_EQ(kv_bytes_per_token(c, sizeof(float)), 256u);
  EXPECT_EQ(kv_blocks_in_budget(c, KvCacheOptions{256 * 16 * 10 + 100, 16}, sizeof(float)), 10);
  try {
    kv_blocks_in_budget(c, KvCacheOptions{1000, 16}, sizeof(float));
    FAIL() << "a budget below one block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-mem"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one block of 16 tokens takes"), std::string::npos) << e.what();
  }
  const auto weights = model::LlamaWeights::random(c, 5);
  EXPECT_EQ(make_batch_decoder(weights, cache_of(4), "cpu")->description().rfind("cpu, ", 0), 0u);
  try {
    make_batch_decoder(weights, cache_of(4), "tpu");
    FAIL() << "an unknown device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, cpu or cuda"), std::string::npos) << e.what();
  }
  if (!device_is_cuda("auto")) {  // no GPU here: "auto" is the CPU, "cuda" an error
    EXPECT_THROW(make_batch_decoder(weights, cache_of(4), "cuda"), Error);
    EXPECT_EQ(make_batch_decoder(weights, cache_of(4), "auto")->description().rfind("cpu, ", 0), 0u);
  }
}

}  // namespace
}  // namespace spillway::infer
