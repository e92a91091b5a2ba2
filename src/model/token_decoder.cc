#include "model/token_decoder.h"

#include "base/status.h"
#include "model/byte_level.h"
#include "model/normalizer.h"

namespace spillway {

namespace {

using nlohmann::json;

// "<0x0A>" -> 10; -1 for any other token.
int fallback_byte(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Fields of a decoder's spec, `otherwise` when absent; Error naming the
// field when it holds another JSON type.
std::string text_field(const json& spec, const char* key, std::string otherwise, const std::string& source,
                       const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return otherwise;
  SPW_CHECK(it->is_string(), source, where, ".", key, " is ", it->dump(), ", not a string");
  return it->get<std::string>();
}
bool flag_field(const json& spec, const char* key, bool otherwise, const std::string& source,
                const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return otherwise;
  SPW_CHECK(it->is_boolean(), source, where, ".", key, " is ", it->dump(), ", not true or false");
  return it->get<bool>();
}
int count_field(const json& spec, const char* key, const std::string& source, const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return 0;
  SPW_CHECK(it->is_number_unsigned() && it->get<uint64_t>() <= 1024, source, where, ".", key, " is ", it->dump(),
            ", not a count of characters (0 to 1024)");
  return static_cast<int>(it->get<uint64_t>());
}

bool valid_utf8(const std::string& bytes) {
  for (size_t at = 0; at < bytes.size();) {
    int32_t code = 0;
    at += unicode::char_length(bytes, at, &code);
    if (code < 0) return false;
  }
  return true;
}

}  // namespace

TokenDecoder::TokenDecoder(const json& spec, const std::string& source, const std::string& where) {
  if (spec.is_null()) return;
  none_ = false;
  add(spec, source, where);
}

TokenDecoder TokenDecoder::byte_level() {
  TokenDecoder d;
  d.none_ = false;
  d.steps_.push_back({.kind = Step::Kind::byte_level});
  return d;
}

void TokenDecoder::add(const json& spec, const std::string& source, const std::string& where) {
  SPW_CHECK(spec.is_object() && spec.contains("type") && spec["type"].is_string(), source, where,
            " is not an object with a type");
  const std::string type = spec["type"].get<std::string>();
  if (type == "Sequence") {
    const auto it = spec.find("decoders");
    SPW_CHECK(it != spec.end() && it->is_array(), source, where, ".decoders is missing or not an array");
    for (size_t i = 0; i < it->size(); ++i) add((*it)[i], source, where + ".decoders[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    steps_.push_back({.kind = Step::Kind::byte_level});
  } else if (type == "Metaspace") {
    const bool add_prefix = flag_field(spec, "add_prefix_space", true, source, where);
    const std::string scheme = text_field(spec, "prepend_scheme", add_prefix ? "always" : "never", source, where);
    steps_.push_back({.kind = Step::Kind::metaspace,
                      .pattern = text_field(spec, "replacement", "\u2581", source, where),
                      .prepend = scheme != "never"});
  } else if (type == "Replace") {
    const auto pattern = spec.find("pattern");
    SPW_CHECK(pattern != spec.end() && pattern->is_object(), source, where, ".pattern is missing");
    SPW_CHECK(spec.contains("content") && spec["content"].is_string(), source, where, ".content is missing");
    Step step{.kind = Step::Kind::replace, .content = spec["content"].get<std::string>()};
    if (pattern->contains("String") && (*pattern)["String"].is_string()) {
      step.pattern = (*pattern)["String"].get<std::string>();
    } else {
      step.regex = std::make_shared<const RegexPreTokenizer>(pattern_regex(*pattern, source, where + ".pattern"));
    }
    steps_.push_back(std::move(step));
  } else if (type == "ByteFallback") {
    steps_.push_back({.kind = Step::Kind::byte_fallback});
  } else if (type == "Fuse") {
    steps_.push_back({.kind = Step::Kind::fuse});
  } else if (type == "Strip") {
    steps_.push_back({.kind = Step::Kind::strip,
                      .pattern = text_field(spec, "content", " ", source, where),
                      .start = count_field(spec, "start", source, where),
                      .stop = count_field(spec, "stop", source, where)});
  } else {
    throw Error(source, where + ".type is \"" + type +
                            "\"; the decoders read are Sequence, ByteLevel, Metaspace, Replace, ByteFallback, "
                            "Fuse and Strip");
  }
}

std::string TokenDecoder::decode(std::vector<std::string> tokens) const {
  if (none_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  for (const Step& s : steps_) {
    switch (s.kind) {
      case Step::Kind::byte_level: {
        std::string bytes;
        for (const std::string& t : tokens) {
          const auto raw = byte_level::from_symbols(t);
          bytes += raw ? *raw : t;
        }
        tokens.assign(1, std::move(bytes));
        break;
      }
      case Step::Kind::metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_literal(tokens[i], s.pattern, i == 0 && s.prepend ? "" : " ");
        }
        break;
      case Step::Kind::replace:
        for (std::string& t : tokens) t = s.regex ? s.regex->replace(t, s.content) : replace_literal(t, s.pattern, s.content);
        break;
      case Step::Kind::byte_fallback: {
        std::vector<std::string> out;
        std::string pending;
        size_t pending_count = 0;
        const auto flush = [&] {
          if (pending_count == 0) return;
          if (valid_utf8(pending)) {
            out.push_back(pending);
          } else {
            for (size_t k = 0; k < pending_count; ++k) out.push_back("\xEF\xBF\xBD");  // U+FFFD
          }
          pending.clear();
          pending_count = 0;
        };
        for (std::string& t : tokens) {
          const int byte = fallback_byte(t);
          if (byte >= 0) {
            pending += static_cast<char>(byte);
            ++pending_count;
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Step::Kind::fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Step::Kind::strip:
        for (std::string& t : tokens) {
          size_t begin = 0, end = t.size();
          for (int k = 0; k < s.start && t.compare(begin, s.pattern.size(), s.pattern) == 0 && begin < end; ++k) {
            begin += s.pattern.size();
          }
          for (int k = 0; k < s.stop && end >= begin + s.pattern.size() &&
                          t.compare(end - s.pattern.size(), s.pattern.size(), s.pattern) == 0;
               ++k) {
            end -= s.pattern.size();
          }
          t = t.substr(begin, end - begin);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace spillway
