#include "device/cuda/cuda_check.h"
#include "ops/linear_cross_entropy.h"

namespace spillway::ops {

namespace {

constexpr int kThreads = 1024;

// One block: each thread counts a strided share, the shares summed in
// thread order by thread 0, so the count (an integer) and the weight are
// the CPU's.
__global__ void mean_loss_weights_kernel(const int32_t* targets, int64_t rows, float* weights) {
  __shared__ long long counts[kThreads];
  __shared__ float weight;
  long long mine = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) mine += targets[r] >= 0;
  counts[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long counted = 0;
    for (int t = 0; t < kThreads; ++t) counted += counts[t];
    weight = counted > 0 ? static_cast<float>(1.0 / static_cast<double>(counted)) : 0.0f;
  }
  __syncthreads();
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) weights[r] = targets[r] >= 0 ? weight : 0.0f;
}

__global__ void sum_in_order_kernel(const float* parts, int64_t n, float* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += parts[i];
  out[0] = static_cast<float>(s);
}

}  // namespace

void mean_loss_weights_cuda(const int32_t* targets, int64_t rows, float* weights, cudaStream_t stream) {
  mean_loss_weights_kernel<<<1, kThreads, 0, stream>>>(targets, rows, weights);
  SPW_CUDA(cudaGetLastError());
}

void sum_in_order_cuda(const float* parts, int64_t n, float* out, cudaStream_t stream) {
  sum_in_order_kernel<<<1, 1, 0, stream>>>(parts, n, out);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops
