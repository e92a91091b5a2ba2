#include "model/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "base/status.h"
#include "model/byte_level.h"
#include "model/unicode_text.h"

namespace spillway {
namespace {

constexpr size_t kCacheCapacity = 1 << 18;
// Long pre-tokens (whitespace runs, ASCII art) rarely repeat: not cached.
constexpr size_t kLongestCachedPiece = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

struct Fnv1a {
  uint64_t hash = 0xcbf29ce484222325ull;
  void add(std::string_view bytes) {
    for (char c : bytes) {
      hash ^= static_cast<uint8_t>(c);
      hash *= 0x100000001b3ull;
    }
  }
  void add_number(uint64_t n) {
    char digits[24];
    const int len = std::snprintf(digits, sizeof(digits), "%llu;", static_cast<unsigned long long>(n));
    add(std::string_view(digits, static_cast<size_t>(len)));
  }
  void add_text(std::string_view text) {
    add_number(text.size());
    add(text);
  }
};

bool own_layout(const BpeVocab& v) {
  const bool plain_added = std::all_of(v.specials.begin(), v.specials.end(), [](const SpecialToken& s) {
    return s.special && !s.lstrip && !s.rstrip && !s.single_word;
  });
  return v.byte_level && !v.byte_fallback && v.unk < 0 && v.unreachable.empty() && v.normalizer.empty() &&
         v.pre_tokenizer.empty() && v.decoder.empty() && plain_added;
}

// Lengths are hashed before contents so that no two vocabularies serialize
// to the same stream. What spillway's own layout leaves at its defaults is
// not hashed, so its fingerprints stay those of earlier token files.
std::string fingerprint_of(const BpeVocab& v) {
  Fnv1a h;
  h.add("bpe1;");
  h.add_number(v.tokens.size());
  for (const std::string& t : v.tokens) h.add_text(t);
  h.add_number(v.merges.size());
  for (const auto& [left, right] : v.merges) {
    h.add_number(static_cast<uint32_t>(left));
    h.add_number(static_cast<uint32_t>(right));
  }
  std::vector<int32_t> special_ids;
  for (const SpecialToken& s : v.specials) special_ids.push_back(s.id);
  std::sort(special_ids.begin(), special_ids.end());
  h.add_number(special_ids.size());
  for (int32_t id : special_ids) h.add_number(static_cast<uint32_t>(id));
  h.add_text(v.pattern);
  h.add_number(v.ignore_merges ? 1 : 0);
  if (!own_layout(v)) {
    h.add("pipeline;");
    h.add_number((v.byte_level ? 1 : 0) | (v.byte_fallback ? 2 : 0) | (v.fuse_unk ? 4 : 0));
    h.add_number(static_cast<uint32_t>(v.unk));
    for (const SpecialToken& s : v.specials) {
      h.add_number(static_cast<uint32_t>(s.id));
      h.add_number((s.special ? 1 : 0) | (s.lstrip ? 2 : 0) | (s.rstrip ? 4 : 0) | (s.single_word ? 8 : 0));
    }
    h.add_text(v.normalizer);
    h.add_text(v.pre_tokenizer);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h.hash));
  return hex;
}

nlohmann::json parse_json(const std::string& text) {
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocab vocab) : vocab_(std::move(vocab)), cache_(std::make_unique<Cache>()) { build(); }

void BpeTokenizer::build() {
  const auto n = static_cast<int64_t>(vocab_.tokens.size());
  SPW_CHECK(n > 0 && n <= INT32_MAX, "tokenizer", "vocabulary of ", n, " tokens");
  is_special_.assign(static_cast<size_t>(n), false);
  is_added_.assign(static_cast<size_t>(n), false);
  is_unreachable_.assign(static_cast<size_t>(n), false);
  for (SpecialToken& s : vocab_.specials) {
    SPW_CHECK(s.id >= 0 && s.id < n, "tokenizer", "added token ", s.content, " has id ", s.id,
              " outside the vocabulary of ", n, " tokens");
    SPW_CHECK(!s.content.empty(), "tokenizer", "added token ", s.id, " is empty");
    SPW_CHECK(!is_added_[s.id], "tokenizer", "id ", s.id, " is given to two added tokens");
    is_added_[s.id] = true;
    is_special_[s.id] = s.special;
    // An added token's entry is its text, whatever the vocabulary said.
    vocab_.tokens[s.id] = s.content;
  }
  for (int32_t id : vocab_.unreachable) {
    SPW_CHECK(id >= 0 && id < n, "tokenizer", "unreachable token id ", id, " is outside the vocabulary");
    is_unreachable_[id] = true;
  }

  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = vocab_.tokens[id];
    SPW_CHECK(!text.empty(), "tokenizer", "token ", id, " is empty");
    if (is_added_[id] || is_unreachable_[id]) continue;
    const auto [it, inserted] = id_of_token_.emplace(text, id);
    SPW_CHECK(inserted, "tokenizer", "tokens ", it->second, " and ", id, " both hold \"",
              vocab_.byte_level ? byte_level::to_symbols(text) : text, "\"");
  }
  // Added tokens that are also in the vocabulary (GPT-2's <|endoftext|>) can
  // still be merged to where no other token holds their text.
  for (const SpecialToken& s : vocab_.specials) id_of_token_.emplace(s.content, s.id);
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = id_of_token_.find(std::string(1, static_cast<char>(byte)));
    byte_token_[byte] = vocab_.byte_level && it != id_of_token_.end() ? it->second : -1;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", byte);
    const auto fallback = id_of_token_.find(std::string_view(name));
    fallback_token_[byte] = fallback != id_of_token_.end() ? fallback->second : -1;
  }

  merge_of_pair_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto [left, right] = vocab_.merges[rank];
    SPW_CHECK(left >= 0 && left < n && right >= 0 && right < n, "tokenizer", "merge ", rank, " names ids ",
              left, " and ", right, " outside the vocabulary of ", n, " tokens");
    const std::string merged = vocab_.tokens[left] + vocab_.tokens[right];
    const auto it = id_of_token_.find(merged);
    SPW_CHECK(it != id_of_token_.end(), "tokenizer", "merge ", rank, " makes \"",
              vocab_.byte_level ? byte_level::to_symbols(merged) : merged, "\", which is no token");
    // A pair listed twice keeps its later rank, as in Hugging Face.
    merge_of_pair_.insert_or_assign(pair_key(left, right), MergeResult{static_cast<int32_t>(rank), it->second});
  }
  SPW_CHECK(vocab_.unk < n, "tokenizer", "unknown token id ", vocab_.unk, " is outside the vocabulary");

  own_layout_ = own_layout(vocab_);
  added_ = AddedTokens(vocab_.specials);
  try {
    normalizer_ = Normalizer(parse_json(vocab_.normalizer), "tokenizer");
    if (vocab_.pre_tokenizer.empty()) {
      pattern_splitter_ = std::make_unique<RegexPreTokenizer>(vocab_.pattern);
      pre_tokenizer_ = PreTokenizerChain(
          {{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"}, {"pattern", {{"Regex", vocab_.pattern}}}, {"behavior", "Isolated"}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}},
          "tokenizer");
    } else {
      pre_tokenizer_ = PreTokenizerChain(parse_json(vocab_.pre_tokenizer), "tokenizer");
    }
    decoder_ = vocab_.decoder.empty() ? TokenDecoder::byte_level()
                                      : TokenDecoder(parse_json(vocab_.decoder), "tokenizer");
  } catch (const nlohmann::json::exception& e) {
    throw Error("tokenizer", std::string("pipeline is not valid JSON: ") + e.what());
  }
  SPW_CHECK(pre_tokenizer_.byte_level() == vocab_.byte_level, "tokenizer",
            vocab_.byte_level ? "a byte-level vocabulary needs a pre-tokenizer ending in ByteLevel"
                              : "a pre-tokenizer ending in ByteLevel needs a byte-level vocabulary");
  fingerprint_ = fingerprint_of(vocab_);
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  SPW_CHECK(id >= 0 && id < vocab_size(), "token id " + std::to_string(id), "outside the vocabulary of ",
            vocab_size(), " tokens");
  return vocab_.tokens[id];
}

std::string BpeTokenizer::token_text(int32_t id) const {
  const std::string& t = token_bytes(id);
  return vocab_.byte_level && !is_added_[id] && !is_unreachable_[id] ? byte_level::to_symbols(t) : t;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view text) const {
  if (auto id = special_id(text)) return id;
  if (!vocab_.byte_level) {
    const auto it = id_of_token_.find(text);
    return it == id_of_token_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  if (auto bytes = byte_level::from_symbols(text)) {
    const auto it = id_of_token_.find(*bytes);
    if (it != id_of_token_.end()) return it->second;
  }
  for (int32_t id : vocab_.unreachable) {
    if (vocab_.tokens[id] == text) return id;
  }
  return std::nullopt;
}

bool BpeTokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && is_special_[id]; }

std::optional<int32_t> BpeTokenizer::special_id(std::string_view content) const {
  for (const SpecialToken& s : vocab_.specials) {
    if (s.content == content) return s.id;
  }
  return std::nullopt;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, allow_special, ids);
  return ids;
}

