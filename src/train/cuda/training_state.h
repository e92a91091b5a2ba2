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
//
// With its state sharded over data-parallel ranks (train/run_config.h's
// StateSharding::optimizer), every part is on the device, the layout is
// padded to split evenly, and the masters' rest and the moments hold only
// this rank's share of it; working copies and gradient sums stay whole.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "device/communicator.h"
#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "model/llama_weights.h"
#include "plan/training_plan.h"
#include "train/optimizer.h"
#include "train/state_part.h"

namespace spillway::train {

class CudaTrainingState {
 public:
  struct Tensor {
    int64_t n = 0;
    uint64_t at = 0;                     // where it starts in the one layout
    bool decay = false;                  // a matrix: AdamW decays it
    float* master = nullptr;             // the caller's fp32 master, until start-up has split it
    bf16* working = nullptr;             // the master's bf16 rounding, which the step reads
    uint16_t* remainder = nullptr;       // the rest of the master
    float* grad = nullptr;               // the sum of this optimizer step's micro-batch gradients
    bool grad_on_device = false;
    // fp32, or bf16 with bf16 moments; null for fp32 moments at home,
    // which only copy_moment reaches. With sharded state, remainder, m and
    // v are null: only the share in DeviceArrays exists.
    void *m = nullptr, *v = nullptr;
  };
  // The engine-owned device arrays, all in the one layout, when the
  // optimizer's state is on the device.
  struct DeviceArrays {
    bf16* working = nullptr;
    uint16_t* remainder = nullptr;
    float* grads = nullptr;
    void *m = nullptr, *v = nullptr;
    uint64_t elements = 0;          // the layout's length: working's and grads'
    uint64_t decayed_elements = 0;  // the weight-decayed stacks come first
    // remainder, m and v hold elements [shard_first, shard_first +
    // shard_elements) of the layout: all of it, or this rank's share.
    uint64_t shard_first = 0, shard_elements = 0;
  };

  // `parts`: the checkpoint tensors each graph parameter stacks
  // (model::LlamaGraph::parameter_parts), in the plan's parameter order.
  // Reads the caller's masters and moments (made zero when the caller has
  // none and the moments are fp32); both must outlive the state.
  // `shard_over`: the data-parallel ranks that split the optimizer's state
  // (null: this rank keeps it whole); the plan must keep everything on the
  // device.
  CudaTrainingState(model::LlamaWeights& weights, AdamW& optimizer, const std::vector<std::vector<int>>& parts,
                    const plan::TrainingPlan& plan, bool bf16_moments, Device& device,
                    Communicator* shard_over = nullptr);
  ~CudaTrainingState();
  CudaTrainingState(const CudaTrainingState&) = delete;
  CudaTrainingState& operator=(const CudaTrainingState&) = delete;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const DeviceArrays& device_arrays() const { return arrays_; }
  bool optimizer_on_device() const { return optimizer_on_device_; }
  bool weights_on_device() const { return weights_on_device_; }
  bool bf16_moments() const { return bf16_moments_; }
  bool sharded() const { return shard_over_ != nullptr; }
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

  // Makes the caller's masters and moments hold the state, whole (after
  // start-up the state lets go of them, except fp32 moments at home, which
  // are the caller's arrays). With sharded state every rank must call it:
  // the shares travel to every rank.
  void sync_to_host();
  // Tensor `i` of the state's `part`, as fp32, into `out` (Engine::read_state).
  // With sharded state every rank must make the same reads in the same order.
  void read(StatePart part, size_t i, std::span<float> out);

 private:
  struct ReadStaging;
  void upload();
  void upload_share();
  void read_master_piece(const Tensor& t, int64_t off, int64_t len, float* out);
  void read_moment_piece(const Tensor& t, int which, int64_t off, int64_t len, float* out);
  // Elements [first, first + n) of a sharded array (`bytes` each, this
  // rank's share at `share`) into `device` on every rank, each owner
  // broadcasting its part.
  void gather_shares(const void* share, uint64_t bytes, DType dtype, uint64_t first, uint64_t n, char* device,
                     Stream& stream);

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  Device& device_;
  Communicator* shard_over_;
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
  std::unique_ptr<ReadStaging> staging_;  // made at the first read
};

}  // namespace spillway::train
