// Streamed text: what is handed out piece by piece adds up to the decoding
// of all tokens, stop strings end it (even when split over tokens), and a
// text that might begin a stop string waits until it is known.
#include "infer/text_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/bpe_train.h"

namespace spillway::infer {
namespace {

const BpeTokenizer& tokenizer() {
  static const BpeTokenizer tok =
      train_bpe("the cat sees the moon. a dog likes her song. the old man finds the long road. END END",
                300, {"<|begin_of_text|>", "<|end_of_text|>"});
  return tok;
}

// Feeds `text`'s tokens one at a time; returns the pieces handed out.
std::vector<std::string> stream(TextStream& s, const std::string& text) {
  std::vector<std::string> pieces;
  for (int32_t id : tokenizer().encode(text)) pieces.push_back(s.add(std::span<const int32_t>(&id, 1)));
  pieces.push_back(s.finish());
  return pieces;
}

TEST(TextStream, PiecesAddUpToTheWholeText) {
  const std::vector<int32_t> prompt = tokenizer().encode("the cat");
  TextStream s(tokenizer(), prompt, {});
  std::string joined;
  for (const std::string& p : stream(s, " sees the moon. a dog")) joined += p;
  EXPECT_EQ(joined, " sees the moon. a dog");
  EXPECT_EQ(s.sent(), joined);
  EXPECT_FALSE(s.stopped());
}

TEST(TextStream, AStopStringSplitOverTokensEndsTheTextBeforeIt) {
  TextStream s(tokenizer(), tokenizer().encode("x"), {"og lik", "zzz"});
  std::string joined;
  for (const std::string& p : stream(s, " a dog likes her song")) joined += p;
  EXPECT_EQ(joined, " a d");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.add(tokenizer().encode(" more")), "");
}

TEST(TextStream, APossibleStopIsHeldBackUntilItIsNot) {
  TextStream s(tokenizer(), tokenizer().encode("x"), {"moon!"});
  std::string joined;
  bool held = false;
  for (int32_t id : tokenizer().encode(" the moon. END")) {
    const std::string piece = s.add(std::span<const int32_t>(&id, 1));
    joined += piece;
    // Once "moon" is out, nothing of it shows before the "." settles it.
    if (s.sent().find("moo") == std::string::npos && joined.find(" the") != std::string::npos) held = true;
  }
  joined += s.finish();
  EXPECT_TRUE(held);
  EXPECT_EQ(joined, " the moon. END");
}

TEST(TextStream, HalfACharacterWaitsForTheRest) {
  EXPECT_EQ(complete_utf8_prefix("ab\xC3"), 2u);
  EXPECT_EQ(complete_utf8_prefix("ab\xC3\xA9"), 4u);
  EXPECT_EQ(complete_utf8_prefix("\xE6\x97"), 0u);
  EXPECT_EQ(complete_utf8_prefix("a\xEF\xBF\xBD"), 1u);
  // Byte tokens of "é" (two bytes, two tokens in a byte-level vocabulary
  // without that merge): the first hands out nothing.
  TextStream s(tokenizer(), tokenizer().encode("x"), {});
  const std::vector<int32_t> bytes = tokenizer().encode("\xC3\xA9");
  ASSERT_EQ(bytes.size(), 2u);
  EXPECT_EQ(s.add(std::span<const int32_t>(&bytes[0], 1)), "");
  EXPECT_EQ(s.add(std::span<const int32_t>(&bytes[1], 1)), "\xC3\xA9");
}

}  // namespace
}  // namespace spillway::infer
