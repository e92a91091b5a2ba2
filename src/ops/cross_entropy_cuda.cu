#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/bf16x8.cuh"
#include "ops/cross_entropy.h"

namespace spillway::ops {

namespace {

// Threads a row. The fused kernel keeps one row a block in flight (no more
// than the L2 holds between its two passes), so its block must hide the
// latency of its loads and of its two exponentials an element on its own:
// 1024 threads were the fastest measured (docs/performance.md). Every kernel
// here takes the same count, since it fixes the order of the lse's sums.
constexpr int kRowThreads = 1024;
constexpr int kSumThreads = 1024;
// Vectors each thread loads before using any, so several are in flight
// (the fused kernel's 8 measured best: docs/performance.md). Each thread
// takes its vectors in the same order for any count, so the lse does not
// depend on it.
constexpr int kUnroll = 4;
constexpr int kFusedUnroll = 8;
constexpr float kLog2e = 1.4426950408889634f;

__device__ inline float exp_of(float x) { return exp2f(x * kLog2e); }

// A row's part split as head (scalars up to the first 16-byte boundary),
// vectors of 8, and a scalar tail. With `vectors` false everything is head.
struct RowSplit {
  int64_t head, vectors, tail_begin, scalars;

  __device__ RowSplit(const void* row, int64_t vocab, bool use_vectors) {
    head = use_vectors ? ((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16) / 2 : vocab;
    if (head > vocab) head = vocab;
    vectors = (vocab - head) / 8;
    tail_begin = head + vectors * 8;
    scalars = head + (vocab - tail_begin);
  }
  // The element of scalar number q.
  __device__ int64_t scalar_at(int64_t q) const { return q < head ? q : tail_begin + (q - head); }
};

// Online log-sum-exp state: the largest value seen and sum exp(x - max).
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;

  template <int N>
  __device__ void add(const float (&x)[N]) {
    float m = max;
#pragma unroll
    for (int k = 0; k < N; ++k) m = fmaxf(m, x[k]);
    if (m == -INFINITY) return;  // nothing but -inf so far adds nothing
    if (m != max) sum *= exp_of(max - m);
#pragma unroll
    for (int k = 0; k < N; ++k) sum += exp_of(x[k] - m);
    max = m;
  }
};

// Products rounded apart (no fused multiply-add), so merging a with b gives
// exactly what merging b with a gives.
__device__ inline MaxSum merge(const MaxSum& a, const MaxSum& b) {
  MaxSum out;
  out.max = fmaxf(a.max, b.max);
  if (out.max == -INFINITY) return out;
  out.sum = __fadd_rn(__fmul_rn(a.sum, exp_of(a.max - out.max)),
                      __fmul_rn(b.sum, exp_of(b.max - out.max)));
  return out;
}

// The online max / sum-exp of one row, reduced over the block; the total is
// valid in thread 0 only. Every lse, fused or not, is made here in one fixed
// order, so the separate and the fused kernels agree bit for bit.
template <int U = kUnroll>
__device__ MaxSum block_max_sum(const __nv_bfloat16* __restrict__ x, int64_t vocab, float* warp_max,
                                float* warp_sum) {
  const RowSplit split(x, vocab, true);
  MaxSum state;
  for (int64_t q = threadIdx.x; q < split.scalars; q += kRowThreads) {
    const float v[1] = {__bfloat162float(x[split.scalar_at(q)])};
    state.add(v);
  }
  const uint4* body = reinterpret_cast<const uint4*>(x + split.head);
  for (int64_t base = threadIdx.x; base < split.vectors; base += U * kRowThreads) {
    uint4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * kRowThreads;
      if (i < split.vectors) raw[u] = body[i];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * kRowThreads < split.vectors) {
        float v[8];
        widen8(raw[u], v);
        state.add(v);
      }
    }
  }

#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum other;
    other.max = __shfl_xor_sync(0xffffffffu, state.max, offset);
    other.sum = __shfl_xor_sync(0xffffffffu, state.sum, offset);
    state = merge(state, other);
  }
  if (threadIdx.x % 32 == 0) {
    warp_max[threadIdx.x / 32] = state.max;
    warp_sum[threadIdx.x / 32] = state.sum;
  }
  __syncthreads();
  MaxSum total;
  if (threadIdx.x == 0) {
    total = {warp_max[0], warp_sum[0]};
    for (int w = 1; w < kRowThreads / 32; ++w) total = merge(total, {warp_max[w], warp_sum[w]});
  }
  return total;
}

