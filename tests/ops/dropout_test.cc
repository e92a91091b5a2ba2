#include "ops/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::random_vector;

std::vector<bool> kept(uint64_t key, uint32_t salt, int64_t n, double p) {
  std::vector<bool> out;
  const uint32_t threshold = dropout_threshold(p);
  for (int64_t i = 0; i < n; ++i) out.push_back(dropout_keeps(key, salt, static_cast<uint64_t>(i), threshold));
  return out;
}

double fraction_kept(const std::vector<bool>& k) {
  double n = 0;
  for (bool b : k) n += b;
  return n / static_cast<double>(k.size());
}

// Over a million draws the kept share lies within 5 standard deviations
// of 1 - p; p = 0 keeps everything.
TEST(Dropout, DropsTheGivenShare) {
  const int64_t n = 1 << 20;
  for (double p : {0.0, 0.05, 0.1, 0.5, 0.9}) {
    const double sd = std::sqrt(p * (1 - p) / static_cast<double>(n));
    EXPECT_NEAR(fraction_kept(kept(42, 3, n, p)), 1 - p, 5 * sd + 1e-12) << p;
  }
}

// Neighbouring keys, salts and elements draw independently: two masks of
// p = 0.5 agree on about half the elements, not all or none.
TEST(Dropout, DrawsDifferWithTheKeyAndTheSalt) {
  const int64_t n = 1 << 16;
  const auto base = kept(dropout_micro_batch_key(1337, 0, 0), 0, n, 0.5);
  const std::vector<std::vector<bool>> others = {
      kept(dropout_micro_batch_key(1337, 0, 1), 0, n, 0.5), kept(dropout_micro_batch_key(1337, 1, 0), 0, n, 0.5),
      kept(dropout_micro_batch_key(1338, 0, 0), 0, n, 0.5), kept(dropout_micro_batch_key(1337, 0, 0), 1, n, 0.5)};
  for (size_t k = 0; k < others.size(); ++k) {
    double same = 0;
    for (int64_t i = 0; i < n; ++i) same += base[static_cast<size_t>(i)] == others[k][static_cast<size_t>(i)];
    EXPECT_NEAR(same / static_cast<double>(n), 0.5, 0.02) << "mask " << k;
  }
  // Runs of neighbouring elements are not correlated either.
  double same = 0;
  for (int64_t i = 1; i < n; ++i) same += base[static_cast<size_t>(i)] == base[static_cast<size_t>(i - 1)];
  EXPECT_NEAR(same / static_cast<double>(n - 1), 0.5, 0.02);
  EXPECT_EQ(kept(dropout_micro_batch_key(1337, 0, 0), 0, n, 0.5), base) << "the draws are a pure function";
}

// The kernel: kept elements scaled by 1 / (1 - p) (rounded to the element
// type first), the rest 0, in place too; its mask is dropout_keeps'.
TEST(Dropout, KernelKeepsWhatTheDrawKeepsAndScalesIt) {
  const int64_t n = 70001;  // past the threads' threshold
  const double p = 0.2;
  const uint64_t key = dropout_micro_batch_key(7, 3, 2);
  const std::vector<double> x = random_vector(n, 11);
  std::vector<float> xf(x.begin(), x.end()), out(static_cast<size_t>(n));
  dropout_forward(xf.data(), out.data(), n, key, 9, dropout_threshold(p), 1 / (1 - p));
  const auto k = kept(key, 9, n, p);
  const float scale = static_cast<float>(1 / (1 - p));
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    ASSERT_EQ(out[u], k[u] ? xf[u] * scale : 0.0f) << i;
  }
  std::vector<double> xd = x;
  dropout_forward(xd.data(), xd.data(), n, key, 9, dropout_threshold(p), 1 / (1 - p));
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    ASSERT_EQ(xd[u], k[u] ? x[u] * (1 / (1 - p)) : 0.0) << i;
  }
}

// The key's two words are its low then high halves.
TEST(Dropout, KeyWordsAreLowThenHigh) {
  const uint64_t key = 0x89ABCDEF01234567ull;
  const int32_t words[2] = {static_cast<int32_t>(0x01234567u), static_cast<int32_t>(0x89ABCDEFu)};
  EXPECT_EQ(dropout_key(words), key);
  int32_t back[2];
  dropout_key_words(key, back);
  EXPECT_EQ(back[0], words[0]);
  EXPECT_EQ(back[1], words[1]);
}

}  // namespace
}  // namespace spillway::ops
