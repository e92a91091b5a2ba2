#include "model/bpe_train.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "base/status.h"

namespace spillway {
namespace {

std::vector<std::pair<std::string, std::string>> merge_bytes(const BpeTokenizer& tok) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [l, r] : tok.vocab().merges) out.push_back({tok.token_bytes(l), tok.token_bytes(r)});
  return out;
}

// Training restated without any incremental bookkeeping: recount every pair
// of every word before each merge. Slow, but plainly right.
std::vector<std::pair<std::string, std::string>> reference_train(std::string_view text, int merges) {
  std::map<std::string, int64_t> counts;
  for (std::string_view piece : RegexPreTokenizer(kLlama3Pattern).split(text)) ++counts[std::string(piece)];
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<std::string> symbols;
    for (char c : piece) symbols.emplace_back(1, c);
    words.push_back({symbols, count});
  }
  std::vector<std::pair<std::string, std::string>> out;
  while (static_cast<int>(out.size()) < merges) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
    }
    if (pairs.empty()) break;
    // Highest count; std::map order makes the first of equals the smallest.
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    out.push_back(best->first);
    for (auto& [symbols, count] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == best->first.first &&
            symbols[i + 1] == best->first.second) {
          merged.push_back(symbols[i] + symbols[i + 1]);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols = std::move(merged);
    }
  }
  return out;
}

// Words from a tiny alphabet so that pairs repeat and counts tie often.
std::string random_text(uint64_t seed, int words) {
  std::mt19937_64 rng(seed);
  const std::string letters = "abcde";
  std::string text;
  for (int w = 0; w < words; ++w) {
    const int len = 1 + static_cast<int>(rng() % 7);
    for (int i = 0; i < len; ++i) text += letters[rng() % letters.size()];
    const uint64_t gap = rng() % 10;
    text += gap == 0 ? "\n" : gap == 1 ? "  " : gap == 2 ? ", " : " ";
    if (rng() % 17 == 0) text += std::to_string(rng() % 100000);
  }
  return text;
}

// Every kind of text a tokenizer meets: several scripts, emoji (with
// joiners and modifiers), whitespace runs, newlines, digit runs.
std::vector<std::string> awkward_texts() {
  return {"",
          "plain ascii words, with punctuation!",
          "caf\xC3\xA9 na\xC3\xAFve \xC3\xBC"
          "ber \xCE\xB1\xCE\xB2\xCE\xB3 \xD0\xB6\xD0\xB8\xD0\xB2",
          "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88",
          "\xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "
          "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
          "     leading and trailing     ",
          "\n\n\nlines\r\n\r\nand\tTabs\t\t\t",
          "1234567890 3.14159 1,000,000 007",
          "it's I'M we'LL they've",
          std::string("nul\0byte and \x7F del", 18)};
}

// Random code points of every UTF-8 length, encoded as valid UTF-8.
std::string random_utf8(std::mt19937_64& rng, int chars) {
  std::string s;
  for (int i = 0; i < chars; ++i) {
    uint32_t c;
    switch (rng() % 4) {
      case 0:
        c = static_cast<uint32_t>(rng() % 0x80);
        break;
      case 1:
        c = 0x80 + static_cast<uint32_t>(rng() % (0x800 - 0x80));
        break;
      case 2:
        c = 0x800 + static_cast<uint32_t>(rng() % (0x10000 - 0x800));
        break;
      default:
        c = 0x10000 + static_cast<uint32_t>(rng() % (0x110000 - 0x10000));
        break;
    }
    if (c >= 0xD800 && c <= 0xDFFF) c = 'x';  // surrogates are not characters
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else if (c < 0x800) {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      s += static_cast<char>(0xE0 | (c >> 12));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (c >> 18));
      s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return s;
}

TEST(BpeTrain, FirstMergesOnRepeatedLetters) {
  // Pre-tokens "aaaa" once and " aaaa" twice: (a,a) occurs 9 times, then
  // (aa,aa) 3 times, then (" ", aaaa) twice.
  const BpeTokenizer tok = train_bpe("aaaa aaaa aaaa", 256 + 3 + 1, {"<|end_of_text|>"});
  using M = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(merge_bytes(tok), (M{{"a", "a"}, {"aa", "aa"}, {" ", "aaaa"}}));
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.token_bytes(256), "aa");
  EXPECT_EQ(tok.token_bytes(259), "<|end_of_text|>");
  EXPECT_EQ(tok.encode("aaaa aaaa"), (std::vector<int32_t>{257, 258}));
}

