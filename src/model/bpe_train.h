// Learns a byte-level BPE vocabulary from text: ids 0..255 are the bytes in
// byte order, then one token per merge in the order learned, then the
// special tokens.
//
// Text is cut into pre-tokens by the tokenizer's pattern (special token texts
// are cut out first and not counted), each distinct pre-token is counted
// once, and merging repeats on those counts: the most frequent adjacent pair
// becomes a new token, ties going to the pair whose bytes are smallest
// (left token's bytes first, then right's). Pair counts are updated only for
// the pre-tokens a merge touches, so each merge costs what it changes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/bpe_tokenizer.h"

namespace spillway {

struct BpeTrainOptions {
  // Total, special tokens included; at least 256 + specials. Training stops
  // early (a smaller vocabulary) when the text has no pair left to merge.
  int32_t vocab_size = 4096;
  std::vector<std::string> special_tokens = {std::string(kBeginOfText), std::string(kEndOfText)};
  // Which of them begins and which ends a text (the tokenizer's roles); a
  // name not among the special tokens leaves that role empty.
  std::string bos_token = std::string(kBeginOfText), eos_token = std::string(kEndOfText);
  std::string pattern = std::string(kLlama3Pattern);
};

BpeTokenizer train_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& options);

inline BpeTokenizer train_bpe(std::string_view text, int32_t vocab_size,
                              const std::vector<std::string>& special_tokens) {
  BpeTrainOptions options;
  options.vocab_size = vocab_size;
  options.special_tokens = special_tokens;
  return train_bpe(std::vector<std::string_view>{text}, options);
}

}  // namespace spillway
