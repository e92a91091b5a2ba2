// GPU matmul throughput (cuBLASLt through ops::CublasLtMatmul) in TFLOP/s,
// against the bf16 ceiling measured with PyTorch on the H100 (8192^3, random
// data): a square 8192^3 product, then every matmul of a LLaMA-3.2-1B
// training step at 16384 tokens. A linear layer y = x W^T (W stored
// [out, in]) runs forward as NT, its input gradient dX = dY W as NN, and its
// weight gradient dW = dY^T X as TN into fp32 (beta = 1 accumulates
// micro-batches; beta = 0 is the first micro-batch).
//
// Each shape runs with the heuristic's first choice, and (beta = 0 shapes)
// with the fastest of its first 8 candidates timed once. Times are cudaEvent
// intervals around batches of back-to-back products, after 3 warm-up runs.
#include <benchmark/benchmark.h>

// Without CUDA this is an empty benchmark binary.
#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/matmul_cuda.h"

namespace {

using spillway::DType;
using spillway::ops::CublasLtMatmul;

constexpr double kCeilingTflops = 801.0;
constexpr int kTimedCandidates = 8;
constexpr int kWarmupRuns = 3;
constexpr int kIterations = 20;
// Each timed interval holds enough products to last about this long, so the
// event and launch overhead of one interval is noise.
constexpr double kIntervalSeconds = 2e-3;

struct Shape {
  std::string name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  DType c_type;
  float beta;

  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
  std::string dims() const {
    return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  std::string op() const {
    return std::string(trans_a ? "T" : "N") + (trans_b ? "T" : "N") + " bf16->" +
           std::string(spillway::dtype_name(c_type)) + (beta != 0.0f ? " +=" : "");
  }
};

constexpr int64_t kTokens = 16384;
constexpr int64_t kDim = 2048, kKvDim = 512, kFfn = 8192, kVocab = 128256;
constexpr int kLayers = 16;

struct Linear {
  std::string name;
  int64_t in, out;
  int per_layer;  // how many such projections a layer has
  int layers;
};

const std::vector<Linear>& linears() {
  static const std::vector<Linear> list = {
      {"qkv", kDim, kDim + 2 * kKvDim, 1, kLayers}, {"o", kDim, kDim, 1, kLayers},
      {"gate|up", kDim, 2 * kFfn, 1, kLayers},       {"down", kFfn, kDim, 1, kLayers},
      {"lm_head", kDim, kVocab, 1, 1},
  };
  return list;
}

std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes = {
      {"square", 8192, 8192, 8192, false, false, DType::bf16, 0.0f},
      {"square", 8192, 8192, 8192, false, true, DType::bf16, 0.0f},
  };
  for (const Linear& l : linears()) {
    shapes.push_back({l.name + " fwd", kTokens, l.out, l.in, false, true, DType::bf16, 0.0f});
    shapes.push_back({l.name + " dX", kTokens, l.in, l.out, false, false, DType::bf16, 0.0f});
    shapes.push_back({l.name + " dW", l.out, l.in, kTokens, true, false, DType::f32, 1.0f});
    shapes.push_back({l.name + " dW", l.out, l.in, kTokens, true, false, DType::f32, 0.0f});
  }
  return shapes;
}

// Device buffers shared by every benchmark: random bf16 operands (A at the
// start of the pool, B after it) and one output big enough for any C.
struct Context {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  char* pool = nullptr;
  uint64_t pool_elements = 0;
  char* out = nullptr;
  std::unique_ptr<CublasLtMatmul> heuristic, timed;

  explicit Context(const std::vector<Shape>& shapes) {
    uint64_t out_bytes = 0;
    for (const Shape& s : shapes) {
      const auto a = static_cast<uint64_t>(s.m * s.k), b = static_cast<uint64_t>(s.k * s.n);
      pool_elements = std::max(pool_elements, spillway::align_up(a, 128) + b);
      out_bytes = std::max(out_bytes, static_cast<uint64_t>(s.m * s.n) * spillway::dtype_size(s.c_type));
    }
    SPW_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SPW_CUDA(cudaEventCreate(&start));
    SPW_CUDA(cudaEventCreate(&stop));
    SPW_CUDA(cudaMalloc(&pool, pool_elements * 2));
    SPW_CUDA(cudaMalloc(&out, out_bytes));
    // beta = 1 shapes read C: zeros keep it finite.
    SPW_CUDA(cudaMemsetAsync(out, 0, out_bytes, stream));
    fill_random(pool, pool_elements);
    heuristic = std::make_unique<CublasLtMatmul>();
    timed = std::make_unique<CublasLtMatmul>(CublasLtMatmul::kDefaultWorkspaceBytes,
                                             kTimedCandidates);
    std::printf("operands %s, output %s\n", spillway::format_bytes(pool_elements * 2).c_str(),
                spillway::format_bytes(out_bytes).c_str());
  }

