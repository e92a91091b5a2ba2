#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "base/status.h"
#include "cli/commands.h"
#include "infer/generate.h"
#include "model/llama_weights_io.h"
#include "model/tokenizer.h"
#include "train/checkpoint.h"

namespace spillway::cli {

namespace {

// Length of the longest prefix of `s` that ends on a UTF-8 character
// boundary, so that streamed text never prints half a character.
size_t complete_utf8_prefix(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: keep looking for the lead
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

struct GenerateArgs {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 200;
  infer::SamplingOptions sampling;
  std::string device = "auto";
  bool stats = false;
};

int run_generate(const GenerateArgs& a) {
  const std::string dir = train::resolve_checkpoint(a.model);
  model::LlamaWeights weights = model::load_llama(dir);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir);  // tokenizer.json or tokenizer.model
  const Tokenizer& tok = *tokenizer;
  std::vector<int32_t> prompt = a.prompt.empty() ? std::vector<int32_t>{tok.eos_id()} : tok.encode(a.prompt);
  std::unique_ptr<infer::Decoder> decoder =
      infer::make_decoder(weights, static_cast<int64_t>(prompt.size()) + a.max_tokens, a.device);
  infer::GenerateOptions g;
  g.max_new_tokens = a.max_tokens;
  g.sampling = a.sampling;
  g.stop_token = tok.eos_id();
  std::fputs(a.prompt.c_str(), stdout);
  std::string pending;
  infer::GenerateStats stats;
  auto tokens = infer::generate(*decoder, prompt, g, [&](int32_t id) {
    pending += tok.decode(std::span<const int32_t>(&id, 1));
    size_t ready = complete_utf8_prefix(pending);
    std::fwrite(pending.data(), 1, ready, stdout);
    std::fflush(stdout);
    pending.erase(0, ready);
  }, &stats);
  std::fwrite(pending.data(), 1, pending.size(), stdout);
  std::fputc('\n', stdout);
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
  cmd->add_option("--model", a->model, "model folder or run folder")->required();
  cmd->add_option("--prompt", a->prompt, "text to continue (default: start a new document)");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature, "0 for greedy")->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "sample among the k likeliest tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "nucleus sampling mass")->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "sampling seed")->capture_default_str();
  cmd->add_option("--device", a->device, "auto (the GPU when there is one), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_flag("--stats", a->stats,
                "print the device and the speed at the end, to stderr (default: when stderr is a terminal)");
  return [a] { return run_generate(*a); };
}

}  // namespace spillway::cli
