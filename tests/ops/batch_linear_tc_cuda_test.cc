// The tensor-core batch-invariant matmul: values within fp32 summation of
// the float64 product of the same bf16 inputs, bf16 outputs the fp32 ones
// rounded once, and the contract itself: a row's output is the same bits
// alone, in batches of any size (one m16 tile, a warp's 64 rows, more), run
// split over slices or whole, and picked by row_index.
#include "ops/batch_linear_tc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "testing/cuda_arrays.h"

namespace spillway::ops {
namespace {

using testing::DeviceArray;

struct Shape {
  int64_t rows, in, out;
};

// Widths of one block of 32, of a block and a quarter (lanes reading past
// the end), of one slice and of several with a short last one; outputs not a
// multiple of a warp's 8 or a block's 32; rows in one tile, across tiles and
// across warps' 64.
const std::vector<Shape> kShapes = {{1, 8, 1},      {3, 40, 7},       {16, 264, 33},  {17, 2048, 100},
                                    {5, 4096, 19},  {70, 4104, 45},   {130, 6144, 64}, {9, 14336, 24}};

std::vector<double> float64_product(const std::vector<bf16>& x, const std::vector<bf16>& w, const Shape& s) {
  std::vector<double> y(static_cast<size_t>(s.rows * s.out));
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double sum = 0;
      for (int64_t k = 0; k < s.in; ++k) {
        sum += static_cast<double>(to_float(x[static_cast<size_t>(r * s.in + k)])) *
               static_cast<double>(to_float(w[static_cast<size_t>(o * s.in + k)]));
      }
      y[static_cast<size_t>(r * s.out + o)] = sum;
    }
  }
  return y;
}

TEST(BatchLinearTcCuda, EqualsTheFloat64ProductToFp32Summation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.in) + " x " + std::to_string(s.out));
    const auto x = testing::random_bf16(s.rows * s.in, 1), w = testing::random_bf16(s.out * s.in, 2);
    const std::vector<double> want = float64_product(x, w, s);
    DeviceArray<bf16> dx(x), dw(w), dy16(want.size());
    DeviceArray<float> dy32(want.size());
    batch_linear_tc_cuda(dx.get(), nullptr, dw.get(), dy32.get(), s.rows, s.in, s.out, nullptr, nullptr);
    batch_linear_tc_cuda(dx.get(), nullptr, dw.get(), dy16.get(), s.rows, s.in, s.out, nullptr, nullptr);
    const std::vector<float> got = dy32.download();
    const std::vector<bf16> got16 = dy16.download();
    // Products of values in [-1, 1]: fp32 summation errs by at most about
    // in x 2^-24 x sum|x w| <= in^2 x 6e-8; far tighter in practice.
    const double tolerance = 1e-6 * static_cast<double>(s.in);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tolerance) << "element " << i;
      ASSERT_EQ(got16[i].bits, to_bf16(got[i]).bits) << "element " << i;
    }
  }
}

