#include "model/tokenizer_json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "base/atomic_file.h"
#include "base/json_text.h"
#include "base/limits.h"
#include "base/regular_file.h"
#include "base/status.h"
#include "model/byte_level.h"

namespace spillway {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// --- reading ---------------------------------------------------------------

// Field lookups that name the field in the error, not nlohmann's internals.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& problem) const { throw Error(source_, problem); }

  const json& object(const json& parent, const char* key, const std::string& where) const {
    const auto it = parent.find(key);
    if (it == parent.end()) fail("missing field " + where + key);
    if (!it->is_object()) fail(where + key + " is not an object");
    return *it;
  }
  const json& array(const json& parent, const char* key, const std::string& where) const {
    const auto it = parent.find(key);
    if (it == parent.end()) fail("missing field " + where + key);
    if (!it->is_array()) fail(where + key + " is not an array");
    return *it;
  }
  std::string string(const json& parent, const char* key, const std::string& where) const {
    const auto it = parent.find(key);
    if (it == parent.end()) fail("missing field " + where + key);
    if (!it->is_string()) fail(where + key + " is not a string");
    return it->get<std::string>();
  }
  // Absent and null read as `otherwise`.
  bool flag(const json& parent, const char* key, bool otherwise, const std::string& where) const {
    const auto it = parent.find(key);
    if (it == parent.end() || it->is_null()) return otherwise;
    if (!it->is_boolean()) fail(where + key + " is not true or false");
    return it->get<bool>();
  }
  bool absent_or_null(const json& parent, const char* key) const {
    const auto it = parent.find(key);
    return it == parent.end() || it->is_null();
  }
  bool absent_null_or_empty(const json& parent, const char* key) const {
    const auto it = parent.find(key);
    return it == parent.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
  }
  int32_t id(const json& value, const std::string& what) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= INT32_MAX) {
      fail(what + " has id " + value.dump() + ", not a non-negative integer");
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }

 private:
  const std::string& source_;
};

// Characters (code points) in UTF-8 text; a byte of a broken sequence counts
// as one.
size_t unicode_length(std::string_view text) {
  size_t n = 0;
  for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Whether a field holds this text, or this flag (`otherwise` when absent).
// A field of another JSON type is simply not a match: these only recognize
// spillway's own layout, and any other pipeline is checked where it is built.
bool text_is(const json& object, const char* key, std::string_view text) {
  const auto it = object.find(key);
  return it != object.end() && it->is_string() && it->get_ref<const std::string&>() == text;
}
bool flag_is(const json& object, const char* key, bool otherwise, bool want) {
  const auto it = object.find(key);
  if (it == object.end()) return otherwise == want;
  return it->is_boolean() && it->get<bool>() == want;
}

// spillway's own layout, Split(pattern, Isolated) then ByteLevel without its
// regex, or GPT-2's bare ByteLevel with its regex (the same split): the
// pattern. Anything else: nullopt, and the pre-tokenizer is kept as JSON.
std::optional<std::string> own_layout_pattern(const json& pre) {
  const auto byte_level_without_prefix = [](const json& b, bool regex) {
    return b.is_object() && text_is(b, "type", "ByteLevel") && flag_is(b, "add_prefix_space", true, false) &&
           flag_is(b, "use_regex", true, regex);
  };
  if (byte_level_without_prefix(pre, true)) return std::string(kGpt2Pattern);
  if (!pre.is_object() || !text_is(pre, "type", "Sequence") || !pre.contains("pretokenizers")) return std::nullopt;
  const json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || !byte_level_without_prefix(steps[1], false)) return std::nullopt;
  const json& split = steps[0];
  if (!split.is_object() || !text_is(split, "type", "Split") || !text_is(split, "behavior", "Isolated") ||
      !flag_is(split, "invert", false, false) || !split.contains("pattern") || !split["pattern"].is_object() ||
      !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string()) {
    return std::nullopt;
  }
  return split["pattern"]["Regex"].get<std::string>();
}

