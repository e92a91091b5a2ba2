// Causal GQA attention on the GPU: cuDNN SDPA (both backward orders) and the
// own flash kernel, forward and forward+backward, in TFLOP/s; and every plan
// in cuDNN's list for the forward and each backward order alone
// (BM_CudnnPlans), to recheck after a cuDNN upgrade that the heuristic's
// first, which the engine runs, is still the fastest.
//
// FLOPs count the causal half of the score matrix: forward 2 products of
// 2*b*h*s^2*d/2 each, backward 2.5 times the forward. Reference on an H100
// (PyTorch, same counting, head_dim 128, seq 4k-16k): cuDNN 521-557 TFLOP/s
// forward+backward, FlashAttention-2 277-325.
#include <benchmark/benchmark.h>

// Without CUDA this is an empty benchmark binary.
#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "ops/attention.h"
#include "ops/attention_cudnn.h"

namespace spillway::ops {
namespace {

constexpr int64_t kQueryHeads = 32;
constexpr int64_t kKvHeads = 8;

struct DeviceMemory {
  explicit DeviceMemory(uint64_t bytes) {
    if (bytes > 0) SPW_CUDA(cudaMalloc(&ptr, bytes));
  }
  ~DeviceMemory() { SPW_CUDA_WARN(cudaFree(ptr)); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* ptr = nullptr;
};

// Uniform bf16 values in [-1, 1) from a fast LCG: benchmark inputs only need
// to be non-degenerate.
void fill_random(bf16* device, int64_t n, uint64_t seed) {
  std::vector<bf16> host(static_cast<size_t>(n));
  uint64_t state = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : host) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = to_bf16(static_cast<float>(static_cast<double>(state >> 40) / (1ull << 23) - 1.0));
  }
  SPW_CUDA(cudaMemcpy(device, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}

// Inputs, outputs and gradients of one shape on the device.
struct Problem {
  explicit Problem(const AttentionShape& s)
      : shape(s),
        scale(1.0 / std::sqrt(static_cast<double>(s.head_dim))),
        q(bytes_q()), k(bytes_kv()), v(bytes_kv()), out(bytes_q()), dout(bytes_q()),
        dq(bytes_q()), dk(bytes_kv()), dv(bytes_kv()),
        lse(static_cast<uint64_t>(s.batch * s.q_heads * s.seq) * sizeof(float)) {
    fill_random(as_bf16(q), q_numel(), 1);
    fill_random(as_bf16(k), kv_numel(), 2);
    fill_random(as_bf16(v), kv_numel(), 3);
    fill_random(as_bf16(dout), q_numel(), 4);
  }
  int64_t q_numel() const { return shape.batch * shape.seq * shape.q_heads * shape.head_dim; }
  int64_t kv_numel() const { return shape.batch * shape.seq * shape.kv_heads * shape.head_dim; }
  uint64_t bytes_q() const { return static_cast<uint64_t>(q_numel()) * sizeof(bf16); }
  uint64_t bytes_kv() const { return static_cast<uint64_t>(kv_numel()) * sizeof(bf16); }
  static bf16* as_bf16(DeviceMemory& m) { return static_cast<bf16*>(m.ptr); }
  double forward_flops() const {
    return 2.0 * static_cast<double>(shape.batch * shape.q_heads) *
           static_cast<double>(shape.seq) * static_cast<double>(shape.seq) *
           static_cast<double>(shape.head_dim);
  }

  AttentionShape shape;
  double scale;
  DeviceMemory q, k, v, out, dout, dq, dk, dv, lse;
};

AttentionShape shape_of(const benchmark::State& state) {
  return AttentionShape{state.range(0), state.range(1), kQueryHeads, kKvHeads, state.range(2)};
}

// Times `step` (one warm-up first) with CUDA events and reports TFLOP/s.
void time_steps(benchmark::State& state, double flops, const std::function<void()>& step) {
  cudaEvent_t start, stop;
  SPW_CUDA(cudaEventCreate(&start));
  SPW_CUDA(cudaEventCreate(&stop));
  step();
  SPW_CUDA(cudaDeviceSynchronize());
  double seconds = 0;
  for (auto _ : state) {
    SPW_CUDA(cudaEventRecord(start));
    step();
    SPW_CUDA(cudaEventRecord(stop));
    SPW_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    SPW_CUDA(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3);
    seconds += ms / 1e3;
  }
  SPW_CUDA(cudaEventDestroy(start));
  SPW_CUDA(cudaEventDestroy(stop));
  state.counters["TFLOP/s"] = flops * static_cast<double>(state.iterations()) / seconds / 1e12;
}

// Errors (a shape cuDNN refuses, memory) end that benchmark, not the run.
void guarded(benchmark::State& state, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_CudnnForward(benchmark::State& state) {
  guarded(state, [&] {
    Problem p(shape_of(state));
    CudnnAttention cudnn(CudnnBackwardOrder::kDeterministic);
    DeviceMemory workspace(cudnn.workspace_bytes(p.shape, p.scale, AttentionPass::kForward));
    time_steps(state, p.forward_flops(), [&] {
      cudnn.forward(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                    Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), p.shape, p.scale,
                    workspace.ptr, nullptr);
    });
  });
}

// range(3): 0 deterministic backward, 1 atomic.
void BM_CudnnForwardBackward(benchmark::State& state) {
  guarded(state, [&] {
    Problem p(shape_of(state));
    const auto order =
        state.range(3) == 0 ? CudnnBackwardOrder::kDeterministic : CudnnBackwardOrder::kAtomic;
    CudnnAttention cudnn(order);
    const uint64_t forward_bytes = cudnn.workspace_bytes(p.shape, p.scale, AttentionPass::kForward);
    const uint64_t backward_bytes =
        cudnn.workspace_bytes(p.shape, p.scale, AttentionPass::kBackward);
    DeviceMemory workspace(std::max(forward_bytes, backward_bytes));
    state.counters["workspace_MiB"] = static_cast<double>(backward_bytes) / (1 << 20);
    time_steps(state, 3.5 * p.forward_flops(), [&] {
      cudnn.forward(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                    Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), p.shape, p.scale,
                    workspace.ptr, nullptr);
      cudnn.backward(Problem::as_bf16(p.dout), Problem::as_bf16(p.q), Problem::as_bf16(p.k),
                     Problem::as_bf16(p.v), Problem::as_bf16(p.out),
                     static_cast<float*>(p.lse.ptr), Problem::as_bf16(p.dq),
                     Problem::as_bf16(p.dk), Problem::as_bf16(p.dv), p.shape, p.scale,
                     workspace.ptr, nullptr);
    });
  });
}

// One plan of cuDNN's list, pinned: range(3) 0 the forward, 1 the atomic
// backward (timed alone, on the out and lse of the default forward);
// range(4) the plan's index. The label is cuDNN's name of the plan.
constexpr int kMaxPlans = 16;
constexpr uint64_t kMaxPlanWorkspace = 8ull << 30;  // the deterministic backward's at the 1B shape: 4.3 GB

// Building every plan of a list takes seconds, so one instance keeps them
// for every benchmark of the run. It is never destroyed: at exit the CUDA
// runtime may be gone before its handle.
CudnnAttention& every_plan_cudnn(CudnnBackwardOrder order) {
  static auto* atomic = new CudnnAttention(CudnnBackwardOrder::kAtomic);
  static auto* deterministic = new CudnnAttention(CudnnBackwardOrder::kDeterministic);
  return order == CudnnBackwardOrder::kAtomic ? *atomic : *deterministic;
}

void BM_CudnnPlans(benchmark::State& state) {
  guarded(state, [&] {
    const AttentionShape shape = shape_of(state);
    const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
    // range 3: 0 the forward, 1 the atomic backward, 2 the deterministic one.
    const auto pass = state.range(3) == 0 ? AttentionPass::kForward : AttentionPass::kBackward;
    const int index = static_cast<int>(state.range(4));
    CudnnAttention& cudnn =
        every_plan_cudnn(state.range(3) == 2 ? CudnnBackwardOrder::kDeterministic : CudnnBackwardOrder::kAtomic);
    cudnn.pin_plan(CudnnAttention::kHeuristicPlan);
    const int count = cudnn.plan_count(shape, scale, pass);
    if (index >= count) {
      const std::string why = "plan " + std::to_string(index) + " is past cuDNN's " +
                              std::to_string(count) + " plans";
      state.SkipWithError(why.c_str());
      return;
    }
    const bool heuristic = index == cudnn.heuristic_plan(shape, scale, pass);
    std::string label = cudnn.plan_name(shape, scale, pass, index);
    if (heuristic) label += " (heuristic's first)";
    if (index == kMaxPlans - 1 && count > kMaxPlans) {
      label += " (the list has " + std::to_string(count) + " plans; raise kMaxPlans)";
    }
    state.SetLabel(label);
    state.counters["plans"] = count;
    state.counters["heuristic"] = heuristic ? 1 : 0;

    Problem p(shape);
    // The backward's out and lse: the default forward's.
    if (pass == AttentionPass::kBackward) {
      DeviceMemory workspace(cudnn.workspace_bytes(shape, scale, AttentionPass::kForward));
      cudnn.forward(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                    Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), shape, scale,
                    workspace.ptr, nullptr);
      SPW_CUDA(cudaDeviceSynchronize());
    }
    cudnn.pin_plan(index);
    // Throws cuDNN's reason where this plan did not build.
    const uint64_t bytes = cudnn.workspace_bytes(shape, scale, pass);
    state.counters["workspace_MiB"] = static_cast<double>(bytes) / (1 << 20);
    if (bytes > kMaxPlanWorkspace) {
      cudnn.pin_plan(CudnnAttention::kHeuristicPlan);
      const std::string why = label + ": workspace of " + std::to_string(bytes >> 20) +
                              " MiB, above the 8 GiB this benchmark allows";
      state.SkipWithError(why.c_str());
      return;
    }
    DeviceMemory workspace(bytes);
    if (pass == AttentionPass::kForward) {
      time_steps(state, p.forward_flops(), [&] {
        cudnn.forward(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                      Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), shape, scale,
                      workspace.ptr, nullptr);
      });
    } else {
      time_steps(state, 2.5 * p.forward_flops(), [&] {
        cudnn.backward(Problem::as_bf16(p.dout), Problem::as_bf16(p.q), Problem::as_bf16(p.k),
                       Problem::as_bf16(p.v), Problem::as_bf16(p.out),
                       static_cast<float*>(p.lse.ptr), Problem::as_bf16(p.dq),
                       Problem::as_bf16(p.dk), Problem::as_bf16(p.dv), shape, scale,
                       workspace.ptr, nullptr);
      });
    }
    cudnn.pin_plan(CudnnAttention::kHeuristicPlan);
  });
}

