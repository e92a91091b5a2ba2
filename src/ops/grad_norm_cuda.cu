#include "device/cuda/cuda_check.h"
#include "ops/grad_norm.h"

namespace spillway::ops {

namespace {

constexpr int kBlocks = 1024;
constexpr int kThreads = 256;

// Block b sums the elements i with i % (kBlocks * kThreads) in its slice, in
// a fixed tree: the grid size is fixed, so the order never changes.
__global__ void partial_squares(const float* x, int64_t n, double* partials) {
  __shared__ double sums[kThreads];
  double s = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(kBlocks) * kThreads) {
    double v = x[i];
    s += v * v;
  }
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void sum_partials(const double* partials, double* out, bool accumulate) {
  __shared__ double sums[kThreads];
  double s = 0;
  for (int i = threadIdx.x; i < kBlocks; i += kThreads) s += partials[i];
  sums[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = accumulate ? *out + sums[0] : sums[0];
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

void scale_cuda(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<2048, 256, 0, stream>>>(x, n, s);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
