// GPU SwiGLU forward and backward against the CPU kernels on the same
// (bf16-rounded) inputs, at odd sizes, unaligned starts and a LLaMA MLP size.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/swiglu.h"
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

template <typename T>
std::vector<T> tail_from(const std::vector<T>& v, int64_t offset) {
  return {v.begin() + offset, v.end()};
}

// 16 tokens of LLaMA-3.2-1B's MLP (ffn 8192) is the large case.
const int64_t kSizes[] = {1, 7, 8, 129, 4097, 16 * 8192};

TEST(SwigluCuda, ForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      const auto gate = random_bf16(n + offset, 100 + n, -6, 6);
      const auto up = random_bf16(n + offset, 200 + n, -2, 2);
      const auto dout = random_bf16(n + offset, 300 + n, -1, 1);
      DeviceArray<bf16> dgate_in(gate), dup_in(up), ddout(dout);
      const auto size = static_cast<size_t>(n + offset);
      DeviceArray<bf16> out(size), dgate(size), dup(size);
      swiglu_forward_cuda(dgate_in.get() + offset, dup_in.get() + offset, out.get() + offset, n,
                          nullptr);
      swiglu_backward_cuda(ddout.get() + offset, dgate_in.get() + offset, dup_in.get() + offset,
                           dgate.get() + offset, dup.get() + offset, n, nullptr);

      const auto g = tail_from(widen(gate), offset), u = tail_from(widen(up), offset);
      const auto d = tail_from(widen(dout), offset);
      std::vector<float> want_out(g.size()), want_dgate(g.size()), want_dup(g.size());
      swiglu_forward(g.data(), u.data(), want_out.data(), n);
      swiglu_backward(d.data(), g.data(), u.data(), want_dgate.data(), want_dup.data(), n);

      EXPECT_LT(rel_error(widen(tail_from(out.download(), offset)), as_double(want_out)), 1e-2)
          << "out, n " << n << " offset " << offset;
      EXPECT_LT(rel_error(widen(tail_from(dgate.download(), offset)), as_double(want_dgate)), 1e-2)
          << "dgate, n " << n << " offset " << offset;
      EXPECT_LT(rel_error(widen(tail_from(dup.download(), offset)), as_double(want_dup)), 1e-2)
          << "dup, n " << n << " offset " << offset;
    }
  }
}

// The fused gate|up layout gives the unpacked kernel's bits: the same
// per-element math, only read and written at the packed rows' offsets. Odd
// widths and a shifted start take the scalar path.
TEST(SwigluCuda, PackedGateUpEqualsSeparateTensorsBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  struct Case {
    int64_t rows, cols, offset;
  };
  for (const Case c : {Case{3, 5, 0}, Case{4, 8, 0}, Case{4, 8, 1}, Case{7, 24, 0}, Case{16, 8192, 0}}) {
    const int64_t n = c.rows * c.cols;
    const auto gate_up = random_bf16(2 * n + c.offset, 400 + n, -6, 6);
    const auto dout = random_bf16(n, 500 + n, -1, 1);
    std::vector<bf16> gate, up;
    for (int64_t r = 0; r < c.rows; ++r) {
      const auto row = gate_up.begin() + c.offset + 2 * r * c.cols;
      gate.insert(gate.end(), row, row + c.cols);
      up.insert(up.end(), row + c.cols, row + 2 * c.cols);
    }
    DeviceArray<bf16> d_gate_up(gate_up), d_gate(gate), d_up(up), d_dout(dout);
    DeviceArray<bf16> packed_out(static_cast<size_t>(n)), packed_grad(static_cast<size_t>(2 * n + c.offset));
    DeviceArray<bf16> out(static_cast<size_t>(n)), dgate(static_cast<size_t>(n)), dup(static_cast<size_t>(n));
    swiglu_packed_forward_cuda(d_gate_up.get() + c.offset, packed_out.get(), c.rows, c.cols, nullptr);
    swiglu_packed_backward_cuda(d_dout.get(), d_gate_up.get() + c.offset, packed_grad.get() + c.offset, c.rows,
                                c.cols, nullptr);
    swiglu_forward_cuda(d_gate.get(), d_up.get(), out.get(), n, nullptr);
    swiglu_backward_cuda(d_dout.get(), d_gate.get(), d_up.get(), dgate.get(), dup.get(), n, nullptr);
    EXPECT_EQ(bits_of(packed_out.download()), bits_of(out.download())) << c.rows << " x " << c.cols;
    const auto grad = packed_grad.download();
    const auto want_dgate = dgate.download(), want_dup = dup.download();
    for (int64_t r = 0; r < c.rows; ++r) {
      for (int64_t j = 0; j < c.cols; ++j) {
        const auto at = static_cast<size_t>(c.offset + 2 * r * c.cols + j), i = static_cast<size_t>(r * c.cols + j);
        ASSERT_EQ(grad[at].bits, want_dgate[i].bits) << "dgate row " << r << " column " << j;
        ASSERT_EQ(grad[at + static_cast<size_t>(c.cols)].bits, want_dup[i].bits) << "dup row " << r << " column " << j;
      }
    }
  }
}

TEST(SwigluCuda, MisalignedOperandsTakeTheScalarPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 1001;
  const auto gate = random_bf16(n + 1, 7, -6, 6), up = random_bf16(n, 8, -2, 2);
  DeviceArray<bf16> dg(gate), du(up), out(static_cast<size_t>(n));
  swiglu_forward_cuda(dg.get() + 1, du.get(), out.get(), n, nullptr);
  const auto g = tail_from(widen(gate), 1), u = widen(up);
  std::vector<float> want(static_cast<size_t>(n));
  swiglu_forward(g.data(), u.data(), want.data(), n);
  EXPECT_LT(rel_error(widen(out.download()), as_double(want)), 1e-2);
}

TEST(SwigluCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t n = 8192 * 8 + 3;
  DeviceArray<bf16> g(random_bf16(n, 1, -6, 6)), u(random_bf16(n, 2)), d(random_bf16(n, 3));
  const auto size = static_cast<size_t>(n);
  DeviceArray<bf16> out(size), dg(size), du(size);
  std::vector<uint16_t> first[3];
  for (int run = 0; run < 2; ++run) {
    out.poison();
    dg.poison();
    du.poison();
    swiglu_forward_cuda(g.get(), u.get(), out.get(), n, nullptr);
    swiglu_backward_cuda(d.get(), g.get(), u.get(), dg.get(), du.get(), n, nullptr);
    const std::vector<uint16_t> now[3] = {bits_of(out.download()), bits_of(dg.download()),
                                          bits_of(du.download())};
    for (int k = 0; k < 3; ++k) {
      if (run == 0) {
        first[k] = now[k];
      } else {
        EXPECT_EQ(now[k], first[k]) << "output " << k;
      }
    }
  }
}

}  // namespace
}  // namespace spillway::ops
