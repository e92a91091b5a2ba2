// The batch-invariant matmul's CPU reference (the GPU kernel's order on the
// CPU): it is a matmul, to fp32 rounding against float64, and it refuses a
// width it cannot cut into pieces of 8.
#include "ops/batch_linear.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

std::vector<bf16> random_bf16(int64_t n, uint64_t seed) {
  std::vector<bf16> out;
  for (double v : testing::random_vector(n, seed)) out.push_back(to_bf16(static_cast<float>(v)));
  return out;
}

TEST(BatchLinear, ReferenceIsAMatmul) {
  for (const auto& [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 1}, {5, 264, 7}, {9, 1024, 33}}) {
    const auto x = random_bf16(rows * in, 1), w = random_bf16(out * in, 2);
    std::vector<float> y(static_cast<size_t>(rows * out));
    batch_linear_reference(x.data(), nullptr, w.data(), y.data(), rows, in, out);
    std::vector<double> want(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out; ++o) {
        double sum = 0;
        for (int64_t k = 0; k < in; ++k) sum += double(to_float(x[r * in + k])) * to_float(w[o * in + k]);
        want[static_cast<size_t>(r * out + o)] = sum;
      }
    }
    EXPECT_LT(testing::rel_error(y, want), 1e-6) << rows << " x " << in << " x " << out;
    // Rows picked by index: the same bits as those rows computed in place.
    const std::vector<int32_t> pick = {static_cast<int32_t>(rows - 1), 0};
    std::vector<float> picked(2 * static_cast<size_t>(out));
    batch_linear_reference(x.data(), pick.data(), w.data(), picked.data(), 2, in, out);
    EXPECT_EQ(std::vector<float>(picked.begin(), picked.begin() + out),
              std::vector<float>(y.end() - out, y.end()));
    EXPECT_EQ(std::vector<float>(picked.begin() + out, picked.end()), std::vector<float>(y.begin(), y.begin() + out));
  }
}

TEST(BatchLinear, WidthMustBeAMultipleOf8) {
  const auto x = random_bf16(12, 1), w = random_bf16(12, 2);
  float y = 0;
  EXPECT_THROW(batch_linear_reference(x.data(), nullptr, w.data(), &y, 1, 12, 1), Error);
}

}  // namespace
}  // namespace spillway::ops
