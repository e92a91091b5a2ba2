#include "train/cpu_sharded_adamw.h"

#include <algorithm>
#include <cstring>

#include "ops/adamw.h"

namespace spillway::train {

CpuShardedAdamW::CpuShardedAdamW(const model::LlamaWeights& params, AdamW& optimizer, Communicator& ranks)
    : optimizer_(optimizer), ranks_(ranks), config_(params.config()) {
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
  flat_.assign(share_ * n, 0.0f);
  m_.assign(share_, 0.0f);
  v_.assign(share_, 0.0f);
  if (optimizer_.m.tensors().empty()) return;
  for_each_part([&](size_t i, uint64_t in_tensor, uint64_t in_share, uint64_t count) {
    std::memcpy(m_.data() + in_share, optimizer_.m.tensors()[i].data.data() + in_tensor, count * 4);
    std::memcpy(v_.data() + in_share, optimizer_.v.tensors()[i].data.data() + in_tensor, count * 4);
  });
  // Until a checkpoint needs them whole, the share is all this rank keeps.
  optimizer_.m = model::LlamaWeights();
  optimizer_.v = model::LlamaWeights();
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

double CpuShardedAdamW::reduce_gradients(const model::LlamaWeights& grads, Stream& comm) {
  for (size_t i = 0; i < offsets_.size(); ++i) {
    const auto& g = grads.tensors()[i].data;
    std::copy(g.begin(), g.end(), flat_.begin() + static_cast<int64_t>(offsets_[i]));
  }
  ranks_.reduce_scatter_sum(flat_.data(), flat_.data() + first_, share_, DType::f32, comm);
  ranks_.wait(comm);
  double sum = 0;
  for_each_part([&](size_t, uint64_t, uint64_t in_share, uint64_t count) {
    for (uint64_t k = 0; k < count; ++k) {
      const double g = flat_[first_ + in_share + k];
      sum += g * g;
    }
  });
  return sum;
}

void CpuShardedAdamW::step(model::LlamaWeights& params, double lr, double grad_scale, Stream& comm) {
  ++optimizer_.steps_taken;
  std::vector<float> mine(share_, 0.0f);
  for_each_part([&](size_t i, uint64_t in_tensor, uint64_t in_share, uint64_t count) {
    float* w = params.tensors()[i].data.data() + in_tensor;
    ops::adamw_update(w, flat_.data() + first_ + in_share, m_.data() + in_share, v_.data() + in_share,
                      static_cast<int64_t>(count), optimizer_.hyper(lr, grad_scale, matrix_[i]));
    std::memcpy(mine.data() + in_share, w, count * 4);
  });
  gather(mine, comm);
  for (size_t i = 0; i < offsets_.size(); ++i) {
    auto& w = params.tensors()[i].data;
    std::copy_n(flat_.begin() + static_cast<int64_t>(offsets_[i]), w.size(), w.begin());
  }
}

void CpuShardedAdamW::gather(const std::vector<float>& share, Stream& comm) {
  ranks_.all_gather(share.data(), flat_.data(), share_, DType::f32, comm);
  ranks_.wait(comm);
}

void CpuShardedAdamW::sync_to_host(Stream& comm) {
  if (optimizer_.m.tensors().empty()) {
    optimizer_.m = model::LlamaWeights::zeros(config_);
    optimizer_.v = model::LlamaWeights::zeros(config_);
  }
  for (int k = 0; k < 2; ++k) {
    gather(k == 0 ? m_ : v_, comm);
    model::LlamaWeights& whole = k == 0 ? optimizer_.m : optimizer_.v;
    for (size_t i = 0; i < offsets_.size(); ++i) {
      auto& t = whole.tensors()[i].data;
      std::copy_n(flat_.begin() + static_cast<int64_t>(offsets_[i]), t.size(), t.begin());
    }
  }
}

}  // namespace spillway::train
