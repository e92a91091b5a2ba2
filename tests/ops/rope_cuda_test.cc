// GPU RoPE forward and backward against the CPU kernels on the same
// (bf16-rounded) inputs: odd half-widths (scalar path), LLaMA head shapes,
// large positions, in place, and run-to-run bit equality.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/rope.h"
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

struct RopeCase {
  int64_t batch, seq, heads, head_dim, pos0;
  bool llama3;
};

std::string describe(const RopeCase& c) {
  return "batch " + std::to_string(c.batch) + " seq " + std::to_string(c.seq) + " heads " +
         std::to_string(c.heads) + " head_dim " + std::to_string(c.head_dim) + " pos0 " +
         std::to_string(c.pos0);
}

std::vector<float> inv_freq_for(const RopeCase& c) {
  RopeScaling scaling;
  scaling.llama3 = c.llama3;
  return rope_inv_freq(c.head_dim, c.llama3 ? 500000.0 : 10000.0, scaling);
}

const RopeCase kCases[] = {
    {1, 1, 1, 2, 0, false},       {2, 5, 3, 6, 7, false},   {3, 4, 2, 18, 5, true},
    {2, 7, 5, 64, 0, true},       {1, 33, 32, 64, 0, true},  // LLaMA-3.2-1B queries
    {2, 17, 8, 64, 100, true},                               // its keys
    {1, 9, 8, 128, 131000, true},                            // LLaMA-3-8B, far positions
    {1, 3, 3, 16, 0, false},
    {1, 3, 40, 66, 11, false},  // more pairs per token than a block takes in one step
    {1, 6, 1, 2048, 0, false},  // wide heads: fewer tokens per block's angle table
};

TEST(RopeCuda, ForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const RopeCase& c : kCases) {
    const int64_t n = c.batch * c.seq * c.heads * c.head_dim;
    const auto inv_freq = inv_freq_for(c);
    DeviceArray<float> dfreq(inv_freq);
    const auto x = random_bf16(n, static_cast<uint64_t>(n + c.head_dim));
    DeviceArray<bf16> dx_in(x), out(static_cast<size_t>(n)), grad(static_cast<size_t>(n));
    rope_forward_cuda(dx_in.get(), out.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(),
                      c.pos0, nullptr);
    rope_backward_cuda(dx_in.get(), grad.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(),
                       c.pos0, nullptr);

    const auto fx = widen(x);
    std::vector<float> want_out(static_cast<size_t>(n)), want_grad(static_cast<size_t>(n));
    rope_forward(fx.data(), want_out.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(),
                 c.pos0);
    rope_backward(fx.data(), want_grad.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(),
                  c.pos0);
    EXPECT_LT(rel_error(widen(out.download()), as_double(want_out)), 1e-2)
        << "forward, " << describe(c);
    EXPECT_LT(rel_error(widen(grad.download()), as_double(want_grad)), 1e-2)
        << "backward, " << describe(c);
  }
}

// The fused q|k|v projection's output of LLaMA-3.2-1B (32 + 8 heads rotated,
// 8 carried) and a small odd one: the GPU against the CPU, with the carried
// heads bit for bit.
TEST(RopeCuda, RotatesOnlyTheLeadingHeadsOfAPackedRow) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const RopeCase& c : {RopeCase{2, 33, 48, 64, 0, true}, RopeCase{1, 5, 5, 6, 2, false}}) {
    const int64_t rotated = c.heads == 48 ? 40 : 3;
    const int64_t n = c.batch * c.seq * c.heads * c.head_dim;
    const auto inv_freq = inv_freq_for(c);
    DeviceArray<float> dfreq(inv_freq);
    const auto x = random_bf16(n, 91);
    DeviceArray<bf16> in(x), out(static_cast<size_t>(n)), grad(static_cast<size_t>(n));
    out.poison();
    grad.poison();
    rope_forward_cuda(in.get(), out.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0, nullptr,
                      rotated);
    rope_backward_cuda(in.get(), grad.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0, nullptr,
                       rotated);
    const auto fx = widen(x);
    std::vector<float> want_out(static_cast<size_t>(n)), want_grad(static_cast<size_t>(n));
    rope_forward(fx.data(), want_out.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(), c.pos0, rotated);
    rope_backward(fx.data(), want_grad.data(), c.batch, c.seq, c.heads, c.head_dim, inv_freq.data(), c.pos0,
                  rotated);
    const auto got_out = out.download(), got_grad = grad.download();
    EXPECT_LT(rel_error(widen(got_out), as_double(want_out)), 1e-2) << "forward, " << describe(c);
    EXPECT_LT(rel_error(widen(got_grad), as_double(want_grad)), 1e-2) << "backward, " << describe(c);
    const int64_t row = c.heads * c.head_dim;
    for (int64_t i = 0; i < n; ++i) {
      if (i % row < rotated * c.head_dim) continue;
      const auto at = static_cast<size_t>(i);
      ASSERT_EQ(got_out[at].bits, x[at].bits) << "forward, element " << i;
      ASSERT_EQ(got_grad[at].bits, x[at].bits) << "backward, element " << i;
    }
  }
}

