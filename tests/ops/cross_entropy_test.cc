#include "ops/cross_entropy.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"
#include "testing/threads.h"

namespace spillway::ops {
namespace {

using spillway::testing::bytes_of;
using spillway::testing::cast_vector;
using spillway::testing::numeric_gradient;
using spillway::testing::random_vector;
using spillway::testing::rel_error;

// Each value rounded to float, so the float kernel and the double reference
// read the same inputs.
std::vector<double> as_float_values(const std::vector<double>& v) {
  auto rounded = cast_vector<float>(v);
  return {rounded.begin(), rounded.end()};
}

// Targets in [0, vocab), with about one row in four ignored (-100).
std::vector<int32_t> random_targets(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (auto& t : targets) t = rng() % 4 == 0 ? -100 : dist(rng);
  if (rows > 0) targets[0] = dist(rng);
  return targets;
}

struct Reference {
  std::vector<double> lse, loss, dlogits;
};

// Softmax written out in double, one row at a time.
Reference reference(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                    int64_t rows, int64_t vocab, double dloss) {
  Reference ref;
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double max = logits[r * vocab];
    for (int64_t j = 1; j < vocab; ++j) max = std::max(max, logits[r * vocab + j]);
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[r * vocab + j] - max);
    ref.lse.push_back(max + std::log(sum));
    if (targets[r] >= 0) {
      total += ref.lse[r] - logits[r * vocab + targets[r]];
      ++counted;
    }
  }
  ref.loss.push_back(counted ? total / counted : 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < vocab; ++j) {
      double g = 0;
      if (targets[r] >= 0) {
        g = std::exp(logits[r * vocab + j] - ref.lse[r]) - (j == targets[r] ? 1 : 0);
        g *= dloss / counted;
      }
      ref.dlogits.push_back(g);
    }
  }
  return ref;
}

void check_float_against_reference(double offset, uint64_t seed) {
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t vocab : {1, 5, 64, 129}) {
      auto logits = as_float_values(random_vector(rows * vocab, seed++, offset - 8, offset + 8));
      auto targets = random_targets(rows, vocab, seed++);
      const double dloss = 0.75;
      Reference ref = reference(logits, targets, rows, vocab, dloss);
      auto xf = cast_vector<float>(logits);
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> lse(rows, nan), loss(1, nan), dlogits(xf.size(), nan);
      const float dloss_f = static_cast<float>(dloss);
      cross_entropy_forward<float>(xf.data(), targets.data(), lse.data(), loss.data(), rows, vocab);
      cross_entropy_backward<float>(xf.data(), targets.data(), lse.data(), &dloss_f, dlogits.data(),
                                    rows, vocab);
      EXPECT_LE(rel_error(lse, ref.lse), 1e-5) << "rows=" << rows << " vocab=" << vocab;
      // A vocabulary of one gives loss 0 and zero gradients, which rel_error
      // then compares absolutely.
      EXPECT_LE(rel_error(loss, ref.loss), 1e-5) << "rows=" << rows << " vocab=" << vocab;
      EXPECT_LE(rel_error(dlogits, ref.dlogits), 1e-5) << "rows=" << rows << " vocab=" << vocab;
    }
  }
}

TEST(CrossEntropy, FloatMatchesReference) { check_float_against_reference(0.0, 1); }

// Logits near 100: exp overflows float without the row max taken out.
TEST(CrossEntropy, FloatStaysFiniteForLargeLogits) { check_float_against_reference(100.0, 500); }

TEST(CrossEntropy, NoCountedRowsGivesZero) {
  std::vector<float> logits = {1, 2, 3, 4, 5, 6}, lse(2), loss(1, 1.0f);
  std::vector<float> dlogits(6, std::numeric_limits<float>::quiet_NaN());
  std::vector<int32_t> targets = {-100, -1};
  const float dloss = 1.0f;
  cross_entropy_forward<float>(logits.data(), targets.data(), lse.data(), loss.data(), 2, 3);
  cross_entropy_backward<float>(logits.data(), targets.data(), lse.data(), &dloss, dlogits.data(), 2, 3);
  EXPECT_EQ(loss[0], 0.0f);
  EXPECT_EQ(dlogits, std::vector<float>(6, 0.0f));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 100;
  for (const auto& shape : {std::pair<int64_t, int64_t>{5, 7}, {1, 1}, {3, 33}, {8, 2}}) {
    const int64_t rows = shape.first, vocab = shape.second;  // lambdas capture variables, not bindings
    auto logits = random_vector(rows * vocab, seed++, -3, 3);
    auto targets = random_targets(rows, vocab, seed++);
    const double dloss = 1.7;
    std::vector<double> lse(rows), loss(1);
    auto scalar = [&] {
      cross_entropy_forward<double>(logits.data(), targets.data(), lse.data(), loss.data(), rows, vocab);
      return dloss * loss[0];
    };
    auto want = numeric_gradient(logits, scalar);
    scalar();  // lse of the unperturbed logits
    std::vector<double> dlogits(logits.size());
    cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), &dloss,
                                   dlogits.data(), rows, vocab);
    EXPECT_LE(rel_error(dlogits, want), 1e-6) << "rows=" << rows << " vocab=" << vocab;
  }
}

