#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <memory>
#include <string>

#include "base/status.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "infer/chat_prompt.h"
#include "infer/generate.h"
#include "infer/generated_text.h"
#include "infer/loaded_model.h"

namespace spillway::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string adapter;
  std::string prompt;
  int64_t max_tokens = 200;
  infer::SamplingOptions sampling;
  ModelRunFlags run;
  bool stats = false;
  bool ids = false;
  bool chat = false;
};

int run_generate(const GenerateArgs& a) {
  a.run.apply();
  const infer::LoadedModel m = infer::load_model(a.model, a.adapter);  // a folder, a run or a .gguf file
  const Tokenizer& tok = *m.tokenizer;
  // With --chat the prompt is a user's message in the model's chat format,
  // and only the reply is printed.
  std::vector<int32_t> stops = tok.roles().stops;
  std::vector<int32_t> prompt;
  if (a.chat) {
    const std::vector<ChatMessage> messages{{"user", a.prompt}};
    infer::ChatPrompt chat = infer::chat_prompt(tok, messages);
    prompt = std::move(chat.ids);
    stops = std::move(chat.stops);
  } else {
    prompt = infer::prompt_ids(tok, a.prompt);
  }
  infer::check_context(m.weights.config(), static_cast<int64_t>(prompt.size()), a.max_tokens);
  std::unique_ptr<infer::Decoder> decoder =
      infer::make_decoder(m.weights, static_cast<int64_t>(prompt.size()) + a.max_tokens, a.run.device);
  infer::GenerateOptions g;
  g.max_new_tokens = a.max_tokens;
  g.sampling = a.sampling;
  g.stop_tokens = stops;
  g.vocab_limit = tok.vocab_size();
  if (!a.chat) std::fputs(a.prompt.c_str(), stdout);
  infer::GeneratedText text(tok, prompt);
  infer::GenerateStats stats;
  auto tokens = infer::generate(*decoder, prompt, g, [&](int32_t id) {
    const std::string piece = text.add(id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  }, &stats);
  const std::string rest = text.finish();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (a.ids) {
    std::string line = "ids:";
    for (int32_t id : tokens) line += " " + std::to_string(id);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stdout);
  // The report goes to stderr, so the text on stdout stays the model's alone;
  // by default only to a terminal, so that piped runs give the same bytes.
  if (a.stats || isatty(STDERR_FILENO)) {
    std::fprintf(stderr, "[%s] prompt: %lld tokens in %.3f s; generated %zu tokens, decode %.1f tokens/s\n",
                 decoder->description().c_str(), static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds,
                 tokens.size(), stats.decode_tokens_per_second());
  }
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a model, streaming tokens as they come");
  cmd->add_option("-m,--model", a->model, "model folder, run folder or GGUF file")->required();
  cmd->add_option("--adapter", a->adapter,
                  "a LoRA adapter folder as PEFT saves one (adapter_config.json, adapter_model.safetensors), merged "
                  "into the model's weights");
  cmd->add_option("-p,--prompt", a->prompt, "text to continue (default: start a new document)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "sampling seed")->capture_default_str();
  a->run.add_to(cmd);
  cmd->add_flag("--chat", a->chat, "the prompt is a user's message: answer it in the model's chat format");
  cmd->add_flag("--ids", a->ids, "print the generated token ids to stderr");
  cmd->add_flag("--stats", a->stats,
                "print the device and the speed at the end, to stderr (default: when stderr is a terminal)");
  return [a] { return run_generate(*a); };
}

}  // namespace spillway::cli
