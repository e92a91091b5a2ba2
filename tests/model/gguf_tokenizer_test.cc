// The tokenizer in a GGUF file, both ways: a tokenizer written with
// add_gguf_tokenizer and read with load_gguf_tokenizer encodes and decodes
// as before and keeps its roles, for byte-level BPE and SentencePiece.
#include "model/gguf_tokenizer.h"

#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/gguf_write.h"
#include "model/sentencepiece_tokenizer.h"
#include "testing/files.h"

#ifdef SPILLWAY_HAS_SENTENCEPIECE
#include <sentencepiece_trainer.h>
#endif

namespace spillway {
namespace {

const std::vector<std::string> kTexts = {
    "The lazy fox jumps over the dog, 1234 times.", "  caf\xC3\xA9 \xF0\x9F\x99\x82\n\nnew paragraph",
    "<|end_of_text|>between<|begin_of_text|>", "</s>x<s>", ""};

class GgufTokenizer : public testing::TempDirTest {
 protected:
  // `tok` through a GGUF file and back.
  std::unique_ptr<Tokenizer> round_trip(const Tokenizer& tok) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    add_gguf_tokenizer(w, tok);
    w.write(file("t.gguf"));
    return load_gguf_tokenizer(GgufFile(file("t.gguf")));
  }
  static void expect_same(const Tokenizer& a, const Tokenizer& b) {
    EXPECT_EQ(a.vocab_size(), b.vocab_size());
    EXPECT_EQ(a.roles().bos, b.roles().bos);
    EXPECT_EQ(a.roles().eos, b.roles().eos);
    EXPECT_EQ(a.roles().add_bos, b.roles().add_bos);
    EXPECT_EQ(a.roles().chat_template, b.roles().chat_template);
    for (const std::string& text : kTexts) {
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = a.encode(text, special);
        EXPECT_EQ(b.encode(text, special), ids) << text;
        EXPECT_EQ(b.decode(ids), a.decode(ids)) << text;
      }
    }
  }
};

TEST_F(GgufTokenizer, ByteLevelBpeRoundTrips) {
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += kTexts[0] + " " + kTexts[1] + std::to_string(i) + "\n";
  BpeTokenizer trained = train_bpe(corpus, 320, {"<|begin_of_text|>", "<|end_of_text|>"});
  TokenRoles roles = trained.roles();
  roles.chat_template = "{{ messages }}";
  trained.set_roles(roles);
  const std::unique_ptr<Tokenizer> back = round_trip(trained);
  EXPECT_EQ(back->kind(), "bpe");
  expect_same(trained, *back);
}

TEST_F(GgufTokenizer, AnUnnamedPreTokenizerHasNoGgufForm) {
  BpeVocab v;
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(1, static_cast<char>(b));
  v.pattern = "\\w+";
  try {
    round_trip(BpeTokenizer(v));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("llama.cpp has no name for"), std::string::npos) << e.what();
  }
}

#ifdef SPILLWAY_HAS_SENTENCEPIECE
TEST_F(GgufTokenizer, SentencePieceRoundTripsThroughItsPiecesScoresAndTypes) {
  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += kTexts[0] + " " + kTexts[1] + " word" + std::to_string(i % 17) + "\n";
  std::ofstream(file("corpus.txt")) << corpus;
  const std::string prefix = file("spm");
  const auto status = sentencepiece::SentencePieceTrainer::Train(
      {{"input", file("corpus.txt")}, {"model_prefix", prefix}, {"model_type", "bpe"},
       {"vocab_size", "400"}, {"byte_fallback", "true"}, {"num_threads", "1"}, {"minloglevel", "2"},
       // LLaMA's settings, which a GGUF's "llama" tokenizer implies.
       {"normalization_rule_name", "identity"}, {"remove_extra_whitespaces", "false"}, {"add_dummy_prefix", "true"}});
  ASSERT_TRUE(status.ok()) << status.ToString();
  const SentencePieceTokenizer original(prefix + ".model");
  const std::unique_ptr<Tokenizer> back = round_trip(original);
  EXPECT_EQ(back->kind(), "sentencepiece");
  expect_same(original, *back);
  // Byte fallback survives: a character the pieces lack still round-trips.
  EXPECT_EQ(back->decode(back->encode("\xE6\x97\xA5")), "\xE6\x97\xA5");
}
#endif

// A gpt2 tokenizer's tokens are byte-level symbols, always UTF-8; other
// bytes once escaped as a JSON library exception (a fuzzer finding).
TEST_F(GgufTokenizer, TokensThatAreNotUtf8AreNamed) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_strings("tokenizer.ggml.tokens", {"a", "b", "\xc0", "ab"});
  w.add_strings("tokenizer.ggml.merges", {"a b"});
  const std::string path = file("bad.gguf");
  w.write(path);
  try {
    load_gguf_tokenizer(GgufFile(path));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": metadata 'tokenizer.ggml.tokens' entry 2 is not valid UTF-8");
  }
}

TEST_F(GgufTokenizer, AFileWithoutATokenizerIsNamed) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  const std::string path = file("none.gguf");
  w.write(path);
  try {
    load_gguf_tokenizer(GgufFile(path));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": carries no tokenizer", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace spillway
