#include "model/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/json_text.h"
#include "base/regular_file.h"
#include "base/status.h"
#include "model/bpe_tokenizer.h"
#include "model/sentencepiece_tokenizer.h"
#include "model/tokenizer_json.h"

namespace spillway {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

// nullopt when the file is absent.
std::optional<std::pair<json, std::string>> read_json(const fs::path& path) {
  std::error_code ec;
  const std::string odd = non_regular_kind(path.string());
  SPW_CHECK(odd.empty(), path.string(), "is ", odd, ", not a JSON file");
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  SPW_CHECK(in.good(), path.string(), "cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json j = json_from_text(text, path.string());
  SPW_CHECK(j.is_object(), path.string(), "is not a JSON object");
  return std::make_pair(std::move(j), std::move(text));
}

// A token named as tokenizer_config.json names it: a string, or an object
// whose "content" is one (transformers' AddedToken); null: none.
std::optional<int32_t> named_token(const json& config, const char* key, const Tokenizer& tok, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  std::string name;
  if (it->is_string()) name = it->get<std::string>();
  else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) name = (*it)["content"];
  else throw Error(file.string(), std::string(key) + " is " + it->dump() + ", not a token");
  const auto id = tok.token_id(name);
  SPW_CHECK(id.has_value(), file.string(), key, " is \"", name, "\", which the tokenizer's vocabulary lacks");
  return id;
}

// One id or a list of them (eos_token_id of generation_config.json).
std::vector<int32_t> ids_of(const json& config, const char* key, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return {};
  const json list = it->is_array() ? *it : json::array({*it});
  std::vector<int32_t> ids;
  for (const json& v : list) {
    SPW_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX &&
                  !(v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX),
              file.string(), key, " is ", it->dump(), ", not a token id or a list of them");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

std::string chat_template_of(const json& config) {
  const auto it = config.find("chat_template");
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  // A list of named templates: the default one.
  if (it->is_array()) {
    for (const json& t : *it) {
      if (!t.is_object()) continue;
      const auto name = t.find("name"), text = t.find("template");
      if (name != t.end() && *name == "default" && text != t.end() && text->is_string()) return *text;
    }
  }
  return {};
}

}  // namespace

TokenRoles read_roles(const std::string& dir, const Tokenizer& tok) {
  TokenRoles roles = tok.roles();
  bool bos_named = false, eos_named = false;
  const auto add_stop = [&](int32_t id) {
    if (std::find(roles.stops.begin(), roles.stops.end(), id) == roles.stops.end()) roles.stops.push_back(id);
  };
  const fs::path folder(dir);
  if (auto config = read_json(folder / "tokenizer_config.json")) {
    const auto& [j, text] = *config;
    const fs::path file = folder / "tokenizer_config.json";
    roles.config_text = text;
    if (auto id = named_token(j, "bos_token", tok, file)) roles.bos = id, bos_named = true;
    if (auto id = named_token(j, "eos_token", tok, file)) roles.eos = id, eos_named = true;
    if (auto id = named_token(j, "pad_token", tok, file)) roles.pad = id;
    if (auto id = named_token(j, "unk_token", tok, file)) roles.unk = id;
    if (j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) roles.add_bos = j["add_bos_token"];
    if (j.contains("add_eos_token") && j["add_eos_token"].is_boolean()) roles.add_eos = j["add_eos_token"];
    if (std::string t = chat_template_of(j); !t.empty()) roles.chat_template = std::move(t);
  }
  for (const char* name : {"generation_config.json", "config.json"}) {
    auto config = read_json(folder / name);
    if (!config) continue;
    const fs::path file = folder / name;
    const std::vector<int32_t> bos = ids_of(config->first, "bos_token_id", file);
    const std::vector<int32_t> eos = ids_of(config->first, "eos_token_id", file);
    if (!bos_named && !bos.empty()) roles.bos = bos[0], bos_named = true;
    if (!eos_named && !eos.empty()) roles.eos = eos[0], eos_named = true;
    for (int32_t id : eos) add_stop(id);
  }
  return roles;
}

void save_tokenizer_files(const Tokenizer& tok, const std::string& dir) {
  const fs::path folder(dir);
  fs::create_directories(folder);
  if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) {
    save_tokenizer_json(*bpe, (folder / "tokenizer.json").string());
  } else if (const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(&tok)) {
    write_text_file_atomically((folder / "tokenizer.model").string(), sp->serialized_model());
  } else {
    throw Error("tokenizer", "of kind " + std::string(tok.kind()) + " cannot be written into a model folder");
  }
  const TokenRoles& r = tok.roles();
  std::string config = r.config_text;
  if (config.empty()) {
    const auto name = [&](const std::optional<int32_t>& id) { return id ? json(tok.token_text(*id)) : json(); };
    ordered_json added = ordered_json::object();
    if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok)) {
      for (const SpecialToken& s : bpe->vocab().specials) {
        added[std::to_string(s.id)] = {{"content", s.content}, {"lstrip", s.lstrip}, {"normalized", s.normalized},
                                       {"rstrip", s.rstrip}, {"single_word", s.single_word}, {"special", s.special}};
      }
    }
    ordered_json j;
    j["add_bos_token"] = r.add_bos;
    j["add_eos_token"] = r.add_eos;
    j["added_tokens_decoder"] = std::move(added);
    j["bos_token"] = name(r.bos);
    j["chat_template"] = r.chat_template.empty() ? kPlainChatTemplate : r.chat_template;
    j["clean_up_tokenization_spaces"] = false;
    j["eos_token"] = name(r.eos);
    j["pad_token"] = name(r.pad);
    j["unk_token"] = name(r.unk);
    j["tokenizer_class"] = tok.kind() == "sentencepiece" ? "LlamaTokenizer" : "PreTrainedTokenizerFast";
    config = j.dump(2) + "\n";
  }
  write_text_file_atomically((folder / "tokenizer_config.json").string(), config);
  ordered_json generation;
  if (r.bos) generation["bos_token_id"] = *r.bos;
  if (r.stops.size() == 1) generation["eos_token_id"] = r.stops[0];
  else if (!r.stops.empty()) generation["eos_token_id"] = r.stops;
  write_text_file_atomically((folder / "generation_config.json").string(), generation.dump(2) + "\n");
}

}  // namespace spillway