TEST(CrossEntropy, RejectsTargetPastVocabulary) {
  const int64_t rows = 4, vocab = 7;
  std::vector<float> logits(rows * vocab, 0.5f), lse(rows), loss(1), dlogits(rows * vocab);
  std::vector<int32_t> targets = {1, -100, 7, 3};
  const float dloss = 1.0f;
  for (int pass = 0; pass < 3; ++pass) {
    try {
      if (pass == 0) {
        cross_entropy_forward<float>(logits.data(), targets.data(), lse.data(), loss.data(), rows, vocab);
      } else if (pass == 1) {
        cross_entropy_backward<float>(logits.data(), targets.data(), lse.data(), &dloss,
                                      dlogits.data(), rows, vocab);
      } else {
        cross_entropy_forward_backward<float>(logits.data(), targets.data(), 1.0, lse.data(), loss.data(),
                                              dlogits.data(), rows, vocab);
      }
      ADD_FAILURE() << "no error for target 7 of vocab 7";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_EQ(e.thing(), "cross_entropy");
      EXPECT_NE(message.find("row 2"), std::string::npos) << message;
      EXPECT_NE(message.find("target 7"), std::string::npos) << message;
    }
  }
}

// The fused pass against forward then backward, whose dloss is the constant
// rounded to T (as the seed's fill writes it): every bit of lse, loss and
// dlogits, outputs poisoned first. 0.3 is not a float, -2.5 flips the sign,
// and 1000 x 129 runs the rows on threads.
template <typename T>
void expect_fused_equals_separate() {
  uint64_t seed = 300;
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {33, 129}, {1000, 129}}) {
    for (double dloss : {1.0, 0.3, -2.5}) {
      const auto logits = cast_vector<T>(random_vector(rows * vocab, seed++, -8, 8));
      const auto targets = random_targets(rows, vocab, seed++);
      const T nan = std::numeric_limits<T>::quiet_NaN();
      std::vector<T> lse(rows, nan), loss(1, nan), dlogits(logits.size(), nan);
      const T dloss_t = static_cast<T>(dloss);
      cross_entropy_forward<T>(logits.data(), targets.data(), lse.data(), loss.data(), rows, vocab);
      cross_entropy_backward<T>(logits.data(), targets.data(), lse.data(), &dloss_t, dlogits.data(), rows, vocab);

      std::vector<T> fused_lse(rows, nan), fused_loss(1, nan), fused_dlogits(logits.size(), nan);
      cross_entropy_forward_backward<T>(logits.data(), targets.data(), dloss, fused_lse.data(), fused_loss.data(),
                                        fused_dlogits.data(), rows, vocab);
      const std::string where = "rows=" + std::to_string(rows) + " vocab=" + std::to_string(vocab) +
                                " dloss=" + std::to_string(dloss);
      EXPECT_EQ(bytes_of(fused_lse), bytes_of(lse)) << where;
      EXPECT_EQ(bytes_of(fused_loss), bytes_of(loss)) << where;
      EXPECT_EQ(bytes_of(fused_dlogits), bytes_of(dlogits)) << where;
    }
  }
}

TEST(CrossEntropy, ForwardBackwardEqualsSeparatePassesBitForBit) {
  expect_fused_equals_separate<float>();
  expect_fused_equals_separate<double>();
}

