// The GPU engine's part of tensor parallelism (--tp): the rank's pieces of
// the caller's masters and moments (model/llama_sharding.h), which the
// training state is made of; the gradient sums of the tensors every rank
// holds whole (the norms'), summed over the group after a step's
// micro-batches; and the state read back whole, gathered from every rank's
// pieces, for checkpoints.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "device/communicator.h"
#include "device/cuda/pinned_host.h"
#include "device/device.h"
#include "graph/tensor_parallel.h"
#include "model/llama_weights.h"
#include "train/cuda/training_state.h"
#include "train/optimizer.h"
#include "train/state_part.h"

namespace spillway::train {

class CudaTensorParallel {
 public:
  // Takes the rank's pieces of `weights` and `optimizer`'s moments, letting
  // go of the whole tensors as it cuts them (they would be a second copy of
  // the model on the host). The moments may be absent (a fresh run): the
  // pieces are zeros.
  CudaTensorParallel(model::LlamaWeights& weights, AdamW& optimizer, Communicator& group, Device& device);
  ~CudaTensorParallel();
  CudaTensorParallel(const CudaTensorParallel&) = delete;
  CudaTensorParallel& operator=(const CudaTensorParallel&) = delete;

  Communicator& group() const { return group_; }
  // What the training state is made of: this rank's pieces.
  model::LlamaWeights& pieces() { return pieces_; }
  AdamW& piece_optimizer() { return optimizer_; }
  // Of the graph parameters stacking `parts`' tensors, those every rank
  // holds whole, as parts (for a norm over them alone).
  std::vector<std::vector<int>> whole_parts(const std::vector<std::vector<int>>& parts) const;
  // The whole tensors' gradient sums, summed over the group on `comm` after
  // the work issued on `compute` so far; compute then waits for them. Every
  // rank must call it.
  void sum_whole_gradients(const CudaTrainingState& state, Stream& compute, Stream& comm, Event& ready, Event& done);
  // Tensor i of the state's `part`, whole. Every rank must make the same
  // reads in the same order.
  void read_whole(CudaTrainingState& state, StatePart part, size_t i, std::span<float> out);

 private:
  Communicator& group_;
  Device& device_;
  std::vector<graph::ParameterSplit> splits_;
  std::vector<Shape> shapes_;  // the whole tensors'
  model::LlamaWeights pieces_;
  AdamW optimizer_;
  // The gather's staging, made at the first read: a chunk of this rank's
  // piece and every rank's, on the device and pinned.
  static constexpr uint64_t kChunk = 8ull << 20;  // elements
  void* send_ = nullptr;
  void* recv_ = nullptr;
  std::unique_ptr<PinnedBuffer> pinned_;
};

}  // namespace spillway::train
