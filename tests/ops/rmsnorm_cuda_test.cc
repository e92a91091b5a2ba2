// GPU RMSNorm forward and backward against the CPU kernels on the same
// (bf16-rounded) inputs: odd widths (scalar path), unaligned starts, LLaMA
// widths, many rows (several dweight blocks), and run-to-run bit equality.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/rmsnorm.h"
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

constexpr float kEps = 1e-5f;

std::vector<uint32_t> float_bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(float_bits(f));
  return out;
}

struct Shape {
  int64_t rows, dim;
};

// Inputs start `offset` elements into their buffers (offset 1 leaves every
// row off a 16-byte boundary, so the scalar path runs even for dim % 8 == 0).
struct Case {
  Shape shape;
  int64_t offset;

  void run_and_check() const {
    const int64_t rows = shape.rows, dim = shape.dim, n = rows * dim;
    const uint64_t seed = static_cast<uint64_t>(rows * 7919 + dim);
    const auto x = random_bf16(n + offset, seed, -2, 2);
    const auto w = random_bf16(dim + offset, seed + 1, 0.5, 1.5);
    const auto dy = random_bf16(n + offset, seed + 2);
    DeviceArray<bf16> dx_in(x), dw_in(w), ddy(dy);
    DeviceArray<bf16> y(static_cast<size_t>(n + offset)), dx(static_cast<size_t>(n + offset));
    DeviceArray<float> rstd(static_cast<size_t>(rows)), dweight(static_cast<size_t>(dim));
    DeviceArray<char> workspace(rmsnorm_backward_workspace_bytes(rows, dim));
    const bf16* xp = dx_in.get() + offset;
    const bf16* wp = dw_in.get() + offset;
    rmsnorm_forward_cuda(xp, wp, y.get() + offset, rstd.get(), rows, dim, kEps, nullptr);
    rmsnorm_backward_cuda(ddy.get() + offset, xp, wp, rstd.get(), dx.get() + offset, dweight.get(),
                          rows, dim, workspace.get(), nullptr);

    const auto fx = widen(x), fw = widen(w), fdy = widen(dy);
    std::vector<float> want_y(static_cast<size_t>(n)), want_rstd(static_cast<size_t>(rows));
    rmsnorm_forward(fx.data() + offset, fw.data() + offset, want_y.data(), want_rstd.data(), rows,
                    dim, static_cast<double>(kEps));
    // Backward reads the GPU's rstd, so both backends see the same inputs.
    const auto got_rstd = rstd.download();
    std::vector<float> want_dx(static_cast<size_t>(n)), want_dweight(static_cast<size_t>(dim));
    rmsnorm_backward(fdy.data() + offset, fx.data() + offset, fw.data() + offset, got_rstd.data(),
                     want_dx.data(), want_dweight.data(), rows, dim);

    const auto got_y = y.download(), got_dx = dx.download();
    const std::string where = "rows " + std::to_string(rows) + " dim " + std::to_string(dim) +
                              " offset " + std::to_string(offset);
    EXPECT_LT(rel_error(widen({got_y.begin() + offset, got_y.end()}), as_double(want_y)), 1e-2)
        << "y, " << where;
    EXPECT_LT(rel_error(got_rstd, as_double(want_rstd)), 1e-5) << "rstd, " << where;
    EXPECT_LT(rel_error(widen({got_dx.begin() + offset, got_dx.end()}), as_double(want_dx)), 1e-2)
        << "dx, " << where;
    EXPECT_LT(rel_error(dweight.download(), as_double(want_dweight)), 1e-5) << "dweight, " << where;
  }
};

TEST(RMSNormCuda, MatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const Shape shapes[] = {{1, 1},     {3, 7},     {5, 129},   {2, 4097},    {17, 2048}, {300, 64},
                          {1000, 33}, {64, 4096}, {33, 8200}, {4096, 2048}, {2, 16384}};
  for (const Shape& s : shapes) Case{s, 0}.run_and_check();
  for (const Shape& s : {Shape{17, 2048}, Shape{100, 136}, Shape{9, 4096}}) {
    Case{s, 1}.run_and_check();
  }
}

TEST(RMSNormCuda, ZeroRowsClearsDweight) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<bf16> dummy(16);
  DeviceArray<float> dweight(9);
  rmsnorm_backward_cuda(dummy.get(), dummy.get(), dummy.get(), nullptr, dummy.get(), dweight.get(),
                        0, 9, nullptr, nullptr);
  EXPECT_EQ(dweight.download(), std::vector<float>(9, 0.0f));
}

