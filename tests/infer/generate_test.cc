#include "infer/generate.h"

#include <gtest/gtest.h>

namespace spillway::infer {
namespace {

// Logits that favour the highest id, as a model with a padded embedding
// whose padding rows were never trained may.
class TopIdDecoder : public Decoder {
 public:
  explicit TopIdDecoder(int64_t vocab) : vocab_(vocab) {}
  std::vector<float> forward(std::span<const int32_t> tokens) override {
    std::vector<float> all;
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<float> row = forward_last(tokens.subspan(i, 1));
      all.insert(all.end(), row.begin(), row.end());
    }
    return all;
  }
  std::vector<float> forward_last(std::span<const int32_t> tokens) override {
    position_ += static_cast<int64_t>(tokens.size());
    std::vector<float> row(static_cast<size_t>(vocab_));
    for (int64_t i = 0; i < vocab_; ++i) row[static_cast<size_t>(i)] = static_cast<float>(i);
    return row;
  }
  int64_t position() const override { return position_; }
  int64_t capacity() const override { return 100; }
  void reset() override { position_ = 0; }
  std::string description() const override { return "top id"; }

 private:
  int64_t vocab_;
  int64_t position_ = 0;
};

TEST(Generate, NeverDrawsAnIdPastTheVocabLimit) {
  const std::vector<int32_t> prompt = {1};
  for (double temperature : {0.0, 1.0}) {
    GenerateOptions g;
    g.max_new_tokens = 20;
    g.sampling.temperature = temperature;
    g.vocab_limit = 6;  // a 6-token tokenizer beside a 10-row embedding
    TopIdDecoder d(10);
    for (int32_t id : generate(d, prompt, g)) EXPECT_LT(id, 6);
  }
}

TEST(Generate, WithoutALimitEveryIdIsDrawable) {
  GenerateOptions g;
  g.max_new_tokens = 3;
  g.sampling.temperature = 0;
  TopIdDecoder d(10);
  EXPECT_EQ(generate(d, std::vector<int32_t>{1}, g), (std::vector<int32_t>{9, 9, 9}));
}

}  // namespace
}  // namespace spillway::infer
