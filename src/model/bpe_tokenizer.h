// Byte-level BPE, as GPT-2 and LLaMA-3 use it and as Hugging Face
// `tokenizers` runs it: special tokens are cut out of the text first, the
// rest is split into pre-tokens by a regular expression, and each pre-token's
// bytes are merged pairwise, lowest merge rank first (leftmost first among
// equals), until no ranked pair is left.
//
// Token ids index raw byte strings. The byte-level alphabet (byte_level.h)
// only matters on the way to and from tokenizer.json.
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

#include "model/pre_tokenizer.h"

namespace spillway {

inline constexpr std::string_view kBeginOfText = "<|begin_of_text|>";
inline constexpr std::string_view kEndOfText = "<|end_of_text|>";

struct SpecialToken {
  std::string content;
  int32_t id = 0;
};

using MergeRule = std::pair<int32_t, int32_t>;  // left id, right id

struct BpeVocab {
  // Bytes of each token, indexed by id; a special token's entry is its text.
  std::vector<std::string> tokens;
  // In rank order: merges[0] is applied first. The merged token must exist.
  std::vector<MergeRule> merges;
  // Ids that are special tokens (their entries in `tokens` hold the text).
  std::vector<SpecialToken> specials;
  std::string pattern = std::string(kLlama3Pattern);
  // Hugging Face's `ignore_merges` (LLaMA-3 sets it): a pre-token that is
  // itself in the vocabulary becomes that one token without merging.
  bool ignore_merges = false;
};

class BpeTokenizer {
 public:
  // Validates the vocabulary: every byte has a single-byte token, merge ids
  // are in range and their merged bytes are a token, regular tokens are
  // distinct, special ids are in range. Throws Error("tokenizer", ...).
  explicit BpeTokenizer(BpeVocab vocab);

  // Text to ids. With allow_special, special token texts in `text` become
  // their ids (leftmost, longest first); without, they are ordinary text.
  // Any bytes are accepted (see pre_tokenizer.h on invalid UTF-8), and
  // decode(encode(text)) == text. Callable from several threads; calls take
  // turns on the shared pre-token cache.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const;

  // Ids to bytes, special tokens as their text. An id outside the
  // vocabulary throws Error naming it.
  std::string decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  const BpeVocab& vocab() const { return vocab_; }
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> special_id(std::string_view content) const;
  // Ids of kBeginOfText and kEndOfText; Error when the vocabulary lacks them.
  int32_t bos_id() const;
  int32_t eos_id() const;

  // 16 hex digits identifying tokens, merges, specials, pattern and
  // ignore_merges: equal fingerprints encode text identically. Token files
  // record it so data is never read with a different tokenizer.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t merged;
  };
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

  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_bytes(std::string_view piece, std::vector<int32_t>& out) const;
  // Position and id of the leftmost-longest special token at or after `from`.
  std::optional<std::pair<size_t, int32_t>> find_special(std::string_view text, size_t from) const;

  BpeVocab vocab_;
  std::unique_ptr<RegexPreTokenizer> pre_tokenizer_;
  std::array<int32_t, 256> byte_token_{};
  std::unordered_map<uint64_t, MergeResult> merge_of_pair_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of_bytes_;  // regular tokens
  std::vector<bool> is_special_;
  // Specials grouped by first byte, longest first, for the text scan.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte_;
  std::string fingerprint_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace spillway
