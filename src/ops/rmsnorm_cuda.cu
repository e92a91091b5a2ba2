#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/dependent_launch.cuh"
#include "ops/bf16x8.cuh"
#include "ops/rmsnorm.h"

namespace spillway::ops {

namespace {

constexpr int kMaxThreads = 256;
constexpr int kMaxBackwardThreads = 512;
// Forward: each thread takes about this many vectors of its row and keeps up
// to kCached of them in registers between the reduction and the pass that
// uses them (rows up to 8192 wide on the vector path), so x is read from
// memory once. A block loads its whole row at once, so what sets the bytes
// in flight is how many rows an SM holds: registers cap it at about 1300
// threads, and 4 vectors per thread (a 2048-wide row in 2 warps, not 4) let
// those threads hold twice as many rows as 2 did.
constexpr int kVectorsPerThread = 4;
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
// the partials are then summed in kSegments fixed runs of blocks: with 32,
// a 2048-wide dweight has 64K threads reading 16 partials each (with 8, 16K
// threads read 64 each, one short latency-bound chain after another).
constexpr int64_t kMinBlockRows = 16;
constexpr int64_t kMaxBlocks = 512;
constexpr int kSegments = 32;

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

__device__ inline void widen(const Packed<8>& p, float (&f)[8]) { widen8(p.raw, f); }
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
  dependents_may_start();  // launched dependent (device/cuda/dependent_launch.cuh)
  prior_grids_wait();
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

// A thread's running dweight sums for its own columns, in shared memory laid
// out by owner: the sums for its c-th vector of columns sit at
// [c * V * blockDim + k * blockDim + t] (in float4 groups when V = 8), so
// each access of a warp is consecutive and free of bank conflicts. (Laid out
// by column, threads 8 floats apart, every 16-byte access was a 2-way
// conflict.)
template <int V>
struct OwnedSums;
template <>
struct OwnedSums<8> {
  float4* base;
  __device__ float4& at(int c, int half) const {
    return base[(2 * c + half) * blockDim.x + threadIdx.x];
  }
  __device__ void load(int c, float (&s)[8]) const {
    const float4 a = at(c, 0), b = at(c, 1);
    s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w;
    s[4] = b.x, s[5] = b.y, s[6] = b.z, s[7] = b.w;
  }
  __device__ void store(int c, const float (&s)[8]) const {
    at(c, 0) = make_float4(s[0], s[1], s[2], s[3]);
    at(c, 1) = make_float4(s[4], s[5], s[6], s[7]);
  }
};
template <>
struct OwnedSums<1> {
  float* base;
  __device__ void load(int c, float (&s)[1]) const { s[0] = base[c * blockDim.x + threadIdx.x]; }
  __device__ void store(int c, const float (&s)[1]) const { base[c * blockDim.x + threadIdx.x] = s[0]; }
};

// One block per fixed run of rows: dx row by row (plus the addend's row when
// kAddend), and this block's dweight sums (in row order) in shared memory,
// written to its row of `partial`.
template <int V, bool kAddend>
__global__ void __launch_bounds__(kMaxBackwardThreads, kBackwardBlocksPerSm)
    rmsnorm_backward_kernel(const __nv_bfloat16* __restrict__ dy,
                            const __nv_bfloat16* __restrict__ x,
                            const __nv_bfloat16* __restrict__ weight,
                            const float* __restrict__ rstd,
                            const __nv_bfloat16* __restrict__ addend,
                            __nv_bfloat16* __restrict__ dx, float* __restrict__ partial,
                            int64_t rows, int64_t dim, int64_t rows_per_block) {
  constexpr int R = kRowsPerStep;
  extern __shared__ float4 owned_sums[];
  __shared__ float scratch[R][32];
  const OwnedSums<V> sums{reinterpret_cast<decltype(OwnedSums<V>::base)>(owned_sums)};
  const int64_t step = int64_t(blockDim.x) * V;
  const int64_t first = int64_t(threadIdx.x) * V;
  // Each thread touches only its own sums, so no barrier is needed around them.
  {
    const float zero[V] = {};
    int c = 0;
    for (int64_t j = first; j < dim; j += step, ++c) sums.store(c, zero);
  }

  const int64_t row_begin = int64_t(blockIdx.x) * rows_per_block;
  const int64_t row_end = min(rows, row_begin + rows_per_block);
  for (int64_t row0 = row_begin; row0 < row_end; row0 += R) {
    const int present = static_cast<int>(min(int64_t(R), row_end - row0));
    float inv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) inv[r] = r < present ? rstd[row0 + r] : 0.0f;

    // Loads the step's rows of `t` at column j (rows past the block's end
    // are skipped; their values are never used).
    auto load = [&](const __nv_bfloat16* t, int64_t j, Packed<V>(&p)[R]) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < present) p[r] = load_packed<V>(t + (row0 + r) * dim + j);
      }
    };

    float dot[R] = {};  // per row: sum_j dy * weight * xhat
    int c = 0;
    for (int64_t j = first; j < dim; j += step, ++c) {
      Packed<V> pdy[R], px[R];
      load(dy, j, pdy);
      load(x, j, px);
      float w[V], s[V];
      widen(load_packed<V>(weight + j), w);
      sums.load(c, s);
      // Rows in order, so each column's dweight sum runs in row order.
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
            s[k] += g[k] * xhat;
          }
        }
      }
      sums.store(c, s);
    }
    // The addend is read only by the second pass; its loads for the first
    // columns go out before the reduction, so their latency hides under it.
    Packed<V> pa_next[R];
    if constexpr (kAddend) {
      if (first < dim) load(addend, first, pa_next);
    }
    block_sum(dot, scratch);

    // The second pass reads dy and x again, from L1 (a step's rows are a few
    // kilobytes). The addend's next columns are loaded one iteration ahead.
    for (int64_t j = first; j < dim; j += step) {
      Packed<V> pa[R];
      if constexpr (kAddend) {
#pragma unroll
        for (int r = 0; r < R; ++r) pa[r] = pa_next[r];
        if (j + step < dim) load(addend, j + step, pa_next);
      }
      float w[V];
      widen(load_packed<V>(weight + j), w);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < present) {
          const int64_t at = (row0 + r) * dim + j;
          const float mean_dot = dot[r] / static_cast<float>(dim);
          float g[V], f[V];
          widen(load_packed<V>(dy + at), g);
          widen(load_packed<V>(x + at), f);
#pragma unroll
          for (int k = 0; k < V; ++k) {
            g[k] = inv[r] * (g[k] * w[k] - (f[k] * inv[r]) * mean_dot);
          }
          if constexpr (kAddend) {
            float a[V];
            widen(pa[r], a);
#pragma unroll
            for (int k = 0; k < V; ++k) g[k] += a[k];  // in fp32: dx is rounded once
          }
          store_narrow(dx + at, g);
        }
      }
    }
  }

  float* out = partial + int64_t(blockIdx.x) * dim;
  int c = 0;
  for (int64_t j = first; j < dim; j += step, ++c) {
    float s[V];
    sums.load(c, s);
#pragma unroll
    for (int k = 0; k < V; ++k) out[j + k] = s[k];
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

template <int V, bool kAddend>
void launch_backward(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     const float* rstd, const __nv_bfloat16* addend, __nv_bfloat16* dx,
                     float* partial, int64_t rows, int64_t dim, cudaStream_t stream) {
  const int64_t units = dim / V;
  const int threads = threads_for(units, kMaxBackwardThreads);
  const int64_t per_thread = (units + threads - 1) / threads;
  const size_t shared = static_cast<size_t>(per_thread * threads * V) * sizeof(float);
  // The opt-in counts the kernel's static shared memory (its reduction
  // scratch) too: dim 8200 needs exactly 48 KiB of sums plus that.
  const size_t static_shared = sizeof(float) * kRowsPerStep * 32;
  if (shared + static_shared > 48 * 1024) {
    SPW_CUDA(cudaFuncSetAttribute(rmsnorm_backward_kernel<V, kAddend>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(shared)));
  }
  rmsnorm_backward_kernel<V, kAddend>
      <<<static_cast<unsigned>(row_blocks(rows)), threads, shared, stream>>>(
          dy, x, w, rstd, addend, dx, partial, rows, dim, block_rows(rows));
  SPW_CUDA(cudaGetLastError());
}

template <int V>
void launch_backward(const __nv_bfloat16* dy, const __nv_bfloat16* x, const __nv_bfloat16* w,
                     const float* rstd, const __nv_bfloat16* addend, __nv_bfloat16* dx,
                     float* partial, int64_t rows, int64_t dim, cudaStream_t stream) {
  if (addend) {
    launch_backward<V, true>(dy, x, w, rstd, addend, dx, partial, rows, dim, stream);
  } else {
    launch_backward<V, false>(dy, x, w, rstd, addend, dx, partial, rows, dim, stream);
  }
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
    launch_dependent(rmsnorm_forward_kernel<8>, dim3(blocks), dim3(forward_threads(dim / 8)), 0, stream, xb, wb, yb, rstd, dim,
                     eps);
  } else {
    launch_dependent(rmsnorm_forward_kernel<1>, dim3(blocks), dim3(forward_threads(dim)), 0, stream, xb, wb, yb, rstd, dim,
                     eps);
  }
  SPW_CUDA(cudaGetLastError());
}

uint64_t rmsnorm_backward_workspace_bytes(int64_t rows, int64_t dim) {
  return static_cast<uint64_t>(row_blocks(rows)) * static_cast<uint64_t>(dim) * sizeof(float);
}

void rmsnorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                           bf16* dx, float* dweight, int64_t rows, int64_t dim, void* workspace,
                           cudaStream_t stream, bool accumulate_dweight, const bf16* dx_addend) {
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
  const auto* ab = reinterpret_cast<const __nv_bfloat16*>(dx_addend);
  auto* partial = static_cast<float*>(workspace);
  if (dim % 8 == 0 && aligned16(dy) && aligned16(x) && aligned16(weight) && aligned16(dx) &&
      aligned16(dx_addend)) {
    launch_backward<8>(dyb, xb, wb, rstd, ab, dxb, partial, rows, dim, stream);
  } else {
    launch_backward<1>(dyb, xb, wb, rstd, ab, dxb, partial, rows, dim, stream);
  }
  const auto column_blocks = static_cast<unsigned>((dim + 31) / 32);
  sum_partials_kernel<<<column_blocks, dim3(32, kSegments), 0, stream>>>(
      partial, dweight, row_blocks(rows), dim, accumulate_dweight);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
