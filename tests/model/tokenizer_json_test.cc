#include "model/tokenizer_json.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/byte_level.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TokenizerJson : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "spillway-tokjson-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  // Expects loading `text` to fail with the file's name and `problem` in
  // the message.
  void expect_refused(const std::string& text, const std::string& problem) {
    const std::string path = write("bad.json", text);
    try {
      load_tokenizer_json(path);
      ADD_FAILURE() << "loaded: " << text.substr(0, 200);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }

  fs::path dir_;
};

const std::string& sample_text() {
  static const std::string text =
      "The quick brown fox jumps over the lazy dog. It's 2024; numbers 1234567 and "
      "caf\xC3\xA9s, \xE6\x97\xA5\xE6\x9C\xAC, \xF0\x9F\x99\x82\xF0\x9F\x99\x82.\n\n   indented\tline\r\n"
      "The dog sleeps. The fox runs. Over and over the fox jumps the dog.";
  return text;
}

BpeTokenizer small_trained() {
  std::string corpus;
  for (int i = 0; i < 20; ++i) corpus += sample_text() + " " + std::to_string(i * 7919) + "\n";
  return train_bpe(corpus, 420, {"<|begin_of_text|>", "<|end_of_text|>"});
}

// A minimal tokenizer.json in Hugging Face's layout: bytes in byte order,
// then the given merges, then <|end_of_text|>.
json minimal_json(const std::vector<std::pair<std::string, std::string>>& merges, bool merges_as_strings) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::to_symbols(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  for (const auto& [l, r] : merges) {
    const std::string ls = byte_level::to_symbols(l), rs = byte_level::to_symbols(r);
    if (!vocab.contains(ls + rs)) vocab[ls + rs] = static_cast<int>(vocab.size());
    if (merges_as_strings) {
      merge_list.push_back(ls + " " + rs);
    } else {
      merge_list.push_back({ls, rs});
    }
  }
  const int eos = static_cast<int>(vocab.size());
  return {{"version", "1.0"},
          {"added_tokens",
           {{{"id", eos},
             {"content", "<|end_of_text|>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", std::string(kLlama3Pattern)}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", true},
               {"use_regex", false}}}}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

TEST_F(TokenizerJson, SaveThenLoadEncodesIdentically) {
  const BpeTokenizer trained = small_trained();
  const std::string path = (dir_ / "tokenizer.json").string();
  save_tokenizer_json(trained, path);
  const BpeTokenizer loaded = load_tokenizer_json(path);
  EXPECT_EQ(loaded.fingerprint(), trained.fingerprint());
  EXPECT_EQ(loaded.vocab().tokens, trained.vocab().tokens);
  EXPECT_EQ(loaded.vocab().merges, trained.vocab().merges);
  EXPECT_EQ(loaded.special_id("<|end_of_text|>"), trained.eos_id());
  for (bool special : {false, true}) {
    const std::string text = sample_text() + "<|end_of_text|>" + sample_text();
    EXPECT_EQ(loaded.encode(text, special), trained.encode(text, special));
  }
  // Nothing but the file itself is left in the folder.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(TokenizerJson, WritesHuggingFaceLayout) {
  const BpeTokenizer trained = small_trained();
  const json j = json::parse(tokenizer_json_text(trained));
  EXPECT_EQ(j["model"]["type"], "BPE");
  EXPECT_EQ(j["model"]["vocab"]["\u0120"], trained.encode(" ")[0]);  // Ġ is the space byte
  EXPECT_EQ(j["model"]["vocab"].size() + j["added_tokens"].size(), static_cast<size_t>(trained.vocab_size()));
  EXPECT_EQ(j["model"]["merges"].size(), trained.vocab().merges.size());
  EXPECT_TRUE(j["model"]["merges"][0].is_array());
  EXPECT_EQ(j["added_tokens"][1]["content"], "<|end_of_text|>");
  EXPECT_EQ(j["added_tokens"][1]["id"], trained.eos_id());
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], std::string(kLlama3Pattern));
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
}

