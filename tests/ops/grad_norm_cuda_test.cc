// sum_of_squares_many_cuda against sum_of_squares_cuda called on each tensor
// in order: the same double bit for bit (the resident and planned GPU engines
// report one norm through them), over tensors tiny, odd, empty and larger
// than one grid pass, and against a float64 sum so that neither can pass by
// leaving the poison in place.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/grad_norm.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::random_vector;

constexpr int64_t kGridElements = 1024 * 256;  // one pass of sum_of_squares_cuda's fixed grid

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Tensors back to back in one device buffer, each starting one float past
// a 16-byte boundary, as no engine lays them out, so no alignment is assumed.
struct Tensors {
  std::vector<int64_t> sizes;
  std::vector<float> host;
  std::vector<int64_t> offsets;
  DeviceArray<float> device;

  static std::vector<int64_t> offsets_of(const std::vector<int64_t>& sizes) {
    std::vector<int64_t> offsets;
    int64_t at = 1;
    for (int64_t n : sizes) {
      offsets.push_back(at);
      at += (n + 1 + 3) / 4 * 4;
    }
    offsets.push_back(at);
    return offsets;
  }

  explicit Tensors(std::vector<int64_t> s)
      : sizes(std::move(s)), offsets(offsets_of(sizes)), device(static_cast<size_t>(offsets.back())) {
    fill(1);
  }

  // Values whose scale differs from tensor to tensor, so the totals round
  // differently in other orders.
  void fill(uint64_t seed) {
    host.assign(static_cast<size_t>(offsets.back()), 0.0f);
    for (size_t t = 0; t < sizes.size(); ++t) {
      const double scale = std::ldexp(1.0, static_cast<int>(t % 7) * 3 - 9);
      const auto v = random_vector<float>(sizes[t], seed * 1000 + t, -scale, scale);
      std::copy(v.begin(), v.end(), host.begin() + offsets[t]);
    }
    device.upload(host);
  }

  std::vector<SquaresTensor> list() const {
    std::vector<SquaresTensor> out;
    for (size_t t = 0; t < sizes.size(); ++t) out.push_back({device.get() + offsets[t], sizes[t]});
    return out;
  }

  double reference() const {
    double s = 0;
    for (size_t t = 0; t < sizes.size(); ++t) {
      for (int64_t i = 0; i < sizes[t]; ++i) {
        const double v = host[static_cast<size_t>(offsets[t] + i)];
        s += v * v;
      }
    }
    return s;
  }
};

double sequential(const std::vector<SquaresTensor>& list) {
  DeviceArray<double> out(1);
  DeviceArray<char> workspace(sum_of_squares_workspace_bytes());
  for (size_t i = 0; i < list.size(); ++i) {
    sum_of_squares_cuda(list[i].data, list[i].n, out.get(), i > 0, workspace.get(), nullptr);
  }
  return out.download()[0];
}

double many(const SumOfSquaresList& list) {
  DeviceArray<double> out(1);  // poisoned: NaN until written
  sum_of_squares_many_cuda(list, out.get(), nullptr);
  return out.download()[0];
}

void expect_many_equals_sequential(const std::vector<int64_t>& sizes) {
  Tensors tensors(sizes);
  const std::vector<SquaresTensor> list = tensors.list();
  DeviceArray<char> memory(SumOfSquaresList::device_bytes(list));
  const SumOfSquaresList many_list(list, memory.get(), nullptr);
  ASSERT_EQ(many_list.size(), static_cast<int64_t>(sizes.size()));
  // Twice per contents (the list's workspace must be ready again after a
  // call), and again after the tensors change, as gradients do every step.
  for (uint64_t seed : {1, 1, 2}) {
    tensors.fill(seed);
    const double want = sequential(list);
    const double got = many(many_list);
    EXPECT_EQ(bits(got), bits(want)) << "seed " << seed << ": many " << got << ", sequential " << want;
    const double ref = tensors.reference();
    EXPECT_LE(std::abs(want - ref), 1e-10 * ref) << "seed " << seed << ": sequential " << want << ", float64 " << ref;
  }
}

TEST(SumOfSquaresManyCuda, MixedSizesMatchSequentialBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_many_equals_sequential({2048, 1, 0, 7, 255, 256, 257, kGridElements - 1, kGridElements, 2048, 0,
                                 kGridElements + 1, 3 * kGridElements + 12345, 5, 100003, 2048});
}

TEST(SumOfSquaresManyCuda, EmptyTensorFirstMatchesSequential) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_many_equals_sequential({0, 3, kGridElements + 7, 0});
}

// More tensors than the threads of a block, so the ordered total gathers the
// per-tensor sums in several rounds.
TEST(SumOfSquaresManyCuda, ManyTensorsMatchSequentialBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  std::vector<int64_t> sizes;
  for (int64_t t = 0; t < 600; ++t) sizes.push_back(t % 13 == 0 ? 0 : (t * 37) % 3001);
  expect_many_equals_sequential(sizes);
}

TEST(SumOfSquaresManyCuda, OnlyEmptyTensorsGiveZero) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  Tensors tensors({0, 0, 0});
  const std::vector<SquaresTensor> list = tensors.list();
  DeviceArray<char> memory(SumOfSquaresList::device_bytes(list));
  const SumOfSquaresList many_list(list, memory.get(), nullptr);
  EXPECT_EQ(bits(many(many_list)), bits(0.0));
  EXPECT_EQ(bits(many(many_list)), bits(sequential(list)));
}

TEST(SumOfSquaresManyCuda, EmptyListGivesZero) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const std::vector<SquaresTensor> none;
  DeviceArray<char> memory(SumOfSquaresList::device_bytes(none));
  const SumOfSquaresList list(none, memory.get(), nullptr);
  EXPECT_EQ(bits(many(list)), bits(0.0));
  EXPECT_EQ(bits(many(SumOfSquaresList())), bits(0.0));
}

}  // namespace
}  // namespace spillway::ops
