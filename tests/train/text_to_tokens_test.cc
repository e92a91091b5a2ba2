#include "train/text_to_tokens.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "base/status.h"
#include "model/bpe_train.h"
#include "train/token_file.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;
using Docs = std::vector<std::string>;

Docs as_strings(const std::vector<std::string_view>& views) { return Docs(views.begin(), views.end()); }

class TextToTokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "spillway-corpus-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }

  fs::path dir_;
};

// Documents of a few random words each, some spanning several lines.
Docs random_documents(int n, uint64_t seed) {
  static const std::vector<std::string> words = {
      "the", "cat", "sat", "on", "a", "mat", "and", "dog's", "bone", "42", "caf\xC3\xA9", "\xF0\x9F\x99\x82",
      "!",   "--"};
  std::mt19937_64 rng(seed);
  Docs docs;
  for (int d = 0; d < n; ++d) {
    std::string doc = "doc " + std::to_string(d) + ":";
    const int len = 1 + static_cast<int>(rng() % 25);
    for (int w = 0; w < len; ++w) doc += (rng() % 6 == 0 ? "\n" : " ") + words[rng() % words.size()];
    docs.push_back(doc + "\n");
  }
  return docs;
}

std::string fortune_file(const Docs& docs) {
  std::string text;
  for (const std::string& d : docs) text += d + "%\n";
  return text;
}

// The documents a token file holds: runs of ids ended by `eos`, decoded.
Docs decode_documents(const TokenFile& file, const BpeTokenizer& tok) {
  std::vector<int32_t> ids(file.size());
  file.copy(0, ids);
  Docs docs;
  std::vector<int32_t> doc;
  for (int32_t id : ids) {
    if (id == tok.eos_id()) {
      docs.push_back(tok.decode(doc));
      doc.clear();
    } else {
      doc.push_back(id);
    }
  }
  EXPECT_TRUE(doc.empty()) << "the file does not end with the end-of-text token";
  return docs;
}

TEST(SplitDocuments, FortuneSeparators) {
  EXPECT_EQ(as_strings(split_documents("a\n%\nb\nc\n%\n", "%")), (Docs{"a\n", "b\nc\n"}));
  EXPECT_EQ(as_strings(split_documents("a\r\n%\r\nb", "%")), (Docs{"a\r\n", "b"}));
  EXPECT_EQ(as_strings(split_documents("%\n%\n  \n%\nx %\n%%\n", "%")),
            (Docs{"x %\n%%\n"}));  // only whole lines
  EXPECT_EQ(as_strings(split_documents("no separator here\n", "%")), (Docs{"no separator here\n"}));
  EXPECT_EQ(as_strings(split_documents("a\n%\nb\n", "")), (Docs{"a\n%\nb\n"}));  // one document per file
  EXPECT_TRUE(split_documents(" \n\t", "").empty());
}

TEST(PickValidation, CountRangeAndSeed) {
  for (uint64_t n : {2u, 3u, 10u, 101u, 5000u}) {
    for (double fraction : {0.01, 0.1, 0.5, 0.9}) {
      const std::vector<uint64_t> picked = pick_validation_documents(n, fraction, 7);
      const auto want = std::clamp<uint64_t>(
          static_cast<uint64_t>(std::llround(fraction * static_cast<double>(n))), 1, n - 1);
      EXPECT_EQ(picked.size(), want) << n << " " << fraction;
      EXPECT_TRUE(std::is_sorted(picked.begin(), picked.end()));
      EXPECT_EQ(std::adjacent_find(picked.begin(), picked.end()), picked.end());
      EXPECT_LT(picked.back(), n);
      EXPECT_EQ(picked, pick_validation_documents(n, fraction, 7));
    }
  }
  EXPECT_NE(pick_validation_documents(1000, 0.1, 1), pick_validation_documents(1000, 0.1, 2));
  EXPECT_TRUE(pick_validation_documents(1000, 0.0, 1).empty());
  EXPECT_THROW(pick_validation_documents(1, 0.1, 1), Error);
  EXPECT_THROW(pick_validation_documents(10, 1.0, 1), Error);
  // Spread over the whole corpus, not bunched at one end.
  const std::vector<uint64_t> picked = pick_validation_documents(10000, 0.1, 3);
  EXPECT_LT(picked.front(), 200u);
  EXPECT_GT(picked.back(), 9800u);
}

