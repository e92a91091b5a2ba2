#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "ops/fill.h"

namespace spillway::ops {

namespace {
template <typename T>
__global__ void fill_kernel(T* dst, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = value;
  }
}

template <typename T>
void launch(T* dst, int64_t n, T value, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, 4096);
  fill_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(dst, n, value);
  SPW_CUDA(cudaGetLastError());
}
}  // namespace

void fill_cuda(void* dst, DType dtype, int64_t n, double value, cudaStream_t stream) {
  switch (dtype) {
    case DType::f32: launch(static_cast<float*>(dst), n, static_cast<float>(value), stream); break;
    case DType::bf16:
      launch(static_cast<uint16_t*>(dst), n, to_bf16(static_cast<float>(value)).bits, stream);
      break;
    default: throw Error("fill_cuda", "cannot fill a tensor of dtype " + std::string(dtype_name(dtype)));
  }
}

}  // namespace spillway::ops
