#include "model/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "base/regular_file.h"
#include "base/status.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "model/sentencepiece_tokenizer.h"
#include "model/tokenizer_files.h"
#include "model/tokenizer_json.h"

namespace spillway {

namespace {

namespace fs = std::filesystem;

constexpr const char* kWhereRolesComeFrom =
    "(tokenizer_config.json, generation_config.json or config.json beside the tokenizer, or GGUF metadata)";

// SentencePiece models are protobuf, which never starts with '{'.
bool starts_like_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPW_CHECK(in, path, "cannot open");
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == '{';
  }
  return false;
}

std::unique_ptr<Tokenizer> load_file(const fs::path& path) {
  const std::string p = path.string();
  const std::string extension = path.extension().string();
  if (extension == ".gguf" || (extension != ".json" && extension != ".model" && is_gguf_file(p))) {
    return load_gguf_tokenizer(GgufFile(p));
  }
  if (extension == ".json" || (extension != ".model" && starts_like_json(p))) {
    return std::make_unique<BpeTokenizer>(load_tokenizer_json(p));
  }
  return std::make_unique<SentencePieceTokenizer>(p);
}

}  // namespace

void Tokenizer::set_roles(TokenRoles roles) {
  const int32_t n = vocab_size();
  const auto check = [&](const std::optional<int32_t>& id, const char* what) {
    SPW_CHECK(!id || (*id >= 0 && *id < n), "tokenizer", what, " token id ", id.value_or(0),
              " is outside the vocabulary of ", n, " tokens");
  };
  check(roles.bos, "beginning-of-text");
  check(roles.eos, "end-of-text");
  check(roles.pad, "padding");
  check(roles.unk, "unknown");
  for (int32_t id : roles.stops) check(id, "stop");
  if (roles.eos && std::find(roles.stops.begin(), roles.stops.end(), *roles.eos) == roles.stops.end()) {
    roles.stops.insert(roles.stops.begin(), *roles.eos);
  }
  roles_ = std::move(roles);
}

int32_t Tokenizer::bos_id() const {
  SPW_CHECK(roles_.bos.has_value(), "tokenizer", "names no beginning-of-text token ", kWhereRolesComeFrom);
  return *roles_.bos;
}

int32_t Tokenizer::eos_id() const {
  SPW_CHECK(roles_.eos.has_value(), "tokenizer", "names no end-of-text token ", kWhereRolesComeFrom);
  return *roles_.eos;
}

bool Tokenizer::is_stop(int32_t id) const {
  return std::find(roles_.stops.begin(), roles_.stops.end(), id) != roles_.stops.end();
}

std::vector<int32_t> Tokenizer::encode_text(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  if (roles_.add_bos) ids.push_back(bos_id());
  const std::vector<int32_t> body = encode(text, allow_special);
  ids.insert(ids.end(), body.begin(), body.end());
  if (roles_.add_eos) ids.push_back(eos_id());
  return ids;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  std::unique_ptr<Tokenizer> tokenizer;
  fs::path folder;
  if (fs::is_directory(p, ec)) {
    const fs::path model = p / "tokenizer.model";
    const fs::path json = p / "tokenizer.json";
    if (fs::is_regular_file(json, ec)) tokenizer = std::make_unique<BpeTokenizer>(load_tokenizer_json(json.string()));
    else if (fs::is_regular_file(model, ec)) tokenizer = std::make_unique<SentencePieceTokenizer>(model.string());
    else throw Error(path, "holds neither tokenizer.model nor tokenizer.json");
    folder = p;
  } else {
    const std::string odd = non_regular_kind(path);
    SPW_CHECK(odd.empty(), path, "is ", odd, ", not a tokenizer file");
    SPW_CHECK(fs::is_regular_file(p, ec), path, "no such file or folder");
    tokenizer = load_file(p);
    if (p.extension() == ".gguf" || is_gguf_file(path)) return tokenizer;
    folder = p.has_parent_path() ? p.parent_path() : fs::path(".");
  }
  tokenizer->set_roles(read_roles(folder.string(), *tokenizer));
  return tokenizer;
}

}  // namespace spillway
