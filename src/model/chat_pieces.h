// A conversation rendered through a model's chat template as pieces of
// text, each marked whether training learns it: the assistant's replies
// with the marker that ends their turn (so the model learns to stop), and
// nothing of the system or user turns or of the headers. Concatenated, the
// pieces are the text the template gives (chat_template.h for LLaMA-3 and
// LLaMA-2), so a model sees at training time what it sees when chatting.
//
// spillway runs no Jinja: the template a tokenizer carries
// (tokenizer_config.json's chat_template, GGUF's tokenizer.chat_template) is
// recognized by the markers it writes, and rendered by the code for that
// family.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace spillway {

// A tokenizer's chat format (chat_template.h's chat_format_of) and what
// rendering it takes besides the messages.
struct ChatRendering {
  ChatFormat format = ChatFormat::plain;
  // ChatML templates that open with a system message when the conversation
  // has none (SmolLM2's): its text; empty: none is added.
  std::string default_system;
  std::string end_of_text;  // plain: the EOS token's text
};

// The rendering of `tokenizer`'s chat template (an empty one is plain);
// Error("chat template", ...) quoting its start when spillway renders no
// such template.
ChatRendering chat_rendering_of(const Tokenizer& tokenizer);

struct ChatPiece {
  std::string text;
  bool trained = false;  // the assistant's words and the end of its turn
};

// The pieces of `messages` with no generation prompt; Error("chat", ...)
// naming the message for a role the family cannot write.
std::vector<ChatPiece> render_chat_pieces(const ChatRendering& rendering, std::span<const ChatMessage> messages);

// The pieces encoded one by one (special-token text becoming its id) and
// laid end to end, with each token marked as its piece is. Pieces meet at
// special tokens or newlines, where the pre-tokenizers of these families
// split anyway, so the ids are those of the whole text encoded at once.
struct TrainedTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;  // 1 where the loss counts the token
};
TrainedTokens encode_chat_pieces(const Tokenizer& tokenizer, std::span<const ChatPiece> pieces);

}  // namespace spillway
