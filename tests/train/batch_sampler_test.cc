#include "train/batch_sampler.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <numeric>

#include "base/status.h"

namespace spillway {
namespace {

namespace fs = std::filesystem;

// A token file whose token at position i is i, so that every window shows
// where it came from.
class BatchSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "spillway-sampler-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  TokenFile positions(size_t n) {
    std::vector<int32_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    const std::string path = (dir_ / ("positions" + std::to_string(n) + ".bin")).string();
    write_token_file(path, ids, static_cast<int64_t>(n), "x");
    return TokenFile(path);
  }

  fs::path dir_;
};

TEST_F(BatchSamplerTest, RowsAreWindowsAndTargetsAreShiftedInputs) {
  const TokenFile file = positions(5003);
  for (int64_t seq : {1, 7, 64}) {
    BatchSampler sampler(file, 5, seq, 11);
    for (int step = 0; step < 50; ++step) {
      const TokenBatch b = sampler.next();
      ASSERT_EQ(b.rows, 5);
      ASSERT_EQ(b.inputs.size(), static_cast<size_t>(5 * seq));
      for (int64_t r = 0; r < 5; ++r) {
        const int32_t start = b.inputs[r * seq];
        ASSERT_LE(start + seq, 5002);  // the target of the last input exists
        for (int64_t t = 0; t < seq; ++t) {
          ASSERT_EQ(b.inputs[r * seq + t], start + t);
          ASSERT_EQ(b.targets[r * seq + t], start + t + 1);
        }
      }
    }
  }
}

TEST_F(BatchSamplerTest, StartsCoverTheWholeFile) {
  const TokenFile file = positions(1000);
  BatchSampler sampler(file, 10, 9, 5);  // starts 0..990
  std::vector<int> seen(991);
  for (int step = 0; step < 2000; ++step) {
    const TokenBatch b = sampler.next();
    for (int r = 0; r < 10; ++r) ++seen[b.inputs[r * 9]];
  }
  // 20,000 draws over 991 starts: every start appears, none far too often.
  EXPECT_GT(*std::min_element(seen.begin(), seen.end()), 0);
  EXPECT_LT(*std::max_element(seen.begin(), seen.end()), 60);
}

TEST_F(BatchSamplerTest, SameSeedSameBatches) {
  const TokenFile file = positions(3000);
  BatchSampler a(file, 4, 16, 42), b(file, 4, 16, 42), c(file, 4, 16, 43);
  bool differs = false;
  for (int step = 0; step < 20; ++step) {
    const TokenBatch ba = a.next(), bb = b.next(), bc = c.next();
    EXPECT_EQ(ba.inputs, bb.inputs);
    EXPECT_EQ(ba.targets, bb.targets);
    differs = differs || ba.inputs != bc.inputs;
  }
  EXPECT_TRUE(differs);
}

TEST_F(BatchSamplerTest, RestoredStateContinuesIdentically) {
  const TokenFile file = positions(3000);
  BatchSampler original(file, 3, 8, 9);
  for (int step = 0; step < 17; ++step) original.next();
  const SamplerState saved = original.state();
  EXPECT_EQ(saved.seed, 9u);
  EXPECT_EQ(saved.draws, 17u * 3);
  std::vector<TokenBatch> expected;
  for (int step = 0; step < 10; ++step) expected.push_back(original.next());

  BatchSampler resumed(file, 3, 8, 12345);  // a fresh sampler, as after a restart
  resumed.restore(saved);
  EXPECT_EQ(resumed.tokens_consumed(), saved.tokens_consumed);
  for (int step = 0; step < 10; ++step) {
    const TokenBatch b = resumed.next();
    EXPECT_EQ(b.inputs, expected[step].inputs) << step;
    EXPECT_EQ(b.targets, expected[step].targets) << step;
  }
  original.restore(saved);  // rewinding the same sampler works too
  EXPECT_EQ(original.next().inputs, expected[0].inputs);
}

TEST_F(BatchSamplerTest, FillsCallerBuffers) {
  const TokenFile file = positions(500);
  BatchSampler a(file, 2, 10, 1), b(file, 2, 10, 1);
  std::vector<int32_t> inputs(20), targets(20);
  a.next(inputs, targets);
  const TokenBatch expected = b.next();
  EXPECT_EQ(inputs, expected.inputs);
  EXPECT_EQ(targets, expected.targets);
  std::vector<int32_t> wrong(19);
  EXPECT_THROW(a.next(wrong, targets), Error);
}

TEST_F(BatchSamplerTest, CountsEpochs) {
  const TokenFile file = positions(1000);
  BatchSampler sampler(file, 4, 25, 3);  // 100 target tokens a batch
  EXPECT_EQ(sampler.epochs(), 0.0);
  for (int step = 0; step < 25; ++step) sampler.next();
  EXPECT_EQ(sampler.tokens_consumed(), 2500u);
  EXPECT_DOUBLE_EQ(sampler.epochs(), 2.5);
}

TEST_F(BatchSamplerTest, TooShortFileIsNamed) {
  const TokenFile file = positions(10);
  try {
    BatchSampler sampler(file, 1, 10, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file.path() + ": ", 0), 0u) << e.what();
  }
  EXPECT_NO_THROW(BatchSampler(file, 1, 9, 1));
  EXPECT_THROW(SequentialBatches(file, 1, 10), Error);
  EXPECT_THROW(BatchSampler(file, 0, 4, 1), Error);
}

TEST_F(BatchSamplerTest, SequentialBatchesCoverEveryTargetOnce) {
  const TokenFile file = positions(1001);
  SequentialBatches batches(file, 3, 64);
  EXPECT_EQ(batches.windows(), 15u);  // 1000 targets / 64
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int32_t> inputs, targets;
    std::vector<int64_t> rows;
    TokenBatch b;
    while (batches.next(b)) {
      rows.push_back(b.rows);
      inputs.insert(inputs.end(), b.inputs.begin(), b.inputs.end());
      targets.insert(targets.end(), b.targets.begin(), b.targets.end());
    }
    EXPECT_EQ(rows, (std::vector<int64_t>{3, 3, 3, 3, 3}));
    ASSERT_EQ(inputs.size(), 15u * 64);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(inputs[i], static_cast<int32_t>(i));
      ASSERT_EQ(targets[i], static_cast<int32_t>(i + 1));
    }
    batches.reset();
  }
  SequentialBatches partial(file, 4, 64);  // 15 windows: 4, 4, 4, 3
  TokenBatch b;
  std::vector<int64_t> rows;
  while (partial.next(b)) rows.push_back(b.rows);
  EXPECT_EQ(rows, (std::vector<int64_t>{4, 4, 4, 3}));
}

}  // namespace
}  // namespace spillway