// A row's loss, times its weight where there are weights: 0 for a row that
// does not count (its weight unread), NaN for a target past the vocabulary.
__device__ inline float row_loss_of(const __nv_bfloat16* x, int32_t target, int64_t vocab, float row_lse,
                                    const float* weights, int64_t row) {
  if (target >= vocab) return NAN;
  if (target < 0) return 0.0f;
  const float loss = row_lse - __bfloat162float(x[target]);
  return weights ? __fmul_rn(weights[row], loss) : loss;
}

// One block per row: lse[row], and the row's loss into row_loss.
__global__ void __launch_bounds__(kRowThreads)
    row_lse_kernel(const __nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                   float* __restrict__ lse, float* __restrict__ row_loss, int64_t vocab,
                   const float* __restrict__ weights) {
  __shared__ float warp_max[kRowThreads / 32], warp_sum[kRowThreads / 32];
  const int64_t row = blockIdx.x;
  const __nv_bfloat16* x = logits + row * vocab;
  const MaxSum total = block_max_sum(x, vocab, warp_max, warp_sum);
  if (threadIdx.x != 0) return;
  const float row_lse = total.max + logf(total.sum);
  lse[row] = row_lse;
  row_loss[row] = row_loss_of(x, targets[row], vocab, row_lse, weights, row);
}

// The mean over counted rows (weighted: the sum of the weighted rows), in
// one block: each thread sums its rows in order in double, then the
// threads' sums are added in a fixed tree.
__global__ void __launch_bounds__(kSumThreads)
    mean_loss_kernel(const float* __restrict__ row_loss, const int32_t* __restrict__ targets,
                     float* __restrict__ loss, int64_t rows, bool weighted) {
  __shared__ double warp_sum[kSumThreads / 32];
  __shared__ long long warp_count[kSumThreads / 32];
  double sum = 0;
  long long counted = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kSumThreads) {
    sum += static_cast<double>(row_loss[r]);
    counted += targets[r] >= 0 ? 1 : 0;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    counted += __shfl_xor_sync(0xffffffffu, counted, offset);
  }
  if (threadIdx.x % 32 == 0) {
    warp_sum[threadIdx.x / 32] = sum;
    warp_count[threadIdx.x / 32] = counted;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0;
  long long total_count = 0;
  for (int w = 0; w < kSumThreads / 32; ++w) {
    total += warp_sum[w];
    total_count += warp_count[w];
  }
  if (weighted) {
    loss[0] = static_cast<float>(total);
    return;
  }
  loss[0] = total_count > 0 ? static_cast<float>(total / static_cast<double>(total_count)) : 0.0f;
}

__device__ int block_count(int v, int* scratch) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  int total = 0;
  for (int w = 0; w < kRowThreads / 32; ++w) total += scratch[w];
  return total;
}

// The rows that count, in every thread of the block: a few kilobytes of
// targets, from L2.
__device__ int counted_rows(const int32_t* __restrict__ targets, int64_t rows, int* scratch) {
  int mine = 0;
#pragma unroll 8
  for (int64_t r = threadIdx.x; r < rows; r += kRowThreads) mine += targets[r] >= 0 ? 1 : 0;
  return block_count(mine, scratch);
}

// dloss / counted, or dloss times the row's weight (unread for a row that
// does not count).
__device__ inline float gradient_scale(int32_t target, int64_t vocab, int counted, float dloss,
                                       const float* weights, int64_t row) {
  if (target >= vocab) return NAN;
  if (weights) return target >= 0 ? static_cast<float>(static_cast<double>(dloss) * weights[row]) : 0.0f;
  return counted > 0 ? static_cast<float>(static_cast<double>(dloss) / counted) : 0.0f;
}

