// LLaMA-1/2's tokenizer: a SentencePiece model file (tokenizer.model) run by
// the SentencePiece library itself, so ids are exactly the reference ones.
//
// SentencePiece treats "<s>" in text as ordinary characters. To let chat
// formats written as text (chat_template.h) reach the BOS and EOS ids, encode
// with allow_special cuts the text of control and unknown pieces out first
// and encodes each stretch between them on its own, as Meta's reference code
// does when it encodes each dialog turn with bos/eos. Every stretch gets
// SentencePiece's dummy prefix space; decode removes it again per stretch, so
// decode(encode(text, allow_special)) == text for a model whose normalizer
// leaves text alone (LLaMA's does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace spillway {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws Error(path, ...) when the file is missing or is not a
  // SentencePiece model, and Error(path, "built without SentencePiece") in a
  // build that lacks the library.
  // Its roles start as the model says: its BOS and EOS, and a BOS first in
  // every text, as LLaMA-2 encodes.
  explicit SentencePieceTokenizer(const std::string& path);
  // A model given as its serialized ModelProto; `name` names it in errors.
  static SentencePieceTokenizer from_serialized(const std::string& proto, const std::string& name);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  // BOS first, as LLaMA-2 starts every sequence.
  std::vector<int32_t> encode_with_bos(std::string_view text, bool allow_special = false) const;
  std::string decode(std::span<const int32_t> ids) const override;

  int32_t vocab_size() const override;
  std::string fingerprint() const override;
  std::string_view kind() const override { return "sentencepiece"; }
  std::optional<int32_t> token_id(std::string_view text) const override;
  std::string token_text(int32_t id) const override { return piece(id); }
  // The ModelProto bytes, as tokenizer.model holds them.
  std::string serialized_model() const;
  // A piece's score and its type as SentencePiece and GGUF number them
  // (1 normal, 2 unknown, 3 control, 5 unused, 6 byte).
  float score(int32_t id) const;
  int piece_type(int32_t id) const;

  // The piece text of an id ("▁the", "<s>"); Error when out of range.
  std::string piece(int32_t id) const;

 private:
  struct Impl;
  SentencePieceTokenizer() = default;
  void load(const std::string& path, const std::string* proto);

  std::unique_ptr<Impl> impl_;
};

}  // namespace spillway
