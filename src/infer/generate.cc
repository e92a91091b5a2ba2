#include "infer/generate.h"

#include <algorithm>
#include <chrono>

#include "base/status.h"

namespace spillway::infer {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

TokenStream::TokenStream(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& options)
    : decoder_(decoder), prompt_(prompt.begin(), prompt.end()), options_(options), sampler_(options.sampling) {
  SPW_CHECK(!prompt.empty(), "generation", "the prompt holds no tokens");
  SPW_CHECK(options.vocab_limit >= 0, "generation", "vocab_limit is ", options.vocab_limit);
  stats_.prompt_tokens = static_cast<int64_t>(prompt.size());
}

// Each call feeds what the last one drew (the prompt, the first time) and
// draws from its logits, so no forward pass runs whose logits nobody reads.
std::optional<int32_t> TokenStream::next() {
  if (done_) return std::nullopt;
  const auto start = Clock::now();
  if (!started_) {
    started_ = true;
    logits_ = decoder_.forward_last(prompt_);
    if (options_.max_new_tokens <= 0) {
      stats_.prefill_seconds = seconds_since(start);
      done_ = true;
      return std::nullopt;
    }
  } else {
    if (drawn_ >= options_.max_new_tokens || decoder_.position() >= decoder_.capacity()) {
      done_ = true;
      return std::nullopt;
    }
    logits_ = decoder_.forward_last(std::span<const int32_t>(&last_, 1));
    ++stats_.decode_steps;
  }
  const size_t drawable = options_.vocab_limit > 0
                              ? std::min(logits_.size(), static_cast<size_t>(options_.vocab_limit))
                              : logits_.size();
  const int32_t token = sampler_.next(std::span<const float>(logits_).first(drawable));
  (drawn_ == 0 ? stats_.prefill_seconds : stats_.decode_seconds) += seconds_since(start);
  if (token == options_.stop_token ||
      std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), token) != options_.stop_tokens.end()) {
    done_ = true;
    return std::nullopt;
  }
  ++drawn_;
  last_ = token;
  return token;
}

std::vector<int32_t> generate(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token, GenerateStats* stats) {
  TokenStream stream(decoder, prompt, options);
  std::vector<int32_t> out;
  while (const std::optional<int32_t> token = stream.next()) {
    out.push_back(*token);
    if (on_token) on_token(*token);
  }
  if (stats) *stats = stream.stats();
  return out;
}

void check_context(const model::LlamaConfig& c, int64_t prompt_tokens, int64_t max_tokens) {
  const int64_t context = c.max_position_embeddings;
  SPW_CHECK(max_tokens >= 0, "--max-tokens", max_tokens, " is negative");
  SPW_CHECK(prompt_tokens <= context, "--prompt", "its ", prompt_tokens,
            " tokens are more than the model's context of ", context, " tokens (max_position_embeddings)");
  SPW_CHECK(max_tokens <= context - prompt_tokens, "--max-tokens", "the prompt's ", prompt_tokens, " tokens and ",
            max_tokens, " new ones are more than the model's context of ", context,
            " tokens (max_position_embeddings); ask for at most ", context - prompt_tokens);
}

std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& prompt) {
  if (!prompt.empty()) return tokenizer.encode_text(prompt);
  return {tokenizer.roles().add_bos ? tokenizer.bos_id() : tokenizer.eos_id()};
}

std::string sample_text(const model::LlamaWeights& weights, const Tokenizer& tokenizer, const std::string& prompt,
                        int64_t max_new_tokens, double temperature, int64_t top_k, uint64_t seed) {
  const std::vector<int32_t> ids = prompt_ids(tokenizer, prompt);
  LlamaDecoder decoder(weights, static_cast<int64_t>(ids.size()) + max_new_tokens);
  GenerateOptions g;
  g.max_new_tokens = max_new_tokens;
  g.sampling.temperature = temperature;
  g.sampling.top_k = top_k;
  g.sampling.seed = seed;
  g.stop_tokens = tokenizer.roles().stops;
  g.vocab_limit = tokenizer.vocab_size();
  return prompt + tokenizer.decode(generate(decoder, ids, g));
}

std::string run_sample_text(const model::LlamaWeights& weights, const Tokenizer& tokenizer,
                            const train::SampleConfig& sample, uint64_t seed) {
  return sample_text(weights, tokenizer, sample.prompt, sample.tokens, sample.temperature, sample.top_k, seed);
}

}  // namespace spillway::infer