  ~Context() {
    heuristic.reset();
    timed.reset();
    SPW_CUDA_WARN(cudaFree(out));
    SPW_CUDA_WARN(cudaFree(pool));
    SPW_CUDA_WARN(cudaEventDestroy(stop));
    SPW_CUDA_WARN(cudaEventDestroy(start));
    SPW_CUDA_WARN(cudaStreamDestroy(stream));
  }

  // Uniform bf16 in [-1, 1): a 64 MiB random block, then copies of it
  // (random data draws the power, and so sets the clocks, that real
  // weights do; zeros would flatter the tensor cores).
  void fill_random(char* dst, uint64_t elements) {
    const uint64_t block = std::min<uint64_t>(elements, 32ull << 20);
    std::vector<spillway::bf16> host(block);
    uint64_t z = 0x243f6a8885a308d3ull;
    for (auto& h : host) {
      z += 0x9e3779b97f4a7c15ull;
      uint64_t x = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      x ^= x >> 31;
      h = spillway::to_bf16(static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-53 * 2 - 1));
    }
    SPW_CUDA(cudaMemcpyAsync(dst, host.data(), block * 2, cudaMemcpyHostToDevice, stream));
    for (uint64_t done = block; done < elements;) {
      const uint64_t n = std::min(done, elements - done);
      SPW_CUDA(cudaMemcpyAsync(dst + done * 2, dst, n * 2, cudaMemcpyDeviceToDevice, stream));
      done += n;
    }
    SPW_CUDA(cudaStreamSynchronize(stream));
  }
};

Context* g_context = nullptr;

struct Result {
  double tflops = 0;
  std::string plan;
};
// shape index -> mode ("heuristic" / "timed") -> result
std::map<size_t, std::map<std::string, Result>> g_results;

void run_shape(benchmark::State& state, const std::vector<Shape>& shapes, size_t index,
               bool timed) {
  Context& ctx = *g_context;
  const Shape& s = shapes[index];
  CublasLtMatmul& mm = timed ? *ctx.timed : *ctx.heuristic;
  const char* a = ctx.pool;
  const char* b = ctx.pool + spillway::align_up(static_cast<uint64_t>(s.m * s.k), 128) * 2;
  auto once = [&] {
    mm.run(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a, DType::bf16, b, DType::bf16, s.beta,
           ctx.out, s.c_type, ctx.stream);
  };
  for (int i = 0; i < kWarmupRuns; ++i) once();
  SPW_CUDA(cudaStreamSynchronize(ctx.stream));
  const int reps = std::clamp(
      static_cast<int>(std::ceil(kIntervalSeconds / (s.flops() / (kCeilingTflops * 1e12)))), 1, 200);

  double total_seconds = 0;
  int64_t products = 0;
  for (auto _ : state) {
    SPW_CUDA(cudaEventRecord(ctx.start, ctx.stream));
    for (int r = 0; r < reps; ++r) once();
    SPW_CUDA(cudaEventRecord(ctx.stop, ctx.stream));
    SPW_CUDA(cudaEventSynchronize(ctx.stop));
    float ms = 0;
    SPW_CUDA(cudaEventElapsedTime(&ms, ctx.start, ctx.stop));
    state.SetIterationTime(ms * 1e-3 / reps);
    total_seconds += ms * 1e-3;
    products += reps;
  }
  const double tflops = s.flops() * static_cast<double>(products) / total_seconds * 1e-12;
  state.counters["TFLOP/s"] = tflops;
  state.counters["of_ceiling_%"] = 100.0 * tflops / kCeilingTflops;
  const spillway::ops::MatmulPlan* plan = mm.find_plan(CublasLtMatmul::key_for(
      s.trans_a, s.trans_b, s.m, s.n, s.k, a, DType::bf16, b, DType::bf16, s.beta, ctx.out,
      s.c_type));
  const std::string plan_text = plan != nullptr ? plan->describe() : "?";
  state.SetLabel(plan_text);
  g_results[index][timed ? "timed" : "heuristic"] = {tflops, plan_text};
}

