// The 1B model's gate|up product (16384 x 16384 x 2048) at the power cap:
// the own Hopper GEMM (plain, and with the SwiGLU gate in its epilogue)
// against cuBLASLt (plain, and followed by the separate gate kernel); and
// down_proj's dX product (16384 x 8192 x 2048) with SwiGLU's backward, own
// against cuBLASLt's dout followed by the separate backward kernel; and the
// q|k|v product (16384 x 3072 x 2048) with q and k rotated by RoPE in its
// epilogue, against cuBLASLt followed by the rope kernel. Each
// mode runs back to back for SECONDS (argument 1, default 4), so the GPU
// settles at the clock its power limit holds, and the last 2 s are timed:
// per-call times there are what a capped training step gets, which can
// differ from the uncapped ones (matmul_cuda_bench) by more than the kernels
// differ from each other.
#include <benchmark/benchmark.h>

#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/gemm_hopper.h"
#include "ops/matmul_cuda.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace {

using spillway::bf16;
using spillway::DType;
using Clock = std::chrono::steady_clock;

constexpr int64_t kTokens = 16384, kFfn = 8192, kDim = 2048;
// The q|k|v projection: 32 q heads, 8 k and 8 v heads of 64, sequences of 4096.
constexpr int64_t kHeadDim = 64, kQkv = (32 + 2 * 8) * kHeadDim, kRotatedHeads = 32 + 8, kSeq = 4096;

