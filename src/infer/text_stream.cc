#include "infer/text_stream.h"

#include <algorithm>

namespace spillway::infer {

namespace {
// Prompt tokens decoded along with the continuation: enough for a decoder to
// see that the continuation does not start a text.
constexpr size_t kContextTokens = 4;
}  // namespace

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

std::string continuation_text(const Tokenizer& tok, std::span<const int32_t> prompt,
                              std::span<const int32_t> generated) {
  const std::span<const int32_t> context = prompt.last(std::min(prompt.size(), kContextTokens));
  std::vector<int32_t> all(context.begin(), context.end());
  all.insert(all.end(), generated.begin(), generated.end());
  const std::string whole = tok.decode(all), before = tok.decode(context);
  return whole.starts_with(before) ? whole.substr(before.size()) : tok.decode(generated);
}

TextStream::TextStream(const Tokenizer& tokenizer, std::span<const int32_t> prompt, std::vector<std::string> stops)
    : tokenizer_(tokenizer),
      context_(prompt.end() - static_cast<std::ptrdiff_t>(std::min(prompt.size(), kContextTokens)), prompt.end()),
      stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string TextStream::add(std::span<const int32_t> tokens) {
  if (stopped_) return {};
  generated_.insert(generated_.end(), tokens.begin(), tokens.end());
  const std::string text = continuation_text(tokenizer_, context_, generated_);
  // The earliest stop string, searched from where one could still begin.
  size_t longest = 0;
  for (const std::string& s : stops_) longest = std::max(longest, s.size());
  const size_t from = sent_.size() >= longest ? sent_.size() - longest + 1 : 0;
  size_t stop_at = std::string::npos;
  for (const std::string& s : stops_) stop_at = std::min(stop_at, text.find(s, from));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string out = stop_at > sent_.size() ? text.substr(sent_.size(), stop_at - sent_.size()) : "";
    sent_ += out;
    return out;
  }
  size_t ready = complete_utf8_prefix(text);
  // Hold back an ending that a stop string starts with.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, ready); k > hold; --k) {
      if (text.compare(ready - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  ready -= hold;
  if (ready <= sent_.size() || !text.starts_with(sent_)) return {};
  std::string out = text.substr(sent_.size(), ready - sent_.size());
  sent_ += out;
  return out;
}

std::string TextStream::finish() {
  if (stopped_) return {};
  const std::string text = continuation_text(tokenizer_, context_, generated_);
  if (text.size() <= sent_.size() || !text.starts_with(sent_)) return {};
  std::string out = text.substr(sent_.size());
  sent_ += out;
  return out;
}

}  // namespace spillway::infer
