// Pipeline parallelism on the CPU engine (--pp S): this rank's stage of the
// model (model/llama_stages.h: contiguous layers, balanced by the cost
// model), its own weights, gradient sums and AdamW moments, and the
// schedule of a step over the stages: each micro-batch's forward pass stage
// after stage, each handing its hidden state to the next over the pipeline
// group, and its backward pass from the last stage back, each stage
// remaking its forward from the hidden state it kept and handing the
// gradient of that state back; in 1F1B's order (PipeDream-Flush, as
// Megatron-LM runs it), each stage's activations recomputed: a stage keeps
// only the inputs of the micro-batches in flight.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/communicator.h"
#include "device/memory_space.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/tensor_parallel.h"
#include "model/llama_graph.h"
#include "model/llama_weights.h"
#include "train/optimizer.h"
#include "train/state_part.h"

namespace spillway::train {

class CpuPipeline {
 public:
  // Takes this rank's stage's tensors of `weights` and of `optimizer`'s
  // moments (zeros where it has none: a fresh run).
  // `tensor_group`: the ranks splitting each of this stage's layers
  // (graph/tensor_parallel.h), the same stage on each; null: none.
  CpuPipeline(const model::LlamaWeights& weights, const AdamW& optimizer, Communicator& group, int64_t batch,
              int64_t seq, MemorySpace& space, Stream& comm, Communicator* tensor_group = nullptr,
              bool sequence_parallel = true);
  ~CpuPipeline();

  const model::LlamaStage& stage() const { return stages_[static_cast<size_t>(group_.rank())]; }
  std::string describe() const;
  // The gradient sums of this stage's tensors, which a step adds into.
  std::vector<model::NamedTensor>& grads() { return grads_; }
  // `micro_batches` micro-batches of inputs and targets laid end to end, run
  // through the pipeline, their gradients added into grads(); returns the
  // mean loss on every stage. Every rank of the group must call it.
  double run_micro_batches(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches);
  // The sum of squares of every stage's gradient sums. Every rank must call it.
  double grad_sum_of_squares();
  void step(AdamW& optimizer, double lr, double grad_scale);
  // One batch's mean loss, weights unchanged. Every rank must call it.
  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets);
  // Checkpoint tensor i of the state's `part`, from the stage that holds
  // it. Every rank must make the same reads in the same order.
  void read_whole(StatePart part, size_t i, std::span<float> out);

 private:
  struct Program;
  bool first() const { return group_.rank() == 0; }
  bool last() const { return group_.rank() + 1 == group_.size(); }
  // Runs `p` on one micro-batch's tokens and targets, the hidden state it
  // reads and (training) the gradient of the one it hands on; returns the
  // loss (the last stage) or 0.
  double run(Program& p, std::span<const int32_t> tokens, std::span<const int32_t> targets,
             std::vector<float>& hidden_in, std::vector<float>& hidden_grad);
  void send(std::vector<float>& data, int peer);
  void receive(std::vector<float>& data, int peer);
  // `out` to `peer` and `in` from it, in flight together.
  void exchange(std::vector<float>& out, std::vector<float>& in, int peer);
  double sum_over_stages(double value);

  Communicator& group_;
  Stream& comm_;
  Communicator* tensor_group_;
  ops::CollectiveGroups groups_;                  // the stage's collectives, with tensor parallelism
  std::vector<graph::ParameterSplit> splits_;     // by checkpoint tensor (tensor parallelism)
  std::vector<Shape> shapes_;                     // by checkpoint tensor: its whole shape
  int64_t batch_, seq_, hidden_;
  std::vector<model::LlamaStage> stages_;  // by rank of the group
  std::vector<int> owner_;                 // by checkpoint tensor: the rank whose stage holds it
  std::vector<int> own_index_;             // by checkpoint tensor: its place in this stage's arrays, or -1
  std::vector<model::NamedTensor> weights_, grads_, m_, v_;  // this stage's tensors
  std::unique_ptr<Program> forward_, train_;
  std::vector<float> hidden_out_, hidden_grad_;
  bool tied_ = false;           // the first and last stages each hold the tied table
  int64_t table_elements_ = 0;
};

}  // namespace spillway::train