double seconds_of(const Shape& s, const Result& r) { return s.flops() / (r.tflops * 1e12); }

void print_table(const std::vector<Shape>& shapes) {
  std::printf("\nbf16 matmul on the GPU, ceiling %.0f TFLOP/s (PyTorch, 8192^3, random data)\n",
              kCeilingTflops);
  std::printf("%-16s %-22s %-18s %10s %7s %10s  %s\n", "shape", "m x n x k", "op",
              "heuristic", "% ceil", "timed-8", "heuristic's plan");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto it = g_results.find(i);
    if (it == g_results.end() || !it->second.count("heuristic")) continue;
    const Result& h = it->second.at("heuristic");
    const auto t = it->second.find("timed");
    char timed_text[32] = "-";
    if (t != it->second.end()) std::snprintf(timed_text, sizeof(timed_text), "%.1f", t->second.tflops);
    std::printf("%-16s %-22s %-18s %10.1f %6.1f%% %10s  %s\n", shapes[i].name.c_str(),
                shapes[i].dims().c_str(), shapes[i].op().c_str(), h.tflops,
                100.0 * h.tflops / kCeilingTflops, timed_text, h.plan.c_str());
  }

  std::printf("\ntimed-8 choices:\n");
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto it = g_results.find(i);
    if (it == g_results.end() || !it->second.count("timed")) continue;
    std::printf("%-16s %-22s %-18s %s\n", shapes[i].name.c_str(), shapes[i].dims().c_str(),
                shapes[i].op().c_str(), it->second.at("timed").plan.c_str());
  }

  // One training step's matmuls (every layer's forward, dX and accumulated
  // dW), from the heuristic's times.
  double step_seconds = 0, step_flops = 0;
  bool complete = true;
  for (const Linear& l : linears()) {
    for (const char* pass : {" fwd", " dX", " dW"}) {
      const std::string name = l.name + pass;
      bool found = false;
      for (size_t i = 0; i < shapes.size() && !found; ++i) {
        const bool accumulate = std::string(pass) != " dW" || shapes[i].beta != 0.0f;
        if (shapes[i].name != name || !accumulate || !g_results.count(i)) continue;
        const Result& r = g_results.at(i).at("heuristic");
        const double count = static_cast<double>(l.per_layer) * l.layers;
        step_seconds += count * seconds_of(shapes[i], r);
        step_flops += count * shapes[i].flops();
        found = true;
      }
      complete = complete && found;
    }
  }
  if (complete) {
    std::printf("\nLLaMA-3.2-1B step at %lld tokens, matmuls only: %.1f TFLOP in %.1f ms = %.1f "
                "TFLOP/s (%.1f%% of the ceiling)\n",
                static_cast<long long>(kTokens), step_flops * 1e-12, step_seconds * 1e3,
                step_flops / step_seconds * 1e-12,
                100.0 * step_flops / step_seconds * 1e-12 / kCeilingTflops);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (spillway::cuda_device_count() == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 0;
  }
  static const std::vector<Shape> shapes = all_shapes();
  // SPILLWAY_MATMUL_ITERATIONS: more intervals per shape, so that the GPU
  // reaches the clocks its power limit holds over a whole training step.
  const char* env = std::getenv("SPILLWAY_MATMUL_ITERATIONS");
  const int iterations = env ? std::max(1, std::atoi(env)) : kIterations;
  g_context = new Context(shapes);
  for (size_t i = 0; i < shapes.size(); ++i) {
    for (bool timed : {false, true}) {
      if (timed && shapes[i].beta != 0.0f) continue;  // timing would overwrite C
      const Shape& s = shapes[i];
      std::string name = std::string(timed ? "timed8/" : "heuristic/") + s.name + "/" + s.dims() +
                         "/" + s.op();
      std::replace(name.begin(), name.end(), ' ', '_');
      benchmark::RegisterBenchmark(name.c_str(),
                                   [i, timed](benchmark::State& st) {
                                     run_shape(st, shapes, i, timed);
                                   })
          ->UseManualTime()
          ->Iterations(iterations)
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  print_table(shapes);
  delete g_context;
  benchmark::Shutdown();
  return 0;
}

#else

int main() { return 0; }

#endif  // SPILLWAY_HAS_CUDA
