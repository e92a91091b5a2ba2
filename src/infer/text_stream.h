// The text of a request's new tokens as they come, for streaming to a
// client: only whole UTF-8 characters are handed out, and text that may be
// the start of a stop string is held back until it is known not to be one.
// A stop string ends the text before it (the stop itself is not sent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace spillway::infer {

// Length of the longest prefix of `s` that ends on a UTF-8 character
// boundary and before a replacement character that more bytes may still
// complete, so that streamed text never shows half a character.
size_t complete_utf8_prefix(const std::string& s);

// The text `generated` adds after `prompt`: the decoding of both together,
// less the prompt's own, so that a decoder that treats a word's first token
// apart (SentencePiece's leading space) sees the continuation where it
// stands. Only the prompt's last few tokens are decoded with it.
std::string continuation_text(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                              std::span<const int32_t> generated);

class TextStream {
 public:
  TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stops);

  // Takes new tokens; returns the text that is now safe to send. Once a stop
  // string appears, returns the text up to it and sets stopped(); later
  // calls return nothing.
  std::string add(std::span<const int32_t> tokens);
  // The text held back, at the end of generation (no stop string came).
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& sent() const { return sent_; }  // everything handed out so far
  int64_t tokens() const { return static_cast<int64_t>(generated_.size()); }

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> context_;  // the prompt's last tokens
  std::vector<std::string> stops_;
  std::vector<int32_t> generated_;
  std::string sent_;
  bool stopped_ = false;
};

}  // namespace spillway::infer
