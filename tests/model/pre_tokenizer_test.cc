#include "model/pre_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "base/status.h"

namespace spillway {
namespace {

using Pieces = std::vector<std::string>;

Pieces llama3_split(std::string_view text) {
  static const RegexPreTokenizer pre(kLlama3Pattern);
  Pieces pieces;
  for (std::string_view p : pre.split(text)) pieces.emplace_back(p);
  return pieces;
}

// Each expectation was worked out by hand from the pattern's alternatives
// and agrees with Hugging Face's Split pre-tokenizer.
TEST(PreTokenizer, Llama3HandCheckedSplits) {
  EXPECT_EQ(llama3_split("Hello world's 12345"), (Pieces{"Hello", " world", "'s", " ", "123", "45"}));
  EXPECT_EQ(llama3_split("I'M here"), (Pieces{"I", "'M", " here"}));  // contractions ignore case
  EXPECT_EQ(llama3_split("we'll\r\n"), (Pieces{"we", "'ll", "\r\n"}));
  EXPECT_EQ(llama3_split("a  b"), (Pieces{"a", " ", " b"}));  // \s+(?!\S) leaves the last space
  EXPECT_EQ(llama3_split("x\n\n  y"), (Pieces{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(llama3_split("3.14159"), (Pieces{"3", ".", "141", "59"}));      // digits in threes
  EXPECT_EQ(llama3_split("\xC2\xA1Hola!"), (Pieces{"\xC2\xA1Hola", "!"}));  // one non-letter may lead
  EXPECT_EQ(llama3_split("emoji \xF0\x9F\x99\x82\xF0\x9F\x99\x82 ok"),
            (Pieces{"emoji", " \xF0\x9F\x99\x82\xF0\x9F\x99\x82", " ok"}));
  EXPECT_EQ(llama3_split("tabs\t\tend"), (Pieces{"tabs", "\t", "\tend"}));
  EXPECT_EQ(llama3_split("end.\n"), (Pieces{"end", ".\n"}));
  EXPECT_EQ(llama3_split("trailing  "), (Pieces{"trailing", "  "}));
  EXPECT_EQ(llama3_split("x\xC2\xA0\xC2\xA0y"), (Pieces{"x", "\xC2\xA0", "\xC2\xA0y"}));  // NBSP is \s
  // 日本語のテキスト123: letters of any script, then digits.
  EXPECT_EQ(llama3_split("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"
                         "123"),
            (Pieces{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "123"}));
  EXPECT_TRUE(llama3_split("").empty());
}

// U+180E is in PCRE2's \s but not in Unicode White_Space (Oniguruma's \s,
// hence Hugging Face's): it must group with the apostrophe as punctuation.
TEST(PreTokenizer, MongolianVowelSeparatorIsNotWhiteSpace) {
  EXPECT_EQ(llama3_split("\xE1\xA0\x8E's"), (Pieces{"\xE1\xA0\x8E'", "s"}));
}

TEST(PreTokenizer, InvalidUtf8BytesBecomeTheirOwnPieces) {
  EXPECT_EQ(llama3_split("ab\xFF"
                         "cd"),
            (Pieces{"ab", "\xFF", "cd"}));
  EXPECT_EQ(llama3_split("\xC3"), (Pieces{"\xC3"}));  // a cut-off two-byte character
}

TEST(PreTokenizer, PiecesTileArbitraryBytes) {
  const RegexPreTokenizer pre(kLlama3Pattern);
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? ' ' : rng());
    std::string joined;
    for (std::string_view p : pre.split(text)) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(PreTokenizer, Gpt2Pattern) {
  const RegexPreTokenizer pre(kGpt2Pattern);
  Pieces pieces;
  for (std::string_view p : pre.split("Hello world's 12345!!")) pieces.emplace_back(p);
  EXPECT_EQ(pieces, (Pieces{"Hello", " world", "'s", " 12345", "!!"}));
}

TEST(PreTokenizer, BadPatternNamesIt) {
  try {
    RegexPreTokenizer pre("(unclosed");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pre-tokenizer pattern"), std::string::npos) << e.what();
  }
  EXPECT_THROW(RegexPreTokenizer("[\\S]"), Error);  // \S in a class has no White_Space spelling
}

}  // namespace
}  // namespace spillway
