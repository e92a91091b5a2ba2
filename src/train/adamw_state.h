// What the GPU engine keeps for AdamW beside each bf16 working weight and
// its fp32 gradient sum, and what streaming it through the GPU takes: the
// numbers the planner is told (train/step_plan.h) and the engine allocates
// by (train/cuda/), in one place.
#pragma once

#include <algorithm>
#include <cstdint>

namespace spillway::train {

// The fp32 master's other 16 bits beside the working copy (ops/master_split.h).
inline constexpr uint64_t kMasterRestBytes = 2;

// m and v per element: fp32, or bf16 with --bf16-moments.
inline constexpr uint64_t adamw_moment_bytes(bool bf16_moments) { return bf16_moments ? 4 : 8; }

// State at home goes through the GPU in chunks, three in flight (one
// loading, one updating, one going home).
struct OptimizerStaging {
  static constexpr int kSlots = 3;
  static constexpr int64_t kMaxChunk = 16ll << 20;  // elements
  // A slot holds a chunk's master rest (2 bytes), m, v and gradient (4
  // each) and working copy (2).
  static constexpr uint64_t kBytesPerElement = 16;

  int64_t chunk = 1;  // elements: the largest tensor, at most kMaxChunk

  explicit OptimizerStaging(int64_t largest_tensor) : chunk(std::clamp<int64_t>(largest_tensor, 1, kMaxChunk)) {}
  uint64_t device_bytes() const { return kSlots * static_cast<uint64_t>(chunk) * kBytesPerElement; }
};

}  // namespace spillway::train
