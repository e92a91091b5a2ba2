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

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

namespace spillway::ops {

// GPU: f32 <-> bf16 with the CPU's rounding bit for bit (nearest even, NaN
// kept with its sign), and f32 -> f32 / bf16 -> bf16 copies (src may equal
// dst). Any other pair of dtypes throws Error("cast", ...) naming both.
void cast_cuda(const void* src, DType src_type, void* dst, DType dst_type, int64_t n,
               cudaStream_t stream);

}  // namespace spillway::ops
#endif
