// AdamW for the CPU engine with its state sharded over data-parallel ranks
// (--shard optimizer, gradients or weights, as the GPU engine's): the
// tensors laid end to end and padded to split evenly, each rank keeps the
// moments and the gradient sums of its share only and updates that share of
// the weights. Gradients are reduce-scattered into the share of the sums,
// once a step (the step's sums: ZeRO-1) or after every micro-batch (ZeRO-2
// and 3). The updated shares are all-gathered after the step, or, with the
// weights sharded (ZeRO-3), kept as they are and gathered ahead of each use.
#pragma once

#include <cstdint>
#include <vector>

#include "device/communicator.h"
#include "model/llama_weights.h"
#include "train/optimizer.h"

namespace spillway::train {

class CpuShardedAdamW {
 public:
  // Takes this rank's share of the weights and of the caller's moments (a
  // resumed run), or zeros; `optimizer` keeps the hyperparameters and the
  // step count, and receives the whole moments at sync_to_host. With
  // `shard_weights`, the caller's weights are let go of: gather_weights
  // brings them back.
  CpuShardedAdamW(model::LlamaWeights& params, AdamW& optimizer, Communicator& ranks, bool shard_weights);

  // A step begins: this rank's share of the gradient sums is empty.
  void begin_step() { grads_added_ = 0; }
  // `grads` summed over the ranks, this rank's share of that added into its
  // share of the sums. Every rank must call it.
  void add_gradients(const model::LlamaWeights& grads, Stream& comm);
  // The sum of squares of this rank's share of the sums (the caller sums
  // those over the ranks).
  double grad_sum_of_squares() const;
  // One update of this rank's share from the sums times `grad_scale`; then,
  // unless the weights are sharded, every rank's share into `params`.
  void step(model::LlamaWeights& params, double lr, double grad_scale, Stream& comm);
  // Every rank's share of the weights into `params`, whole. Every rank must
  // call it.
  void gather_weights(model::LlamaWeights& params, Stream& comm);
  // With the weights sharded, between their uses: lets go of the whole
  // weights in `params` and of the staging buffer, this rank's shares being
  // all it keeps.
  void release_whole(model::LlamaWeights& params);
  // The whole moments, gathered from every rank, into the caller's AdamW.
  // Every rank must call it.
  void sync_to_host(Stream& comm);

 private:
  // Calls f(tensor, offset in the tensor, offset in the share, count) over
  // the parts of the tensors inside this rank's share.
  template <typename F>
  void for_each_part(F f) const;
  std::vector<float>& staging();  // the whole layout, allocated on use
  void gather(const std::vector<float>& share, Stream& comm);  // every share into staging()
  void scatter_to(model::LlamaWeights& whole) const;  // staging() into `whole`, tensor by tensor

  AdamW& optimizer_;
  Communicator& ranks_;
  model::LlamaConfig config_;
  bool shard_weights_;
  std::vector<uint64_t> offsets_;  // each tensor's first element in the layout
  std::vector<int64_t> sizes_;
  std::vector<bool> matrix_;
  uint64_t first_ = 0, share_ = 0;  // this rank's elements of the layout
  std::vector<float> flat_;         // the whole layout: gradients to reduce, then what is gathered
  std::vector<float> w_, m_, v_;    // this rank's share of the weights and moments
  std::vector<float> g_;            // this rank's share of the gradient sums
  int grads_added_ = 0;             // into g_ this step
};

}  // namespace spillway::train
