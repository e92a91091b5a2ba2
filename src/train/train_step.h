// One micro-step of training on the CPU backend: the LLaMA graph made into a
// step by the recipe every backend uses (graph/step_recipe.h), compiled once
// for a batch shape and replayed on every batch.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>

#include "device/memory_space.h"
#include "exec/executor.h"
#include "device/device.h"
#include "exec/planned_executor.h"
#include "exec/streamed_runner.h"
#include "graph/step_recipe.h"
#include "model/llama_graph.h"
#include "model/llama_weights.h"
#include "model/lora.h"
#include "graph/tensor_parallel.h"
#include "ops/collective_groups.h"

namespace spillway::train {

// A step split over a tensor-parallel group (graph/tensor_parallel.h,
// model/llama_sharding.h): the rank's graph, run with its weights' pieces,
// its collectives through `groups` (which must outlive the step).
struct StepSplit {
  graph::TensorParallelism tp;
  // Context parallelism: the step's `seq` tokens are this rank's chunk of
  // each sequence (model::LlamaContext).
  model::LlamaContext context;
  const ops::CollectiveGroups* groups = nullptr;
};

class TrainStep {
 public:
  // `with_backward` false gives a forward-only step (evaluation). Its
  // values live in `space`. `weighted_loss`: the loss weighted per token
  // (model::LlamaGraphOptions), whose weights each run is given.
  // `documents`: packed rows, whose per-token positions and document starts
  // each run is given (model::LlamaGraphOptions::documents). `lora`: LoRA
  // adapters on the frozen weights (model/lora.h), bound with bind_adapters;
  // the step's gradients are then the adapters' alone.
  // `split`: the rank's step of a tensor-parallel group, whose run() takes
  // the rank's pieces of the weights and their gradients (graph::piece_of).
  TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, MemorySpace& space,
            bool with_backward = true, bool weighted_loss = false, bool documents = false,
            const model::LoraConfig* lora = nullptr, const StepSplit* split = nullptr);
  // The step under a placement planned for `device`'s memory budgets
  // (plan/placement.h), run on its streams: values the device memory cannot
  // hold go home to its host memory and come back. Planning fails here,
  // before any work, when the budget is below the step's minimum.
  TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, Device& device,
            bool with_backward = true, bool weighted_loss = false, bool documents = false,
            const model::LoraConfig* lora = nullptr);

  // A LoRA step's adapters, and (for a step with a backward pass) where
  // their gradients are accumulated, as TrainStep::run's `grads` are: every
  // later run reads and adds to these. Both must outlive the step.
  void bind_adapters(model::LoraWeights& adapters, model::LoraWeights* grads);

  // The key LoRA's dropout draws the next runs' elements with (ops/dropout.h);
  // a step without adapter dropout ignores it.
  void set_dropout_key(uint64_t key);

  int64_t batch() const { return batch_; }
  int64_t seq() const { return seq_; }

  // tokens and targets are [batch, seq]; so are loss_weights, which a step
  // with a weighted loss needs and any other refuses, and positions and
  // doc_starts, which a step with documents needs and any other refuses.
  // Returns the loss. The step's
  // parameter gradients are accumulated into caller memory
  // (graph::GradientOutput::accumulated): this run adds each gradient into
  // `grads`, laid out as the weights. The caller zeroes `grads` before the
  // first micro-batch of an optimizer step; nothing else is allocated for
  // gradients.
  double run(model::LlamaWeights& weights, std::span<const int32_t> tokens,
             std::span<const int32_t> targets, model::LlamaWeights& grads,
             std::span<const float> loss_weights = {}, std::span<const int32_t> positions = {},
             std::span<const int32_t> doc_starts = {});
  // Without a gradient buffer: a forward-only step, a LoRA step (its
  // gradients go to the bound adapters' gradients), or a step whose
  // gradients go to a set the step keeps (zeroed first) for write_gradients.
  double run(model::LlamaWeights& weights, std::span<const int32_t> tokens,
             std::span<const int32_t> targets, std::span<const float> loss_weights = {},
             std::span<const int32_t> positions = {}, std::span<const int32_t> doc_starts = {});

  // grads[i] (+)= scale * gradient of parameter i from the last run without
  // a gradient buffer.
  void write_gradients(model::LlamaWeights& grads, float scale, bool accumulate) const;
  std::span<const float> logits() const { return program_->read<float>(model_.logits); }
  const graph::Graph& graph() const { return graph_; }
  exec::StepProgram& program() { return *program_; }
  // The placement being followed, or nullptr without a budget.
  const plan::Placement* placement() const;

 private:
  TrainStep(const model::LlamaConfig& config, int64_t batch, int64_t seq, bool with_backward, bool weighted_loss,
            bool documents, const model::LoraConfig* lora, const StepSplit* split);
  // Binds tokens, targets, loss weights, documents and weights, runs,
  // returns the loss.
  double run_bound(model::LlamaWeights& weights, std::span<const int32_t> tokens,
                   std::span<const int32_t> targets, std::span<const float> loss_weights,
                   std::span<const int32_t> positions, std::span<const int32_t> doc_starts);

  int64_t batch_, seq_;
  graph::Graph graph_;
  model::LlamaGraph model_;
  graph::Gradients grads_;
  exec::CpuNodeRunner runner_;
  Device* device_ = nullptr;  // planned: the device whose streams run the step
  std::unique_ptr<exec::StreamedNodeRunner> streamed_;
  std::unique_ptr<exec::StepProgram> program_;
  std::optional<model::LlamaWeights> own_grads_;  // for run() without a gradient buffer
  // Binds the inputs the step itself holds: LoRA's scaling and dropout key.
  void bind_own_inputs();

  std::vector<float> lora_scaling_;  // with LoRA: (alpha / r) I, [r, r]
  std::array<int32_t, 2> dropout_key_{};
  bool adapters_bound_ = false;
};

}  // namespace spillway::train
