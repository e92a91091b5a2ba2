// What serving needs from a model: many sequences decoded together over one
// paged key/value cache (paged_kv_blocks.h). Each step feeds a chunk of new
// tokens for any number of sequences (one token for those generating, a
// piece of the prompt for those still reading it) and runs them as one batch:
// every weight matrix is read once for all the chunks' rows.
//
// Every row's result depends on its own token and its sequence's cache
// alone, never on which other rows share the step or on how a prompt was cut
// into chunks: a request gets the same logits, bit for bit, alone or in a
// full batch. That is what makes serving deterministic at temperature 0.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "infer/paged_kv_blocks.h"
#include "model/llama_config.h"
#include "model/llama_weights.h"

namespace spillway::infer {

struct SequenceChunk {
  int64_t sequence = -1;            // from BatchDecoder::open()
  std::span<const int32_t> tokens;  // fed at the sequence's next positions
};

// How the cache is cut: blocks of `block_tokens` rows, as many as fit in
// `budget_bytes`.
struct KvCacheOptions {
  uint64_t budget_bytes = 0;
  int64_t block_tokens = 16;
  // On a GPU, `budget_bytes` is the most the cache takes: it takes less
  // where the device's free memory, less the weights, the activations and
  // cuda_cache_reserve(), holds less. The CPU's cache ignores it.
  bool fit_device = false;
};

// What a GPU cache made with fit_device leaves free on the device (CUDA
// graphs, libraries, other processes): 5% of the device, at least 1 GiB.
inline uint64_t cuda_cache_reserve(uint64_t device_total_bytes) {
  return device_total_bytes / 20 > (1ull << 30) ? device_total_bytes / 20 : (1ull << 30);
}

// Bytes one token's keys and values take in every layer, at `value_bytes`
// per number (4 for float32, 2 for bf16).
uint64_t kv_bytes_per_token(const model::LlamaConfig& config, int64_t value_bytes);
// Blocks of the options' size that fit the budget. Throws Error naming the
// budget and the size of one block when not even one fits.
int64_t kv_blocks_in_budget(const model::LlamaConfig& config, const KvCacheOptions& options, int64_t value_bytes);

class BatchDecoder {
 public:
  BatchDecoder(int64_t num_blocks, int64_t block_tokens) : blocks_(num_blocks, block_tokens) {}
  virtual ~BatchDecoder() = default;

  // A new empty sequence, and its end (its blocks go back to the pool).
  int64_t open();
  void close(int64_t sequence);
  int64_t position(int64_t sequence) const;  // tokens fed so far

  // Feeds every chunk (each sequence at most once, no chunk empty) and
  // returns the logits of each chunk's last token, [chunks.size(), vocab]
  // float32 row-major. Grows the sequences' block tables as needed. Throws
  // Error, with the positions unchanged, when the cache has too few free
  // blocks or a token is outside the vocabulary.
  std::vector<float> step(std::span<const SequenceChunk> chunks);
  // step()'s logits without a copy of their own: a view of memory the
  // decoder keeps, valid until its next step (the GPU decoder's: the pinned
  // buffer they arrive in, where one pass held every chunk). At 64 rows the
  // logits are 33 MB, and a fresh vector for them each step cost as much
  // again in page faults and zeroing as the copy.
  std::span<const float> step_view(std::span<const SequenceChunk> chunks);

  // Reserves blocks for `tokens` rows of the sequence ahead of use, so that
  // later steps cannot run out (what admission control does).
  void reserve(int64_t sequence, int64_t tokens) { blocks_.reserve(sequence, tokens); }
  const PagedKvBlocks& blocks() const { return blocks_; }
  virtual int64_t vocab() const = 0;
  virtual uint64_t cache_bytes() const = 0;
  // Where it runs, for people: "cpu, 2 threads, float32, paged".
  virtual std::string description() const = 0;

 protected:
  // The model's pass over the chunks; `positions[i]` is chunk i's first
  // position, and the blocks for every row are already in the tables. The
  // logits [chunks, vocab] in memory the decoder keeps until its next run.
  virtual std::span<const float> run(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions) = 0;
  // For a decoder that sizes its cache while it is made (the GPU's, from
  // what its weights leave): fewer blocks, before any sequence opens.
  void shrink_cache(int64_t num_blocks);

 private:
  PagedKvBlocks blocks_;
  std::map<int64_t, int64_t> positions_;
};

// Decoder names --device accepts for batched decoding.
inline constexpr const char* kBatchDecoderDevices = "auto, cpu or cuda";

// A batched decoder for `weights` whose cache fills `cache.budget_bytes` on
// `device`: "cpu" (float32, cache in host memory), "cuda" (GPU 0, bf16,
// cuda/cuda_batch_decoder.h) or "auto" (the GPU when one is visible and
// spillway was built with CUDA, the CPU otherwise). The CPU decoder reads the
// weights in place: they must outlive it; the GPU's copies them. Throws
// Error naming --device for another name, and for "cuda" without a GPU or
// in a build without CUDA.
std::unique_ptr<BatchDecoder> make_batch_decoder(const model::LlamaWeights& weights, const KvCacheOptions& cache,
                                                 const std::string& device);

}  // namespace spillway::infer
