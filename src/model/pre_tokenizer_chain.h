// tokenizer.json's "pre_tokenizer": how Hugging Face `tokenizers` cuts the
// normalized text between added tokens into pre-tokens, each merged by BPE on
// its own.
//
// Read: Sequence; Split with a Regex or String pattern and any behavior
// (Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous), also
// inverted; ByteLevel, with and without its GPT-2 regex and prefix space;
// Metaspace (SentencePiece-style "▁" words, every prepend_scheme, split or
// not); Digits. These cover the LLaMA-family layouts: LLaMA-3 and Qwen
// (Split then ByteLevel), GPT-2 (ByteLevel), SmolLM (Digits then ByteLevel),
// Mistral and LLaMA-2 in the newer layout (Metaspace). ByteLevel must come
// last: its byte-to-character mapping is done by the byte-level BPE model
// itself (bpe_tokenizer.h), on raw bytes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/pre_tokenizer.h"

namespace spillway {

class PreTokenizerChain {
 public:
  PreTokenizerChain() = default;  // none: the whole segment is one pre-token
  PreTokenizerChain(const nlohmann::json& spec, const std::string& source,
                    const std::string& where = "pre_tokenizer");

  // Whether it ends in ByteLevel, so that pre-tokens are bytes for a
  // byte-level model.
  bool byte_level() const { return byte_level_; }
  // Appends the pre-tokens of `segment` (text between added tokens) to
  // `out`; `at_start` says the segment begins the whole text.
  void split(std::string_view segment, bool at_start, std::vector<std::string>& out) const;

 private:
  enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };
  enum class Prepend { always, first, never };
  struct Step {
    enum class Kind { split, prefix_space, metaspace } kind;
    std::shared_ptr<const RegexPreTokenizer> regex = {};  // split
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    std::string replacement = {};  // metaspace
    Prepend prepend = Prepend::always;
    bool split_words = true;
  };
  struct Piece {
    std::string text;
    bool first;  // begins the whole text
  };
  void add(const nlohmann::json& spec, const std::string& source, const std::string& where);
  void add_split(std::string pattern, Behavior behavior, bool invert);
  static void split_piece(const Step& step, Piece& piece, std::vector<Piece>& out);

  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace spillway
