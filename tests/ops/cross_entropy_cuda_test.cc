// GPU fused cross-entropy against the CPU kernels on the same (bf16-rounded)
// logits: vocabularies that are not multiples of 8 (rows start off 16-byte
// boundaries), LLaMA-3's 128256, ignored rows, unaligned buffers, targets past
// the vocabulary, and run-to-run bit equality; each for the separate forward
// and backward kernels and for the one that does both, which must also give
// the separate kernels' bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/cross_entropy.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::widen;
using spillway::testing::as_double;
using spillway::testing::bits_of;

using spillway::testing::random_vector;
using spillway::testing::rel_error;

std::vector<uint32_t> float_bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(float_bits(f));
  return out;
}

// Targets in [0, vocab), with every `ignore_every`-th row -100 (ignored).
std::vector<int32_t> random_targets(int64_t rows, int64_t vocab, int64_t ignore_every,
                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    targets[r] = ignore_every > 0 && r % ignore_every == 1 ? -100 : static_cast<int32_t>(dist(rng));
  }
  return targets;
}

struct Outputs {
  std::vector<float> lse;
  float loss;
  std::vector<bf16> dlogits;  // the whole buffer, offset included
};

constexpr float kDloss = 1.7f;

enum class Kernels { separate, fused };

std::string name_of(Kernels k) { return k == Kernels::fused ? "fused" : "separate"; }

// The loss and dlogits on the GPU, logits and dlogits starting at the given
// element offsets into their buffers; every output poisoned first. With
// `weights` (one per row) the weighted loss, else the mean.
Outputs run_gpu(Kernels kernels, const std::vector<bf16>& logits, const std::vector<int32_t>& targets, int64_t rows,
                int64_t vocab, int64_t logits_offset, int64_t dlogits_offset,
                const std::vector<float>& weights = {}) {
  DeviceArray<bf16> dlogits_in(logits);
  DeviceArray<int32_t> dtargets(targets);
  DeviceArray<float> dweights(weights.empty() ? std::vector<float>{0.0f} : weights);
  const float* w = weights.empty() ? nullptr : dweights.get();
  DeviceArray<float> lse(static_cast<size_t>(rows)), loss(1), dloss(std::vector<float>{kDloss});
  DeviceArray<bf16> dlogits(static_cast<size_t>(rows * vocab + dlogits_offset));
  const bool fused = kernels == Kernels::fused;
  DeviceArray<char> workspace(fused ? cross_entropy_forward_backward_workspace_bytes(rows)
                                    : cross_entropy_forward_workspace_bytes(rows));
  const bf16* x = dlogits_in.get() + logits_offset;
  if (fused) {
    cross_entropy_forward_backward_cuda(x, dtargets.get(), kDloss, lse.get(), loss.get(),
                                        dlogits.get() + dlogits_offset, rows, vocab, workspace.get(), nullptr, 0, w);
  } else {
    cross_entropy_forward_cuda(x, dtargets.get(), lse.get(), loss.get(), rows, vocab, workspace.get(), nullptr, w);
    cross_entropy_backward_cuda(x, dtargets.get(), lse.get(), dloss.get(), dlogits.get() + dlogits_offset, rows,
                                vocab, nullptr, w);
  }
  return {lse.download(), loss.download()[0], dlogits.download()};
}

struct CeCase {
  int64_t rows, vocab, ignore_every, logits_offset, dlogits_offset;
};

std::string describe(const CeCase& c, Kernels kernels) {
  return name_of(kernels) + ", rows " + std::to_string(c.rows) + " vocab " + std::to_string(c.vocab) + " offsets " +
         std::to_string(c.logits_offset) + "/" + std::to_string(c.dlogits_offset);
}

// With `weighted`, per-row weights in [0, 2) (the per-token loss mask).
void check_against_cpu(const CeCase& c, Kernels kernels, bool weighted = false) {
  const std::string where = describe(c, kernels) + (weighted ? ", weighted" : "");
  const int64_t n = c.rows * c.vocab;
  const auto logits = random_bf16(n + c.logits_offset, static_cast<uint64_t>(n), -8, 8);
  const auto targets = random_targets(c.rows, c.vocab, c.ignore_every, static_cast<uint64_t>(n));
  std::vector<float> weights;
  if (weighted) {
    for (double w : random_vector(c.rows, static_cast<uint64_t>(n) + 3, 0, 2)) weights.push_back(static_cast<float>(w));
  }
  const Outputs got = run_gpu(kernels, logits, targets, c.rows, c.vocab, c.logits_offset, c.dlogits_offset, weights);

  const auto fx = widen(logits);
  const float* x = fx.data() + c.logits_offset;
  const float* w = weighted ? weights.data() : nullptr;
  std::vector<float> want_lse(static_cast<size_t>(c.rows));
  float want_loss = 0;
  cross_entropy_forward(x, targets.data(), want_lse.data(), &want_loss, c.rows, c.vocab, w);
  // Backward reads the GPU's lse, so both backends see the same inputs.
  std::vector<float> want_dlogits(static_cast<size_t>(n));
  cross_entropy_backward(x, targets.data(), got.lse.data(), &kDloss, want_dlogits.data(), c.rows,
                         c.vocab, w);

  EXPECT_LT(rel_error(got.lse, as_double(want_lse)), 1e-5) << "lse, " << where;
  EXPECT_LT(rel_error(std::vector<float>{got.loss}, {static_cast<double>(want_loss)}), 1e-5)
      << "loss, " << where;
  const std::vector<bf16> dlogits(got.dlogits.begin() + c.dlogits_offset, got.dlogits.end());
  EXPECT_LT(rel_error(widen(dlogits), as_double(want_dlogits)), 1e-2) << "dlogits, " << where;
  for (int64_t r = 0; r < c.rows; ++r) {
    if (targets[r] >= 0) continue;
    for (int64_t j = 0; j < c.vocab; ++j) {
      ASSERT_EQ(dlogits[r * c.vocab + j].bits, 0) << "ignored row " << r << ", " << where;
    }
  }
}

