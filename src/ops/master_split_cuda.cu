#include <cstdint>

#include "base/status.h"
#include "ops/cuda_elementwise.cuh"
#include "ops/master_split.h"

namespace spillway::ops {

namespace {

using elementwise::launch_elementwise;
using elementwise::vector_head;

struct SplitMaster {
  const float* master;
  uint16_t* working;
  uint16_t* remainder;  // null: the working copy alone

  __device__ void vector(int64_t i) const {
    const MasterHalves4 h = split_master4(*reinterpret_cast<const float4*>(master + i));
    *reinterpret_cast<uint2*>(working + i) = h.working;
    if (remainder != nullptr) *reinterpret_cast<uint2*>(remainder + i) = h.remainder;
  }
  __device__ void scalar(int64_t i) const {
    const MasterHalves h = split_master_bits(__float_as_uint(master[i]));
    working[i] = h.working;
    if (remainder != nullptr) remainder[i] = h.remainder;
  }
};

}  // namespace

void split_master_cuda(const float* master, bf16* working, uint16_t* remainder, int64_t n, cudaStream_t stream) {
  const SplitMaster op{master, reinterpret_cast<uint16_t*>(working), remainder};
  launch_elementwise<4>("split_master", op, n, vector_head({{master, 4}, {working, 2}, {remainder, 2}}, 4), stream);
}

}  // namespace spillway::ops