// Accumulating dweight into a buffer of known values: old + the dweight a
// fresh run writes, bit for bit, and within fp32 rounding of the CPU's
// accumulating kernel; dx is written as in a fresh run. No rows: untouched.
TEST(RMSNormCuda, BackwardAccumulatesDweight) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const Shape& s : {Shape{3, 7}, Shape{1000, 33}, Shape{4096, 2048}, Shape{5, 129}}) {
    const int64_t rows = s.rows, dim = s.dim, n = rows * dim;
    const auto x = random_bf16(n, 21, -2, 2), w = random_bf16(dim, 22, 0.5, 1.5), dy = random_bf16(n, 23);
    const auto old_d = random_vector(dim, 24, -3.0, 3.0);
    const std::vector<float> old(old_d.begin(), old_d.end());
    DeviceArray<bf16> dx_in(x), dw_in(w), ddy(dy), y(static_cast<size_t>(n));
    DeviceArray<bf16> dx_fresh(static_cast<size_t>(n)), dx_acc(static_cast<size_t>(n));
    DeviceArray<float> rstd(static_cast<size_t>(rows)), fresh(static_cast<size_t>(dim)), acc(old);
    DeviceArray<char> workspace(rmsnorm_backward_workspace_bytes(rows, dim));
    rmsnorm_forward_cuda(dx_in.get(), dw_in.get(), y.get(), rstd.get(), rows, dim, kEps, nullptr);
    rmsnorm_backward_cuda(ddy.get(), dx_in.get(), dw_in.get(), rstd.get(), dx_fresh.get(), fresh.get(), rows, dim,
                          workspace.get(), nullptr);
    rmsnorm_backward_cuda(ddy.get(), dx_in.get(), dw_in.get(), rstd.get(), dx_acc.get(), acc.get(), rows, dim,
                          workspace.get(), nullptr, /*accumulate_dweight=*/true);
    const auto got = acc.download(), got_fresh = fresh.download();
    std::vector<float> want(old.size());
    for (size_t j = 0; j < want.size(); ++j) want[j] = old[j] + got_fresh[j];
    const std::string where = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
    EXPECT_EQ(float_bits_of(got), float_bits_of(want)) << where;
    EXPECT_EQ(bits_of(dx_acc.download()), bits_of(dx_fresh.download())) << where;

    const auto fx = widen(x), fw = widen(w), fdy = widen(dy), got_rstd = rstd.download();
    std::vector<float> cpu = old, cpu_dx(static_cast<size_t>(n));
    rmsnorm_backward(fdy.data(), fx.data(), fw.data(), got_rstd.data(), cpu_dx.data(), cpu.data(), rows, dim,
                     /*accumulate_dweight=*/true);
    EXPECT_LT(rel_error(got, as_double(cpu)), 1e-5) << where;
  }
  DeviceArray<bf16> dummy(16);
  const std::vector<float> old = {1.5f, -2.0f, 3.25f};
  DeviceArray<float> dweight(old);
  rmsnorm_backward_cuda(dummy.get(), dummy.get(), dummy.get(), nullptr, dummy.get(), dweight.get(), 0, 3, nullptr,
                        nullptr, /*accumulate_dweight=*/true);
  EXPECT_EQ(dweight.download(), old);
}

