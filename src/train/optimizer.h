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
// Scales the gradients so their global norm is at most `max_norm` (no-op for
// max_norm <= 0). Returns the norm before clipping.
double clip_grad_norm(model::LlamaWeights& grads, double max_norm);

class AdamW {
 public:
  AdamW() = default;
  explicit AdamW(const model::LlamaConfig& config);

  // One update with learning rate `lr`; counts steps itself.
  void step(model::LlamaWeights& params, const model::LlamaWeights& grads, double lr);

  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  int64_t steps_taken = 0;
  model::LlamaWeights m, v;  // first and second moments, laid out as the parameters
};

}  // namespace spillway::train
