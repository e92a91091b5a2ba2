#include "infer/generated_text.h"

#include <algorithm>

namespace spillway::infer {

namespace {

// Length of the longest prefix of `s` that ends on a UTF-8 character
// boundary and before a replacement character that more bytes may still
// complete, so that streamed text never shows half a character.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back) return n - back;
    // A decoder's U+FFFD for bytes it has only part of (byte fallback).
    if (n >= 3 && s.compare(n - 3, 3, "\xEF\xBF\xBD") == 0) return n - 3;
    return n;
  }
  return n;
}

}  // namespace

GeneratedText::GeneratedText(const Tokenizer& tokenizer, std::vector<int32_t> prompt)
    : tokenizer_(tokenizer), prompt_(std::move(prompt)), before_(tokenizer.decode(prompt_)) {}

std::string GeneratedText::text() const {
  std::vector<int32_t> all = prompt_;
  all.insert(all.end(), generated_.begin(), generated_.end());
  const std::string whole = tokenizer_.decode(all);
  return whole.starts_with(before_) ? whole.substr(before_.size()) : tokenizer_.decode(generated_);
}

std::string GeneratedText::add(int32_t id) {
  generated_.push_back(id);
  const std::string t = text();
  const size_t ready = complete_utf8_prefix(t);
  if (ready <= handed_out_) return {};
  std::string piece = t.substr(handed_out_, ready - handed_out_);
  handed_out_ = ready;
  return piece;
}

std::string GeneratedText::finish() {
  const std::string t = text();
  if (t.size() <= handed_out_) return {};
  std::string rest = t.substr(handed_out_);
  handed_out_ = t.size();
  return rest;
}

}  // namespace spillway::infer
