// Kernels must give the same bits whatever the thread count.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <vector>

namespace spillway::testing {

// Runs `run` (which returns the kernel's outputs as one vector) with 1 and
// with 4 OpenMP threads and expects bitwise equal results.
template <typename Run>
void expect_same_bits_with_1_and_4_threads(Run run) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run();
  omp_set_num_threads(4);
  const auto four = run();
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  EXPECT_EQ(std::memcmp(one.data(), four.data(), one.size() * sizeof(one[0])), 0);
}

}  // namespace spillway::testing