void BpeTokenizer::encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (added_.empty()) {
    encode_stretch(text, true, out);
    return;
  }
  added_.split(
      text, allow_special, [&](std::string_view stretch, size_t offset) { encode_stretch(stretch, offset == 0, out); },
      [&](int32_t id) { out.push_back(id); });
}

void BpeTokenizer::encode_stretch(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (own_layout_) {
    pattern_splitter_->for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, out); });
    return;
  }
  std::vector<std::string> pieces;
  if (normalizer_.empty()) {
    pre_tokenizer_.split(text, at_start, pieces);
  } else {
    pre_tokenizer_.split(normalizer_.apply(text), at_start, pieces);
  }
  for (const std::string& piece : pieces) encode_piece(piece, out);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (vocab_.byte_level && piece.size() == 1 && byte_token_[static_cast<uint8_t>(piece[0])] >= 0) {
    out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (vocab_.ignore_merges) {
    const auto whole = id_of_token_.find(piece);
    if (whole != id_of_token_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  auto& cached = cache_->ids_of_piece;
  const auto hit = cached.find(piece);
  if (hit != cached.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<int32_t> symbols;
  initial_symbols(piece, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cached.size() < kCacheCapacity && piece.size() <= kLongestCachedPiece) {
    cached.emplace(std::string(piece), std::move(symbols));
  }
}

// Hugging Face's BPE::merge_word: each byte (byte-level) or character is a
// token if the vocabulary has it; otherwise its bytes' "<0xXX>" tokens when
// byte_fallback has them all; otherwise the unknown token (one for a run of
// unknowns when fuse_unk); otherwise nothing.
void BpeTokenizer::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  bool previous_unknown = false;
  for (size_t at = 0; at < piece.size();) {
    const size_t len = vocab_.byte_level ? 1 : unicode::char_length(piece, at);
    const std::string_view unit = piece.substr(at, len);
    at += len;
    int32_t id = -1;
    if (vocab_.byte_level) {
      id = byte_token_[static_cast<uint8_t>(unit[0])];
    } else {
      const auto it = id_of_token_.find(unit);
      if (it != id_of_token_.end()) id = it->second;
    }
    if (id >= 0) {
      symbols.push_back(id);
      previous_unknown = false;
      continue;
    }
    if (vocab_.byte_fallback &&
        std::all_of(unit.begin(), unit.end(), [&](char b) { return fallback_token_[static_cast<uint8_t>(b)] >= 0; })) {
      for (char b : unit) symbols.push_back(fallback_token_[static_cast<uint8_t>(b)]);
      previous_unknown = false;
      continue;
    }
    if (vocab_.unk >= 0 && !(vocab_.fuse_unk && previous_unknown)) symbols.push_back(vocab_.unk);
    previous_unknown = vocab_.unk >= 0;
  }
}

// The standard BPE loop: repeatedly merge the adjacent pair of lowest rank,
// the leftmost one among equals. Symbols form a linked list and candidate
// pairs wait in a min-heap, so a long pre-token costs n log n, not n^2;
// heap entries made stale by an earlier merge are recognised and skipped.
void BpeTokenizer::merge(std::vector<int32_t>& ids) const {
  if (ids.size() < 2) return;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left;
    int32_t right;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const auto n = static_cast<int32_t>(ids.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::vector<Candidate> heap;
  const auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merge_of_pair_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it == merge_of_pair_.end()) return;
    heap.push_back({it->second.rank, pos, symbols[pos].id, symbols[next].id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    // Stale: the left symbol was absorbed or changed, or its neighbour did.
    if (left.id != c.left || left.next < 0 || symbols[left.next].id != c.right) continue;
    const int32_t removed = left.next;
    left.id = merge_of_pair_.at(pair_key(c.left, c.right)).merged;
    left.next = symbols[removed].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    symbols[removed].id = -1;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  if (vocab_.decoder.empty()) {
    std::string text;
    for (int32_t id : ids) text += token_bytes(id);
    return text;
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) tokens.push_back(token_text(id));
  return decoder_.decode(std::move(tokens));
}

}  // namespace spillway
