#include "model/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "base/status.h"
#include "model/byte_level.h"

namespace spillway {
namespace {

constexpr size_t kCacheCapacity = 1 << 18;
// Long pre-tokens (whitespace runs, ASCII art) rarely repeat: not cached.
constexpr size_t kLongestCachedPiece = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// For error messages: bytes as they appear in tokenizer.json.
std::string shown(std::string_view bytes) { return "\"" + byte_level::to_symbols(bytes) + "\""; }

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
};

// Lengths are hashed before contents so that no two vocabularies serialize
// to the same stream.
std::string fingerprint_of(const BpeVocab& v) {
  Fnv1a h;
  h.add("bpe1;");
  h.add_number(v.tokens.size());
  for (const std::string& t : v.tokens) {
    h.add_number(t.size());
    h.add(t);
  }
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
  h.add_number(v.pattern.size());
  h.add(v.pattern);
  h.add_number(v.ignore_merges ? 1 : 0);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h.hash));
  return hex;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocab vocab) : vocab_(std::move(vocab)), cache_(std::make_unique<Cache>()) {
  const auto n = static_cast<int64_t>(vocab_.tokens.size());
  SPW_CHECK(n > 0 && n <= INT32_MAX, "tokenizer", "vocabulary of ", n, " tokens");
  is_special_.assign(static_cast<size_t>(n), false);
  for (SpecialToken& s : vocab_.specials) {
    SPW_CHECK(s.id >= 0 && s.id < n, "tokenizer", "special token ", s.content, " has id ", s.id,
              " outside the vocabulary of ", n, " tokens");
    SPW_CHECK(!s.content.empty(), "tokenizer", "special token ", s.id, " is empty");
    SPW_CHECK(!is_special_[s.id], "tokenizer", "id ", s.id, " is given to two special tokens");
    is_special_[s.id] = true;
    // A special token's entry is its text, whatever the vocabulary said.
    vocab_.tokens[s.id] = s.content;
  }

  for (int32_t id = 0; id < n; ++id) {
    const std::string& bytes = vocab_.tokens[id];
    SPW_CHECK(!bytes.empty(), "tokenizer", "token ", id, " is empty");
    const auto [it, inserted] = id_of_bytes_.emplace(bytes, id);
    SPW_CHECK(inserted, "tokenizer", "tokens ", it->second, " and ", id, " both hold ", shown(bytes));
  }
  for (int byte = 0; byte < 256; ++byte) {
    const auto it = id_of_bytes_.find(std::string(1, static_cast<char>(byte)));
    if (it == id_of_bytes_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02x", byte);
      throw Error("tokenizer", std::string("no token for byte ") + hex + " (" +
                                   std::string(byte_level::symbol_of_byte(static_cast<uint8_t>(byte))) + ")");
    }
    byte_token_[byte] = it->second;
  }

  merge_of_pair_.reserve(vocab_.merges.size());
  for (size_t rank = 0; rank < vocab_.merges.size(); ++rank) {
    const auto [left, right] = vocab_.merges[rank];
    SPW_CHECK(left >= 0 && left < n && right >= 0 && right < n, "tokenizer", "merge ", rank, " names ids ",
              left, " and ", right, " outside the vocabulary of ", n, " tokens");
    const std::string merged = vocab_.tokens[left] + vocab_.tokens[right];
    const auto it = id_of_bytes_.find(merged);
    SPW_CHECK(it != id_of_bytes_.end(), "tokenizer", "merge ", rank, " makes ", shown(merged),
              ", which is no token");
    // A pair listed twice keeps its later rank, as in Hugging Face.
    merge_of_pair_.insert_or_assign(pair_key(left, right),
                                    MergeResult{static_cast<int32_t>(rank), it->second});
  }

  for (const SpecialToken& s : vocab_.specials) {
    specials_by_first_byte_[static_cast<uint8_t>(s.content[0])].push_back(s.id);
  }
  for (auto& ids : specials_by_first_byte_) {
    std::stable_sort(ids.begin(), ids.end(),
                     [&](int32_t a, int32_t b) { return vocab_.tokens[a].size() > vocab_.tokens[b].size(); });
  }

  pre_tokenizer_ = std::make_unique<RegexPreTokenizer>(vocab_.pattern);
  fingerprint_ = fingerprint_of(vocab_);
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  SPW_CHECK(id >= 0 && id < vocab_size(), "token id " + std::to_string(id), "outside the vocabulary of ",
            vocab_size(), " tokens");
  return vocab_.tokens[id];
}

bool BpeTokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size() && is_special_[id]; }

std::optional<int32_t> BpeTokenizer::special_id(std::string_view content) const {
  for (const SpecialToken& s : vocab_.specials) {
    if (s.content == content) return s.id;
  }
  return std::nullopt;
}

int32_t BpeTokenizer::bos_id() const {
  const auto id = special_id(kBeginOfText);
  SPW_CHECK(id.has_value(), "tokenizer", "has no ", kBeginOfText, " token");
  return *id;
}

int32_t BpeTokenizer::eos_id() const {
  const auto id = special_id(kEndOfText);
  SPW_CHECK(id.has_value(), "tokenizer", "has no ", kEndOfText, " token");
  return *id;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, allow_special, ids);
  return ids;
}

void BpeTokenizer::encode_append(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (!allow_special || vocab_.specials.empty()) {
    encode_ordinary(text, out);
    return;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const auto found = find_special(text, pos);
    if (!found) {
      encode_ordinary(text.substr(pos), out);
      break;
    }
    const auto [at, id] = *found;
    encode_ordinary(text.substr(pos, at - pos), out);
    out.push_back(id);
    pos = at + vocab_.tokens[id].size();
  }
}

std::optional<std::pair<size_t, int32_t>> BpeTokenizer::find_special(std::string_view text,
                                                                     size_t from) const {
  for (size_t i = from; i < text.size(); ++i) {
    for (int32_t id : specials_by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (text.substr(i).starts_with(vocab_.tokens[id])) return std::make_pair(i, id);
    }
  }
  return std::nullopt;
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  pre_tokenizer_->for_each_piece(text, [&](std::string_view piece) { encode_piece(piece, out); });
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (vocab_.ignore_merges) {
    const auto whole = id_of_bytes_.find(piece);
    if (whole != id_of_bytes_.end()) {
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
  const size_t first = out.size();
  merge_bytes(piece, out);
  if (cached.size() < kCacheCapacity && piece.size() <= kLongestCachedPiece) {
    cached.emplace(std::string(piece), std::vector<int32_t>(out.begin() + first, out.end()));
  }
}

// The standard BPE loop: repeatedly merge the adjacent pair of lowest rank,
// the leftmost one among equals. Symbols form a linked list and candidate
// pairs wait in a min-heap, so a long pre-token costs n log n, not n^2;
// heap entries made stale by an earlier merge are recognised and skipped.
void BpeTokenizer::merge_bytes(std::string_view piece, std::vector<int32_t>& out) const {
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
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_token_[static_cast<uint8_t>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
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
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

}  // namespace spillway