TEST(BatchLinearTcCuda, ARowsBitsDoNotDependOnTheBatchNorOnHowItRuns) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  // Three slices, the last short; 150 rows: whole, over three warps' rows.
  const int64_t in = 2 * kBatchLinearTcSlice + 136, out = 77, rows = 150;
  const auto x = testing::random_bf16(rows * in, 3), w = testing::random_bf16(out * in, 4);
  DeviceArray<bf16> dx(x), dw(w);
  DeviceArray<float> all(static_cast<size_t>(rows * out));
  batch_linear_tc_cuda(dx.get(), nullptr, dw.get(), all.get(), rows, in, out, nullptr, nullptr);
  const std::vector<float> batch = all.download();
  DeviceArray<float> workspace(batch_linear_tc_workspace_bytes(kBatchLinearTcSplitRows, in, out) / sizeof(float));
  ASSERT_GT(batch_linear_tc_workspace_bytes(1, in, out), 0u);
  for (int64_t r = 0; r < rows; r += 7) {
    const std::vector<float> want(batch.begin() + r * out, batch.begin() + (r + 1) * out);
    // Alone, whole and split.
    DeviceArray<float> one(static_cast<size_t>(out));
    batch_linear_tc_cuda(dx.get() + r * in, nullptr, dw.get(), one.get(), 1, in, out, nullptr, nullptr);
    EXPECT_EQ(one.download(), want) << "row " << r << " alone";
    one.poison();
    batch_linear_tc_cuda(dx.get() + r * in, nullptr, dw.get(), one.get(), 1, in, out, workspace.get(), nullptr);
    EXPECT_EQ(one.download(), want) << "row " << r << " alone, split";
    // Picked last of 10 and 40 rows (split, one tile and three) and of 90
    // (whole, the second warp's rows).
    for (const int64_t picked_rows : {int64_t{10}, int64_t{40}, int64_t{90}}) {
      std::vector<int32_t> index(static_cast<size_t>(picked_rows), 0);
      index.back() = static_cast<int32_t>(r);
      DeviceArray<int32_t> dindex(index);
      DeviceArray<float> picked(static_cast<size_t>(picked_rows * out));
      batch_linear_tc_cuda(dx.get(), dindex.get(), dw.get(), picked.get(), picked_rows, in, out, workspace.get(),
                           nullptr);
      const std::vector<float> p = picked.download();
      EXPECT_EQ(std::vector<float>(p.end() - out, p.end()), want) << "row " << r << " picked of " << picked_rows;
    }
  }
}

// The split half alone (what the decoder's fused epilogues read): each
// slice's sums where batch_linear_tc_slices_cuda says, which added in slice
// order give the whole call's fp32 bits, one slice or several; past
// kBatchLinearTcSplitRows it runs nothing.
TEST(BatchLinearTcCuda, TheSlicesAddedInOrderAreTheCall) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Shape& s : {Shape{1, 264, 33}, Shape{3, 2 * kBatchLinearTcSlice + 136, 77}, Shape{40, 4096, 19}}) {
    SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.in) + " x " + std::to_string(s.out));
    const auto x = testing::random_bf16(s.rows * s.in, 5), w = testing::random_bf16(s.out * s.in, 6);
    DeviceArray<bf16> dx(x), dw(w);
    DeviceArray<float> want(static_cast<size_t>(s.rows * s.out));
    batch_linear_tc_cuda(dx.get(), nullptr, dw.get(), want.get(), s.rows, s.in, s.out, nullptr, nullptr);
    const int64_t slices = batch_linear_tc_slices(s.in);
    DeviceArray<float> workspace(batch_linear_tc_slices_bytes(s.rows, s.in, s.out) / sizeof(float));
    ASSERT_TRUE(batch_linear_tc_slices_cuda(dx.get(), nullptr, dw.get(), workspace.get(), s.rows, s.in, s.out,
                                            nullptr));
    const std::vector<float> parts = workspace.download(), whole = want.download();
    for (int64_t e = 0; e < s.rows * s.out; ++e) {
      float total = parts[static_cast<size_t>(e)];
      for (int64_t k = 1; k < slices; ++k) total += parts[static_cast<size_t>(k * s.rows * s.out + e)];
      ASSERT_EQ(total, whole[static_cast<size_t>(e)]) << "element " << e;
    }
  }
  EXPECT_EQ(batch_linear_tc_slices_bytes(kBatchLinearTcSplitRows + 1, 4096, 8), 0u);
  DeviceArray<bf16> dx(std::vector<bf16>(65 * 8)), dw(std::vector<bf16>(8 * 8));
  EXPECT_FALSE(batch_linear_tc_slices_cuda(dx.get(), nullptr, dw.get(), nullptr, 65, 8, 8, nullptr));
}

TEST(BatchLinearTcCuda, RefusesWhatItCannotRead) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<bf16> x(64), w(64);
  DeviceArray<float> y(8);
  EXPECT_THROW(batch_linear_tc_cuda(x.get(), nullptr, w.get(), y.get(), 1, 12, 1, nullptr, nullptr), Error);
  EXPECT_THROW(batch_linear_tc_cuda(x.get() + 1, nullptr, w.get(), y.get(), 1, 8, 1, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace spillway::ops
