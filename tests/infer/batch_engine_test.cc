// Continuous batching: a request's tokens are the same alone, in a busy
// batch, and from the single-sequence generate(); requests end at their stop
// token or their length; cancelled ones leave the batch and free the cache;
// one that could never fit is refused with the numbers.
#include "infer/batch_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "infer/generate.h"
#include "infer/llama_batch_decoder.h"
#include "testing/llama.h"

namespace spillway::infer {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kVocab = 64;

model::LlamaConfig config() {
  auto c = testing::llama_config(kVocab, 32, 48, 2, 4, 2);
  c.max_position_embeddings = 128;
  return c;
}

std::unique_ptr<BatchEngine> engine_for(const model::LlamaWeights& w, int64_t blocks, EngineOptions options = {}) {
  const KvCacheOptions cache{kv_bytes_per_token(w.config(), sizeof(float)) * 8 * static_cast<uint64_t>(blocks), 8};
  return std::make_unique<BatchEngine>(std::make_unique<LlamaBatchDecoder>(w, cache), options);
}

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::running;
};

Outcome drain(RequestStream& s) {
  Outcome o;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (o.finish == FinishReason::running && std::chrono::steady_clock::now() < deadline) {
    RequestStream::Update u = s.read(100ms);
    o.tokens.insert(o.tokens.end(), u.tokens.begin(), u.tokens.end());
    o.finish = u.finish;
  }
  return o;
}

EngineRequest request(uint64_t prompt_seed, size_t prompt_len, int64_t max_new, double temperature, uint64_t seed) {
  EngineRequest r;
  r.prompt = testing::random_tokens(prompt_len, prompt_seed, kVocab);
  r.max_new_tokens = max_new;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

TEST(BatchEngine, TokensAreTheSameAloneInABusyBatchAndFromGenerate) {
  const auto weights = model::LlamaWeights::random(config(), 21, 0.5);
  // Eight requests, greedy and sampled, prompts of different lengths.
  std::vector<EngineRequest> requests;
  for (uint64_t i = 0; i < 8; ++i) requests.push_back(request(i + 1, 3 + 5 * i, 12, i % 2 ? 0.9 : 0.0, 100 + i));
  std::vector<Outcome> alone;
  {
    auto engine = engine_for(weights, 64);
    for (const EngineRequest& r : requests) alone.push_back(drain(*engine->submit(r)));
  }
  EngineOptions small_steps;
  small_steps.prefill_tokens = 7;  // prompts cut into pieces, beside the running streams
  auto engine = engine_for(weights, 64, small_steps);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const EngineRequest& r : requests) streams.push_back(engine->submit(r));
  for (size_t i = 0; i < requests.size(); ++i) {
    const Outcome busy = drain(*streams[i]);
    EXPECT_EQ(busy.tokens, alone[i].tokens) << "request " << i;
    EXPECT_EQ(busy.finish, FinishReason::length);
    EXPECT_EQ(busy.tokens.size(), 12u);
    // The single-sequence decoder (BLAS matmuls) picks the same tokens.
    LlamaDecoder single(weights, 128);
    GenerateOptions g;
    g.max_new_tokens = 12;
    g.sampling = requests[i].sampling;
    EXPECT_EQ(generate(single, requests[i].prompt, g), busy.tokens) << "request " << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.finished_length, 8);
  EXPECT_EQ(s.blocks_used, 0);
  EXPECT_EQ(s.generated_tokens, 8 * 12);
}

// A decoder whose logits for sequences fed token 13 are NaN, and flat for
// the rest: what a broken model gives one request.
class NanForThirteen final : public BatchDecoder {
 public:
  NanForThirteen() : BatchDecoder(64, 8) {}
  int64_t vocab() const override { return kVocab; }
  uint64_t cache_bytes() const override { return 0; }
  std::string description() const override { return "test decoder"; }

