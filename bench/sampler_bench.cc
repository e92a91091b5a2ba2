// Drawing one token from a LLaMA-3-sized vocabulary (128,256 logits, spread
// as a model's are not: normal with a deviation of 3, the worst case for
// top-p, whose nucleus is then tens of thousands of ids), as the serving
// engine does for each request at each step when the temperature is above
// zero: greedy, temperature alone, with top-p 0.9 and with top-k 50.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "infer/sampler.h"

namespace {

std::vector<float> random_logits() {
  std::vector<float> logits(128256);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : logits) x = normal(rng);
  return logits;
}

void BM_Sample(benchmark::State& state, spillway::infer::SamplingOptions options) {
  const std::vector<float> logits = random_logits();
  spillway::infer::TokenSampler sampler(options);
  for (auto _ : state) benchmark::DoNotOptimize(sampler.next(logits));
}

BENCHMARK_CAPTURE(BM_Sample, greedy, spillway::infer::SamplingOptions{0.0, 0, 1.0, 7})->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, temperature, spillway::infer::SamplingOptions{0.8, 0, 1.0, 7})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_p_0_9, spillway::infer::SamplingOptions{0.8, 0, 0.9, 7})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Sample, top_k_50, spillway::infer::SamplingOptions{0.8, 50, 1.0, 7})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
