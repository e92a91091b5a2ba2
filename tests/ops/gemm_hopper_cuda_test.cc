// spillway's Hopper GEMM against the CPU product and against cuBLASLt, and
// its fused SwiGLU gate (forward) and gradient (backward) and its fused
// RoPE against the separate kernels: outputs poisoned first, so an element
// a tile fails to store shows up as NaN.
#include "ops/gemm_hopper.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "device/cuda/cuda_device.h"
#include "ops/matmul.h"
#include "ops/matmul_cuda.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::as_double;
using spillway::testing::bits_of;
using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::rel_error;
using spillway::testing::widen;

class HopperGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
    if (!hopper_gemm_available(0)) GTEST_SKIP() << "not a Hopper GPU, or no sm_90a code in this build";
  }
};

struct Shape3 {
  int64_t m, n, k;
};

// One tile; several tiles with k one stage long; more tiles than SMs (the
// persistent CTAs take several each) with k longer than the stage ring.
const Shape3 kShapes[] = {{128, 256, 64}, {256, 512, 64}, {384, 768, 448}, {2048, 4352, 320}};

TEST_F(HopperGemmTest, MatchesTheCpuProduct) {
  for (const Shape3 s : kShapes) {
    const auto a = random_bf16(s.m * s.k, 1 + s.m, -1, 1), b = random_bf16(s.n * s.k, 2 + s.n, -1, 1);
    DeviceArray<bf16> da(a), db(b), dc(static_cast<size_t>(s.m * s.n));
    hopper_gemm(da.get(), db.get(), dc.get(), s.m, s.n, s.k, nullptr);
    std::vector<float> want(static_cast<size_t>(s.m * s.n));
    matmul<float>(false, true, s.m, s.n, s.k, 1.0f, widen(a).data(), widen(b).data(), 0.0f, want.data());
    EXPECT_LT(rel_error(as_double(widen(dc.download())), as_double(want)), 1e-2)
        << s.m << " x " << s.n << " x " << s.k;
  }
}

// On the training step's shapes (fewer rows) the products equal cuBLASLt's
// heuristic first bit for bit: both sum all of k in order in fp32. This is
// what lets the engine switch kernels without changing a step's bits.
TEST_F(HopperGemmTest, EqualsCublasLtBitForBitOnTheStepShapes) {
  CublasLtMatmul cublas;
  const Shape3 shapes[] = {{1024, 3072, 2048}, {1024, 16384, 2048}, {1024, 2048, 8192}, {512, 128256, 2048}};
  for (const Shape3 s : shapes) {
    const auto a = random_bf16(s.m * s.k, 3 + s.n, -1, 1), b = random_bf16(s.n * s.k, 4 + s.k, -1, 1);
    DeviceArray<bf16> da(a), db(b), own(static_cast<size_t>(s.m * s.n)), lib(static_cast<size_t>(s.m * s.n));
    hopper_gemm(da.get(), db.get(), own.get(), s.m, s.n, s.k, nullptr);
    cublas.run(false, true, s.m, s.n, s.k, 1.0f, da.get(), DType::bf16, db.get(), DType::bf16, 0.0f, lib.get(),
               DType::bf16, nullptr);
    EXPECT_EQ(bits_of(own.download()), bits_of(lib.download())) << s.m << " x " << s.n << " x " << s.k;
  }
}

