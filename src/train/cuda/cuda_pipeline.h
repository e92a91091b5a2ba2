// Pipeline parallelism on the GPU engine: this rank holds one stage of the
// layers (the cost model's cut, the one the CPU engine and the planner
// make) and the training state of that stage's tensors alone, and runs the
// step's micro-batches in 1F1B order (train/pipeline_schedule.h). At each
// tick the rank runs its pass, then hands what the pass made to the next
// stage (a hidden state) or the previous one (its gradient) and takes what
// the others made for it, in one exchange on the comm stream.
//
// A backward pass is the stage's whole step graph from the input kept for
// its micro-batch: the stage's forward runs again there, so a stage keeps
// the inputs of its micro-batches in flight (a hidden state each), not
// their activations.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/communicator.h"
#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "exec/executor.h"
#include "model/llama_graph.h"
#include "model/llama_weights.h"
#include "train/cuda/training_state.h"
#include "train/optimizer.h"
#include "train/pipeline_walk.h"
#include "train/state_part.h"
#include "train/step_plan.h"

namespace spillway::train {

class CudaPipeline {
 public:
  // `group`: the ranks holding the stages, in order. Takes this stage's
  // tensors out of `weights` and `optimizer`'s moments and lets go of the rest.
  CudaPipeline(model::LlamaWeights& weights, AdamW& optimizer, Communicator& group, int64_t batch,
               int64_t seq, Device& device);
  ~CudaPipeline();

  Communicator& group() const { return group_; }
  const model::LlamaStage& stage() const { return stages_[static_cast<size_t>(group_.rank())]; }
  int stages() const { return group_.size(); }
  // The model's tensors with those of the other stages empty, and the
  // caller's moments alike: the state this rank keeps.
  model::LlamaWeights& weights() { return weights_; }
  AdamW& optimizer() { return optimizer_; }
  // Device bytes the plan keeps for the hidden states received ahead of
  // their passes (the buffers bound into the steps are taken already).
  uint64_t reserved_bytes(int64_t micro_batches) const;
  std::string describe() const;

  // Binds the hand-over buffers into a step of this stage: its input
  // hidden state and, for a training step, the gradient handed back and
  // the input's gradient. A forward step's output is sent from its program.
  void bind(exec::StepProgram& program, const LlamaStep& step, bool training);

  // A pass of micro-batch `mb`: `forward` runs the stage's forward step,
  // `train` its training step (`first` and `last` of the optimizer step's
  // training passes on this rank); each returns its loss (0 short of the
  // last stage) once its work has finished.
  struct Passes {
    std::function<double(int64_t mb)> forward;
    std::function<double(int64_t mb, bool first, bool last)> train;
  };
  // The step's micro-batches through the stages (without `training`,
  // forward passes alone); returns this rank's sum of their losses.
  double run(int64_t micro_batches, bool training, const Passes& passes);

  // A tied table (the embedding, which lm_head reads on the last stage):
  // the first and the last stage's gradient sums of it added on both, so
  // that their copies take the same update. Every rank calls it, after the
  // step's micro-batches.
  void sum_tied_gradients(CudaTrainingState& state);
  // The parts of this rank's state that another rank counts in the
  // gradient norm: the last stage's copy of a tied table.
  std::vector<std::vector<int>> copied_parts() const;
  bool tied() const { return tied_; }

  // Tensor `i` of the whole model, from the stage that holds it (every
  // rank of the pipeline calls this alike).
  void read_whole(CudaTrainingState& state, StatePart part, size_t i, std::span<float> out);

 private:

  Communicator& group_;
  Device& device_;
  std::vector<model::LlamaStage> stages_;
  std::vector<int> stage_of_tensor_;
  model::LlamaWeights weights_;
  AdamW optimizer_;
  uint64_t hidden_elements_ = 0;  // one micro-batch's hidden state
  // Bound into the steps: the pass's input, the gradient handed back to a
  // training step, the input's gradient it makes.
  void *input_ = nullptr, *handed_back_ = nullptr, *input_grad_ = nullptr;
  // The forward step, whose output hidden state is sent from where it lies.
  exec::StepProgram* forward_ = nullptr;
  graph::Value hidden_out_;
  std::vector<void*> owned_;
  std::unique_ptr<PipelineWalk> walk_;  // the ticks, and what waits for its pass
  bool tied_ = false;
  void* tied_other_ = nullptr;  // the other stage's piece of a tied table's gradient
  // read_whole's staging.
  void* stage_buffer_ = nullptr;
  std::unique_ptr<PinnedBuffer> pinned_;
  static constexpr uint64_t kChunk = 16ull << 20;  // floats a broadcast
};

}  // namespace spillway::train
