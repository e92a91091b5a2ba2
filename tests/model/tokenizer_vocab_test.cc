#include "model/tokenizer_vocab.h"

#include <gtest/gtest.h>

#include "base/status.h"

namespace spillway::model {
namespace {

// Only the size matters here.
class SizedTokenizer : public Tokenizer {
 public:
  explicit SizedTokenizer(int32_t size) : size_(size) {}
  std::vector<int32_t> encode(std::string_view, bool) const override { return {}; }
  std::string decode(std::span<const int32_t>) const override { return ""; }
  int32_t vocab_size() const override { return size_; }
  std::string fingerprint() const override { return "0000000000000000"; }
  std::string_view kind() const override { return "bpe"; }
  std::optional<int32_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string token_text(int32_t) const override { return ""; }

 private:
  int32_t size_;
};

TEST(TokenizerVocab, ALargerTokenizerIsRefusedNamingBothSizes) {
  LlamaConfig c;
  c.vocab_size = 256;
  try {
    check_tokenizer_fits(SizedTokenizer(300), c, "models/tiny");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "models/tiny: the tokenizer has 300 tokens but the model's vocab_size is 256");
  }
}

TEST(TokenizerVocab, AnEqualOrSmallerTokenizerFits) {
  LlamaConfig c;
  c.vocab_size = 256;
  EXPECT_NO_THROW(check_tokenizer_fits(SizedTokenizer(256), c, "m"));
  EXPECT_NO_THROW(check_tokenizer_fits(SizedTokenizer(250), c, "m"));  // a padded embedding
}

}  // namespace
}  // namespace spillway::model
