// How tensor parallelism splits LLaMA, declared beside the model instead of
// written into it (graph/tensor_parallel.h reads it): q, k, v, gate and up
// by output features, o and down by input features, the embedding and
// lm_head by vocabulary, the norms whole. A stacked q|k|v or gate|up splits
// each of its tensors alike.
#pragma once

#include "graph/tensor_parallel.h"
#include "model/llama_config.h"

namespace spillway::model {

// The split of the parameter `p` of build_llama's graph, by its name.
graph::ParameterSplit llama_parameter_split(const LlamaConfig& config, const graph::ValueInfo& p);

}  // namespace spillway::model
