// Sizes computed from numbers a file or a flag gave: products and sums that
// would wrap around 64 bits are an Error naming the thing and the quantity,
// never a small wrapped count that a later allocation or read trusts.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/status.h"

namespace spillway {

// nullopt where the exact result does not fit in 64 bits.
constexpr std::optional<uint64_t> mul_or_none(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}
constexpr std::optional<uint64_t> add_or_none(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a × b, or Error(thing, "<what> overflows 64 bits: a x b").
inline uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view thing, std::string_view what) {
  const std::optional<uint64_t> out = mul_or_none(a, b);
  SPW_CHECK(out.has_value(), thing, what, " overflows 64 bits: ", a, " x ", b);
  return *out;
}

// a + b, or Error(thing, "<what> overflows 64 bits: a + b").
inline uint64_t checked_add(uint64_t a, uint64_t b, std::string_view thing, std::string_view what) {
  const std::optional<uint64_t> out = add_or_none(a, b);
  SPW_CHECK(out.has_value(), thing, what, " overflows 64 bits: ", a, " + ", b);
  return *out;
}

// A count read from outside, checked to be in [least, most] before it sizes
// anything: Error(thing, "<field> is <value>; at most <most>").
inline int64_t checked_count(int64_t value, int64_t least, int64_t most, std::string_view thing,
                             std::string_view field) {
  SPW_CHECK(value >= least, thing, field, " is ", value, "; must be at least ", least);
  SPW_CHECK(value <= most, thing, field, " is ", value, "; at most ", most);
  return value;
}

}  // namespace spillway
