#include "model/chat_pieces.h"

#include <optional>
#include <string_view>

#include "base/status.h"
#include "model/tokenizer_files.h"

namespace spillway {

namespace {

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// The system message a ChatML template writes when the first message is not
// one: the text of its '<|im_start|>system\n...<|im_end|>' literal, when the
// template tests for a missing system role. Empty otherwise.
std::string chatml_default_system(std::string_view jinja) {
  if (!contains(jinja, "!= 'system'") && !contains(jinja, "!= \"system\"")) return {};
  constexpr std::string_view kOpen = "<|im_start|>system\n";
  const size_t open = jinja.find(kOpen);
  if (open == std::string_view::npos) return {};
  const size_t begin = open + kOpen.size();
  const size_t end = jinja.find("<|im_end|>", begin);
  if (end == std::string_view::npos) return {};
  const std::string_view text = jinja.substr(begin, end - begin);
  // A literal holds no Jinja of its own; one that does is not a fixed text.
  if (contains(text, "{{") || contains(text, "{%") || contains(text, "'")) return {};
  return std::string(text);
}

void check_role(const ChatMessage& m, size_t i) {
  SPW_CHECK(!m.role.empty() && m.role.find_first_of("<\n") == std::string::npos, "chat", "message ", i,
            " has role '", m.role, "', which is empty or holds '<' or a newline");
}

void add(std::vector<ChatPiece>& out, std::string text, bool trained) {
  if (text.empty()) return;
  if (!out.empty() && out.back().trained == trained) {
    out.back().text += text;
    return;
  }
  out.push_back({std::move(text), trained});
}

std::vector<ChatPiece> llama3_pieces(std::span<const ChatMessage> messages) {
  std::vector<ChatPiece> out;
  add(out, "<|begin_of_text|>", false);
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    const bool assistant = messages[i].role == "assistant";
    add(out, "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n", false);
    add(out, std::string(trim(messages[i].content)) + "<|eot_id|>", assistant);
  }
  return out;
}

// As format_llama2_chat writes it; the reply's leading space is the reply's
// (SentencePiece makes it part of the reply's first token).
std::vector<ChatPiece> llama2_pieces(std::span<const ChatMessage> messages) {
  size_t first_turn = 0;
  std::string system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    first_turn = 1;
  }
  SPW_CHECK(first_turn < messages.size(), "chat", "a system message needs a user message after it");
  std::vector<ChatPiece> out;
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const bool user_turn = (i - first_turn) % 2 == 0;
    const std::string_view expected = user_turn ? "user" : "assistant";
    SPW_CHECK(messages[i].role == expected, "chat", "message ", i, " has role '", messages[i].role, "' where '",
              expected, "' was expected (LLaMA-2 alternates user and assistant after an optional system message)");
    if (user_turn) {
      std::string content = messages[i].content;
      if (i == first_turn && first_turn == 1) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      add(out, "<s>[INST] " + std::string(trim(content)) + " [/INST]", false);
    } else {
      add(out, " " + std::string(trim(messages[i].content)) + " </s>", true);
    }
  }
  return out;
}

std::vector<ChatPiece> chatml_pieces(const ChatRendering& f, std::span<const ChatMessage> messages) {
  std::vector<ChatPiece> out;
  if (!f.default_system.empty() && messages[0].role != "system") {
    add(out, "<|im_start|>system\n" + f.default_system + "<|im_end|>\n", false);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    const bool assistant = messages[i].role == "assistant";
    add(out, "<|im_start|>" + messages[i].role + "\n", false);
    add(out, messages[i].content + "<|im_end|>", assistant);
    add(out, "\n", false);
  }
  return out;
}

std::vector<ChatPiece> plain_pieces(const ChatRendering& f, std::span<const ChatMessage> messages) {
  std::vector<ChatPiece> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    check_role(messages[i], i);
    add(out, messages[i].content + f.end_of_text, messages[i].role == "assistant");
  }
  return out;
}

}  // namespace

ChatRendering chat_rendering_of(const Tokenizer& tokenizer) {
  const std::string& jinja = tokenizer.roles().chat_template;
  const std::optional<ChatFormat> format = jinja.empty() ? ChatFormat::plain : chat_format_of(jinja);
  ChatRendering f;
  if (format) {
    f.format = *format;
    if (f.format == ChatFormat::chatml) f.default_system = chatml_default_system(jinja);
    if (f.format == ChatFormat::plain) f.end_of_text = tokenizer.token_text(tokenizer.eos_id());
  } else {
    throw Error("chat template", "'" + jinja.substr(0, 60) + (jinja.size() > 60 ? "...'" : "'") +
                                     " is none spillway renders (LLaMA-3, LLaMA-2, ChatML, or the plain one "
                                     "spillway writes for tokenizers without a template)");
  }
  return f;
}

std::vector<ChatPiece> render_chat_pieces(const ChatRendering& rendering, std::span<const ChatMessage> messages) {
  SPW_CHECK(!messages.empty(), "chat", "no messages to format");
  switch (rendering.format) {
    case ChatFormat::llama3: return llama3_pieces(messages);
    case ChatFormat::llama2: return llama2_pieces(messages);
    case ChatFormat::chatml: return chatml_pieces(rendering, messages);
    case ChatFormat::plain: return plain_pieces(rendering, messages);
  }
  throw Error("chat", "unknown chat family");
}

TrainedTokens encode_chat_pieces(const Tokenizer& tokenizer, std::span<const ChatPiece> pieces) {
  TrainedTokens out;
  for (const ChatPiece& p : pieces) {
    const std::vector<int32_t> ids = tokenizer.encode(p.text, /*allow_special=*/true);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.trained.insert(out.trained.end(), ids.size(), p.trained ? 1 : 0);
  }
  return out;
}

}  // namespace spillway
