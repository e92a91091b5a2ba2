#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/rmsnorm.h"

namespace spillway::ops {

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxBackwardThreads = 512;
// Forward: each thread takes about this many vectors of its row (so a block
// has that many loads per thread in flight) and keeps up to kCached of them
// in registers between the reduction and the pass that uses them (rows up to
// 8192 wide on the vector path), so x is read from memory once.
constexpr int kVectorsPerThread = 2;
constexpr int kCached = 4;
// Backward: each step handles kRowsPerStep rows at once (one reduction for
// both, twice the loads in flight). Its second pass over the rows reads them
// again, from L1 (a step's rows are a few kilobytes): registers to keep them
// would cut the blocks per SM below the 4 that let all 512 blocks run at once
// on an H100.
constexpr int kRowsPerStep = 2;
// Blocks per SM the register budget is cut for: enough loads in flight.
constexpr int kForwardBlocksPerSm = 5;
constexpr int kBackwardBlocksPerSm = 2;
// dweight: blocks of at least kMinBlockRows rows, at most kMaxBlocks blocks;
// the partials are then summed in kSegments fixed runs of blocks.
constexpr int64_t kMinBlockRows = 16;
constexpr int64_t kMaxBlocks = 512;
constexpr int kSegments = 8;

int64_t block_rows(int64_t rows) {
  return std::max(kMinBlockRows, (rows + kMaxBlocks - 1) / kMaxBlocks);
}
int64_t row_blocks(int64_t rows) {
  const int64_t per_block = block_rows(rows);
  return (rows + per_block - 1) / per_block;
}

// V bf16 moved as one load: 16 bytes for V = 8, 2 bytes for V = 1.
template <int V>
struct Packed;
template <>
struct Packed<8> {
  uint4 raw;
};
template <>
struct Packed<1> {
  __nv_bfloat16 raw;
};

template <int V>
__device__ inline Packed<V> load_packed(const __nv_bfloat16* p) {
  return *reinterpret_cast<const Packed<V>*>(p);
}

__device__ inline void widen(const Packed<8>& p, float (&f)[8]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&p.raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __bfloat1622float2(h[k]);
    f[2 * k] = v.x;
    f[2 * k + 1] = v.y;
  }
}
__device__ inline void widen(const Packed<1>& p, float (&f)[1]) { f[0] = __bfloat162float(p.raw); }

__device__ inline void store_narrow(__nv_bfloat16* p, const float (&f)[8]) {
  uint4 raw;
  auto* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(f[2 * k], f[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ inline void store_narrow(__nv_bfloat16* p, const float (&f)[1]) {
  *p = __float2bfloat16_rn(f[0]);
}

// The block's sums of R values, the same in every thread: a butterfly
// within each warp, then every thread adds the warp sums in warp order.
// blockDim.x is a multiple of 32.
template <int R>
__device__ void block_sum(float (&v)[R], float (&scratch)[R][32]) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      v[r] += __shfl_xor_sync(0xffffffffu, v[r], offset);
    }
    if (threadIdx.x % 32 == 0) scratch[r][threadIdx.x / 32] = v[r];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += scratch[r][w];
    v[r] = total;
  }
  __syncthreads();  // scratch is reused by the next call
}

// One block per row. Thread t owns the V-wide columns j = (t + c * blockDim) * V.
template <int V>
__global__ void __launch_bounds__(kMaxThreads, kForwardBlocksPerSm)
    rmsnorm_forward_kernel(const __nv_bfloat16* __restrict__ x,
                           const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ y,
                           float* __restrict__ rstd, int64_t dim, float eps) {
  __shared__ float scratch[1][32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * dim;
  __nv_bfloat16* yr = y + row * dim;
  const int64_t step = int64_t(blockDim.x) * V;
  const int64_t first = int64_t(threadIdx.x) * V;

  Packed<V> cached[kCached];
  float sum_sq = 0;
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
    const int64_t j = first + c * step;
    if (j < dim) {
      cached[c] = load_packed<V>(xr + j);
      float f[V];
      widen(cached[c], f);
#pragma unroll
      for (int k = 0; k < V; ++k) sum_sq += f[k] * f[k];
    }
  }
  for (int64_t j = first + kCached * step; j < dim; j += step) {
    float f[V];
    widen(load_packed<V>(xr + j), f);
#pragma unroll
    for (int k = 0; k < V; ++k) sum_sq += f[k] * f[k];
  }
  float total[1] = {sum_sq};
  block_sum(total, scratch);
  const float inv = 1.0f / sqrtf(total[0] / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = inv;

  auto normalize = [&](int64_t j, const Packed<V>& packed) {
    float f[V], w[V];
    widen(packed, f);
    widen(load_packed<V>(weight + j), w);
#pragma unroll
    for (int k = 0; k < V; ++k) f[k] = w[k] * (f[k] * inv);
    store_narrow(yr + j, f);
  };
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
    const int64_t j = first + c * step;
    if (j < dim) normalize(j, cached[c]);
  }
  for (int64_t j = first + kCached * step; j < dim; j += step) normalize(j, load_packed<V>(xr + j));
}

