#include "ops/cast.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "base/status.h"

namespace spillway::ops {

namespace {

// f64 -> f32 rounded to odd: truncate, then set the last bit when anything was
// cut off. A second rounding of that float to bf16 or f16 (which keep far
// fewer bits) then lands where a single correct rounding of the double would,
// which rounding to nearest twice does not: 1 + 2^-8 + 2^-30 must become
// bf16 1 + 2^-7, but first rounding to f32 leaves the tie 1 + 2^-8, and the
// tie goes to 1.
float to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bits_float(float_bits(f) | 1u);
}

// Every source except f64 widens to float exactly.
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return to_float(x); }
inline float widen(f16 x) { return to_float(x); }

template <typename Dst>
Dst narrow_float(float x);
template <> float narrow_float<float>(float x) { return x; }
template <> double narrow_float<double>(float x) { return x; }
template <> bf16 narrow_float<bf16>(float x) { return to_bf16(x); }
template <> f16 narrow_float<f16>(float x) { return to_f16(x); }

template <typename Dst>
Dst narrow_double(double x);
template <> float narrow_double<float>(double x) { return static_cast<float>(x); }
template <> bf16 narrow_double<bf16>(double x) { return to_bf16(to_float_round_odd(x)); }
template <> f16 narrow_double<f16>(double x) { return to_f16(to_float_round_odd(x)); }

template <typename Src, typename Dst>
Dst convert(Src x) {
  if constexpr (std::is_same_v<Src, double>) {
    return narrow_double<Dst>(x);
  } else {
    return narrow_float<Dst>(widen(x));
  }
}

template <typename Src, typename Dst>
void convert_all(const void* src, void* dst, int64_t n) {
  if constexpr (std::is_same_v<Src, Dst>) {
    // A plain copy keeps every bit, NaN payloads included; src may equal dst.
    std::memmove(dst, src, static_cast<size_t>(n) * sizeof(Src));
  } else {
    const Src* in = static_cast<const Src*>(src);
    Dst* out = static_cast<Dst*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) out[i] = convert<Src, Dst>(in[i]);
  }
}

template <typename Fn>
void with_float_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    case DType::bf16: return fn(bf16{});
    case DType::f16: return fn(f16{});
    default: break;
  }
}

}  // namespace

void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n) {
  SPW_CHECK(dtype_is_float(src_type) && dtype_is_float(dst_type), "cast", "cannot cast ",
            dtype_name(src_type), " to ", dtype_name(dst_type),
            " (only f64, f32, bf16 and f16 convert)");
  SPW_CHECK(n >= 0, "cast", "negative element count ", n);
  if (n == 0) return;
  with_float_type(src_type, [&](auto src_tag) {
    with_float_type(dst_type, [&](auto dst_tag) {
      convert_all<decltype(src_tag), decltype(dst_tag)>(src, dst, n);
    });
  });
}

}  // namespace spillway::ops
