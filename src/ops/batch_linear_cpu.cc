#include "ops/batch_linear.h"

#include <cmath>

#include "base/status.h"

namespace spillway::ops {

void batch_linear_reference(const bf16* x, const int32_t* row_index, const bf16* w, float* y, int64_t rows,
                            int64_t in, int64_t out) {
  SPW_CHECK(in % 8 == 0, "batch_linear", "the input width must be a multiple of 8, got ", in);
  constexpr int kLanes = 32;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    const bf16* wo = w + o * in;
    for (int64_t r = 0; r < rows; ++r) {
      const bf16* xr = x + (row_index != nullptr ? row_index[r] : r) * in;
      float lane[kLanes] = {};
      for (int64_t piece = 0; piece < in / 8; ++piece) {
        float& sum = lane[piece % kLanes];
        for (int64_t j = piece * 8; j < piece * 8 + 8; ++j) sum = std::fma(to_float(xr[j]), to_float(wo[j]), sum);
      }
      for (int width = kLanes / 2; width > 0; width /= 2) {
        for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
      }
      y[r * out + o] = lane[0];
    }
  }
}

}  // namespace spillway::ops
