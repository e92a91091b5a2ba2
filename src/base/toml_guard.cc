#include "base/toml_guard.h"

#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace spillway {

namespace {

// toml++ 3.3's test for non-ASCII whitespace looks a code point up by its
// block of 0x3FA from U+00A0 and reaches code it marks unreachable for any
// code point of three blocks but the one whitespace each holds: U+00A1-U+0499,
// U+2C5E-U+3057 but U+3000, and U+FB26-U+FEFE.
bool whitespace_test_breaks_on(uint32_t code) {
  if (code <= 0xA0 || code >= 0xFEFF) return false;
  const uint32_t block = (code - 0xA0) / 0x3FA;
  return (block == 0 || block == 11 || block == 63) && code != 0x3000;
}

// What toml++ 3.3 skips as horizontal whitespace beyond ASCII.
bool is_toml_non_ascii_whitespace(uint32_t c) {
  return c == 0xA0 || c == 0x1680 || c == 0x180E || (c >= 0x2000 && c <= 0x200B) || c == 0x202F || c == 0x205F ||
         c == 0x2060 || c == 0x3000 || c == 0xFEFF;
}

bool starts_key(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '"' || c == '\'';
}

// Walks the text as TOML's lexer would, far enough to know where strings,
// comments and brackets are: a `[` first on a line outside any value's
// brackets opens a table header.
class Scanner {
 public:
  Scanner(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  void run() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (starts_with("\"\"\"")) {
        skip_string("\"\"\"", true);
      } else if (starts_with("'''")) {
        skip_string("'''", false);
      } else if (c == '"') {
        skip_string("\"", true);
      } else if (c == '\'') {
        skip_string("'", false);
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') advance();
      } else if (c == '[' && open_.empty() && line_start_) {
        check_header();
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        // TOML allows non-ASCII text only in strings and comments; toml++
        // 3.3 reaches code it marks unreachable on some such characters
        // (U+0238, say) where it looks for whitespace.
        fail("a non-ASCII character outside a string or comment");
      } else if (expect_value_ && !is_blank(c) && std::string_view("[]{},#=").find(c) == std::string_view::npos) {
        skip_bare_value();
      } else {
        const bool blank = is_blank(c);
        if (!blank) {
          // toml++ 3.3 asserts where an array expects a value and finds '}'.
          if (expect_array_value_ && c == '}') fail("'}' where an array expects a value or ']'");
          expect_array_value_ = false;
          line_start_ = false;
        }
        if (c == '[' || c == '{') open_.push_back(c);
        if ((c == ']' || c == '}') && !open_.empty()) open_.pop_back();
        if ((c == '[') || (c == ',' && !open_.empty() && open_.back() == '[')) expect_array_value_ = true;
        if (!blank) expect_value_ = c == '=' || expect_array_value_;
        advance();
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(path_ + ":" + std::to_string(line_) + ":" + std::to_string(column_), problem);
  }

  bool starts_with(const char* s) const { return text_.compare(at_, std::char_traits<char>::length(s), s) == 0; }

  void advance() {
    const auto byte = static_cast<unsigned char>(text_[at_]);
    if ((byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r') || byte == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", byte);
      fail(std::string("control character ") + hex + " is not allowed in TOML");
    }
    if (byte == '\n') {
      ++line_;
      column_ = 1;
      line_start_ = true;
    } else if ((byte & 0xC0) != 0x80) {  // columns count characters, not UTF-8 bytes
      ++column_;
    }
    ++at_;
  }

  static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

  // A value that is not a string, array or table (a number, a bool, a
  // date): toml++ 3.3 looks ahead through it to the next whitespace, ',',
  // ']', '}' or '#', quotes included, and reaches code it marks unreachable
  // on some non-ASCII characters (U+0238, say); valid ones are ASCII.
  void skip_bare_value() {
    const auto ends_value = [](char c) {
      return is_blank(c) || std::string_view(",]}#").find(c) != std::string_view::npos;
    };
    while (at_ < text_.size() && !ends_value(text_[at_])) {
      if (static_cast<unsigned char>(text_[at_]) >= 0x80) fail("a non-ASCII character in a value that is not a string");
      advance();
    }
    expect_value_ = false;
    expect_array_value_ = false;
    line_start_ = false;
  }

  // From an opening quote to past the closing one (or the end of the text,
  // which toml++ then reports).
  void skip_string(const char* quote, bool escapes) {
    const size_t n = std::char_traits<char>::length(quote);
    for (size_t i = 0; i < n; ++i) advance();
    line_start_ = false;
    expect_array_value_ = false;
    expect_value_ = false;
    const bool multi_line = n == 3;
    while (at_ < text_.size() && !starts_with(quote)) {
      if (!multi_line && text_[at_] == '\n') return;  // toml++ reports the unclosed string here
      if (escapes && text_[at_] == '\\' && at_ + 1 < text_.size()) {
        advance();
        if (multi_line && skip_whitespace_after_backslash()) continue;  // a line-ending backslash
      }
      advance();
    }
    for (size_t i = 0; i < n && at_ < text_.size(); ++i) advance();
    // A multi-line string's last one or two characters may be its quote,
    // just inside the closing delimiter (""""" closes on the last three).
    for (int extra = 0; multi_line && extra < 2 && at_ < text_.size() && text_[at_] == quote[0]; ++extra) advance();
  }

  // The code point that starts at `at` and its length in bytes; a length of
  // 1 for a byte that starts none (broken UTF-8, which toml++ reports
  // itself, or past U+FFFF, where its table has no gaps).
  uint32_t code_at(size_t at, size_t& length) const {
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[at + i]) & 0x3Fu; };
    const auto b0 = static_cast<unsigned char>(text_[at]);
    length = 1;
    if (b0 >= 0xC0 && b0 < 0xE0 && at + 1 < text_.size()) {
      length = 2;
      return (b0 & 0x1Fu) << 6 | byte(1);
    }
    if (b0 >= 0xE0 && b0 < 0xF0 && at + 2 < text_.size()) {
      length = 3;
      return (b0 & 0x0Fu) << 12 | byte(1) << 6 | byte(2);
    }
    return b0;
  }

