// The CPU AdamW update on host arrays, all cores (OpenMP): the rate that
// decides whether an offloaded step updates its optimizer state on the CPU
// or streams it through the GPU. Reports bytes moved per second and the time
// the update would take for the 8.03 B parameters of LLaMA-3-8B.
#include <benchmark/benchmark.h>

#include <vector>

#include "base/dtype.h"
#include "ops/adamw.h"

namespace {

constexpr double kLlama3_8bParameters = 8.03e9;

void report(benchmark::State& state, int64_t n, double bytes_per_element) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * n * static_cast<int64_t>(bytes_per_element));
  // Inverted per-iteration rate: seconds per iteration over this value.
  state.counters["s_for_8B"] = benchmark::Counter(static_cast<double>(n) / kLlama3_8bParameters,
                                                  benchmark::Counter::kIsIterationInvariantRate |
                                                      benchmark::Counter::kInvert);
}

void BM_AdamWFp32Moments(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> p(n, 0.5f), g(n, 1e-3f), m(n, 0.0f), v(n, 0.0f);
  spillway::ops::AdamWHyper h;
  h.weight_decay = 0.1;
  for (auto _ : state) {
    spillway::ops::adamw_update<float>(p.data(), g.data(), m.data(), v.data(), n, h);
    benchmark::DoNotOptimize(p.data());
  }
  report(state, n, 4.0 * 4 + 3.0 * 4);  // read p, g, m, v; write p, m, v
}

void BM_AdamWBf16Moments(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> p(n, 0.5f), g(n, 1e-3f);
  std::vector<spillway::bf16> m(n), v(n);
  spillway::ops::AdamWHyper h;
  h.weight_decay = 0.1;
  for (auto _ : state) {
    spillway::ops::adamw_update_bf16_moments(p.data(), g.data(), m.data(), v.data(), n, h);
    benchmark::DoNotOptimize(p.data());
  }
  report(state, n, 2.0 * 4 + 2.0 * 2 + 4 + 2.0 * 2);  // read p, g, m, v; write p, m, v
}

}  // namespace

BENCHMARK(BM_AdamWFp32Moments)->Arg(1 << 27)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_AdamWBf16Moments)->Arg(1 << 27)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
