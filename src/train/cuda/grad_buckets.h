// The gradient sums' buckets for summing them over the ranks while the
// last micro-batch's backward pass goes on: runs of the state's one
// layout (the parameters' order), each at least kBucketElements unless it
// is the last, filed by the node whose issue makes its last sum final.
// Every element of the layout lies in one bucket, gaps included (zero on
// every rank).
#pragma once

#include <cstdint>
#include <vector>

#include "train/cuda/training_state.h"
#include "train/step_plan.h"

namespace spillway::train {

struct GradBucket {
  uint64_t first, count;  // elements of the layout
};

inline constexpr uint64_t kBucketElements = 32ull << 20;

// [node] -> the buckets whose sums are final once that node is issued.
std::vector<std::vector<GradBucket>> grad_buckets_by_node(const LlamaStep& step, const CudaTrainingState& state);

}  // namespace spillway::train
