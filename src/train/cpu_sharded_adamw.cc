#include "train/cpu_sharded_adamw.h"

#include <algorithm>
#include <cstring>

#include "ops/adamw.h"

namespace spillway::train {

CpuShardedAdamW::CpuShardedAdamW(model::LlamaWeights& params, AdamW& optimizer, Communicator& ranks,
                                 bool shard_weights)
    : optimizer_(optimizer), ranks_(ranks), config_(params.config()), shard_weights_(shard_weights) {
  uint64_t at = 0;
  for (const auto& t : params.tensors()) {
    offsets_.push_back(at);
    sizes_.push_back(t.shape.numel());
    matrix_.push_back(t.shape.rank() >= 2);
    at += static_cast<uint64_t>(t.shape.numel());
  }
  const auto n = static_cast<uint64_t>(ranks_.size());
  share_ = (at + n - 1) / n;
  first_ = share_ * static_cast<uint64_t>(ranks_.rank());
  w_.assign(share_, 0.0f);
  m_.assign(share_, 0.0f);
  v_.assign(share_, 0.0f);
  g_.assign(share_, 0.0f);
  const bool resumed = !optimizer_.m.tensors().empty();
  for_each_part([&](size_t i, uint64_t in_tensor, uint64_t in_share, uint64_t count) {
    std::memcpy(w_.data() + in_share, params.tensors()[i].data.data() + in_tensor, count * 4);
    if (!resumed) return;
    std::memcpy(m_.data() + in_share, optimizer_.m.tensors()[i].data.data() + in_tensor, count * 4);
    std::memcpy(v_.data() + in_share, optimizer_.v.tensors()[i].data.data() + in_tensor, count * 4);
  });
  // Until a checkpoint needs them whole, the shares are all this rank keeps.
  optimizer_.m = model::LlamaWeights();
  optimizer_.v = model::LlamaWeights();
  if (shard_weights_) release_whole(params);
}

template <typename F>
void CpuShardedAdamW::for_each_part(F f) const {
  const uint64_t last = first_ + share_;
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const uint64_t a = std::max(offsets_[i], first_);
    const uint64_t b = std::min(offsets_[i] + static_cast<uint64_t>(sizes_[i]), last);
    if (a < b) f(i, a - offsets_[i], a - first_, b - a);
  }
}

std::vector<float>& CpuShardedAdamW::staging() {
  if (flat_.empty()) flat_.assign(share_ * static_cast<uint64_t>(ranks_.size()), 0.0f);
  return flat_;
}

void CpuShardedAdamW::add_gradients(const model::LlamaWeights& grads, Stream& comm) {
  std::vector<float>& flat = staging();
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const auto& g = grads.tensors()[i].data;
    std::copy(g.begin(), g.end(), flat.begin() + static_cast<int64_t>(offsets_[i]));
  }
  float* mine = flat.data() + first_;
  ranks_.reduce_scatter_sum(flat.data(), mine, share_, DType::f32, comm);
  ranks_.wait(comm);
  // The first micro-batch's sums are copied, not added to zeros: a step of
  // one reduction keeps ZeRO-1's bits, signed zeros included.
  if (grads_added_++ == 0) {
    std::copy_n(mine, share_, g_.begin());
  } else {
    for (uint64_t k = 0; k < share_; ++k) g_[k] += mine[k];
  }
}

double CpuShardedAdamW::grad_sum_of_squares() const {
  double sum = 0;
  for_each_part([&](size_t, uint64_t, uint64_t in_share, uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) {
      const double g = g_[in_share + k];
      sum += g * g;
    }
  });
  return sum;
}

void CpuShardedAdamW::step(model::LlamaWeights& params, double lr, double grad_scale, Stream& comm) {
  ++optimizer_.steps_taken;
  for_each_part([&](size_t i, uint64_t, uint64_t in_share, uint64_t count) {
    ops::adamw_update(w_.data() + in_share, g_.data() + in_share, m_.data() + in_share, v_.data() + in_share,
                      static_cast<int64_t>(count), optimizer_.hyper(lr, grad_scale, matrix_[i]));
  });
  if (!shard_weights_) gather_weights(params, comm);
}

void CpuShardedAdamW::gather_weights(model::LlamaWeights& params, Stream& comm) {
  gather(w_, comm);
  scatter_to(params);
}

void CpuShardedAdamW::release_whole(model::LlamaWeights& params) {
  for (auto& t : params.tensors()) std::vector<float>().swap(t.data);
  std::vector<float>().swap(flat_);
}

void CpuShardedAdamW::gather(const std::vector<float>& share, Stream& comm) {
  ranks_.all_gather(share.data(), staging().data(), share_, DType::f32, comm);
  ranks_.wait(comm);
}

void CpuShardedAdamW::scatter_to(model::LlamaWeights& whole) const {
  for (size_t i = 0; i < offsets_.size(); ++i) {
    auto& t = whole.tensors()[i].data;
    t.resize(static_cast<size_t>(sizes_[i]));
    std::copy_n(flat_.begin() + static_cast<int64_t>(offsets_[i]), t.size(), t.begin());
  }
}

void CpuShardedAdamW::sync_to_host(Stream& comm) {
  if (optimizer_.m.tensors().empty()) {
    optimizer_.m = model::LlamaWeights::zeros(config_);
    optimizer_.v = model::LlamaWeights::zeros(config_);
  }
  gather(m_, comm);
  scatter_to(optimizer_.m);
  gather(v_, comm);
  scatter_to(optimizer_.v);
}

}  // namespace spillway::train
