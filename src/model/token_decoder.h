// tokenizer.json's "decoder": how Hugging Face `tokenizers` turns the tokens
// of a list of ids back into text, step after step over the token strings.
//
// Read: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse and
// Strip, which LLaMA-family models use (byte-level BPE: ByteLevel; LLaMA-2
// and Mistral: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0), or
// Metaspace). No decoder joins the tokens with spaces, as Hugging Face does.
// Where Hugging Face would replace bytes that are not UTF-8 by U+FFFD, the
// ByteLevel step keeps the bytes, so text of any bytes round-trips.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/pre_tokenizer.h"

namespace spillway {

class TokenDecoder {
 public:
  TokenDecoder() = default;  // none: tokens joined by " "
  TokenDecoder(const nlohmann::json& spec, const std::string& source, const std::string& where = "decoder");
  static TokenDecoder byte_level();

  // `tokens` as tokenizer.json spells them (byte-level tokens in the
  // byte-level alphabet, added tokens as their content).
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { byte_level, metaspace, replace, byte_fallback, fuse, strip } kind;
    std::string pattern = {};  // replace (literal), metaspace (replacement), strip (content)
    std::string content = {};  // replace
    std::shared_ptr<const RegexPreTokenizer> regex = {};  // replace with a Regex pattern
    bool prepend = true;  // metaspace: a prefix was added, so the first token's replacement goes
    int start = 0, stop = 0;  // strip
  };
  void add(const nlohmann::json& spec, const std::string& source, const std::string& where);

  std::vector<Step> steps_;
  bool none_ = true;
};

}  // namespace spillway
