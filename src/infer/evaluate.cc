#include "infer/evaluate.h"

#include <algorithm>
#include <vector>

#include "base/status.h"

namespace spillway::infer {

void add_loss(Decoder& decoder, std::span<const int32_t> ids, int64_t window, LossSum& sum) {
  SPW_CHECK(window >= 1, "evaluation", "window of ", window, " tokens");
  SPW_CHECK(decoder.capacity() >= window + 1, "evaluation", "the decoder holds ", decoder.capacity(),
            " tokens, fewer than a window of ", window + 1);
  const auto n = static_cast<int64_t>(ids.size());
  for (int64_t begin = 0; begin + 1 < n; begin += window) {
    const int64_t end = std::min(n, begin + window + 1);
    decoder.reset();
    const std::vector<float> logits = decoder.forward(ids.subspan(begin, end - begin));
    const auto vocab = static_cast<int64_t>(logits.size()) / (end - begin);
    for (int64_t i = 0; i + 1 < end - begin; ++i) {
      const float* row = logits.data() + i * vocab;
      const double top = *std::max_element(row, row + vocab);
      double total = 0;
      for (int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(row[v]) - top);
      const int32_t target = ids[begin + i + 1];
      SPW_CHECK(target >= 0 && target < vocab, "evaluation", "token id ", target, " is outside the model's ",
                vocab, "-token vocabulary");
      sum.loss += top + std::log(total) - static_cast<double>(row[target]);
      ++sum.tokens;
    }
  }
}

int64_t eval_window(const model::LlamaConfig& config, int64_t seq) {
  const int64_t context = config.max_position_embeddings;
  const int64_t window = seq > 0 ? seq : std::min<int64_t>(context, 2048);
  SPW_CHECK(window <= context, "--seq", window, " is longer than the model's context of ", context, " tokens");
  return window;
}

}  // namespace spillway::infer
