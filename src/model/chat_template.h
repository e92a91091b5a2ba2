// Chat prompts as the instruction-tuned LLaMA models were trained on them,
// written as text whose special tokens become ids when the text is encoded
// with allow_special (tokenizer.h). Both follow the chat_template of the
// Hugging Face checkpoints (and Meta's reference code), whitespace included.
//
// Special token text inside a message's content is not escaped: encoded with
// allow_special it becomes a special token, as it does in Hugging Face.
#pragma once

#include <span>
#include <string>

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

}  // namespace spillway
