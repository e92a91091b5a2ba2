// Turns a text corpus into a train and a validation token file.
//
// A corpus is a list of text files, each holding one or more documents. Each
// document is encoded and followed by the end-of-text token, so the model
// learns where documents stop. Whole documents go to validation, chosen by a
// seeded shuffle: the split never cuts a document and is the same on every
// machine for the same seed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/bpe_tokenizer.h"
#include "model/tokenizer.h"

namespace spillway {

struct CorpusOptions {
  // A line holding exactly this text (a trailing '\r' allowed) ends a
  // document, as "%" does in fortune files. Empty: each file is one document.
  std::string document_separator;
  // Share of documents for validation, in [0, 1). With a non-zero share, at
  // least one document goes to each side.
  double validation_fraction = 0.05;
  uint64_t seed = 1;
};

// The whole file; Error naming it if it is missing, unreadable or empty.
std::string read_corpus_file(const std::string& path);

// Documents of one file's text, in order. Documents that hold only
// whitespace are dropped; separator lines belong to no document.
std::vector<std::string_view> split_documents(std::string_view text, std::string_view separator);

// Indices in [0, documents) of the validation documents, ascending:
// round(fraction * documents) of them (see CorpusOptions), picked by a
// Fisher-Yates shuffle driven by std::mt19937_64, whose output the standard
// fixes, so the choice is the same with every standard library.
std::vector<uint64_t> pick_validation_documents(uint64_t documents, double fraction, uint64_t seed);

struct TokenizedCorpus {
  uint64_t bytes = 0;  // document bytes encoded
  uint64_t train_documents = 0;
  uint64_t validation_documents = 0;
  uint64_t train_tokens = 0;  // end-of-text tokens included
  uint64_t validation_tokens = 0;
};

// Reads the files twice (once to count documents, once to encode), so only
// one file is in memory at a time. Both token files are written atomically
// (token_file.h); on an Error neither is left behind.
TokenizedCorpus text_to_tokens(const std::vector<std::string>& text_paths, const BpeTokenizer& tokenizer,
                               const std::string& train_path, const std::string& validation_path,
                               const CorpusOptions& options);
// The same through the common Tokenizer interface (SentencePiece models too).
TokenizedCorpus text_to_tokens(const std::vector<std::string>& text_paths, const Tokenizer& tokenizer,
                               const std::string& train_path, const std::string& validation_path,
                               const CorpusOptions& options);

}  // namespace spillway
