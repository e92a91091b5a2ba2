// LoRA adapters on a LLaMA's projections, as PEFT defines them: a chosen
// projection y = x W^T becomes
//   y = x W^T + (alpha / r) * (x A^T) B^T
// with A [r, in] and B [out, r] trained and W frozen. A starts uniform in
// ±1/sqrt(in) (PEFT's default, Kaiming-uniform with a = sqrt(5)) and B at
// zero, so a new adapter leaves the model as it was.
//
// The adapters' names are the module's in the checkpoint plus
// ".lora_A.weight" / ".lora_B.weight"
// ("model.layers.0.self_attn.q_proj.lora_A.weight"); PEFT's files prefix
// them with "base_model.model." (model/lora_io.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace spillway::model {

// The projections an adapter can sit on, in the order a layer declares them.
inline constexpr std::array<std::string_view, 7> kLoraProjections = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                                     "gate_proj", "up_proj", "down_proj"};

// How LoRA's frozen base weights of the targeted projections are kept
// (model/qlora.h): as loaded, NF4 (QLoRA), or NF4 with double-quantized
// scales. kLoraBaseNames names them, indexed by value.
enum class LoraBase : uint8_t { weights, nf4, nf4_double };
inline constexpr std::array<std::string_view, 3> kLoraBaseNames = {"weights", "nf4", "nf4-dq"};
inline std::string_view lora_base_name(LoraBase base) { return kLoraBaseNames[static_cast<size_t>(base)]; }

struct LoraConfig {
  int64_t rank = 0;  // r; 0: no adapters
  double alpha = 16;
  // Dropout on each adapter's input while training (PEFT's lora_dropout):
  // x A^T becomes dropout(x) A^T, each adapter drawing its own elements.
  double dropout = 0;
  // Of kLoraProjections, in that order.
  std::vector<std::string> targets;

  bool enabled() const { return rank > 0; }
  double scaling() const { return alpha / static_cast<double>(rank); }
  bool targets_projection(std::string_view projection) const;
};

// "q,k,v,o,gate,up,down" (or the full names, "q_proj"; "all" for the seven)
// as kLoraProjections in their order; Error naming `what` for a name that
// is none of them, or an empty list.
std::vector<std::string> parse_lora_targets(std::string_view list, std::string_view what);

// Error naming `what` and the field when the rank, alpha, dropout or
// targets are out of range.
void check_lora_config(const LoraConfig& lora, std::string_view what);

// Names and shapes of the adapters of `config`'s model, read off the graph
// builder (the one description of the model): A then B of each targeted
// projection, layer by layer.
std::vector<ParameterSpec> lora_specs(const LlamaConfig& config, const LoraConfig& lora);

// The adapters' tensors in lora_specs' order (index i binds the graph's
// adapter i), fp32.
class LoraWeights {
 public:
  LoraWeights() = default;
  // PEFT's initialization: A uniform in ±1/sqrt(in), each tensor from its
  // own stream of the seed; B zero.
  static LoraWeights init(const LlamaConfig& config, const LoraConfig& lora, uint64_t seed);
  static LoraWeights zeros(const LlamaConfig& config, const LoraConfig& lora);

  const LoraConfig& lora() const { return lora_; }
  std::vector<NamedTensor>& tensors() { return tensors_; }
  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  // Throws Error naming the tensor when there is no such adapter.
  const NamedTensor& at(std::string_view name) const;
  int64_t numel() const;

 private:
  LoraConfig lora_;
  std::vector<NamedTensor> tensors_;
};

// The base weights with every adapter folded in: W + (alpha / r) B A (what
// PEFT's merge_and_unload gives), a plain model.
LlamaWeights merge_lora(const LlamaWeights& base, const LoraWeights& adapters);
// The same for one base tensor (unchanged where no adapter sits on it): a
// model merged as it is read, tensor by tensor.
void merge_lora_into(NamedTensor& w, const LoraWeights& adapters);

}  // namespace spillway::model
