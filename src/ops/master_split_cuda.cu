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
    const float4 x = *reinterpret_cast<const float4*>(master + i);
    const MasterHalves h[4] = {split_master_bits(__float_as_uint(x.x)), split_master_bits(__float_as_uint(x.y)),
                               split_master_bits(__float_as_uint(x.z)), split_master_bits(__float_as_uint(x.w))};
    *reinterpret_cast<uint2*>(working + i) = make_uint2(h[0].working | (uint32_t(h[1].working) << 16),
                                                        h[2].working | (uint32_t(h[3].working) << 16));
    if (remainder != nullptr) {
      *reinterpret_cast<uint2*>(remainder + i) = make_uint2(h[0].remainder | (uint32_t(h[1].remainder) << 16),
                                                            h[2].remainder | (uint32_t(h[3].remainder) << 16));
    }
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
