// NF4 and the dynamic 8-bit map on the CPU, as ops/nf4.h defines them.
// Compiled without fused multiply-adds (src/CMakeLists.txt): every rounding
// is bitsandbytes'.
#include "ops/nf4.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/status.h"

namespace spillway::ops {

namespace {

// torch.clamp(min=1e-38) in float32.
constexpr float kAbsmaxFloor = 1e-38f;

// bitsandbytes' midpoints of the NF4 codes: (code[i] + code[i+1]) / 2 in float32.
const std::array<float, 15>& nf4_bounds() {
  static const std::array<float, 15> bounds = [] {
    std::array<float, 15> b{};
    const auto& c = nf4_code();
    for (size_t i = 0; i < b.size(); ++i) b[i] = (c[i] + c[i + 1]) / 2.0f;
    return b;
  }();
  return bounds;
}

// torch.bucketize(s, bounds, right=False): the count of bounds below s; a
// NaN compares as above every bound.
uint8_t nf4_index(float s) {
  const auto& b = nf4_bounds();
  uint8_t i = 0;
  while (i < b.size() && !(s <= b[i])) ++i;
  return i;
}

// torch.clamp(v, -1, 1), NaN kept.
float clamp_unit(float v) {
  if (std::isnan(v)) return v;
  return std::min(1.0f, std::max(-1.0f, v));
}

// The largest |x| of a block, NaN when one is NaN (torch's max).
float block_absmax(std::span<const float> x) {
  float m = 0.0f;
  for (float v : x) {
    const float a = std::fabs(v);
    if (std::isnan(a)) return a;
    m = std::max(m, a);
  }
  return m;
}

// torch.linspace(start, end, steps) in float32 as torch computes it on the
// CPU: one fused multiply-add from the nearer end.
std::vector<float> torch_linspace(float start, float end, int steps) {
  const float step = (end - start) / static_cast<float>(steps - 1);
  std::vector<float> v(static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    v[static_cast<size_t>(i)] = i < steps / 2 ? std::fmaf(step, static_cast<float>(i), start)
                                              : std::fmaf(-step, static_cast<float>(steps - i - 1), end);
  }
  return v;
}

// bitsandbytes' CPU lookup: [-1, 1] in 65536 steps, each step's nearest
// dynamic code (the first code whose upper midpoint is not below it).
constexpr int kLutSize = 65536;

const std::vector<uint8_t>& dynamic_lut() {
  static const std::vector<uint8_t> lut = [] {
    const auto& code = dynamic_map_code();
    std::array<float, 255> mid{};
    for (size_t i = 0; i < mid.size(); ++i) mid[i] = 0.5f * (code[i] + code[i + 1]);
    std::vector<uint8_t> t(kLutSize);
    size_t at = 0;
    for (int i = 0; i < kLutSize; ++i) {
      const float value = -1.0f + (2.0f * static_cast<float>(i)) / static_cast<float>(kLutSize - 1);
      while (at < mid.size() && mid[at] < value) ++at;
      t[static_cast<size_t>(i)] = static_cast<uint8_t>(at);
    }
    return t;
  }();
  return lut;
}

uint16_t lut_index(float v) {
  v = std::clamp(v, -1.0f, 1.0f);
  const float scaled = (v + 1.0f) * 0.5f;
  const float steps = scaled * static_cast<float>(kLutSize - 1);
  return static_cast<uint16_t>(steps + 0.5f);
}

}  // namespace

const std::array<float, 16>& nf4_code() {
  // bitsandbytes' table (create_normal_map(0.9677083) normalized), as float32.
  static const std::array<float, 16> code = {
      -1.0f,
      -0.6961928009986877f,
      -0.5250730514526367f,
      -0.39491748809814453f,
      -0.28444138169288635f,
      -0.18477343022823334f,
      -0.09105003625154495f,
      0.0f,
      0.07958029955625534f,
      0.16093020141124725f,
      0.24611230194568634f,
      0.33791524171829224f,
      0.44070982933044434f,
      0.5626170039176941f,
      0.7229568362236023f,
      1.0f,
  };
  return code;
}

const std::array<float, 256>& dynamic_map_code() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for
  // exponent i = 0..6, the 2^i midpoints of linspace(0.1, 1, 2^i + 1)
  // scaled by 10^(i - 6), both signs; then 0 and 1; sorted. All in float32.
  static const std::array<float, 256> code = [] {
    std::vector<float> data;
    for (int i = 0; i < 7; ++i) {
      const std::vector<float> bounds = torch_linspace(0.1f, 1.0f, (1 << i) + 1);
      const auto scale = static_cast<float>(std::pow(10.0, i - 6));
      for (size_t j = 0; j + 1 < bounds.size(); ++j) {
        const float mean = (bounds[j] + bounds[j + 1]) / 2.0f;
        data.push_back(scale * mean);
        data.push_back(-(scale * mean));
      }
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    std::array<float, 256> out{};
    std::copy(data.begin(), data.end(), out.begin());
    return out;
  }();
  return code;
}

void nf4_quantize(std::span<const float> x, int64_t block, std::span<uint8_t> packed, std::span<float> absmax) {
  const auto n = static_cast<int64_t>(x.size());
  SPW_CHECK(block > 0 && block % 2 == 0 && packed.size() == static_cast<size_t>(nf4_packed_bytes(n)) &&
                absmax.size() == static_cast<size_t>(nf4_blocks(n, block)),
            "nf4_quantize", "buffers do not fit ", n, " values in blocks of ", block);
  const int64_t blocks = nf4_blocks(n, block);
  const int64_t full = n - n % block;
  std::fill(packed.begin(), packed.end(), uint8_t{0});
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    const float m = block_absmax(x.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
    const float floored = std::isnan(m) ? m : std::max(m, kAbsmaxFloor);
    const bool partial = begin >= full;
    absmax[static_cast<size_t>(b)] = partial ? floored : m;
    const float inverse = 1.0f / floored;
    for (int64_t i = begin; i < end; ++i) {
      const float v = x[static_cast<size_t>(i)];
      const uint8_t q = nf4_index(clamp_unit(partial ? v / floored : v * inverse));
      // Blocks hold an even count, so no byte is shared between two blocks
      // (a partial block is the last).
      packed[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>(i % 2 == 0 ? q << 4 : q);
    }
  }
  if (n % 2 == 1) packed.back() |= nf4_index(0.0f);  // the pad: torch pads with 0
}

void nf4_dequantize(std::span<const uint8_t> packed, std::span<const float> absmax, int64_t block,
                    std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
  SPW_CHECK(block > 0 && packed.size() == static_cast<size_t>(nf4_packed_bytes(n)) &&
                absmax.size() == static_cast<size_t>(nf4_blocks(n, block)),
            "nf4_dequantize", "buffers do not fit ", n, " values in blocks of ", block);
  const auto& code = nf4_code();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = packed[static_cast<size_t>(i / 2)];
    const uint8_t q = i % 2 == 0 ? byte >> 4 : byte & 0xF;
    out[static_cast<size_t>(i)] = code[q] * absmax[static_cast<size_t>(i / block)];
  }
}

float nf4_scale_offset(std::span<const float> absmax) {
  double sum = 0;
  for (float a : absmax) sum += a;
  return absmax.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(absmax.size()));
}

