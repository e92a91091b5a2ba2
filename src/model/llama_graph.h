// The LLaMA forward pass written with the graph builder, parameters named as
// in Hugging Face checkpoints ("model.layers.0.self_attn.q_proj.weight").
#pragma once

#include <vector>

#include "graph/builder.h"
#include "model/llama_config.h"

namespace spillway::model {

struct LlamaGraph {
  graph::Value tokens;   // [batch, seq] i32
  graph::Value targets;  // [batch, seq] i32, negative = not counted
  graph::Value logits;   // [batch, seq, vocab]
  graph::Value loss;     // mean cross-entropy, one element
  std::vector<graph::Value> parameters;  // in checkpoint order
};

LlamaGraph build_llama(graph::Builder& b, const LlamaConfig& config, int64_t batch, int64_t seq);

}  // namespace spillway::model
