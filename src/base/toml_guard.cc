#include "base/toml_guard.h"

#include <cstdint>
#include <cstdio>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace spillway {

namespace {

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
    } else {
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
    while (at_ < text_.size() && !starts_with(quote)) {
      if (escapes && text_[at_] == '\\' && at_ + 1 < text_.size()) advance();
      advance();
    }
    for (size_t i = 0; i < n && at_ < text_.size(); ++i) advance();
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

// toml++ 3.3's test for non-ASCII whitespace reaches code it marks
// unreachable for these code points (its lookup table leaves their blocks
// out), and it makes that test inside strings too (after a multi-line
// string's line-ending backslash), so they are refused wherever they are.
bool whitespace_test_breaks_on(uint32_t code) {
  return (code > 0xA0 && code < 0xA0 + 0x3FA) || (code >= 0xA0 + 63 * 0x3FA && code <= 0xFFFF && code != 0xFEFF);
}

void check_code_points(const std::string& path, const std::string& text) {
  int line = 1, column = 1;
  for (size_t at = 0; at < text.size(); ++column) {
    const auto b0 = static_cast<unsigned char>(text[at]);
    uint32_t code = b0;
    size_t length = 1;
    if (b0 >= 0xC0 && b0 < 0xE0 && at + 1 < text.size()) {
      code = (b0 & 0x1Fu) << 6 | (static_cast<unsigned char>(text[at + 1]) & 0x3Fu);
      length = 2;
    } else if (b0 >= 0xE0 && b0 < 0xF0 && at + 2 < text.size()) {
      code = (b0 & 0x0Fu) << 12 | (static_cast<unsigned char>(text[at + 1]) & 0x3Fu) << 6 |
             (static_cast<unsigned char>(text[at + 2]) & 0x3Fu);
      length = 3;
    }
    if (length > 1 && whitespace_test_breaks_on(code)) {
      char name[16];
      std::snprintf(name, sizeof name, "U+%04X", code);
      throw Error(path + ":" + std::to_string(line) + ":" + std::to_string(column),
                  std::string("the character ") + name +
                      " cannot be read safely by this build's TOML parser (toml++ 3.3); write the file as JSON");
    }
    if (b0 == '\n') {
      ++line;
      column = 0;
    }
    at += length;
  }
}

}  // namespace

void check_toml_text(const std::string& path, const std::string& text) {
  check_code_points(path, text);
  Scanner(path, text).run();
}

}  // namespace spillway
