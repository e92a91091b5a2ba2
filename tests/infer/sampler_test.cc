#include "infer/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "base/status.h"

namespace spillway::infer {
namespace {

TEST(TokenSampler, GreedyTakesTheArgmax) {
  TokenSampler s(SamplingOptions{0.0, 0, 1.0, 1});
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.next(logits), 1);
}

TEST(TokenSampler, TopKOfOneAndTinyTopPAreGreedy) {
  std::vector<float> logits{0.5f, 0.1f, 3.0f, 2.9f, -2.0f};
  TokenSampler k1(SamplingOptions{1.0, 1, 1.0, 7});
  TokenSampler p(SamplingOptions{1.0, 0, 1e-6, 7});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(k1.next(logits), 2);
    EXPECT_EQ(p.next(logits), 2);
  }
}

TEST(TokenSampler, FollowsTheSoftmaxAtTemperatureOne) {
  std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  TokenSampler s(SamplingOptions{1.0, 0, 1.0, 123});
  std::vector<int> counts(3);
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[static_cast<size_t>(s.next(logits))]++;
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(TokenSampler, TopKExcludesTheRest) {
  std::vector<float> logits{1.0f, 1.1f, 5.0f, 1.2f};
  TokenSampler s(SamplingOptions{2.0, 2, 1.0, 5});
  for (int i = 0; i < 200; ++i) {
    int32_t t = s.next(logits);
    EXPECT_TRUE(t == 2 || t == 3) << t;
  }
}

// Top-k over a larger vocabulary: exactly the k largest of 10,000 logits a
// thousandth apart come (the candidates' margin doubles past several of
// them), and where fewer than k logits are finite only those.
TEST(TokenSampler, TopKTakesTheKLargestOfAVocabulary) {
  std::vector<float> rising(10000);
  for (size_t i = 0; i < rising.size(); ++i) rising[i] = static_cast<float>(i) * 0.001f;
  TokenSampler ten(SamplingOptions{5.0, 10, 1.0, 3});
  std::vector<int> seen(10);
  for (int i = 0; i < 500; ++i) {
    const int32_t t = ten.next(rising);
    ASSERT_GE(t, 9990);
    seen[static_cast<size_t>(t - 9990)]++;
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0);
  std::vector<float> masked(5000, -std::numeric_limits<float>::infinity());
  masked[7] = 1.0f;
  masked[4000] = 2.0f;
  TokenSampler fifty(SamplingOptions{1.0, 50, 1.0, 3});
  for (int i = 0; i < 200; ++i) {
    const int32_t t = fifty.next(masked);
    ASSERT_TRUE(t == 7 || t == 4000) << t;
  }
}

// Top-p keeps the fewest best ids holding the mass and draws among them in
// proportion: 0.5 + 0.3 reach 0.7, so 2 and 3 never come, and 0 and 1 come
// 5 : 3; with top-k too, the nucleus is cut from the k best.
TEST(TokenSampler, TopPDrawsFromTheNucleusInProportion) {
  std::vector<float> logits{std::log(0.3f), std::log(0.15f), std::log(0.5f), std::log(0.05f)};
  for (const int64_t top_k : {int64_t{0}, int64_t{3}}) {
    TokenSampler s(SamplingOptions{1.0, top_k, 0.7, 11});
    std::vector<int> counts(4);
    const int n = 20000;
    for (int i = 0; i < n; ++i) counts[static_cast<size_t>(s.next(logits))]++;
    EXPECT_EQ(counts[1] + counts[3], 0) << "top_k " << top_k;
    EXPECT_NEAR(counts[2] / double(n), 0.625, 0.02) << "top_k " << top_k;
  }
}

// A vocabulary of LLaMA-3's size with every logit equal: the order breaks
// the ties by id, so top-p 0.001 keeps exactly the 129 lowest ids (the
// mass crosses inside one bucket of equal weights) and draws among them
// all; without top-p every id may come.
TEST(TokenSampler, ANucleusOfTiesIsTheLowestIds) {
  const std::vector<float> logits(128256, 0.25f);
  TokenSampler nucleus(SamplingOptions{0.7, 0, 0.001, 3});
  std::vector<int> counts(129);
  for (int i = 0; i < 645; ++i) {
    const int32_t t = nucleus.next(logits);
    ASSERT_LT(t, 129);
    counts[static_cast<size_t>(t)]++;
  }
  // About 5 draws an id: 0.9 of the 129 ids go undrawn on average, more
  // than 9 a few times in 10^8 runs.
  EXPECT_GT(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }), 120);
  TokenSampler all(SamplingOptions{0.7, 0, 1.0, 3});
  int32_t highest = 0;
  for (int i = 0; i < 200; ++i) highest = std::max(highest, all.next(logits));
  EXPECT_GT(highest, 64000);
}

// Ids spread over a vocabulary of 20 blocks of the draw's, the rest
// masked (-inf): the draw walks the blocks' sums to the right block and
// never lands on a masked id, and the four come in proportion to their
// softmax weights, with top-p too where it keeps them all.
TEST(TokenSampler, DrawsAcrossBlocksInProportionAndNeverAMaskedId) {
  std::vector<float> logits(20000, -std::numeric_limits<float>::infinity());
  const std::vector<size_t> ids{5, 3000, 9000, 19999};
  for (size_t i = 0; i < ids.size(); ++i) logits[ids[i]] = std::log(static_cast<float>(i + 1));
  for (const double top_p : {1.0, 0.999}) {
    TokenSampler s(SamplingOptions{1.0, 0, top_p, 17});
    std::vector<int> counts(ids.size());
    const int n = 1000;
    for (int i = 0; i < n; ++i) {
      const auto t = static_cast<size_t>(s.next(logits));
      const auto at = std::find(ids.begin(), ids.end(), t);
      ASSERT_NE(at, ids.end()) << "drew masked id " << t << " at top_p " << top_p;
      counts[static_cast<size_t>(at - ids.begin())]++;
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_NEAR(counts[i] / double(n), (i + 1) / 10.0, 0.05) << "id " << ids[i] << " top_p " << top_p;
    }
  }
}

// The same seed gives the same tokens; another seed other tokens.
TEST(TokenSampler, TheSeedFixesTheDraws) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i)) * 3;
  const auto draws = [&](uint64_t seed, double top_p) {
    TokenSampler s(SamplingOptions{0.9, 0, top_p, seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.next(logits));
    return out;
  };
  for (const double top_p : {1.0, 0.9}) {
    EXPECT_EQ(draws(5, top_p), draws(5, top_p));
    EXPECT_NE(draws(5, top_p), draws(6, top_p));
  }
}

// Logits a broken model gave: an error, not a crash inside a sort.
TEST(TokenSampler, ANaNOrNoFiniteLogitIsAnError) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const int64_t top_k : {int64_t{0}, int64_t{2}}) {
    TokenSampler s(SamplingOptions{0.8, top_k, 0.9, 1});
    EXPECT_THROW(s.next(std::vector<float>{0.5f, std::nanf(""), 1.0f}), Error);
    EXPECT_THROW(s.next(std::vector<float>{-inf, -inf, -inf}), Error);
    EXPECT_EQ(s.next(std::vector<float>{-inf, 2.0f, -inf}), 1);
  }
}

TEST(TokenSampler, RejectsBadOptions) {
  EXPECT_THROW(TokenSampler(SamplingOptions{1.0, 0, 0.0, 1}), Error);
  EXPECT_THROW(TokenSampler(SamplingOptions{1.0, -1, 1.0, 1}), Error);
}

}  // namespace
}  // namespace spillway::infer
