#include "infer/generate.h"

#include <algorithm>
#include <chrono>

#include "base/status.h"

namespace spillway::infer {

std::vector<int32_t> generate(Decoder& decoder, std::span<const int32_t> prompt, const GenerateOptions& options,
                              const std::function<void(int32_t)>& on_token, GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  SPW_CHECK(!prompt.empty(), "generation", "the prompt holds no tokens");
  SPW_CHECK(options.vocab_limit >= 0, "generation", "vocab_limit is ", options.vocab_limit);
  TokenSampler sampler(options.sampling);
  GenerateStats s;
  s.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> out;
  auto start = Clock::now();
  std::vector<float> logits = decoder.forward_last(prompt);
  // Each round draws from the last logits, then feeds the token drawn unless
  // generation ends there (no forward pass whose logits nobody reads).
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const size_t drawable = options.vocab_limit > 0
                                ? std::min(logits.size(), static_cast<size_t>(options.vocab_limit))
                                : logits.size();
    const int32_t token = sampler.next(std::span<const float>(logits).first(drawable));
    (i == 0 ? s.prefill_seconds : s.decode_seconds) += std::chrono::duration<double>(Clock::now() - start).count();
    if (token == options.stop_token ||
        std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) {
      break;
    }
    out.push_back(token);
    if (on_token) on_token(token);
    if (i + 1 == options.max_new_tokens || decoder.position() >= decoder.capacity()) break;
    start = Clock::now();
    logits = decoder.forward_last(std::span<const int32_t>(&token, 1));
    ++s.decode_steps;
  }
  if (options.max_new_tokens <= 0) {
    s.prefill_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  if (stats) *stats = s;
  return out;
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

}  // namespace spillway::infer