TEST(RopeCuda, InPlaceAndUnalignedEqualOutOfPlace) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const RopeCase c{2, 17, 8, 64, 3, true};
  const int64_t n = c.batch * c.seq * c.heads * c.head_dim;
  DeviceArray<float> dfreq(inv_freq_for(c));
  const auto x = random_bf16(n + 1, 77);
  DeviceArray<bf16> src(x), out(static_cast<size_t>(n)), in_place(x);
  rope_forward_cuda(src.get(), out.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0,
                    nullptr);
  rope_forward_cuda(in_place.get(), in_place.get(), c.batch, c.seq, c.heads, c.head_dim,
                    dfreq.get(), c.pos0, nullptr);
  const auto want = bits_of(out.download());
  auto got = bits_of(in_place.download());
  got.resize(static_cast<size_t>(n));
  EXPECT_EQ(got, want);

  // One element past a 16-byte boundary: the scalar path, same rotation.
  const auto fx = widen(x);
  std::vector<float> ref(static_cast<size_t>(n));
  rope_forward(fx.data() + 1, ref.data(), c.batch, c.seq, c.heads, c.head_dim,
               inv_freq_for(c).data(), c.pos0);
  DeviceArray<bf16> shifted_out(static_cast<size_t>(n) + 1);
  rope_forward_cuda(src.get() + 1, shifted_out.get() + 1, c.batch, c.seq, c.heads, c.head_dim,
                    dfreq.get(), c.pos0, nullptr);
  const auto shifted = shifted_out.download();
  EXPECT_LT(rel_error(widen({shifted.begin() + 1, shifted.end()}), as_double(ref)), 1e-2);
}

// The fused q|k|v projection's rope in place, as the training step runs it:
// the rotated heads as out of place, and the carried v heads neither read
// nor written (a NaN there stays NaN), both directions.
TEST(RopeCuda, InPlaceWithCarriedHeadsLeavesThemAlone) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const RopeCase c{2, 33, 12, 64, 5, true};
  const int64_t rotated = 10, n = c.batch * c.seq * c.heads * c.head_dim, row = c.heads * c.head_dim;
  DeviceArray<float> dfreq(inv_freq_for(c));
  auto x = random_bf16(n, 91);
  for (int64_t i = 0; i < n; ++i) {
    if (i % row >= rotated * c.head_dim) x[static_cast<size_t>(i)].bits = 0x7fc1;  // a NaN no kernel makes
  }
  for (bool backward : {false, true}) {
    DeviceArray<bf16> src(x), out(static_cast<size_t>(n)), in_place(x);
    out.poison();
    auto run = backward ? rope_backward_cuda : rope_forward_cuda;
    run(src.get(), out.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0, nullptr, rotated, nullptr);
    run(in_place.get(), in_place.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0, nullptr, rotated,
        nullptr);
    EXPECT_EQ(bits_of(in_place.download()), bits_of(out.download())) << (backward ? "backward" : "forward");
  }
}

TEST(RopeCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const RopeCase c{1, 512, 32, 64, 0, true};
  const int64_t n = c.batch * c.seq * c.heads * c.head_dim;
  DeviceArray<float> dfreq(inv_freq_for(c));
  DeviceArray<bf16> x(random_bf16(n, 5)), out(static_cast<size_t>(n));
  std::vector<uint16_t> first;
  for (int run = 0; run < 2; ++run) {
    out.poison();
    rope_backward_cuda(x.get(), out.get(), c.batch, c.seq, c.heads, c.head_dim, dfreq.get(), c.pos0,
                       nullptr);
    const auto bits = bits_of(out.download());
    if (run == 0) {
      first = bits;
    } else {
      EXPECT_EQ(bits, first);
    }
  }
}

// Packed rows (per-token positions): the GPU against the CPU given the same
// positions, forward and backward.
TEST(RopeCuda, PerTokenPositionsMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t batch = 2, seq = 37, heads = 6, head_dim = 64, pos0 = 0;
  std::vector<int32_t> positions;
  for (int64_t b = 0; b < batch; ++b) {
    int32_t p = 0;
    for (int64_t t = 0; t < seq; ++t) positions.push_back((t % (11 + 9 * b) == 0) ? (p = 0) : ++p);
  }
  const int64_t n = batch * seq * heads * head_dim;
  const std::vector<float> inv_freq = rope_inv_freq(head_dim, 500000.0, {});
  DeviceArray<float> dfreq(inv_freq);
  DeviceArray<int32_t> dpositions(positions);
  const auto x = random_bf16(n, 77);
  DeviceArray<bf16> dx_in(x), out(static_cast<size_t>(n)), grad(static_cast<size_t>(n));
  rope_forward_cuda(dx_in.get(), out.get(), batch, seq, heads, head_dim, dfreq.get(), pos0, nullptr, -1,
                    dpositions.get());
  rope_backward_cuda(dx_in.get(), grad.get(), batch, seq, heads, head_dim, dfreq.get(), pos0, nullptr, -1,
                     dpositions.get());
  const auto fx = widen(x);
  std::vector<float> want_out(static_cast<size_t>(n)), want_grad(static_cast<size_t>(n));
  rope_forward(fx.data(), want_out.data(), batch, seq, heads, head_dim, inv_freq.data(), pos0, -1, positions.data());
  rope_backward(fx.data(), want_grad.data(), batch, seq, heads, head_dim, inv_freq.data(), pos0, -1,
                positions.data());
  EXPECT_LT(rel_error(widen(out.download()), as_double(want_out)), 1e-2);
  EXPECT_LT(rel_error(widen(grad.download()), as_double(want_grad)), 1e-2);
}

}  // namespace
}  // namespace spillway::ops