// Whether the pre-tokenizer ends in ByteLevel: then the model is byte-level.
bool ends_in_byte_level(const json& pre) {
  if (!pre.is_object()) return false;
  if (text_is(pre, "type", "ByteLevel")) return true;
  if (!text_is(pre, "type", "Sequence") || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array() ||
      pre["pretokenizers"].empty()) {
    return false;
  }
  return ends_in_byte_level(pre["pretokenizers"].back());
}

void check_model_options(const Reader& r, const json& model) {
  const std::string type = r.string(model, "type", "model.");
  if (type != "BPE") r.fail("model.type is \"" + type + "\"; only BPE is supported");
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    r.fail("model.dropout is set, which only training with random merges uses");
  }
  if (!r.absent_null_or_empty(model, "continuing_subword_prefix")) {
    r.fail("model.continuing_subword_prefix is set, which LLaMA-family BPE does not use");
  }
  if (!r.absent_null_or_empty(model, "end_of_word_suffix")) {
    r.fail("model.end_of_word_suffix is set, which LLaMA-family BPE does not use");
  }
}

// A post-processor's template ("<s> $A"): the special tokens it puts before
// and after the text, which are the model's BOS and EOS when there is one.
// Every value is type-checked: a post-processor of another shape is skipped
// as before, but one of this shape with a value of the wrong type is refused
// with its field named.
void read_post_processor(const Reader& r, const json& post, TokenRoles& roles, int depth = 0) {
  if (!post.is_object() || depth > 8) return;
  const auto type = post.find("type");
  const bool typed = type != post.end() && type->is_string();
  if (typed && *type == "Sequence" && post.contains("processors") && post["processors"].is_array()) {
    for (const json& p : post["processors"]) read_post_processor(r, p, roles, depth + 1);
    return;
  }
  if (!typed || *type != "TemplateProcessing" || !post.contains("single") || !post["single"].is_array()) return;
  const json no_specials = json::object();
  const auto specials_it = post.find("special_tokens");
  const json& special_tokens =
      specials_it != post.end() && specials_it->is_object() ? *specials_it : no_specials;
  std::vector<int32_t> before, after;
  bool seen_text = false;
  for (const json& piece : post["single"]) {
    if (!piece.is_object()) continue;
    if (piece.contains("Sequence")) {
      seen_text = true;
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].is_object() &&
               piece["SpecialToken"].contains("id")) {
      const std::string name =
          r.string(piece["SpecialToken"], "id", "post_processor.single[].SpecialToken.");
      const auto entry = special_tokens.find(name);
      if (entry == special_tokens.end() || !entry->is_object() || !entry->contains("ids")) continue;
      const std::string where = "post_processor.special_tokens." + name + ".ids";
      const json& ids = (*entry)["ids"];
      if (!ids.is_array()) r.fail(where + " is not an array");
      for (const json& id : ids) (seen_text ? after : before).push_back(r.id(id, where));
    }
  }
  if (before.size() == 1) {
    roles.bos = before[0];
    roles.add_bos = true;
  }
  if (after.size() == 1) {
    roles.eos = after[0];
    roles.add_eos = true;
  }
}

}  // namespace

