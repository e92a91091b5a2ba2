#include "model/llama_graph.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "base/status.h"
#include "ops/add_op.h"
#include "ops/attention_op.h"
#include "ops/collective_op.h"
#include "ops/cross_entropy_op.h"
#include "ops/dropout_op.h"
#include "ops/embedding_op.h"
#include "ops/rows_op.h"
#include "ops/matmul_op.h"
#include "ops/rmsnorm_op.h"
#include "ops/rope_op.h"
#include "ops/swiglu_op.h"

namespace spillway::model {

namespace {

// A layer's attention over a rank's two chunks (LlamaContext): each chunk's
// queries and keys rotated at its positions; every rank's keys and values
// gathered and put in position order; each chunk's queries attending to
// the keys up to their own positions.
graph::Value context_attention(graph::Builder& b, graph::Value q, graph::Value k, graph::Value v,
                               const LlamaConfig& c, const LlamaContext& cp, int64_t chunk,
                               const std::shared_ptr<const std::vector<float>>& inv_freq) {
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, hd = c.head_dim();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const std::string which[2] = {".first", ".second"};
  auto rotated = [&](graph::Value y, int64_t h, int part, const std::string& name) {
    graph::Value rows = ops::take_rows(b, y, part * chunk, chunk, name + which[part] + "_chunk");
    return ops::rope(b, rows, h, inv_freq, cp.chunk_start(part, chunk), name + which[part]);
  };
  // Gathered in rank order, each rank's two chunks: chunk j of the sequence
  // is rank j's first below `ranks`, else rank 2 ranks - 1 - j's second.
  auto in_position_order = [&](graph::Value mine, const std::string& name) {
    const Shape whole{1, 2 * chunk * cp.ranks, b.info(mine).shape[2]};
    graph::Value all = ops::all_gather(b, mine, cp.group, cp.ranks, false, whole, name + "_all_gather");
    std::vector<graph::Value> chunks;
    for (int64_t j = 0; j < 2 * cp.ranks; ++j) {
      const int64_t rank = j < cp.ranks ? j : 2 * cp.ranks - 1 - j, part = j < cp.ranks ? 0 : 1;
      chunks.push_back(ops::take_rows(b, all, (2 * rank + part) * chunk, chunk, name + "_chunk" + std::to_string(j)));
    }
    return ops::concat_rows(b, chunks, name + "_in_order");
  };
  graph::Value keys = in_position_order(
      ops::concat_rows(b, {rotated(k, kv_heads, 0, "self_attn.k_rope"), rotated(k, kv_heads, 1, "self_attn.k_rope")},
                       "self_attn.k_rope"),
      "self_attn.k");
  graph::Value values = in_position_order(v, "self_attn.v");
  graph::Value out[2];
  for (int part = 0; part < 2; ++part) {
    out[part] = ops::attention(b, rotated(q, heads, part, "self_attn.q_rope"), keys, values, heads, kv_heads, scale,
                               "self_attn.attention" + which[part], {}, cp.chunk_start(part, chunk));
  }
  return ops::concat_rows(b, {out[0], out[1]}, "self_attn.attention");
}

}  // namespace

void check_context_sequence(int64_t seq, int ranks) {
  SPW_CHECK(seq % (2 * static_cast<int64_t>(ranks)) == 0, "--cp", "a sequence of ", seq, " tokens does not cut into ",
            2 * ranks, " chunks (two for each of ", ranks, " ranks)");
}

std::span<const int32_t> take_context_chunks(const LlamaContext& c, std::span<const int32_t> sequence,
                                             std::vector<int32_t>& out) {
  if (c.ranks == 1) return sequence;
  check_context_sequence(static_cast<int64_t>(sequence.size()), c.ranks);
  const size_t chunk = sequence.size() / static_cast<size_t>(2 * c.ranks);
  out.resize(2 * chunk);
  for (int which = 0; which < 2; ++which) {
    const auto from = sequence.subspan(static_cast<size_t>(c.chunk_start(which, static_cast<int64_t>(chunk))), chunk);
    std::copy(from.begin(), from.end(), out.begin() + static_cast<std::ptrdiff_t>(which * chunk));
  }
  return out;
}

LlamaGraph build_llama(graph::Builder& b, const LlamaConfig& c, int64_t batch, int64_t seq,
                       const LlamaGraphOptions& options) {
  c.validate("llama config");
  LlamaGraph m;
  const int64_t d = c.hidden_size, hd = c.head_dim();
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const LlamaStage& stage = options.stage;
  const int64_t last_layer = stage.last_layer < 0 ? c.num_hidden_layers : stage.last_layer;
  SPW_CHECK(stage.first_layer >= 0 && stage.first_layer < last_layer && last_layer <= c.num_hidden_layers,
            "pipeline stage", "layers [", stage.first_layer, ", ", last_layer, ") of a model of ",
            c.num_hidden_layers);
  const bool has_loss = last_layer == c.num_hidden_layers;
  const LlamaContext& cp = options.context;
  const bool split_sequence = cp.ranks > 1;
  SPW_CHECK(!split_sequence || (batch == 1 && !options.fused_projections && !options.documents && options.lora == nullptr),
            "context parallelism", "takes one sequence a micro-batch (batch 1), separate projections and no ",
            "packed documents or LoRA so far");
  if (split_sequence) check_context_sequence(seq * cp.ranks, cp.ranks);
  const int64_t chunk = seq / 2;
  // Checkpoint tensors named before this stage's: the embedding and nine
  // per layer (stacked projections stack the same tensors).
  int tensors = stage.has_embedding() ? 0 : static_cast<int>(1 + kLlamaLayerTensors * stage.first_layer);
  const LoraConfig* lora = options.lora && options.lora->enabled() ? options.lora : nullptr;
  if (lora) {
    check_lora_config(*lora, "LoRA");
    SPW_CHECK(!options.fused_projections, "LoRA", "adapters sit on separate q, k, v, gate and up projections; ",
              "the stacked ones are not supported with them");
  }
  // With adapters the base weights are frozen: inputs that autodiff leaves alone.
  auto param = [&](const std::string& name, Shape shape) {
    graph::Value v = lora ? b.input(name, std::move(shape), b.dtype()) : b.parameter(name, std::move(shape));
    m.parameters.push_back(v);
    m.parameter_parts.push_back({tensors++});
    return v;
  };
  // Checkpoint tensors of `rows` rows each (and d columns), stacked.
  auto stacked = [&](const std::string& name, std::initializer_list<int64_t> rows) {
    std::vector<int> parts;
    int64_t total = 0;
    for (int64_t r : rows) {
      parts.push_back(tensors++);
      total += r;
    }
    graph::Value v = b.parameter(name, Shape{total, d});
    m.parameters.push_back(v);
    m.parameter_parts.push_back(std::move(parts));
    return v;
  };
  auto inv_freq = std::make_shared<const std::vector<float>>(ops::rope_inv_freq(hd, c.rope_theta, c.rope_scaling));

  if (lora) m.lora_scaling = b.input("lora_scaling", Shape{lora->rank, lora->rank}, b.dtype());
  const bool dropout = lora && options.adapter_dropout && lora->dropout > 0;
  if (dropout) m.dropout_key = b.input("dropout_key", Shape{2}, DType::i32);
  int64_t layer_index = 0;  // the layer `project` is called for
  // x W^T for the projection `module` ("self_attn.q_proj"), plus its adapter's
  // (alpha / r) (x A^T) B^T where LoRA targets it.
  auto project = [&](graph::Value x, graph::Value w, const std::string& module) {
    graph::Value y = ops::linear(b, x, w, module);
    const std::string projection = module.substr(module.find('.') + 1);
    if (!lora || !lora->targets_projection(projection)) return y;
    const Shape ws = b.info(w).shape;  // a copy: adding the adapters grows the graph's values
    graph::Value a = b.parameter(module + ".lora_A.weight", Shape{lora->rank, ws[1]});
    graph::Value up = b.parameter(module + ".lora_B.weight", Shape{ws[0], lora->rank});
    m.adapters.push_back(a);
    m.adapters.push_back(up);
    graph::Value adapter_in = x;
    if (dropout) {
      // Each adapter its own draws, named by its layer and projection so
      // that every layout of the model draws alike.
      const auto at = std::find(kLoraProjections.begin(), kLoraProjections.end(), projection);
      const auto salt = static_cast<uint32_t>(layer_index * static_cast<int64_t>(kLoraProjections.size()) +
                                              (at - kLoraProjections.begin()));
      adapter_in = ops::dropout(b, x, m.dropout_key, lora->dropout, salt, module + ".lora_dropout");
    }
    graph::Value down = ops::linear(b, adapter_in, a, module + ".lora_A");
    graph::Value scaled = ops::linear(b, down, m.lora_scaling, module + ".lora_scaling");
    return ops::add(b, y, ops::linear(b, scaled, up, module + ".lora_B"), module + ".lora_add");
  };

  if (stage.has_embedding()) m.tokens = b.input("tokens", Shape{batch, seq}, DType::i32);
  if (has_loss) m.targets = b.input("targets", Shape{batch, seq}, DType::i32);
  if (options.documents) {
    m.positions = b.input("positions", Shape{batch, seq}, DType::i32);
    m.doc_starts = b.input("doc_starts", Shape{batch, seq}, DType::i32);
  }
  graph::Value embed, h;
  if (stage.has_embedding()) {
    embed = param("model.embed_tokens.weight", Shape{c.vocab_size, d});
    h = ops::embedding(b, embed, m.tokens, "model.embed_tokens");
  } else {
    h = m.hidden_in = b.input("hidden_in", Shape{batch, seq, d}, b.dtype());
  }

  for (int64_t i = stage.first_layer; i < last_layer; ++i) {
    auto layer = b.scope("model.layers." + std::to_string(i));
    layer_index = i;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    graph::Value ln1 = param("input_layernorm.weight", Shape{d});
    graph::Value a;
    if (options.fused_projections) {
      graph::Value wqkv = stacked("self_attn.qkv_proj.weight", {heads * hd, kv_heads * hd, kv_heads * hd});
      graph::Value x = ops::rmsnorm(b, h, ln1, c.rms_norm_eps, "input_layernorm");
      graph::Value qkv = ops::rope(b, ops::linear(b, x, wqkv, "self_attn.qkv_proj"), heads + 2 * kv_heads, inv_freq, 0,
                                "self_attn.qk_rope", heads + kv_heads, m.positions);
      a = ops::attention_packed(b, qkv, heads, kv_heads, scale, "self_attn.attention", m.doc_starts);
    } else {
      graph::Value wq = param("self_attn.q_proj.weight", Shape{heads * hd, d});
      graph::Value wk = param("self_attn.k_proj.weight", Shape{kv_heads * hd, d});
      graph::Value wv = param("self_attn.v_proj.weight", Shape{kv_heads * hd, d});
      graph::Value x = ops::rmsnorm(b, h, ln1, c.rms_norm_eps, "input_layernorm");
      graph::Value q = project(x, wq, "self_attn.q_proj");
      graph::Value k = project(x, wk, "self_attn.k_proj");
      graph::Value v = project(x, wv, "self_attn.v_proj");
      if (split_sequence) {
        a = context_attention(b, q, k, v, c, cp, chunk, inv_freq);
      } else {
        q = ops::rope(b, q, heads, inv_freq, 0, "self_attn.q_rope", 0, m.positions);
        k = ops::rope(b, k, kv_heads, inv_freq, 0, "self_attn.k_rope", 0, m.positions);
        a = ops::attention(b, q, k, v, heads, kv_heads, scale, "self_attn.attention", m.doc_starts);
      }
    }
    graph::Value wo = param("self_attn.o_proj.weight", Shape{d, heads * hd});
    h = ops::add(b, h, project(a, wo, "self_attn.o_proj"), "attn_residual");
    graph::Value ln2 = param("post_attention_layernorm.weight", Shape{d});
    graph::Value x = ops::rmsnorm(b, h, ln2, c.rms_norm_eps, "post_attention_layernorm");
    graph::Value act;
    if (options.fused_projections) {
      const int64_t ffn = c.intermediate_size;
      graph::Value wgu = stacked("mlp.gate_up_proj.weight", {ffn, ffn});
      act = ops::swiglu_packed(b, ops::linear(b, x, wgu, "mlp.gate_up_proj"), "mlp.swiglu");
    } else {
      graph::Value wg = param("mlp.gate_proj.weight", Shape{c.intermediate_size, d});
      graph::Value wu = param("mlp.up_proj.weight", Shape{c.intermediate_size, d});
      graph::Value gate = project(x, wg, "mlp.gate_proj");
      graph::Value up = project(x, wu, "mlp.up_proj");
      act = ops::swiglu(b, gate, up, "mlp.swiglu");
    }
    graph::Value wd = param("mlp.down_proj.weight", Shape{d, c.intermediate_size});
    h = ops::add(b, h, project(act, wd, "mlp.down_proj"), "mlp_residual");
  }

  if (!has_loss) {
    m.hidden_out = h;
    return m;
  }
  graph::Value norm = param("model.norm.weight", Shape{d});
  h = ops::rmsnorm(b, h, norm, c.rms_norm_eps, "model.norm");
  graph::Value head;
  if (!c.tie_word_embeddings) {
    head = param("lm_head.weight", Shape{c.vocab_size, d});
  } else if (embed.valid()) {
    head = embed;
  } else {
    // The last stage of a pipeline holds its own copy of a tied table
    // (checkpoint tensor 0), kept alike with the first stage's.
    head = lora ? b.input("model.embed_tokens.weight", Shape{c.vocab_size, d}, b.dtype())
                : b.parameter("model.embed_tokens.weight", Shape{c.vocab_size, d});
    m.parameters.push_back(head);
    m.parameter_parts.push_back({0});
  }
  m.logits = ops::linear(b, h, head, "lm_head");
  if (options.weighted_loss) {
    m.loss_weights = b.input("loss_weights", Shape{batch, seq}, graph::accumulation_dtype(b.dtype()));
    m.loss = ops::cross_entropy_weighted(b, m.logits, m.targets, m.loss_weights, "loss");
  } else {
    m.loss = ops::cross_entropy(b, m.logits, m.targets, "loss");
  }
  return m;
}

std::vector<uint64_t> stacked_offsets(const std::vector<std::vector<int>>& stacks,
                                      const std::vector<int64_t>& numel, uint64_t align) {
  auto aligned = [&](uint64_t at) { return (at + align - 1) / align * align; };
  std::vector<uint64_t> offsets(numel.size() + 1, 0);
  uint64_t at = 0;
  for (const auto& stack : stacks) {
    at = aligned(at);
    for (int t : stack) {
      offsets[static_cast<size_t>(t)] = at;
      at += static_cast<uint64_t>(numel[static_cast<size_t>(t)]);
    }
  }
  offsets.back() = aligned(at);
  return offsets;
}

}  // namespace spillway::model
