#include "train/tensor_parallel_state.h"

#include <algorithm>

#include "base/status.h"
#include "model/llama_sharding.h"

namespace spillway::train {

namespace {

// `whole`'s tensors cut into this rank's pieces; zeros of the pieces'
// shapes where `whole` holds no tensors.
model::LlamaWeights pieces_of(const model::LlamaWeights& whole, const model::LlamaWeights& layout,
                              const std::vector<graph::ParameterSplit>& splits, int rank, int ranks) {
  model::LlamaWeights out = model::LlamaWeights::zeros(layout.config());
  for (size_t i = 0; i < out.tensors().size(); ++i) {
    model::NamedTensor& t = out.tensors()[i];
    const Shape whole_shape = t.shape;
    t.shape = graph::piece_shape(whole_shape, splits[i], rank, ranks);
    if (whole.tensors().empty()) {
      t.data.assign(static_cast<size_t>(t.shape.numel()), 0.0f);
    } else {
      t.data = graph::piece_of<float>(whole.tensors().at(i).data, whole_shape, splits[i], rank, ranks);
    }
  }
  return out;
}

}  // namespace

TensorParallelState::TensorParallelState(const model::LlamaWeights& weights, const AdamW& optimizer,
                                         Communicator& group)
    : group_(group), config_(weights.config()) {
  const int rank = group.rank(), ranks = group.size();
  for (const model::NamedTensor& t : weights.tensors()) {
    whole_shapes_.push_back({t.name, t.shape, {}});
    graph::ValueInfo info;
    info.name = t.name;
    info.shape = t.shape;
    splits_.push_back(model::llama_parameter_split(config_, info));
  }
  w_ = pieces_of(weights, weights, splits_, rank, ranks);
  g_ = pieces_of(model::LlamaWeights(), weights, splits_, rank, ranks);
  m_ = pieces_of(optimizer.m, weights, splits_, rank, ranks);
  v_ = pieces_of(optimizer.v, weights, splits_, rank, ranks);
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
