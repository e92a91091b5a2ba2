#include "model/pre_tokenizer_chain.h"

#include "base/status.h"
#include "model/normalizer.h"

namespace spillway {

namespace {

using nlohmann::json;

std::string type_of(const json& spec, const std::string& source, const std::string& where) {
  SPW_CHECK(spec.is_object(), source, where, " is not an object");
  const auto it = spec.find("type");
  SPW_CHECK(it != spec.end() && it->is_string(), source, where, ".type is missing or not a string");
  return it->get<std::string>();
}

// A switch, `otherwise` when absent; Error naming it when it is not a bool.
bool flag(const json& spec, const char* key, bool otherwise, const std::string& source, const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return otherwise;
  SPW_CHECK(it->is_boolean(), source, where, ".", key, " is ", it->dump(), ", not true or false");
  return it->get<bool>();
}

// A text field, `otherwise` when absent; Error naming it when it is not text.
std::string text(const json& spec, const char* key, std::string otherwise, const std::string& source,
                 const std::string& where) {
  const auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return otherwise;
  SPW_CHECK(it->is_string(), source, where, ".", key, " is ", it->dump(), ", not a string");
  return it->get<std::string>();
}

}  // namespace

PreTokenizerChain::PreTokenizerChain(const json& spec, const std::string& source, const std::string& where) {
  if (!spec.is_null()) add(spec, source, where);
}

void PreTokenizerChain::add_split(std::string pattern, Behavior behavior, bool invert) {
  steps_.push_back({.kind = Step::Kind::split,
                    .regex = std::make_shared<const RegexPreTokenizer>(pattern),
                    .behavior = behavior,
                    .invert = invert});
}

void PreTokenizerChain::add(const json& spec, const std::string& source, const std::string& where) {
  const std::string type = type_of(spec, source, where);
  SPW_CHECK(!byte_level_, source, where, " comes after ByteLevel, which spillway reads only as the last step");
  if (type == "Sequence") {
    const auto it = spec.find("pretokenizers");
    SPW_CHECK(it != spec.end() && it->is_array(), source, where, ".pretokenizers is missing or not an array");
    for (size_t i = 0; i < it->size(); ++i) add((*it)[i], source, where + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "Split") {
    const auto pattern = spec.find("pattern");
    SPW_CHECK(pattern != spec.end(), source, where, ".pattern is missing");
    const std::string behavior = text(spec, "behavior", "Isolated", source, where);
    static const std::pair<const char*, Behavior> kBehaviors[] = {
        {"Isolated", Behavior::isolated},
        {"Removed", Behavior::removed},
        {"MergedWithPrevious", Behavior::merged_with_previous},
        {"MergedWithNext", Behavior::merged_with_next},
        {"Contiguous", Behavior::contiguous}};
    for (const auto& [name, b] : kBehaviors) {
      if (behavior == name) {
        add_split(pattern_regex(*pattern, source, where + ".pattern"), b, flag(spec, "invert", false, source, where));
        return;
      }
    }
    throw Error(source, where + ".behavior is \"" + behavior + "\", which is not a Split behavior");
  } else if (type == "Digits") {
    const bool each = flag(spec, "individual_digits", false, source, where);
    add_split("\\p{N}", each ? Behavior::isolated : Behavior::contiguous, false);
  } else if (type == "ByteLevel") {
    if (flag(spec, "add_prefix_space", true, source, where)) steps_.push_back({.kind = Step::Kind::prefix_space});
    if (flag(spec, "use_regex", true, source, where)) add_split(std::string(kGpt2Pattern), Behavior::isolated, false);
    byte_level_ = true;
  } else if (type == "Metaspace") {
    Step step{.kind = Step::Kind::metaspace, .replacement = text(spec, "replacement", "\u2581", source, where)};
    // Files from before prepend_scheme say add_prefix_space instead.
    const bool prefix = flag(spec, "add_prefix_space", true, source, where);
    const std::string scheme = text(spec, "prepend_scheme", prefix ? "always" : "never", source, where);
    if (scheme == "always") step.prepend = Prepend::always;
    else if (scheme == "first") step.prepend = Prepend::first;
    else if (scheme == "never") step.prepend = Prepend::never;
    else throw Error(source, where + ".prepend_scheme is \"" + scheme + "\", not always, first or never");
    step.split_words = flag(spec, "split", true, source, where);
    steps_.push_back(std::move(step));
  } else {
    throw Error(source, where + ".type is \"" + type +
                            "\"; the pre-tokenizers read are Sequence, Split, ByteLevel, Metaspace and Digits");
  }
}

// Hugging Face's NormalizedString::split: the pattern's matches and the text
// between them, grouped as the behavior says; empty pieces are dropped.
void PreTokenizerChain::split_piece(const Step& step, Piece& piece, std::vector<Piece>& out) {
  const std::string& text = piece.text;
  if (text.empty()) return;
  struct Span {
    size_t begin, end;
    bool match;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  step.regex->for_each_match(text, [&](size_t begin, size_t end) {
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  });
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.match = !s.match;
  }
  std::vector<Span> kept;  // `match` now means: remove
  bool previous_match = false;
  switch (step.behavior) {
    case Behavior::isolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, false});
      break;
    case Behavior::removed:
      kept = spans;
      break;
    case Behavior::contiguous:
      for (const Span& s : spans) {
        if (s.match == previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_previous:
      for (const Span& s : spans) {
        if (s.match && !previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back({s.begin, s.end, false});
        previous_match = s.match;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back({it->begin, it->end, false});
        previous_match = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& s : kept) {
    if (s.match || s.end == s.begin) continue;
    out.push_back({text.substr(s.begin, s.end - s.begin), piece.first && s.begin == 0});
  }
}

void PreTokenizerChain::split(std::string_view segment, bool at_start, std::vector<std::string>& out) const {
  if (segment.empty()) return;
  std::vector<Piece> pieces{{std::string(segment), at_start}}, next;
  for (const Step& step : steps_) {
    next.clear();
    for (Piece& piece : pieces) {
      switch (step.kind) {
        case Step::Kind::split:
          split_piece(step, piece, next);
          break;
        case Step::Kind::prefix_space:
          if (!piece.text.starts_with(' ')) piece.text.insert(0, " ");
          next.push_back(std::move(piece));
          break;
        case Step::Kind::metaspace: {
          piece.text = replace_literal(piece.text, " ", step.replacement);
          const bool prepend = !piece.text.starts_with(step.replacement) &&
                               (step.prepend == Prepend::always || (step.prepend == Prepend::first && piece.first));
          if (prepend) piece.text.insert(0, step.replacement);
          if (!step.split_words) {
            next.push_back(std::move(piece));
            break;
          }
          // Each replacement begins a new word (MergedWithNext).
          const std::string& t = piece.text;
          size_t begin = 0;
          for (size_t hit = t.find(step.replacement, 1); hit != std::string::npos;
               hit = t.find(step.replacement, hit + step.replacement.size())) {
            if (hit > begin) next.push_back({t.substr(begin, hit - begin), piece.first && begin == 0});
            begin = hit;
          }
          if (begin < t.size()) next.push_back({t.substr(begin), piece.first && begin == 0});
          break;
        }
      }
    }
    pieces.swap(next);
  }
  for (Piece& p : pieces) {
    if (!p.text.empty()) out.push_back(std::move(p.text));
  }
}

}  // namespace spillway
