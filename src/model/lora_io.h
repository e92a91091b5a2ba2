// LoRA adapters as PEFT keeps them: a folder with adapter_config.json (the
// LoraConfig's fields under PEFT's names: "peft_type": "LORA", "r",
// "lora_alpha", "lora_dropout", "target_modules", ...) and
// adapter_model.safetensors, whose tensors are named as the model's modules
// under PEFT's wrapper: "base_model.model.model.layers.0.self_attn.q_proj
// .lora_A.weight" (A [r, in], B [out, r]). PEFT's PeftModel.from_pretrained
// reads such a folder over the base model, and spillway reads PEFT's back.
//
// Reading checks every field spillway would otherwise misread (rsLoRA's or
// DoRA's scaling, per-module ranks, bias training, a target pattern) and
// refuses it in one line naming the file and the field.
#pragma once

#include <string>

#include "model/llama_config.h"
#include "model/lora.h"

namespace spillway::model {

inline constexpr const char* kPeftTensorPrefix = "base_model.model.";

// Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors (fp32),
// each atomically, creating `dir`. `base_model` is recorded as
// base_model_name_or_path.
void save_peft_adapter(const std::string& dir, const LoraWeights& adapters, const std::string& base_model);

// Whether `dir` holds a PEFT adapter (its adapter_config.json).
bool holds_peft_adapter(const std::string& dir);

// The adapter in `dir` for a model of `config`, its LoraConfig as the file
// says (lora_dropout too: a resumed run trains on with it; inference drops
// nothing).
LoraWeights load_peft_adapter(const std::string& dir, const LlamaConfig& config);

}  // namespace spillway::model