// The fused kernel's gate|up is the plain product's, and its gate output is
// the separate packed kernel's over that product, bit for bit.
TEST_F(HopperGemmTest, FusedSwigluEqualsTheProductThenTheGate) {
  struct Case {
    int64_t m, ffn, k;
  };
  for (const Case c : {Case{128, 128, 64}, Case{256, 384, 192}, Case{2048, 2048, 256}}) {
    const auto x = random_bf16(c.m * c.k, 5 + c.m, -2, 2), w = random_bf16(2 * c.ffn * c.k, 6 + c.ffn, -2, 2);
    const auto rows = static_cast<size_t>(c.m);
    DeviceArray<bf16> dx(x), dw(w), gate_up(rows * 2 * c.ffn), out(rows * c.ffn);
    DeviceArray<bf16> plain(rows * 2 * c.ffn), separate(rows * c.ffn);
    hopper_gemm_swiglu(dx.get(), dw.get(), gate_up.get(), out.get(), c.m, c.ffn, c.k, nullptr);
    hopper_gemm(dx.get(), dw.get(), plain.get(), c.m, 2 * c.ffn, c.k, nullptr);
    swiglu_packed_forward_cuda(plain.get(), separate.get(), c.m, c.ffn, nullptr);
    const std::string at = std::to_string(c.m) + " x " + std::to_string(c.ffn) + " x " + std::to_string(c.k);
    EXPECT_EQ(bits_of(gate_up.download()), bits_of(plain.download())) << at;
    EXPECT_EQ(bits_of(out.download()), bits_of(separate.download())) << at;
    // And the gate against the CPU's, from the CPU product.
    std::vector<float> product(rows * 2 * c.ffn), want(rows * c.ffn);
    matmul<float>(false, true, c.m, 2 * c.ffn, c.k, 1.0f, widen(x).data(), widen(w).data(), 0.0f, product.data());
    swiglu_packed_forward(product.data(), want.data(), c.m, c.ffn);
    EXPECT_LT(rel_error(as_double(widen(out.download())), as_double(want)), 1e-2) << at;
  }
}

// The fused backward (down_proj's dX with SwiGLU's backward done by the
// producer warpgroup's workers) writes what cuBLASLt's dout followed by the
// separate packed backward kernel writes, bit for bit: one tile; k one
// stage; more tiles than SMs, so each CTA's workers take several (their
// barrier phases and buffers turn over); the 1B step's shape with fewer rows.
TEST_F(HopperGemmTest, FusedSwigluBackwardEqualsTheProductThenTheGradient) {
  struct Case {
    int64_t m, ffn, k;
  };
  CublasLtMatmul cublas;
  for (const Case c : {Case{128, 256, 64}, Case{384, 512, 128}, Case{4096, 2048, 256}, Case{1024, 8192, 2048}}) {
    const auto rows = static_cast<size_t>(c.m);
    const auto dy = random_bf16(c.m * c.k, 7 + c.m, -1, 1), w = random_bf16(c.k * c.ffn, 8 + c.ffn, -0.1f, 0.1f);
    const auto gate_up = random_bf16(c.m * 2 * c.ffn, 9 + c.k, -4, 4);
    DeviceArray<bf16> d_dy(dy), d_w(w), d_gate_up(gate_up), fused(rows * 2 * c.ffn);
    DeviceArray<bf16> dout(rows * c.ffn), separate(rows * 2 * c.ffn);
    hopper_gemm_swiglu_backward(d_dy.get(), d_w.get(), d_gate_up.get(), fused.get(), c.m, c.ffn, c.k, nullptr);
    cublas.run(false, false, c.m, c.ffn, c.k, 1.0f, d_dy.get(), DType::bf16, d_w.get(), DType::bf16, 0.0f,
               dout.get(), DType::bf16, nullptr);
    swiglu_packed_backward_cuda(dout.get(), d_gate_up.get(), separate.get(), c.m, c.ffn, nullptr);
    const std::string at = std::to_string(c.m) + " x " + std::to_string(c.ffn) + " x " + std::to_string(c.k);
    EXPECT_EQ(bits_of(fused.download()), bits_of(separate.download())) << at;
    // And against the CPU's, from the CPU product.
    std::vector<float> product(rows * c.ffn), want(rows * 2 * c.ffn);
    matmul<float>(false, false, c.m, c.ffn, c.k, 1.0f, widen(dy).data(), widen(w).data(), 0.0f, product.data());
    swiglu_packed_backward(product.data(), widen(gate_up).data(), want.data(), c.m, c.ffn);
    EXPECT_LT(rel_error(as_double(widen(fused.download())), as_double(want)), 1e-2) << at;
  }
}

