// The text of generated tokens, handed out in pieces as it grows: what
// `spillway generate` prints as tokens come and what Python's
// `Model.generate(stream=True)` yields.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace spillway::infer {

// The text is the decoding of prompt and continuation together, less the
// prompt's own: decoders that drop a word's leading space or join byte
// tokens (SentencePiece-style) cannot be run one token at a time. A piece
// never ends inside a UTF-8 character or on a replacement character that
// more bytes may still complete.
class GeneratedText {
 public:
  // The tokenizer must outlive this.
  GeneratedText(const Tokenizer& tokenizer, std::vector<int32_t> prompt);
  // The new text that `id` makes ready; empty while a character is partial.
  std::string add(int32_t id);
  // What is left once generation ends (a character that never completed).
  std::string finish();
  const std::vector<int32_t>& tokens() const { return generated_; }

 private:
  std::string text() const;

  const Tokenizer& tokenizer_;
  std::vector<int32_t> prompt_, generated_;
  std::string before_;  // the prompt's decoding
  size_t handed_out_ = 0;
};

}  // namespace spillway::infer
