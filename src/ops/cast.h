// Conversions between floating dtypes (f64, f32, bf16, f16).
//
// Contract: dst[i] = convert(src[i]) for n elements. Narrowing rounds to
// nearest even and keeps NaN (base/dtype.h's scalar rules); widening is exact.
// A non-float dtype throws Error("cast", ...) naming both dtypes.
// Backward of y = cast(x): dx = cast(dy) back to x's dtype.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace spillway::ops {

void cast(const void* src, DType src_type, void* dst, DType dst_type, int64_t n);

}  // namespace spillway::ops
