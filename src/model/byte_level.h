// GPT-2's byte-level alphabet, also used by LLaMA-3: every byte stands for
// one printable character, so a vocabulary of arbitrary byte strings can be
// written as ordinary JSON strings. Printable bytes stand for themselves; the
// other 68 (controls, space, DEL, NBSP, soft hyphen) take U+0100 onward in
// byte order. The table must match Hugging Face's exactly, or vocab strings
// in tokenizer.json would name different bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace spillway::byte_level {

// The UTF-8 of the character that stands for `byte`.
std::string_view symbol_of_byte(uint8_t byte);

// Raw bytes to their vocab string ("hello world" -> "helloĠworld").
std::string to_symbols(std::string_view bytes);

// A vocab string back to raw bytes; nullopt when it holds a character
// outside the alphabet (a vocab not made for byte-level BPE).
std::optional<std::string> from_symbols(std::string_view symbols);

}  // namespace spillway::byte_level
