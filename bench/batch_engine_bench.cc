// The serving engine's own time a step (infer/batch_engine.h), with a decoder
// that costs nothing: what the host spends around the model at each step at
// 16 and 64 streams (drawing every request's token, handing the logits
// over, the bookkeeping), greedy and at temperature 1, over LLaMA-3's
// 128,256-token vocabulary. Each request: an 8-token prompt, 64 tokens out.
//
// Two stand-in decoders: `in_place` hands the engine the logits where they
// are (what the GPU decoder does since BatchDecoder::step_view, for a step
// of one pass), `fresh_copy` makes a zeroed vector for them each step and
// copies them in (what it did before).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "infer/batch_decoder.h"
#include "infer/batch_engine.h"

namespace {

using spillway::infer::BatchDecoder;
using spillway::infer::BatchEngine;
using spillway::infer::EngineRequest;
using spillway::infer::FinishReason;
using spillway::infer::SequenceChunk;

constexpr int64_t kVocab = 128256;
constexpr int64_t kMostRows = 64;
constexpr int64_t kPromptTokens = 8;
constexpr int64_t kNewTokens = 64;

class FreeDecoder final : public BatchDecoder {
 public:
  explicit FreeDecoder(bool fresh_copy) : BatchDecoder(4096, 16), fresh_copy_(fresh_copy), logits_(kMostRows * kVocab) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& x : logits_) x = normal(rng);
  }
  int64_t vocab() const override { return kVocab; }
  uint64_t cache_bytes() const override { return 0; }
  std::string description() const override { return fresh_copy_ ? "fresh_copy" : "in_place"; }

 protected:
  std::span<const float> run(std::span<const SequenceChunk> chunks, std::span<const int64_t>) override {
    const size_t size = chunks.size() * static_cast<size_t>(kVocab);
    if (!fresh_copy_) return {logits_.data(), size};
    copy_ = std::vector<float>(size);
    std::memcpy(copy_.data(), logits_.data(), size * sizeof(float));
    return copy_;
  }

 private:
  const bool fresh_copy_;
  std::vector<float> logits_;  // as a device's pinned buffer holds them
  std::vector<float> copy_;
};

void BM_EngineStep(benchmark::State& state, bool fresh_copy, double temperature) {
  const auto streams = static_cast<int64_t>(state.range(0));
  int64_t steps = 0;
  double seconds = 0;
  for (auto _ : state) {
    BatchEngine engine(std::make_unique<FreeDecoder>(fresh_copy), {.max_sequences = streams, .prefill_tokens = 4096});
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<spillway::infer::RequestStream>> open;
    for (int64_t i = 0; i < streams; ++i) {
      EngineRequest r;
      r.prompt.assign(kPromptTokens, static_cast<int32_t>(i + 1));
      r.max_new_tokens = kNewTokens;
      r.sampling = {temperature, 0, 1.0, static_cast<uint64_t>(i)};
      open.push_back(engine.submit(std::move(r)));
    }
    for (auto& s : open) {
      while (s->read(std::chrono::milliseconds(100)).finish == FinishReason::running) {
      }
    }
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    state.SetIterationTime(took);
    seconds += took;
    steps += engine.stats().steps;
  }
  state.counters["us_per_step"] = steps > 0 ? seconds / static_cast<double>(steps) * 1e6 : 0.0;
}

void Streams(benchmark::internal::Benchmark* b) { b->Arg(16)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond); }

BENCHMARK_CAPTURE(BM_EngineStep, in_place_greedy, false, 0.0)->Apply(Streams);
BENCHMARK_CAPTURE(BM_EngineStep, fresh_copy_greedy, true, 0.0)->Apply(Streams);
BENCHMARK_CAPTURE(BM_EngineStep, in_place_temperature_1, false, 1.0)->Apply(Streams);
BENCHMARK_CAPTURE(BM_EngineStep, fresh_copy_temperature_1, true, 1.0)->Apply(Streams);

}  // namespace

BENCHMARK_MAIN();
