// Causal grouped-query attention on the CPU, float32, batch 1, head_dim 64.
// Arguments: seq, q_heads, kv_heads. FLOPs count the causal half of the two
// forward matmuls (2 * 2 * b * h * s^2 * d / 2); backward counts 2.5 times that.
// The counter GFLOP is shown per second of wall time (GFLOP/s).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "ops/attention.h"

namespace {

using spillway::ops::AttentionShape;

constexpr int64_t kHeadDim = 64;

struct Problem {
  AttentionShape shape;
  double scale;
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;

  explicit Problem(const benchmark::State& state) {
    shape = AttentionShape{1, state.range(0), state.range(1), state.range(2), kHeadDim};
    scale = 1.0 / std::sqrt(static_cast<double>(kHeadDim));
    const int64_t q_size = shape.seq * shape.q_heads * kHeadDim;
    const int64_t kv_size = shape.seq * shape.kv_heads * kHeadDim;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, int64_t n) {
      x.resize(static_cast<size_t>(n));
      for (float& e : x) e = dist(rng);
    };
    fill(q, q_size);
    fill(k, kv_size);
    fill(v, kv_size);
    fill(dout, q_size);
    out.resize(q.size());
    lse.resize(static_cast<size_t>(shape.q_heads * shape.seq));
    dq.resize(q.size());
    dk.resize(k.size());
    dv.resize(v.size());
  }

  void forward() {
    spillway::ops::attention_forward(q.data(), k.data(), v.data(), out.data(), lse.data(), shape,
                                     scale);
  }
  void backward() {
    spillway::ops::attention_backward(dout.data(), q.data(), k.data(), v.data(), out.data(),
                                      lse.data(), dq.data(), dk.data(), dv.data(), shape, scale);
  }
  double forward_flops() const {
    const double s = static_cast<double>(shape.seq);
    return 2.0 * 2.0 * shape.batch * shape.q_heads * s * s * kHeadDim / 2.0;
  }
};

void set_rate(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP"] = benchmark::Counter(flops_per_iteration * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionForward(benchmark::State& state) {
  Problem p(state);
  for (auto _ : state) {
    p.forward();
    benchmark::DoNotOptimize(p.out.data());
  }
  set_rate(state, p.forward_flops());
}

void BM_AttentionForwardBackward(benchmark::State& state) {
  Problem p(state);
  for (auto _ : state) {
    p.forward();
    p.backward();
    benchmark::DoNotOptimize(p.dq.data());
  }
  set_rate(state, 3.5 * p.forward_flops());
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"seq", "q_heads", "kv_heads"});
  for (int64_t seq : {256, 1024, 2048}) {
    b->Args({seq, 8, 2});
    b->Args({seq, 8, 8});
  }
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_AttentionForward)->Apply(shapes);
BENCHMARK(BM_AttentionForwardBackward)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
