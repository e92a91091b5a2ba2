// Autoregressive generation: feed the prompt once, then one token at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include <string>

#include "infer/decoder.h"
#include "infer/llama_decoder.h"  // the CPU decoder, which callers of generate() often make
#include "infer/sampler.h"
#include "model/tokenizer.h"
#include "model/llama_weights.h"
#include "train/run_config.h"

namespace spillway::infer {

struct GenerateOptions {
  int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  int32_t stop_token = -1;  // e.g. end of text; -1: none
  std::vector<int32_t> stop_tokens;  // more of them (end-of-turn tokens)
  // Draw only among ids below this (the tokenizer's vocab_size): a model
  // whose embedding is padded past its tokenizer must never produce an id
  // the tokenizer cannot decode. 0: every id the logits have.
  int64_t vocab_limit = 0;
};

// Where the time went, for a speed report. The callback's time is not counted.
struct GenerateStats {
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prompt's forward pass and the first draw
  int64_t decode_steps = 0;    // one-token forward passes after the prompt's
  double decode_seconds = 0;   // those passes and the draw after each
  double decode_tokens_per_second() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

// Generation pulled one token at a time: what generate() runs, and what a
// caller that hands tokens out as they come (an iterator) steps through.
class TokenStream {
 public:
  // The decoder and nothing fed yet; Error when the prompt is empty.
  TokenStream(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& options);
  // The next new token; nullopt once a stop token is drawn, max_new_tokens
  // are out, or the decoder's context is full.
  std::optional<int32_t> next();
  // So far; the time between calls is not counted.
  const GenerateStats& stats() const { return stats_; }

 private:
  Decoder& decoder_;
  std::vector<int32_t> prompt_;
  GenerateOptions options_;
  TokenSampler sampler_;
  GenerateStats stats_;
  std::vector<float> logits_;
  int64_t drawn_ = 0;
  int32_t last_ = -1;
  bool started_ = false, done_ = false;
};

// Calls `on_token` with each new token as soon as it is chosen (the stop
// token is not passed on). Returns the new tokens. Generation also stops
// when the decoder's context is full. The decoder reads only the last row of
// logits of each step (Decoder::forward_last).
std::vector<int32_t> generate(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr,
                              GenerateStats* stats = nullptr);

// Refuses, before any work, a prompt and continuation longer than the
// model's context: positions past max_position_embeddings are ones the
// model never saw, so what it would write there is not its output. Errors
// name --prompt or --max-tokens.
void check_context(const model::LlamaConfig& config, int64_t prompt_tokens, int64_t max_tokens);

// The ids a prompt starts generation with: the text as the model's
// tokenizer encodes it (a BOS first where the model's texts start with
// one); an empty prompt starts a new document (the BOS, or else the end of
// the last document).
std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& prompt);

// Text sampled on the CPU from `weights`: `prompt` and up to
// `max_new_tokens` more, with temperature and top-k sampling from `seed`,
// ending at a stop token. What a training run shows at its end.
std::string sample_text(const model::LlamaWeights& weights, const Tokenizer& tokenizer, const std::string& prompt,
                        int64_t max_new_tokens, double temperature, int64_t top_k, uint64_t seed);

// sample_text with a run's sample settings: the train::SampleText that the
// command line and the Python module give the trainer.
std::string run_sample_text(const model::LlamaWeights& weights, const Tokenizer& tokenizer,
                            const train::SampleConfig& sample, uint64_t seed);

}  // namespace spillway::infer
