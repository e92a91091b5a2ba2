#include "model/tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/sentencepiece_tokenizer.h"
#include "model/tokenizer_json.h"

#ifdef SPILLWAY_HAS_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

namespace spillway {
namespace {

namespace fs = std::filesystem;

std::string sample_corpus() {
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"the", "fox", "jumps", "over", "lazy", "dog", "caf\xC3\xA9", "42"};
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::string text;
  for (int i = 0; i < 3000; ++i) text += words[pick(rng)] + (i % 13 == 12 ? "\n" : " ");
  return text;
}

class LoadTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "spillway-loadtok-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    bpe_json_ = tokenizer_json_text(train_bpe(sample_corpus(), 300, {"<|begin_of_text|>", "<|end_of_text|>"}));
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path folder(const std::string& name) {
    fs::create_directories(dir_ / name);
    return dir_ / name;
  }
  static void write(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

#ifdef SPILLWAY_HAS_SENTENCEPIECE
  // Bytes of a small SentencePiece BPE model trained on the sample corpus.
  std::string sentencepiece_model_bytes() {
    const fs::path corpus = dir_ / "corpus.txt";
    write(corpus, sample_corpus());
    const std::string prefix = (dir_ / "spm").string();
    const auto status = sentencepiece::SentencePieceTrainer::Train({{"input", corpus.string()},
                                                                    {"model_prefix", prefix},
                                                                    {"model_type", "bpe"},
                                                                    {"vocab_size", "60"},
                                                                    {"num_threads", "1"},
                                                                    {"minloglevel", "2"}});
    if (!status.ok()) throw Error(prefix, status.ToString());
    std::ifstream in(prefix + ".model", std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
#endif

  fs::path dir_;
  std::string bpe_json_;
};

void expect_error(const std::string& path, const std::string& problem) {
  try {
    load_tokenizer(path);
    ADD_FAILURE() << "loaded " << path;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
  }
}

TEST_F(LoadTokenizer, FolderWithTokenizerJsonGivesBpe) {
  const fs::path dir = folder("llama3");
  write(dir / "tokenizer.json", bpe_json_);
  // The roles come from tokenizer_config.json beside it, not from the names.
  write(dir / "tokenizer_config.json", R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}})");
  const auto tokenizer = load_tokenizer(dir.string());
  EXPECT_EQ(tokenizer->kind(), "bpe");

  const BpeTokenizer direct = parse_tokenizer_json(bpe_json_, "direct");
  const std::string text = "the lazy fox<|end_of_text|> jumps over caf\xC3\xA9 dogs 4242";
  for (const bool allow_special : {false, true}) {
    const std::vector<int32_t> ids = tokenizer->encode(text, allow_special);
    EXPECT_EQ(ids, direct.encode(text, allow_special));
    EXPECT_EQ(tokenizer->decode(ids), text);
  }
  EXPECT_EQ(tokenizer->vocab_size(), direct.vocab_size());
  EXPECT_EQ(tokenizer->bos_id(), direct.special_id("<|begin_of_text|>"));
  EXPECT_EQ(tokenizer->eos_id(), direct.special_id("<|end_of_text|>"));
  EXPECT_THROW(direct.eos_id(), Error);  // tokenizer.json alone names no end-of-text token
  EXPECT_EQ(tokenizer->fingerprint(), direct.fingerprint());
}

TEST_F(LoadTokenizer, JsonFileIsReadByNameOrByContent) {
  const fs::path named = dir_ / "vocab.json";
  const fs::path unnamed = dir_ / "vocab.bin";
  write(named, bpe_json_);
  write(unnamed, "\n  " + bpe_json_);
  EXPECT_EQ(load_tokenizer(named.string())->kind(), "bpe");
  EXPECT_EQ(load_tokenizer(unnamed.string())->kind(), "bpe");
}

TEST_F(LoadTokenizer, MissingPathsAndEmptyFoldersAreRefusedByName) {
  expect_error((dir_ / "absent").string(), "no such file or folder");
  expect_error(folder("empty").string(), "holds neither tokenizer.model nor tokenizer.json");
  const fs::path bad = dir_ / "bad.json";
  write(bad, "{\"model\": {\"type\": \"Unigram\"}}");
  expect_error(bad.string(), bad.string());
}

#ifdef SPILLWAY_HAS_SENTENCEPIECE

TEST_F(LoadTokenizer, FolderWithTokenizerModelGivesSentencePiece) {
  const fs::path dir = folder("llama2");
  write(dir / "tokenizer.model", sentencepiece_model_bytes());
  const auto tokenizer = load_tokenizer(dir.string());
  EXPECT_EQ(tokenizer->kind(), "sentencepiece");
  const SentencePieceTokenizer direct((dir / "tokenizer.model").string());
  const std::string text = "the dog jumps over the fox 42";
  EXPECT_EQ(tokenizer->encode(text), direct.encode(text));
  EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text);
  EXPECT_EQ(tokenizer->bos_id(), 1);
  EXPECT_EQ(tokenizer->eos_id(), 2);
  EXPECT_EQ(tokenizer->vocab_size(), 60);
}

// LLaMA-2 folders ship both files; as in transformers, tokenizer.json is
// the one read (it alone holds tokens added in fine-tuning).
TEST_F(LoadTokenizer, TokenizerJsonWinsOverTokenizerModel) {
  const fs::path dir = folder("both");
  write(dir / "tokenizer.model", sentencepiece_model_bytes());
  write(dir / "tokenizer.json", bpe_json_);
  EXPECT_EQ(load_tokenizer(dir.string())->kind(), "bpe");
}

TEST_F(LoadTokenizer, ModelFileIsReadByNameOrByContent) {
  const std::string bytes = sentencepiece_model_bytes();
  const fs::path named = dir_ / "x.model";
  const fs::path unnamed = dir_ / "x.tok";
  write(named, bytes);
  write(unnamed, bytes);
  EXPECT_EQ(load_tokenizer(named.string())->kind(), "sentencepiece");
  EXPECT_EQ(load_tokenizer(unnamed.string())->kind(), "sentencepiece");
}

#else

TEST_F(LoadTokenizer, TokenizerModelSaysItNeedsSentencePiece) {
  const fs::path dir = folder("llama2");
  write(dir / "tokenizer.model", "not checked");
  expect_error(dir.string(), "built without SentencePiece");
}

#endif

}  // namespace
}  // namespace spillway