TEST(CrossEntropyCuda, MatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const CeCase cases[] = {
      {1, 1, 0, 0, 0},       {3, 7, 0, 0, 0},     {5, 129, 3, 0, 0},
      {257, 1000, 5, 0, 0},  {4, 50257, 3, 0, 0}, {64, 32000, 4, 0, 0},
      {16, 128256, 5, 0, 0}, {7, 50257, 0, 1, 1},  // both one element off: the head/tail split path
      {9, 32000, 4, 1, 0},  // logits and dlogits misaligned apart: all scalar backward
      {3, 128256, 0, 3, 2},
  };
  for (const CeCase& c : cases) {
    check_against_cpu(c, Kernels::separate);
    check_against_cpu(c, Kernels::fused);
  }
}

// The weighted loss (the per-token loss mask) against the CPU's, and the
// fused kernel's bits against the separate ones'.
TEST(CrossEntropyCuda, WeightedMatchesCpuAndFusedEqualsSeparate) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const CeCase cases[] = {
      {1, 1, 0, 0, 0}, {5, 129, 3, 0, 0}, {257, 1000, 5, 0, 0}, {16, 128256, 5, 0, 0}, {9, 32000, 4, 1, 0},
  };
  for (const CeCase& c : cases) {
    check_against_cpu(c, Kernels::separate, true);
    check_against_cpu(c, Kernels::fused, true);
    const int64_t n = c.rows * c.vocab;
    const auto logits = random_bf16(n + c.logits_offset, static_cast<uint64_t>(n) + 21, -8, 8);
    const auto targets = random_targets(c.rows, c.vocab, c.ignore_every, static_cast<uint64_t>(n) + 22);
    std::vector<float> weights;
    for (double w : random_vector(c.rows, static_cast<uint64_t>(n) + 23, 0, 1)) weights.push_back(static_cast<float>(w));
    const Outputs want =
        run_gpu(Kernels::separate, logits, targets, c.rows, c.vocab, c.logits_offset, c.dlogits_offset, weights);
    const Outputs got =
        run_gpu(Kernels::fused, logits, targets, c.rows, c.vocab, c.logits_offset, c.dlogits_offset, weights);
    const std::string at = describe(c, Kernels::fused) + ", weighted";
    EXPECT_EQ(float_bits(got.loss), float_bits(want.loss)) << "loss, " << at;
    EXPECT_EQ(float_bits_of(got.lse), float_bits_of(want.lse)) << "lse, " << at;
    EXPECT_EQ(bits_of(got.dlogits), bits_of(want.dlogits)) << "dlogits, " << at;
  }
}

// The fused kernel gives the separate kernels' lse, loss and dlogits bit for
// bit: the same fixed-order sums, the same gradient arithmetic. More rows than
// the fused grid has blocks (each block then takes several rows in turn).
TEST(CrossEntropyCuda, FusedEqualsSeparateKernelsBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const CeCase cases[] = {
      {1, 1, 0, 0, 0},      {3, 7, 0, 0, 0},       {5, 129, 3, 0, 0},   {2000, 1000, 3, 0, 0},
      {7, 50257, 0, 1, 1},  {9, 32000, 4, 1, 0},   {600, 128256, 5, 0, 0},
  };
  for (const CeCase& c : cases) {
    const int64_t n = c.rows * c.vocab;
    const auto logits = random_bf16(n + c.logits_offset, static_cast<uint64_t>(n) + 11, -8, 8);
    const auto targets = random_targets(c.rows, c.vocab, c.ignore_every, static_cast<uint64_t>(n) + 12);
    const Outputs want = run_gpu(Kernels::separate, logits, targets, c.rows, c.vocab, c.logits_offset, c.dlogits_offset);
    const Outputs got = run_gpu(Kernels::fused, logits, targets, c.rows, c.vocab, c.logits_offset, c.dlogits_offset);
    const std::string at = describe(c, Kernels::fused);
    EXPECT_EQ(float_bits(got.loss), float_bits(want.loss)) << "loss, " << at;
    EXPECT_EQ(float_bits_of(got.lse), float_bits_of(want.lse)) << "lse, " << at;
    EXPECT_EQ(bits_of(got.dlogits), bits_of(want.dlogits)) << "dlogits, " << at;
  }
}

