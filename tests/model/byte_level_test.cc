#include "model/byte_level.h"

#include <gtest/gtest.h>

#include <random>

namespace spillway {
namespace {

// Code point -> UTF-8, written out independently of the code under test.
std::string utf8(uint32_t code) {
  std::string s;
  if (code < 0x80) {
    s += static_cast<char>(code);
  } else {
    s += static_cast<char>(0xC0 | (code >> 6));
    s += static_cast<char>(0x80 | (code & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode, restated as its definition reads: the printable
// ranges keep their code points, the rest take 256 + n in byte order.
uint32_t gpt2_code_point(int byte) {
  const auto printable = [](int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  if (printable(byte)) return static_cast<uint32_t>(byte);
  int n = 0;
  for (int b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
  return static_cast<uint32_t>(256 + n);
}

TEST(ByteLevel, MatchesGpt2Table) {
  for (int byte = 0; byte < 256; ++byte) {
    EXPECT_EQ(byte_level::symbol_of_byte(static_cast<uint8_t>(byte)), utf8(gpt2_code_point(byte))) << byte;
  }
}

TEST(ByteLevel, KnownSymbols) {
  EXPECT_EQ(byte_level::symbol_of_byte(' '), "\u0120");   // Ġ
  EXPECT_EQ(byte_level::symbol_of_byte('\n'), "\u010A");  // Ċ
  EXPECT_EQ(byte_level::symbol_of_byte(0x00), "\u0100");
  EXPECT_EQ(byte_level::symbol_of_byte(0x7F), "\u0121");
  EXPECT_EQ(byte_level::symbol_of_byte(0xAD), "\u0143");  // the last of the 68
  EXPECT_EQ(byte_level::symbol_of_byte('A'), "A");
  EXPECT_EQ(byte_level::symbol_of_byte(0xFF), "\u00FF");
  EXPECT_EQ(byte_level::to_symbols("hi there\n"), "hi\u0120there\u010A");
}

TEST(ByteLevel, RoundTripsEveryByteString) {
  std::mt19937_64 rng(7);
  for (int len : {0, 1, 2, 17, 256, 1001}) {
    std::string bytes(static_cast<size_t>(len), '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const auto back = byte_level::from_symbols(byte_level::to_symbols(bytes));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, bytes);
  }
}

TEST(ByteLevel, RejectsCharactersOutsideTheAlphabet) {
  EXPECT_FALSE(byte_level::from_symbols(" ").has_value());         // a raw space stands for nothing
  EXPECT_FALSE(byte_level::from_symbols("\u2581hi").has_value());  // SentencePiece's ▁
  EXPECT_FALSE(byte_level::from_symbols("\u0144").has_value());    // one past the 68 spares
  EXPECT_FALSE(byte_level::from_symbols("\xC1\x81").has_value());  // overlong 'A'
  EXPECT_FALSE(byte_level::from_symbols("\xC4").has_value());      // cut short
}

}  // namespace
}  // namespace spillway
