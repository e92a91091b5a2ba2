// One face for the tokenizers a LLaMA-family checkpoint can ship: BPE in
// tokenizer.json as Hugging Face `tokenizers` runs it (byte-level as in
// LLaMA-3, GPT-2, SmolLM and Qwen; SentencePiece-style with byte fallback as
// in LLaMA-2, Mistral and TinyLlama), SentencePiece's own tokenizer.model,
// and the tokenizer inside a GGUF file, so that training data, evaluation and
// generation need not know which one they hold.
//
// Which token begins or ends a text, which ends a turn, and whether a BOS is
// put first, are the tokenizer's roles: they come from the model's files
// (tokenizer_config.json, generation_config.json, config.json, the
// tokenizer's own post-processor, GGUF metadata), never from a token's name.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spillway {

struct TokenRoles {
  std::optional<int32_t> bos, eos, pad, unk;
  // Ids that end generation: the EOS and the end-of-turn tokens
  // (generation_config.json's eos_token_id list, GGUF's eot_token_id).
  std::vector<int32_t> stops;
  bool add_bos = false;  // the model's texts start with BOS (Hugging Face's add_special_tokens)
  bool add_eos = false;
  std::string chat_template;  // Jinja, as tokenizer_config.json keeps it; empty: none
  // tokenizer_config.json as it was read (empty: none), written back
  // unchanged so that settings spillway does not use survive a checkpoint.
  std::string config_text;
};

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
  // 16 hex digits; equal fingerprints encode text identically, so token
  // files can refuse data made by another tokenizer.
  virtual std::string fingerprint() const = 0;
  // "bpe" or "sentencepiece", for messages and logs.
  virtual std::string_view kind() const = 0;
  // A token's id by its text as the tokenizer's files spell it ("<|eot_id|>",
  // "</s>"); nullopt when there is none.
  virtual std::optional<int32_t> token_id(std::string_view text) const = 0;
  // A token's text as the tokenizer's files spell it; Error when out of range.
  virtual std::string token_text(int32_t id) const = 0;

  const TokenRoles& roles() const { return roles_; }
  // Error("tokenizer", ...) when an id is outside the vocabulary. The EOS is
  // always among the stops.
  void set_roles(TokenRoles roles);
  // Error("tokenizer", ...) saying which files would have named it.
  int32_t bos_id() const;
  int32_t eos_id() const;
  bool is_stop(int32_t id) const;
  // encode(), with BOS first when the model's texts start with one: what
  // transformers' tokenizer(text) gives.
  std::vector<int32_t> encode_text(std::string_view text, bool allow_special = false) const;

 protected:
  TokenRoles roles_;
};

// `path` is a checkpoint folder, a tokenizer file or a .gguf file. In a
// folder, tokenizer.json wins over tokenizer.model, as in transformers'
// AutoTokenizer: LLaMA-2 and Mistral folders ship both, and tokens added in
// fine-tuning (chat markers, padding) are only in tokenizer.json. A
// file is read by its name (.json, .model, .gguf) or, failing that, by its
// first bytes. Roles come from the files beside the tokenizer
// (tokenizer_config.json, generation_config.json, config.json) over what the
// tokenizer itself says. Errors name the path.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace spillway
