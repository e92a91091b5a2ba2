#include "train/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "base/status.h"
#include "model/bpe_train.h"
#include "model/tokenizer_files.h"

namespace spillway::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTrainFile = "train.bin";
constexpr const char* kValidationFile = "val.bin";

bool prepared(const fs::path& p) {
  return fs::is_directory(p) && fs::exists(p / kTrainFile) && fs::exists(p / kValidationFile) &&
         (fs::exists(p / "tokenizer.json") || fs::exists(p / "tokenizer.model"));
}

}  // namespace

// Sorted, so the corpus order is the same on every machine.
std::vector<std::string> expand_text_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    SPW_CHECK(fs::exists(p), p, "no such corpus file or folder");
    if (fs::is_directory(p)) {
      std::vector<std::string> inside;
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') inside.push_back(e.path().string());
      }
      std::sort(inside.begin(), inside.end());
      SPW_CHECK(!inside.empty(), p, "corpus folder holds no files");
      files.insert(files.end(), inside.begin(), inside.end());
    } else {
      files.push_back(p);
    }
  }
  return files;
}

bool is_prepared_folder(const std::string& path) { return prepared(path); }

std::vector<std::string> default_corpus_files() {
  SPW_CHECK(fs::is_directory(kDefaultCorpusDir), kDefaultCorpusDir,
            "default corpus missing: install it with scripts/setup.sh (Debian package 'fortunes')");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(kDefaultCorpusDir)) {
    const auto name = e.path().filename().string();
    // Plain fortune files have no extension; .dat indexes them, .u8 are
    // links to the same text, and ascii-art is pictures, not English.
    if (e.is_regular_file() && e.path().extension().empty() && name != "ascii-art") {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  SPW_CHECK(!files.empty(), kDefaultCorpusDir, "holds no fortune files");
  return files;
}

double unigram_entropy(const TokenFile& tokens) {
  std::vector<uint64_t> counts(static_cast<size_t>(tokens.vocab_size()));
  for (uint64_t i = 0; i < tokens.size(); ++i) counts[tokens[i]]++;
  double h = 0, n = static_cast<double>(tokens.size());
  for (uint64_t c : counts) {
    if (c) h -= static_cast<double>(c) / n * std::log(static_cast<double>(c) / n);
  }
  return h;
}

TokenizedCorpus tokenize_to_folder(const std::vector<std::string>& text_files, const Tokenizer& tokenizer,
                                   const std::string& folder, const CorpusOptions& options) {
  fs::create_directories(folder);
  auto result = text_to_tokens(text_files, tokenizer, (fs::path(folder) / kTrainFile).string(),
                               (fs::path(folder) / kValidationFile).string(), options);
  // The tokenizer goes last: its presence marks the folder complete.
  save_tokenizer_files(tokenizer, folder);
  return result;
}

BpeTokenizer train_tokenizer(const std::vector<std::string>& text_files, const CorpusOptions& corpus,
                             int32_t vocab_size) {
  // The tokenizer learns from the training documents only: neither the
  // separator lines nor the held-out documents shape its merges.
  // The documents' bytes stand for their tokens, which are not known yet.
  std::vector<std::string> texts;
  for (const auto& f : text_files) texts.push_back(read_corpus_file(f));
  std::vector<std::string_view> documents;
  std::vector<uint64_t> sizes;
  for (const auto& t : texts) {
    auto docs = split_documents(t, corpus.document_separator);
    documents.insert(documents.end(), docs.begin(), docs.end());
    for (std::string_view d : docs) sizes.push_back(d.size());
  }
  auto held_out = pick_validation_share(sizes, corpus.validation_fraction, corpus.seed);
  std::vector<std::string_view> views;
  for (size_t i = 0, next = 0; i < documents.size(); ++i) {
    if (next < held_out.size() && held_out[next] == i) {
      ++next;
      continue;
    }
    views.push_back(documents[i]);
  }
  BpeTrainOptions bpe;
  bpe.vocab_size = vocab_size;
  return train_bpe(views, bpe);
}

Dataset prepare_dataset(const DataConfig& options, const std::string& work_dir, const Tokenizer* tokenizer,
                        bool quiet) {
  Dataset ds;
  fs::path folder;
  const Tokenizer* required = tokenizer;  // the caller's, which the data must match
  if (options.paths.size() == 1 && prepared(options.paths[0])) {
    folder = options.paths[0];
  } else {
    const bool default_corpus = options.paths.empty();
    std::vector<std::string> files = default_corpus ? default_corpus_files() : expand_text_paths(options.paths);
    CorpusOptions corpus;
    corpus.document_separator = default_corpus && options.document_separator.empty() ? kFortuneSeparator
                                                                                    : options.document_separator;
    corpus.validation_fraction = options.validation_fraction;
    corpus.seed = options.seed;
    folder = fs::path(work_dir) / "data";
    bool reusable = prepared(folder);
    if (reusable && tokenizer) reusable = load_tokenizer(folder.string())->fingerprint() == tokenizer->fingerprint();
    if (!reusable) {
      std::unique_ptr<BpeTokenizer> trained;  // lives until the data is written
      if (!tokenizer) {
        if (!quiet) std::printf("training a %d-token BPE tokenizer on %zu files\n", options.vocab_size, files.size());
        trained = std::make_unique<BpeTokenizer>(train_tokenizer(files, corpus, options.vocab_size));
        tokenizer = trained.get();
      }
      auto stats = tokenize_to_folder(files, *tokenizer, folder.string(), corpus);
      if (!quiet) {
        std::printf("tokenized %.1f MB: %llu train tokens (%llu documents), %llu validation tokens (%llu documents)\n",
                    static_cast<double>(stats.bytes) / 1e6, static_cast<unsigned long long>(stats.train_tokens),
                    static_cast<unsigned long long>(stats.train_documents),
                    static_cast<unsigned long long>(stats.validation_tokens),
                    static_cast<unsigned long long>(stats.validation_documents));
      }
    }
  }
  ds.folder = folder.string();
  ds.tokenizer = load_tokenizer(folder.string());
  if (required) {
    SPW_CHECK(ds.tokenizer->fingerprint() == required->fingerprint(), ds.folder,
              "this data was made with a different tokenizer than the model's");
  }
  ds.tokenizer->eos_id();  // documents end with it; a tokenizer that names none is refused now
  ds.train = std::make_unique<TokenFile>((folder / kTrainFile).string());
  ds.train->require_tokenizer(ds.tokenizer->fingerprint());
  SPW_CHECK(ds.train->size() > 0, ds.train->path(), "holds no tokens");
  if (options.validation_fraction > 0) {
    ds.validation = std::make_unique<TokenFile>((folder / kValidationFile).string());
    ds.validation->require_tokenizer(ds.tokenizer->fingerprint());
    SPW_CHECK(ds.validation->size() >= 2, ds.validation->path(), "holds ", ds.validation->size(),
              " tokens, too few to validate on; tokenize with a validation share above 0, or train with "
              "--validation-fraction 0 to turn validation off");
  }
  ds.unigram_entropy = unigram_entropy(*ds.train);
  return ds;
}

}  // namespace spillway::train
