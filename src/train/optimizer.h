// AdamW over a model's tensors, with global-norm gradient clipping. Weight
// decay applies to matrices only: decaying RMSNorm gains toward zero would
// fight the normalization.
#pragma once

#include <cstdint>

#include "model/llama_weights.h"
#include "ops/adamw.h"

namespace spillway::train {

// L2 norm of all gradients together, summed in double in tensor order.
double global_grad_norm(const model::LlamaWeights& grads);
double global_grad_norm(const std::vector<model::NamedTensor>& grads);
// What clipping multiplies gradients of global norm `norm` by:
// max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm, else 1.
double clip_factor(double norm, double max_norm);
// The one scale AdamW applies to a sum of `micro_batches` micro-batches'
// gradients whose global norm is `sum_norm`: their mean, clipped to
// `max_norm`. `*mean_norm` (when given) receives the mean's norm before
// clipping, sum_norm / micro_batches.
double accumulated_grad_scale(double sum_norm, int64_t micro_batches, double max_norm, double* mean_norm = nullptr);
// Scales the gradients so their global norm is at most `max_norm` (no-op for
// max_norm <= 0). Returns the norm before clipping.
double clip_grad_norm(model::LlamaWeights& grads, double max_norm);

class AdamW {
 public:
  AdamW() = default;
  explicit AdamW(const model::LlamaConfig& config);

  // One update with learning rate `lr`, from grads * grad_scale (see
  // ops::AdamWHyper::grad_scale); counts steps itself.
  void step(model::LlamaWeights& params, const model::LlamaWeights& grads, double lr, double grad_scale = 1.0);
  // The same over tensors whose moments the caller keeps (`m` and `v` laid
  // out as `params`): LoRA's adapters (train/lora_state.h).
  void step(std::vector<model::NamedTensor>& params, const std::vector<model::NamedTensor>& grads,
            std::vector<model::NamedTensor>& m, std::vector<model::NamedTensor>& v, double lr,
            double grad_scale = 1.0);

  // The kernel's arguments for one tensor at the current step: matrices
  // (rank >= 2) decay, vectors do not.
  ops::AdamWHyper hyper(double lr, double grad_scale, bool matrix) const;

  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  int64_t steps_taken = 0;
  model::LlamaWeights m, v;  // first and second moments, laid out as the parameters
};

}  // namespace spillway::train
