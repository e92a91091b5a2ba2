#include "train/tensor_parallel_state.h"

#include <algorithm>

#include "base/status.h"
#include "model/llama_sharding.h"

namespace spillway::train {

TensorParallelState::TensorParallelState(const model::LlamaWeights& weights, const AdamW& optimizer,
                                         Communicator& group)
    : group_(group), config_(weights.config()) {
  const int rank = group.rank(), ranks = group.size();
  for (const model::NamedTensor& t : weights.tensors()) whole_shapes_.push_back({t.name, t.shape, {}});
  splits_ = model::llama_tensor_splits(config_);
  w_ = model::llama_pieces(weights, config_, rank, ranks);
  g_ = model::llama_pieces(model::LlamaWeights(), config_, rank, ranks);
  m_ = model::llama_pieces(optimizer.m, config_, rank, ranks);
  v_ = model::llama_pieces(optimizer.v, config_, rank, ranks);
}

void TensorParallelState::sum_whole_gradients(Stream& comm) {
  for (size_t i = 0; i < g_.tensors().size(); ++i) {
    if (split(i).placement != graph::Placement::whole) continue;
    std::vector<float>& d = g_.tensors()[i].data;
    group_.all_reduce_sum(d.data(), d.size(), DType::f32, comm);
  }
  group_.wait(comm);
}

double TensorParallelState::grad_sum_of_squares(Stream& comm) {
  double sum = 0;
  for (size_t i = 0; i < g_.tensors().size(); ++i) {
    // A whole parameter's gradient is alike on every rank: counted on rank 0.
    if (split(i).placement == graph::Placement::whole && group_.rank() != 0) continue;
    for (float x : g_.tensors()[i].data) sum += static_cast<double>(x) * x;
  }
  group_.all_reduce_sum(&sum, 1, DType::f64, comm);
  group_.wait(comm);
  return sum;
}

void TensorParallelState::step(AdamW& optimizer, double lr, double grad_scale) {
  optimizer.step(w_.tensors(), g_.tensors(), m_.tensors(), v_.tensors(), lr, grad_scale);
}

void TensorParallelState::read_whole(StatePart part, size_t i, std::span<float> out, Stream& comm) {
  const model::LlamaWeights& from = part == StatePart::master ? w_ : part == StatePart::m ? m_ : v_;
  const std::vector<float>& piece = from.tensors().at(i).data;
  const model::NamedTensor& whole = whole_shapes_.at(i);
  SPW_CHECK(static_cast<int64_t>(out.size()) == whole.shape.numel(), whole.name, "holds ", whole.shape.numel(),
            " values, not ", out.size());
  if (split(i).placement == graph::Placement::whole) {
    std::copy(piece.begin(), piece.end(), out.begin());
    return;
  }
  std::vector<float> gathered(piece.size() * static_cast<size_t>(group_.size()));
  group_.all_gather(piece.data(), gathered.data(), piece.size(), DType::f32, comm);
  group_.wait(comm);
  const std::vector<float> w = graph::whole_of<float>(gathered, whole.shape, split(i), group_.size());
  std::copy(w.begin(), w.end(), out.begin());
}

}  // namespace spillway::train
