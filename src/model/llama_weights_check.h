// The weights a Hugging Face folder holds, checked against its config.json
// before (and, for a tied head, after) they are read: a config that asks
// for fewer layers than the file holds would otherwise run a truncated
// model, and a tensor the model has no place for would be dropped silently.
#pragma once

#include <string>

#include "model/llama_weights.h"
#include "model/weight_directory.h"

namespace spillway::model {

// True for tensors some exporters write that spillway's model has no use
// for and that carry nothing of the model: rotary `inv_freq` buffers, which
// follow from rope_theta and head_dim.
bool is_ignorable_tensor(std::string_view name);

// Before reading: the layer count of the weights equals the config's
// num_hidden_layers (an Error on `config_path` naming both numbers), and
// every tensor is one of the config's parameters, an ignorable one, or
// `lm_head.weight` beside tied embeddings (an Error naming the file that
// holds it and the tensor). Missing tensors and wrong shapes are found
// when reading.
void check_weight_names(const WeightDirectory& files, const LlamaConfig& config, const std::string& config_path);

// After reading, with tied embeddings: an `lm_head.weight` the files hold
// must equal the embedding (transformers writes both when it ties them);
// one that differs is an Error, since tying would silently discard it.
void check_tied_head(const WeightDirectory& files, const LlamaWeights& weights, const std::string& config_path);

}  // namespace spillway::model
