#include "train/optimizer.h"

#include <cmath>

namespace spillway::train {

double global_grad_norm(const model::LlamaWeights& grads) {
  double sum = 0;
  for (const auto& t : grads.tensors()) {
    for (float g : t.data) sum += static_cast<double>(g) * g;
  }
  return std::sqrt(sum);
}

double clip_grad_norm(model::LlamaWeights& grads, double max_norm) {
  double norm = global_grad_norm(grads);
  if (max_norm > 0 && norm > max_norm) {
    float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (auto& t : grads.tensors()) {
      for (float& g : t.data) g *= scale;
    }
  }
  return norm;
}

AdamW::AdamW(const model::LlamaConfig& config)
    : m(model::LlamaWeights::zeros(config)), v(model::LlamaWeights::zeros(config)) {}

void AdamW::step(model::LlamaWeights& params, const model::LlamaWeights& grads, double lr) {
  ++steps_taken;
  auto& p = params.tensors();
  for (size_t i = 0; i < p.size(); ++i) {
    ops::AdamWHyper hp;
    hp.lr = lr;
    hp.beta1 = beta1;
    hp.beta2 = beta2;
    hp.eps = eps;
    hp.weight_decay = p[i].shape.rank() >= 2 ? weight_decay : 0.0;
    hp.step = steps_taken;
    ops::adamw_update(p[i].data.data(), grads.tensors()[i].data.data(), m.tensors()[i].data.data(),
                      v.tensors()[i].data.data(), p[i].shape.numel(), hp);
  }
}

}  // namespace spillway::train
