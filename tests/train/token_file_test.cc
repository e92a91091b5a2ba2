#include "train/token_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "base/status.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "spillway-tokens-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Expects opening `file` to fail with `thing` first and `problem` within.
  static void expect_error(const std::string& file, const std::string& thing, const std::string& problem) {
    try {
      TokenFile t(file);
      ADD_FAILURE() << "opened " << file;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(thing + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(problem), std::string::npos) << what;
    }
  }

  fs::path dir_;
};

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  ids[n / 2] = static_cast<int32_t>(vocab - 1);  // the largest id must fit
  return ids;
}

TEST_F(TokenFileTest, DtypeFollowsVocabulary) {
  EXPECT_EQ(token_dtype_for(4096), TokenDType::u16);
  EXPECT_EQ(token_dtype_for(65536), TokenDType::u16);
  EXPECT_EQ(token_dtype_for(65537), TokenDType::u32);
  EXPECT_EQ(token_dtype_for(128256), TokenDType::u32);
}

TEST_F(TokenFileTest, RoundTripsU16AndU32) {
  for (int64_t vocab : {1000, 65536, 128256}) {
    for (size_t n : {1u, 7u, 1001u, 700001u}) {  // the last crosses the write buffer
      const std::vector<int32_t> ids = random_ids(n, vocab, n + static_cast<uint64_t>(vocab));
      const std::string file = path("tokens.bin");
      write_token_file(file, ids, vocab, "feedfacecafebeef");
      const TokenFile t(file);
      EXPECT_EQ(t.size(), n);
      EXPECT_EQ(t.vocab_size(), vocab);
      EXPECT_EQ(t.dtype(), token_dtype_for(vocab));
      EXPECT_EQ(t.tokenizer_fingerprint(), "feedfacecafebeef");
      EXPECT_EQ(fs::file_size(file), n * (vocab <= 65536 ? 2 : 4));
      std::vector<int32_t> back(n);
      t.copy(0, back);
      ASSERT_EQ(back, ids) << "vocab " << vocab << " n " << n;
      EXPECT_EQ(t[n - 1], static_cast<uint32_t>(ids[n - 1]));
      EXPECT_EQ(entries(), (std::vector<std::string>{"tokens.bin", "tokens.bin.json"}));
    }
  }
}

TEST_F(TokenFileTest, StreamedAppendsEqualOneWrite) {
  const std::vector<int32_t> ids = random_ids(5000, 3000, 1);
  {
    TokenFileWriter w(path("a.bin"), 3000, "x");
    for (size_t i = 0; i < ids.size(); i += 333) {
      w.append(std::span<const int32_t>(ids).subspan(i, std::min<size_t>(333, ids.size() - i)));
    }
    EXPECT_EQ(w.tokens_written(), ids.size());
    w.commit();
  }
  write_token_file(path("b.bin"), ids, 3000, "x");
  std::ifstream a(path("a.bin"), std::ios::binary), b(path("b.bin"), std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(b)));
}

TEST_F(TokenFileTest, EmptyFileRoundTrips) {
  write_token_file(path("empty.bin"), {}, 500, "x");
  const TokenFile t(path("empty.bin"));
  EXPECT_EQ(t.size(), 0u);
}

TEST_F(TokenFileTest, TruncatedFileIsNamed) {
  const std::string file = path("t.bin");
  write_token_file(file, random_ids(100, 1000, 2), 1000, "x");
  fs::resize_file(file, 199);
  expect_error(file, file, "truncated");
}

TEST_F(TokenFileTest, MissingSidecarIsNamed) {
  const std::string file = path("t.bin");
  write_token_file(file, random_ids(100, 1000, 3), 1000, "x");
  fs::remove(token_sidecar_path(file));
  expect_error(file, file, "sidecar");
}

TEST_F(TokenFileTest, MalformedSidecarIsNamed) {
  const std::string file = path("t.bin");
  write_token_file(file, random_ids(100, 1000, 3), 1000, "x");
  std::ofstream(token_sidecar_path(file)) << "{\"format\": \"spillway-tokens\", \"dtype\": \"uint16\"}";
  expect_error(file, token_sidecar_path(file), "missing field tokens");
  std::ofstream(token_sidecar_path(file)) << "not json";
  expect_error(file, token_sidecar_path(file), "not valid JSON");
}

