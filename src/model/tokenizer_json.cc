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

// spillway's own layout, Split(pattern, Isolated) then ByteLevel without its
// regex, or GPT-2's bare ByteLevel with its regex (the same split): the
// pattern. Anything else: nullopt, and the pre-tokenizer is kept as JSON.
std::optional<std::string> own_layout_pattern(const json& pre) {
  const auto byte_level_without_prefix = [](const json& b, bool regex) {
    return b.is_object() && b.value("type", "") == "ByteLevel" && !b.value("add_prefix_space", true) &&
           b.value("use_regex", true) == regex;
  };
  if (byte_level_without_prefix(pre, true)) return std::string(kGpt2Pattern);
  if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers")) return std::nullopt;
  const json& steps = pre["pretokenizers"];
  if (!steps.is_array() || steps.size() != 2 || !byte_level_without_prefix(steps[1], false)) return std::nullopt;
  const json& split = steps[0];
  if (!split.is_object() || split.value("type", "") != "Split" || split.value("behavior", "") != "Isolated" ||
      split.value("invert", false) || !split.contains("pattern") || !split["pattern"].is_object() ||
      !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string()) {
    return std::nullopt;
  }
  return split["pattern"]["Regex"].get<std::string>();
}

// Whether the pre-tokenizer ends in ByteLevel: then the model is byte-level.
bool ends_in_byte_level(const json& pre) {
  if (!pre.is_object()) return false;
  if (pre.value("type", "") == "ByteLevel") return true;
  if (pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers") || !pre["pretokenizers"].is_array() ||
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
void read_post_processor(const json& post, TokenRoles& roles) {
  if (!post.is_object()) return;
  if (post.value("type", "") == "Sequence" && post.contains("processors") && post["processors"].is_array()) {
    for (const json& p : post["processors"]) read_post_processor(p, roles);
    return;
  }
  if (post.value("type", "") != "TemplateProcessing" || !post.contains("single") || !post["single"].is_array()) return;
  const json& special_tokens = post.value("special_tokens", json::object());
  std::vector<int32_t> before, after;
  bool seen_text = false;
  for (const json& piece : post["single"]) {
    if (piece.contains("Sequence")) {
      seen_text = true;
    } else if (piece.contains("SpecialToken") && piece["SpecialToken"].contains("id")) {
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      if (!special_tokens.contains(name) || !special_tokens[name].contains("ids")) continue;
      for (const json& id : special_tokens[name]["ids"]) (seen_text ? after : before).push_back(id.get<int32_t>());
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
  const bool byte_level_decoder = decoder.is_object() && decoder.value("type", "") == "ByteLevel";
  if (!vocab.byte_level || !byte_level_decoder) vocab.decoder = decoder.is_null() ? "null" : decoder.dump();
  vocab.ignore_merges = r.flag(model, "ignore_merges", false, "model.");
  vocab.byte_fallback = r.flag(model, "byte_fallback", false, "model.");
  vocab.fuse_unk = r.flag(model, "fuse_unk", false, "model.");

  // Added tokens first: one may also sit in model.vocab (GPT-2, LLaMA-2).
  std::map<int32_t, std::string> added_at;
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
    if (added != added_at.end()) {
      text = added->second;
    } else if (vocab.byte_level) {
      if (auto decoded = byte_level::from_symbols(symbols)) text = std::move(*decoded);
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
  read_post_processor(root.value("post_processor", json()), roles);
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path, "read failed");
  return parse_tokenizer_json(text.str(), path);
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