void dynamic_quantize(std::span<const float> x, int64_t block, std::span<uint8_t> codes, std::span<float> absmax) {
  const auto n = static_cast<int64_t>(x.size());
  SPW_CHECK(block > 0 && codes.size() == x.size() && absmax.size() == static_cast<size_t>(nf4_blocks(n, block)),
            "dynamic_quantize", "buffers do not fit ", n, " values in blocks of ", block);
  const std::vector<uint8_t>& lut = dynamic_lut();
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t begin = b * block, end = std::min(n, begin + block);
    // bitsandbytes' std::max, which passes over a NaN.
    float m = 0.0f;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[static_cast<size_t>(i)]));
    absmax[static_cast<size_t>(b)] = m;
    if (m == 0.0f) {
      std::fill(codes.begin() + begin, codes.begin() + end, uint8_t{0});
      continue;
    }
    const float inverse = 1.0f / m;
    for (int64_t i = begin; i < end; ++i) {
      codes[static_cast<size_t>(i)] = lut[lut_index(x[static_cast<size_t>(i)] * inverse)];
    }
  }
}

void dynamic_dequantize(std::span<const uint8_t> codes, std::span<const float> absmax, int64_t block,
                        std::span<float> out) {
  const auto n = static_cast<int64_t>(out.size());
  SPW_CHECK(block > 0 && codes.size() == out.size() && absmax.size() == static_cast<size_t>(nf4_blocks(n, block)),
            "dynamic_dequantize", "buffers do not fit ", n, " values in blocks of ", block);
  const auto& code = dynamic_map_code();
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = code[codes[static_cast<size_t>(i)]] * absmax[static_cast<size_t>(i / block)];
  }
}

