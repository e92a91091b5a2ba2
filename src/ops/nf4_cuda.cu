// NF4 dequantization on the GPU, as ops/nf4.h defines it. One thread a
// packed byte (two values); the code tables travel as a kernel argument, so
// no device needs them set up first.
#include <cuda_runtime.h>

#include <algorithm>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/master_split.h"
#include "ops/nf4.h"

namespace spillway::ops {

namespace {

struct Tables {
  float nf4[16];
  float dynamic[256];
};

const Tables& tables() {
  static const Tables t = [] {
    Tables out{};
    std::copy(nf4_code().begin(), nf4_code().end(), out.nf4);
    std::copy(dynamic_map_code().begin(), dynamic_map_code().end(), out.dynamic);
    return out;
  }();
  return t;
}

// __fmul_rn and __fadd_rn are never contracted into a multiply-add: the
// CPU's roundings, one by one.
__device__ inline float block_scale(const Tables& tab, const Nf4DeviceTensor& t, int64_t b) {
  if (t.absmax) return t.absmax[b];
  const float scale = __fmul_rn(tab.dynamic[t.qabsmax[b]], t.absmax2[b / kNf4ScaleBlock]);
  return __fadd_rn(scale, t.offset);
}

__device__ inline void store(float* out, int64_t i, float v) { out[i] = v; }
__device__ inline void store(bf16* out, int64_t i, float v) {
  reinterpret_cast<uint16_t*>(out)[i] = split_master_bits(__float_as_uint(v)).working;
}

template <typename Out>
__global__ void nf4_dequantize_kernel(Tables tab, Nf4DeviceTensor t, Out* out) {
  const int64_t byte = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t i = 2 * byte;
  if (i >= t.numel) return;
  const uint8_t packed = t.packed[byte];
  // Blocks hold an even count, so a byte's two values share their block.
  const float scale = block_scale(tab, t, i / t.block);
  store(out, i, __fmul_rn(tab.nf4[packed >> 4], scale));
  if (i + 1 < t.numel) store(out, i + 1, __fmul_rn(tab.nf4[packed & 0xF], scale));
}

template <typename Out>
void launch(const Nf4DeviceTensor& t, Out* out, cudaStream_t stream) {
  SPW_CHECK(t.block > 0 && t.block % 2 == 0 && t.packed && (t.absmax || (t.qabsmax && t.absmax2)), "nf4_dequantize",
            "a tensor of ", t.numel, " values needs its packed codes and scales, in blocks of an even count");
  if (t.numel == 0) return;
  constexpr int kThreads = 256;
  const int64_t bytes = nf4_packed_bytes(t.numel);
  const auto blocks = static_cast<unsigned>((bytes + kThreads - 1) / kThreads);
  nf4_dequantize_kernel<<<blocks, kThreads, 0, stream>>>(tables(), t, out);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace

void nf4_dequantize_cuda(const Nf4DeviceTensor& t, float* out, cudaStream_t stream) { launch(t, out, stream); }
void nf4_dequantize_bf16_cuda(const Nf4DeviceTensor& t, bf16* out, cudaStream_t stream) { launch(t, out, stream); }

}  // namespace spillway::ops
