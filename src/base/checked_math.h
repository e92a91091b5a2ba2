// Sizes computed from numbers a file or a flag gave: a product that would
// wrap around 64 bits is an Error naming the thing and the quantity, never a
// small wrapped count that a later allocation or read trusts. (Sums of such
// sizes need no helper: each term is first checked against the file's size.)
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

// a × b, or Error(thing, "<what> overflows 64 bits: a x b").
inline uint64_t checked_mul(uint64_t a, uint64_t b, std::string_view thing, std::string_view what) {
  const std::optional<uint64_t> out = mul_or_none(a, b);
  SPW_CHECK(out.has_value(), thing, what, " overflows 64 bits: ", a, " x ", b);
  return *out;
}

}  // namespace spillway
