// A conversation as ids: the format is told by the tokenizer's chat
// template, its special tokens become their ids, and the format's
// end-of-turn token joins the stops.
#include "infer/chat_prompt.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/tokenizer_files.h"

namespace spillway::infer {
namespace {

BpeTokenizer tokenizer_with(const std::string& chat_template) {
  BpeTokenizer tok = train_bpe("the cat sees the moon. a dog likes her song.", 300,
                               {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                "<|eot_id|>", "<|im_start|>", "<|im_end|>"});
  TokenRoles roles = tok.roles();
  roles.chat_template = chat_template;
  tok.set_roles(roles);
  return tok;
}

bool has(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

TEST(ChatPrompt, Llama3TemplateGivesItsSpecialTokensAndStopsAtEndOfTurn) {
  const BpeTokenizer tok = tokenizer_with("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}");
  const std::vector<ChatMessage> messages = {{"user", "the cat"}};
  const ChatPrompt p = chat_prompt(tok, messages);
  EXPECT_EQ(p.ids, tok.encode(format_llama3_chat(messages), true));
  EXPECT_EQ(p.ids.front(), *tok.token_id("<|begin_of_text|>"));
  EXPECT_TRUE(has(p.ids, *tok.token_id("<|start_header_id|>")));
  EXPECT_TRUE(has(p.stops, *tok.token_id("<|eot_id|>")));
  EXPECT_TRUE(has(p.stops, tok.eos_id()));
}

TEST(ChatPrompt, ChatMlAndPlainTemplates) {
  const BpeTokenizer chatml = tokenizer_with("{{'<|im_start|>' + message['role'] + '\\n'}}");
  const std::vector<ChatMessage> messages = {{"user", "a dog"}};
  const ChatPrompt c = chat_prompt(chatml, messages);
  EXPECT_EQ(c.ids, chatml.encode_text(format_chatml(messages), true));
  EXPECT_TRUE(has(c.stops, *chatml.token_id("<|im_end|>")));
  const BpeTokenizer plain = tokenizer_with(kPlainChatTemplate);
  const ChatPrompt p = chat_prompt(plain, messages);
  EXPECT_EQ(p.ids, plain.encode_text("a dog<|end_of_text|>", true));
  EXPECT_EQ(p.ids.back(), plain.eos_id());
}

TEST(ChatPrompt, RefusesAMissingOrUnknownTemplate) {
  const std::vector<ChatMessage> messages = {{"user", "hi"}};
  try {
    chat_prompt(tokenizer_with(""), messages);
    FAIL() << "formatted without a template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  try {
    chat_prompt(tokenizer_with("{{ '<start_of_turn>' }}"), messages);
    FAIL() << "formatted an unknown template";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is none spillway renders"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spillway::infer
