// How tensor parallelism splits LLaMA, declared beside the model instead of
// written into it (graph/tensor_parallel.h reads it): q, k, v, gate and up
// by output features, o and down by input features, the embedding and
// lm_head by vocabulary, the norms whole. A stacked q|k|v or gate|up splits
// each of its tensors alike.
#pragma once

#include <vector>

#include "graph/tensor_parallel.h"
#include "model/llama_config.h"
#include "model/llama_graph.h"
#include "model/llama_weights.h"

namespace spillway::model {

// The split of the parameter `p` of build_llama's graph, by its name.
graph::ParameterSplit llama_parameter_split(const LlamaConfig& config, const graph::ValueInfo& p);
// The split of each checkpoint tensor of `config` (parameter_specs' order).
std::vector<graph::ParameterSplit> llama_tensor_splits(const LlamaConfig& config);

// `forward` (build_llama's graph of `m`) as rank tp.rank's graph, m's
// handles renamed into it.
graph::RankGraph shard_llama(const graph::Graph& forward, LlamaGraph& m, const LlamaConfig& config, DType dtype,
                             const graph::TensorParallelism& tp);

// Rank `rank`'s pieces of each tensor of `whole` (graph::piece_of), named
// as the whole ones; zeros of the pieces' shapes where `whole` holds no
// tensors (a fresh run's moments).
LlamaWeights llama_pieces(const LlamaWeights& whole, const LlamaConfig& config, int rank, int ranks);
// The same, letting go of each whole tensor once its piece is cut, so that
// a rank holds one copy of the model at a time, not two.
LlamaWeights take_llama_pieces(LlamaWeights& whole, const LlamaConfig& config, int rank, int ranks);

}  // namespace spillway::model