void BM_OwnForward(benchmark::State& state) {
  guarded(state, [&] {
    Problem p(shape_of(state));
    time_steps(state, p.forward_flops(), [&] {
      attention_forward_cuda(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                             Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), p.shape,
                             p.scale, nullptr);
    });
  });
}

void BM_OwnForwardBackward(benchmark::State& state) {
  guarded(state, [&] {
    Problem p(shape_of(state));
    DeviceMemory workspace(attention_backward_cuda_workspace_bytes(p.shape));
    time_steps(state, 3.5 * p.forward_flops(), [&] {
      attention_forward_cuda(Problem::as_bf16(p.q), Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                             Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr), p.shape,
                             p.scale, nullptr);
      attention_backward_cuda(Problem::as_bf16(p.dout), Problem::as_bf16(p.q),
                              Problem::as_bf16(p.k), Problem::as_bf16(p.v),
                              Problem::as_bf16(p.out), static_cast<float*>(p.lse.ptr),
                              Problem::as_bf16(p.dq), Problem::as_bf16(p.dk),
                              Problem::as_bf16(p.dv), p.shape, p.scale, workspace.ptr, nullptr);
    });
  });
}

// LLaMA-3.2-1B attention (head_dim 64) at 4k, and head_dim 128 at 4k-16k
// with 16k tokens per batch.
const std::vector<std::vector<int64_t>> kShapes = {
    {4, 4096, 64}, {4, 4096, 128}, {2, 8192, 128}, {1, 16384, 128}};

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "seq", "head_dim"});
  for (const auto& s : kShapes) b->Args(s);
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
}

void shapes_and_orders(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "seq", "head_dim", "atomic"});
  for (int64_t atomic : {0, 1}) {
    for (const auto& s : kShapes) b->Args({s[0], s[1], s[2], atomic});
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
}

// The LLaMA-3.2-1B step's attention (head_dim 64) and head_dim 128 at 4k.
void plans(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "seq", "head_dim", "backward", "plan"});
  for (const auto& s : {kShapes[0], kShapes[1]}) {
    for (int64_t backward : {0, 1, 2}) {
      for (int64_t plan = 0; plan < kMaxPlans; ++plan) b->Args({s[0], s[1], s[2], backward, plan});
    }
  }
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(10);
}

BENCHMARK(BM_CudnnForward)->Apply(shapes);
BENCHMARK(BM_CudnnForwardBackward)->Apply(shapes_and_orders);
BENCHMARK(BM_OwnForward)->Apply(shapes);
BENCHMARK(BM_OwnForwardBackward)->Apply(shapes);
BENCHMARK(BM_CudnnPlans)->Apply(plans);

}  // namespace
}  // namespace spillway::ops

#endif  // SPILLWAY_HAS_CUDA

BENCHMARK_MAIN();
