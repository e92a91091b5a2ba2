#include "model/unicode_text.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "base/status.h"

namespace spillway::unicode {

size_t char_length(std::string_view text, size_t at, int32_t* code) {
  const auto lead = static_cast<uint8_t>(text[at]);
  size_t n = 0;
  int32_t cp = 0;
  if (lead < 0x80) {
    if (code) *code = lead;
    return 1;
  }
  if ((lead & 0xE0) == 0xC0) n = 2, cp = lead & 0x1F;
  else if ((lead & 0xF0) == 0xE0) n = 3, cp = lead & 0x0F;
  else if ((lead & 0xF8) == 0xF0) n = 4, cp = lead & 0x07;
  const auto invalid = [&] {
    if (code) *code = -1;
    return size_t{1};
  };
  if (n == 0 || at + n > text.size()) return invalid();
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<uint8_t>(text[at + k]);
    if ((c & 0xC0) != 0x80) return invalid();
    cp = (cp << 6) | (c & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
  static constexpr int32_t kLeast[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kLeast[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid();
  if (code) *code = cp;
  return n;
}

bool is_whitespace(int32_t code) { return code >= 0 && u_hasBinaryProperty(code, UCHAR_WHITE_SPACE); }

bool is_alphanumeric(int32_t code) {
  if (code < 0) return false;
  if (u_hasBinaryProperty(code, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(code);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

namespace {

const icu::Normalizer2& normalizer_of(Form form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case Form::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case Form::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case Form::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case Form::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  SPW_CHECK(U_SUCCESS(status) && n != nullptr, "unicode", "ICU has no normalizer: ", u_errorName(status));
  return *n;
}

void normalize_valid(std::string_view text, const icu::Normalizer2& n, std::string& out) {
  if (text.empty()) return;
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString in = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const icu::UnicodeString normalized = n.normalize(in, status);
  SPW_CHECK(U_SUCCESS(status), "unicode", "normalization failed: ", u_errorName(status));
  normalized.toUTF8String(out);
}

}  // namespace

std::string normalize(std::string_view text, Form form) {
  const icu::Normalizer2& n = normalizer_of(form);
  std::string out;
  out.reserve(text.size());
  size_t begin = 0, at = 0;
  while (at < text.size()) {
    int32_t code = 0;
    const size_t len = char_length(text, at, &code);
    if (code < 0) {
      normalize_valid(text.substr(begin, at - begin), n, out);
      out += text[at];
      begin = at + 1;
    }
    at += len;
  }
  normalize_valid(text.substr(begin), n, out);
  return out;
}

}  // namespace spillway::unicode
