// QLoRA's base: the frozen weights under LoRA's adapters stored 4-bit, NF4
// as bitsandbytes defines it (ops/nf4.h), optionally with the scales
// double-quantized, as PEFT + bitsandbytes' Linear4bit keep them. The
// adapters train over the dequantized weights: a projection's forward is
// x dequant(W)^T + (alpha / r) (x A^T) B^T.
//
// Only the projections the adapters sit on are stored NF4 (bitsandbytes
// quantizes every linear layer but the head; spillway leaves the untargeted
// projections as loaded, as LoRA does).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_weights.h"
#include "model/lora.h"
#include "ops/nf4.h"

namespace spillway::model {

struct QuantizedBase {
  LoraBase storage = LoraBase::weights;
  std::vector<std::string> names;  // the tensors stored NF4, in checkpoint order
  std::vector<ops::Nf4Tensor> tensors;
  // Where the base was quantized as it was made or read (model/qlora_stream.h),
  // the weights let go of these tensors' float32: parameter `i`
  // (parameter_specs's order) as it was before quantizing, made or read
  // again. A checkpoint writes the base so, which a resumed run quantizes
  // alike. Unset where the weights kept their values.
  std::function<void(size_t i, std::span<float> out)> original;

  uint64_t bytes() const;      // stored: the packed codes and the scales
  uint64_t f32_bytes() const;  // the same tensors in float32
  // "NF4 base: 12 projections stored in 1.20 MiB (1258291 bytes; 8.50 MiB as fp32)"
  std::string describe() const;
};

// The names of the weights `storage` keeps NF4 (none for LoraBase::weights):
// those of the projections `lora` targets, in checkpoint order.
std::vector<std::string> quantized_weight_names(const LlamaConfig& config, const LoraConfig& lora, LoraBase storage);

// Stores the base weights of the projections `lora` targets as `storage`
// says (none for LoraBase::weights) and, with `round_trip_in_place`, writes
// their dequantized values back into `weights`, which the CPU's step then
// reads: what the adapters train over is exactly the NF4 round trip.
// Without, `weights` keep the values quantized, which a checkpoint then
// holds: quantizing a double-quantized round trip again does not give it
// back (its scales' offset moves), so a resumed run must start from them.
// Error naming the tensor for a weight that holds a NaN or an infinity.
QuantizedBase quantize_lora_base(LlamaWeights& weights, const LoraConfig& lora, LoraBase storage,
                                 bool round_trip_in_place = true);

// Writes the quantized tensors' dequantized values into `weights` (making
// room where the weights let go of them): what quantize_lora_base's round
// trip in place leaves, for a base quantized as it was made.
void write_round_trip(const QuantizedBase& quantized, LlamaWeights& weights);

}  // namespace spillway::model
