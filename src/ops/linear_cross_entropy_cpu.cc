#include "ops/linear_cross_entropy.h"

namespace spillway::ops {

template <typename T>
void mean_loss_weights(const int32_t* targets, int64_t rows, T* weights) {
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) counted += targets[r] >= 0;
  const T w = counted > 0 ? static_cast<T>(1.0 / static_cast<double>(counted)) : T(0);
  for (int64_t r = 0; r < rows; ++r) weights[r] = targets[r] >= 0 ? w : T(0);
}

template void mean_loss_weights<float>(const int32_t*, int64_t, float*);
template void mean_loss_weights<double>(const int32_t*, int64_t, double*);

}  // namespace spillway::ops
