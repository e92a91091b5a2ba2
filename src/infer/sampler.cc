#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "base/status.h"

namespace spillway::infer {

TokenSampler::TokenSampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  SPW_CHECK(options.top_p > 0 && options.top_p <= 1, "--top-p", "must be in (0, 1], got ", options.top_p);
  SPW_CHECK(options.top_k >= 0, "--top-k", "must be non-negative, got ", options.top_k);
}

int32_t TokenSampler::next(std::span<const float> logits) {
  SPW_CHECK(!logits.empty(), "sampler", "no logits to sample from");
  if (options_.temperature <= 0) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates by descending logit; ties keep the lower id first so the
  // order, and with it the draw, is the same on every run.
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  size_t keep = order.size();
  if (options_.top_k > 0) keep = std::min(keep, static_cast<size_t>(options_.top_k));
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
           (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
  };
  if (keep < order.size()) {
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), by_logit);
    order.resize(keep);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const double top = logits[static_cast<size_t>(order[0])];
  std::vector<double> probs(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    probs[i] = std::exp((logits[static_cast<size_t>(order[i])] - top) / options_.temperature);
    total += probs[i];
  }
  if (options_.top_p < 1.0) {
    double mass = 0;
    size_t n = 0;
    while (n < probs.size() && mass < options_.top_p * total) mass += probs[n++];
    probs.resize(n);
    total = mass;
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (size_t i = 0; i < probs.size(); ++i) {
    r -= probs[i];
    if (r < 0) return order[i];
  }
  return order[probs.size() - 1];
}

}  // namespace spillway::infer
