#include "model/normalizer.h"

#include <cctype>

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "base/status.h"

namespace spillway {

namespace {

using nlohmann::json;

std::string string_field(const json& spec, const char* key, const std::string& source, const std::string& where) {
  const auto it = spec.find(key);
  SPW_CHECK(it != spec.end() && it->is_string(), source, where, ".", key, " is missing or not a string");
  return it->get<std::string>();
}

bool bool_field(const json& spec, const char* key, bool otherwise) {
  const auto it = spec.find(key);
  return it != spec.end() && it->is_boolean() ? it->get<bool>() : otherwise;
}

// Rust's char::to_lowercase, one character at a time (no context, so a
// final sigma lowercases as any other).
std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    int32_t code = 0;
    const size_t len = unicode::char_length(text, at, &code);
    if (code < 0x80) {  // ASCII and invalid bytes
      out += code >= 'A' && code <= 'Z' ? static_cast<char>(code + 32) : text[at];
    } else {
      UChar in[2], lowered[8];
      int32_t in_len = 0;
      U16_APPEND_UNSAFE(in, in_len, code);
      UErrorCode status = U_ZERO_ERROR;
      const int32_t n = u_strToLower(lowered, 8, in, in_len, "", &status);
      char utf8[32];
      int32_t utf8_len = 0;
      if (U_SUCCESS(status)) u_strToUTF8(utf8, sizeof utf8, &utf8_len, lowered, n, &status);
      if (U_SUCCESS(status)) out.append(utf8, static_cast<size_t>(utf8_len));
      else out.append(text.substr(at, len));
    }
    at += len;
  }
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    for (int32_t code = 0; begin < end;) {
      const size_t len = unicode::char_length(text, begin, &code);
      if (!unicode::is_whitespace(code)) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      size_t at = end - 1;
      while (at > begin && (static_cast<uint8_t>(text[at]) & 0xC0) == 0x80) --at;
      int32_t code = 0;
      unicode::char_length(text, at, &code);
      if (!unicode::is_whitespace(code)) break;
      end = at;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

std::string replace_literal(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = text.find(from, at)) != std::string_view::npos; at = hit + from.size()) {
    out.append(text.substr(at, hit - at));
    out.append(to);
  }
  out.append(text.substr(at));
  return out;
}

std::string pattern_regex(const json& pattern, const std::string& source, const std::string& where) {
  SPW_CHECK(pattern.is_object(), source, where, " is not a pattern object");
  if (pattern.contains("Regex")) return string_field(pattern, "Regex", source, where);
  const std::string literal = string_field(pattern, "String", source, where);
  std::string regex;
  for (char c : literal) {
    const auto u = static_cast<uint8_t>(c);
    // A backslash before any ASCII non-alphanumeric makes it literal in PCRE2.
    if (u < 0x80 && !std::isalnum(u)) regex += '\\';
    regex += c;
  }
  return regex;
}

Normalizer::Normalizer(const json& spec, const std::string& source, const std::string& where) {
  if (!spec.is_null()) add(spec, source, where);
}

void Normalizer::add(const json& spec, const std::string& source, const std::string& where) {
  SPW_CHECK(spec.is_object(), source, where, " is not an object");
  const std::string type = string_field(spec, "type", source, where);
  if (type == "Sequence") {
    const auto it = spec.find("normalizers");
    SPW_CHECK(it != spec.end() && it->is_array(), source, where, ".normalizers is missing or not an array");
    for (size_t i = 0; i < it->size(); ++i) add((*it)[i], source, where + ".normalizers[" + std::to_string(i) + "]");
  } else if (type == "Prepend") {
    steps_.push_back({.kind = Kind::prepend, .text = string_field(spec, "prepend", source, where)});
  } else if (type == "Replace") {
    const auto pattern = spec.find("pattern");
    SPW_CHECK(pattern != spec.end(), source, where, ".pattern is missing");
    Step step{.kind = Kind::replace, .content = string_field(spec, "content", source, where)};
    if (pattern->is_object() && pattern->contains("String")) {
      step.text = string_field(*pattern, "String", source, where + ".pattern");
    } else {
      step.regex = std::make_shared<const RegexPreTokenizer>(pattern_regex(*pattern, source, where + ".pattern"));
    }
    steps_.push_back(std::move(step));
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    const unicode::Form form = type == "NFC"    ? unicode::Form::nfc
                               : type == "NFD"  ? unicode::Form::nfd
                               : type == "NFKC" ? unicode::Form::nfkc
                                                : unicode::Form::nfkd;
    steps_.push_back({.kind = Kind::form, .form = form});
  } else if (type == "Lowercase") {
    steps_.push_back({.kind = Kind::lowercase});
  } else if (type == "Strip") {
    steps_.push_back({.kind = Kind::strip,
                      .left = bool_field(spec, "strip_left", true),
                      .right = bool_field(spec, "strip_right", true)});
  } else {
    throw Error(source, where + ".type is \"" + type +
                            "\"; the normalizers read are Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, "
                            "Lowercase and Strip");
  }
}

std::string Normalizer::apply(std::string_view input) const {
  std::string text(input);
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Kind::prepend:
        if (!text.empty()) text.insert(0, s.text);
        break;
      case Kind::replace:
        text = s.regex ? s.regex->replace(text, s.content) : replace_literal(text, s.text, s.content);
        break;
      case Kind::form: text = unicode::normalize(text, s.form); break;
      case Kind::lowercase: text = lowercase(text); break;
      case Kind::strip: text = strip(text, s.left, s.right); break;
    }
  }
  return text;
}

}  // namespace spillway
