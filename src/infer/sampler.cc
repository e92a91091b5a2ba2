#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "base/status.h"

namespace spillway::infer {

namespace {

// Ids by descending logit, ties by the lower id: the order top-k and top-p
// cut in, so the same seed gives the same token on every run.
struct ByLogit {
  std::span<const float> logits;
  bool operator()(int32_t a, int32_t b) const {
    const float x = logits[static_cast<size_t>(a)], y = logits[static_cast<size_t>(b)];
    return x > y || (x == y && a < b);
  }
};

// A uniform draw in [0, total) walked down `weights` (of ids 0, 1, ...
// or of `ids`), skipping those `in` refuses.
template <typename Weight, typename In>
int32_t draw(size_t n, Weight weight, In in, double total, std::mt19937_64& rng) {
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  int32_t last = -1;
  for (size_t i = 0; i < n; ++i) {
    if (!in(i)) continue;
    last = static_cast<int32_t>(i);
    r -= weight(i);
    if (r < 0) return last;
  }
  return last;
}

// The nucleus's weights are bucketed by their logit's distance from the
// top, kBucketsPerUnit buckets per unit of logit / temperature: only the
// bucket where the mass crosses top_p is sorted.
constexpr int kBuckets = 4096;
constexpr float kBucketsPerUnit = 16;

}  // namespace

TokenSampler::TokenSampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {
  SPW_CHECK(options.top_p > 0 && options.top_p <= 1, "--top-p", "must be in (0, 1], got ", options.top_p);
  SPW_CHECK(options.top_k >= 0, "--top-k", "must be non-negative, got ", options.top_k);
}

// A vocabulary of 128k ids is never sorted whole (that took 18.7 ms a token
// on the development machine, longer than a GPU decode step): the weights
// are made and summed in id order, only the top-k (or the ids where the
// nucleus ends) are ordered, and the draw walks the kept ids in id order
// (any fixed order draws from the same distribution).
int32_t TokenSampler::next(std::span<const float> logits) {
  SPW_CHECK(!logits.empty(), "sampler", "no logits to sample from");
  const ByLogit by_logit{logits};
  const size_t vocab = logits.size();
  const auto top_k = static_cast<size_t>(options_.top_k);
  const bool cut_k = options_.temperature > 0 && top_k > 0 && top_k < vocab;
  // A NaN has no place in the order (sorting with it is undefined).
  SPW_CHECK(options_.temperature <= 0 || std::none_of(logits.begin(), logits.end(), [](float x) { return x != x; }),
            "sampler", "the logits hold a NaN");
  std::vector<int32_t> ids;
  if (cut_k) {  // the k best in order
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(top_k), ids.end(), by_logit);
    ids.resize(top_k);
  }
  const int32_t best = cut_k ? ids[0] : static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                             logits.begin());
  if (options_.temperature <= 0) return best;
  const float top = logits[static_cast<size_t>(best)];
  SPW_CHECK(std::isfinite(top), "sampler", "the best logit is ", top);
  const auto inv_temperature = static_cast<float>(1.0 / options_.temperature);
  const auto scaled = [&](size_t id) { return (logits[id] - top) * inv_temperature; };  // <= 0

  if (cut_k) {  // top-p among the k best
    std::vector<double> weights(top_k);
    double total = 0;
    for (size_t i = 0; i < top_k; ++i) total += weights[i] = std::exp(scaled(static_cast<size_t>(ids[i])));
    size_t n = top_k;
    if (options_.top_p < 1.0) {
      const double wanted = options_.top_p * total;
      total = 0;
      for (n = 0; n < top_k && total < wanted; ++n) total += weights[n];
    }
    const int32_t at = draw(n, [&](size_t i) { return weights[i]; }, [](size_t) { return true; }, total, rng_);
    return ids[static_cast<size_t>(at)];
  }

  std::vector<float> weights(vocab);
  double total = 0;
  for (size_t i = 0; i < vocab; ++i) total += weights[i] = std::exp(scaled(i));
  const auto weight = [&](size_t i) { return static_cast<double>(weights[i]); };
  if (options_.top_p >= 1.0) return draw(vocab, weight, [](size_t) { return true; }, total, rng_);

  // The nucleus: the fewest best ids holding top_p of the mass. The bucket
  // where the mass crosses is sorted to find its last id, `end`; the
  // nucleus is every id ahead of it in the order, and itself.
  std::vector<uint16_t> bucket(vocab);
  std::vector<double> bucket_mass(kBuckets, 0.0);
  for (size_t i = 0; i < vocab; ++i) {
    bucket[i] = static_cast<uint16_t>(std::min(-scaled(i) * kBucketsPerUnit, static_cast<float>(kBuckets - 1)));
    bucket_mass[bucket[i]] += weights[i];
  }
  const double wanted = options_.top_p * total;
  double mass = 0;
  int crossing = 0;
  while (crossing < kBuckets - 1 && mass + bucket_mass[static_cast<size_t>(crossing)] < wanted) {
    mass += bucket_mass[static_cast<size_t>(crossing++)];
  }
  std::vector<int32_t> edge;
  for (size_t i = 0; i < vocab; ++i) {
    if (bucket[i] == crossing) edge.push_back(static_cast<int32_t>(i));
  }
  // Its best ids in order, 64, 512, ... of them, until the mass crosses
  // (a bucket of ties may hold the whole vocabulary).
  int32_t end = best;
  const double before = mass;
  for (size_t keep = std::min<size_t>(64, edge.size()); keep > 0; keep = std::min(keep * 8, edge.size())) {
    const auto mid = edge.begin() + static_cast<std::ptrdiff_t>(keep);
    if (keep < edge.size()) std::nth_element(edge.begin(), mid, edge.end(), by_logit);
    std::sort(edge.begin(), mid, by_logit);
    mass = before;
    for (size_t i = 0; i < keep; ++i) {
      end = edge[i];
      mass += weights[static_cast<size_t>(end)];
      if (mass >= wanted) break;
    }
    if (mass >= wanted || keep == edge.size()) break;
  }
  const auto in = [&](size_t i) { return static_cast<int32_t>(i) == end || by_logit(static_cast<int32_t>(i), end); };
  double kept = 0;
  for (size_t i = 0; i < vocab; ++i) {
    if (in(i)) kept += weights[i];
  }
  return draw(vocab, weight, in, kept, rng_);
}

}  // namespace spillway::infer