// dlogits written over the logits, as the training step runs it (the logits'
// buffer passes to dlogits, graph::in_place_input): the bits of a separate
// dlogits buffer, on the vector path and the head/tail path.
TEST(CrossEntropyCuda, FusedInPlaceEqualsApartBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const CeCase cases[] = {{3, 7, 0, 0, 0}, {2000, 1000, 3, 0, 0}, {7, 50257, 0, 1, 1}, {600, 128256, 5, 0, 0}};
  for (const CeCase& c : cases) {
    const int64_t n = c.rows * c.vocab;
    const auto logits = random_bf16(n + c.logits_offset, static_cast<uint64_t>(n) + 21, -8, 8);
    const auto targets = random_targets(c.rows, c.vocab, c.ignore_every, static_cast<uint64_t>(n) + 22);
    const Outputs want = run_gpu(Kernels::fused, logits, targets, c.rows, c.vocab, c.logits_offset, c.logits_offset);

    DeviceArray<bf16> buffer(logits);
    DeviceArray<int32_t> dtargets(targets);
    DeviceArray<float> lse(static_cast<size_t>(c.rows)), loss(1);
    lse.poison();
    loss.poison();
    DeviceArray<char> workspace(cross_entropy_forward_backward_workspace_bytes(c.rows));
    bf16* x = buffer.get() + c.logits_offset;
    cross_entropy_forward_backward_cuda(x, dtargets.get(), kDloss, lse.get(), loss.get(), x, c.rows, c.vocab,
                                        workspace.get(), nullptr);
    const std::string at = describe(c, Kernels::fused) + ", in place";
    const auto got = buffer.download();
    EXPECT_EQ(float_bits(loss.download()[0]), float_bits(want.loss)) << "loss, " << at;
    EXPECT_EQ(float_bits_of(lse.download()), float_bits_of(want.lse)) << "lse, " << at;
    EXPECT_EQ(bits_of(std::vector<bf16>(got.begin() + c.logits_offset, got.end())),
              bits_of(std::vector<bf16>(want.dlogits.begin() + c.logits_offset, want.dlogits.end())))
        << "dlogits, " << at;
  }
}

TEST(CrossEntropyCuda, NoCountedRowGivesZeroLossAndGradient) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t rows = 6, vocab = 333;
  for (Kernels k : {Kernels::separate, Kernels::fused}) {
    const Outputs got = run_gpu(k, random_bf16(rows * vocab, 1, -8, 8), std::vector<int32_t>(rows, -100), rows,
                                vocab, 0, 0);
    EXPECT_EQ(got.loss, 0.0f) << name_of(k);
    for (bf16 h : got.dlogits) ASSERT_EQ(h.bits, 0) << name_of(k);
  }
}

TEST(CrossEntropyCuda, TargetPastVocabularyMakesLossNaN) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t rows = 4, vocab = 100;
  auto targets = random_targets(rows, vocab, 0, 2);
  targets[2] = static_cast<int32_t>(vocab);
  for (Kernels k : {Kernels::separate, Kernels::fused}) {
    const Outputs got = run_gpu(k, random_bf16(rows * vocab, 3, -8, 8), targets, rows, vocab, 0, 0);
    EXPECT_TRUE(std::isnan(got.loss)) << name_of(k);
    EXPECT_TRUE(std::isnan(to_float(got.dlogits[2 * vocab]))) << name_of(k);
    EXPECT_FALSE(std::isnan(to_float(got.dlogits[0]))) << name_of(k);
  }
}

TEST(CrossEntropyCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t rows = 48, vocab = 128256;
  const auto logits = random_bf16(rows * vocab, 4, -8, 8);
  const auto targets = random_targets(rows, vocab, 7, 5);
  for (Kernels k : {Kernels::separate, Kernels::fused}) {
    const Outputs a = run_gpu(k, logits, targets, rows, vocab, 0, 0);
    const Outputs b = run_gpu(k, logits, targets, rows, vocab, 0, 0);
    EXPECT_EQ(float_bits(a.loss), float_bits(b.loss)) << name_of(k);
    EXPECT_EQ(float_bits_of(a.lse), float_bits_of(b.lse)) << name_of(k);
    EXPECT_EQ(bits_of(a.dlogits), bits_of(b.dlogits)) << name_of(k);
  }
}

}  // namespace
}  // namespace spillway::ops
