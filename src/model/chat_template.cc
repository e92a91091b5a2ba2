#include "model/chat_template.h"

#include <string_view>

#include "base/status.h"
#include "model/tokenizer_files.h"

namespace spillway {

std::string_view trim(std::string_view text) {
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const size_t last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

namespace {

}  // namespace

std::string format_llama3_chat(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  SPW_CHECK(!messages.empty(), "chat", "no messages to format");
  std::string out = "<|begin_of_text|>";
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    SPW_CHECK(!role.empty() && role.find_first_of("<\n") == std::string::npos, "chat", "message ", i,
              " has role '", role, "', which is empty or holds '<' or a newline");
    out += "<|start_header_id|>";
    out += role;
    out += "<|end_header_id|>\n\n";
    out += trim(messages[i].content);
    out += "<|eot_id|>";
  }
  if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string format_llama2_chat(std::span<const ChatMessage> messages) {
  SPW_CHECK(!messages.empty(), "chat", "no messages to format");
  size_t first_turn = 0;
  std::string system;
  bool has_system = false;
  if (messages[0].role == "system") {
    has_system = true;
    system = messages[0].content;
    first_turn = 1;
  }
  SPW_CHECK(first_turn < messages.size(), "chat", "a system message needs a user message after it");
  std::string out;
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const bool user_turn = (i - first_turn) % 2 == 0;
    const std::string_view expected = user_turn ? "user" : "assistant";
    SPW_CHECK(messages[i].role == expected, "chat", "message ", i, " has role '", messages[i].role, "' where '",
              expected, "' was expected (LLaMA-2 alternates user and assistant after an optional system message)");
    if (user_turn) {
      std::string content = messages[i].content;
      if (i == first_turn && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      out += "<s>[INST] ";
      out += trim(content);
      out += " [/INST]";
    } else {
      out += " ";
      out += trim(messages[i].content);
      out += " </s>";
    }
  }
  return out;
}

std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  SPW_CHECK(!messages.empty(), "chat", "no messages to format");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    SPW_CHECK(!role.empty() && role.find_first_of("<\n") == std::string::npos, "chat", "message ", i,
              " has role '", role, "', which is empty or holds '<' or a newline");
    out += "<|im_start|>" + role + "\n" + messages[i].content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string format_plain_chat(std::span<const ChatMessage> messages, std::string_view eos_text) {
  SPW_CHECK(!messages.empty(), "chat", "no messages to format");
  std::string out;
  for (const ChatMessage& m : messages) {
    out += m.content;
    out += eos_text;
  }
  return out;
}

std::optional<ChatFormat> chat_format_of(std::string_view jinja) {
  if (jinja == kPlainChatTemplate) return ChatFormat::plain;
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) return ChatFormat::llama3;
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatFormat::chatml;
  if (jinja.find("[INST]") != std::string_view::npos) return ChatFormat::llama2;
  return std::nullopt;
}

}  // namespace spillway
