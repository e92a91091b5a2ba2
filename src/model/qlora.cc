#include "model/qlora.h"

#include "base/bytes.h"
#include "base/status.h"

namespace spillway::model {

uint64_t QuantizedBase::bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.bytes();
  return n;
}

uint64_t QuantizedBase::f32_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += static_cast<uint64_t>(t.numel) * sizeof(float);
  return n;
}

std::string QuantizedBase::describe() const {
  return std::string(storage == LoraBase::nf4_double ? "NF4 base (double-quantized scales)" : "NF4 base") + ": " +
         std::to_string(tensors.size()) + " projections stored in " + format_bytes(bytes()) + " (" +
         std::to_string(bytes()) + " bytes; " + format_bytes(f32_bytes()) + " as fp32)";
}

std::vector<std::string> quantized_weight_names(const LlamaConfig& config, const LoraConfig& lora, LoraBase storage) {
  std::vector<std::string> names;
  if (storage == LoraBase::weights) return names;
  SPW_CHECK(lora.enabled(), "--lora-base", lora_base_name(storage), " keeps LoRA's base; it needs --lora-rank");
  constexpr std::string_view kA = ".lora_A.weight";
  for (const ParameterSpec& s : lora_specs(config, lora)) {
    if (s.name.ends_with(kA)) names.push_back(s.name.substr(0, s.name.size() - kA.size()) + ".weight");
  }
  return names;
}

QuantizedBase quantize_lora_base(LlamaWeights& weights, const LoraConfig& lora, LoraBase storage,
                                 bool round_trip_in_place) {
  QuantizedBase q;
  q.storage = storage;
  q.names = quantized_weight_names(weights.config(), lora, storage);
  for (const std::string& name : q.names) {
    NamedTensor& w = weights.at(name);
    q.tensors.push_back(ops::nf4_quantize(w.data, storage == LoraBase::nf4_double, name.c_str()));
    if (round_trip_in_place) q.tensors.back().dequantize(w.data);
  }
  return q;
}

void write_round_trip(const QuantizedBase& quantized, LlamaWeights& weights) {
  for (size_t k = 0; k < quantized.names.size(); ++k) {
    NamedTensor& w = weights.at(quantized.names[k]);
    w.data.resize(static_cast<size_t>(w.shape.numel()));
    quantized.tensors[k].dequantize(w.data);
  }
}

}  // namespace spillway::model
