// f32 matmul throughput on the CPU backend (OpenBLAS), in GFLOP/s: square
// sizes, then the projections of a LLaMA layer of width 512 over 4096 tokens.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "ops/matmul.h"

namespace {

void run_matmul(benchmark::State& state, bool trans_b, int64_t m, int64_t n, int64_t k) {
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  std::vector<float> c(static_cast<size_t>(m * n));
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (auto _ : state) {
    spillway::ops::matmul<float>(false, trans_b, m, n, k, 1.0f, a.data(), b.data(), 0.0f,
                                 c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  // A rate counter divides by seconds (printed as "GFLOP=.../s"); the 1e-9
  // turns FLOP/s into GFLOP/s.
  state.counters["GFLOP"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_MatmulSquare(benchmark::State& state) {
  const int64_t size = state.range(0);
  run_matmul(state, false, size, size, size);
}
BENCHMARK(BM_MatmulSquare)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// x [tokens, 512] times a weight stored [out, in] (a linear layer, trans_b):
// n = 1536 is q, k and v fused (or an MLP up/gate of width 1536), n = 512 the
// attention output projection.
void BM_MatmulLlamaLinear(benchmark::State& state) {
  run_matmul(state, true, 4096, state.range(0), 512);
}
BENCHMARK(BM_MatmulLlamaLinear)->ArgNames({"n"})->Arg(1536)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
