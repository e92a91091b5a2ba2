// The global norm of an optimizer step's gradient sums, for clipping: the
// same double however the sums lie (ops/grad_norm.h's contract). All on the
// device: one call sums every tensor, in tensor order. Some at home: one
// part per tensor, taken on the device where the sum is final (just before
// the last micro-batch sends it home, or at the end for the sums that stay),
// added in tensor order. With sharded state, the part of every tensor in
// this rank's share (the ranks' parts summed by the caller).
#pragma once

#include <vector>

#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "ops/grad_norm.h"
#include "train/cuda/training_state.h"

namespace spillway::train {

class CudaGradNorm {
 public:
  // `parts`: the tensors each graph parameter stacks, as the state's.
  CudaGradNorm(const CudaTrainingState& state, std::vector<std::vector<int>> parts, Device& device);
  ~CudaGradNorm();
  CudaGradNorm(const CudaGradNorm&) = delete;
  CudaGradNorm& operator=(const CudaGradNorm&) = delete;

  // Whether the last micro-batch must hand over the sums going home.
  bool takes_parts_before_store() const { return !all_on_device_; }
  // A new optimizer step starts.
  void start_step() { parts_taken_ = 0; }
  // The final sum of graph parameter `parameter`, about to go home, on the
  // stream its last adds ran on.
  void take_before_store(int parameter, const void* sum, Stream& compute);
  // The sum of squares over every gradient, after the step's micro-batches.
  double sum_of_squares();

 private:
  const CudaTrainingState& state_;
  std::vector<std::vector<int>> parts_;
  Device& device_;
  bool all_on_device_ = true;
  void* workspace_ = nullptr;
  double* out_ = nullptr;     // by tensor: its part; or the one sum
  ops::SumOfSquaresList all_;  // every tensor, when all sums are on the device
  int parts_taken_ = 0;
  // What comes back: pinned, since a pageable buffer may share a page with
  // the caller's arrays pinned in place, which CUDA refuses to copy into.
  PinnedBuffer read_back_;
};

}  // namespace spillway::train
