// A conversation as the ids a model continues: the model's own chat format
// (told by its tokenizer's chat_template, model/chat_template.h) written out
// and encoded with its special tokens, and the ids that end the reply (the
// tokenizer's stops and the format's end-of-turn token).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace spillway::infer {

struct ChatPrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> stops;
};

// Throws Error("chat", ...) when the model has no chat template, or one that
// spillway cannot render, or when the roles break the format's rules.
ChatPrompt chat_prompt(const Tokenizer& tokenizer, std::span<const ChatMessage> messages);

}  // namespace spillway::infer
