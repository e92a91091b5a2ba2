// `spillway eval`: a model's mean loss and perplexity on text or token
// files, on the CPU or the GPU. It reads the model and the data and writes
// nothing. Its flags are its own, like generate's: it runs no training step,
// so the run configuration's table has nothing for it.

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "infer/evaluate.h"
#include "infer/loaded_model.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/text_to_tokens.h"
#include "train/token_file.h"

namespace spillway::cli {

namespace {

namespace fs = std::filesystem;

struct EvalArgs {
  std::string model;
  std::string adapter;
  std::vector<std::string> data;
  int64_t seq = 0;
  ModelRunFlags run;
  bool json = false;
};

int run_eval(const EvalArgs& a) {
  a.run.apply();
  const std::string source = train::resolve_checkpoint(a.model);
  // The data first: a bad path fails before the model is read.
  const bool prepared = a.data.size() == 1 && train::is_prepared_folder(a.data[0]);
  const std::vector<std::string> files = prepared ? std::vector<std::string>{} : train::expand_text_paths(a.data);
  const infer::LoadedModel m = infer::load_model(source, a.adapter);
  const std::unique_ptr<Tokenizer>& tokenizer = m.tokenizer;
  const int64_t window = infer::eval_window(m.weights.config(), a.seq);
  std::unique_ptr<infer::Decoder> decoder = infer::make_decoder(m.weights, window + 1, a.run.device);

  infer::LossSum sum;
  if (prepared) {
    const TokenFile val((fs::path(a.data[0]) / "val.bin").string());
    val.require_tokenizer(tokenizer->fingerprint());
    std::vector<int32_t> ids(val.size());
    val.copy(0, ids);
    infer::add_loss(*decoder, ids, window, sum);
  } else {
    // Each file whole, as transformers' tokenizer(text) encodes it.
    for (const std::string& file : files) {
      const std::vector<int32_t> ids = tokenizer->encode_text(read_corpus_file(file));
      infer::add_loss(*decoder, ids, window, sum);
    }
  }
  SPW_CHECK(sum.tokens > 0, a.data[0], "holds too little text to predict a token");
  if (a.json) {
    std::printf("{\"loss\": %.9g, \"perplexity\": %.9g, \"tokens\": %lld}\n", sum.mean(), sum.perplexity(),
                static_cast<long long>(sum.tokens));
  } else {
    std::printf("loss %.6f, perplexity %.4f over %lld tokens (%s; windows of %lld tokens)\n", sum.mean(),
                sum.perplexity(), static_cast<long long>(sum.tokens), decoder->description().c_str(),
                static_cast<long long>(window));
  }
  return 0;
}

}  // namespace

Runner add_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "a model's mean loss and perplexity on text files or a tokenized folder");
  cmd->add_option("-m,--model", a->model, "model folder, run folder or GGUF file")->required();
  cmd->add_option("--adapter", a->adapter,
                  "a LoRA adapter folder as PEFT saves one, merged into the model's weights");
  cmd->add_option("--data", a->data,
                  "text files or folders of them (each file scored whole), or a folder made by `spillway "
                  "tokenize` (its val.bin)")
      ->required();
  cmd->add_option("--seq", a->seq, "tokens of context per window (default: the model's context, at most 2048)");
  a->run.add_to(cmd);
  cmd->add_flag("--json", a->json, "print {\"loss\", \"perplexity\", \"tokens\"} as one JSON line");
  return [a] { return run_eval(*a); };
}

}  // namespace spillway::cli
