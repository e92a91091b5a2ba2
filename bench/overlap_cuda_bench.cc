// Does AdamW hide under the next step's forward matmuls? The LLaMA-3.2-1B
// optimizer (1.24B parameters, fp32 master and moments, bf16 copy written)
// against the forward projections of 16 layers at 16384 tokens, three ways:
//   serial     every update, then every matmul, on one stream;
//   overlapped the updates on a second stream, layer by layer, and each
//              layer's matmuls waiting only for that layer's update;
//   + priority the same with the matmul stream at the higher priority.
// Prints the mean milliseconds of each over several repetitions.
#include <benchmark/benchmark.h>

#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "ops/adamw.h"
#include "ops/matmul_cuda.h"

namespace {

using spillway::bf16;
using spillway::DType;

constexpr int64_t kTokens = 16384, kDim = 2048, kQkv = 3072, kFfn = 8192, kVocab = 128256;
constexpr int kLayers = 16, kRepeats = 5;

struct Chunk {
  int64_t n;
  float *master, *grad, *m, *v;
  bf16* working;
};

void* zeroed(size_t bytes) {
  void* p = nullptr;
  SPW_CUDA(cudaMalloc(&p, bytes));
  SPW_CUDA(cudaMemset(p, 0, bytes));
  return p;
}

Chunk make_chunk(int64_t n) {
  const size_t f = static_cast<size_t>(n) * 4;
  return {n, static_cast<float*>(zeroed(f)), static_cast<float*>(zeroed(f)), static_cast<float*>(zeroed(f)),
          static_cast<float*>(zeroed(f)), static_cast<bf16*>(zeroed(static_cast<size_t>(n) * 2))};
}

struct Bench {
  std::vector<Chunk> chunks;  // the embedding, then one per layer
  bf16 *x, *h, *w_qkv, *w_o, *w_gate_up, *w_down, *out_wide, *out_ffn;
  spillway::ops::CublasLtMatmul matmul;
  spillway::ops::AdamWHyper hp{};

  Bench() {
    chunks.push_back(make_chunk(kVocab * kDim));
    const int64_t per_layer = kDim * kQkv + kDim * kDim + 2 * kDim * kFfn + kFfn * kDim;
    for (int l = 0; l < kLayers; ++l) chunks.push_back(make_chunk(per_layer));
    x = static_cast<bf16*>(zeroed(kTokens * kDim * 2));
    h = static_cast<bf16*>(zeroed(kTokens * kFfn * 2));
    w_qkv = static_cast<bf16*>(zeroed(kQkv * kDim * 2));
    w_o = static_cast<bf16*>(zeroed(kDim * kDim * 2));
    w_gate_up = static_cast<bf16*>(zeroed(2 * kFfn * kDim * 2));
    w_down = static_cast<bf16*>(zeroed(kDim * kFfn * 2));
    out_wide = static_cast<bf16*>(zeroed(kTokens * 2 * kFfn * 2));
    out_ffn = static_cast<bf16*>(zeroed(kTokens * kDim * 2));
    hp.lr = 1e-4;
    hp.weight_decay = 0.1;
  }

  void update(int chunk, cudaStream_t s) {
    const Chunk& c = chunks[static_cast<size_t>(chunk)];
    spillway::ops::adamw_update_cuda(c.master, c.grad, c.m, c.v, c.working, c.n, hp, s);
  }

  void layer_matmuls(cudaStream_t s) {
    auto nt = [&](const bf16* a, const bf16* w, bf16* out, int64_t n, int64_t k) {
      matmul.run(false, true, kTokens, n, k, 1.0f, a, DType::bf16, w, DType::bf16, 0.0f, out, DType::bf16, s);
    };
    nt(x, w_qkv, out_wide, kQkv, kDim);
    nt(x, w_o, out_ffn, kDim, kDim);
    nt(x, w_gate_up, out_wide, 2 * kFfn, kDim);
    nt(h, w_down, out_ffn, kDim, kFfn);
  }
};

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  SPW_CUDA(cudaEventSynchronize(b));
  float ms = 0;
  SPW_CUDA(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

}  // namespace

int main() {
  Bench bench;
  int least = 0, greatest = 0;
  SPW_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t compute, side, compute_high, side_low;
  SPW_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  SPW_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  SPW_CUDA(cudaStreamCreateWithPriority(&compute_high, cudaStreamNonBlocking, greatest));
  SPW_CUDA(cudaStreamCreateWithPriority(&side_low, cudaStreamNonBlocking, least));
  cudaEvent_t start, stop, joined;
  SPW_CUDA(cudaEventCreate(&start));
  SPW_CUDA(cudaEventCreate(&stop));
  SPW_CUDA(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  std::vector<cudaEvent_t> updated(static_cast<size_t>(kLayers + 1));
  for (auto& e : updated) SPW_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  auto alone = [&](bool updates, bool matmuls) {
    SPW_CUDA(cudaEventRecord(start, compute));
    if (updates) {
      for (int c = 0; c <= kLayers; ++c) bench.update(c, compute);
    }
    if (matmuls) {
      for (int l = 0; l < kLayers; ++l) bench.layer_matmuls(compute);
    }
    SPW_CUDA(cudaEventRecord(stop, compute));
    return elapsed_ms(start, stop);
  };
  auto overlapped = [&](cudaStream_t c_stream, cudaStream_t u_stream) {
    SPW_CUDA(cudaEventRecord(start, c_stream));
    SPW_CUDA(cudaStreamWaitEvent(u_stream, start));
    for (int c = 0; c <= kLayers; ++c) {
      bench.update(c, u_stream);
      SPW_CUDA(cudaEventRecord(updated[static_cast<size_t>(c)], u_stream));
    }
    SPW_CUDA(cudaStreamWaitEvent(c_stream, updated[0]));
    for (int l = 0; l < kLayers; ++l) {
      SPW_CUDA(cudaStreamWaitEvent(c_stream, updated[static_cast<size_t>(l + 1)]));
      bench.layer_matmuls(c_stream);
    }
    SPW_CUDA(cudaEventRecord(joined, u_stream));
    SPW_CUDA(cudaStreamWaitEvent(c_stream, joined));
    SPW_CUDA(cudaEventRecord(stop, c_stream));
    return elapsed_ms(start, stop);
  };

  alone(true, true);  // warm-up: cuBLASLt plans, clocks
  double t_updates = 0, t_matmuls = 0, t_serial = 0, t_overlap = 0, t_priority = 0;
  for (int r = 0; r < kRepeats; ++r) {
    t_updates += alone(true, false);
    t_matmuls += alone(false, true);
    t_serial += alone(true, true);
    t_overlap += overlapped(compute, side);
    t_priority += overlapped(compute_high, side_low);
  }
  auto mean = [](double total) { return total / kRepeats; };
  std::printf("AdamW alone (1.24B parameters, fp32 moments): %8.2f ms\n", mean(t_updates));
  std::printf("forward matmuls alone (16 layers):           %8.2f ms\n", mean(t_matmuls));
  std::printf("serial:                                      %8.2f ms\n", mean(t_serial));
  std::printf("overlapped:                                  %8.2f ms (hidden: %.2f ms)\n", mean(t_overlap),
              mean(t_serial) - mean(t_overlap));
  std::printf("overlapped, matmuls at high priority:        %8.2f ms (hidden: %.2f ms)\n", mean(t_priority),
              mean(t_serial) - mean(t_priority));
  return 0;
}

#else
int main() { return 0; }
#endif
