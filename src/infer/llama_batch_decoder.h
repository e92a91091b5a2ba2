// The CPU's batched decoder (batch_decoder.h): LLaMA in float32 over a paged
// key/value cache of host memory, the weights read in place (they must
// outlive it). Its matmuls and attention are the batch-invariant kernels of
// row_linear.h and paged_attention.h; its logits agree with LlamaDecoder's
// (which uses the BLAS) to float32 rounding.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "infer/batch_decoder.h"
#include "infer/llama_cpu_layer.h"
#include "model/llama_weights.h"

namespace spillway::infer {

class LlamaBatchDecoder final : public BatchDecoder {
 public:
  LlamaBatchDecoder(const model::LlamaWeights& weights, const KvCacheOptions& cache);

  int64_t vocab() const override { return config_.vocab_size; }
  uint64_t cache_bytes() const override;
  std::string description() const override;

 private:
  struct KvPool {
    std::vector<float> k, v;  // [num_blocks, block_tokens, kv_heads * head_dim]
  };

  std::span<const float> run(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions) override;

  const model::LlamaConfig config_;
  std::vector<float> inv_freq_;
  const float* embed_;
  const float* final_norm_;
  const float* lm_head_;
  std::vector<LlamaLayerWeights> layers_;
  std::vector<KvPool> pools_;  // by layer
  std::vector<float> logits_;  // the last run's, which step_view() shows
};

}  // namespace spillway::infer
