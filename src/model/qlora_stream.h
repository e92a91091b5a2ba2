// QLoRA's base made or read tensor by tensor: each projection the adapters
// target is quantized as soon as its float32 values exist, and they are let
// go of at once. The whole model is never in host memory as float32 (a
// 70B's is 282 GB; its NF4 base 37 GB): what is held is the NF4 base, the
// tensors kept as loaded (embedding, head, norms, untargeted projections)
// and the float32 of the projections being made right now (one while
// reading, one a thread while drawing random ones).
//
// What comes out is bit for bit what quantize_lora_base(weights, lora,
// storage, false) gives after the whole model was made: the same codes and
// scales, and the same float32 in the tensors kept. The targeted tensors
// keep their names and shapes but no values; the base's `original` makes
// or reads one again where a checkpoint needs it (model/qlora.h).
#pragma once

#include <cstdint>
#include <string>

#include "model/llama_weights.h"
#include "model/lora.h"
#include "model/qlora.h"

namespace spillway::model {

struct StreamedBase {
  LlamaWeights weights;
  QuantizedBase quantized;
};

// LlamaWeights::random(config, seed, std), the targeted projections NF4.
StreamedBase random_quantized_base(const LlamaConfig& config, uint64_t seed, const LoraConfig& lora,
                                   LoraBase storage, double std = 0.02);

// load_llama(dir), with `merged`'s adapters folded in where given (a LoRA
// checkpoint that starts the next run as its tuned model), the targeted
// projections NF4; `dir` a model folder or a GGUF file, either read a
// tensor at a time. The folder or file stays mapped while the base lives,
// so a checkpoint reads the tensors again even where it was deleted since
// (a run's old checkpoint).
StreamedBase load_quantized_base(const std::string& dir, const LoraConfig& lora, LoraBase storage,
                                 const LoraWeights* merged = nullptr);

}  // namespace spillway::model