// A sidecar's count times the width wraps 64 bits to 0, which an empty data
// file would match; the count alone past the limit; a FIFO as the data or the
// sidecar: each one exact line, none a crash or a hang.
TEST_F(TokenFileTest, HostileSidecarsAndFifosGiveExactLines) {
  const std::string file = path("t.bin");
  write_token_file(file, {}, 1000, "x");
  const std::string sidecar = token_sidecar_path(file);
  const auto with_tokens = [&](const std::string& count) {
    std::ofstream(sidecar) << R"({"format": "spillway-tokens", "dtype": "uint16", "tokens": )" << count
                           << R"(, "vocab_size": 1000, "tokenizer": "x"})";
  };
  const auto error_of = [&](const std::string& f) -> std::string {
    try {
      TokenFile t(f);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  with_tokens("9223372036854775808");  // 2^63: x 2 bytes is 2^64, which wraps to 0
  EXPECT_EQ(error_of(file), sidecar + ": tokens is 9223372036854775808; at most 281474976710656");
  with_tokens("4611686018427387904");  // 2^62, the issue's count
  EXPECT_EQ(error_of(file), sidecar + ": tokens is 4611686018427387904; at most 281474976710656");
  with_tokens("281474976710656");  // at the limit: the size check names the mismatch
  EXPECT_EQ(error_of(file), file + ": holds 0 bytes but its sidecar says 281474976710656 uint16 tokens "
                                   "(562949953421312 bytes): truncated or overwritten");
  std::ofstream(sidecar) << R"({"format": "spillway-tokens", "dtype": "uint32", "tokens": 0, )"
                         << R"("vocab_size": 18446744073709551615, "tokenizer": "x"})";
  EXPECT_EQ(error_of(file), sidecar + ": vocab_size is 18446744073709551615; must be 1 to 4294967296");

  const std::string fifo = path("fifo.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(token_sidecar_path(fifo)) << R"({"format": "spillway-tokens", "dtype": "uint16", "tokens": 0, )"
                                          << R"("vocab_size": 1000, "tokenizer": "x"})";
  EXPECT_EQ(error_of(fifo), fifo + ": is a FIFO, not a token file");
  const std::string fifo_sidecar = path("data.bin");
  write_token_file(fifo_sidecar, {}, 1000, "x");
  fs::remove(token_sidecar_path(fifo_sidecar));
  ASSERT_EQ(::mkfifo(token_sidecar_path(fifo_sidecar).c_str(), 0600), 0);
  EXPECT_EQ(error_of(fifo_sidecar), token_sidecar_path(fifo_sidecar) + ": is a FIFO, not a token file's sidecar");
}

TEST_F(TokenFileTest, IdOutsideVocabularyIsNamed) {
  const std::string file = path("t.bin");
  write_token_file(file, random_ids(100, 1000, 4), 1000, "x");
  {
    std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(2 * 37);
    const uint16_t bad = 1000;
    f.write(reinterpret_cast<const char*>(&bad), 2);
  }
  expect_error(file, file, "token 37 is 1000, outside the vocabulary of 1000");
}

TEST_F(TokenFileTest, TokenizerMismatchIsNamed) {
  const std::string file = path("t.bin");
  write_token_file(file, random_ids(10, 1000, 5), 1000, "aaaa");
  const TokenFile t(file);
  t.require_tokenizer("aaaa");
  EXPECT_THROW(t.require_tokenizer("bbbb"), Error);
}

TEST_F(TokenFileTest, FailedWritesLeaveNothingBehind) {
  // An id past the vocabulary, found mid-stream.
  std::vector<int32_t> ids = random_ids(1000, 1000, 6);
  ids[900] = 1000;
  EXPECT_THROW(write_token_file(path("bad.bin"), ids, 1000, "x"), Error);
  EXPECT_TRUE(entries().empty());
  ids[900] = -1;
  EXPECT_THROW(write_token_file(path("bad.bin"), ids, 1000, "x"), Error);
  EXPECT_TRUE(entries().empty());

  // A write abandoned without commit.
  {
    TokenFileWriter w(path("abandoned.bin"), 1000, "x");
    w.append(random_ids(10, 1000, 7));
  }
  EXPECT_TRUE(entries().empty());

  // The destination is a folder, so the final rename fails.
  fs::create_directory(path("taken.bin"));
  EXPECT_THROW(write_token_file(path("taken.bin"), random_ids(10, 1000, 8), 1000, "x"), Error);
  EXPECT_EQ(entries(), (std::vector<std::string>{"taken.bin"}));

  // A folder that does not exist.
  EXPECT_THROW(write_token_file(path("no/such/dir.bin"), random_ids(10, 1000, 9), 1000, "x"), Error);
}

TEST_F(TokenFileTest, ReadsPastTheEndAreErrors) {
  write_token_file(path("t.bin"), random_ids(10, 1000, 10), 1000, "x");
  const TokenFile t(path("t.bin"));
  std::vector<int32_t> out(4);
  EXPECT_NO_THROW(t.copy(6, out));
  EXPECT_THROW(t.copy(7, out), Error);
  EXPECT_THROW(t[10], Error);
}

TEST_F(TokenFileTest, MovedFileStaysReadable) {
  const std::vector<int32_t> ids = random_ids(50, 1000, 11);
  write_token_file(path("t.bin"), ids, 1000, "x");
  TokenFile a(path("t.bin"));
  TokenFile b(std::move(a));
  std::vector<int32_t> back(50);
  b.copy(0, back);
  EXPECT_EQ(back, ids);
}

}  // namespace
}  // namespace spillway