// One block per fixed run of rows: dx row by row, and this block's dweight
// sums (in row order) in shared memory, written to its row of `partial`.
template <int V>
__global__ void __launch_bounds__(kMaxBackwardThreads, kBackwardBlocksPerSm)
    rmsnorm_backward_kernel(const __nv_bfloat16* __restrict__ dy,
                            const __nv_bfloat16* __restrict__ x,
                            const __nv_bfloat16* __restrict__ weight,
                            const float* __restrict__ rstd, __nv_bfloat16* __restrict__ dx,
                            float* __restrict__ partial, int64_t rows, int64_t dim,
                            int64_t rows_per_block) {
  constexpr int R = kRowsPerStep;
  extern __shared__ float dweight_sum[];  // [dim]
  __shared__ float scratch[R][32];
  const int64_t step = int64_t(blockDim.x) * V;
  const int64_t first = int64_t(threadIdx.x) * V;
  // Each thread touches only its own columns of dweight_sum, so no barrier
  // is needed around it.
  for (int64_t j = first; j < dim; j += step) {
#pragma unroll
    for (int k = 0; k < V; ++k) dweight_sum[j + k] = 0.0f;
  }

  const int64_t row_begin = int64_t(blockIdx.x) * rows_per_block;
  const int64_t row_end = min(rows, row_begin + rows_per_block);
  for (int64_t row0 = row_begin; row0 < row_end; row0 += R) {
    const int present = static_cast<int>(min(int64_t(R), row_end - row0));
    float inv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) inv[r] = r < present ? rstd[row0 + r] : 0.0f;

    // Loads the step's rows at column j (rows past the block's end are
    // skipped; their values are never used).
    auto load = [&](int64_t j, Packed<V>(&pdy)[R], Packed<V>(&px)[R]) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < present) {
          pdy[r] = load_packed<V>(dy + (row0 + r) * dim + j);
          px[r] = load_packed<V>(x + (row0 + r) * dim + j);
        }
      }
    };
    float dot[R] = {};  // per row: sum_j dy * weight * xhat
    // Rows in order, so each column's dweight sum runs in row order.
    auto accumulate = [&](int64_t j, const Packed<V>(&pdy)[R], const Packed<V>(&px)[R]) {
      float w[V];
      widen(load_packed<V>(weight + j), w);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < present) {
          float g[V], f[V];
          widen(pdy[r], g);
          widen(px[r], f);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float xhat = f[k] * inv[r];
            dot[r] += (g[k] * w[k]) * xhat;
            dweight_sum[j + k] += g[k] * xhat;
          }
        }
      }
    };
    for (int64_t j = first; j < dim; j += step) {
      Packed<V> pdy[R], px[R];
      load(j, pdy, px);
      accumulate(j, pdy, px);
    }
    block_sum(dot, scratch);

    auto input_grad = [&](int64_t j, const Packed<V>(&pdy)[R], const Packed<V>(&px)[R]) {
      float w[V];
      widen(load_packed<V>(weight + j), w);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < present) {
          const float mean_dot = dot[r] / static_cast<float>(dim);
          float g[V], f[V];
          widen(pdy[r], g);
          widen(px[r], f);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            g[k] = inv[r] * (g[k] * w[k] - (f[k] * inv[r]) * mean_dot);
          }
          store_narrow(dx + (row0 + r) * dim + j, g);
        }
      }
    };
    for (int64_t j = first; j < dim; j += step) {
      Packed<V> pdy[R], px[R];
      load(j, pdy, px);
      input_grad(j, pdy, px);
    }
  }

  float* out = partial + int64_t(blockIdx.x) * dim;
  for (int64_t j = first; j < dim; j += step) {
#pragma unroll
    for (int k = 0; k < V; ++k) out[j + k] = dweight_sum[j + k];
  }
}