// One row of dlogits = scale * (softmax - onehot), by the whole block. A row
// that does not count gets zeros: scale 0 on finite values would still let an
// inf or NaN logit through, so it is not read at all. With kLastRead the
// logits are read for the last time and dlogits is not read again soon, so
// both go through the cache marked evict-first (what the fused kernel wants:
// the L2 keeps the rows other blocks are between their two passes over).
template <bool kLastRead, int U = kUnroll>
__device__ void write_row_gradient(const __nv_bfloat16* __restrict__ x, __nv_bfloat16* __restrict__ dx,
                                   int64_t vocab, int64_t target, float scale, float row_lse,
                                   bool use_vectors) {
  const bool ignored = target < 0;
  auto grad = [&](int64_t j, float v) {
    const float p = exp_of(v - row_lse);
    return ignored ? 0.0f : scale * (j == target ? p - 1.0f : p);
  };

  const RowSplit split(x, vocab, use_vectors);
  for (int64_t q = threadIdx.x; q < split.scalars; q += kRowThreads) {
    const int64_t j = split.scalar_at(q);
    dx[j] = __float2bfloat16_rn(grad(j, ignored ? 0.0f : __bfloat162float(x[j])));
  }
  const uint4* body = reinterpret_cast<const uint4*>(x + split.head);
  uint4* out = reinterpret_cast<uint4*>(dx + split.head);
  for (int64_t base = threadIdx.x; base < split.vectors; base += U * kRowThreads) {
    uint4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * kRowThreads;
      raw[u] = make_uint4(0, 0, 0, 0);
      if (!ignored && i < split.vectors) raw[u] = kLastRead ? __ldcs(body + i) : body[i];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * kRowThreads;
      if (i < split.vectors) {
        float v[8];
        widen8(raw[u], v);
        uint4 packed;
        auto* h = reinterpret_cast<__nv_bfloat162*>(&packed);
        const int64_t j = split.head + i * 8;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          h[k] =
              __floats2bfloat162_rn(grad(j + 2 * k, v[2 * k]), grad(j + 2 * k + 1, v[2 * k + 1]));
        }
        if (kLastRead) {
          __stcs(out + i, packed);
        } else {
          out[i] = packed;
        }
      }
    }
  }
}

// One block per row: dlogits = dloss / counted * (softmax - onehot). Every
// block counts the rows that count itself, since backward is given no
// workspace to share the count through.
__global__ void __launch_bounds__(kRowThreads)
    row_grad_kernel(const __nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                    const float* __restrict__ lse, const float* __restrict__ dloss,
                    __nv_bfloat16* __restrict__ dlogits, int64_t rows, int64_t vocab,
                    bool use_vectors, const float* __restrict__ weights) {
  __shared__ int scratch[kRowThreads / 32];
  const int counted = weights ? 0 : counted_rows(targets, rows, scratch);
  const int64_t row = blockIdx.x;
  const int32_t target = targets[row];
  write_row_gradient<false>(logits + row * vocab, dlogits + row * vocab, vocab, target,
                            gradient_scale(target, vocab, counted, dloss[0], weights, row), lse[row], use_vectors);
}

// Forward and backward fused: each block takes rows in turn (counting the
// counted rows once, not once per row), makes a row's lse in one pass and
// its gradient in a second while the row is still in L2.
__global__ void __launch_bounds__(kRowThreads)
    row_lse_grad_kernel(const __nv_bfloat16* __restrict__ logits, const int32_t* __restrict__ targets,
                        float dloss, float* __restrict__ lse, float* __restrict__ row_loss,
                        __nv_bfloat16* __restrict__ dlogits, int64_t rows, int64_t vocab, bool use_vectors,
                        const float* __restrict__ weights) {
  __shared__ float warp_max[kRowThreads / 32], warp_sum[kRowThreads / 32];
  __shared__ int scratch[kRowThreads / 32];
  __shared__ float shared_lse;
  const int counted = weights ? 0 : counted_rows(targets, rows, scratch);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const __nv_bfloat16* x = logits + row * vocab;
    const int32_t target = targets[row];
    const MaxSum total = block_max_sum<kFusedUnroll>(x, vocab, warp_max, warp_sum);
    if (threadIdx.x == 0) {
      const float row_lse = total.max + logf(total.sum);
      lse[row] = row_lse;
      row_loss[row] = row_loss_of(x, target, vocab, row_lse, weights, row);
      shared_lse = row_lse;
    }
    // Also orders this row's reads of shared_lse before the next row's write
    // (which comes after block_max_sum's barrier).
    __syncthreads();
    write_row_gradient<true, kFusedUnroll>(x, dlogits + row * vocab, vocab, target,
                                           gradient_scale(target, vocab, counted, dloss, weights, row), shared_lse,
                                           use_vectors);
  }
}

