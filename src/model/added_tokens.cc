#include "model/added_tokens.h"

#include <algorithm>

#include "model/unicode_text.h"

namespace spillway {

namespace {

int32_t code_before(std::string_view text, size_t at) {
  if (at == 0) return -1;
  size_t begin = at - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80 && at - begin < 4) --begin;
  int32_t code = -1;
  unicode::char_length(text, begin, &code);
  return code;
}

int32_t code_at(std::string_view text, size_t at) {
  if (at >= text.size()) return -1;
  int32_t code = -1;
  unicode::char_length(text, at, &code);
  return code;
}

}  // namespace

AddedTokens::AddedTokens(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!tokens_[i].content.empty()) by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& group : by_first_byte_) {
    std::stable_sort(group.begin(), group.end(),
                     [&](size_t a, size_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
  }
}

void AddedTokens::split(std::string_view text, bool allow_special,
                        const std::function<void(std::string_view, size_t)>& on_text,
                        const std::function<void(int32_t)>& on_token) const {
  size_t done = 0;  // text before this is handed out
  size_t at = 0;
  while (at < text.size()) {
    const AddedToken* found = nullptr;
    for (size_t i : by_first_byte_[static_cast<uint8_t>(text[at])]) {
      const AddedToken& t = tokens_[i];
      if ((allow_special || !t.special) && text.compare(at, t.content.size(), t.content) == 0) {
        found = &t;
        break;
      }
    }
    if (!found) {
      ++at;
      continue;
    }
    size_t begin = at, end = at + found->content.size();
    if (found->single_word &&
        (unicode::is_alphanumeric(code_before(text, begin)) || unicode::is_alphanumeric(code_at(text, end)))) {
      at = end;  // the match is spent, as in a non-overlapping search
      continue;
    }
    if (found->lstrip) {
      while (begin > done) {
        size_t prev = begin - 1;
        while (prev > done && (static_cast<uint8_t>(text[prev]) & 0xC0) == 0x80) --prev;
        if (!unicode::is_whitespace(code_at(text, prev))) break;
        begin = prev;
      }
    }
    if (found->rstrip) {
      while (end < text.size()) {
        int32_t code = -1;
        const size_t len = unicode::char_length(text, end, &code);
        if (!unicode::is_whitespace(code)) break;
        end += len;
      }
    }
    if (begin > done) on_text(text.substr(done, begin - done), done);
    on_token(found->id);
    done = at = end;
  }
  if (done < text.size()) on_text(text.substr(done), done);
}

}  // namespace spillway