// dweight[j] = the block partials summed in block order (accumulate:
// dweight[j] += that sum): kSegments threads per column each sum a fixed run
// of blocks in order, then the runs are added in order. blockDim = (32
// columns, kSegments).
__global__ void __launch_bounds__(32 * kSegments)
    sum_partials_kernel(const float* __restrict__ partial, float* __restrict__ dweight,
                        int64_t blocks, int64_t dim, bool accumulate) {
  __shared__ float segment_sum[kSegments][32];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int64_t per_segment = (blocks + kSegments - 1) / kSegments;
  const int64_t begin = threadIdx.y * per_segment;
  const int64_t end = min(blocks, begin + per_segment);
  float sum = 0;
  if (j < dim) {
#pragma unroll 8
    for (int64_t b = begin; b < end; ++b) sum += partial[b * dim + j];
  }
  segment_sum[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    float total = 0;
#pragma unroll
    for (int s = 0; s < kSegments; ++s) total += segment_sum[s][threadIdx.x];
    dweight[j] = accumulate ? dweight[j] + total : total;
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whole warps, enough for `units` but at most `most`.
int threads_for(int64_t units, int most) {
  const int64_t warps = (std::min<int64_t>(units, most) + 31) / 32;
  return static_cast<int>(std::max<int64_t>(warps, 1) * 32);
}
int forward_threads(int64_t units) {
  return threads_for((units + kVectorsPerThread - 1) / kVectorsPerThread, kMaxThreads);
}

void check_shape(int64_t rows, int64_t dim) {
  SPW_CHECK(rows >= 0 && dim > 0, "rmsnorm", "needs rows >= 0 and dim > 0, got rows ", rows,
            ", dim ", dim);
}

template <int V>
void launch_backward(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     const float* rstd, __nv_bfloat16* dx, float* partial, int64_t rows,
                     int64_t dim, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(dim) * sizeof(float);
  if (shared > 48 * 1024) {
    SPW_CUDA(cudaFuncSetAttribute(rmsnorm_backward_kernel<V>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared)));
  }
  rmsnorm_backward_kernel<V>
      <<<static_cast<unsigned>(row_blocks(rows)), threads_for(dim / V, kMaxBackwardThreads), shared,
         stream>>>(dy, x, w, rstd, dx, partial, rows, dim, block_rows(rows));
  SPW_CUDA(cudaGetLastError());
}

}  // namespace

void rmsnorm_forward_cuda(const bf16* x, const bf16* weight, bf16* y, float* rstd, int64_t rows,
                          int64_t dim, float eps, cudaStream_t stream) {
  check_shape(rows, dim);
  if (rows == 0) return;
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(weight);
  auto* yb = reinterpret_cast<__nv_bfloat16*>(y);
  const auto blocks = static_cast<unsigned>(rows);
  if (dim % 8 == 0 && aligned16(x) && aligned16(weight) && aligned16(y)) {
    rmsnorm_forward_kernel<8>
        <<<blocks, forward_threads(dim / 8), 0, stream>>>(xb, wb, yb, rstd, dim, eps);
  } else {
    rmsnorm_forward_kernel<1>
        <<<blocks, forward_threads(dim), 0, stream>>>(xb, wb, yb, rstd, dim, eps);
  }
  SPW_CUDA(cudaGetLastError());
}

uint64_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim) {
  return static_cast<uint64_t>(row_blocks(rows)) * static_cast<uint64_t>(dim) * sizeof(float);
}

void rmsnorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                           bf16* dx, float* dweight, int64_t rows, int64_t dim, void* workspace,
                           cudaStream_t stream, bool accumulate_dweight) {
  check_shape(rows, dim);
  if (rows == 0) {
    if (!accumulate_dweight) {
      SPW_CUDA(cudaMemsetAsync(dweight, 0, static_cast<size_t>(dim) * sizeof(float), stream));
    }
    return;
  }
  SPW_CHECK(workspace != nullptr, "rmsnorm", "backward needs a workspace of ",
            rmsnorm_backward_workspace_bytes(rows, dim), " bytes");
  const auto* dyb = reinterpret_cast<const __nv_bfloat16*>(dy);
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  const auto* wb = reinterpret_cast<const __nv_bfloat16*>(weight);
  auto* dxb = reinterpret_cast<__nv_bfloat16*>(dx);
  auto* partial = static_cast<float*>(workspace);
  if (dim % 8 == 0 && aligned16(dy) && aligned16(x) && aligned16(weight) && aligned16(dx)) {
    launch_backward<8>(dyb, xb, wb, rstd, dxb, partial, rows, dim, stream);
  } else {
    launch_backward<1>(dyb, xb, wb, rstd, dxb, partial, rows, dim, stream);
  }
  const auto column_blocks = static_cast<unsigned>((dim + 31) / 32);
  sum_partials_kernel<<<column_blocks, dim3(32, kSegments), 0, stream>>>(
      partial, dweight, row_blocks(rows), dim, accumulate_dweight);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
