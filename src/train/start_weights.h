// The weights a training or fine-tuning run starts from: drawn at random,
// or read from a model folder, run checkpoint or GGUF file. With QLoRA the
// targeted projections are quantized as they come (model/qlora_stream.h),
// after the host memory that takes is checked against the budget
// (train/lora_host_need.h), so a 70B base that fits the host as NF4 is never
// held in float32 first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/llama_weights.h"
#include "model/qlora.h"
#include "train/run_config.h"

namespace spillway::train {

struct StartWeights {
  model::LlamaWeights weights;
  // With NF4: the base quantized as it came, for EngineOptions::lora_quantized.
  std::optional<model::QuantizedBase> quantized;
};

// load_llama(dir), with a LoRA checkpoint's adapter merged in where
// `merge_adapter` and the folder holds one (it starts the run as its tuned
// model). `ranks_on_host` share the host's memory.
StartWeights load_start_weights(const std::string& dir, const RunConfig& run, bool merge_adapter, int ranks_on_host);

// LlamaWeights::random(config, seed).
StartWeights random_start_weights(const model::LlamaConfig& config, const RunConfig& run, uint64_t seed,
                                  int ranks_on_host);

// Refuses, before anything is made, a GPU LoRA run whose host memory
// (train/lora_host_need.h) does not fit --host-mem (the host's, shared by
// its ranks), or without one, 90% of what is available beside what the
// process holds already. `makers`: projections quantized at once.
void check_lora_host_memory(const model::LlamaConfig& config, const RunConfig& run, int64_t makers,
                            int ranks_on_host);

}  // namespace spillway::train
