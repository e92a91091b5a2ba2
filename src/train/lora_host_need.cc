#include "train/lora_host_need.h"

#include <algorithm>
#include <set>

#include "base/bytes.h"
#include "base/status.h"
#include "model/llama_weights.h"
#include "model/qlora.h"
#include "ops/nf4.h"

namespace spillway::train {

std::string LoraHostNeed::describe(model::LoraBase base) const {
  std::string d;
  if (base != model::LoraBase::weights) {
    d += std::string(model::lora_base_name(base)) + " base " + format_bytes(nf4) + ", float32 kept " +
         format_bytes(kept) + " (embedding, head, norms, untargeted projections), in flight " +
         format_bytes(in_flight) + " (" + std::to_string(makers) + " projection" + (makers == 1 ? "" : "s") +
         " quantized at once, or one bf16 upload)";
  } else {
    d += "base " + format_bytes(kept) + " (float32), in flight " + format_bytes(in_flight) + " (one bf16 upload)";
  }
  d += ", adapters' state " + format_bytes(adapters) + ", runtime " + format_bytes(runtime);
  if (base != model::LoraBase::weights) d += "; never the whole model's " + format_bytes(whole_fp32) + " in float32";
  return d;
}

LoraHostNeed lora_host_need(const model::LlamaConfig& config, const model::LoraConfig& lora, model::LoraBase base,
                            int64_t makers, uint64_t runtime) {
  const std::vector<std::string> names = model::quantized_weight_names(config, lora, base);
  const std::set<std::string> quantized(names.begin(), names.end());
  const bool dq = base == model::LoraBase::nf4_double;
  LoraHostNeed need;
  need.runtime = runtime;
  uint64_t largest_quantized = 0, largest_upload = 0;
  for (const model::ParameterSpec& s : model::parameter_specs(config)) {
    const auto n = static_cast<uint64_t>(s.shape.numel());
    need.whole_fp32 += n * sizeof(float);
    if (quantized.count(s.name)) {
      need.nf4 += ops::nf4_stored_bytes(s.shape.numel(), dq);
      largest_quantized = std::max(largest_quantized, n * sizeof(float));
    } else {
      need.kept += n * sizeof(float);
      largest_upload = std::max(largest_upload, n * 2);
    }
  }
  need.makers = std::clamp<int64_t>(makers, 1, std::max<int64_t>(1, static_cast<int64_t>(names.size())));
  if (names.empty()) need.makers = 0;
  need.in_flight = std::max(largest_upload, static_cast<uint64_t>(need.makers) * largest_quantized);
  for (const model::ParameterSpec& s : model::lora_specs(config, lora)) {
    need.adapters += 3 * static_cast<uint64_t>(s.shape.numel()) * sizeof(float);
  }
  return need;
}

void check_lora_host_fits(const LoraHostNeed& need, uint64_t budget, model::LoraBase base,
                          const std::string& budget_from) {
  if (need.total() <= budget) return;
  throw Error("--host-mem", "LoRA's host memory needs " + format_bytes(need.total()) + " (" + need.describe(base) +
                                "), more than the budget of " +
                                format_bytes(budget) + " (" + budget_from + ")" +
                                (base == model::LoraBase::weights ? "; --lora-base nf4 keeps the base 4-bit" : ""));
}

}  // namespace spillway::train
