// The batch-invariant GPU matmul against its CPU reference, which sums in the
// kernel's order: fp32 outputs equal it bit for bit and bf16 outputs equal it
// rounded once. And the contract itself: a row's output is the same bits
// alone, in a batch of any size (tiles of 16 rows and their ragged ends) and
// picked by row_index.
#include "ops/batch_linear.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
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

// LLaMA-like widths and odd ones: a width of 264 leaves lanes with one piece
// more than others, 8 a single piece, outputs not a multiple of the 8 a block
// computes.
const std::vector<Shape> kShapes = {{1, 8, 1}, {3, 264, 7}, {8, 512, 33}, {13, 1024, 100}, {37, 4096, 19}};

TEST(BatchLinearCuda, EqualsTheReferenceBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.in) + " x " + std::to_string(s.out));
    const auto x = testing::random_bf16(s.rows * s.in, 1), w = testing::random_bf16(s.out * s.in, 2);
    std::vector<float> want(static_cast<size_t>(s.rows * s.out));
    batch_linear_reference(x.data(), nullptr, w.data(), want.data(), s.rows, s.in, s.out);
    DeviceArray<bf16> dx(x), dw(w), dy16(want.size());
    DeviceArray<float> dy32(want.size());
    batch_linear_cuda(dx.get(), nullptr, dw.get(), dy32.get(), s.rows, s.in, s.out, nullptr);
    batch_linear_cuda(dx.get(), nullptr, dw.get(), dy16.get(), s.rows, s.in, s.out, nullptr);
    SPW_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(dy32.download(), want);
    std::vector<uint16_t> rounded;
    for (float v : want) rounded.push_back(to_bf16(v).bits);
    EXPECT_EQ(testing::bits_of(dy16.download()), rounded);
  }
}

TEST(BatchLinearCuda, ARowsBitsDoNotDependOnTheBatch) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t in = 2048, out = 301, rows = 21;
  const auto x = testing::random_bf16(rows * in, 3), w = testing::random_bf16(out * in, 4);
  DeviceArray<bf16> dx(x), dw(w);
  DeviceArray<float> all(static_cast<size_t>(rows * out));
  batch_linear_cuda(dx.get(), nullptr, dw.get(), all.get(), rows, in, out, nullptr);
  const std::vector<float> batch = all.download();
  for (int64_t r = 0; r < rows; ++r) {
    // Alone (x's row r as a batch of one), and picked last out of 10 rows.
    DeviceArray<float> one(static_cast<size_t>(out)), picked(static_cast<size_t>(10 * out));
    batch_linear_cuda(dx.get() + r * in, nullptr, dw.get(), one.get(), 1, in, out, nullptr);
    std::vector<int32_t> index(10, 0);
    index[9] = static_cast<int32_t>(r);
    DeviceArray<int32_t> dindex(index);
    batch_linear_cuda(dx.get(), dindex.get(), dw.get(), picked.get(), 10, in, out, nullptr);
    const std::vector<float> want(batch.begin() + r * out, batch.begin() + (r + 1) * out);
    EXPECT_EQ(one.download(), want) << "row " << r << " alone";
    const std::vector<float> p = picked.download();
    EXPECT_EQ(std::vector<float>(p.end() - out, p.end()), want) << "row " << r << " picked";
  }
}

TEST(BatchLinearCuda, RefusesWhatItCannotRead) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<bf16> x(64), w(64);
  DeviceArray<float> y(8);
  EXPECT_THROW(batch_linear_cuda(x.get(), nullptr, w.get(), y.get(), 1, 12, 1, nullptr), Error);
  EXPECT_THROW(batch_linear_cuda(x.get() + 1, nullptr, w.get(), y.get(), 1, 8, 1, nullptr), Error);
}

}  // namespace
}  // namespace spillway::ops
