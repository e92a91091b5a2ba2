// Bandwidth of the memory-bound GPU kernels at LLaMA-3.2-1B training shapes
// (16384 tokens, width 2048, MLP 8192, 32 heads of 64; cross-entropy over
// 8192 rows of LLaMA-3's 128256-token vocabulary; AdamW over 256M fp32
// parameters), in GB/s counting the bytes each kernel must read and write,
// against a device-to-device cudaMemcpy measured in the same run. Each
// iteration is one call timed with CUDA events; a table closes the run.
#include <benchmark/benchmark.h>

// Without CUDA this is an empty benchmark binary.
#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/adamw.h"
#include "ops/add.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace {

using spillway::bf16;
using spillway::DType;
namespace ops = spillway::ops;

constexpr int64_t kTokens = 16384;
constexpr int64_t kDim = 2048;
constexpr int64_t kFfn = 8192;
constexpr int64_t kHeads = 32;
constexpr int64_t kHeadDim = 64;
constexpr int64_t kVocab = 128256;
constexpr int64_t kCeRows = 8192;
constexpr int64_t kAdamWParams = int64_t(256) << 20;
constexpr int kIterations = 20;

// A device buffer filled with the byte 0x3C: 0.0115 as bf16 and as f32, so
// every kernel sees finite, positive values.
class Buffer {
 public:
  explicit Buffer(double bytes) {
    const auto size = static_cast<size_t>(bytes);
    SPW_CUDA(cudaMalloc(&data_, size));
    SPW_CUDA(cudaMemset(data_, 0x3c, size));
  }
  ~Buffer() { cudaFree(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
};

// Ids uniform in [0, limit), on the device.
class Ids {
 public:
  Ids(int64_t n, int64_t limit) : buffer_(static_cast<double>(n) * sizeof(int32_t)) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(limit - 1));
    std::vector<int32_t> host(static_cast<size_t>(n));
    for (auto& id : host) id = dist(rng);
    SPW_CUDA(cudaMemcpy(buffer_.as<int32_t>(), host.data(), host.size() * sizeof(int32_t),
                        cudaMemcpyHostToDevice));
  }
  const int32_t* get() const { return buffer_.as<int32_t>(); }

 private:
  Buffer buffer_;
};

struct Row {
  std::string name;
  double ms;
  double gbps;
};
std::vector<Row>& table() {
  static std::vector<Row> rows;
  return rows;
}

// One untimed call, then one event-timed call per iteration. `bytes` is what
// one call must move at least: every input read once, every output written once.
template <typename Op>
void measure(benchmark::State& state, const std::string& name, double bytes, Op&& op) {
  cudaEvent_t start, stop;
  SPW_CUDA(cudaEventCreate(&start));
  SPW_CUDA(cudaEventCreate(&stop));
  op();
  SPW_CUDA(cudaDeviceSynchronize());
  double seconds = 0;
  int64_t calls = 0;
  for (auto _ : state) {
    SPW_CUDA(cudaEventRecord(start));
    op();
    SPW_CUDA(cudaEventRecord(stop));
    SPW_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    SPW_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
    seconds += ms * 1e-3;
    ++calls;
  }
  SPW_CUDA(cudaEventDestroy(start));
  SPW_CUDA(cudaEventDestroy(stop));
  const double gbps = bytes * static_cast<double>(calls) / seconds * 1e-9;
  state.counters["GB/s"] = gbps;
  table().push_back({name, seconds * 1e3 / static_cast<double>(calls), gbps});
}

constexpr double kBf16 = 2, kF32 = 4, kI32 = 4;

void BM_CopyDeviceToDevice(benchmark::State& state) {
  const uint64_t bytes = static_cast<uint64_t>(kTokens * kFfn) * 2;
  Buffer src(static_cast<double>(bytes)), dst(static_cast<double>(bytes));
  measure(state, "cudaMemcpy D2D (256 MiB)", 2.0 * static_cast<double>(bytes), [&] {
    SPW_CUDA(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), bytes, cudaMemcpyDeviceToDevice));
  });
}

void BM_RmsNormForward(benchmark::State& state) {
  const double n = kTokens * kDim;
  Buffer x(n * kBf16), w(kDim * kBf16), y(n * kBf16), rstd(kTokens * kF32);
  measure(state, "rmsnorm forward", 2 * n * kBf16 + kDim * kBf16 + kTokens * kF32, [&] {
    ops::rmsnorm_forward_cuda(x.as<bf16>(), w.as<bf16>(), y.as<bf16>(), rstd.as<float>(), kTokens,
                              kDim, 1e-5f, nullptr);
  });
}

