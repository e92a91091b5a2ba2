// The data a run trains on: a tokenizer and a train and a validation token
// file, prepared from text when needed.
//
// `--data` may name a prepared folder (tokenizer.json or tokenizer.model
// with tokenizer_config.json, train.bin, val.bin, as `spillway tokenize`
// writes), or text files and folders of text files. Text is tokenized into
// RUN/data/ once; a later run (a resume) finds it there. A run that starts
// from a checkpoint uses the checkpoint's tokenizer; one that starts from
// scratch trains a byte-level BPE on the text first.
//
// Everything is checked before a step runs: the tokenizer names its
// end-of-text token, the training file holds tokens, and the validation file
// holds some unless validation is off (a validation fraction of 0).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/bpe_tokenizer.h"
#include "model/tokenizer.h"
#include "train/run_config.h"
#include "train/text_to_tokens.h"
#include "train/token_file.h"

namespace spillway::train {

// Where setup.sh's `fortunes` package puts its English text, and the line
// that separates one fortune from the next.
inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";
inline constexpr const char* kFortuneSeparator = "%";

// The default corpus's text files; Error naming the folder when the package
// is not installed (with the command that installs it).
std::vector<std::string> default_corpus_files();

struct Dataset {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenFile> train;
  std::unique_ptr<TokenFile> validation;  // null when validation is off
  std::string folder;  // where the three files live
  // Entropy (nats per token) of the training tokens' unigram distribution:
  // the loss of a model that knows only token frequencies.
  double unigram_entropy = 0;
};

// `tokenizer`: use this one (fine-tuning, resuming) instead of training one.
// Writes into `work_dir` when it has to tokenize.
Dataset prepare_dataset(const DataConfig& options, const std::string& work_dir, const Tokenizer* tokenizer,
                        bool quiet = false);

// Turns text files into a prepared folder (`spillway tokenize`): the token
// files, then the tokenizer's files (model/tokenizer_files.h).
TokenizedCorpus tokenize_to_folder(const std::vector<std::string>& text_files, const Tokenizer& tokenizer,
                                   const std::string& folder, const CorpusOptions& options);

// Text files named directly, and the regular files of named folders (sorted,
// hidden files skipped); Error naming a path that does not exist or a
// folder with no files.
std::vector<std::string> expand_text_paths(const std::vector<std::string>& paths);

// Whether `path` is a folder `spillway tokenize` made.
bool is_prepared_folder(const std::string& path);

double unigram_entropy(const TokenFile& tokens);

// A byte-level BPE of `vocab_size` tokens learned from the documents of the
// files that `corpus` puts on the training side.
BpeTokenizer train_tokenizer(const std::vector<std::string>& text_files, const CorpusOptions& corpus,
                             int32_t vocab_size);

}  // namespace spillway::train
