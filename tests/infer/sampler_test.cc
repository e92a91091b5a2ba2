#include "infer/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
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

TEST(TokenSampler, RejectsBadOptions) {
  EXPECT_THROW(TokenSampler(SamplingOptions{1.0, 0, 0.0, 1}), Error);
  EXPECT_THROW(TokenSampler(SamplingOptions{1.0, -1, 1.0, 1}), Error);
}

}  // namespace
}  // namespace spillway::infer
