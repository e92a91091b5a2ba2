#include <algorithm>

#include "base/status.h"
#include "ops/fill.h"

namespace spillway::ops {

void fill(void* dst, DType dtype, int64_t n, double value) {
  switch (dtype) {
    case DType::f32: std::fill_n(static_cast<float*>(dst), n, static_cast<float>(value)); break;
    case DType::f64: std::fill_n(static_cast<double*>(dst), n, value); break;
    case DType::bf16: std::fill_n(static_cast<bf16*>(dst), n, to_bf16(static_cast<float>(value))); break;
    default: throw Error("fill", "cannot fill a tensor of dtype " + std::string(dtype_name(dtype)));
  }
}

}  // namespace spillway::ops