TEST_F(TextToTokensTest, EveryDocumentLandsOnceFollowedByEos) {
  const Docs first = random_documents(60, 1), second = random_documents(45, 2);
  const std::vector<std::string> files = {write("a.txt", fortune_file(first)),
                                          write("b.txt", fortune_file(second))};
  std::string all;
  for (const auto& d : first) all += d;
  for (const auto& d : second) all += d;
  const BpeTokenizer tok = train_bpe(all, 400, {"<|begin_of_text|>", "<|end_of_text|>"});

  CorpusOptions options;
  options.document_separator = "%";
  options.validation_fraction = 0.2;
  options.seed = 3;
  const TokenizedCorpus result = text_to_tokens(files, tok, path("train.bin"), path("val.bin"), options);
  EXPECT_EQ(result.train_documents + result.validation_documents, 105u);
  // The split goes by token share, in whole documents.
  const double share = static_cast<double>(result.validation_tokens) /
                       static_cast<double>(result.train_tokens + result.validation_tokens);
  EXPECT_LE(share, 0.2);
  EXPECT_GT(share, 0.15);

  const TokenFile train(path("train.bin")), val(path("val.bin"));
  train.require_tokenizer(tok.fingerprint());
  EXPECT_EQ(train.size(), result.train_tokens);
  EXPECT_EQ(val.size(), result.validation_tokens);
  Docs got = decode_documents(train, tok);
  const Docs val_docs = decode_documents(val, tok);
  EXPECT_EQ(got.size(), result.train_documents);
  EXPECT_EQ(val_docs.size(), result.validation_documents);
  got.insert(got.end(), val_docs.begin(), val_docs.end());
  Docs want = first;
  want.insert(want.end(), second.begin(), second.end());
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  uint64_t bytes = 0;
  for (const auto& d : want) bytes += d.size();
  EXPECT_EQ(result.bytes, bytes);

  // The same seed writes the same files; another seed picks others.
  text_to_tokens(files, tok, path("train2.bin"), path("val2.bin"), options);
  const auto read = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read(path("train.bin")), read(path("train2.bin")));
  EXPECT_EQ(read(path("val.bin")), read(path("val2.bin")));
  options.seed = 4;
  text_to_tokens(files, tok, path("train3.bin"), path("val3.bin"), options);
  EXPECT_NE(read(path("val.bin")), read(path("val3.bin")));
}

TEST_F(TextToTokensTest, WholeFilesAsDocuments) {
  const Docs docs = {"first file\n", "second file\n%\nstill second\n", "third"};
  std::vector<std::string> files;
  for (size_t i = 0; i < docs.size(); ++i) files.push_back(write("f" + std::to_string(i), docs[i]));
  const BpeTokenizer tok = train_bpe(docs[0] + docs[1] + docs[2], 300, {"<|end_of_text|>"});
  CorpusOptions options;
  options.validation_fraction = 0.34;
  const TokenizedCorpus result = text_to_tokens(files, tok, path("train.bin"), path("val.bin"), options);
  EXPECT_EQ(result.train_documents, 2u);
  EXPECT_EQ(result.validation_documents, 1u);
  Docs got = decode_documents(TokenFile(path("train.bin")), tok);
  for (const auto& d : decode_documents(TokenFile(path("val.bin")), tok)) got.push_back(d);
  std::sort(got.begin(), got.end());
  Docs want = docs;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
}

