#include "model/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "base/status.h"

namespace spillway {
namespace {

// A vocabulary built from merges given as byte strings. The 256 byte tokens
// come first but in a shuffled order, as in LLaMA-3's vocabulary, where a
// byte's id is not its value.
BpeVocab vocab_from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                           uint64_t byte_order_seed = 5) {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  std::mt19937_64 rng(byte_order_seed);
  std::shuffle(v.tokens.begin(), v.tokens.end(), rng);
  const auto id_of = [&](const std::string& bytes) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), bytes);
    if (it != v.tokens.end()) return static_cast<int32_t>(it - v.tokens.begin());
    v.tokens.push_back(bytes);
    return static_cast<int32_t>(v.tokens.size() - 1);
  };
  for (const auto& [left, right] : merges) {
    const int32_t l = id_of(left), r = id_of(right);
    id_of(left + right);
    v.merges.push_back({l, r});
  }
  return v;
}

std::vector<std::string> pieces_of(const BpeTokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_bytes(id));
  return out;
}

// The textbook loop, written for clarity: merge the lowest-ranked adjacent
// pair, leftmost first, until none is ranked. Quadratic, so small inputs.
std::vector<std::string> reference_bpe(std::string_view piece, const BpeVocab& v, bool ignore_merges) {
  if (ignore_merges && std::find(v.tokens.begin(), v.tokens.end(), piece) != v.tokens.end()) {
    return {std::string(piece)};
  }
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < v.merges.size(); ++i) {
    rank.insert_or_assign({v.tokens[v.merges[i].first], v.tokens[v.merges[i].second]}, i);
  }
  std::vector<std::string> symbols;
  for (char c : piece) symbols.emplace_back(1, c);
  while (true) {
    size_t best = SIZE_MAX, at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == SIZE_MAX) return symbols;
    symbols[at] += symbols[at + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
}

