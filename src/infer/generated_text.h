// The text of generated tokens, handed out in pieces as it grows: what
// `spillway generate` prints as tokens come and what Python's
// `Model.generate(stream=True)` yields. The server's TextStream
// (text_stream.h) without stop strings, keeping the tokens too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/text_stream.h"
#include "model/tokenizer.h"

namespace spillway::infer {

class GeneratedText {
 public:
  // The tokenizer must outlive this.
  GeneratedText(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt) : stream_(tokenizer, prompt, {}) {}
  // The new text that `id` makes ready; empty while a character is partial.
  std::string add(int32_t id) {
    generated_.push_back(id);
    return stream_.add(std::span<const int32_t>(&id, 1));
  }
  // What is left once generation ends (a character that never completed).
  std::string finish() { return stream_.finish(); }
  const std::vector<int32_t>& tokens() const { return generated_; }

 private:
  TextStream stream_;
  std::vector<int32_t> generated_;
};

}  // namespace spillway::infer
