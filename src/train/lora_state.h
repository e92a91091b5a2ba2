// What LoRA training keeps (model/lora.h): the adapters in fp32 and AdamW's
// moments of them, laid out alike. The base weights are frozen: no
// gradient, no moments, no master copy beyond the weights themselves.
#pragma once

#include "model/llama_config.h"
#include "model/lora.h"

namespace spillway::train {

struct LoraState {
  model::LoraWeights adapters, m, v;

  // New adapters (PEFT's initialization from `seed`) and zero moments.
  static LoraState fresh(const model::LlamaConfig& config, const model::LoraConfig& lora, uint64_t seed) {
    return {model::LoraWeights::init(config, lora, seed), model::LoraWeights::zeros(config, lora),
            model::LoraWeights::zeros(config, lora)};
  }
};

}  // namespace spillway::train
