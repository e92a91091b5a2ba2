// `spillway chat`: a conversation in the terminal, each reply streamed as it
// is generated, in the model's chat format (infer/chat_prompt.h).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "infer/chat_prompt.h"
#include "infer/generate.h"
#include "infer/loaded_model.h"
#include "infer/text_stream.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"
#include "model/tokenizer_vocab.h"
#include "train/checkpoint.h"

namespace spillway::cli {

namespace {

struct ChatArgs {
  std::string model;
  std::string adapter;
  std::string system;
  int64_t max_tokens = 512;
  infer::SamplingOptions sampling;
  ModelRunFlags run;
};

int run_chat(const ChatArgs& a) {
  a.run.apply();
  // A LoRA run's checkpoint, or the model with --adapter, runs merged.
  infer::LoadedModel loaded = infer::load_model(a.model, a.adapter);
  model::LlamaWeights& weights = loaded.weights;
  const Tokenizer& tok = *loaded.tokenizer;
  const int64_t context = weights.config().max_position_embeddings;
  std::unique_ptr<infer::Decoder> decoder = infer::make_decoder(weights, context, a.run.device);
  const bool terminal = isatty(STDIN_FILENO);
  if (terminal)
    std::fprintf(stderr, "[%s] an empty line or end of input ends the chat\n", decoder->description().c_str());

  std::vector<ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  // What the cache holds: each turn feeds only what follows it, when the new
  // conversation starts with it (else the cache starts over).
  std::vector<int32_t> fed;
  for (std::string line;;) {
    if (terminal) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line.empty()) break;
    messages.push_back({"user", line});
    const infer::ChatPrompt prompt = infer::chat_prompt(tok, messages);
    const auto total = static_cast<int64_t>(prompt.ids.size());
    SPW_CHECK(total < context, "chat", "the conversation is ", total, " tokens, more than the model's context of ",
              context - 1, " leaves room for a reply; start a new chat");
    const bool continues = fed.size() <= prompt.ids.size() && std::equal(fed.begin(), fed.end(), prompt.ids.begin());
    if (!continues || fed.empty()) {
      decoder->reset();
      fed.clear();
    }
    const std::vector<int32_t> new_ids(prompt.ids.begin() + static_cast<std::ptrdiff_t>(fed.size()), prompt.ids.end());
    infer::GenerateOptions g;
    g.max_new_tokens = std::min(a.max_tokens, context - total);
    g.sampling = a.sampling;
    g.stop_tokens = prompt.stops;
    g.vocab_limit = tok.vocab_size();
    infer::TextStream text(tok, prompt.ids, {});
    std::vector<int32_t> reply;
    if (!new_ids.empty()) {
      reply = infer::generate(*decoder, new_ids, g, [&](int32_t id) {
        const std::string piece = text.add(std::span<const int32_t>(&id, 1));
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
    }
    const std::string rest = text.finish();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    // The cache holds the prompt and the reply, less its last token when the
    // reply ran to its length (a token is fed only when another is wanted).
    fed = prompt.ids;
    const int64_t held = decoder->position() - total;
    fed.insert(fed.end(), reply.begin(), reply.begin() + held);
    messages.push_back({"assistant", text.sent()});
  }
  return 0;
}

}  // namespace

Runner add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "chat with a model in the terminal, in its chat format");
  cmd->add_option("-m,--model", a->model, "model folder, run folder or GGUF file")->required();
  cmd->add_option("--adapter", a->adapter,
                  "a LoRA adapter folder as PEFT saves one (adapter_config.json, adapter_model.safetensors), merged "
                  "into the model's weights");
  cmd->add_option("--system", a->system, "a system message to open the conversation");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens one reply has at most")->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "sampling seed")->capture_default_str();
  a->run.add_to(cmd);
  return [a] { return run_chat(*a); };
}

}  // namespace spillway::cli
