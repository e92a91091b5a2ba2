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

QuantizedBase quantize_lora_base(LlamaWeights& weights, const LoraConfig& lora, LoraBase storage,
                                 bool round_trip_in_place) {
  QuantizedBase q;
  q.storage = storage;
  if (storage == LoraBase::weights) return q;
  SPW_CHECK(lora.enabled(), "--lora-base", lora_base_name(storage), " keeps LoRA's base; it needs --lora-rank");
  const std::vector<ParameterSpec> specs = lora_specs(weights.config(), lora);
  constexpr std::string_view kA = ".lora_A.weight";
  for (const ParameterSpec& s : specs) {
    if (!s.name.ends_with(kA)) continue;
    const std::string name = s.name.substr(0, s.name.size() - kA.size()) + ".weight";
    NamedTensor& w = weights.at(name);
    q.tensors.push_back(ops::nf4_quantize(w.data, storage == LoraBase::nf4_double, name.c_str()));
    if (round_trip_in_place) q.tensors.back().dequantize(w.data);
    q.names.push_back(name);
  }
  return q;
}

}  // namespace spillway::model