// dlogits written over the logits (as the training step runs it): the same
// bits as into a buffer of its own, the target's logit included.
template <typename T>
void expect_in_place_equals_apart() {
  uint64_t seed = 700;
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {1000, 129}}) {
    const auto logits = cast_vector<T>(random_vector(rows * vocab, seed++, -8, 8));
    const auto targets = random_targets(rows, vocab, seed++);
    const T nan = std::numeric_limits<T>::quiet_NaN();
    std::vector<T> lse(rows, nan), loss(1, nan), dlogits(logits.size(), nan);
    cross_entropy_forward_backward<T>(logits.data(), targets.data(), 0.3, lse.data(), loss.data(), dlogits.data(),
                                      rows, vocab);
    std::vector<T> in_place = logits, in_place_lse(rows, nan), in_place_loss(1, nan);
    cross_entropy_forward_backward<T>(in_place.data(), targets.data(), 0.3, in_place_lse.data(),
                                      in_place_loss.data(), in_place.data(), rows, vocab);
    const std::string where = "rows=" + std::to_string(rows) + " vocab=" + std::to_string(vocab);
    EXPECT_EQ(bytes_of(in_place), bytes_of(dlogits)) << where;
    EXPECT_EQ(bytes_of(in_place_lse), bytes_of(lse)) << where;
    EXPECT_EQ(bytes_of(in_place_loss), bytes_of(loss)) << where;
  }
}

TEST(CrossEntropy, ForwardBackwardInPlaceEqualsApart) {
  expect_in_place_equals_apart<float>();
  expect_in_place_equals_apart<double>();
}

// A row that does not count has a zero gradient and adds nothing to the loss
// whatever its logits hold, and with no row counted the loss is 0.
TEST(CrossEntropy, ForwardBackwardLeavesUncountedRowsOut) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits = {1, 2, 3, 4, inf, 6, 0, 0, 0}, lse(3), loss(1);
  std::vector<float> dlogits(9, std::numeric_limits<float>::quiet_NaN());
  cross_entropy_forward_backward<float>(logits.data(), std::vector<int32_t>{2, -100, 0}.data(), 2.0, lse.data(),
                                        loss.data(), dlogits.data(), 3, 3);
  const double lse0 = 3 + std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  const double lse2 = std::log(3.0);
  EXPECT_NEAR(loss[0], ((lse0 - 3) + lse2) / 2, 1e-6);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(dlogits[j], 0.0f) << j;
  // dloss / counted = 1: the plain softmax minus the one-hot.
  EXPECT_NEAR(dlogits[2], std::exp(3 - lse0) - 1, 1e-6);
  EXPECT_NEAR(dlogits[6], 1.0 / 3 - 1, 1e-6);

  std::fill(dlogits.begin(), dlogits.end(), std::numeric_limits<float>::quiet_NaN());
  loss[0] = 1.0f;
  cross_entropy_forward_backward<float>(logits.data(), std::vector<int32_t>{-1, -100, -7}.data(), 1.0, lse.data(),
                                        loss.data(), dlogits.data(), 3, 3);
  EXPECT_EQ(loss[0], 0.0f);
  EXPECT_EQ(dlogits, std::vector<float>(9, 0.0f));
}

// The double kernel shows any change in the order of the loss's sum in its
// low bits; the float one sums in double and rounds, which hides most of them.
template <typename T>
void expect_independent_of_threads() {
  const int64_t rows = 1000, vocab = 129;
  auto logits = cast_vector<T>(random_vector(rows * vocab, 21, -8, 8));
  auto targets = random_targets(rows, vocab, 22);
  const T dloss = 1;
  testing::expect_same_bits_with_1_and_4_threads([&] {
    // lse, loss, dlogits: the separate passes', then the fused pass's.
    std::vector<T> out(2 * (rows + 1 + rows * vocab));
    T* lse = out.data();
    T* loss = lse + rows;
    T* dlogits = loss + 1;
    cross_entropy_forward<T>(logits.data(), targets.data(), lse, loss, rows, vocab);
    cross_entropy_backward<T>(logits.data(), targets.data(), lse, &dloss, dlogits, rows, vocab);
    T* fused = dlogits + rows * vocab;
    cross_entropy_forward_backward<T>(logits.data(), targets.data(), 1.0, fused, fused + rows, fused + rows + 1,
                                      rows, vocab);
    return out;
  });
}

TEST(CrossEntropy, DoesNotDependOnThreadCount) {
  expect_independent_of_threads<float>();
  expect_independent_of_threads<double>();
}

