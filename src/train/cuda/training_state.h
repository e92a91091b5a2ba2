// The GPU engine's training state, placed where the plan says: per
// checkpoint tensor its bf16 working copy, the rest of its fp32 master
// (ops/master_split.h), its fp32 gradient sum and AdamW's moments (fp32, or
// bf16). Each part lives on the device or at home in pinned host memory;
// fp32 moments at home are the caller's own arrays, pinned where they lie
// (device/cuda/pinned_host.h's PinnedArrays).
//
// One layout for every array the engine owns: the tensors a graph parameter
// stacks lie back to back (the parameter is one matrix), each stack 256-byte
// aligned (cuBLASLt's plans assume it), the stacks that take weight decay
// first, so that an update in place covers every parameter in two launches;
// the gaps between stacks are zero in every device array, and an update
// leaves them zero. Gradient sums take the same order, the sums on the
// device in one block and those at home in another.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "model/llama_weights.h"
#include "plan/training_plan.h"
#include "train/optimizer.h"

namespace spillway::train {

class CudaTrainingState {
 public:
  struct Tensor {
    int64_t n = 0;
    bool decay = false;                  // a matrix: AdamW decays it
    float* master = nullptr;             // the caller's fp32 master
    bf16* working = nullptr;             // the master's bf16 rounding, which the step reads
    uint16_t* remainder = nullptr;       // the rest of the master
    float* grad = nullptr;               // the sum of this optimizer step's micro-batch gradients
    bool grad_on_device = false;
    // fp32, or bf16 with bf16 moments; null for fp32 moments at home,
    // which only moment_to_device and moment_from_device reach.
    void *m = nullptr, *v = nullptr;
  };
  // The engine-owned device arrays, all in the one layout, when the
  // optimizer's state is on the device.
  struct DeviceArrays {
    bf16* working = nullptr;
    uint16_t* remainder = nullptr;
    float* grads = nullptr;
    void *m = nullptr, *v = nullptr;
    uint64_t elements = 0;          // every array's length
    uint64_t decayed_elements = 0;  // the weight-decayed stacks come first
  };

  // `parts`: the checkpoint tensors each graph parameter stacks
  // (model::LlamaGraph::parameter_parts), in the plan's parameter order.
  // Reads the caller's masters and moments (made zero when the caller has
  // none and the moments are fp32); both must outlive the state.
  CudaTrainingState(model::LlamaWeights& weights, AdamW& optimizer, const std::vector<std::vector<int>>& parts,
                    const plan::TrainingPlan& plan, bool bf16_moments, Device& device);
  ~CudaTrainingState();
  CudaTrainingState(const CudaTrainingState&) = delete;
  CudaTrainingState& operator=(const CudaTrainingState&) = delete;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const DeviceArrays& device_arrays() const { return arrays_; }
  bool optimizer_on_device() const { return optimizer_on_device_; }
  bool weights_on_device() const { return weights_on_device_; }
  bool bf16_moments() const { return bf16_moments_; }
  // The gradient sums on the device, one block (zeroed before a step whose
  // first micro-batch adds rather than writes).
  float* device_grads() const { return device_grads_; }
  uint64_t device_grad_bytes() const { return device_grad_bytes_; }
  // Elements of the largest tensor: the pieces copies and the streamed
  // optimizer go in are at most this long.
  int64_t largest_tensor() const { return largest_; }

  // AdamW's streamed copies of elements [off, off + n) of tensor `i`'s
  // moment (0: m, 1: v) between its home and `device`, in `stream`'s order.
  enum class Towards { device, home };
  void copy_moment(size_t i, int which, int64_t off, int64_t n, void* device, Towards towards, Stream& stream) const;

  // Makes the caller's masters and moments hold the state.
  void sync_to_host();

 private:
  void upload();

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  Device& device_;
  bool optimizer_on_device_, weights_on_device_, bf16_moments_;
  std::vector<Tensor> tensors_;
  DeviceArrays arrays_;
  float* device_grads_ = nullptr;
  uint64_t device_grad_bytes_ = 0;
  int64_t largest_ = 1;
  std::vector<void*> device_owned_;  // freed at the end
  // At home: working copies (weights streamed), remainders, gradient sums,
  // bf16 moments; and the caller's fp32 moments pinned in place.
  std::vector<std::unique_ptr<PinnedBuffer>> host_owned_;
  PinnedArrays pinned_in_place_;  // m then v of each tensor
};

}  // namespace spillway::train
