#include "model/chat_pieces.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/tokenizer_files.h"

namespace spillway {
namespace {

// SmolLM2-Instruct's template, as its GGUF and tokenizer_config.json hold it.
const std::string kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const std::vector<std::string> kSpecials = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                            "<|end_header_id|>", "<|eot_id|>",       "<|im_start|>",
                                            "<|im_end|>"};

BpeTokenizer tokenizer_with_template(const std::string& jinja) {
  BpeTokenizer t = train_bpe("system user assistant the quick brown fox jumps over the lazy dog\nagain and again",
                             300, kSpecials);
  TokenRoles roles = t.roles();
  roles.chat_template = jinja;
  t.set_roles(roles);
  return t;
}

std::string joined(const std::vector<ChatPiece>& pieces, bool trained_only = false) {
  std::string out;
  for (const ChatPiece& p : pieces) {
    if (!trained_only || p.trained) out += p.text;
  }
  return out;
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", " the fox? "}, {"assistant", "\tjumps.\n"}, {"user", "again"},
    {"assistant", "the dog"}};

TEST(ChatPieces, RecognizesTheFamilyOfTheTemplate) {
  EXPECT_EQ(chat_rendering_of(tokenizer_with_template("{{ '<|start_header_id|>' }}")).format, ChatFormat::llama3);
  EXPECT_EQ(chat_rendering_of(tokenizer_with_template("{{ '[INST] ' }}")).format, ChatFormat::llama2);
  const ChatRendering smol = chat_rendering_of(tokenizer_with_template(kSmolLm2Template));
  EXPECT_EQ(smol.format, ChatFormat::chatml);
  EXPECT_EQ(smol.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const ChatRendering plain = chat_rendering_of(tokenizer_with_template(kPlainChatTemplate));
  EXPECT_EQ(plain.format, ChatFormat::plain);
  EXPECT_EQ(plain.end_of_text, "<|end_of_text|>");
  EXPECT_EQ(chat_rendering_of(tokenizer_with_template("")).format, ChatFormat::plain);
  try {
    chat_rendering_of(tokenizer_with_template("{{ bos_token }}{% for m in messages %}<turn>{% endfor %}"));
    ADD_FAILURE() << "an unknown template was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.thing(), "chat template");
    EXPECT_NE(std::string(e.what()).find("{{ bos_token }}"), std::string::npos) << e.what();
  }
}

// Concatenated, the pieces are the text chat_template.h formats; the trained
// ones are the replies with the marker that ends each.
TEST(ChatPieces, Llama3PiecesAreTheTemplatesText) {
  const auto pieces = render_chat_pieces({ChatFormat::llama3, "", ""}, kConversation);
  EXPECT_EQ(joined(pieces), format_llama3_chat(kConversation, /*add_generation_prompt=*/false));
  EXPECT_EQ(joined(pieces, true), "jumps.<|eot_id|>the dog<|eot_id|>");
}

TEST(ChatPieces, Llama2PiecesAreTheTemplatesText) {
  const auto pieces = render_chat_pieces({ChatFormat::llama2, "", ""}, kConversation);
  EXPECT_EQ(joined(pieces), format_llama2_chat(kConversation));
  EXPECT_EQ(joined(pieces, true), " jumps. </s> the dog </s>");
  const std::vector<ChatMessage> out_of_turn = {{"user", "a"}, {"user", "b"}};
  EXPECT_THROW(render_chat_pieces({ChatFormat::llama2, "", ""}, out_of_turn), Error);
}

TEST(ChatPieces, ChatMlAddsTheTemplatesSystemMessageWhenThereIsNone) {
  const ChatRendering smol = chat_rendering_of(tokenizer_with_template(kSmolLm2Template));
  const std::vector<ChatMessage> chat = {{"user", "hi"}, {"assistant", "hello"}};
  const auto pieces = render_chat_pieces(smol, chat);
  EXPECT_EQ(joined(pieces),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n");
  EXPECT_EQ(joined(pieces, true), "hello<|im_end|>");
  // A conversation with its own system message keeps it, untrimmed.
  EXPECT_EQ(joined(render_chat_pieces(smol, kConversation)),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n the fox? <|im_end|>\n"
            "<|im_start|>assistant\n\tjumps.\n<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
            "<|im_start|>assistant\nthe dog<|im_end|>\n");
}

TEST(ChatPieces, PlainIsEachContentThenEndOfText) {
  const auto pieces = render_chat_pieces({ChatFormat::plain, "", "<|end_of_text|>"}, kConversation);
  EXPECT_EQ(joined(pieces, true), "\tjumps.\n<|end_of_text|>the dog<|end_of_text|>");
  EXPECT_EQ(joined(pieces), "Be brief.<|end_of_text|> the fox? <|end_of_text|>\tjumps.\n<|end_of_text|>"
                            "again<|end_of_text|>the dog<|end_of_text|>");
}

// Encoded piece by piece, the ids are those of the whole text encoded at
// once, and exactly the replies' tokens are marked.
TEST(ChatPieces, EncodedPiecesEqualTheWholeTextEncoded) {
  for (const std::string& jinja : {std::string("<|start_header_id|>"), kSmolLm2Template}) {
    const BpeTokenizer t = tokenizer_with_template(jinja);
    const auto pieces = render_chat_pieces(chat_rendering_of(t), kConversation);
    const TrainedTokens tokens = encode_chat_pieces(t, pieces);
    EXPECT_EQ(tokens.ids, t.encode(joined(pieces), /*allow_special=*/true)) << jinja;
    ASSERT_EQ(tokens.trained.size(), tokens.ids.size());
    std::vector<int32_t> trained;
    for (size_t i = 0; i < tokens.ids.size(); ++i) {
      if (tokens.trained[i]) trained.push_back(tokens.ids[i]);
    }
    EXPECT_EQ(t.decode(trained), joined(pieces, true)) << jinja;
  }
}

}  // namespace
}  // namespace spillway
