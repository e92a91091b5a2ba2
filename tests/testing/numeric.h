// Test helpers shared by every op test: seeded random inputs, relative error
// against a float64 reference, and central finite differences.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <span>
#include <vector>

namespace spillway::testing {

// Uniform in [lo, hi), reproducible from the seed.
template <typename T = double>
std::vector<T> random_vector(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// As random_vector in [-1, 1), with a -0 every 7th element: -0 + 0 is +0,
// so a kernel that copies such an element where an add would sum it with a
// zero changes its bits.
template <typename T>
std::vector<T> with_negative_zeros(int64_t n, uint64_t seed) {
  std::vector<T> v = random_vector<T>(n, seed, -1.0, 1.0);
  for (size_t i = 0; i < v.size(); i += 7) v[i] = T(-0.0);
  return v;
}

template <typename T>
std::vector<T> cast_vector(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// ||got - want|| / ||want|| (absolute norm when want is all zeros). NaN in
// got gives infinity, so a NaN never passes a tolerance.
template <typename T>
double rel_error(const std::vector<T>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = static_cast<double>(got[i]);
    if (!std::isfinite(g)) return INFINITY;
    diff += (g - want[i]) * (g - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

// d loss / d x by central differences: perturbs each element of x in place,
// calls loss(), and restores it. Step h suits float64 inputs of order one.
inline std::vector<double> numeric_gradient(std::vector<double>& x, const std::function<double()>& loss,
                                            double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double up = loss();
    x[i] = saved - h;
    double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// sum_i a[i] * b[i] in double: turns an op's output into the scalar whose
// gradient backward computes, given an upstream gradient b.
template <typename T>
double dot(const std::vector<T>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// The bytes of x, so that EXPECT_EQ compares bits (-0 against +0, NaN
// payloads) where == on values would not.
template <typename T>
std::vector<char> bytes_of(std::span<const T> x) {
  std::vector<char> out(x.size_bytes());
  std::memcpy(out.data(), x.data(), x.size_bytes());
  return out;
}
template <typename T>
std::vector<char> bytes_of(const std::vector<T>& x) {
  return bytes_of(std::span<const T>(x));
}

}  // namespace spillway::testing
