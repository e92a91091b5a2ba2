#include "train/loss_weights.h"

#include "base/status.h"

namespace spillway::train {

int64_t counted_targets(std::span<const int32_t> targets) {
  int64_t n = 0;
  for (int32_t t : targets) n += t >= 0 ? 1 : 0;
  return n;
}

double loss_token_weight(int64_t micro_batches, int ranks, double step_counted_tokens) {
  if (step_counted_tokens <= 0) return 0.0;
  return static_cast<double>(micro_batches) * ranks / step_counted_tokens;
}

void fill_loss_weights(std::span<const int32_t> targets, double weight, std::span<float> out) {
  SPW_CHECK(out.size() == targets.size(), "loss weights", "got room for ", out.size(), " weights for ",
            targets.size(), " targets");
  const auto w = static_cast<float>(weight);
  for (size_t i = 0; i < targets.size(); ++i) out[i] = targets[i] >= 0 ? w : 0.0f;
}

}  // namespace spillway::train
