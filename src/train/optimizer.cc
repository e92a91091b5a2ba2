#include "train/optimizer.h"

#include <cmath>

namespace spillway::train {

double global_grad_norm(const model::LlamaWeights& grads) { return global_grad_norm(grads.tensors()); }

double global_grad_norm(const std::vector<model::NamedTensor>& grads) {
  double sum = 0;
  for (const auto& t : grads) {
    for (float g : t.data) sum += static_cast<double>(g) * g;
  }
  return std::sqrt(sum);
}

double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double accumulated_grad_scale(double sum_norm, int64_t micro_batches, double max_norm, double* mean_norm) {
  const double mean = 1.0 / static_cast<double>(micro_batches);
  const double norm = sum_norm * mean;
  if (mean_norm) *mean_norm = norm;
  return mean * clip_factor(norm, max_norm);
}

double clip_grad_norm(model::LlamaWeights& grads, double max_norm) {
  double norm = global_grad_norm(grads);
  if (max_norm > 0 && norm > max_norm) {
    float scale = static_cast<float>(clip_factor(norm, max_norm));
    for (auto& t : grads.tensors()) {
      for (float& g : t.data) g *= scale;
    }
  }
  return norm;
}

AdamW::AdamW(const model::LlamaConfig& config)
    : m(model::LlamaWeights::zeros(config)), v(model::LlamaWeights::zeros(config)) {}

ops::AdamWHyper AdamW::hyper(double lr, double grad_scale, bool matrix) const {
  ops::AdamWHyper hp;
  hp.lr = lr;
  hp.beta1 = beta1;
  hp.beta2 = beta2;
  hp.eps = eps;
  hp.weight_decay = matrix ? weight_decay : 0.0;
  hp.step = steps_taken;
  hp.grad_scale = grad_scale;
  return hp;
}

void AdamW::step(model::LlamaWeights& params, const model::LlamaWeights& grads, double lr, double grad_scale) {
  step(params.tensors(), grads.tensors(), m.tensors(), v.tensors(), lr, grad_scale);
}

void AdamW::step(std::vector<model::NamedTensor>& p, const std::vector<model::NamedTensor>& grads,
                 std::vector<model::NamedTensor>& m_of, std::vector<model::NamedTensor>& v_of, double lr,
                 double grad_scale) {
  ++steps_taken;
  for (size_t i = 0; i < p.size(); ++i) {
    const ops::AdamWHyper hp = hyper(lr, grad_scale, p[i].shape.rank() >= 2);
    ops::adamw_update(p[i].data.data(), grads[i].data.data(), m_of[i].data.data(), v_of[i].data.data(),
                      p[i].shape.numel(), hp);
  }
}

}  // namespace spillway::train
