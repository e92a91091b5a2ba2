// AdamW for the CPU engine with its state sharded over data-parallel ranks
// (--shard optimizer, as the GPU engine's): the tensors laid end to end and
// padded to split evenly, each rank keeps the moments of its share only and
// updates that share of the weights; the gradient sums are reduce-scattered
// before and the weights all-gathered after, so every rank ends a step with
// the same weights.
#pragma once

#include <cstdint>
#include <vector>

#include "device/communicator.h"
#include "model/llama_weights.h"
#include "train/optimizer.h"

namespace spillway::train {

class CpuShardedAdamW {
 public:
  // Takes this rank's share of the caller's moments (a resumed run), or
  // zeros; `optimizer` keeps the hyperparameters and the step count, and
  // receives the whole moments at sync_to_host.
  CpuShardedAdamW(const model::LlamaWeights& params, AdamW& optimizer, Communicator& ranks);

  // The gradient sums of every rank summed, this rank's share of them kept;
  // returns the share's sum of squares (the caller sums those over the ranks).
  double reduce_gradients(const model::LlamaWeights& grads, Stream& comm);
  // One update of this rank's share from the reduced sums times
  // `grad_scale`, then every rank's share to every rank.
  void step(model::LlamaWeights& params, double lr, double grad_scale, Stream& comm);
  // The whole moments, gathered from every rank, into the caller's AdamW.
  // Every rank must call it.
  void sync_to_host(Stream& comm);

 private:
  // Calls f(tensor, offset in the tensor, offset in the share, count) over
  // the parts of the tensors inside this rank's share.
  template <typename F>
  void for_each_part(F f) const;
  void gather(const std::vector<float>& share, Stream& comm);  // every share into flat_

  AdamW& optimizer_;
  Communicator& ranks_;
  model::LlamaConfig config_;
  std::vector<uint64_t> offsets_;  // each tensor's first element in the layout
  std::vector<int64_t> sizes_;
  std::vector<bool> matrix_;
  uint64_t first_ = 0, share_ = 0;  // this rank's elements of the layout
  std::vector<float> flat_;         // the whole layout: gradient sums, then what is gathered
  std::vector<float> m_, v_;        // this rank's share of the moments
};

}  // namespace spillway::train
