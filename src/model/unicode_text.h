// The few Unicode facts tokenizer.json pipelines need: UTF-8 character
// boundaries, Rust's whitespace and alphanumeric classes (Hugging Face
// `tokenizers` is Rust), and the four normalization forms (through ICU).
//
// Text that is not valid UTF-8 is accepted everywhere: an invalid byte is a
// character of its own that no class contains and normalization leaves as it
// is, so arbitrary bytes still round-trip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace spillway::unicode {

// Length in bytes of the character starting at text[at]: 1 to 4, and 1 for
// an invalid byte. `code` (when given) receives its code point, or -1.
size_t char_length(std::string_view text, size_t at, int32_t* code = nullptr);

// Rust's char::is_whitespace (Unicode White_Space).
bool is_whitespace(int32_t code);
// Rust's char::is_alphanumeric (Alphabetic or a number), by which
// single_word added tokens find word boundaries.
bool is_alphanumeric(int32_t code);

enum class Form { nfc, nfd, nfkc, nfkd };
// `text` in normalization form `form`; invalid bytes stay where they are and
// split the text around them.
std::string normalize(std::string_view text, Form form);

}  // namespace spillway::unicode