// The weighted loss (the per-token loss mask) written out in double:
// sum over counted rows of w[r] * (lse[r] - logits[r, target]), and
// dlogits = dloss * w[r] * (softmax - onehot) on counted rows.
Reference weighted_reference(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                             const std::vector<double>& weights, int64_t rows, int64_t vocab, double dloss) {
  Reference ref = reference(logits, targets, rows, vocab, 1.0);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] >= 0) total += weights[r] * (ref.lse[r] - logits[r * vocab + targets[r]]);
    for (int64_t j = 0; j < vocab; ++j) {
      double& g = ref.dlogits[r * vocab + j];
      g = targets[r] >= 0 ? dloss * weights[r] * (std::exp(logits[r * vocab + j] - ref.lse[r]) - (j == targets[r]))
                          : 0.0;
    }
  }
  ref.loss = {total};
  return ref;
}

// A mask scaled as training scales it: 1/N on each of `counted` random rows,
// 0 elsewhere.
std::vector<double> mask_weights(const std::vector<int32_t>& targets, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(targets.size(), 0.0);
  int64_t counted = 0;
  for (size_t r = 0; r < w.size(); ++r) {
    if (rng() % 3 != 0) w[r] = 1.0, ++counted;
  }
  for (double& x : w) x /= std::max<int64_t>(counted, 1);
  return w;
}

TEST(CrossEntropyWeighted, FloatMatchesReference) {
  uint64_t seed = 900;
  for (int64_t rows : {1, 7, 33}) {
    for (int64_t vocab : {1, 5, 129}) {
      auto logits = as_float_values(random_vector(rows * vocab, seed++, -8, 8));
      auto targets = random_targets(rows, vocab, seed++);
      auto weights = as_float_values(random_vector(rows, seed++, 0, 2));
      const double dloss = 0.75;
      const Reference ref = weighted_reference(logits, targets, weights, rows, vocab, dloss);
      const auto xf = cast_vector<float>(logits), wf = cast_vector<float>(weights);
      const float nan = std::numeric_limits<float>::quiet_NaN(), dloss_f = 0.75f;
      std::vector<float> lse(rows, nan), loss(1, nan), dlogits(xf.size(), nan);
      cross_entropy_forward<float>(xf.data(), targets.data(), lse.data(), loss.data(), rows, vocab, wf.data());
      cross_entropy_backward<float>(xf.data(), targets.data(), lse.data(), &dloss_f, dlogits.data(), rows, vocab,
                                    wf.data());
      const std::string where = "rows=" + std::to_string(rows) + " vocab=" + std::to_string(vocab);
      EXPECT_LE(rel_error(lse, ref.lse), 1e-5) << where;
      EXPECT_LE(rel_error(loss, ref.loss), 1e-5) << where;
      EXPECT_LE(rel_error(dlogits, ref.dlogits), 1e-5) << where;
    }
  }
}

// The masked loss's gradient against float64 finite differences.
TEST(CrossEntropyWeighted, BackwardMatchesFiniteDifferences) {
  uint64_t seed = 1000;
  for (const auto& shape : {std::pair<int64_t, int64_t>{5, 7}, {1, 1}, {9, 33}, {8, 2}}) {
    const int64_t rows = shape.first, vocab = shape.second;  // lambdas capture variables, not bindings
    auto logits = random_vector(rows * vocab, seed++, -3, 3);
    auto targets = random_targets(rows, vocab, seed++);
    const auto weights = mask_weights(targets, seed++);
    const double dloss = 1.7;
    std::vector<double> lse(rows), loss(1);
    auto scalar = [&] {
      cross_entropy_forward<double>(logits.data(), targets.data(), lse.data(), loss.data(), rows, vocab,
                                    weights.data());
      return dloss * loss[0];
    };
    auto want = numeric_gradient(logits, scalar);
    scalar();
    std::vector<double> dlogits(logits.size());
    cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), &dloss, dlogits.data(), rows, vocab,
                                   weights.data());
    EXPECT_LE(rel_error(dlogits, want), 1e-6) << "rows=" << rows << " vocab=" << vocab;
  }
}

