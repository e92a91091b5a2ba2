// The gradient sums of the ranks holding the same state (data-parallel
// replicas, and context ranks beside them), summed over those ranks each
// way the GPU engine does it: all at once after the step's micro-batches
// (reduce-scattered where the state is sharded), or bucket by bucket on
// the comm stream under the last micro-batch's backward pass
// (train/cuda/grad_buckets.h); and, sharded, each rank's updated share of
// the working copies gathered back to every rank.
#pragma once

#include <memory>
#include <vector>

#include "device/communicator.h"
#include "device/device.h"
#include "train/cuda/cuda_step.h"
#include "train/cuda/grad_buckets.h"
#include "train/cuda/training_state.h"
#include "train/step_plan.h"

namespace spillway::train {

class ReplicaSums {
 public:
  ReplicaSums(CudaTrainingState& state, Device& device, Communicator& replicas);

  // The comm stream waits for the step's last adds into the sums, and
  // compute for their sums: on each rank, or sharded, the part of the sum
  // in the rank's share on that rank alone.
  void sum_now(bool sharded);
  // From now on the training step sums them under its last micro-batch,
  // each bucket as soon as the node that makes its last sum final has been
  // issued (the plain executor only).
  void overlap(CudaStep& train, const LlamaStep& step);
  bool overlapped() const { return overlapped_; }
  // Each rank's updated share of the working copies, to every rank: one
  // all-gather a region.
  void gather_weights();

 private:
  CudaTrainingState& state_;
  Device& device_;
  Communicator& replicas_;
  std::unique_ptr<Event> ready_, summed_;
  // The gradient sums' buckets, by the node whose issue starts them.
  std::vector<std::vector<GradBucket>> buckets_by_node_;
  bool overlapped_ = false;
};

}  // namespace spillway::train
