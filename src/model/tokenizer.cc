#include "model/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "base/status.h"
#include "model/sentencepiece_tokenizer.h"
#include "model/tokenizer_json.h"

namespace spillway {

namespace {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_json(const std::string& path) {
  return std::make_unique<BpeTokenizerAdapter>(load_tokenizer_json(path));
}

std::unique_ptr<Tokenizer> load_model(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

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

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir_or_file) {
  std::error_code ec;
  const fs::path path(dir_or_file);
  if (fs::is_directory(path, ec)) {
    const fs::path model = path / "tokenizer.model";
    const fs::path json = path / "tokenizer.json";
    if (fs::is_regular_file(model, ec)) return load_model(model.string());
    if (fs::is_regular_file(json, ec)) return load_json(json.string());
    throw Error(dir_or_file, "holds neither tokenizer.model nor tokenizer.json");
  }
  SPW_CHECK(fs::is_regular_file(path, ec), dir_or_file, "no such file or folder");
  const std::string extension = path.extension().string();
  if (extension == ".json") return load_json(dir_or_file);
  if (extension == ".model") return load_model(dir_or_file);
  return starts_like_json(dir_or_file) ? load_json(dir_or_file) : load_model(dir_or_file);
}

}  // namespace spillway