TEST_F(TokenizerJson, StringAndPairMergesLoadAlike) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {" ", "the"}, {"o", "g"}};
  const BpeTokenizer pairs = load_tokenizer_json(write("pairs.json", minimal_json(merges, false).dump()));
  const BpeTokenizer strings = load_tokenizer_json(write("strings.json", minimal_json(merges, true).dump()));
  EXPECT_EQ(pairs.fingerprint(), strings.fingerprint());
  const std::vector<int32_t> ids = strings.encode("the dog the");
  EXPECT_EQ(ids, pairs.encode("the dog the"));
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 32, 100, 259, 258}));  // "the", " ", "d", "og", " the"
  EXPECT_EQ(strings.special_id("<|end_of_text|>"), 260);
}

TEST_F(TokenizerJson, AcceptsGpt2Layout) {
  // GPT-2: a bare ByteLevel pre-tokenizer with its own regex, and the special
  // token listed in model.vocab as well as in added_tokens.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"1", "2"}, {"12", "3"}, {"123", "4"}, {"1234", "5"}};
  json j = minimal_json(merges, true);
  const BpeTokenizer llama3 = load_tokenizer_json(write("llama3.json", j.dump()));
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"]["vocab"]["<|end_of_text|>"] = 260;
  const BpeTokenizer gpt2 = load_tokenizer_json(write("gpt2.json", j.dump()));
  EXPECT_EQ(gpt2.vocab().pattern, kGpt2Pattern);
  EXPECT_EQ(gpt2.special_id("<|end_of_text|>"), 260);
  // GPT-2 keeps a digit run whole; LLaMA-3 cuts it into threes.
  EXPECT_EQ(gpt2.encode("12345"), (std::vector<int32_t>{259}));
  EXPECT_EQ(llama3.encode("12345"), (std::vector<int32_t>{257, '4', '5'}));
}

TEST_F(TokenizerJson, ReadsIgnoreMerges) {
  json j = minimal_json({{"a", "b"}}, false);
  j["model"]["ignore_merges"] = true;
  EXPECT_TRUE(load_tokenizer_json(write("ignore.json", j.dump())).vocab().ignore_merges);
}

TEST_F(TokenizerJson, RefusesMalformedFilesNamingThem) {
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}};
  expect_refused("{\"model\": ", "not valid JSON");
  expect_refused("[1, 2]", "not a JSON object");
  expect_refused("{}", "missing field model");

  json j = minimal_json(merges, false);
  j["model"].erase("merges");
  expect_refused(j.dump(), "missing field model.merges");

  j = minimal_json(merges, false);
  j["model"].erase("vocab");
  expect_refused(j.dump(), "missing field model.vocab");

  j = minimal_json(merges, false);
  j["model"]["type"] = "WordPiece";
  expect_refused(j.dump(), "model.type is \"WordPiece\"");

  j = minimal_json(merges, false);
  j["model"]["merges"].push_back({"x", "nope"});
  expect_refused(j.dump(), "model.merges[1] names \"nope\"");

  j = minimal_json(merges, false);
  j["model"]["merges"].push_back("a b c");
  expect_refused(j.dump(), "not two tokens");

  j = minimal_json(merges, false);
  j["model"]["vocab"]["zz"] = 300;  // ids 258..299 missing
  expect_refused(j.dump(), "no token has id");

  j = minimal_json(merges, false);
  j["model"]["vocab"]["zz"] = "seven";
  expect_refused(j.dump(), "not a non-negative integer");

  // What Hugging Face runs but spillway would not run the same is refused.
  j = minimal_json(merges, false);
  j["normalizer"] = {{"type", "BertNormalizer"}};
  expect_refused(j.dump(), "normalizer.type is \"BertNormalizer\"");

  j = minimal_json(merges, false);
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(j.dump(), "pre_tokenizer.type is \"Whitespace\"");

  j = minimal_json(merges, false);
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j.dump(), "decoder.type is \"WordPiece\"");
}

