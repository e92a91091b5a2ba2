// Added tokens (tokenizer.json's "added_tokens"): whole strings that become
// one id each before any normalizing or merging, special ones ("<|eot_id|>",
// "</s>") and ordinary ones a fine-tune added. Found as Hugging Face
// `tokenizers` finds them: leftmost first, the longest among those starting
// at one place, a single_word token only between word boundaries, and
// lstrip/rstrip tokens taking the whitespace beside them along. They are
// matched in the text as given (Hugging Face matches a token marked
// "normalized" in the normalized text; for the LLaMA-family normalizers that
// is the same place).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace spillway {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = true;  // found only when special tokens are allowed; skipped by decode's skip_special
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  explicit AddedTokens(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // Cuts `text` into ordinary stretches (`on_text` with the stretch and its
  // offset in `text`) and added tokens (`on_token`), in order. Special tokens
  // are found only with `allow_special`; ordinary added tokens always.
  void split(std::string_view text, bool allow_special,
             const std::function<void(std::string_view stretch, size_t offset)>& on_text,
             const std::function<void(int32_t id)>& on_token) const;

 private:
  std::vector<AddedToken> tokens_;
  // Indices into tokens_ grouped by first byte, longest first.
  std::array<std::vector<size_t>, 256> by_first_byte_;
};

}  // namespace spillway
