// Element types and the scalar conversions between them.
//
// bf16 and f16 are stored as raw 16-bit patterns. Conversions from f32 round
// to nearest even and keep NaN a NaN (a plain truncation of a NaN payload can
// turn it into infinity).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace spillway {

// f64 is not a training dtype: the CPU backend runs graphs in f64 so that
// finite-difference gradient checks are exact enough to mean something.
enum class DType : uint8_t { f32, f64, bf16, f16, i32, u16, u32 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
// Throws Error naming `what` when `name` is not a dtype.
DType parse_dtype(std::string_view name, std::string_view what = "dtype");
bool dtype_is_float(DType t);

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force a quiet NaN
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}
inline float to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

f16 to_f16(float f);
float to_float(f16 h);

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <> constexpr DType dtype_of<f16>() { return DType::f16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }
template <> constexpr DType dtype_of<uint32_t>() { return DType::u32; }

}  // namespace spillway