TEST_F(TextToTokensTest, BadCorporaAreNamedAndLeaveNoOutput) {
  const BpeTokenizer tok = train_bpe("some text to train on", 270, {"<|end_of_text|>"});
  const std::string good = write("good.txt", fortune_file(random_documents(5, 1)));
  const std::string empty = write("empty.txt", "");
  const std::string separators = write("separators.txt", "%\n\n%\n");
  const std::string missing = path("missing.txt");
  CorpusOptions options;
  options.document_separator = "%";
  const auto expect_named = [&](const std::vector<std::string>& files, const std::string& name,
                                const std::string& problem) {
    try {
      text_to_tokens(files, tok, path("train.bin"), path("val.bin"), options);
      ADD_FAILURE() << "no error for " << name;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(name + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
    EXPECT_FALSE(fs::exists(path("train.bin")));
    EXPECT_FALSE(fs::exists(path("val.bin")));
  };
  expect_named({good, missing}, missing, "cannot open");
  expect_named({empty, good}, empty, "empty");
  expect_named({good, separators}, separators, "no document");
  options.document_separator.clear();
  expect_named({good}, "corpus", "one document");  // nothing to hold out
  EXPECT_THROW(text_to_tokens({}, tok, path("train.bin"), path("val.bin"), options), Error);

  const BpeTokenizer no_eos = train_bpe("some text", 270, {});
  EXPECT_THROW(text_to_tokens({good}, no_eos, path("train.bin"), path("val.bin"), options), Error);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"empty.txt", "good.txt", "separators.txt"}));
}

// Measures the whole pipeline on the fortune corpus (`fortunes` package):
// run with --gtest_also_run_disabled_tests --gtest_filter='*Fortunes*'.
TEST_F(TextToTokensTest, DISABLED_FortunesCorpusMeasurement) {
  const fs::path corpus = "/usr/share/games/fortunes";
  if (!fs::is_directory(corpus)) GTEST_SKIP() << corpus << " is not installed";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(corpus)) {
    if (e.is_regular_file() && !e.path().has_extension()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> texts;
  std::vector<std::string_view> documents;
  size_t bytes = 0;
  for (const auto& f : files) texts.push_back(read_corpus_file(f));
  for (const auto& t : texts) {
    for (std::string_view d : split_documents(t, "%")) {
      documents.push_back(d);
      bytes += d.size();
    }
  }
  using clock = std::chrono::steady_clock;
  const auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };

  const auto t0 = clock::now();
  BpeTrainOptions options;
  options.vocab_size = 4096;
  const BpeTokenizer trained = train_bpe(documents, options);
  const auto t1 = clock::now();
  uint64_t tokens = 0;
  for (std::string_view d : documents) tokens += trained.encode(d).size();
  const auto t2 = clock::now();
  for (std::string_view d : documents) trained.encode(d);  // pre-token cache warm
  const auto t3 = clock::now();
  CorpusOptions corpus_options;
  corpus_options.document_separator = "%";
  const TokenizedCorpus result =
      text_to_tokens(files, trained, path("train.bin"), path("val.bin"), corpus_options);
  const auto t4 = clock::now();

  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("corpus: %zu files, %zu documents, %.2f MB\n", files.size(), documents.size(), mb);
  std::printf("train 4096-token BPE: %.2f s (%zu merges)\n", seconds(t0, t1), trained.vocab().merges.size());
  std::printf("encode, cold cache: %.2f s = %.1f MB/s; warm cache: %.2f s = %.1f MB/s\n", seconds(t1, t2),
              mb / seconds(t1, t2), seconds(t2, t3), mb / seconds(t2, t3));
  std::printf("tokens per byte: %.4f (%.2f bytes per token)\n",
              static_cast<double>(tokens) / static_cast<double>(bytes),
              static_cast<double>(bytes) / static_cast<double>(tokens));
  std::printf("text_to_tokens: %.2f s, train %llu tokens / %llu docs, validation %llu tokens / %llu docs\n",
              seconds(t3, t4), static_cast<unsigned long long>(result.train_tokens),
              static_cast<unsigned long long>(result.train_documents),
              static_cast<unsigned long long>(result.validation_tokens),
              static_cast<unsigned long long>(result.validation_documents));
  EXPECT_EQ(trained.vocab_size(), 4096);
}

}  // namespace
}  // namespace spillway
