#include "infer/chat_prompt.h"

#include <algorithm>
#include <optional>

#include "base/status.h"
#include "model/chat_pieces.h"

namespace spillway::infer {

ChatPrompt chat_prompt(const Tokenizer& tok, std::span<const ChatMessage> messages) {
  const std::string& jinja = tok.roles().chat_template;
  SPW_CHECK(!jinja.empty(), "chat", "the model has no chat template (tokenizer_config.json's chat_template)");
  const ChatRendering rendering = chat_rendering_of(tok);
  // A ChatML template's default system message (SmolLM2's), as fine-tuning
  // renders it (model/chat_pieces.h).
  std::vector<ChatMessage> with_system;
  if (!rendering.default_system.empty() && (messages.empty() || messages.front().role != "system")) {
    with_system.push_back({"system", rendering.default_system});
    with_system.insert(with_system.end(), messages.begin(), messages.end());
    messages = with_system;
  }
  ChatPrompt p;
  p.stops = tok.roles().stops;
  auto stop_at = [&](const char* marker) {
    if (auto id = tok.token_id(marker); id && std::find(p.stops.begin(), p.stops.end(), *id) == p.stops.end()) {
      p.stops.push_back(*id);
    }
  };
  switch (rendering.format) {
    case ChatFormat::llama3:
      p.ids = tok.encode(format_llama3_chat(messages), true);
      stop_at("<|eot_id|>");
      break;
    case ChatFormat::llama2:
      p.ids = tok.encode(format_llama2_chat(messages), true);
      break;
    case ChatFormat::chatml:
      p.ids = tok.encode_text(format_chatml(messages), true);
      stop_at("<|im_end|>");
      break;
    case ChatFormat::plain:
      p.ids = tok.encode_text(format_plain_chat(messages, tok.token_text(tok.eos_id())), true);
      break;
  }
  SPW_CHECK(!p.ids.empty(), "chat", "the conversation encodes to no tokens");
  return p;
}

}  // namespace spillway::infer