 protected:
  std::span<const float> run(std::span<const SequenceChunk> chunks, std::span<const int64_t>) override {
    logits_.assign(chunks.size() * static_cast<size_t>(kVocab), 0.0f);
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (chunks[i].tokens.front() != 13) continue;
      std::fill_n(logits_.begin() + static_cast<std::ptrdiff_t>(i * kVocab), kVocab, std::nanf(""));
    }
    return logits_;
  }

 private:
  std::vector<float> logits_;
};

// A token that cannot be drawn ends its own request with the error, in the
// same step as others draw theirs (in parallel); the engine goes on.
TEST(BatchEngine, ASamplingFailureEndsItsRequestOnly) {
  BatchEngine engine(std::make_unique<NanForThirteen>(), {});
  EngineRequest broken = request(1, 4, 5, 1.0, 1), fine = request(2, 4, 5, 1.0, 2);
  broken.prompt = {13};
  fine.prompt = {1, 2};
  auto broken_stream = engine.submit(broken);
  auto fine_stream = engine.submit(fine);
  const Outcome b = drain(*broken_stream), f = drain(*fine_stream);
  EXPECT_EQ(b.finish, FinishReason::error);
  EXPECT_TRUE(b.tokens.empty());
  EXPECT_EQ(f.finish, FinishReason::length);
  EXPECT_EQ(f.tokens.size(), 5u);
}

TEST(BatchEngine, AStopTokenEndsTheRequestAndIsNotPassedOn) {
  const auto weights = model::LlamaWeights::random(config(), 22, 0.5);
  auto engine = engine_for(weights, 16);
  const Outcome free_run = drain(*engine->submit(request(5, 6, 10, 0, 0)));
  ASSERT_EQ(free_run.tokens.size(), 10u);
  EngineRequest r = request(5, 6, 10, 0, 0);
  r.stop_tokens = {free_run.tokens[3]};
  const Outcome stopped = drain(*engine->submit(r));
  const auto first = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[3]);
  EXPECT_EQ(stopped.tokens, std::vector<int32_t>(free_run.tokens.begin(), first));
  EXPECT_EQ(stopped.finish, FinishReason::stop);
}

TEST(BatchEngine, CancelledRequestsLeaveTheBatchAndFreeTheCache) {
  const auto weights = model::LlamaWeights::random(config(), 23, 0.5);
  EngineOptions one_at_a_time;
  one_at_a_time.max_sequences = 1;
  auto engine = engine_for(weights, 16, one_at_a_time);
  auto running = engine->submit(request(1, 4, 100, 0, 0));
  auto waiting = engine->submit(request(2, 4, 5, 0, 0));
  running->read(5s);  // it has begun
  running->cancel();
  EXPECT_EQ(drain(*running).finish, FinishReason::cancelled);
  const Outcome next = drain(*waiting);  // it gets the place
  EXPECT_EQ(next.finish, FinishReason::length);
  EXPECT_EQ(next.tokens.size(), 5u);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (engine->stats().blocks_used != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine->stats().blocks_used, 0);
  EXPECT_EQ(engine->stats().cancelled, 1);
}

TEST(BatchEngine, ARequestTheCacheCannotHoldIsRefusedWithTheNumbers) {
  const auto weights = model::LlamaWeights::random(config(), 24);
  auto engine = engine_for(weights, 4);  // 4 blocks of 8 tokens
  EXPECT_EQ(engine->max_request_tokens(), 32);
  try {
    engine->submit(request(1, 20, 13, 0, 0));
    FAIL() << "accepted 33 tokens into a cache of 32";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("20 prompt tokens and up to 13 new ones need 5 blocks of 8 tokens"), std::string::npos) << what;
    EXPECT_NE(what.find("holds 4 blocks (32 tokens)"), std::string::npos) << what;
  }
  EXPECT_EQ(drain(*engine->submit(request(1, 20, 12, 0, 0))).tokens.size(), 12u);
  EXPECT_THROW(engine->submit(request(1, 0, 4, 0, 0)), Error);
  EXPECT_THROW(engine->submit(request(1, 4, 0, 0, 0)), Error);
}

}  // namespace
}  // namespace spillway::infer