// dx with an addend against the CPU kernel with the same addend, on poisoned
// outputs: the vector path, the scalar path (odd widths, and an addend alone
// off a 16-byte boundary), several dweight blocks and more columns than
// threads; dweight bit for bit what the run without an addend writes, and dx
// bit for bit the same run to run.
TEST(RMSNormCuda, BackwardAddsTheAddendToDx) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  struct AddendCase {
    Shape shape;
    int64_t addend_offset;
  };
  const AddendCase cases[] = {{{1, 1}, 0},    {{5, 129}, 0},    {{17, 2048}, 0}, {{17, 2048}, 1},
                              {{300, 64}, 0}, {{4096, 2048}, 0}, {{33, 8200}, 0}, {{2, 16384}, 0}};
  for (const AddendCase& c : cases) {
    const int64_t rows = c.shape.rows, dim = c.shape.dim, n = rows * dim, off = c.addend_offset;
    const uint64_t seed = static_cast<uint64_t>(rows * 131 + dim);
    const auto x = random_bf16(n, seed, -2, 2), w = random_bf16(dim, seed + 1, 0.5, 1.5);
    const auto dy = random_bf16(n, seed + 2), addend = random_bf16(n + off, seed + 3, -2, 2);
    DeviceArray<bf16> dx_in(x), dw_in(w), ddy(dy), dadd(addend), y(static_cast<size_t>(n));
    DeviceArray<bf16> dx(static_cast<size_t>(n)), dx_plain(static_cast<size_t>(n));
    DeviceArray<float> rstd(static_cast<size_t>(rows)), dweight(static_cast<size_t>(dim));
    DeviceArray<float> dweight_plain(static_cast<size_t>(dim));
    DeviceArray<char> workspace(rmsnorm_backward_workspace_bytes(rows, dim));
    rmsnorm_forward_cuda(dx_in.get(), dw_in.get(), y.get(), rstd.get(), rows, dim, kEps, nullptr);
    rmsnorm_backward_cuda(ddy.get(), dx_in.get(), dw_in.get(), rstd.get(), dx_plain.get(), dweight_plain.get(),
                          rows, dim, workspace.get(), nullptr);
    std::vector<uint16_t> first_dx;
    for (int run = 0; run < 2; ++run) {
      dx.poison();
      dweight.poison();
      rmsnorm_backward_cuda(ddy.get(), dx_in.get(), dw_in.get(), rstd.get(), dx.get(), dweight.get(), rows, dim,
                            workspace.get(), nullptr, /*accumulate_dweight=*/false, dadd.get() + off);
      const auto bits = bits_of(dx.download());
      if (run == 0) first_dx = bits;
      EXPECT_EQ(bits, first_dx) << "rows " << rows << " dim " << dim;
    }

    const auto fx = widen(x), fw = widen(w), fdy = widen(dy), fadd = widen(addend);
    const auto got_rstd = rstd.download();
    std::vector<float> want_dx(static_cast<size_t>(n)), want_dweight(static_cast<size_t>(dim));
    rmsnorm_backward(fdy.data(), fx.data(), fw.data(), got_rstd.data(), want_dx.data(), want_dweight.data(), rows,
                     dim, false, fadd.data() + off);
    const std::string where = "rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " addend offset " +
                              std::to_string(off);
    EXPECT_LT(rel_error(widen(dx.download()), as_double(want_dx)), 1e-2) << "dx, " << where;
    EXPECT_EQ(float_bits_of(dweight.download()), float_bits_of(dweight_plain.download())) << "dweight, " << where;
  }
}

TEST(RMSNormCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t rows = 3000, dim = 2048, n = rows * dim;
  DeviceArray<bf16> x(random_bf16(n, 1, -2, 2)), w(random_bf16(dim, 2)), dy(random_bf16(n, 3));
  DeviceArray<bf16> y(static_cast<size_t>(n)), dx(static_cast<size_t>(n));
  DeviceArray<float> rstd(rows), dweight(dim);
  DeviceArray<char> workspace(rmsnorm_backward_workspace_bytes(rows, dim));
  std::vector<uint16_t> first_y, first_dx;
  std::vector<uint32_t> first_rstd, first_dweight;
  for (int run = 0; run < 2; ++run) {
    y.poison();
    dx.poison();
    rstd.poison();
    dweight.poison();
    rmsnorm_forward_cuda(x.get(), w.get(), y.get(), rstd.get(), rows, dim, kEps, nullptr);
    rmsnorm_backward_cuda(dy.get(), x.get(), w.get(), rstd.get(), dx.get(), dweight.get(), rows,
                          dim, workspace.get(), nullptr);
    const auto yb = bits_of(y.download()), dxb = bits_of(dx.download());
    const auto rb = float_bits_of(rstd.download()), dwb = float_bits_of(dweight.download());
    if (run == 0) {
      first_y = yb;
      first_dx = dxb;
      first_rstd = rb;
      first_dweight = dwb;
    } else {
      EXPECT_EQ(yb, first_y);
      EXPECT_EQ(dxb, first_dx);
      EXPECT_EQ(rb, first_rstd);
      EXPECT_EQ(dwb, first_dweight);
    }
  }
}

}  // namespace
}  // namespace spillway::ops
