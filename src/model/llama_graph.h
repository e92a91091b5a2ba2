// The LLaMA forward pass written with the graph builder, parameters named as
// in Hugging Face checkpoints ("model.layers.0.self_attn.q_proj.weight").
#pragma once

#include <span>
#include <vector>

#include "graph/builder.h"
#include "model/llama_config.h"
#include "model/lora.h"

namespace spillway::model {

// Checkpoint tensors a layer has (norms, q, k, v, o, gate, up, down), after
// the embedding's one: layer i's are 1 + 9i on.
inline constexpr int kLlamaLayerTensors = 9;

// A stage of a pipeline (pipeline parallelism): the layers [first_layer,
// last_layer) of the model, with the embedding where it is the first stage
// and the final norm, lm_head and loss where it is the last. A stage
// without the embedding reads the hidden state its previous stage made;
// one without the loss hands its own on.
struct LlamaStage {
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // -1: the model's last
  bool has_embedding() const { return first_layer == 0; }
};

// Context parallelism: a sequence of ranks * seq tokens is cut into 2 ranks
// chunks of seq / 2, and the graph is this rank's two: chunk `rank` and
// chunk 2 ranks - 1 - rank, one after the other (take_context_chunks). With
// causal attention a chunk's work grows with its place, so each rank's
// pair costs the same (an early chunk and a late one). RoPE rotates each
// chunk at its positions, and every layer's attention reads every rank's
// keys and values, all-gathered over the group (dimension `group` of the
// rank grid: dist::Dim::cp) and put in position order. One sequence a
// micro-batch.
struct LlamaContext {
  int rank = 0, ranks = 1;
  int group = 2;

  // Where this rank's chunk `which` (0 or 1) starts in the sequence, for
  // chunks of `chunk` tokens.
  int64_t chunk_start(int which, int64_t chunk) const {
    return (which == 0 ? rank : 2 * ranks - 1 - rank) * chunk;
  }
};

// Error naming --cp when a sequence of `seq` tokens does not cut into two
// chunks for each of `ranks` ranks.
void check_context_sequence(int64_t seq, int ranks);

// This rank's tokens of one sequence (ranks * its own count): its two
// chunks, in `out`; the sequence as it is without context parallelism.
// Error when the sequence does not cut into 2 ranks chunks.
std::span<const int32_t> take_context_chunks(const LlamaContext& c, std::span<const int32_t> sequence,
                                             std::vector<int32_t>& out);

struct LlamaGraphOptions {
  // Each layer's q, k and v projections as one matmul, and gate and up as
  // another, over a weight that stacks the checkpoint's tensors by rows: one
  // wide GEMM (and one for each gradient) instead of two or three narrow
  // ones; rope and attention read the stacked q|k|v output as it is.
  bool fused_projections = false;
  // The loss weighted per token (ops::cross_entropy_weighted) by the input
  // `loss_weights`, instead of the mean over counted targets
  // (train/loss_weights.h says what training puts there).
  bool weighted_loss = false;
  // Packed rows (several examples a row, train/instruction_packing.h): the
  // inputs `positions` (each token's position within its example, for
  // RoPE) and `doc_starts` (where its example starts in the row, so that
  // attention stays inside it). Off: the graph has neither.
  bool documents = false;
  // LoRA adapters (model/lora.h) on the projections it targets: each such
  // projection adds (alpha / r) (x A^T) B^T to x W^T. The base weights are
  // then graph inputs, frozen: autodiff differentiates the adapters alone
  // (LlamaGraph::trainable). Separate projections only. Null: none.
  const LoraConfig* lora = nullptr;
  // LoRA's dropout (LoraConfig::dropout > 0) on each adapter's input, drawn
  // from the input `dropout_key`: training steps only, as PEFT drops in
  // train mode; evaluation and generation run without it.
  bool adapter_dropout = false;
  // Only these layers (model/llama_stages.h: pipeline parallelism); the whole
  // model by default. A tied table's last stage holds a copy of it.
  LlamaStage stage{};
  LlamaContext context{};
};

struct LlamaGraph {
  graph::Value tokens;   // [batch, seq] i32 (a stage with the embedding)
  graph::Value targets;  // [batch, seq] i32, negative = not counted (a stage with the loss)
  // A pipeline stage's hidden states: the one it reads [batch, seq, hidden]
  // (without the embedding) and the one it hands on (without the loss).
  graph::Value hidden_in, hidden_out;
  graph::Value loss_weights;  // [batch, seq] in the accumulation dtype, with weighted_loss; else invalid
  graph::Value positions;     // [batch, seq] i32, with documents; else invalid
  graph::Value doc_starts;    // [batch, seq] i32, with documents; else invalid
  graph::Value logits;   // [batch, seq, vocab] (a stage with the loss)
  graph::Value loss;     // mean cross-entropy (weighted: the weighted sum), one element (a stage with the loss)
  // The base weights in checkpoint order: parameters, or with LoRA frozen
  // inputs bound the same way.
  std::vector<graph::Value> parameters;
  // With LoRA: the adapters in lora_specs' order, and the [r, r] input that
  // holds (alpha / r) times the identity (the scaling as a product: the
  // graph has no scale op, and r x r is nothing beside the r x d products).
  std::vector<graph::Value> adapters;
  graph::Value lora_scaling;
  graph::Value dropout_key;  // i32 [2] (ops/dropout.h), with adapter dropout; else invalid
  // What training differentiates: the adapters with LoRA, else the parameters.
  const std::vector<graph::Value>& trainable() const { return adapters.empty() ? parameters : adapters; }
  // parameter_parts[i]: the checkpoint tensors (their indices in checkpoint
  // order, LlamaWeights::tensors()) that parameters[i] stacks by rows, in
  // that order. One each, the same index, without fused projections; a
  // caller binds parameters[i] to memory holding those tensors back to back.
  std::vector<std::vector<int>> parameter_parts;
};

LlamaGraph build_llama(graph::Builder& b, const LlamaConfig& config, int64_t batch, int64_t seq,
                       const LlamaGraphOptions& options = {});

// Where each checkpoint tensor lies (in elements) in one array holding the
// tensors of `stacks` (LlamaGraph::parameter_parts, or some of them) with
// each stack's tensors back to back, so that its parameter is one matrix,
// and each stack starting on a multiple of `align` elements. Index by tensor
// (tensors in no listed stack get 0); the last entry is the array's length.
std::vector<uint64_t> stacked_offsets(const std::vector<std::vector<int>>& stacks,
                                      const std::vector<int64_t>& numel, uint64_t align);

}  // namespace spillway::model
