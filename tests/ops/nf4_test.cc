// NF4 (ops/nf4.h) bit for bit against bitsandbytes: the fixture
// fixtures/nf4.safetensors holds what bitsandbytes 0.50.2's quantize_4bit
// and dequantize_4bit gave on the CPU for each case (make_nf4_fixtures.py,
// committed beside this test, wrote it): the packed bytes, the absmax, the
// dequantized floats, and for double quantization the 8-bit scales.
#include "ops/nf4.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/status.h"
#include "model/safetensors.h"

namespace spillway::ops {
namespace {

const std::filesystem::path kFixture = std::filesystem::path(__FILE__).parent_path() / "fixtures" / "nf4.safetensors";

class Nf4Fixture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { file_ = new SafetensorsFile(kFixture.string()); }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  static std::vector<float> floats(const std::string& name) {
    const SafetensorsTensor& t = file_->tensor(name);
    std::vector<float> v(static_cast<size_t>(t.shape.numel()));
    file_->read_tensor_as_f32(name, v);
    return v;
  }
  // The fixture's bytes, stored one int32 each.
  static std::vector<uint8_t> bytes(const std::string& name) {
    const SafetensorsTensor& t = file_->tensor(name);
    EXPECT_EQ(t.dtype, DType::i32) << name;
    std::vector<uint8_t> v(static_cast<size_t>(t.shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      int32_t x;
      std::memcpy(&x, t.bytes.data() + i * 4, 4);
      EXPECT_TRUE(x >= 0 && x < 256) << name << "[" << i << "] = " << x;
      v[i] = static_cast<uint8_t>(x);
    }
    return v;
  }
  static SafetensorsFile* file_;
};

SafetensorsFile* Nf4Fixture::file_ = nullptr;

// Equal as bits: NaN to NaN of the same bits, -0 apart from 0.
::testing::AssertionResult same_bits(std::span<const float> got, std::span<const float> want, const std::string& what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << what << ": " << got.size() << " values, not " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return ::testing::AssertionFailure() << what << "[" << i << "]: " << got[i] << " (0x" << std::hex
                                           << std::bit_cast<uint32_t>(got[i]) << "), bitsandbytes " << want[i]
                                           << " (0x" << std::bit_cast<uint32_t>(want[i]) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

const std::vector<std::string> kCases = {"normal", "matrix", "zeros",     "ties",  "ties_scaled",
                                         "extremes", "nonfinite", "large", "dq_wide", "dq_constant"};

TEST_F(Nf4Fixture, CodesAreBitsandbytes) {
  EXPECT_TRUE(same_bits(nf4_code(), floats("nf4.code"), "nf4 code"));
  EXPECT_TRUE(same_bits(dynamic_map_code(), floats("dynamic.code"), "dynamic map"));
}

TEST_F(Nf4Fixture, QuantizeAndDequantizeMatchBitForBit) {
  for (const std::string& name : kCases) {
    SCOPED_TRACE(name);
    const std::vector<float> x = floats(name + ".x");
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> packed(static_cast<size_t>(nf4_packed_bytes(n)));
    std::vector<float> absmax(static_cast<size_t>(nf4_blocks(n)));
    nf4_quantize(x, kNf4Block, packed, absmax);
    EXPECT_EQ(packed, bytes(name + ".packed"));
    EXPECT_TRUE(same_bits(absmax, floats(name + ".absmax"), "absmax"));
    std::vector<float> out(x.size());
    nf4_dequantize(bytes(name + ".packed"), floats(name + ".absmax"), kNf4Block, out);
    EXPECT_TRUE(same_bits(out, floats(name + ".dequant"), "dequantized"));
  }
}

// The rule the ties case pins down, spelled out: a value exactly on a
// midpoint takes the lower code, in a full block and in the last partial one.
TEST_F(Nf4Fixture, TiesGoToTheLowerCode) {
  const std::vector<float> x = floats("ties.x");
  std::vector<uint8_t> packed(static_cast<size_t>(nf4_packed_bytes(static_cast<int64_t>(x.size()))));
  std::vector<float> absmax(static_cast<size_t>(nf4_blocks(static_cast<int64_t>(x.size()))));
  nf4_quantize(x, kNf4Block, packed, absmax);
  // Element 0 is 1 (code 15); elements 1..15 are the midpoints, which
  // take codes 0..14.
  auto code_at = [&](size_t i) { return i % 2 == 0 ? packed[i / 2] >> 4 : packed[i / 2] & 0xF; };
  EXPECT_EQ(code_at(0), 15);
  for (size_t i = 1; i <= 15; ++i) EXPECT_EQ(code_at(i), i - 1) << "midpoint " << i - 1;
  // Just above each midpoint: the upper code.
  for (size_t i = 31; i <= 45; ++i) EXPECT_EQ(code_at(i), i - 30) << "above midpoint " << i - 31;
  // The last partial block (from 64): 1, then the midpoints again.
  EXPECT_EQ(code_at(64), 15);
  for (size_t i = 65; i <= 79; ++i) EXPECT_EQ(code_at(i), i - 65);
}

TEST_F(Nf4Fixture, NonFiniteBlocksAreNaNAsInBitsandbytes) {
  const std::vector<float> absmax = floats("nonfinite.absmax");
  EXPECT_TRUE(std::isnan(absmax[0]));
  EXPECT_TRUE(std::isinf(absmax[1]) && std::isinf(absmax[2]));
  EXPECT_TRUE(std::isfinite(absmax[3]));
  // The checked quantizer refuses them instead, naming the element.
  const std::vector<float> x = floats("nonfinite.x");
  try {
    nf4_quantize(x, false, "layers.0.q_proj");
    FAIL() << "NaN quantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers.0.q_proj: holds nan at element 0"), std::string::npos) << e.what();
  }
}

TEST_F(Nf4Fixture, DoubleQuantizedScalesMatchGivenTheOffset) {
  for (const std::string& name : {"large", "dq_wide", "dq_constant"}) {
    SCOPED_TRACE(name);
    const std::vector<float> absmax = floats(name + ".absmax");
    const float offset = floats(name + ".offset")[0];
    // spillway's offset (the mean summed in double) is bitsandbytes' (torch's
    // float32 mean) to within its last bits.
    EXPECT_NEAR(nf4_scale_offset(absmax), offset, 4e-7 * std::fabs(offset));
    std::vector<float> centred = absmax;
    for (float& a : centred) a -= offset;
    std::vector<uint8_t> q(absmax.size());
    std::vector<float> absmax2(static_cast<size_t>(nf4_blocks(static_cast<int64_t>(absmax.size()), kNf4ScaleBlock)));
    dynamic_quantize(centred, kNf4ScaleBlock, q, absmax2);
    EXPECT_EQ(q, bytes(name + ".qabsmax"));
    EXPECT_TRUE(same_bits(absmax2, floats(name + ".absmax2"), "absmax2"));

    Nf4Tensor t;
    t.numel = static_cast<int64_t>(floats(name + ".x").size());
    t.packed = bytes(name + ".packed");
    t.qabsmax = bytes(name + ".qabsmax");
    t.absmax2 = floats(name + ".absmax2");
    t.offset = offset;
    EXPECT_TRUE(same_bits(t.scales(), floats(name + ".dq_absmax"), "dequantized absmax"));
    std::vector<float> out(static_cast<size_t>(t.numel));
    t.dequantize(out);
    EXPECT_TRUE(same_bits(out, floats(name + ".dq_dequant"), "dequantized"));
    // Quantized whole, the same when the offsets agree.
    const Nf4Tensor mine = nf4_quantize(floats(name + ".x"), true, name.c_str());
    EXPECT_EQ(mine.packed, t.packed);
    if (mine.offset == offset) EXPECT_EQ(mine.qabsmax, t.qabsmax);
    EXPECT_EQ(mine.bytes(), t.packed.size() + t.qabsmax.size() + 4 * t.absmax2.size() + 4);
  }
}

// Beyond the fixture: every value comes back within half the widest gap
// between two codes of its block's scale, and a value that is a code times
// the absmax comes back exactly.
TEST(Nf4, RoundTripsWithinTheCodeSpacing) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> x(64 * 40 + 3);
  for (float& v : x) v = normal(rng);
  const Nf4Tensor t = nf4_quantize(x, false, "x");
  EXPECT_EQ(t.bytes(), (x.size() + 1) / 2 + 4 * 41);
  std::vector<float> y(x.size());
  t.dequantize(y);
  const auto& c = nf4_code();
  float widest = 0;
  for (size_t i = 0; i + 1 < c.size(); ++i) widest = std::max(widest, c[i + 1] - c[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * widest * t.absmax[i / 64] * (1 + 1e-6f)) << i;
  }
  std::vector<float> exact(64);
  for (size_t i = 0; i < exact.size(); ++i) exact[i] = c[i % 16] * 0.5f;
  std::vector<float> back(exact.size());
  nf4_quantize(exact, false, "exact").dequantize(back);
  EXPECT_TRUE(same_bits(back, exact, "codes"));
}

// What a QLoRA base will take is counted before quantizing it.
TEST(Nf4, StoredBytesAreCountedWithoutQuantizing) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (size_t n : {size_t{1}, size_t{65}, size_t{256 * 64 + 1}, size_t{3 * 256 * 64}}) {
    std::vector<float> x(n);
    for (float& v : x) v = normal(rng);
    for (bool dq : {false, true}) {
      EXPECT_EQ(nf4_stored_bytes(static_cast<int64_t>(n), dq), nf4_quantize(x, dq, "x").bytes())
          << n << (dq ? " double-quantized" : "");
    }
  }
}

}  // namespace
}  // namespace spillway::ops
