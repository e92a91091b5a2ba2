// Turns a text corpus into a train and a validation token file.
//
// A corpus is a list of text files, each holding one or more documents:
// blank lines end a document, or, with a separator, a line holding exactly
// it. Each document is encoded and followed by the tokenizer's end-of-text
// token, so the model learns where documents stop. Whole documents go to
// validation until they hold the asked share of the tokens, chosen by a
// seeded shuffle: the split never cuts a document, does not depend on how
// the text is spread over files, and is the same on every machine for the
// same seed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace spillway {

struct CorpusOptions {
  // A line holding exactly this text (a trailing '\r' allowed) ends a
  // document, as "%" does in fortune files. Empty: a blank line (empty or
  // whitespace only) ends one.
  std::string document_separator;
  // Share of the tokens held out for validation, in [0, 1). With a non-zero
  // share, at least one document goes to each side; 0: no validation.
  double validation_fraction = 0.05;
  uint64_t seed = 1;
};

// The whole file; Error naming it if it is missing, unreadable or empty.
std::string read_corpus_file(const std::string& path);

// Documents of one file's text, in order. Documents that hold only
// whitespace are dropped; separator lines and blank lines belong to no
// document.
std::vector<std::string_view> split_documents(std::string_view text, std::string_view separator);

// Indices in [0, documents) of the validation documents, ascending:
// round(fraction * documents) of them (see CorpusOptions), picked by a
// Fisher-Yates shuffle driven by std::mt19937_64, whose output the standard
// fixes, so the choice is the same with every standard library.
std::vector<uint64_t> pick_validation_documents(uint64_t documents, double fraction, uint64_t seed);

// Indices of the validation documents, ascending, by share of `sizes` (each
// document's tokens): documents in a seeded shuffled order join validation
// while the held-out total stays within fraction * the whole; if none fits,
// the smallest document does. Error naming "corpus" for one document (with
// a non-zero fraction) and for a fraction outside [0, 1).
std::vector<uint64_t> pick_validation_share(const std::vector<uint64_t>& sizes, double fraction, uint64_t seed);

struct TokenizedCorpus {
  uint64_t bytes = 0;  // document bytes encoded
  uint64_t train_documents = 0;
  uint64_t validation_documents = 0;
  uint64_t train_tokens = 0;  // end-of-text tokens included
  uint64_t validation_tokens = 0;
};

// Reads and encodes the files twice (once to count each document's tokens,
// once to write them), so only one file is in memory at a time. Both token
// files are written atomically (token_file.h); on an Error neither is left
// behind.
TokenizedCorpus text_to_tokens(const std::vector<std::string>& text_paths, const Tokenizer& tokenizer,
                               const std::string& train_path, const std::string& validation_path,
                               const CorpusOptions& options);

}  // namespace spillway
