// Elementwise sums: the residual stream and gradient accumulation.
//
// Contract: out = a + b over n elements (out may alias a or b);
//           accumulate: dst += src.
// Backward of out = a + b: da = dout, db = dout (the graph passes dout on,
// no kernel runs).
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);

template <typename T>
void accumulate(T* dst, const T* src, int64_t n);

}  // namespace spillway::ops
