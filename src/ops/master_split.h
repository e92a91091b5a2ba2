// fp32 master weights held as two 16-bit halves: the bf16 working copy the
// forward pass reads, and a remainder. The GPU engines keep the master this
// way, so it costs 2 bytes a parameter beside the working copy instead of 4,
// and AdamW moves 2 bytes a parameter less (it writes the working copy
// anyway).
//
// Contract, on the 32-bit pattern of a master x:
//   working   = x rounded to bf16, to nearest with ties away from zero
//   remainder = x - working as a signed 16-bit count of fp32 units in the
//               last place (the low half of the pattern, once the rounding
//               carry is taken back)
//   join(working, remainder) = x, every bit, for every x that is not a NaN.
// Ties go away from zero, not to even, because only then is the split
// invertible: with ties to even, the master halfway above an even bf16 and
// the one halfway below it both round to it, and 16 bits cannot say which.
// The working copy therefore differs from base/dtype.h's to_bf16 (nearest
// even) only for a master exactly halfway between two bf16 values whose
// truncation is even: 1 in 2^17 of uniformly random patterns.
// A NaN becomes a quiet NaN with its sign (to_bf16's rule) and remainder 0;
// its payload below the top 16 bits is not kept.
#pragma once

#include <cstdint>

#include "base/dtype.h"

#if defined(__CUDACC__)
#define SPW_MASTER_SPLIT_FN __host__ __device__ inline
#else
#define SPW_MASTER_SPLIT_FN inline
#endif

namespace spillway::ops {

struct MasterHalves {
  uint16_t working = 0;    // bf16 bits
  uint16_t remainder = 0;  // int16 bits
};

SPW_MASTER_SPLIT_FN MasterHalves split_master_bits(uint32_t x) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((x >> 16) | 0x0040u), 0};
  // Adding half a bf16 unit carries into the kept half exactly when the
  // dropped half is at least halfway; the pattern's order is the magnitude's,
  // so that is rounding away from zero on a tie, for either sign.
  const uint32_t working = (x + 0x8000u) >> 16;
  return {static_cast<uint16_t>(working), static_cast<uint16_t>(x - (working << 16))};
}

SPW_MASTER_SPLIT_FN uint32_t join_master_bits(uint16_t working, uint16_t remainder) {
  return (static_cast<uint32_t>(working) << 16) +
         static_cast<uint32_t>(static_cast<int32_t>(static_cast<int16_t>(remainder)));
}

#if defined(__CUDACC__)
// Four masters split at once, each half's four 16-bit patterns packed in
// order: what AdamW's vector path stores in 8 bytes a half.
struct MasterHalves4 {
  uint2 working, remainder;
};

__device__ inline MasterHalves4 split_master4(float4 x) {
  const MasterHalves h[4] = {split_master_bits(__float_as_uint(x.x)), split_master_bits(__float_as_uint(x.y)),
                             split_master_bits(__float_as_uint(x.z)), split_master_bits(__float_as_uint(x.w))};
  auto pack = [](uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16); };
  return {make_uint2(pack(h[0].working, h[1].working), pack(h[2].working, h[3].working)),
          make_uint2(pack(h[0].remainder, h[1].remainder), pack(h[2].remainder, h[3].remainder))};
}
#endif

// Host: the split of n masters, and the join back (the engines split at
// start-up and join for sync_to_host; AdamW splits on the GPU).
void split_master(const float* master, bf16* working, uint16_t* remainder, int64_t n);
void join_master(const bf16* working, const uint16_t* remainder, float* master, int64_t n);

}  // namespace spillway::ops