BpeTokenizer parse_tokenizer_json(const std::string& text, const std::string& source_name) {
  const Reader r(source_name);
  const json root = json_from_text(text, source_name);
  if (!root.is_object()) r.fail("is not a JSON object");
  const json& model = r.object(root, "model", "");
  check_model_options(r, model);

  BpeVocab vocab;
  const json pre = root.value("pre_tokenizer", json());
  const json normalizer = root.value("normalizer", json());
  const json decoder = root.value("decoder", json());
  vocab.byte_level = ends_in_byte_level(pre);
  if (const auto pattern = own_layout_pattern(pre)) {
    vocab.pattern = *pattern;
  } else {
    vocab.pre_tokenizer = pre.is_null() ? "null" : pre.dump();
  }
  if (!normalizer.is_null()) vocab.normalizer = normalizer.dump();
  const bool byte_level_decoder = decoder.is_object() && text_is(decoder, "type", "ByteLevel");
  if (!vocab.byte_level || !byte_level_decoder) vocab.decoder = decoder.is_null() ? "null" : decoder.dump();
  vocab.ignore_merges = r.flag(model, "ignore_merges", false, "model.");
  vocab.byte_fallback = r.flag(model, "byte_fallback", false, "model.");
  vocab.fuse_unk = r.flag(model, "fuse_unk", false, "model.");

  // Added tokens first: one may also sit in model.vocab (GPT-2, LLaMA-2).
  std::map<int32_t, std::string> added_at;
  std::unordered_map<std::string, int32_t> added_id_of;
  if (!r.absent_or_null(root, "added_tokens")) {
    const json& added = r.array(root, "added_tokens", "");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "].";
      if (!added[i].is_object()) r.fail(where.substr(0, where.size() - 1) + " is not an object");
      SpecialToken t;
      t.content = r.string(added[i], "content", where);
      if (!added[i].contains("id")) r.fail("missing field " + where + "id");
      t.id = r.id(added[i]["id"], "added token \"" + t.content + "\"");
      t.special = r.flag(added[i], "special", false, where);
      t.lstrip = r.flag(added[i], "lstrip", false, where);
      t.rstrip = r.flag(added[i], "rstrip", false, where);
      t.single_word = r.flag(added[i], "single_word", false, where);
      t.normalized = r.flag(added[i], "normalized", !t.special, where);
      if (!added_id_of.emplace(t.content, t.id).second) {
        r.fail("added token \"" + t.content + "\" is listed twice, with ids " +
               std::to_string(added_id_of[t.content]) + " and " + std::to_string(t.id));
      }
      if (!added_at.emplace(t.id, t.content).second) {
        r.fail("added tokens \"" + added_at[t.id] + "\" and \"" + t.content + "\" share id " + std::to_string(t.id));
      }
      vocab.specials.push_back(std::move(t));
    }
  }

  const json& vocab_json = r.object(model, "vocab", "model.");
  std::unordered_map<std::string, int32_t> id_of_text;
  std::map<int32_t, std::string> text_at;
  for (const auto& [symbols, value] : vocab_json.items()) {
    const int32_t id = r.id(value, "model.vocab token \"" + symbols + "\"");
    const auto added = added_at.find(id);
    std::string text = symbols;
    std::optional<std::string> decoded;
    if (vocab.byte_level) decoded = byte_level::from_symbols(symbols);
    if (added != added_at.end()) {
      // An added token that is also in model.vocab must be the same token
      // there: ids swapped between the two lists would encode one and
      // decode the other.
      if (symbols != added->second && decoded != added->second) {
        r.fail("model.vocab gives id " + std::to_string(id) + " to \"" + symbols +
               "\" but added_tokens gives it to \"" + added->second + "\"");
      }
      text = added->second;
    } else if (vocab.byte_level) {
      if (decoded) text = std::move(*decoded);
      else vocab.unreachable.push_back(id);  // outside the alphabet: no pre-token reaches it
    }
    if (!text_at.emplace(id, std::move(text)).second) {
      r.fail("model.vocab gives id " + std::to_string(id) + " to two tokens");
    }
    id_of_text.emplace(symbols, id);
  }
  for (const auto& [id, content] : added_at) text_at.emplace(id, content);
  // Ids must run 0..n-1 with no gap, so every id decodes.
  const auto n = static_cast<int32_t>(text_at.size());
  if (n == 0) r.fail("model.vocab is empty");
  if (text_at.rbegin()->first != n - 1) {
    int32_t missing = 0;
    while (text_at.count(missing)) ++missing;
    r.fail("no token has id " + std::to_string(missing) + " (ids run to " + std::to_string(text_at.rbegin()->first) +
           ")");
  }
  vocab.tokens.reserve(static_cast<size_t>(n));
  for (auto& [id, text] : text_at) vocab.tokens.push_back(std::move(text));
  if (!r.absent_or_null(model, "unk_token")) {
    const auto unk = id_of_text.find(r.string(model, "unk_token", "model."));
    if (unk != id_of_text.end()) vocab.unk = unk->second;
  }

  const json& merges = r.array(model, "merges", "model.");
  // With no merges BPE reaches only single characters; a vocabulary with
  // longer tokens and no merges (unless ignore_merges looks them up whole)
  // is a file that lost its merges.
  if (merges.empty() && !vocab.ignore_merges) {
    for (const auto& [symbols, value] : vocab_json.items()) {
      const bool added = added_at.count(r.id(value, "model.vocab token \"" + symbols + "\"")) > 0;
      if (!added && unicode_length(symbols) > 1) {
        r.fail("model.merges is empty but model.vocab holds \"" + symbols +
               "\", which only merges make (a tokenizer without its merges?)");
      }
    }
  }
  if (merges.size() > limits::kMaxTokenizerMerges) {
    r.fail("model.merges holds " + std::to_string(merges.size()) + " merges; at most " +
           std::to_string(limits::kMaxTokenizerMerges));
  }
  vocab.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    const std::string where = "model.merges[" + std::to_string(rank) + "]";
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        r.fail(where + " \"" + line + "\" is not two tokens separated by one space");
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.fail(where + " is neither \"left right\" nor [\"left\", \"right\"]");
    }
    const auto l = id_of_text.find(left), rt = id_of_text.find(right);
    if (l == id_of_text.end()) r.fail(where + " names \"" + left + "\", which is not in model.vocab");
    if (rt == id_of_text.end()) r.fail(where + " names \"" + right + "\", which is not in model.vocab");
    vocab.merges.push_back({l->second, rt->second});
  }

  TokenRoles roles;
  if (root.contains("post_processor")) read_post_processor(r, root["post_processor"], roles);
  try {
    BpeTokenizer tokenizer(std::move(vocab));
    tokenizer.set_roles(roles);
    tokenizer.set_source_json(text);
    return tokenizer;
  } catch (const Error& e) {
    // The vocabulary's own checks name "tokenizer"; name the file instead.
    const std::string what = e.what();
    r.fail(what.substr(std::min(what.size(), e.thing().size() + 2)));
  }
}

