// tokenizer.json's "normalizer": what Hugging Face `tokenizers` does to the
// text between added tokens before it is split into pre-tokens.
//
// Read: Sequence, Prepend, Replace (a String or a Regex pattern), NFC, NFD,
// NFKC, NFKD, Lowercase and Strip, the normalizers LLaMA-family models ship
// (LLaMA-2 and Mistral: Prepend("▁") then Replace(" ", "▁"); Qwen: NFC).
// Anything else is an Error naming the source and the field.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/pre_tokenizer.h"
#include "model/unicode_text.h"

namespace spillway {

class Normalizer {
 public:
  Normalizer() = default;  // none: text passes unchanged
  // `spec` is the JSON value (null: none); `where` names it in errors
  // ("tokenizer.json: normalizer.normalizers[1]...").
  Normalizer(const nlohmann::json& spec, const std::string& source, const std::string& where = "normalizer");

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { prepend, replace, form, lowercase, strip };
  struct Step {
    Kind kind;
    std::string text = {};     // prepend: the prefix; replace: the literal pattern or the content
    std::string content = {};  // replace: what each match becomes
    std::shared_ptr<const RegexPreTokenizer> regex = {};  // replace with a Regex pattern
    unicode::Form form = unicode::Form::nfc;
    bool left = false, right = false;  // strip
  };
  void add(const nlohmann::json& spec, const std::string& source, const std::string& where);

  std::vector<Step> steps_;
};

// `text` with every occurrence of `from` (non-empty) replaced by `to`.
std::string replace_literal(std::string_view text, std::string_view from, std::string_view to);

// A Hugging Face pattern object ({"String": s} or {"Regex": r}) as a regular
// expression; a String becomes one that matches it literally.
std::string pattern_regex(const nlohmann::json& pattern, const std::string& source, const std::string& where);

}  // namespace spillway
