// One face for the tokenizers a LLaMA checkpoint can ship: byte-level BPE in
// tokenizer.json (LLaMA-3) and SentencePiece in tokenizer.model (LLaMA-1/2),
// so that training data and generation need not know which one they hold.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/bpe_tokenizer.h"

namespace spillway {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids, adding nothing (no BOS). With allow_special, the text of a
  // special token (LLaMA-3's "<|eot_id|>", LLaMA-2's "<s>") becomes its id;
  // without, it is ordinary text.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const = 0;
  // Ids to text, special tokens as their text. An id outside the vocabulary
  // throws Error naming it.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int32_t vocab_size() const = 0;
  // Error when the vocabulary has no such token.
  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  // 16 hex digits; equal fingerprints encode text identically, so token
  // files can refuse data made by another tokenizer.
  virtual std::string fingerprint() const = 0;
  // "bpe" or "sentencepiece", for messages and logs.
  virtual std::string_view kind() const = 0;
};

// BpeTokenizer seen through Tokenizer.
class BpeTokenizerAdapter final : public Tokenizer {
 public:
  explicit BpeTokenizerAdapter(BpeTokenizer bpe) : bpe_(std::move(bpe)) {}

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override {
    return bpe_.encode(text, allow_special);
  }
  std::string decode(std::span<const int32_t> ids) const override { return bpe_.decode(ids); }
  int32_t vocab_size() const override { return bpe_.vocab_size(); }
  int32_t bos_id() const override { return bpe_.bos_id(); }
  int32_t eos_id() const override { return bpe_.eos_id(); }
  std::string fingerprint() const override { return bpe_.fingerprint(); }
  std::string_view kind() const override { return "bpe"; }

  const BpeTokenizer& bpe() const { return bpe_; }

 private:
  BpeTokenizer bpe_;
};

// `dir_or_file` is a checkpoint folder or a tokenizer file. In a folder,
// tokenizer.model wins over tokenizer.json: LLaMA-2 folders ship both, and
// their tokenizer.json is a SentencePiece imitation that the BPE loader
// refuses. A file is read by its name (.json, .model) or, failing that, by
// its first byte ('{' is JSON). Errors name the path.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_file);

}  // namespace spillway
