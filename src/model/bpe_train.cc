#include "model/bpe_train.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/status.h"
#include "model/pre_tokenizer.h"

namespace spillway {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}
int32_t left_of(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

// Calls `segment` for each stretch of `text` between special token texts.
// The next occurrence of each special is remembered, so the text is scanned
// once per special however many times it occurs.
void for_each_ordinary_segment(std::string_view text, const std::vector<std::string>& specials,
                               const std::function<void(std::string_view)>& segment) {
  std::vector<size_t> next(specials.size());
  for (size_t s = 0; s < specials.size(); ++s) next[s] = text.find(specials[s]);
  size_t pos = 0;
  while (true) {
    size_t at = std::string_view::npos, length = 0;
    for (size_t s = 0; s < specials.size(); ++s) {
      if (next[s] != std::string_view::npos && next[s] < pos) next[s] = text.find(specials[s], pos);
      if (next[s] < at || (next[s] == at && at != std::string_view::npos && specials[s].size() > length)) {
        at = next[s];
        length = specials[s].size();
      }
    }
    if (at == std::string_view::npos) break;
    if (at > pos) segment(text.substr(pos, at - pos));
    pos = at + length;
  }
  if (pos < text.size()) segment(text.substr(pos));
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

class Trainer {
 public:
  Trainer(std::vector<Word> words, int32_t target_tokens) : words_(std::move(words)), target_(target_tokens) {
    for (int byte = 0; byte < 256; ++byte) {
      tokens_.emplace_back(1, static_cast<char>(byte));
      id_of_bytes_.emplace(tokens_.back(), byte);
    }
    for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) {
      const Word& word = words_[w];
      for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
        const uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
        pair_counts_[key] += word.count;
        words_with_pair_[key].push_back(w);
      }
    }
    for (const auto& [key, count] : pair_counts_) heap_.push_back({count, key});
    std::make_heap(heap_.begin(), heap_.end(), before());
  }

  void run() {
    while (static_cast<int32_t>(tokens_.size()) < target_) {
      const auto best = pop_best();
      if (!best) break;
      merge(*best);
    }
  }

  std::vector<std::string>& tokens() { return tokens_; }
  std::vector<MergeRule>& merges() { return merges_; }

 private:
  struct Candidate {
    int64_t count;
    uint64_t key;
  };

  // Heap order: a candidate sorts before another (pops later) when its count
  // is lower, or equal with larger bytes.
  struct Before {
    const std::vector<std::string>* tokens;
    bool operator()(const Candidate& a, const Candidate& b) const {
      if (a.count != b.count) return a.count < b.count;
      const std::string& al = (*tokens)[left_of(a.key)];
      const std::string& bl = (*tokens)[left_of(b.key)];
      if (al != bl) return al > bl;
      return (*tokens)[right_of(a.key)] > (*tokens)[right_of(b.key)];
    }
  };
  Before before() const { return Before{&tokens_}; }

  // Heap entries may hold counts that have since dropped (counts only rise
  // for pairs with a new token, and those are pushed afresh), so an entry
  // whose count is current is the true best; a stale one is re-pushed.
  std::optional<uint64_t> pop_best() {
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), before());
      const Candidate c = heap_.back();
      heap_.pop_back();
      const auto it = pair_counts_.find(c.key);
      if (it == pair_counts_.end() || it->second <= 0) continue;
      if (it->second == c.count) return c.key;
      push({it->second, c.key});
    }
    return std::nullopt;
  }

  void push(Candidate c) {
    heap_.push_back(c);
    std::push_heap(heap_.begin(), heap_.end(), before());
  }

  void add_pairs(const Word& word, int64_t sign) {
    for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const uint64_t key = pair_key(word.symbols[i], word.symbols[i + 1]);
      const auto it = pair_counts_.try_emplace(key, 0).first;
      it->second += sign * word.count;
      if (it->second <= 0) pair_counts_.erase(it);
    }
  }

  void merge(uint64_t key) {
    const int32_t left = left_of(key), right = right_of(key);
    std::string merged = tokens_[left] + tokens_[right];
    int32_t id;
    // Two merge paths can spell the same bytes; they share one token, as in
    // Hugging Face's trainer.
    if (const auto it = id_of_bytes_.find(merged); it != id_of_bytes_.end()) {
      id = it->second;
    } else {
      id = static_cast<int32_t>(tokens_.size());
      id_of_bytes_.emplace(merged, id);
      tokens_.push_back(std::move(merged));
    }
    merges_.push_back({left, right});

    std::vector<int32_t> affected = std::move(words_with_pair_[key]);
    words_with_pair_.erase(key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());

    std::unordered_set<uint64_t> new_pairs;
    std::vector<int32_t> merged_symbols;
    for (int32_t w : affected) {
      Word& word = words_[w];
      const std::vector<int32_t>& s = word.symbols;
      merged_symbols.clear();
      bool changed = false;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == left && s[i + 1] == right) {
          merged_symbols.push_back(id);
          ++i;
          changed = true;
        } else {
          merged_symbols.push_back(s[i]);
        }
      }
      if (!changed) continue;  // a stale listing: an earlier merge took the pair
      add_pairs(word, -1);
      word.symbols.swap(merged_symbols);
      add_pairs(word, +1);
      // Only pairs with the new token are new to this word; every other pair
      // already listed it.
      for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
        if (word.symbols[i] != id && word.symbols[i + 1] != id) continue;
        const uint64_t pair = pair_key(word.symbols[i], word.symbols[i + 1]);
        words_with_pair_[pair].push_back(w);
        new_pairs.insert(pair);
      }
    }
    pair_counts_.erase(key);
    for (uint64_t pair : new_pairs) {
      const auto it = pair_counts_.find(pair);
      if (it != pair_counts_.end()) push({it->second, pair});
    }
  }

  std::vector<Word> words_;
  int32_t target_;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> id_of_bytes_;
  std::vector<MergeRule> merges_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> words_with_pair_;
  std::vector<Candidate> heap_;
};

}  // namespace

