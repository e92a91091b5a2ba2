#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/grad_norm.h"

namespace spillway::ops {

namespace {

constexpr int kBlocks = 1024;
constexpr int kThreads = 256;

// The three steps of one tensor's sum, shared by the one-tensor and the
// many-tensor kernels so that both do the same double operations on the same
// operands in the same order: that, and nothing weaker, is what makes
// sum_of_squares_many_cuda equal the sequential calls bit for bit.

// Thread threadIdx.x of block `block` of a tensor's kBlocks x kThreads grid:
// the elements i with i % (kBlocks * kThreads) in its slice, in order. The
// grid size is fixed, so the order never changes.
__device__ __forceinline__ double thread_squares(const float* x, int64_t n, int64_t block) {
  double s = 0;
  for (int64_t i = block * kThreads + threadIdx.x; i < n; i += static_cast<int64_t>(kBlocks) * kThreads) {
    double v = x[i];
    s += v * v;
  }
  return s;
}

// Thread threadIdx.x's share of a tensor's kBlocks partials. Blocks from
// `active` on were not launched; their partials are the literal +0.0 that
// such a block would have written (every thread of a block that starts at or
// past n keeps its initial s = +0.0, and +0.0 + +0.0 is +0.0 all up its
// tree), so the additions below are the very ones the full grid's sum makes.
__device__ __forceinline__ double thread_partials(const double* partials, int64_t active) {
  double s = 0;
  for (int i = threadIdx.x; i < kBlocks; i += kThreads) s += i < active ? partials[i] : 0.0;
  return s;
}

// The block's kThreads values summed in a fixed tree.
__device__ __forceinline__ double block_sum(double s, double* sums) {
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  return sums[0];
}

__global__ void partial_squares(const float* x, int64_t n, double* partials) {
  __shared__ double sums[kThreads];
  const double s = block_sum(thread_squares(x, n, blockIdx.x), sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials(const double* partials, double* out, bool accumulate) {
  __shared__ double sums[kThreads];
  const double s = block_sum(thread_partials(partials, kBlocks), sums);
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

// A SumOfSquaresList in device memory, laid out by layout().
struct ListView {
  const float* const* data;  // [tensors]
  const int64_t* n;          // [tensors]
  // [tensors + 1]: tensor t's launched blocks are first_block[t] up to
  // first_block[t + 1], its partials at the same indices.
  const int64_t* first_block;
  const int32_t* block_tensor;  // [blocks]: the tensor a launched block sums
  double* partials;             // [blocks]
  double* tensor_sums;          // [tensors]
  unsigned* done;               // blocks of sum_tensors done; 0 between calls
};

// Byte offsets of a list's arrays in its device memory, each 8-aligned.
struct Layout {
  uint64_t data, n, first_block, partials, tensor_sums, block_tensor, done, bytes;
};

Layout layout(int64_t tensors, int64_t blocks) {
  Layout o;
  uint64_t at = 0;
  auto take = [&at](int64_t bytes) {
    const uint64_t start = at;
    at += (static_cast<uint64_t>(bytes) + 7) / 8 * 8;
    return start;
  };
  o.data = take(tensors * 8);
  o.n = take(tensors * 8);
  o.first_block = take((tensors + 1) * 8);
  o.partials = take(blocks * 8);
  o.tensor_sums = take(tensors * 8);
  o.block_tensor = take(blocks * 4);
  o.done = take(4);
  o.bytes = at;
  return o;
}

ListView list_view(void* memory, int64_t tensors, int64_t blocks) {
  char* p = static_cast<char*>(memory);
  const Layout o = layout(tensors, blocks);
  ListView v;
  v.data = reinterpret_cast<const float* const*>(p + o.data);
  v.n = reinterpret_cast<const int64_t*>(p + o.n);
  v.first_block = reinterpret_cast<const int64_t*>(p + o.first_block);
  v.block_tensor = reinterpret_cast<const int32_t*>(p + o.block_tensor);
  v.partials = reinterpret_cast<double*>(p + o.partials);
  v.tensor_sums = reinterpret_cast<double*>(p + o.tensor_sums);
  v.done = reinterpret_cast<unsigned*>(p + o.done);
  return v;
}

// A tensor of n elements needs only the blocks that start before n: the
// others' partials are known to be +0.0 (thread_partials).
int64_t active_blocks(int64_t n) { return std::min<int64_t>(kBlocks, (n + kThreads - 1) / kThreads); }

int64_t total_blocks(std::span<const SquaresTensor> tensors) {
  int64_t blocks = 0;
  for (const SquaresTensor& t : tensors) {
    SPW_CHECK(t.n >= 0, "sum of squares", "a tensor of ", t.n, " elements");
    blocks += active_blocks(t.n);
  }
  return blocks;
}

// Every launched block of every tensor at once: a tiny tensor launches the
// few blocks that see its elements, not kBlocks.
__global__ void partial_squares_many(ListView l) {
  __shared__ double sums[kThreads];
  const int32_t t = l.block_tensor[blockIdx.x];
  const double s = block_sum(thread_squares(l.data[t], l.n[t], blockIdx.x - l.first_block[t]), sums);
  if (threadIdx.x == 0) l.partials[blockIdx.x] = s;
}

// Block t sums tensor t's partials as sum_partials does; the last block to
// finish then adds the tensors' sums in tensor order, starting from the
// first (not from 0), as the sequential calls' out = s0; out = out + s1; ...
// do. Its threads gather the sums kThreads at a time so that the one thread
// that must add them in order waits on shared memory, not on a global load
// per tensor.
__global__ void sum_tensors(ListView l, double* out) {
  __shared__ double sums[kThreads];
  __shared__ bool last;
  const int64_t t = blockIdx.x;
  const int64_t first = l.first_block[t];
  const double s = block_sum(thread_partials(l.partials + first, l.first_block[t + 1] - first), sums);
  if (threadIdx.x == 0) {
    l.tensor_sums[t] = s;
    // The sum must be visible to every block before the count says so
    // (the CUDA programming guide's last-block reduction).
    __threadfence();
    last = atomicAdd(l.done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const volatile double* tensor_sums = l.tensor_sums;
  double total = 0;
  for (int64_t base = 0; base < gridDim.x; base += kThreads) {
    __syncthreads();
    if (base + threadIdx.x < gridDim.x) sums[threadIdx.x] = tensor_sums[base + threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int64_t j = 0; j < kThreads && base + j < gridDim.x; ++j) {
        total = base + j == 0 ? sums[0] : total + sums[j];
      }
    }
  }
  if (threadIdx.x == 0) {
    *out = total;
    *l.done = 0;
  }
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

}  // namespace

uint64_t sum_of_squares_workspace_bytes() { return kBlocks * sizeof(double); }

void sum_of_squares_cuda(const float* x, int64_t n, double* out, bool accumulate, void* workspace,
                         cudaStream_t stream) {
  auto* partials = static_cast<double*>(workspace);
  partial_squares<<<kBlocks, kThreads, 0, stream>>>(x, n, partials);
  SPW_CUDA(cudaGetLastError());
  sum_partials<<<1, kThreads, 0, stream>>>(partials, out, accumulate);
  SPW_CUDA(cudaGetLastError());
}

uint64_t SumOfSquaresList::device_bytes(std::span<const SquaresTensor> tensors) {
  return layout(static_cast<int64_t>(tensors.size()), total_blocks(tensors)).bytes;
}

SumOfSquaresList::SumOfSquaresList(std::span<const SquaresTensor> tensors, void* device, cudaStream_t stream)
    : device_(device), tensors_(static_cast<int64_t>(tensors.size())), blocks_(total_blocks(tensors)) {
  SPW_CHECK(reinterpret_cast<uintptr_t>(device) % 8 == 0, "sum of squares", "list memory is not 8-byte aligned");
  // Grid sizes and block_tensor entries are 32-bit.
  SPW_CHECK(tensors_ <= INT32_MAX && blocks_ <= INT32_MAX, "sum of squares", tensors_, " tensors in ", blocks_,
            " blocks are too many for one launch");
  // The whole list, its workspace zeroed (done among it), in one copy.
  std::vector<char> host(layout(tensors_, blocks_).bytes, 0);
  const ListView at_host = list_view(host.data(), tensors_, blocks_);
  auto* data = const_cast<const float**>(at_host.data);
  auto* n = const_cast<int64_t*>(at_host.n);
  auto* first_block = const_cast<int64_t*>(at_host.first_block);
  auto* block_tensor = const_cast<int32_t*>(at_host.block_tensor);
  first_block[0] = 0;
  for (int64_t t = 0; t < tensors_; ++t) {
    data[t] = tensors[static_cast<size_t>(t)].data;
    n[t] = tensors[static_cast<size_t>(t)].n;
    first_block[t + 1] = first_block[t] + active_blocks(n[t]);
    std::fill(block_tensor + first_block[t], block_tensor + first_block[t + 1], static_cast<int32_t>(t));
  }
  SPW_CUDA(cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyHostToDevice, stream));
  SPW_CUDA(cudaStreamSynchronize(stream));
}

void sum_of_squares_many_cuda(const SumOfSquaresList& list, double* out, cudaStream_t stream) {
  if (list.tensors_ == 0) {
    SPW_CUDA(cudaMemsetAsync(out, 0, sizeof(double), stream));  // +0.0
    return;
  }
  const ListView l = list_view(list.device_, list.tensors_, list.blocks_);
  // A list of empty tensors launches no partial blocks; their sums are +0.0.
  if (list.blocks_ > 0) {
    partial_squares_many<<<static_cast<unsigned>(list.blocks_), kThreads, 0, stream>>>(l);
    SPW_CUDA(cudaGetLastError());
  }
  sum_tensors<<<static_cast<unsigned>(list.tensors_), kThreads, 0, stream>>>(l, out);
  SPW_CUDA(cudaGetLastError());
}

void scale_cuda(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<2048, 256, 0, stream>>>(x, n, s);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
