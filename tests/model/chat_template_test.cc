#include "model/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/tokenizer_files.h"

namespace spillway {
namespace {

void expect_chat_error(const std::string& problem, auto format) {
  try {
    format();
    ADD_FAILURE() << "formatted; expected: " << problem;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("chat: ", 0), 0u) << what;
    EXPECT_NE(what.find(problem), std::string::npos) << what;
  }
}

TEST(Llama3Chat, SystemUserAndGenerationPrompt) {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
  EXPECT_EQ(format_llama3_chat(messages),
            "<|begin_of_text|>"
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(Llama3Chat, MultiTurnTrimsContentAndCanEndWithoutPrompt) {
  const std::vector<ChatMessage> messages = {
      {"user", "  hi\n"}, {"assistant", "\tHello! How can I help?\n\n"}, {"user", "Tell me\n a joke. "}};
  EXPECT_EQ(format_llama3_chat(messages, /*add_generation_prompt=*/false),
            "<|begin_of_text|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello! How can I help?<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nTell me\n a joke.<|eot_id|>");
  const std::vector<ChatMessage> blank = {{"user", " \n "}};
  EXPECT_EQ(format_llama3_chat(blank, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>");
}

TEST(Llama3Chat, RefusesNoMessagesAndBadRoles) {
  expect_chat_error("no messages", [] { format_llama3_chat({}); });
  expect_chat_error("message 1 has role ''", [] {
    const std::vector<ChatMessage> messages = {{"user", "a"}, {"", "b"}};
    format_llama3_chat(messages);
  });
  expect_chat_error("message 0 has role 'user<|eot_id|>'", [] {
    const std::vector<ChatMessage> messages = {{"user<|eot_id|>", "a"}};
    format_llama3_chat(messages);
  });
}

// With a vocabulary that holds LLaMA-3's special tokens, the formatted text
// encodes to those ids at the turn boundaries and decodes back unchanged.
TEST(Llama3Chat, EncodesSpecialTokensToTheirIds) {
  const std::vector<std::string> specials = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                             "<|end_header_id|>", "<|eot_id|>"};
  const BpeTokenizer tokenizer = train_bpe(
      "system user assistant the quick brown fox jumps over the lazy dog again and again", 300, specials);
  const std::vector<ChatMessage> messages = {{"system", "be quick"}, {"user", "the fox?"}};
  const std::string text = format_llama3_chat(messages);
  const std::vector<int32_t> ids = tokenizer.encode(text, /*allow_special=*/true);
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(ids.front(), tokenizer.bos_id());
  const auto count = [&](const std::string& special) {
    return std::count(ids.begin(), ids.end(), *tokenizer.special_id(special));
  };
  EXPECT_EQ(count("<|start_header_id|>"), 3);
  EXPECT_EQ(count("<|end_header_id|>"), 3);
  EXPECT_EQ(count("<|eot_id|>"), 2);
  EXPECT_EQ(count("<|begin_of_text|>"), 1);
}

TEST(Llama2Chat, SystemMessageGoesInsideTheFirstUserTurn) {
  const std::vector<ChatMessage> messages = {{"system", "You are terse."}, {"user", "Name a colour. "}};
  EXPECT_EQ(format_llama2_chat(messages),
            "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nName a colour. [/INST]");
}

TEST(Llama2Chat, MultiTurnClosesEachReplyWithEos) {
  const std::vector<ChatMessage> messages = {{"system", "Be kind."},
                                             {"user", "Hi"},
                                             {"assistant", " Hello there. "},
                                             {"user", "\nHow are you?"},
                                             {"assistant", "Fine."},
                                             {"user", "Good"}};
  EXPECT_EQ(format_llama2_chat(messages),
            "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST] Hello there. </s>"
            "<s>[INST] How are you? [/INST] Fine. </s>"
            "<s>[INST] Good [/INST]");
}

TEST(Llama2Chat, WithoutSystemMessage) {
  const std::vector<ChatMessage> messages = {{"user", "  a b  "}, {"assistant", "c"}};
  EXPECT_EQ(format_llama2_chat(messages), "<s>[INST] a b [/INST] c </s>");
}

TEST(Llama2Chat, RefusesRolesOutOfOrder) {
  expect_chat_error("no messages", [] { format_llama2_chat({}); });
  expect_chat_error("needs a user message", [] {
    const std::vector<ChatMessage> messages = {{"system", "s"}};
    format_llama2_chat(messages);
  });
  expect_chat_error("message 0 has role 'assistant' where 'user' was expected", [] {
    const std::vector<ChatMessage> messages = {{"assistant", "a"}};
    format_llama2_chat(messages);
  });
  expect_chat_error("message 2 has role 'user' where 'assistant' was expected", [] {
    const std::vector<ChatMessage> messages = {{"system", "s"}, {"user", "a"}, {"user", "b"}};
    format_llama2_chat(messages);
  });
  expect_chat_error("message 1 has role 'system' where 'assistant' was expected", [] {
    const std::vector<ChatMessage> messages = {{"user", "a"}, {"system", "b"}};
    format_llama2_chat(messages);
  });
}

TEST(ChatMl, MessagesAndGenerationPrompt) {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", " Hi\n"}};
  EXPECT_EQ(format_chatml(messages),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(format_chatml(messages, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi\n<|im_end|>\n");
  expect_chat_error("no messages", [] { format_chatml({}); });
  expect_chat_error("message 0 has role 'a\nb'", [] {
    const std::vector<ChatMessage> messages = {{"a\nb", "x"}};
    format_chatml(messages);
  });
}

TEST(PlainChat, EachContentThenTheEndOfText) {
  const std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "there"}};
  EXPECT_EQ(format_plain_chat(messages, "</s>"), "Hi</s>there</s>");
}

TEST(ChatFormatOf, TellsTheFormatByItsMarkers) {
  EXPECT_EQ(chat_format_of(kPlainChatTemplate), ChatFormat::plain);
  EXPECT_EQ(chat_format_of("{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"), ChatFormat::llama3);
  EXPECT_EQ(chat_format_of("{{'<|im_start|>' + message['role'] + '\n'}}"), ChatFormat::chatml);
  EXPECT_EQ(chat_format_of("{{ bos_token + '[INST] ' + content + ' [/INST]' }}"), ChatFormat::llama2);
  EXPECT_EQ(chat_format_of("{% for m in messages %}<start_of_turn>{{ m.role }}{% endfor %}"), std::nullopt);
  EXPECT_EQ(chat_format_of(""), std::nullopt);
}

}  // namespace
}  // namespace spillway
