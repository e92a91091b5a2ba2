// Splits text into pre-tokens with a regular expression before BPE, as
// Hugging Face's Split pre-tokenizer does with behavior "Isolated": every
// match is a piece, and so is every stretch of text between matches.
//
// PCRE2 runs in UTF mode with Unicode properties (\p{L}, \p{N}), compiled
// once (JIT where available), with \s meaning Unicode White_Space as in the
// Oniguruma engine Hugging Face uses (see pre_tokenizer.cc). Input that is not
// valid UTF-8 is accepted rather than refused: PCRE2 treats each invalid
// byte as a character that no pattern item matches, so such bytes fall into
// the between-match pieces. Tokenizing arbitrary bytes therefore still
// round-trips exactly, and valid UTF-8 splits as Hugging Face splits it
// (Hugging Face only ever sees valid text).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace spillway {

// LLaMA-3's pattern (tokenizer.json of Meta-Llama-3).
inline constexpr std::string_view kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GPT-2's pattern, which Hugging Face's ByteLevel pre-tokenizer applies when
// its use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class RegexPreTokenizer {
 public:
  // Throws Error naming the pattern when it does not compile.
  explicit RegexPreTokenizer(std::string_view pattern);
  ~RegexPreTokenizer();
  RegexPreTokenizer(const RegexPreTokenizer&) = delete;
  RegexPreTokenizer& operator=(const RegexPreTokenizer&) = delete;

  const std::string& pattern() const { return pattern_; }

  // Calls `piece` for each pre-token in order; the pieces tile `text`.
  // Safe to call from several threads at once.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& piece) const;
  // Calls `match` with the byte range of each match, in order. An empty
  // match still cuts the text between matches there, as in Hugging Face.
  void for_each_match(std::string_view text, const std::function<void(size_t begin, size_t end)>& match) const;
  std::vector<std::string_view> split(std::string_view text) const;
  // `text` with every non-empty match replaced by `with`.
  std::string replace(std::string_view text, std::string_view with) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8, kept out of the header
};

}  // namespace spillway