uint64_t nf4_stored_bytes(int64_t numel, bool double_quant, int64_t block) {
  const auto blocks = static_cast<uint64_t>(nf4_blocks(numel, block));
  const auto packed = static_cast<uint64_t>(nf4_packed_bytes(numel));
  if (!double_quant) return packed + blocks * sizeof(float);
  const auto scale_blocks = static_cast<uint64_t>(nf4_blocks(static_cast<int64_t>(blocks), kNf4ScaleBlock));
  return packed + blocks + scale_blocks * sizeof(float) + sizeof(float);
}

uint64_t Nf4Tensor::bytes() const {
  return packed.size() + absmax.size() * sizeof(float) + qabsmax.size() + absmax2.size() * sizeof(float) +
         (double_quantized() ? sizeof(float) : 0);
}

std::vector<float> Nf4Tensor::scales() const {
  if (!double_quantized()) return absmax;
  std::vector<float> s(qabsmax.size());
  dynamic_dequantize(qabsmax, absmax2, kNf4ScaleBlock, s);
  for (float& v : s) v += offset;
  return s;
}

void Nf4Tensor::dequantize(std::span<float> out) const {
  SPW_CHECK(static_cast<int64_t>(out.size()) == numel, "Nf4Tensor", "dequantizes into ", out.size(),
            " values, not its ", numel);
  if (double_quantized()) {
    const std::vector<float> s = scales();
    nf4_dequantize(packed, s, block, out);
  } else {
    nf4_dequantize(packed, absmax, block, out);
  }
}

Nf4Tensor nf4_quantize(std::span<const float> x, bool double_quant, const char* what, int64_t block) {
  for (size_t i = 0; i < x.size(); ++i) {
    SPW_CHECK(std::isfinite(x[i]), what, "holds ", x[i], " at element ", i,
              "; NF4 keeps finite values only (bitsandbytes would make its block NaN)");
  }
  Nf4Tensor t;
  t.numel = static_cast<int64_t>(x.size());
  t.block = block;
  t.packed.resize(static_cast<size_t>(nf4_packed_bytes(t.numel)));
  std::vector<float> absmax(static_cast<size_t>(nf4_blocks(t.numel, block)));
  nf4_quantize(x, block, t.packed, absmax);
  if (!double_quant) {
    t.absmax = std::move(absmax);
    return t;
  }
  t.offset = nf4_scale_offset(absmax);
  for (float& a : absmax) a -= t.offset;
  t.qabsmax.resize(absmax.size());
  t.absmax2.resize(static_cast<size_t>(nf4_blocks(static_cast<int64_t>(absmax.size()), kNf4ScaleBlock)));
  dynamic_quantize(absmax, kNf4ScaleBlock, t.qabsmax, t.absmax2);
  return t;
}

}  // namespace spillway::ops