// The q|k|v product with its q and k heads rotated by the workers equals
// the product followed by the separate rope kernel, bit for bit: one tile
// holding q, k and v columns; head_dim 128 over several sequences from a
// position other than 0; head_dim 256, one head a tile; more tiles than SMs
// (each CTA's workers take several); the 1B step's layout (32 q, 8 k, 8 v
// heads of 64) with fewer rows.
TEST_F(HopperGemmTest, FusedRopeEqualsTheProductThenTheRope) {
  struct Case {
    int64_t m, n, k, seq, head_dim, rotated_heads, pos0;
  };
  for (const Case c : {Case{128, 256, 64, 128, 64, 3, 0}, Case{512, 768, 128, 256, 128, 4, 7},
                       Case{256, 512, 64, 128, 256, 1, 3}, Case{4096, 3072, 256, 1024, 64, 40, 0},
                       Case{1024, 3072, 2048, 512, 64, 40, 0}}) {
    const auto rows = static_cast<size_t>(c.m);
    const auto x = random_bf16(c.m * c.k, 10 + c.m, -1, 1), w = random_bf16(c.n * c.k, 11 + c.n, -1, 1);
    const std::vector<float> inv_freq = rope_inv_freq(c.head_dim, 500000.0, RopeScaling{});
    DeviceArray<float> d_inv_freq(inv_freq), cos_sin(static_cast<size_t>(c.seq * c.head_dim));
    rope_table_cuda(d_inv_freq.get(), c.seq, c.head_dim, c.pos0, cos_sin.get(), nullptr);
    DeviceArray<bf16> dx(x), dw(w), fused(rows * c.n), separate(rows * c.n);
    hopper_gemm_rope(dx.get(), dw.get(), fused.get(), c.m, c.n, c.k, cos_sin.get(), c.seq, c.head_dim,
                     c.rotated_heads * c.head_dim, nullptr);
    hopper_gemm(dx.get(), dw.get(), separate.get(), c.m, c.n, c.k, nullptr);
    const int64_t heads = c.n / c.head_dim;
    rope_forward_cuda(separate.get(), separate.get(), c.m / c.seq, c.seq, heads, c.head_dim, d_inv_freq.get(), c.pos0,
                      nullptr, c.rotated_heads);
    const std::string at = std::to_string(c.m) + " x " + std::to_string(c.n) + " x " + std::to_string(c.k);
    EXPECT_EQ(bits_of(fused.download()), bits_of(separate.download())) << at;
    // And against the CPU's rope of the CPU product.
    std::vector<float> want(rows * c.n);
    matmul<float>(false, true, c.m, c.n, c.k, 1.0f, widen(x).data(), widen(w).data(), 0.0f, want.data());
    rope_forward<float>(want.data(), want.data(), c.m / c.seq, c.seq, heads, c.head_dim, inv_freq.data(), c.pos0,
                        c.rotated_heads);
    EXPECT_LT(rel_error(as_double(widen(fused.download())), as_double(want)), 1e-2) << at;
  }
}

TEST_F(HopperGemmTest, RejectsShapesThatAreNotWholeTiles) {
  EXPECT_TRUE(hopper_gemm_fits(128, 256, 64));
  EXPECT_FALSE(hopper_gemm_fits(100, 256, 64));
  EXPECT_FALSE(hopper_gemm_fits(128, 200, 64));
  EXPECT_FALSE(hopper_gemm_fits(128, 256, 40));
  EXPECT_TRUE(hopper_gemm_swiglu_fits(128, 128, 64));
  EXPECT_FALSE(hopper_gemm_swiglu_fits(128, 64, 64));
  EXPECT_TRUE(hopper_gemm_swiglu_backward_fits(128, 256, 64));
  EXPECT_FALSE(hopper_gemm_swiglu_backward_fits(128, 128, 64));
  EXPECT_FALSE(hopper_gemm_swiglu_backward_fits(64, 256, 64));
  EXPECT_TRUE(hopper_gemm_rope_fits(256, 256, 64, 128, 64, 128));
  EXPECT_FALSE(hopper_gemm_rope_fits(256, 256, 64, 64, 64, 128));   // a sequence shorter than a tile
  EXPECT_FALSE(hopper_gemm_rope_fits(256, 256, 64, 128, 96, 192));  // heads straddling tiles
  EXPECT_FALSE(hopper_gemm_rope_fits(256, 256, 64, 128, 32, 128));  // more heads a tile than the workers take
  EXPECT_FALSE(hopper_gemm_rope_fits(256, 256, 64, 128, 64, 96));   // part of a head rotated
  DeviceArray<bf16> a(100 * 64), b(256 * 64), c(100 * 256);
  try {
    hopper_gemm(a.get(), b.get(), c.get(), 100, 256, 64, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hopper_gemm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100 x 256 x 64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spillway::ops
