// Pipeline parallelism on the CPU engine (--pp S): this rank's stages of
// the model (model/llama_stages.h: contiguous layers, balanced by the cost
// model; one stage a rank, or with --virtual-stages V the layers cut into
// S x V stages, rank r holding stages r, r + S, ...), their own weights,
// gradient sums and AdamW moments, and a step's passes in the order of
// train/pipeline_schedule.h (1F1B, or interleaved 1F1B): each micro-batch's
// forward pass stage after stage, each handing its hidden state to the
// next over the pipeline group, and its backward pass from the last stage
// back, each stage remaking its forward from the hidden state it kept and
// handing the gradient of that state back. A stage keeps only the inputs
// of the micro-batches in flight.
//
// Each stage's layers may be split further: over a tensor-parallel group
// (graph/tensor_parallel.h), the same stages on each of its ranks, and
// over a context-parallel one (model::LlamaContext), each of its ranks
// taking its chunk of every sequence through the same stages.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/communicator.h"
#include "device/memory_space.h"
#include "model/llama_graph.h"
#include "model/llama_weights.h"
#include "graph/tensor_parallel.h"
#include "ops/collective_groups.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/pipeline_walk.h"
#include "train/state_part.h"

namespace spillway::train {

struct PipelineRanks {
  Communicator* pipeline = nullptr;  // the ranks holding the stages, in stage order
  Communicator* tensor = nullptr;    // null: none
  Communicator* context = nullptr;   // null: none
  bool sequence_parallel = true;
  int chunks = 1;  // stages a rank holds (--virtual-stages)
};

class CpuPipeline {
 public:
  // Takes this rank's stages' tensors of `weights` and of `optimizer`'s
  // moments (zeros where it has none: a fresh run). `seq`: the whole
  // sequence, which a context-parallel rank takes its chunk of.
  CpuPipeline(const model::LlamaWeights& weights, const AdamW& optimizer, const PipelineRanks& ranks, int64_t batch,
              int64_t seq, MemorySpace& space, Stream& comm);
  ~CpuPipeline();

  std::string describe() const;
  // The gradient sums of this rank's tensors, which a step adds into.
  std::vector<model::NamedTensor>& grads() { return grads_; }
  // `micro_batches` micro-batches of inputs and targets (whole sequences)
  // laid end to end, run through the pipeline, their gradients added into
  // grads(); returns the mean loss of this rank's chunk of the sequences on
  // every stage. Every rank of the group must call it.
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
  // Chunk c's programs: forward only, and forward and backward.
  struct Chunk {
    model::LlamaStage stage;
    std::unique_ptr<Program> forward, train;
  };
  int rank() const { return group_.rank(); }
  int stage_count() const { return group_.size() * ranks_.chunks; }
  bool first() const { return rank() == 0; }                    // holds the embedding
  bool last() const { return rank() + 1 == group_.size(); }     // holds the loss
  // Runs `p` on one micro-batch's tokens and targets, the hidden state it
  // reads (stage > 0) and (training, short of the last stage) the gradient
  // of the one it hands on; returns the loss (the last stage) or 0. Leaves
  // the hidden state it hands on in hidden_out_ (forward) or its input's
  // gradient in hidden_grad_ (training).
  double run(Program& p, std::span<const int32_t> tokens, std::span<const int32_t> targets, const float* hidden_in,
             const float* handed_back);
  // The passes of `timeline` that are this rank's (train/pipeline_walk.h);
  // returns the sum of the losses of the last stage's passes.
  double run_timeline(const PipelineTimeline& timeline, std::span<const int32_t> inputs,
                      std::span<const int32_t> targets, bool training);
  double sum_over_stages(double value);

  Communicator& group_;
  PipelineRanks ranks_;
  Stream& comm_;
  ops::CollectiveGroups groups_;                  // the stages' collectives: tensor and context parallelism
  std::vector<graph::ParameterSplit> splits_;     // by checkpoint tensor (tensor parallelism)
  std::vector<Shape> shapes_;                     // by checkpoint tensor: its whole shape
  int64_t batch_, seq_, hidden_;                  // seq_: this rank's chunk of a sequence
  std::vector<model::LlamaStage> stages_;  // by stage
  std::vector<Chunk> chunks_;              // this rank's
  std::vector<int> owner_;                 // by checkpoint tensor: the rank whose stage holds it
  std::vector<int> own_index_;             // by checkpoint tensor: its place in this rank's arrays, or -1
  std::vector<model::NamedTensor> weights_, grads_, m_, v_;  // this rank's tensors
  std::vector<float> hidden_out_, hidden_grad_;
  model::LlamaContext context_;                     // with --cp: this rank's place in the sequence
  std::vector<int32_t> inputs_, targets_;           // with --cp: a micro-batch's chunks of this rank
  std::unique_ptr<PipelineWalk> walk_;
  bool tied_ = false;           // the first and last stages each hold the tied table
  int64_t table_elements_ = 0;
};

}  // namespace spillway::train
