#include "train/text_to_tokens.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "base/regular_file.h"
#include "base/status.h"
#include "train/token_file.h"

namespace spillway {
namespace {

bool only_whitespace(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  });
}

// One draw per call, so the sequence of draws (and hence the shuffle) does
// not depend on how a library implements uniform_int_distribution.
uint64_t below(std::mt19937_64& rng, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
}

}  // namespace

std::string read_corpus_file(const std::string& path) {
  const std::string odd = non_regular_kind(path);
  SPW_CHECK(odd.empty(), path, "is ", odd, ", not a corpus file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, std::string("cannot open corpus file: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path, "read failed");
  std::string bytes = text.str();
  SPW_CHECK(!bytes.empty(), path, "corpus file is empty");
  return bytes;
}

std::vector<std::string_view> split_documents(std::string_view text, std::string_view separator) {
  std::vector<std::string_view> documents;
  const auto keep = [&](std::string_view doc) {
    if (!only_whitespace(doc)) documents.push_back(doc);
  };
  size_t doc_begin = 0;
  size_t line_begin = 0;
  while (line_begin < text.size()) {
    size_t line_end = text.find('\n', line_begin);
    const size_t next = line_end == std::string_view::npos ? text.size() : line_end + 1;
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (separator.empty() ? only_whitespace(line) : line == separator) {
      keep(text.substr(doc_begin, line_begin - doc_begin));
      doc_begin = next;
    }
    line_begin = next;
  }
  keep(text.substr(doc_begin));
  return documents;
}

std::vector<uint64_t> pick_validation_documents(uint64_t documents, double fraction, uint64_t seed) {
  SPW_CHECK(fraction >= 0.0 && fraction < 1.0, "validation fraction", fraction, " is not in [0, 1)");
  if (fraction == 0.0 || documents == 0) return {};
  SPW_CHECK(documents >= 2, "corpus", "holds one document; a train/validation split needs at least two ",
            "(set a document separator, or a validation fraction of 0)");
  auto count = static_cast<uint64_t>(std::llround(fraction * static_cast<double>(documents)));
  count = std::clamp<uint64_t>(count, 1, documents - 1);
  std::vector<uint64_t> order(documents);
  for (uint64_t i = 0; i < documents; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  // Only the first `count` places need shuffling.
  for (uint64_t i = 0; i < count; ++i) std::swap(order[i], order[i + below(rng, documents - i)]);
  order.resize(count);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<uint64_t> pick_validation_share(const std::vector<uint64_t>& sizes, double fraction, uint64_t seed) {
  SPW_CHECK(fraction >= 0.0 && fraction < 1.0, "validation fraction", fraction, " is not in [0, 1)");
  const uint64_t n = sizes.size();
  if (fraction == 0.0 || n == 0) return {};
  SPW_CHECK(n >= 2, "corpus", "holds one document; a train/validation split needs at least two ",
            "(separate documents by blank lines or a separator, or set the validation fraction to 0)");
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  const double target = fraction * static_cast<double>(total);
  std::vector<uint64_t> order(n);
  for (uint64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i + 1 < n; ++i) std::swap(order[i], order[i + below(rng, n - i)]);
  std::vector<uint64_t> picked;
  double held = 0;
  for (uint64_t i : order) {
    if (held + static_cast<double>(sizes[i]) <= target) {
      picked.push_back(i);
      held += static_cast<double>(sizes[i]);
    }
  }
  if (picked.empty()) {
    picked.push_back(*std::min_element(order.begin(), order.end(),
                                       [&](uint64_t a, uint64_t b) { return sizes[a] < sizes[b]; }));
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

TokenizedCorpus text_to_tokens(const std::vector<std::string>& text_paths, const Tokenizer& tokenizer,
                               const std::string& train_path, const std::string& validation_path,
                               const CorpusOptions& options) {
  SPW_CHECK(!text_paths.empty(), "corpus", "no text files given");
  const int32_t eos = tokenizer.eos_id();

  std::vector<uint64_t> sizes;  // tokens of each document, end-of-text included
  for (const std::string& path : text_paths) {
    const std::string text = read_corpus_file(path);
    const std::vector<std::string_view> here = split_documents(text, options.document_separator);
    SPW_CHECK(!here.empty(), path, "corpus file holds no document, only whitespace and separators");
    for (std::string_view document : here) sizes.push_back(tokenizer.encode(document).size() + 1);
  }
  const uint64_t documents = sizes.size();
  const std::vector<uint64_t> validation = pick_validation_share(sizes, options.validation_fraction, options.seed);

  TokenFileWriter train(train_path, tokenizer.vocab_size(), tokenizer.fingerprint());
  TokenFileWriter held_out(validation_path, tokenizer.vocab_size(), tokenizer.fingerprint());
  TokenizedCorpus result;
  std::vector<int32_t> ids;
  uint64_t index = 0;
  size_t next_validation = 0;
  for (const std::string& path : text_paths) {
    const std::string text = read_corpus_file(path);
    for (std::string_view document : split_documents(text, options.document_separator)) {
      ids = tokenizer.encode(document, /*allow_special=*/false);
      ids.push_back(eos);
      result.bytes += document.size();
      const bool is_validation = next_validation < validation.size() && validation[next_validation] == index;
      if (is_validation) {
        ++next_validation;
        held_out.append(ids);
        ++result.validation_documents;
        result.validation_tokens += ids.size();
      } else {
        train.append(ids);
        ++result.train_documents;
        result.train_tokens += ids.size();
      }
      ++index;
    }
  }
  // The files changed between the passes if the counts disagree.
  SPW_CHECK(index == documents, "corpus", "held ", documents, " documents when counted but ", index,
            " when encoded; a file changed while being read");
  train.commit();
  held_out.commit();
  return result;
}

}  // namespace spillway
