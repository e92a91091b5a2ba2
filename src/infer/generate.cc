#include "infer/generate.h"

#include "base/status.h"

namespace spillway::infer {

std::vector<int32_t> generate(LlamaDecoder& decoder, std::span<const int32_t> prompt,
                              const GenerateOptions& options, const std::function<void(int32_t)>& on_token) {
  SPW_CHECK(!prompt.empty(), "generation", "the prompt holds no tokens");
  TokenSampler sampler(options.sampling);
  std::vector<float> logits = decoder.forward(prompt);
  const size_t row = logits.size() / prompt.size();
  std::vector<int32_t> out;
  std::span<const float> last(logits.data() + logits.size() - row, row);
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    int32_t token = sampler.next(last);
    if (token == options.stop_token) break;
    out.push_back(token);
    if (on_token) on_token(token);
    if (decoder.position() >= decoder.capacity()) break;
    logits = decoder.forward(std::span<const int32_t>(&token, 1));
    last = std::span<const float>(logits);
  }
  return out;
}

}  // namespace spillway::infer
