#include "ops/master_split.h"

namespace spillway::ops {

void split_master(const float* master, bf16* working, uint16_t* remainder, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const MasterHalves h = split_master_bits(float_bits(master[i]));
    working[i].bits = h.working;
    remainder[i] = h.remainder;
  }
}

void join_master(const bf16* working, const uint16_t* remainder, float* master, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) master[i] = bits_float(join_master_bits(working[i].bits, remainder[i]));
}

}  // namespace spillway::ops