BpeTokenizer load_tokenizer_json(const std::string& path) {
  return parse_tokenizer_json(read_regular_file(path, "a tokenizer.json"), path);
}

// --- writing ---------------------------------------------------------------

std::string tokenizer_json_text(const BpeTokenizer& tokenizer) {
  if (!tokenizer.source_json().empty()) return tokenizer.source_json();
  const BpeVocab& v = tokenizer.vocab();
  SPW_CHECK(v.pre_tokenizer.empty() && v.normalizer.empty() && v.decoder.empty() && v.byte_level, "tokenizer",
            "was built in memory with a pipeline of its own, which spillway writes only from its source text");
  ordered_json added = ordered_json::array();
  std::vector<SpecialToken> specials = v.specials;
  std::sort(specials.begin(), specials.end(),
            [](const SpecialToken& a, const SpecialToken& b) { return a.id < b.id; });
  for (const SpecialToken& s : specials) {
    added.push_back({{"id", s.id},
                     {"content", s.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json vocab = ordered_json::object();
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) vocab[byte_level::to_symbols(v.tokens[id])] = id;
  }
  ordered_json merges = ordered_json::array();
  for (const auto& [left, right] : v.merges) {
    merges.push_back({byte_level::to_symbols(v.tokens[left]), byte_level::to_symbols(v.tokens[right])});
  }
  ordered_json root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", v.pattern}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  root["post_processor"] = nullptr;
  root["decoder"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", v.ignore_merges},
                   {"vocab", std::move(vocab)},
                   {"merges", std::move(merges)}};
  try {
    return root.dump(2) + "\n";
  } catch (const ordered_json::type_error& e) {
    // Only special tokens and the pattern can hold text that is not UTF-8.
    throw Error("tokenizer", std::string("cannot be written as JSON: ") + e.what());
  }
}

void save_tokenizer_json(const BpeTokenizer& tokenizer, const std::string& path) {
  write_text_file_atomically(path, tokenizer_json_text(tokenizer));
}

}  // namespace spillway