TEST(BpeTokenizer, AppliesMergesByRank) {
  const BpeTokenizer tok(vocab_from_merges({{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces_of(tok, tok.encode("abc")), (P{"abc"}));
  EXPECT_EQ(pieces_of(tok, tok.encode("bc")), (P{"bc"}));
  EXPECT_EQ(pieces_of(tok, tok.encode("abbc")), (P{"ab", "bc"}));  // (a,b) ranks before (b,c)
  EXPECT_EQ(pieces_of(tok, tok.encode("cab")), (P{"c", "ab"}));
}

TEST(BpeTokenizer, LeftmostFirstAmongEqualRanks) {
  const BpeTokenizer tok(vocab_from_merges({{"a", "a"}}));
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces_of(tok, tok.encode("aaa")), (P{"aa", "a"}));
  EXPECT_EQ(pieces_of(tok, tok.encode("aaaaa")), (P{"aa", "aa", "a"}));
}

TEST(BpeTokenizer, IgnoreMergesTakesWholePreTokens) {
  // "abc" is a token reachable only as a + bc, but (a,b) ranks first, so
  // plain BPE ends at ab + c; with ignore_merges the whole word wins.
  BpeVocab v = vocab_from_merges({{"a", "b"}, {"b", "c"}, {"a", "bc"}});
  BpeTokenizer plain(v);
  v.ignore_merges = true;
  BpeTokenizer whole(v);
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces_of(plain, plain.encode("abc")), (P{"ab", "c"}));
  EXPECT_EQ(pieces_of(whole, whole.encode("abc")), (P{"abc"}));
  EXPECT_EQ(pieces_of(whole, whole.encode("abcc")), (P{"ab", "c", "c"}));  // not in the vocabulary
}

TEST(BpeTokenizer, MatchesReferenceOnRandomMerges) {
  std::mt19937_64 rng(11);
  const std::string alphabet = "abc d\n1";
  // Random merges over tokens that already exist, so later merges build on
  // earlier ones the way trained merges do.
  std::vector<std::string> known;
  for (char c : alphabet) known.emplace_back(1, c);
  std::vector<std::pair<std::string, std::string>> merges;
  while (merges.size() < 120) {
    const std::string& l = known[rng() % known.size()];
    const std::string& r = known[rng() % known.size()];
    if (l.size() + r.size() > 6) continue;
    merges.push_back({l, r});
    if (std::find(known.begin(), known.end(), l + r) == known.end()) known.push_back(l + r);
  }
  for (bool ignore_merges : {false, true}) {
    BpeVocab v = vocab_from_merges(merges);
    v.ignore_merges = ignore_merges;
    const BpeTokenizer tok(v);
    for (int trial = 0; trial < 300; ++trial) {
      std::string text(1 + rng() % 40, ' ');
      for (char& c : text) c = alphabet[rng() % alphabet.size()];
      std::vector<std::string> want;
      for (std::string_view piece : RegexPreTokenizer(v.pattern).split(text)) {
        for (std::string& s : reference_bpe(piece, v, ignore_merges)) want.push_back(std::move(s));
      }
      const std::vector<int32_t> ids = tok.encode(text);
      ASSERT_EQ(pieces_of(tok, ids), want) << "text: " << text << " ignore_merges " << ignore_merges;
      EXPECT_EQ(tok.decode(ids), text);
    }
  }
}

TEST(BpeTokenizer, LongPreTokenMatchesReference) {
  const BpeTokenizer tok(vocab_from_merges({{"a", "a"}, {"aa", "a"}, {"aa", "aa"}, {"aaaa", "aaa"}}));
  const std::string word(1500, 'a');
  std::vector<std::string> want = reference_bpe(word, tok.vocab(), false);
  EXPECT_EQ(pieces_of(tok, tok.encode(word)), want);
  const std::string huge(300000, 'a');  // n log n: instant; a quadratic loop would crawl
  EXPECT_EQ(tok.decode(tok.encode(huge)), huge);
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAllowed) {
  BpeVocab v = vocab_from_merges({{"a", "b"}});
  for (const char* content : {"<|end_of_text|>", "<|begin_of_text|>", "<|eot|>", "<|eot|>+"}) {
    v.specials.push_back({content, static_cast<int32_t>(v.tokens.size())});
    v.tokens.emplace_back(content);
  }
  const BpeTokenizer tok(v);
  const int32_t eot = *tok.special_id("<|eot|>"), eot_plus = *tok.special_id("<|eot|>+");
  // A token's name gives it no role: the model's files do (tokenizer_files.h).
  EXPECT_THROW(tok.eos_id(), Error);
  EXPECT_TRUE(tok.is_special(eot));
  EXPECT_FALSE(tok.is_special(0));

  const std::string text = "ab<|begin_of_text|>x<|eot|>+<|eot|>ab<|end_of_text|>";
  const std::vector<int32_t> with = tok.encode(text, /*allow_special=*/true);
  using P = std::vector<std::string>;
  EXPECT_EQ(pieces_of(tok, with),
            (P{"ab", "<|begin_of_text|>", "x", "<|eot|>+", "<|eot|>", "ab", "<|end_of_text|>"}));
  EXPECT_EQ(std::count(with.begin(), with.end(), eot_plus), 1);
  EXPECT_EQ(tok.decode(with), text);

  const std::vector<int32_t> without = tok.encode(text, /*allow_special=*/false);
  for (int32_t id : without) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_EQ(tok.decode(without), text);
}

TEST(BpeTokenizer, MissingBosOrEosIsAnError) {
  const BpeTokenizer tok(vocab_from_merges({}));
  EXPECT_THROW(tok.bos_id(), Error);
  EXPECT_THROW(tok.eos_id(), Error);
}

TEST(BpeTokenizer, DecodeNamesAnIdOutsideTheVocabulary) {
  const BpeTokenizer tok(vocab_from_merges({{"a", "b"}}));
  const std::vector<int32_t> ids = {1, 2, 257};
  try {
    tok.decode(ids);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token id 257"), std::string::npos) << e.what();
  }
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
}

TEST(BpeTokenizer, RejectsBrokenVocabularies) {
  // A byte without a token is dropped, as Hugging Face drops it (SmolLM2
  // has no token for byte 0x04).
  BpeVocab no_byte = vocab_from_merges({});
  const std::string missing = no_byte.tokens[17];
  no_byte.tokens[17] = "xy";  // that byte's token replaced
  const BpeTokenizer dropping(no_byte);
  EXPECT_EQ(dropping.encode("a" + missing + "b"), dropping.encode("ab"));

  BpeVocab orphan_merge = vocab_from_merges({{"a", "b"}});
  orphan_merge.tokens.pop_back();  // "ab" gone, merge still names it
  orphan_merge.merges.push_back({0, 1});
  EXPECT_THROW(BpeTokenizer{orphan_merge}, Error);

  BpeVocab twice = vocab_from_merges({{"a", "b"}});
  twice.tokens.push_back("ab");
  EXPECT_THROW(BpeTokenizer{twice}, Error);
}

TEST(BpeTokenizer, MovedTokenizerStillEncodes) {
  BpeTokenizer a(vocab_from_merges({{"a", "b"}}));
  const std::vector<int32_t> before = a.encode("abab ab");
  BpeTokenizer b(std::move(a));
  EXPECT_EQ(b.encode("abab ab"), before);
  EXPECT_EQ(b.encode("abab ab"), before);  // now from the cache
}

}  // namespace
}  // namespace spillway