BpeTokenizer train_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& options) {
  const auto specials = static_cast<int32_t>(options.special_tokens.size());
  SPW_CHECK(options.vocab_size >= 256 + specials, "BPE training", "a vocabulary of ", options.vocab_size,
            " tokens cannot hold the 256 bytes and ", specials, " special tokens");
  for (size_t i = 0; i < options.special_tokens.size(); ++i) {
    SPW_CHECK(!options.special_tokens[i].empty(), "BPE training", "special token ", i, " is empty");
    for (size_t j = 0; j < i; ++j) {
      SPW_CHECK(options.special_tokens[i] != options.special_tokens[j], "BPE training", "special token ",
                options.special_tokens[i], " is given twice");
    }
  }

  const RegexPreTokenizer pre_tokenizer(options.pattern);
  std::unordered_map<std::string_view, int64_t> piece_counts;
  for (std::string_view text : texts) {
    for_each_ordinary_segment(text, options.special_tokens, [&](std::string_view segment) {
      pre_tokenizer.for_each_piece(segment, [&](std::string_view piece) { ++piece_counts[piece]; });
    });
  }
  std::vector<Word> words;
  for (const auto& [piece, count] : piece_counts) {
    if (piece.size() < 2) continue;  // nothing to merge
    Word word{std::vector<int32_t>(piece.size()), count};
    for (size_t i = 0; i < piece.size(); ++i) word.symbols[i] = static_cast<uint8_t>(piece[i]);
    words.push_back(std::move(word));
  }
  piece_counts.clear();

  Trainer trainer(std::move(words), options.vocab_size - specials);
  trainer.run();

  BpeVocab vocab;
  vocab.tokens = std::move(trainer.tokens());
  vocab.merges = std::move(trainer.merges());
  for (const std::string& content : options.special_tokens) {
    vocab.specials.push_back({content, static_cast<int32_t>(vocab.tokens.size())});
    vocab.tokens.push_back(content);
  }
  vocab.pattern = options.pattern;
  BpeTokenizer tokenizer(std::move(vocab));
  TokenRoles roles;
  roles.bos = tokenizer.special_id(options.bos_token);
  roles.eos = tokenizer.special_id(options.eos_token);
  tokenizer.set_roles(roles);
  return tokenizer;
}

}  // namespace spillway