bf16* random_bf16(int64_t n, uint64_t seed) {
  std::vector<bf16> host(static_cast<size_t>(n));
  uint64_t x = seed;
  for (bf16& h : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    h = spillway::to_bf16(static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-53 * 2 - 1));
  }
  bf16* p = nullptr;
  SPW_CUDA(cudaMalloc(&p, host.size() * sizeof(bf16)));
  SPW_CUDA(cudaMemcpy(p, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  return p;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Milliseconds a call over the last 2 s of `seconds` of back-to-back calls.
double capped_ms(const std::function<void()>& call, double seconds) {
  const auto start = Clock::now();
  while (seconds_since(start) < seconds - 2) {
    for (int i = 0; i < 20; ++i) call();
    SPW_CUDA(cudaDeviceSynchronize());
  }
  cudaEvent_t begin, end;
  SPW_CUDA(cudaEventCreate(&begin));
  SPW_CUDA(cudaEventCreate(&end));
  SPW_CUDA(cudaEventRecord(begin));
  int calls = 0;
  const auto timed = Clock::now();
  while (seconds_since(timed) < 2.0) {
    for (int i = 0; i < 20; ++i) call();
    calls += 20;
    SPW_CUDA(cudaEventRecord(end));
    SPW_CUDA(cudaEventSynchronize(end));
  }
  float ms = 0;
  SPW_CUDA(cudaEventElapsedTime(&ms, begin, end));
  SPW_CUDA(cudaEventDestroy(begin));
  SPW_CUDA(cudaEventDestroy(end));
  return ms / calls;
}

}  // namespace

int main(int argc, char** argv) {
  if (spillway::cuda_device_count() == 0) {
    std::printf("no GPU: nothing to measure\n");
    return 0;
  }
  if (!spillway::ops::hopper_gemm_available(0)) {
    std::printf("not a Hopper GPU (or no sm_90a code): nothing to measure\n");
    return 0;
  }
  const double seconds = argc > 1 ? std::max(2.5, std::atof(argv[1])) : 4.0;
  bf16* x = random_bf16(kTokens * kDim, 1);
  bf16* w = random_bf16(2 * kFfn * kDim, 2);
  bf16 *gate_up = nullptr, *out = nullptr;
  SPW_CUDA(cudaMalloc(&gate_up, kTokens * 2 * kFfn * sizeof(bf16)));
  SPW_CUDA(cudaMalloc(&out, kTokens * kFfn * sizeof(bf16)));
  // The backward's operands: dy [tokens, dim], w_down [dim, ffn]; gate_up
  // (above) is the forward's, dout and dgate_up its products.
  bf16* dy = random_bf16(kTokens * kDim, 3);
  bf16* w_down = random_bf16(kDim * kFfn, 4);
  bf16 *dout = nullptr, *dgate_up = nullptr;
  SPW_CUDA(cudaMalloc(&dout, kTokens * kFfn * sizeof(bf16)));
  SPW_CUDA(cudaMalloc(&dgate_up, kTokens * 2 * kFfn * sizeof(bf16)));
  bf16* w_qkv = random_bf16(kQkv * kDim, 5);
  bf16* qkv = nullptr;
  float *inv_freq = nullptr, *cos_sin = nullptr;
  SPW_CUDA(cudaMalloc(&qkv, kTokens * kQkv * sizeof(bf16)));
  const std::vector<float> freq = spillway::ops::rope_inv_freq(kHeadDim, 500000.0, {});
  SPW_CUDA(cudaMalloc(&inv_freq, freq.size() * sizeof(float)));
  SPW_CUDA(cudaMemcpy(inv_freq, freq.data(), freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  SPW_CUDA(cudaMalloc(&cos_sin, kSeq * kHeadDim * sizeof(float)));
  spillway::ops::rope_table_cuda(inv_freq, kSeq, kHeadDim, 0, cos_sin, nullptr);
  spillway::ops::CublasLtMatmul cublas;
  auto library_qkv = [&] {
    cublas.run(false, true, kTokens, kQkv, kDim, 1.0f, x, DType::bf16, w_qkv, DType::bf16, 0.0f, qkv, DType::bf16,
               nullptr);
  };
  auto library = [&] {
    cublas.run(false, true, kTokens, 2 * kFfn, kDim, 1.0f, x, DType::bf16, w, DType::bf16, 0.0f, gate_up,
               DType::bf16, nullptr);
  };
  auto gate = [&] { spillway::ops::swiglu_packed_forward_cuda(gate_up, out, kTokens, kFfn, nullptr); };
  // FLOPs of each mode's product: gate|up's, or down dX's (half of it).
  const double gate_up_flops = 2.0 * kTokens * 2 * kFfn * kDim, down_dx_flops = 2.0 * kTokens * kFfn * kDim;
  const double qkv_flops = 2.0 * kTokens * kQkv * kDim;
  struct Mode {
    const char* name;
    std::function<void()> call;
    double flops;
  };
  const Mode modes[] = {
      {"own GEMM with the gate",
       [&] { spillway::ops::hopper_gemm_swiglu(x, w, gate_up, out, kTokens, kFfn, kDim, nullptr); }, gate_up_flops},
      {"cuBLASLt, then the gate kernel", [&] { library(); gate(); }, gate_up_flops},
      {"own GEMM", [&] { spillway::ops::hopper_gemm(x, w, gate_up, kTokens, 2 * kFfn, kDim, nullptr); },
       gate_up_flops},
      {"cuBLASLt", library, gate_up_flops},
      {"the gate kernel alone", gate, gate_up_flops},
      {"down dX with SwiGLU's backward", [&] {
         spillway::ops::hopper_gemm_swiglu_backward(dy, w_down, gate_up, dgate_up, kTokens, kFfn, kDim, nullptr);
       }, down_dx_flops},
      {"cuBLASLt dout, then the backward", [&] {
         cublas.run(false, false, kTokens, kFfn, kDim, 1.0f, dy, DType::bf16, w_down, DType::bf16, 0.0f, dout,
                    DType::bf16, nullptr);
         spillway::ops::swiglu_packed_backward_cuda(dout, gate_up, dgate_up, kTokens, kFfn, nullptr);
       }, down_dx_flops},
      {"q|k|v with RoPE", [&] {
         spillway::ops::hopper_gemm_rope(x, w_qkv, qkv, kTokens, kQkv, kDim, cos_sin, kSeq, kHeadDim,
                                         kRotatedHeads * kHeadDim, nullptr);
       }, qkv_flops},
      {"cuBLASLt q|k|v, then the rope kernel", [&] {
         library_qkv();
         spillway::ops::rope_forward_cuda(qkv, qkv, kTokens / kSeq, kSeq, kQkv / kHeadDim, kHeadDim, inv_freq, 0,
                                          nullptr, kRotatedHeads);
       }, qkv_flops},
      {"own q|k|v", [&] { spillway::ops::hopper_gemm(x, w_qkv, qkv, kTokens, kQkv, kDim, nullptr); }, qkv_flops},
      {"cuBLASLt q|k|v", library_qkv, qkv_flops},
  };
  std::printf("gate|up %lld x %lld x %lld, down dX %lld x %lld x %lld and q|k|v at the power cap (%.1f s a mode, the "
              "last 2 s timed)\n",
              static_cast<long long>(kTokens), static_cast<long long>(2 * kFfn), static_cast<long long>(kDim),
              static_cast<long long>(kTokens), static_cast<long long>(kFfn), static_cast<long long>(kDim), seconds);
  for (int round = 0; round < 2; ++round) {
    for (const Mode& m : modes) {
      const double ms = capped_ms(m.call, seconds);
      std::printf("round %d  %-34s %7.3f ms  %5.0f TFLOP/s of the product\n", round, m.name, ms, m.flops / ms * 1e-9);
      std::fflush(stdout);
    }
  }
  SPW_CUDA(cudaFree(x));
  SPW_CUDA(cudaFree(w));
  SPW_CUDA(cudaFree(gate_up));
  SPW_CUDA(cudaFree(out));
  SPW_CUDA(cudaFree(dy));
  SPW_CUDA(cudaFree(w_down));
  SPW_CUDA(cudaFree(dout));
  SPW_CUDA(cudaFree(dgate_up));
  SPW_CUDA(cudaFree(w_qkv));
  SPW_CUDA(cudaFree(qkv));
  SPW_CUDA(cudaFree(inv_freq));
  SPW_CUDA(cudaFree(cos_sin));
  return 0;
}

#else

int main() { return 0; }

#endif  // SPILLWAY_HAS_CUDA