TEST(BpeTrain, TiesGoToTheSmallestBytes) {
  // Every pair occurs once; " c" < " c"+"d" < "ab" byte-wise.
  const BpeTokenizer tok = train_bpe("ab cd", 256 + 3, {});
  using M = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(merge_bytes(tok), (M{{" ", "c"}, {" c", "d"}, {"a", "b"}}));
}

TEST(BpeTrain, MatchesFullRecountReference) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::string text = random_text(seed, 400 + 150 * static_cast<int>(seed));
    const int merges = 150;
    const BpeTokenizer tok = train_bpe(text, 256 + merges, {});
    EXPECT_EQ(merge_bytes(tok), reference_train(text, merges)) << "seed " << seed;
  }
}

TEST(BpeTrain, StopsWhenNoPairIsLeft) {
  const BpeTokenizer tok = train_bpe("abc abc", 1000, {"<|end_of_text|>"});
  // Pairs: a-b, b-c, space-a, then merged ones; "abc" and " abc" exhaust them.
  EXPECT_LT(tok.vocab_size(), 1000);
  EXPECT_EQ(tok.encode("abc abc").size(), 2u);
  EXPECT_EQ(tok.token_bytes(tok.vocab_size() - 1), "<|end_of_text|>");
}

TEST(BpeTrain, RoundTripsArbitraryText) {
  std::string corpus;
  for (const std::string& t : awkward_texts()) corpus += t + "\n";
  corpus += random_text(9, 3000);
  const BpeTokenizer tok = train_bpe(corpus, 600, {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_EQ(tok.vocab_size(), 600);
  for (const std::string& t : awkward_texts()) {
    EXPECT_EQ(tok.decode(tok.encode(t)), t);
    EXPECT_EQ(tok.decode(tok.encode(t, true)), t);
  }
  std::mt19937_64 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string t = random_utf8(rng, static_cast<int>(rng() % 50));
    ASSERT_EQ(tok.decode(tok.encode(t)), t);
  }
  for (int trial = 0; trial < 200; ++trial) {  // not UTF-8 at all
    std::string t(rng() % 50, '\0');
    for (char& c : t) c = static_cast<char>(rng());
    ASSERT_EQ(tok.decode(tok.encode(t)), t);
  }
  // Trained merges compress the text they were trained on.
  EXPECT_LT(tok.encode(corpus).size(), corpus.size() / 2);
}

TEST(BpeTrain, SpecialTokensAreCutOutAndAppended) {
  const std::string text = "one<|end_of_text|>two<|end_of_text|>one two";
  const BpeTokenizer tok = train_bpe(text, 300, {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_EQ(tok.bos_id(), tok.vocab_size() - 2);
  EXPECT_EQ(tok.eos_id(), tok.vocab_size() - 1);
  for (int32_t id = 256; id < tok.vocab_size() - 2; ++id) {
    EXPECT_EQ(tok.token_bytes(id).find('|'), std::string::npos) << "learned from a special token";
  }
  const std::vector<int32_t> ids = tok.encode(text, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos_id()), 2);
}

TEST(BpeTrain, RejectsImpossibleSizes) {
  EXPECT_THROW(train_bpe("abc", 257, {"<|begin_of_text|>", "<|end_of_text|>"}), Error);
  EXPECT_THROW(train_bpe("abc", 300, {"<|x|>", "<|x|>"}), Error);
}

TEST(BpeTrain, Deterministic) {
  const std::string text = random_text(21, 2000);
  EXPECT_EQ(train_bpe(text, 400, {}).fingerprint(), train_bpe(text, 400, {}).fingerprint());
}

}  // namespace
}  // namespace spillway
