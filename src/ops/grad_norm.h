// The global gradient norm for clipping, and the scaling that clips.
//
// Contract (GPU): sum_of_squares_cuda writes sum_i x[i]^2 over n floats into
// *out (device, one double), in a fixed order (a fixed grid of partial sums,
// then one ordered sum of the partials), so the norm, and every clipped step
// after it, is the same run to run. `accumulate` true adds to *out instead
// of overwriting it, so the squares of many tensors sum into one number.
// sum_of_squares_many_cuda writes, in two launches for the whole list, the
// same double, bit for bit, as sum_of_squares_cuda called on each tensor of
// a SumOfSquaresList in order with accumulate = (i > 0): the engines that sum
// every gradient in one call and those that take one part per tensor report
// one norm. An empty list gives 0.
// scale_cuda multiplies n floats by s in place.
// The engines do not scale gradients to clip: they fold the clipping factor
// (train/optimizer.h's accumulated_grad_scale) into AdamW's grad_scale.
#pragma once

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

namespace spillway::ops {

// Device workspace sum_of_squares_cuda needs (its partial sums).
uint64_t sum_of_squares_workspace_bytes();
void sum_of_squares_cuda(const float* x, int64_t n, double* out, bool accumulate, void* workspace,
                         cudaStream_t stream);

struct SquaresTensor {
  const float* data = nullptr;
  int64_t n = 0;
};

// A fixed list of tensors, described once in device memory: their pointers
// and lengths, which launched block sums which part of which tensor, and the
// workspace for the partial and per-tensor sums. The gradients an engine
// sums never move, so it makes the list once and sums it every step; the
// tensors' contents may change between calls. The workspace is the list's,
// so one list is summed on one stream at a time.
class SumOfSquaresList {
 public:
  SumOfSquaresList() = default;
  // The device memory a list of these tensors needs.
  static uint64_t device_bytes(std::span<const SquaresTensor> tensors);
  // Writes the list into `device` (device_bytes(tensors) bytes, 8-byte
  // aligned, owned by the caller and kept while the list is used) on
  // `stream`, and waits for it.
  SumOfSquaresList(std::span<const SquaresTensor> tensors, void* device, cudaStream_t stream);

  int64_t size() const { return tensors_; }

 private:
  friend void sum_of_squares_many_cuda(const SumOfSquaresList& list, double* out, cudaStream_t stream);
  void* device_ = nullptr;
  int64_t tensors_ = 0;
  int64_t blocks_ = 0;  // blocks of the partial-sum launch, over all tensors
};

void sum_of_squares_many_cuda(const SumOfSquaresList& list, double* out, cudaStream_t stream);
void scale_cuda(float* x, int64_t n, float s, cudaStream_t stream);

}  // namespace spillway::ops
#endif
