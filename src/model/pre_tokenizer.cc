#include "model/pre_tokenizer.h"

#include <cstdint>
#include <memory>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/status.h"

namespace spillway {
namespace {

// Hugging Face runs split patterns with Oniguruma, whose \s is Unicode's
// White_Space property. PCRE2's \s adds U+180E (Mongolian vowel separator,
// a format character since Unicode 6.3), so \s and \S are spelled out as
// White_Space for PCRE2. The list is stable: White_Space has not changed
// since Unicode 6.3.
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

std::string with_onig_white_space(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char d = pattern[++i];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (d == 'S') {
        SPW_CHECK(!in_class, "pre-tokenizer pattern",
                  "\\S inside a character class is not supported: ", pattern);
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += d;
      }
      continue;
    }
    out += c;
    if (!in_class && c == '[') {
      in_class = true;
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
    } else if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t end = pattern.find(":]", i + 2);  // a POSIX class such as [:alpha:]
      if (end != std::string_view::npos) {
        out.append(pattern.substr(i + 1, end + 2 - (i + 1)));
        i = end + 1;
      }
    } else if (in_class && c == ']') {
      in_class = false;
    }
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

RegexPreTokenizer::RegexPreTokenizer(std::string_view pattern) : pattern_(pattern) {
  const std::string translated = with_onig_white_space(pattern_);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
  SPW_CHECK(code != nullptr, "pre-tokenizer pattern", pcre2_message(error), " at offset ", error_offset,
            " of ", translated);
  // JIT is several times faster; a PCRE2 built without it still matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

RegexPreTokenizer::~RegexPreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void RegexPreTokenizer::for_each_match(std::string_view text,
                                       const std::function<void(size_t, size_t)>& match) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  SPW_CHECK(data != nullptr, "pre-tokenizer", "out of memory for match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, 0, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    SPW_CHECK(rc >= 0, "pre-tokenizer", "matching failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    match(begin, end);
    if (end > begin) {
      start = end;
    } else {
      // An empty match (possible with other patterns, never with LLaMA-3's)
      // must not stall: search again from the next character.
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

void RegexPreTokenizer::for_each_piece(std::string_view text,
                                       const std::function<void(std::string_view)>& piece) const {
  size_t done = 0;  // text before this is already handed out
  for_each_match(text, [&](size_t begin, size_t end) {
    if (begin > done) piece(text.substr(done, begin - done));
    if (end > begin) piece(text.substr(begin, end - begin));
    done = end;
  });
  if (done < text.size()) piece(text.substr(done));
}

std::string RegexPreTokenizer::replace(std::string_view text, std::string_view with) const {
  std::string out;
  size_t done = 0;
  for_each_match(text, [&](size_t begin, size_t end) {
    if (end == begin) return;
    out.append(text.substr(done, begin - done));
    out.append(with);
    done = end;
  });
  out.append(text.substr(done));
  return out;
}

std::vector<std::string_view> RegexPreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  for_each_piece(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace spillway
