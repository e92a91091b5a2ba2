#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"
#include "ops/simd_cpu.h"

namespace spillway::ops {

namespace {

// Checked before any parallel loop, so the first bad row is the one reported
// and no exception has to leave an OpenMP region. Returns the rows that count.
int64_t check_targets(const int32_t* targets, int64_t rows, int64_t vocab) {
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    SPW_CHECK(targets[r] < vocab, "cross_entropy", "row ", r, " has target ", targets[r],
              ", past the vocabulary of ", vocab);
    if (targets[r] >= 0) ++counted;
  }
  return counted;
}

// log(sum_j exp(x_j)) with the row max taken out first, so no exp overflows.
template <typename T>
double log_sum_exp(const T* x, int64_t vocab) {
  T max = x[0];
  for (int64_t j = 1; j < vocab; ++j) max = std::max(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < vocab; ++j) sum += static_cast<double>(std::exp(x[j] - max));
  return static_cast<double>(max) + std::log(sum);
}

// The float rows vectorize: exps in float lanes, summed in double through
// four accumulators in a fixed order.
double log_sum_exp(const float* x, int64_t vocab) {
  float max = x[0];
  for (int64_t j = 1; j < vocab; ++j) max = std::max(max, x[j]);
  thread_local std::vector<float> exps;
  exps.resize(static_cast<size_t>(vocab));
  exp_shifted(x, max, exps.data(), vocab);
  double acc[4] = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= vocab; j += 4) {
    for (int k = 0; k < 4; ++k) acc[k] += exps[static_cast<size_t>(j + k)];
  }
  for (; j < vocab; ++j) acc[0] += exps[static_cast<size_t>(j)];
  return static_cast<double>(max) + std::log((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

// dx = scale * softmax(x), given the row's log-sum-exp.
template <typename T>
void scaled_softmax(const T* x, T row_lse, T scale, T* dx, int64_t vocab) {
  for (int64_t j = 0; j < vocab; ++j) dx[j] = scale * std::exp(x[j] - row_lse);
}

void scaled_softmax(const float* x, float row_lse, float scale, float* dx, int64_t vocab) {
  exp_shifted(x, row_lse, dx, vocab);
  for (int64_t j = 0; j < vocab; ++j) dx[j] *= scale;
}

// The separate passes and the fused one share the helpers below, which is what
// makes them agree bit for bit.

// A row's log-sum-exp into `lse`; returns its loss (0 when it does not
// count), times its weight when there are weights.
template <typename T>
double row_forward(const T* x, int32_t target, T& lse, int64_t vocab, const T* weight) {
  const double row_lse = log_sum_exp(x, vocab);
  lse = static_cast<T>(row_lse);
  if (target < 0) return 0.0;
  const double loss = row_lse - static_cast<double>(x[target]);
  return weight ? static_cast<double>(*weight) * loss : loss;
}

// The mean over counted rows; with weights, the weighted sum as it is.
template <typename T>
T total_loss(const std::vector<double>& row_loss, int64_t counted, bool weighted) {
  double sum = 0;
  for (double l : row_loss) sum += l;
  if (weighted) return static_cast<T>(sum);
  return counted > 0 ? static_cast<T>(sum / static_cast<double>(counted)) : T(0);
}

// What a row's softmax - onehot is multiplied by: dloss / counted, or
// dloss * the row's weight.
template <typename T>
T gradient_scale(T dloss, int64_t counted, const T* weight) {
  if (weight) return static_cast<T>(static_cast<double>(dloss) * static_cast<double>(*weight));
  return counted > 0 ? static_cast<T>(static_cast<double>(dloss) / counted) : T(0);
}

// dx = scale * (softmax(x) - onehot(target)), or zeros for a row that does not count.
template <typename T>
void row_backward(const T* x, int32_t target, T row_lse, T scale, T* dx, int64_t vocab) {
  if (target < 0) {
    std::fill_n(dx, vocab, T(0));
    return;
  }
  const T at_target = x[target];  // read before dx, which may be x itself, is written
  scaled_softmax(x, row_lse, scale, dx, vocab);
  dx[target] = scale * (std::exp(at_target - row_lse) - T(1));
}

// Row r's weight, or null without weights.
template <typename T>
const T* weight_of(const T* weights, int64_t r) {
  return weights ? weights + r : nullptr;
}

}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, T* loss, int64_t rows,
                           int64_t vocab, const T* weights) {
  SPW_CHECK(vocab > 0, "cross_entropy", "vocabulary is empty");
  const int64_t counted = check_targets(targets, rows, vocab);
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);

#pragma omp parallel for schedule(static) if (rows * vocab > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    row_loss[static_cast<size_t>(r)] =
        row_forward(logits + r * vocab, targets[r], lse[r], vocab, weight_of(weights, r));
  }
  loss[0] = total_loss<T>(row_loss, counted, weights != nullptr);
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, const T* dloss,
                            T* dlogits, int64_t rows, int64_t vocab, const T* weights) {
  const int64_t counted = check_targets(targets, rows, vocab);

#pragma omp parallel for schedule(static) if (rows * vocab > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T scale = gradient_scale(dloss[0], counted, weight_of(weights, r));
    row_backward(logits + r * vocab, targets[r], lse[r], scale, dlogits + r * vocab, vocab);
  }
}

template <typename T>
void cross_entropy_forward_backward(const T* logits, const int32_t* targets, double dloss, T* lse, T* loss,
                                    T* dlogits, int64_t rows, int64_t vocab, const T* weights) {
  SPW_CHECK(vocab > 0, "cross_entropy", "vocabulary is empty");
  const int64_t counted = check_targets(targets, rows, vocab);
  std::vector<double> row_loss(static_cast<size_t>(rows), 0.0);

#pragma omp parallel for schedule(static) if (rows * vocab > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* x = logits + r * vocab;
    const T* weight = weight_of(weights, r);
    row_loss[static_cast<size_t>(r)] = row_forward(x, targets[r], lse[r], vocab, weight);
    row_backward(x, targets[r], lse[r], gradient_scale(static_cast<T>(dloss), counted, weight), dlogits + r * vocab,
                 vocab);
  }
  loss[0] = total_loss<T>(row_loss, counted, weights != nullptr);
}

template void cross_entropy_forward<float>(const float*, const int32_t*, float*, float*, int64_t,
                                           int64_t, const float*);
template void cross_entropy_forward<double>(const double*, const int32_t*, double*, double*,
                                            int64_t, int64_t, const double*);
template void cross_entropy_backward<float>(const float*, const int32_t*, const float*,
                                            const float*, float*, int64_t, int64_t, const float*);
template void cross_entropy_backward<double>(const double*, const int32_t*, const double*,
                                             const double*, double*, int64_t, int64_t, const double*);

template void cross_entropy_forward_backward<float>(const float*, const int32_t*, double, float*, float*,
                                                    float*, int64_t, int64_t, const float*);
template void cross_entropy_forward_backward<double>(const double*, const int32_t*, double, double*, double*,
                                                     double*, int64_t, int64_t, const double*);

}  // namespace spillway::ops
