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
// StateSharding), every part is on the device and split as a ShardLayout
// says: the masters' rest and the moments always hold only this rank's
// share; so do the gradient sums with `gradients` and the working copies
// with `weights`, whose whole copies then exist only in the engine's rings
// (train/ring_schedule.h) while a step runs.
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
#include "train/shard_layout.h"
#include "train/state_part.h"

namespace spillway::train {

class CudaTrainingState {
 public:
  struct Tensor {
    int64_t n = 0;
    uint64_t at = 0;                     // where it starts in the one layout
    bool decay = false;                  // a matrix: AdamW decays it
    float* master = nullptr;             // the caller's fp32 master, until start-up has split it
    bf16* working = nullptr;             // the master's bf16 rounding, which the step reads (null: sharded)
    uint16_t* remainder = nullptr;       // the rest of the master
    float* grad = nullptr;               // the sum of this optimizer step's micro-batch gradients (null: sharded)
    bool grad_on_device = false;
    // fp32, or bf16 with bf16 moments; null for fp32 moments at home,
    // which only copy_moment reaches. With sharded state, remainder, m and
    // v are null: only the share in DeviceArrays exists.
    void *m = nullptr, *v = nullptr;
  };
  // The engine-owned device arrays, all in the one layout, when the
  // optimizer's state is on the device.
  struct DeviceArrays {
    bf16* working = nullptr;  // whole, or null where the weights are sharded
    uint16_t* remainder = nullptr;
    float* grads = nullptr;   // whole, or null where the gradient sums are sharded
    void *m = nullptr, *v = nullptr;
    uint64_t elements = 0;          // the layout's length
    uint64_t decayed_elements = 0;  // the weight-decayed stacks come first
    // This rank's share of the layout (ShardLayout; all of it unsharded):
    // remainder, m and v hold it, and these the share of the working copies
    // and of the gradient sums (inside the whole arrays where those exist).
    bf16* working_share = nullptr;
    float* grads_share = nullptr;
    uint64_t share_elements = 0;
    uint64_t decayed_share = 0;  // of which the weight-decayed come first
  };
  // Data parallelism that shards the state: over which ranks, how far, and
  // the region of the layout each graph parameter lies in (parameters of
  // one key next to each other in the layout make one region; ZeRO-1 gives
  // them all the same key).
  struct Sharding {
    Communicator* over = nullptr;
    bool gradients = false, weights = false;
    std::vector<int> region_key;  // by parameter
  };

  // `parts`: the checkpoint tensors each graph parameter stacks
  // (model::LlamaGraph::parameter_parts), in the plan's parameter order.
  // Reads the caller's masters and moments (made zero when the caller has
  // none and the moments are fp32); both must outlive the state.
  // `sharding`: how data-parallel ranks split the state (none: this
  // rank keeps it whole); sharded, the plan must keep everything on the
  // device.
  CudaTrainingState(model::LlamaWeights& weights, AdamW& optimizer, const std::vector<std::vector<int>>& parts,
                    const plan::TrainingPlan& plan, bool bf16_moments, Device& device, Sharding sharding);
  ~CudaTrainingState();
  CudaTrainingState(const CudaTrainingState&) = delete;
  CudaTrainingState& operator=(const CudaTrainingState&) = delete;

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const DeviceArrays& device_arrays() const { return arrays_; }
  bool optimizer_on_device() const { return optimizer_on_device_; }
  bool weights_on_device() const { return weights_on_device_; }
  bool bf16_moments() const { return bf16_moments_; }
  bool sharded() const { return shard_over_ != nullptr; }
  bool gradients_sharded() const { return sharding_.gradients; }
  bool weights_sharded() const { return sharding_.weights; }
  // Where each tensor and stack lies, and how the ranks share the layout.
  const StateLayout& layout() const { return layout_; }
  const ShardLayout& shard_layout() const { return layout_.shards; }
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
  // Elements [first, first + n) of the layout, of a sharded array (`bytes`
  // each, this rank's share at `share`), into `device` on every rank, each
  // owner broadcasting its part.
  void gather_shares(const void* share, uint64_t bytes, DType dtype, uint64_t first, uint64_t n, char* device,
                     Stream& stream);

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  Device& device_;
  Communicator* shard_over_;
  Sharding sharding_;
  StateLayout layout_;
  char* gather_scratch_ = nullptr;  // a read's pieces from every rank meet here
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