// Tokenizers that earlier versions loaded and then ran wrongly, each refused
// with the exact line.
TEST_F(TokenizerJson, InconsistentTokenizersGiveExactLines) {
  const auto line_of = [&](const json& j) -> std::string {
    const std::string path = write("bad.json", j.dump());
    try {
      load_tokenizer_json(path);
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << what;
      return what.substr(path.size() + 2);
    }
    return "no error";
  };
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}, {"ab", "c"}};

  // Two added tokens whose ids are swapped against model.vocab's.
  json j = minimal_json(merges, false);
  const int eos = j["added_tokens"][0]["id"];
  j["model"]["vocab"]["<|end_of_text|>"] = eos + 1;
  j["model"]["vocab"]["<|begin_of_text|>"] = eos;
  j["added_tokens"].push_back({{"id", eos + 1}, {"content", "<|begin_of_text|>"}, {"special", true}});
  EXPECT_EQ(line_of(j), "model.vocab gives id " + std::to_string(eos) +
                            " to \"<|begin_of_text|>\" but added_tokens gives it to \"<|end_of_text|>\"");

  j = minimal_json(merges, false);
  j["model"]["merges"] = json::array();
  EXPECT_EQ(line_of(j), "model.merges is empty but model.vocab holds \"ab\", which only merges make (a tokenizer "
                        "without its merges?)");
  j["model"]["ignore_merges"] = true;  // then whole-word lookups reach it
  EXPECT_EQ(line_of(j), "no error");

  // A merge whose result is not in the vocabulary cannot be applied.
  j = minimal_json(merges, false);
  const int abc = j["model"]["vocab"]["abc"];
  j["model"]["vocab"].erase("abc");
  j["model"]["vocab"]["zzz"] = abc;
  EXPECT_EQ(line_of(j), "merge 1 makes \"abc\", which is no token");

  j = minimal_json(merges, false);
  j["added_tokens"].push_back({{"id", eos + 1}, {"content", "<|end_of_text|>"}, {"special", true}});
  EXPECT_EQ(line_of(j), "added token \"<|end_of_text|>\" is listed twice, with ids " + std::to_string(eos) +
                            " and " + std::to_string(eos + 1));

  j = minimal_json(merges, false);
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<|end_of_text|>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", {{"<|end_of_text|>", {{"ids", {"one"}}}}}}};
  EXPECT_EQ(line_of(j), "post_processor.special_tokens.<|end_of_text|>.ids has id \"one\", not a non-negative "
                        "integer");
  j["post_processor"]["single"][0]["SpecialToken"]["id"] = 7;
  EXPECT_EQ(line_of(j), "post_processor.single[].SpecialToken.id is not a string");
}

// Pipeline fields of the wrong JSON type were library exceptions (a fuzzer
// finding); each is now refused naming the field.
TEST_F(TokenizerJson, PipelineFieldsOfTheWrongTypeAreNamed) {
  const std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"}};
  json j = minimal_json(merges, false);
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = 4;
  expect_refused(j.dump(), "use_regex is 4, not true or false");

  j = minimal_json(merges, false);
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", 3}};
  expect_refused(j.dump(), "behavior is 3, not a string");

  j = minimal_json(merges, false);
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}};
  expect_refused(j.dump(), "start is -1, not a count of characters (0 to 1024)");

  j = minimal_json(merges, false);
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", 5}};
  expect_refused(j.dump(), "replacement is 5, not a string");
}

TEST_F(TokenizerJson, FifoIsRefusedWithoutHanging) {
  const std::string path = (dir_ / "tokenizer.json").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    load_tokenizer_json(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": is a FIFO, not a tokenizer.json");
  }
}

TEST_F(TokenizerJson, MissingFileIsNamed) {
  const std::string path = (dir_ / "absent.json").string();
  try {
    load_tokenizer_json(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": cannot open", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace spillway
