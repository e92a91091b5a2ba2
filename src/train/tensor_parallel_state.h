// A tensor-parallel rank's training state on the CPU engine: its pieces of
// the weights, of the gradient sums and of AdamW's moments (graph::piece_of
// of the declared split, model/llama_sharding.h), updated in place; the
// whole tensors exist only when a checkpoint gathers them.
#pragma once

#include <span>
#include <vector>

#include "device/communicator.h"
#include "graph/tensor_parallel.h"
#include "model/llama_weights.h"
#include "train/optimizer.h"
#include "train/state_part.h"

namespace spillway::train {

class TensorParallelState {
 public:
  // This rank's pieces of `weights` and of `optimizer`'s moments (zeros
  // where it has none: a fresh run).
  TensorParallelState(const model::LlamaWeights& weights, const AdamW& optimizer, Communicator& group);

  model::LlamaWeights& weights() { return w_; }
  model::LlamaWeights& grads() { return g_; }
  // After the micro-batches: the whole parameters' gradients summed over
  // the group (each rank holds its part of them). Every rank must call it.
  void sum_whole_gradients(Stream& comm);
  // The sum of squares of the step's whole gradient, from this rank's
  // pieces and the whole parameters' gradients counted once. Every rank
  // must call it.
  double grad_sum_of_squares(Stream& comm);
  void step(AdamW& optimizer, double lr, double grad_scale);
  // Tensor i of the state's `part`, whole, from every rank's piece. Every
  // rank must call it alike.
  void read_whole(StatePart part, size_t i, std::span<float> out, Stream& comm);

 private:
  const graph::ParameterSplit& split(size_t i) const { return splits_[i]; }

  Communicator& group_;
  model::LlamaConfig config_;
  std::vector<model::NamedTensor> whole_shapes_;  // names and whole shapes, no data
  std::vector<graph::ParameterSplit> splits_;
  model::LlamaWeights w_, g_, m_, v_;
};

}  // namespace spillway::train
