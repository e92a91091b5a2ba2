// The files that give a tokenizer's tokens their roles: tokenizer_config.json
// over generation_config.json over config.json over the tokenizer itself,
// every EOS a stop; and what a checkpoint's tokenizer files hold.
#include "model/tokenizer_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/bpe_train.h"
#include "testing/files.h"

namespace spillway {
namespace {

class TokenizerFiles : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::string corpus;
    for (int i = 0; i < 100; ++i) corpus += "the cat sat on the mat " + std::to_string(i) + "\n";
    tok_ = std::make_unique<BpeTokenizer>(
        train_bpe(corpus, 300, {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<pad>"}));
  }
  void write(const std::string& name, const std::string& text) { std::ofstream(file(name)) << text; }
  int32_t id(const char* name) const { return *tok_->special_id(name); }

  std::unique_ptr<BpeTokenizer> tok_;
};

TEST_F(TokenizerFiles, EarlierFilesWinAndEveryEosStops) {
  write("config.json", R"({"bos_token_id": 0, "eos_token_id": 1})");
  TokenRoles r = read_roles(dir_, *tok_);
  EXPECT_EQ(r.bos, 0);
  EXPECT_EQ(r.eos, 1);

  write("generation_config.json", "{\"eos_token_id\": [" + std::to_string(id("<|end_of_text|>")) + ", " +
                                      std::to_string(id("<|eot_id|>")) + "]}");
  write("tokenizer_config.json", R"({"eos_token": {"content": "<|eot_id|>"}, "pad_token": "<pad>",
                                     "add_bos_token": true, "chat_template": "{{ x }}"})");
  r = read_roles(dir_, *tok_);
  EXPECT_EQ(r.eos, id("<|eot_id|>"));
  EXPECT_EQ(r.pad, id("<pad>"));
  EXPECT_EQ(r.bos, 0);  // config.json's, as nothing earlier names one
  EXPECT_TRUE(r.add_bos);
  EXPECT_EQ(r.chat_template, "{{ x }}");
  for (const char* stop : {"<|end_of_text|>", "<|eot_id|>"}) {
    EXPECT_NE(std::find(r.stops.begin(), r.stops.end(), id(stop)), r.stops.end()) << stop;
  }
}

TEST_F(TokenizerFiles, ANameTheVocabularyLacksIsAnErrorNamingTheFile) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  try {
    read_roles(dir_, *tok_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              file("tokenizer_config.json") +
                  ": eos_token is \"</s>\", which the tokenizer's vocabulary lacks");
  }
}

// Ids past int32 (once truncated to a small valid id), templates of the
// wrong JSON type (once a library exception), and a FIFO in place of a file.
TEST_F(TokenizerFiles, HostileRoleFilesGiveExactLines) {
  const auto error_of = [&] () -> std::string {
    try {
      read_roles(dir_, *tok_);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  write("config.json", R"({"eos_token_id": 4294967297})");
  EXPECT_EQ(error_of(), file("config.json") + ": eos_token_id is 4294967297, not a token id or a list of them");
  write("config.json", R"({"bos_token_id": [1, -3]})");
  EXPECT_EQ(error_of(), file("config.json") + ": bos_token_id is [1,-3], not a token id or a list of them");
  std::filesystem::remove(file("config.json"));

  write("tokenizer_config.json", R"({"chat_template": [{"name": 7, "template": "x"}, {"name": "default",
                                     "template": 3}]})");
  EXPECT_EQ(read_roles(dir_, *tok_).chat_template, "");  // no usable default template, as with none at all

  std::filesystem::remove(file("tokenizer_config.json"));
  ASSERT_EQ(::mkfifo(file("tokenizer_config.json").c_str(), 0600), 0);
  EXPECT_EQ(error_of(), file("tokenizer_config.json") + ": is a FIFO, not a JSON file");
}

TEST_F(TokenizerFiles, SavedFilesLoadBackWithTheirRolesAndAChatTemplate) {
  save_tokenizer_files(*tok_, file("out"));
  const nlohmann::json config = nlohmann::json::parse(std::ifstream(file("out/tokenizer_config.json")));
  EXPECT_EQ(config.at("eos_token"), "<|end_of_text|>");
  EXPECT_EQ(config.at("bos_token"), "<|begin_of_text|>");
  EXPECT_EQ(config.at("tokenizer_class"), "PreTrainedTokenizerFast");
  EXPECT_EQ(config.at("chat_template"), kPlainChatTemplate);
  EXPECT_TRUE(config.at("added_tokens_decoder").contains(std::to_string(id("<|eot_id|>"))));
  const std::unique_ptr<Tokenizer> back = load_tokenizer(file("out"));
  EXPECT_EQ(back->eos_id(), tok_->eos_id());
  EXPECT_EQ(back->bos_id(), tok_->bos_id());
  EXPECT_EQ(back->fingerprint(), tok_->fingerprint());
  // A tokenizer_config.json that was read is written back as it was.
  std::ofstream(file("out/tokenizer_config.json")) << R"({"eos_token": "<|eot_id|>", "custom": 1})";
  const std::unique_ptr<Tokenizer> custom = load_tokenizer(file("out"));
  save_tokenizer_files(*custom, file("again"));
  std::ifstream in(file("again/tokenizer_config.json"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), R"({"eos_token": "<|eot_id|>", "custom": 1})");
}

}  // namespace
}  // namespace spillway
