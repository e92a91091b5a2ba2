// spillway's tokenizers against Hugging Face `tokenizers` on tokenizer.json
// files of each LLaMA family's shape, built at test time by
// tokenizer_families.py with the library from PyPI (scripts/setup.sh puts it
// in .venv), and on SmolLM2-135M's own tokenizer read from its GGUF file:
// the same ids on 5,000 strings per family (special tokens found and taken
// as text), the same text back from decoding, the same BOS.
//
// Without .venv's `tokenizers` the test skips, except under CI (CI set),
// where it fails.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/tokenizer.h"
#include "testing/real_models.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

std::string escaped(const std::string& text) {
  std::ostringstream out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') out << c;
    else out << "\\x" << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
  }
  return out.str();
}

class TokenizerFamilies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string python = testing::venv_python_with("tokenizers, gguf");
    if (python.empty()) {
      missing_ = testing::under_ci() ? "FAIL" : "SKIP";
      return;
    }
    std::string pattern = (fs::temp_directory_path() / "spillway-tokenizer-families-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    gguf_ = testing::find_smollm2_gguf();
    const std::string command = python + " " + (testing::repo_root() / "tests" / "parity" / "tokenizer_families.py").string() +
                                " " + dir_ + (gguf_.empty() ? "" : " " + gguf_) + " >/dev/null";
    if (std::system(command.c_str()) != 0) missing_ = "FAIL";
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Compares every case of one family; `tokenizer_path` is what spillway loads.
  void compare(const std::string& family, const std::string& tokenizer_path) {
    if (missing_ == "SKIP") GTEST_SKIP() << ".venv has no `tokenizers` (scripts/setup.sh installs it)";
    ASSERT_NE(missing_, "FAIL") << "tokenizer_families.py could not run with .venv's python and `tokenizers`";
    std::ifstream in(fs::path(dir_) / family / "cases.json");
    ASSERT_TRUE(in.good()) << family;
    const nlohmann::json cases = nlohmann::json::parse(in).at("cases");
    ASSERT_GE(cases.size(), 5000u);
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(tokenizer_path);
    int failures = 0, with_specials = 0;
    for (const nlohmann::json& c : cases) {
      const std::string text = c.at("text");
      const auto ids = c.at("ids").get<std::vector<int32_t>>();
      const auto plain = c.at("ids_special_as_text").get<std::vector<int32_t>>();
      const auto with_bos = c.at("with_bos").get<std::vector<int32_t>>();
      const std::string decoded = c.at("decoded");
      with_specials += ids != plain;
      const std::vector<int32_t> got = tok->encode(text, true), got_plain = tok->encode(text, false);
      const std::vector<int32_t> got_bos = tok->encode_text(text, true);
      const std::string got_text = tok->decode(ids);
      if ((got != ids || got_plain != plain || got_bos != with_bos || got_text != decoded) && ++failures <= 8) {
        ADD_FAILURE() << family << " \"" << escaped(text) << "\": ids " << ::testing::PrintToString(got) << " want "
                      << ::testing::PrintToString(ids) << "; as text " << ::testing::PrintToString(got_plain)
                      << " want " << ::testing::PrintToString(plain) << "; with BOS "
                      << ::testing::PrintToString(got_bos) << " want " << ::testing::PrintToString(with_bos)
                      << "; decoded \"" << escaped(got_text) << "\" want \"" << escaped(decoded) << "\"";
      }
    }
    EXPECT_EQ(failures, 0) << family << ": of " << cases.size() << " strings";
    EXPECT_GT(with_specials, 0) << family << ": the strings should hold special tokens";
  }

  std::string folder(const std::string& family) const { return (fs::path(dir_) / family).string(); }

  static inline std::string dir_, missing_, gguf_;
};

TEST_F(TokenizerFamilies, Llama3) { compare("llama3", folder("llama3")); }
TEST_F(TokenizerFamilies, Gpt2) { compare("gpt2", folder("gpt2")); }
TEST_F(TokenizerFamilies, SmolLM) { compare("smollm", folder("smollm")); }
TEST_F(TokenizerFamilies, Qwen2) { compare("qwen2", folder("qwen2")); }
TEST_F(TokenizerFamilies, Llama2Legacy) { compare("llama2", folder("llama2")); }
TEST_F(TokenizerFamilies, MistralMetaspace) {
  compare("mistral", folder("mistral"));
}

TEST_F(TokenizerFamilies, SmolLM2FromItsGguf) {
  if (missing_.empty() && gguf_.empty()) GTEST_SKIP() << "SmolLM2 GGUF not found (scripts/setup.sh installs it)";
  compare("smollm2", gguf_);
}

}  // namespace
}  // namespace spillway
