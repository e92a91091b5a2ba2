// The HTTP server's request bodies: the first input byte picks the endpoint
// (bit 0: /v1/chat/completions, else /v1/completions) and the chat format of
// the served tokenizer (bits 1-3); the rest is the body. It goes the way
// OpenAiServer's handler takes it before anything is generated:
// parse_api_request into an ApiRequest, then prepare_request against the
// model (the chat template rendered and encoded, text prompts encoded, ids
// and lengths checked against the vocabulary, the context and the cache).
// The handler answers ApiError with its status and anything else with a 500,
// so here ApiError is the only expected end; its JSON body must serialize.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "infer/batch_decoder.h"
#include "infer/batch_engine.h"
#include "infer/openai_generation.h"
#include "infer/openai_request.h"
#include "model/bpe_train.h"
#include "model/tokenizer_files.h"

namespace {

using namespace spillway;

// A cache to size requests against; nothing is ever run on it.
class NoModel final : public infer::BatchDecoder {
 public:
  NoModel(int64_t blocks, int64_t block_tokens, int32_t vocab) : BatchDecoder(blocks, block_tokens), vocab_(vocab) {}
  int64_t vocab() const override { return vocab_; }
  uint64_t cache_bytes() const override { return 0; }
  std::string description() const override { return "fuzz"; }

 protected:
  std::span<const float> run(std::span<const infer::SequenceChunk> chunks, std::span<const int64_t>) override {
    logits_.assign(chunks.size() * static_cast<size_t>(vocab_), 0.0f);
    return logits_;
  }

 private:
  int32_t vocab_;
  std::vector<float> logits_;
};

// The chat formats spillway renders, and a template it cannot (an error for
// every chat request), each on one small trained tokenizer.
const std::vector<BpeTokenizer>& tokenizers() {
  static const std::vector<BpeTokenizer> all = [] {
    const char* templates[] = {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}",
                               "{{'<|im_start|>' + message['role'] + '\\n'}}", "{{ '[INST] ' + content + ' [/INST]' }}",
                               kPlainChatTemplate, "{{ unknown }}"};
    std::vector<BpeTokenizer> out;
    for (const char* t : templates) {
      BpeTokenizer tok = train_bpe("the cat sees the moon. a dog likes her song. 12 + 30 = 42!", 300,
                                   {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                    "<|end_header_id|>", "<|eot_id|>", "<|im_start|>", "<|im_end|>"});
      TokenRoles roles = tok.roles();
      roles.chat_template = t;
      tok.set_roles(roles);
      out.push_back(std::move(tok));
    }
    return out;
  }();
  return all;
}

// A context of 128 tokens over a cache that holds 96 for one request, so
// that both limits can be what a request runs into.
constexpr int64_t kContext = 128;

const infer::BatchEngine& engine() {
  static const infer::BatchEngine e(std::make_unique<NoModel>(6, 16, tokenizers()[0].vocab_size()),
                                    infer::EngineOptions{});
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = (data[0] & 1) != 0;
  const auto& tokenizer = tokenizers()[((data[0] >> 1) & 7) % tokenizers().size()];
  const std::string body(fuzz::as_text(data + 1, size - 1));
  try {
    infer::ApiRequest request = infer::parse_api_request(body, chat);
    const infer::ServedModel model{&tokenizer, kContext};
    infer::prepare_request(std::move(request), model, engine());
  } catch (const infer::ApiError& e) {
    // What the client is sent; strict, so a message that is not UTF-8 shows.
    (void)infer::error_body(e).dump();
  }
  return 0;
}
