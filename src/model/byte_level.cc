#include "model/byte_level.h"

#include <array>

namespace spillway::byte_level {
namespace {

bool stands_for_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

// Highest code point in the alphabet: U+0100 + 67.
constexpr int kLastCodePoint = 0x100 + 67;

struct Alphabet {
  std::array<std::string, 256> symbol;                // byte -> UTF-8
  std::array<int16_t, kLastCodePoint + 1> byte_of{};  // code point -> byte or -1

  Alphabet() {
    byte_of.fill(-1);
    int next_spare = 0x100;
    for (int byte = 0; byte < 256; ++byte) {
      const int code = stands_for_itself(byte) ? byte : next_spare++;
      byte_of[code] = static_cast<int16_t>(byte);
      if (code < 0x80) {
        symbol[byte] = std::string(1, static_cast<char>(code));
      } else {
        symbol[byte] = {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
      }
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet table;
  return table;
}

}  // namespace

std::string_view symbol_of_byte(uint8_t byte) { return alphabet().symbol[byte]; }

std::string to_symbols(std::string_view bytes) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += a.symbol[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> from_symbols(std::string_view symbols) {
  const Alphabet& a = alphabet();
  std::string out;
  out.reserve(symbols.size());
  // Every character of the alphabet is one or two UTF-8 bytes.
  for (size_t i = 0; i < symbols.size();) {
    const auto lead = static_cast<uint8_t>(symbols[i]);
    int code;
    if (lead < 0x80) {
      code = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < symbols.size() &&
               (static_cast<uint8_t>(symbols[i + 1]) & 0xC0) == 0x80) {
      code = ((lead & 0x1F) << 6) | (static_cast<uint8_t>(symbols[i + 1]) & 0x3F);
      i += 2;
      if (code < 0x80) return std::nullopt;  // overlong form of an ASCII character
    } else {
      return std::nullopt;
    }
    if (code > kLastCodePoint || a.byte_of[code] < 0) return std::nullopt;
    out += static_cast<char>(a.byte_of[code]);
  }
  return out;
}

}  // namespace spillway::byte_level
