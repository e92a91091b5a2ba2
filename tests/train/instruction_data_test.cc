#include "train/instruction_data.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "testing/files.h"

namespace spillway::train {
namespace {

const std::string kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}";

BpeTokenizer chatml_tokenizer() {
  BpeTokenizer t = train_bpe("user assistant system the quick brown fox jumps over the lazy dog again and again", 300,
                             {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"});
  TokenRoles roles = t.roles();
  roles.chat_template = kChatMl;
  t.set_roles(roles);
  return t;
}

class InstructionDataTest : public testing::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = file(name);
    std::ofstream(path) << text;
    return path;
  }
  // The error's thing and problem for a file holding `text`.
  Error error_of(const std::string& text) {
    const std::string path = write("bad.jsonl", text);
    try {
      read_instruction_files({path}, chatml_tokenizer());
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << text;
    return Error("", "");
  }
};

TEST_F(InstructionDataTest, ReadsMessagesAndAlpacaRecords) {
  const BpeTokenizer t = chatml_tokenizer();
  const std::string path = write(
      "chat.jsonl",
      "{\"messages\": [{\"role\": \"user\", \"content\": \"the fox\"}, {\"role\": \"assistant\", \"content\": "
      "\"jumps\"}]}\n"
      "\n"
      "{\"instruction\": \"the dog\", \"input\": \"again\", \"output\": \"lazy\", \"id\": 7}\n"
      "{\"instruction\": \"quick\", \"output\": \"brown\"}\n");
  const std::vector<InstructionExample> examples = read_instruction_files({path}, t);
  ASSERT_EQ(examples.size(), 3u);
  const std::vector<std::string> prompts = {"the fox", "the dog\n\nagain", "quick"};
  const std::vector<std::string> replies = {"jumps", "lazy", "brown"};
  for (size_t i = 0; i < examples.size(); ++i) {
    const InstructionExample& e = examples[i];
    ASSERT_EQ(e.ids.size(), e.trained.size());
    std::vector<int32_t> trained, all = e.ids;
    for (size_t k = 0; k < e.ids.size(); ++k) {
      if (e.trained[k]) trained.push_back(e.ids[k]);
    }
    EXPECT_EQ(t.decode(trained), replies[i] + "<|im_end|>") << i;
    EXPECT_EQ(t.decode(all), "<|im_start|>user\n" + prompts[i] + "<|im_end|>\n<|im_start|>assistant\n" + replies[i] +
                                 "<|im_end|>\n")
        << i;
  }
}

TEST_F(InstructionDataTest, MalformedRecordsNameTheFileAndLine) {
  struct Bad {
    std::string text, problem;
  };
  const std::vector<Bad> bad = {
      {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"ok\"}]}\n{\"messages\": [", "not valid JSON"},
      {"\n\n[1, 2]\n", "not a record"},
      {"{\"prompt\": \"x\"}\n", "neither \"messages\" nor \"instruction\""},
      {"{\"instruction\": \"x\"}\n", "no \"output\""},
      {"{\"instruction\": 3, \"output\": \"y\"}\n", "\"instruction\" is number"},
      {"{\"messages\": []}\n", "not a list of messages"},
      {"{\"messages\": [\"hi\"]}\n", "message 0"},
      {"{\"messages\": [{\"role\": \"user\"}]}\n", "no \"content\""},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", "no assistant reply"},
  };
  const std::vector<int> lines = {2, 3, 1, 1, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < bad.size(); ++i) {
    const Error e = error_of(bad[i].text);
    EXPECT_EQ(e.thing().rfind(file("bad.jsonl") + ":" + std::to_string(lines[i]), 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad[i].problem), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST_F(InstructionDataTest, AutomaticFormatGoesByExtensionAndKeys) {
  const std::string chat = write("a.jsonl", "\n{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}\n");
  const std::string alpaca = write("b.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n");
  const std::string text_lines = write("c.jsonl", "{\"text\": \"plain text\"}\n");
  const std::string text = write("d.txt", "{\"instruction\": \"a\", \"output\": \"b\"}\n");
  EXPECT_TRUE(is_instruction_file(chat));
  EXPECT_TRUE(is_instruction_file(alpaca));
  EXPECT_FALSE(is_instruction_file(text_lines));
  EXPECT_FALSE(is_instruction_file(text));
  DataConfig d;
  d.paths = {chat, alpaca};
  EXPECT_TRUE(uses_instruction_data(d));
  d.paths = {chat, text_lines};
  EXPECT_FALSE(uses_instruction_data(d));
  d.format = DataFormat::instruction;
  EXPECT_THROW(uses_instruction_data(d), Error);
  d.format = DataFormat::text;
  d.paths = {chat};
  EXPECT_FALSE(uses_instruction_data(d));
  d.format = DataFormat::automatic;
  d.paths = {};
  EXPECT_FALSE(uses_instruction_data(d));
}

TEST_F(InstructionDataTest, HoldsWholeRecordsOutForValidation) {
  std::string text;
  for (int i = 0; i < 20; ++i) {
    text += "{\"instruction\": \"the fox " + std::to_string(i) + "\", \"output\": \"jumps\"}\n";
  }
  DataConfig d;
  d.paths = {write("many.jsonl", text)};
  d.validation_fraction = 0.2;
  const InstructionSet set = prepare_instruction_set(d, chatml_tokenizer());
  EXPECT_EQ(set.train.size(), 16u);
  EXPECT_EQ(set.validation.size(), 4u);
  EXPECT_GT(set.vocab_needed, 0);
  const InstructionSet again = prepare_instruction_set(d, chatml_tokenizer());
  for (size_t i = 0; i < set.validation.size(); ++i) EXPECT_EQ(again.validation[i].ids, set.validation[i].ids);
  d.paths = {write("one.jsonl", "{\"instruction\": \"a\", \"output\": \"b\"}\n")};
  EXPECT_THROW(prepare_instruction_set(d, chatml_tokenizer()), Error);
  d.validation_fraction = 0;
  EXPECT_EQ(prepare_instruction_set(d, chatml_tokenizer()).train.size(), 1u);
}

}  // namespace
}  // namespace spillway::train
