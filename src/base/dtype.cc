#include "base/dtype.h"

#include "base/status.h"

namespace spillway {

namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "f32", 4}, {DType::f64, "f64", 8}, {DType::bf16, "bf16", 2},
    {DType::f16, "f16", 2}, {DType::i32, "i32", 4}, {DType::u16, "u16", 2},
    {DType::u32, "u32", 4},
};
const DTypeInfo& info(DType t) { return kDTypes[static_cast<int>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
std::string_view dtype_name(DType t) { return info(t).name; }
bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16;
}

DType parse_dtype(std::string_view name, std::string_view what) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.type;
  }
  throw Error(what, "unknown dtype '" + std::string(name) +
                        "' (expected f32, f64, bf16, f16, i32, u16 or u32)");
}

f16 to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) {
    // Rounds to a value >= 65520, past the largest half (65504): infinity.
    return f16{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal. Adding 0.5 moves
    // the value so that the float's own rounding (to nearest even) lands
    // exactly on a multiple of 2^-24, the subnormal step.
    float shifted = bits_float(abs) + 0.5f;
    return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(float_bits(shifted) - float_bits(0.5f)))};
  }
  uint32_t mantissa_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mantissa_odd;  // rebias exponent (127 -> 15) and round to even
  return f16{static_cast<uint16_t>(sign | (abs >> 13))};
}

float to_float(f16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp == 0) {
    // Subnormal (or zero): value = mant * 2^-24, exact in float.
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return bits_float(sign | float_bits(v));
  }
  return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace spillway
