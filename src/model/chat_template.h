// Chat prompts as the instruction-tuned LLaMA models were trained on them,
// written as text whose special tokens become ids when the text is encoded
// with allow_special (tokenizer.h). Both follow the chat_template of the
// Hugging Face checkpoints (and Meta's reference code), whitespace included.
//
// Special token text inside a message's content is not escaped: encoded with
// allow_special it becomes a special token, as it does in Hugging Face.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace spillway {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// LLaMA-3 Instruct:
//   <|begin_of_text|> then per message
//   <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
// and, with add_generation_prompt, an assistant header with its "\n\n" for
// the model to continue. Any non-empty role without '<' or '\n' is accepted
// (LLaMA-3.1 adds "ipython"). Error("chat", ...) on no messages.
std::string format_llama3_chat(std::span<const ChatMessage> messages, bool add_generation_prompt = true);

// LLaMA-2 chat: an optional leading system message, then user and assistant
// strictly alternating, starting with user. Each user turn opens a sequence:
//   <s>[INST] {user, trimmed} [/INST]
// and each assistant reply closes it:  " {reply, trimmed} </s>". The system
// message goes inside the first user turn as
//   <<SYS>>\n{system}\n<</SYS>>\n\n{user}
// (trimmed as a whole). Ending on a user turn leaves the model to reply.
// Error("chat", ...) naming the message when the roles break the pattern.
std::string format_llama2_chat(std::span<const ChatMessage> messages);

// ChatML (SmolLM2, Qwen): per message
//   <|im_start|>{role}\n{content}<|im_end|>\n
// and, with add_generation_prompt, "<|im_start|>assistant\n". Content is not
// trimmed. SmolLM2's template also puts in a default system message when
// there is none; this does not. Error("chat", ...) as format_llama3_chat.
std::string format_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt = true);

// The template spillway writes for tokenizers that have none
// (kPlainChatTemplate in tokenizer_files.h): each message's content followed
// by the end-of-text token's text.
std::string format_plain_chat(std::span<const ChatMessage> messages, std::string_view eos_text);

enum class ChatFormat { llama3, llama2, chatml, plain };

// Python's str.strip() and Jinja's trim, over ASCII whitespace: how the
// templates trim a message's content.
std::string_view trim(std::string_view text);

// Which of the formats above a tokenizer_config.json chat_template (Jinja)
// writes, told by the markers it emits; nullopt for any other template.
// spillway renders these formats itself, without a Jinja interpreter.
std::optional<ChatFormat> chat_format_of(std::string_view jinja);

}  // namespace spillway
