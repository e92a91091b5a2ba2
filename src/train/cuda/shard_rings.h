// The whole copies a step with sharded gradient sums or weights needs while
// it runs (train/ring_schedule.h), and the collectives that fill and empty
// them: every micro-batch writes each region's gradients into a slot, which
// is reduce-scattered into this rank's share of the sums as soon as the
// region's last gradient is made (ZeRO-2/3); with sharded weights, each
// region's weights are all-gathered from the shares into a slot just ahead
// of each run of their uses, forward and backward (ZeRO-3). The collectives
// run on the comm stream in the order the step issues them (the same on
// every rank), joined to compute through events, so a replayed CUDA graph
// holds them too.
#pragma once

#include <memory>
#include <vector>

#include "device/communicator.h"
#include "device/device.h"
#include "train/cuda/cuda_step.h"
#include "train/cuda/training_state.h"
#include "train/step_plan.h"
#include "train/ring_schedule.h"

namespace spillway::train {

class CudaShardRings {
 public:
  // `steps`: the steps that will run over the rings (training first, whose
  // gradient sums go through them; evaluation reads the weights only).
  // Takes the slots from the device's memory.
  CudaShardRings(CudaTrainingState& state, const std::vector<const LlamaStep*>& steps, Device& device,
                 Communicator& ranks);
  ~CudaShardRings();
  CudaShardRings(const CudaShardRings&) = delete;
  CudaShardRings& operator=(const CudaShardRings&) = delete;

  // Binds steps[k]'s parameters (where sharded) and gradient sums to their
  // slots, and gives `step` the hooks that move them.
  void attach(size_t k, CudaStep& step);
  uint64_t device_bytes() const { return slot_bytes_; }

 private:
  struct StepRings;
  void gather(const StepRings& s, int episode);
  void reduce(const StepRings& s, int episode, bool first);

  CudaTrainingState& state_;
  Device& device_;
  Communicator& ranks_;
  std::vector<int> region_of_stack_;
  std::vector<std::unique_ptr<StepRings>> steps_;
  std::vector<char*> weight_slots_, grad_slots_;
  uint64_t slot_bytes_ = 0;
  std::unique_ptr<Event> ready_;  // compute has issued what a collective waits for
};

}  // namespace spillway::train