void BM_RmsNormBackward(benchmark::State& state) {
  const double n = kTokens * kDim;
  Buffer x(n * kBf16), w(kDim * kBf16), dy(n * kBf16), dx(n * kBf16), rstd(kTokens * kF32);
  Buffer dweight(kDim * kF32), workspace(ops::rmsnorm_backward_workspace_bytes(kTokens, kDim));
  ops::rmsnorm_forward_cuda(x.as<bf16>(), w.as<bf16>(), dx.as<bf16>(), rstd.as<float>(), kTokens,
                            kDim, 1e-5f, nullptr);
  const double bytes = 3 * n * kBf16 + kDim * kBf16 + kTokens * kF32 + kDim * kF32;
  measure(state, "rmsnorm backward", bytes, [&] {
    ops::rmsnorm_backward_cuda(dy.as<bf16>(), x.as<bf16>(), w.as<bf16>(), rstd.as<float>(),
                               dx.as<bf16>(), dweight.as<float>(), kTokens, kDim,
                               workspace.as<void>(), nullptr);
  });
}

// The backward with the residual stream's gradient folded in
// (graph/fuse_rmsnorm_add.h): the addend is one more [tokens, dim] read.
void BM_RmsNormBackwardAddend(benchmark::State& state) {
  const double n = kTokens * kDim;
  Buffer x(n * kBf16), w(kDim * kBf16), dy(n * kBf16), dx(n * kBf16), addend(n * kBf16);
  Buffer rstd(kTokens * kF32), dweight(kDim * kF32);
  Buffer workspace(ops::rmsnorm_backward_workspace_bytes(kTokens, kDim));
  ops::rmsnorm_forward_cuda(x.as<bf16>(), w.as<bf16>(), dx.as<bf16>(), rstd.as<float>(), kTokens,
                            kDim, 1e-5f, nullptr);
  const double bytes = 4 * n * kBf16 + kDim * kBf16 + kTokens * kF32 + kDim * kF32;
  measure(state, "rmsnorm backward + addend", bytes, [&] {
    ops::rmsnorm_backward_cuda(dy.as<bf16>(), x.as<bf16>(), w.as<bf16>(), rstd.as<float>(),
                               dx.as<bf16>(), dweight.as<float>(), kTokens, kDim,
                               workspace.as<void>(), nullptr, false, addend.as<bf16>());
  });
}

void run_rope(benchmark::State& state, bool forward) {
  const double n = kTokens * kHeads * kHeadDim;
  Buffer x(n * kBf16), out(n * kBf16), inv_freq(kHeadDim / 2 * kF32);
  spillway::ops::RopeScaling scaling;
  scaling.llama3 = true;
  const auto freq = ops::rope_inv_freq(kHeadDim, 500000.0, scaling);
  SPW_CUDA(cudaMemcpy(inv_freq.as<float>(), freq.data(), freq.size() * sizeof(float),
                      cudaMemcpyHostToDevice));
  measure(state, forward ? "rope forward (q)" : "rope backward (q)", 2 * n * kBf16, [&] {
    if (forward) {
      ops::rope_forward_cuda(x.as<bf16>(), out.as<bf16>(), 1, kTokens, kHeads, kHeadDim,
                             inv_freq.as<float>(), 0, nullptr);
    } else {
      ops::rope_backward_cuda(x.as<bf16>(), out.as<bf16>(), 1, kTokens, kHeads, kHeadDim,
                              inv_freq.as<float>(), 0, nullptr);
    }
  });
}
void BM_RopeForward(benchmark::State& state) { run_rope(state, true); }
void BM_RopeBackward(benchmark::State& state) { run_rope(state, false); }

void BM_SwigluForward(benchmark::State& state) {
  const double n = kTokens * kFfn;
  Buffer gate(n * kBf16), up(n * kBf16), out(n * kBf16);
  measure(state, "swiglu forward", 3 * n * kBf16, [&] {
    ops::swiglu_forward_cuda(gate.as<bf16>(), up.as<bf16>(), out.as<bf16>(), kTokens * kFfn,
                             nullptr);
  });
}

void BM_SwigluBackward(benchmark::State& state) {
  const double n = kTokens * kFfn;
  Buffer dout(n * kBf16), gate(n * kBf16), up(n * kBf16), dgate(n * kBf16), dup(n * kBf16);
  measure(state, "swiglu backward", 5 * n * kBf16, [&] {
    ops::swiglu_backward_cuda(dout.as<bf16>(), gate.as<bf16>(), up.as<bf16>(), dgate.as<bf16>(),
                              dup.as<bf16>(), kTokens * kFfn, nullptr);
  });
}

void BM_AddBf16(benchmark::State& state) {
  const double n = kTokens * kDim;
  Buffer a(n * kBf16), b(n * kBf16), out(n * kBf16);
  measure(state, "add bf16 (residual)", 3 * n * kBf16, [&] {
    ops::add_cuda(a.as<bf16>(), b.as<bf16>(), out.as<bf16>(), kTokens * kDim, nullptr);
  });
}

