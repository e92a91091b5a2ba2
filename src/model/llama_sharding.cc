#include "model/llama_sharding.h"

#include <string_view>

namespace spillway::model {

namespace {

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

}  // namespace

graph::ParameterSplit llama_parameter_split(const LlamaConfig& c, const graph::ValueInfo& p) {
  using graph::Placement;
  const std::string_view name = p.name;
  const int64_t q = c.num_attention_heads * c.head_dim(), kv = c.num_key_value_heads * c.head_dim();
  if (ends_with(name, "qkv_proj.weight")) return {Placement::rows, {q, kv, kv}};
  if (ends_with(name, "gate_up_proj.weight")) return {Placement::rows, {c.intermediate_size, c.intermediate_size}};
  for (std::string_view out : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight",
                               "up_proj.weight", "embed_tokens.weight", "lm_head.weight"}) {
    if (ends_with(name, out)) return {Placement::rows, {}};
  }
  for (std::string_view in : {"o_proj.weight", "down_proj.weight"}) {
    if (ends_with(name, in)) return {Placement::columns, {}};
  }
  return {Placement::whole, {}};
}

}  // namespace spillway::model