  // In a multi-line basic string, past a backslash: toml++ 3.3 tests the
  // escaped character for whitespace, and from a line-ending backslash on
  // it tests every character up to the first that is not, its own
  // whitespace and line ends included; those tests are where it reaches
  // unreachable code, and nowhere else in a string. Returns whether there
  // was whitespace (the character then reached is text, not escaped).
  bool skip_whitespace_after_backslash() {
    bool skipped = false;
    size_t length = 1;
    while (at_ < text_.size()) {
      const uint32_t code = code_at(at_, length);
      if (length > 1 && whitespace_test_breaks_on(code)) {
        char name[16];
        std::snprintf(name, sizeof name, "U+%04X", code);
        fail(std::string("the character ") + name +
             " after a backslash in a multi-line string cannot be read safely by this build's TOML parser "
             "(toml++ 3.3); write the file as JSON");
      }
      if (!is_blank(text_[at_]) && !is_toml_non_ascii_whitespace(code)) break;
      for (size_t i = 0; i < length; ++i) advance();
      skipped = true;
    }
    return skipped;
  }

  void check_header() {
    const size_t brackets = starts_with("[[") ? 2 : 1;
    for (size_t i = 0; i < brackets; ++i) advance();
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) advance();
    if (at_ < text_.size() && text_[at_] != ']' && !starts_key(text_[at_])) {
      fail("a table header's '[' must be followed by a key name");
    }
    open_.assign(brackets, 'h');  // the header's own brackets, closed by its ']'
    line_start_ = false;
  }

  const std::string& path_;
  const std::string& text_;
  size_t at_ = 0;
  int line_ = 1, column_ = 1;
  std::vector<char> open_;  // open '[' and '{' of values ('h': of the header being read)
  bool expect_array_value_ = false;  // after an array's '[' or ','
  bool expect_value_ = false;        // after '=', or where an array expects a value
  bool line_start_ = true;
};

}  // namespace

void check_toml_text(const std::string& path, const std::string& text) { Scanner(path, text).run(); }

}  // namespace spillway