TEST(CrossEntropyWeighted, ForwardBackwardEqualsSeparatePassesBitForBit) {
  uint64_t seed = 1100;
  for (auto [rows, vocab] : {std::pair<int64_t, int64_t>{7, 5}, {1000, 129}}) {
    const auto logits = cast_vector<float>(random_vector(rows * vocab, seed++, -8, 8));
    const auto targets = random_targets(rows, vocab, seed++);
    const auto weights = cast_vector<float>(random_vector(rows, seed++, 0, 1));
    const float nan = std::numeric_limits<float>::quiet_NaN(), dloss = 0.3f;
    std::vector<float> lse(rows, nan), loss(1, nan), dlogits(logits.size(), nan);
    cross_entropy_forward<float>(logits.data(), targets.data(), lse.data(), loss.data(), rows, vocab, weights.data());
    cross_entropy_backward<float>(logits.data(), targets.data(), lse.data(), &dloss, dlogits.data(), rows, vocab,
                                  weights.data());
    std::vector<float> fused_lse(rows, nan), fused_loss(1, nan), fused_dlogits(logits.size(), nan);
    cross_entropy_forward_backward<float>(logits.data(), targets.data(), 0.3, fused_lse.data(), fused_loss.data(),
                                          fused_dlogits.data(), rows, vocab, weights.data());
    EXPECT_EQ(bytes_of(fused_lse), bytes_of(lse)) << rows;
    EXPECT_EQ(bytes_of(fused_loss), bytes_of(loss)) << rows;
    EXPECT_EQ(bytes_of(fused_dlogits), bytes_of(dlogits)) << rows;
  }
}

// What gradient accumulation relies on: rows split into micro-batches that
// count different numbers of tokens, each weighted 1/N with N counting the
// tokens of all of them, sum to the mean loss and gradient of the one big
// batch; the mean of each part's own mean would not.
TEST(CrossEntropyWeighted, MicroBatchesSumToTheWholeBatch) {
  const int64_t rows = 12, vocab = 9, split = 3;
  const auto logits = random_vector(rows * vocab, 1200, -4, 4);
  // The first part counts its 3 rows, the second 1 of its 9.
  std::vector<int32_t> targets(rows, -100);
  for (int64_t r = 0; r < split; ++r) targets[r] = static_cast<int32_t>(r * 2 + 1);
  targets[7] = 4;
  int64_t counted = 0;
  for (int32_t t : targets) counted += t >= 0;
  const double dloss = 1.0;
  std::vector<double> lse(rows), whole_loss(1), whole_grad(logits.size());
  cross_entropy_forward<double>(logits.data(), targets.data(), lse.data(), whole_loss.data(), rows, vocab);
  cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), &dloss, whole_grad.data(), rows, vocab);

  const std::vector<double> weights(rows, 1.0 / static_cast<double>(counted));
  double summed_loss = 0, mean_of_means = 0;
  std::vector<double> summed_grad(logits.size());
  for (auto [first, n] : {std::pair<int64_t, int64_t>{0, split}, {split, rows - split}}) {
    std::vector<double> part_loss(1), part_mean(1);
    cross_entropy_forward<double>(logits.data() + first * vocab, targets.data() + first, lse.data() + first,
                                  part_loss.data(), n, vocab, weights.data() + first);
    cross_entropy_backward<double>(logits.data() + first * vocab, targets.data() + first, lse.data() + first, &dloss,
                                   summed_grad.data() + first * vocab, n, vocab, weights.data() + first);
    cross_entropy_forward<double>(logits.data() + first * vocab, targets.data() + first, lse.data() + first,
                                  part_mean.data(), n, vocab);
    summed_loss += part_loss[0];
    mean_of_means += part_mean[0] / 2;
  }
  EXPECT_NEAR(summed_loss, whole_loss[0], 1e-12);
  EXPECT_LE(rel_error(summed_grad, whole_grad), 1e-12);
  EXPECT_GT(std::abs(mean_of_means - whole_loss[0]), 1e-3);  // why the weights exist
}

// A row that does not count adds nothing and its weight is not read: a NaN
// weight there changes nothing.
TEST(CrossEntropyWeighted, UncountedRowsIgnoreTheirWeight) {
  std::vector<float> logits = {1, 2, 3, 4, 5, 6}, lse(2), loss(1), dlogits(6);
  const std::vector<float> weights = {0.5f, std::numeric_limits<float>::quiet_NaN()};
  const std::vector<int32_t> targets = {2, -100};
  cross_entropy_forward_backward<float>(logits.data(), targets.data(), 1.0, lse.data(), loss.data(), dlogits.data(), 2,
                                        3, weights.data());
  const double lse0 = 3 + std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  EXPECT_NEAR(loss[0], 0.5 * (lse0 - 3), 1e-6);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(dlogits[j], 0.0f) << j;
  EXPECT_NEAR(dlogits[2], 0.5 * (std::exp(3 - lse0) - 1), 1e-6);
}

}  // namespace
}  // namespace spillway::ops
