#include "model/tokenizer_json.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "base/atomic_file.h"
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

std::string read_pattern(const Reader& r, const json& root) {
  const auto it = root.find("pre_tokenizer");
  if (it == root.end() || it->is_null()) r.fail("pre_tokenizer is missing; byte-level BPE needs one");
  const json& pre = *it;
  if (!pre.is_object()) r.fail("pre_tokenizer is not an object");
  const std::string type = r.string(pre, "type", "pre_tokenizer.");
  const auto check_byte_level = [&](const json& byte_level, bool want_regex, const std::string& where) {
    const std::string step = r.string(byte_level, "type", where);
    if (step != "ByteLevel") r.fail(where + "type is \"" + step + "\", not ByteLevel");
    if (r.flag(byte_level, "add_prefix_space", true, where)) {
      r.fail(where + "add_prefix_space is true, which is not supported");
    }
    if (r.flag(byte_level, "use_regex", true, where) != want_regex) {
      r.fail(where + "use_regex is " + (want_regex ? "false" : "true") + ", which is not supported here");
    }
  };
  if (type == "ByteLevel") {
    check_byte_level(pre, true, "pre_tokenizer.");
    return std::string(kGpt2Pattern);
  }
  if (type != "Sequence")
    r.fail("pre_tokenizer.type is \"" + type + "\"; only ByteLevel or Sequence is supported");
  const json& steps = r.array(pre, "pretokenizers", "pre_tokenizer.");
  if (steps.size() != 2 || !steps[0].is_object() || !steps[1].is_object()) {
    r.fail("pre_tokenizer.pretokenizers must be [Split, ByteLevel]");
  }
  const json& split = steps[0];
  const std::string where = "pre_tokenizer.pretokenizers[0].";
  if (r.string(split, "type", where) != "Split") r.fail(where + "type is not Split");
  if (r.string(split, "behavior", where) != "Isolated") r.fail(where + "behavior is not Isolated");
  if (r.flag(split, "invert", false, where)) r.fail(where + "invert is true, which is not supported");
  const json& pattern = r.object(split, "pattern", where);
  if (!pattern.contains("Regex")) r.fail(where + "pattern is not a Regex");
  check_byte_level(steps[1], false, "pre_tokenizer.pretokenizers[1].");
  return r.string(pattern, "Regex", where + "pattern.");
}

void check_model_options(const Reader& r, const json& model) {
  const std::string type = r.string(model, "type", "model.");
  if (type != "BPE") r.fail("model.type is \"" + type + "\"; only BPE is supported");
  if (!r.absent_or_null(model, "dropout")) r.fail("model.dropout is set, which is not supported");
  if (!r.absent_null_or_empty(model, "continuing_subword_prefix")) {
    r.fail("model.continuing_subword_prefix is set, which byte-level BPE does not use");
  }
  if (!r.absent_null_or_empty(model, "end_of_word_suffix")) {
    r.fail("model.end_of_word_suffix is set, which byte-level BPE does not use");
  }
  if (r.flag(model, "byte_fallback", false, "model."))
    r.fail("model.byte_fallback is true, which is not supported");
}

}  // namespace

BpeTokenizer parse_tokenizer_json(const std::string& text, const std::string& source_name) {
  const Reader r(source_name);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    r.fail(std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) r.fail("is not a JSON object");
  if (!r.absent_or_null(root, "normalizer")) r.fail("has a normalizer, which is not supported");
  const json& model = r.object(root, "model", "");
  check_model_options(r, model);

  BpeVocab vocab;
  vocab.pattern = read_pattern(r, root);
  vocab.ignore_merges = r.flag(model, "ignore_merges", false, "model.");

  // Special tokens first: one may also sit in model.vocab (GPT-2 does so).
  std::map<int32_t, std::string> special_at;
  if (!r.absent_or_null(root, "added_tokens")) {
    const json& added = r.array(root, "added_tokens", "");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "].";
      if (!added[i].is_object()) r.fail(where.substr(0, where.size() - 1) + " is not an object");
      const std::string content = r.string(added[i], "content", where);
      if (!added[i].contains("id")) r.fail("missing field " + where + "id");
      const int32_t id = r.id(added[i]["id"], "added token \"" + content + "\"");
      if (!r.flag(added[i], "special", false, where)) {
        r.fail("added token \"" + content + "\" is not special; only special added tokens are supported");
      }
      for (const char* option : {"lstrip", "rstrip", "single_word"}) {
        if (r.flag(added[i], option, false, where)) {
          r.fail("added token \"" + content + "\" sets " + option + ", which is not supported");
        }
      }
      if (!special_at.emplace(id, content).second) {
        r.fail("added tokens \"" + special_at[id] + "\" and \"" + content + "\" share id " +
               std::to_string(id));
      }
      vocab.specials.push_back({content, id});
    }
  }

  const json& vocab_json = r.object(model, "vocab", "model.");
  std::unordered_map<std::string, int32_t> id_of_symbols;
  std::map<int32_t, std::string> bytes_at;
  for (const auto& [symbols, value] : vocab_json.items()) {
    const int32_t id = r.id(value, "model.vocab token \"" + symbols + "\"");
    const auto special = special_at.find(id);
    std::string bytes;
    if (special != special_at.end() && special->second == symbols) {
      bytes = symbols;
    } else if (auto decoded = byte_level::from_symbols(symbols)) {
      bytes = std::move(*decoded);
    } else {
      r.fail("model.vocab token \"" + symbols + "\" is not in the byte-level alphabet");
    }
    if (!bytes_at.emplace(id, std::move(bytes)).second) {
      r.fail("model.vocab gives id " + std::to_string(id) + " to two tokens");
    }
    id_of_symbols.emplace(symbols, id);
  }
  for (const auto& [id, content] : special_at) bytes_at.emplace(id, content);
  // Ids must run 0..n-1 with no gap, so every id decodes.
  const auto n = static_cast<int32_t>(bytes_at.size());
  if (n == 0) r.fail("model.vocab is empty");
  if (bytes_at.rbegin()->first != n - 1) {
    int32_t missing = 0;
    while (bytes_at.count(missing)) ++missing;
    r.fail("no token has id " + std::to_string(missing) + " (ids run to " +
           std::to_string(bytes_at.rbegin()->first) + ")");
  }
  vocab.tokens.reserve(static_cast<size_t>(n));
  for (auto& [id, bytes] : bytes_at) vocab.tokens.push_back(std::move(bytes));

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
    const auto l = id_of_symbols.find(left), rt = id_of_symbols.find(right);
    if (l == id_of_symbols.end()) r.fail(where + " names \"" + left + "\", which is not in model.vocab");
    if (rt == id_of_symbols.end()) r.fail(where + " names \"" + right + "\", which is not in model.vocab");
    vocab.merges.push_back({l->second, rt->second});
  }

  try {
    return BpeTokenizer(std::move(vocab));
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
  const BpeVocab& v = tokenizer.vocab();
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