void BM_AccumulateF32(benchmark::State& state) {
  const double n = kTokens * kDim;
  Buffer dst(n * kF32), src(n * kF32);
  measure(state, "accumulate f32", 3 * n * kF32,
          [&] { ops::accumulate_cuda(dst.as<float>(), src.as<float>(), kTokens * kDim, nullptr); });
}

void run_cast(benchmark::State& state, DType from, DType to) {
  const double n = kTokens * kDim;
  Buffer src(n * kF32), dst(n * kF32);
  const std::string name = std::string("cast ") + std::string(spillway::dtype_name(from)) + " -> " +
                           std::string(spillway::dtype_name(to));
  measure(state, name, n * (kF32 + kBf16), [&] {
    ops::cast_cuda(src.as<void>(), from, dst.as<void>(), to, kTokens * kDim, nullptr);
  });
}
void BM_CastF32ToBf16(benchmark::State& state) { run_cast(state, DType::f32, DType::bf16); }
void BM_CastBf16ToF32(benchmark::State& state) { run_cast(state, DType::bf16, DType::f32); }

void BM_EmbeddingForward(benchmark::State& state) {
  const Ids ids(kTokens, kVocab);
  Buffer table(static_cast<double>(kVocab * kDim) * kBf16), out(kTokens * kDim * kBf16);
  measure(state, "embedding forward", 2.0 * kTokens * kDim * kBf16 + kTokens * kI32, [&] {
    ops::embedding_forward_cuda(ids.get(), table.as<bf16>(), out.as<bf16>(), kTokens, kVocab, kDim,
                                nullptr);
  });
}

void BM_EmbeddingBackward(benchmark::State& state) {
  const Ids ids(kTokens, kVocab);
  Buffer dout(kTokens * kDim * kBf16), dtable(static_cast<double>(kVocab * kDim) * kF32);
  Buffer workspace(ops::embedding_backward_workspace_bytes(kTokens, kVocab));
  const double bytes = static_cast<double>(kVocab * kDim) * kF32 + kTokens * kDim * kBf16;
  measure(state, "embedding backward", bytes, [&] {
    ops::embedding_backward_cuda(ids.get(), dout.as<bf16>(), dtable.as<float>(), kTokens, kVocab,
                                 kDim, workspace.as<void>(), nullptr);
  });
}

struct CrossEntropyBuffers {
  static constexpr double kLogits = static_cast<double>(kCeRows * kVocab);
  Ids targets;
  Buffer logits, dlogits, lse, loss, dloss, workspace;

  CrossEntropyBuffers()
      : targets(kCeRows, kVocab),
        logits(kLogits * kBf16),
        dlogits(kLogits * kBf16),
        lse(kCeRows * kF32),
        loss(kF32),
        dloss(kF32),
        workspace(ops::cross_entropy_forward_workspace_bytes(kCeRows)) {}

  void forward() {
    ops::cross_entropy_forward_cuda(logits.as<bf16>(), targets.get(), lse.as<float>(),
                                    loss.as<float>(), kCeRows, kVocab, workspace.as<void>(),
                                    nullptr);
  }
  void backward() {
    ops::cross_entropy_backward_cuda(logits.as<bf16>(), targets.get(), lse.as<float>(),
                                     dloss.as<float>(), dlogits.as<bf16>(), kCeRows, kVocab,
                                     nullptr);
  }
};

void BM_CrossEntropyForward(benchmark::State& state) {
  CrossEntropyBuffers ce;
  measure(state, "cross-entropy forward", CrossEntropyBuffers::kLogits * kBf16,
          [&] { ce.forward(); });
}

void BM_CrossEntropyBackward(benchmark::State& state) {
  CrossEntropyBuffers ce;
  ce.forward();
  measure(state, "cross-entropy backward", 2 * CrossEntropyBuffers::kLogits * kBf16,
          [&] { ce.backward(); });
}

void BM_CrossEntropyForwardBackward(benchmark::State& state) {
  CrossEntropyBuffers ce;
  measure(state, "cross-entropy fwd+bwd", 3 * CrossEntropyBuffers::kLogits * kBf16, [&] {
    ce.forward();
    ce.backward();
  });
}

// The fused pass at range(0) rows in flight (0: the op's own choice): one
// HBM read of the logits when the second pass finds its row in L2.
void BM_CrossEntropyFused(benchmark::State& state) {
  CrossEntropyBuffers ce;
  const int blocks = static_cast<int>(state.range(0));
  measure(state, "cross-entropy fused", 2 * CrossEntropyBuffers::kLogits * kBf16, [&] {
    ops::cross_entropy_forward_backward_cuda(ce.logits.as<bf16>(), ce.targets.get(), 1.0f, ce.lse.as<float>(),
                                             ce.loss.as<float>(), ce.dlogits.as<bf16>(), kCeRows, kVocab,
                                             ce.workspace.as<void>(), nullptr, blocks);
  });
}

