// BPE as Hugging Face `tokenizers` runs it: added tokens are cut out of the
// text first (added_tokens.h), each stretch between them is normalized
// (normalizer.h) and split into pre-tokens (pre_tokenizer_chain.h), and each
// pre-token is merged pairwise, lowest merge rank first (leftmost first among
// equals), until no ranked pair is left. Decoding runs tokenizer.json's
// decoder (token_decoder.h).
//
// Two kinds of model. Byte-level (GPT-2, LLaMA-3, Qwen, SmolLM: the
// pre-tokenizer ends in ByteLevel): token ids index raw byte strings and a
// pre-token starts as its bytes; the byte-level alphabet (byte_level.h) only
// matters on the way to and from tokenizer.json. Character-level
// (SentencePiece-style BPE of LLaMA-2, Mistral, TinyLlama): tokens are text
// ("▁the") and a pre-token starts as its characters; a character not in the
// vocabulary becomes its bytes' "<0xXX>" tokens (byte_fallback), or the
// unknown token, or nothing, as in Hugging Face.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/added_tokens.h"
#include "model/normalizer.h"
#include "model/pre_tokenizer.h"
#include "model/pre_tokenizer_chain.h"
#include "model/token_decoder.h"
#include "model/tokenizer.h"

namespace spillway {

// The special tokens of the tokenizers spillway trains (bpe_train.h). Only
// the trainer names them; a loaded tokenizer's roles come from its files.
inline constexpr std::string_view kBeginOfText = "<|begin_of_text|>";
inline constexpr std::string_view kEndOfText = "<|end_of_text|>";

using SpecialToken = AddedToken;
using MergeRule = std::pair<int32_t, int32_t>;  // left id, right id

struct BpeVocab {
  // Each token, indexed by id: raw bytes in a byte-level model, text in a
  // character-level one; an added token's entry is its content.
  std::vector<std::string> tokens;
  // In rank order: merges[0] is applied first. The merged token must exist.
  std::vector<MergeRule> merges;
  // Added tokens, special or not (their entries in `tokens` hold the text).
  std::vector<SpecialToken> specials;
  // spillway's own layout splits with this pattern (Split, Isolated) and
  // then maps bytes (ByteLevel without its regex).
  std::string pattern = std::string(kLlama3Pattern);
  // Hugging Face's `ignore_merges` (LLaMA-3 sets it): a pre-token that is
  // itself in the vocabulary becomes that one token without merging.
  bool ignore_merges = false;
  bool byte_level = true;
  bool byte_fallback = false;
  int32_t unk = -1;  // the unknown token; -1: none
  bool fuse_unk = false;
  // Byte-level tokens whose tokenizer.json text is outside the byte-level
  // alphabet: kept as that text, never made by merging.
  std::vector<int32_t> unreachable;
  // tokenizer.json's normalizer, pre_tokenizer and decoder as JSON text.
  // Empty: spillway's layout (no normalizer; `pattern` then ByteLevel; the
  // ByteLevel decoder).
  std::string normalizer, pre_tokenizer, decoder;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the vocabulary: merge ids are in range and their merged text
  // is a token, regular tokens are distinct, added token ids are in range,
  // the pipeline's JSON is one spillway reads. Throws Error("tokenizer", ...).
  explicit BpeTokenizer(BpeVocab vocab);
  BpeTokenizer(BpeTokenizer&&) noexcept = default;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept = default;

  // Text to ids. With allow_special, special token texts in `text` become
  // their ids (leftmost, longest first); without, they are ordinary text.
  // Any bytes are accepted (see pre_tokenizer.h on invalid UTF-8); with
  // spillway's layout decode(encode(text)) == text. Callable from several
  // threads; calls take turns on the shared pre-token cache.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  void encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  // Ids to text through the decoder, special tokens as their text. An id
  // outside the vocabulary throws Error naming it.
  std::string decode(std::span<const int32_t> ids) const override;

  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  std::string fingerprint() const override { return fingerprint_; }
  std::string_view kind() const override { return "bpe"; }
  std::optional<int32_t> token_id(std::string_view text) const override;
  std::string token_text(int32_t id) const override;

  const BpeVocab& vocab() const { return vocab_; }
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> special_id(std::string_view content) const;

  // The tokenizer.json text this tokenizer was read from, which saving
  // writes back unchanged; empty for one built in memory.
  const std::string& source_json() const { return source_json_; }
  void set_source_json(std::string text) { source_json_ = std::move(text); }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Pre-token -> ids. Text repeats its words, so most pre-tokens are merged
  // once; the cache stops growing at a fixed size to bound memory. Held by
  // pointer so that the tokenizer stays movable.
  struct Cache {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids_of_piece;
  };
  struct MergeResult {
    int32_t rank;
    int32_t merged;
  };

  void build();
  void encode_stretch(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge(std::vector<int32_t>& symbols) const;

  BpeVocab vocab_;
  std::string source_json_;
  bool own_layout_ = true;  // spillway's layout: the fast path, no normalizer
  std::unique_ptr<RegexPreTokenizer> pattern_splitter_;
  Normalizer normalizer_;
  PreTokenizerChain pre_tokenizer_;
  TokenDecoder decoder_;
  AddedTokens added_;
  std::array<int32_t, 256> byte_token_{};   // byte-level: -1 where the byte has no token
  std::array<int32_t, 256> fallback_token_{};  // "<0xXX>" tokens; -1 where absent
  std::unordered_map<uint64_t, MergeResult> merge_of_pair_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of_token_;  // regular tokens
  std::vector<bool> is_special_, is_added_, is_unreachable_;
  std::string fingerprint_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace spillway
