#include "model/llama_sharding.h"

#include <functional>
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

std::vector<graph::ParameterSplit> llama_tensor_splits(const LlamaConfig& config) {
  std::vector<graph::ParameterSplit> splits;
  for (const ParameterSpec& spec : parameter_specs(config)) {
    graph::ValueInfo info;
    info.name = spec.name;
    info.shape = spec.shape;
    splits.push_back(llama_parameter_split(config, info));
  }
  return splits;
}

graph::RankGraph shard_llama(const graph::Graph& forward, LlamaGraph& m, const LlamaConfig& config, DType dtype,
                             const graph::TensorParallelism& tp) {
  graph::RankGraph r = graph::shard_graph(
      forward, dtype, [&](const graph::ValueInfo& v) { return llama_parameter_split(config, v); }, tp);
  for (graph::Value* v : {&m.tokens, &m.targets, &m.loss_weights, &m.positions, &m.doc_starts, &m.logits, &m.loss,
                          &m.lora_scaling, &m.hidden_in, &m.hidden_out}) {
    if (v->valid()) *v = r.of(*v);
  }
  for (auto* values : {&m.parameters, &m.adapters}) {
    for (graph::Value& v : *values) v = r.of(v);
  }
  return r;
}

namespace {

// `cut(i)` is told when tensor i's piece is made.
LlamaWeights pieces_of(const LlamaWeights& whole, const LlamaConfig& config, int rank, int ranks,
                       const std::function<void(size_t)>& cut) {
  const std::vector<graph::ParameterSplit> splits = llama_tensor_splits(config);
  // Filled piece by piece: the whole model's zeros made first would be a
  // second model's worth of host memory at start-up.
  LlamaWeights out = LlamaWeights::without_values(config);
  for (size_t i = 0; i < out.tensors().size(); ++i) {
    NamedTensor& t = out.tensors()[i];
    const Shape whole_shape = t.shape;
    t.shape = graph::piece_shape(whole_shape, splits[i], rank, ranks);
    if (whole.tensors().empty()) {
      t.data.assign(static_cast<size_t>(t.shape.numel()), 0.0f);
      continue;
    }
    t.data = graph::piece_of<float>(whole.tensors().at(i).data, whole_shape, splits[i], rank, ranks);
    cut(i);
  }
  return out;
}

}  // namespace

LlamaWeights llama_pieces(const LlamaWeights& whole, const LlamaConfig& config, int rank, int ranks) {
  return pieces_of(whole, config, rank, ranks, [](size_t) {});
}

LlamaWeights take_llama_pieces(LlamaWeights& whole, const LlamaConfig& config, int rank, int ranks) {
  return pieces_of(whole, config, rank, ranks,
                   [&whole](size_t i) { std::vector<float>().swap(whole.tensors()[i].data); });
}

}  // namespace spillway::model
