#include "infer/batch_decoder.h"

#include <set>

#include "base/bytes.h"
#include "base/status.h"
#include "infer/decoder.h"
#include "infer/llama_batch_decoder.h"

#ifdef SPILLWAY_HAS_CUDA
#include "infer/cuda/cuda_batch_decoder.h"
#endif

namespace spillway::infer {

uint64_t kv_bytes_per_token(const model::LlamaConfig& c, int64_t value_bytes) {
  return static_cast<uint64_t>(2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim() * value_bytes);
}

int64_t kv_blocks_in_budget(const model::LlamaConfig& c, const KvCacheOptions& options, int64_t value_bytes) {
  SPW_CHECK(options.block_tokens > 0, "--kv-block", "must be positive, got ", options.block_tokens);
  const uint64_t block = kv_bytes_per_token(c, value_bytes) * static_cast<uint64_t>(options.block_tokens);
  const auto blocks = static_cast<int64_t>(options.budget_bytes / block);
  SPW_CHECK(blocks > 0, "--kv-cache-mem", format_bytes(options.budget_bytes),
            " holds no block of the KV cache: one block of ", options.block_tokens, " tokens takes ",
            format_bytes(block), " for this model");
  return blocks;
}

void BatchDecoder::shrink_cache(int64_t num_blocks) {
  SPW_CHECK(positions_.empty() && num_blocks > 0 && num_blocks <= blocks_.num_blocks(), "batch decoder",
            "the cache can shrink only before use, to between 1 and ", blocks_.num_blocks(), " blocks (asked ",
            num_blocks, ")");
  blocks_ = PagedKvBlocks(num_blocks, blocks_.block_tokens());
}

int64_t BatchDecoder::open() {
  const int64_t sequence = blocks_.open();
  positions_[sequence] = 0;
  return sequence;
}

void BatchDecoder::close(int64_t sequence) {
  blocks_.close(sequence);
  positions_.erase(sequence);
}

int64_t BatchDecoder::position(int64_t sequence) const {
  auto it = positions_.find(sequence);
  SPW_CHECK(it != positions_.end(), "batch decoder", "no open sequence ", sequence);
  return it->second;
}

std::vector<float> BatchDecoder::step(std::span<const SequenceChunk> chunks) {
  const std::span<const float> logits = step_view(chunks);
  return {logits.begin(), logits.end()};
}

std::span<const float> BatchDecoder::step_view(std::span<const SequenceChunk> chunks) {
  SPW_CHECK(!chunks.empty(), "batch decoder", "a step needs at least one chunk");
  std::set<int64_t> seen;
  std::vector<int64_t> positions;
  for (const SequenceChunk& chunk : chunks) {
    SPW_CHECK(!chunk.tokens.empty(), "batch decoder", "sequence ", chunk.sequence, " was given no tokens");
    SPW_CHECK(seen.insert(chunk.sequence).second, "batch decoder", "sequence ", chunk.sequence,
              " appears twice in one step");
    for (int32_t t : chunk.tokens) {
      SPW_CHECK(t >= 0 && t < vocab(), "batch decoder", "token ", t, " is outside the vocabulary of ", vocab());
    }
    positions.push_back(position(chunk.sequence));
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    blocks_.reserve(chunks[i].sequence, positions[i] + static_cast<int64_t>(chunks[i].tokens.size()));
  }
  const std::span<const float> logits = run(chunks, positions);
  for (size_t i = 0; i < chunks.size(); ++i)
    positions_[chunks[i].sequence] += static_cast<int64_t>(chunks[i].tokens.size());
  return logits;
}

std::unique_ptr<BatchDecoder> make_batch_decoder(const model::LlamaWeights& weights, const KvCacheOptions& cache,
                                                 const std::string& device) {
#ifdef SPILLWAY_HAS_CUDA
  if (device_is_cuda(device)) return make_cuda_batch_decoder(weights, cache);
#else
  device_is_cuda(device);  // checks the name
#endif
  return std::make_unique<LlamaBatchDecoder>(weights, cache);
}

}  // namespace spillway::infer
