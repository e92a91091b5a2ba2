#include <cuda_bf16.h>

#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/batch_linear.h"
#include "ops/bf16x8.cuh"

namespace spillway::ops {

namespace {

constexpr int kWarps = 8;    // output columns a block computes, one a warp
constexpr int kRowTile = 16;  // rows of x one pass over a weight row serves

__device__ inline void load8(const __nv_bfloat16* p, float (&f)[8]) {
  widen8(__ldg(reinterpret_cast<const uint4*>(p)), f);
}

__device__ inline void store(float* y, float v) { *y = v; }
__device__ inline void store(__nv_bfloat16* y, float v) { *y = __float2bfloat16_rn(v); }

// At least 4 blocks (32 warps) an SM, so that enough weight loads are in
// flight to keep the memory busy while decoding.
template <typename Out>
__global__ void __launch_bounds__(kWarps * 32, 4)
    batch_linear_kernel(const __nv_bfloat16* x, const int32_t* row_index, const __nv_bfloat16* w, Out* y,
                        int64_t rows, int64_t in, int64_t out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (o >= out) return;  // the whole warp leaves together
  const int64_t pieces = in / 8;
  const __nv_bfloat16* w_row = w + o * in;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowTile) {
    const int tile = static_cast<int>(rows - r0 < kRowTile ? rows - r0 : kRowTile);
    const __nv_bfloat16* x_row[kRowTile];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
      const int64_t row = r0 + (r < tile ? r : tile - 1);
      x_row[r] = x + (row_index != nullptr ? static_cast<int64_t>(row_index[row]) : row) * in;
    }
    float acc[kRowTile];
#pragma unroll
    for (int r = 0; r < kRowTile; ++r) acc[r] = 0.0f;
#pragma unroll 2
    for (int64_t p = lane; p < pieces; p += 32) {
      float wf[8];
      load8(w_row + p * 8, wf);
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        if (r < tile) {
          float xf[8];
          load8(x_row[r] + p * 8, xf);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r] = __fmaf_rn(xf[j], wf[j], acc[r]);
        }
      }
    }
    // The fold: lane l adds lane l ^ width's sum, so lanes l and l ^ width
    // add the same two numbers and every lane ends with lane 0's result.
#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
      if (r < tile) {  // the same for the whole warp
#pragma unroll
        for (int width = 16; width > 0; width /= 2) {
          acc[r] = __fadd_rn(acc[r], __shfl_xor_sync(0xffffffffu, acc[r], width));
        }
      }
    }
    if (lane < tile) {
      // Lane r writes row r: the rows' stores spread over the lanes.
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        if (r == lane) store(y + (r0 + r) * out + o, acc[r]);
      }
    }
  }
}

template <typename Out>
void launch(const bf16* x, const int32_t* row_index, const bf16* w, Out* y, int64_t rows, int64_t in, int64_t out,
            cudaStream_t stream) {
  SPW_CHECK(in > 0 && in % 8 == 0, "batch_linear_cuda", "the input width must be a positive multiple of 8, got ",
            in);
  SPW_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0,
            "batch_linear_cuda", "x and w must be 16-byte aligned");
  SPW_CHECK(rows >= 0 && out > 0 && (out + kWarps - 1) / kWarps < (1ll << 31), "batch_linear_cuda",
            "bad shape: ", rows, " rows, ", out, " outputs");
  if (rows == 0) return;
  const auto blocks = static_cast<unsigned>((out + kWarps - 1) / kWarps);
  batch_linear_kernel<<<blocks, kWarps * 32, 0, stream>>>(reinterpret_cast<const __nv_bfloat16*>(x), row_index,
                                                           reinterpret_cast<const __nv_bfloat16*>(w), y, rows, in,
                                                           out);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace

void batch_linear_cuda(const bf16* x, const int32_t* row_index, const bf16* w, bf16* y, int64_t rows, int64_t in,
                       int64_t out, cudaStream_t stream) {
  launch(x, row_index, w, reinterpret_cast<__nv_bfloat16*>(y), rows, in, out, stream);
}

void batch_linear_cuda(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows, int64_t in,
                       int64_t out, cudaStream_t stream) {
  launch(x, row_index, w, y, rows, in, out, stream);
}

}  // namespace spillway::ops