// Blocks for the fused kernel: each holds one row between its two passes, so
// the grid holds no more rows than half the L2 takes (the rest is for the
// gradient being written and whatever else is there), but at least one block
// per SM, whose loads are enough in flight to keep device memory busy, and
// no more than fit on the GPU at once.
unsigned fused_blocks(int64_t rows, int64_t vocab) {
  int device = 0, sms = 0, l2_bytes = 0, per_sm = 0;
  SPW_CUDA(cudaGetDevice(&device));
  SPW_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  SPW_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  SPW_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, row_lse_grad_kernel, kRowThreads, 0));
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(__nv_bfloat16));
  const int64_t by_cache = std::max<int64_t>(sms, l2_bytes / 2 / row_bytes);
  const int64_t resident = static_cast<int64_t>(sms) * std::max(per_sm, 1);
  return static_cast<unsigned>(std::min({rows, by_cache, resident}));
}

// Rows of logits and dlogits start equally far from a 16-byte boundary only
// when the two buffers do.
bool vectors_line_up(const bf16* logits, const bf16* dlogits) {
  return (reinterpret_cast<uintptr_t>(logits) - reinterpret_cast<uintptr_t>(dlogits)) % 16 == 0;
}

void check_shape(int64_t rows, int64_t vocab) {
  SPW_CHECK(vocab > 0, "cross_entropy", "vocabulary is empty");
  SPW_CHECK(rows >= 0 && rows < (int64_t(1) << 31), "cross_entropy",
            "the GPU kernels take 0 to 2^31 - 1 rows, got ", rows);
}

}  // namespace

uint64_t cross_entropy_forward_workspace_bytes(int64_t rows) {
  return static_cast<uint64_t>(rows) * sizeof(float);
}

void cross_entropy_forward_cuda(const bf16* logits, const int32_t* targets, float* lse, float* loss,
                                int64_t rows, int64_t vocab, void* workspace, cudaStream_t stream,
                                const float* weights) {
  check_shape(rows, vocab);
  auto* row_loss = static_cast<float*>(workspace);
  if (rows > 0) {
    SPW_CHECK(workspace != nullptr, "cross_entropy", "forward needs a workspace of ",
              cross_entropy_forward_workspace_bytes(rows), " bytes");
    row_lse_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        reinterpret_cast<const __nv_bfloat16*>(logits), targets, lse, row_loss, vocab, weights);
    SPW_CUDA(cudaGetLastError());
  }
  mean_loss_kernel<<<1, kSumThreads, 0, stream>>>(row_loss, targets, loss, rows, weights != nullptr);
  SPW_CUDA(cudaGetLastError());
}

void cross_entropy_backward_cuda(const bf16* logits, const int32_t* targets, const float* lse,
                                 const float* dloss, bf16* dlogits, int64_t rows, int64_t vocab,
                                 cudaStream_t stream, const float* weights) {
  check_shape(rows, vocab);
  if (rows == 0) return;
  row_grad_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      reinterpret_cast<const __nv_bfloat16*>(logits), targets, lse, dloss,
      reinterpret_cast<__nv_bfloat16*>(dlogits), rows, vocab, vectors_line_up(logits, dlogits), weights);
  SPW_CUDA(cudaGetLastError());
}

uint64_t cross_entropy_forward_backward_workspace_bytes(int64_t rows) {
  return cross_entropy_forward_workspace_bytes(rows);
}

void cross_entropy_forward_backward_cuda(const bf16* logits, const int32_t* targets, float dloss, float* lse,
                                         float* loss, bf16* dlogits, int64_t rows, int64_t vocab, void* workspace,
                                         cudaStream_t stream, int blocks, const float* weights) {
  check_shape(rows, vocab);
  auto* row_loss = static_cast<float*>(workspace);
  if (rows > 0) {
    SPW_CHECK(workspace != nullptr, "cross_entropy", "forward_backward needs a workspace of ",
              cross_entropy_forward_backward_workspace_bytes(rows), " bytes");
    const unsigned grid = blocks > 0 ? static_cast<unsigned>(std::min<int64_t>(blocks, rows)) : fused_blocks(rows, vocab);
    row_lse_grad_kernel<<<grid, kRowThreads, 0, stream>>>(
        reinterpret_cast<const __nv_bfloat16*>(logits), targets, dloss, lse, row_loss,
        reinterpret_cast<__nv_bfloat16*>(dlogits), rows, vocab, vectors_line_up(logits, dlogits), weights);
    SPW_CUDA(cudaGetLastError());
  }
  mean_loss_kernel<<<1, kSumThreads, 0, stream>>>(row_loss, targets, loss, rows, weights != nullptr);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