void BM_AdamW(benchmark::State& state) {
  const double n = static_cast<double>(kAdamWParams);
  Buffer param(n * kF32), grad(n * kF32), m(n * kF32), v(n * kF32), copy(n * kBf16);
  ops::AdamWHyper hp;
  hp.weight_decay = 0.1;
  // Reads param, grad, m, v; writes param, m, v and the bf16 copy.
  measure(state, "adamw + bf16 copy (256M)", n * (7 * kF32 + kBf16), [&] {
    ops::adamw_update_cuda(param.as<float>(), grad.as<float>(), m.as<float>(), v.as<float>(),
                           copy.as<bf16>(), kAdamWParams, hp, nullptr);
  });
}

// The master held split (ops/master_split.h), as the all-on-device engine
// keeps it: reads working copy, remainder, grad, m, v; writes working copy,
// remainder, m, v.
void BM_AdamWSplitMaster(benchmark::State& state) {
  const double n = static_cast<double>(kAdamWParams);
  Buffer working(n * kBf16), remainder(n * kBf16), grad(n * kF32), m(n * kF32), v(n * kF32);
  ops::AdamWHyper hp;
  hp.weight_decay = 0.1;
  measure(state, "adamw, split master (256M)", n * (5 * kF32 + 4 * kBf16), [&] {
    ops::adamw_update_split_cuda(working.as<bf16>(), remainder.as<uint16_t>(), grad.as<float>(), m.as<float>(),
                                 v.as<float>(), kAdamWParams, hp, nullptr);
  });
}

#define ELEMENTWISE_BENCHMARK(fn) \
  BENCHMARK(fn)->UseManualTime()->Iterations(kIterations)->Unit(benchmark::kMillisecond)

// The copy runs first: the table's percentages are of it.
ELEMENTWISE_BENCHMARK(BM_CopyDeviceToDevice);
ELEMENTWISE_BENCHMARK(BM_RmsNormForward);
ELEMENTWISE_BENCHMARK(BM_RmsNormBackward);
ELEMENTWISE_BENCHMARK(BM_RmsNormBackwardAddend);
ELEMENTWISE_BENCHMARK(BM_RopeForward);
ELEMENTWISE_BENCHMARK(BM_RopeBackward);
ELEMENTWISE_BENCHMARK(BM_SwigluForward);
ELEMENTWISE_BENCHMARK(BM_SwigluBackward);
ELEMENTWISE_BENCHMARK(BM_AddBf16);
ELEMENTWISE_BENCHMARK(BM_AccumulateF32);
ELEMENTWISE_BENCHMARK(BM_CastF32ToBf16);
ELEMENTWISE_BENCHMARK(BM_CastBf16ToF32);
ELEMENTWISE_BENCHMARK(BM_EmbeddingForward);
ELEMENTWISE_BENCHMARK(BM_EmbeddingBackward);
ELEMENTWISE_BENCHMARK(BM_CrossEntropyForward);
ELEMENTWISE_BENCHMARK(BM_CrossEntropyBackward);
ELEMENTWISE_BENCHMARK(BM_CrossEntropyForwardBackward);
ELEMENTWISE_BENCHMARK(BM_CrossEntropyFused)->Arg(0)->Arg(33)->Arg(66)->Arg(99)->Arg(132)->Arg(264);
ELEMENTWISE_BENCHMARK(BM_AdamW);
ELEMENTWISE_BENCHMARK(BM_AdamWSplitMaster);

void print_table() {
  if (table().empty()) return;
  double copy_gbps = 0;
  for (const Row& row : table()) {
    if (row.name.rfind("cudaMemcpy", 0) == 0) copy_gbps = row.gbps;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) std::printf("\n%s\n", prop.name);
  std::printf("%-28s %10s %10s %9s\n", "kernel", "ms", "GB/s", "% copy");
  for (const Row& row : table()) {
    std::printf("%-28s %10.3f %10.1f", row.name.c_str(), row.ms, row.gbps);
    if (copy_gbps > 0) {
      std::printf(" %8.1f%%\n", 100.0 * row.gbps / copy_gbps);
    } else {
      std::printf(" %9s\n", "-");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (spillway::cuda_device_count() == 0) {
    std::puts("elementwise_cuda_bench: no GPU");
    return 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}

#else

#include <cstdio>

// Built without the CUDA backend: nothing to measure.
int main() {
  std::puts("elementwise_cuda_bench: built without CUDA");
  return 0;
}

#endif
