#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/commands.h"
#include "model/bpe_train.h"
#include "model/tokenizer.h"
#include "train/checkpoint.h"
#include "train/dataset.h"

namespace spillway::cli {

namespace {

struct TokenizeArgs {
  std::vector<std::string> files;
  std::string out;
  int32_t train_vocab = 0;
  std::string tokenizer;
  std::string separator;
  double validation = 0.05;
  uint64_t seed = 1;
};

int run_tokenize(const TokenizeArgs& a) {
  std::vector<std::string> files = a.files.empty() ? train::default_corpus_files() : a.files;
  std::string separator = a.files.empty() && a.separator.empty() ? train::kFortuneSeparator : a.separator;
  SPW_CHECK(a.train_vocab > 0 || !a.tokenizer.empty(), "tokenize",
            "give --train-vocab N to train a tokenizer, or --tokenizer DIR to use one");
  CorpusOptions corpus;
  corpus.document_separator = separator;
  corpus.validation_fraction = a.validation;
  corpus.seed = a.seed;
  TokenizedCorpus stats;
  if (a.tokenizer.empty()) {
    BpeTokenizer tok = train::train_tokenizer(files, corpus, a.train_vocab);
    std::printf("trained a %d-token byte-level BPE tokenizer\n", tok.vocab_size());
    stats = train::tokenize_to_folder(files, tok, a.out, corpus);
  } else {
    // tokenizer.json or tokenizer.model, from a file, a model or run folder, or a GGUF file.
    const std::string source =
        std::filesystem::is_directory(a.tokenizer) ? train::resolve_checkpoint(a.tokenizer) : a.tokenizer;
    std::unique_ptr<Tokenizer> tok = load_tokenizer(source);
    stats = train::tokenize_to_folder(files, *tok, a.out, corpus);
  }
  std::printf("%s: %llu train tokens, %llu validation tokens from %.1f MB of text (%.2f bytes per token)\n",
              a.out.c_str(), static_cast<unsigned long long>(stats.train_tokens),
              static_cast<unsigned long long>(stats.validation_tokens), static_cast<double>(stats.bytes) / 1e6,
              static_cast<double>(stats.bytes) / static_cast<double>(stats.train_tokens + stats.validation_tokens));
  return 0;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "turn text files into token files (train.bin, val.bin, tokenizer.json)");
  cmd->add_option("files", a->files, "text files (default: the fortunes corpus)");
  cmd->add_option("-o,--out", a->out, "output folder")->required();
  cmd->add_option("--train-vocab", a->train_vocab, "train a byte-level BPE tokenizer of this size on the text");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "use this tokenizer.json or tokenizer.model (SentencePiece), or a model folder's or GGUF file's");
  cmd->add_option("--separator", a->separator,
                  "a line holding exactly this text ends a document (default: a blank line; % for the default corpus)");
  cmd->add_option("--validation", a->validation,
                  "share of the tokens held out for validation, in whole documents (0: none)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the validation split")->capture_default_str();
  return [a] { return run_tokenize(*a); };
}

}  // namespace spillway::cli
