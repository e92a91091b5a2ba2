#include <cuda_runtime.h>

#include "device/cuda/cuda_check.h"
#include "ops/rows.h"

namespace spillway::ops {

void copy_rows_cuda(const void* src, void* dst, const RowCopy& c, cudaStream_t stream) {
  if (c.count == 0 || c.batch == 0) return;
  const auto width = static_cast<size_t>(c.count * c.row_bytes);
  SPW_CUDA(cudaMemcpy2DAsync(static_cast<char*>(dst) + c.dst_first * c.row_bytes,
                             static_cast<size_t>(c.dst_rows * c.row_bytes),
                             static_cast<const char*>(src) + c.src_first * c.row_bytes,
                             static_cast<size_t>(c.src_rows * c.row_bytes), width, static_cast<size_t>(c.batch),
                             cudaMemcpyDeviceToDevice, stream));
}

}  // namespace spillway::ops
