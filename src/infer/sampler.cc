#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "base/status.h"
#include "ops/simd_cpu.h"

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

// A uniform draw in [0, total) walked down `weights` (top-k's, best first);
// a sliver left by rounding takes the last.
int32_t draw(std::span<const double> weights, double total, std::mt19937_64& rng) {
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (size_t i = 0; i < weights.size(); ++i) {
    r -= weights[i];
    if (r < 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(weights.size()) - 1;
}

// The largest logit and its lowest id (0 where every logit is NaN), and
// whether any logit is a NaN: a vectorized pass for the largest, then
// blocks of ids searched for it until one holds it.
struct Scan {
  float top = -std::numeric_limits<float>::infinity();
  size_t best = 0;
  bool nan = false;
};

Scan scan(std::span<const float> x) {
  const float* p = x.data();
  const auto n = static_cast<uint32_t>(x.size());
  float top = -std::numeric_limits<float>::infinity();
  unsigned nan = 0;
#pragma omp simd reduction(max : top) reduction(| : nan)
  for (uint32_t i = 0; i < n; ++i) {
    top = p[i] > top ? p[i] : top;  // a NaN passed over
    nan |= p[i] != p[i] ? 1u : 0u;
  }
  constexpr uint32_t kBlock = 1024, kNone = std::numeric_limits<uint32_t>::max();
  uint32_t best = kNone;
  for (uint32_t b = 0; b < n && best == kNone; b += kBlock) {
    const uint32_t end = std::min(n, b + kBlock);
#pragma omp simd reduction(min : best)
    for (uint32_t i = b; i < end; ++i) best = std::min(best, p[i] == top ? i : kNone);
  }
  // No logit equals the largest found: every one is -inf or NaN, and what
  // stood was the reduction's start (clang's is -FLT_MAX, not -inf).
  if (best == kNone) return Scan{-std::numeric_limits<float>::infinity(), 0, nan != 0};
  return Scan{top, best, nan != 0};
}

// Ids holding the k best (k < x.size(), top the largest logit): those
// within a margin of the top, the margin doubled from 1 until at least k
// are in it (each try a vectorized count), so that only those few are
// ordered, not the vocabulary. A NaN is never in; the -inf ones come last.
std::vector<int32_t> candidates(std::span<const float> x, float top, size_t k) {
  const float* p = x.data();
  const auto n = static_cast<uint32_t>(x.size());
  float floor = -std::numeric_limits<float>::infinity();
  for (float margin = 1.0f; margin < 1e30f; margin *= 2) {
    const float at_least = top - margin;
    uint32_t count = 0;
#pragma omp simd reduction(+ : count)
    for (uint32_t i = 0; i < n; ++i) count += p[i] >= at_least ? 1u : 0u;
    if (count >= k) {
      floor = at_least;
      break;
    }
  }
  std::vector<int32_t> ids;
  for (uint32_t i = 0; i < n; ++i) {
    if (p[i] >= floor) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

// out[i] = e^((x[i] - top) / temperature) for a block of ids, and their sum
// in double, added in a fixed order (8 running sums, then pairwise).
double weigh(const float* x, float* out, size_t n, float top, float inv_temperature) {
  using V = ops::Simd<float>;
  const size_t vectors = n - n % V::kLanes;
  for (size_t i = 0; i < vectors; i += V::kLanes) {
    V::store(out + i, ops::exp_float((V::load(x + i) - top) * inv_temperature));
  }
  for (size_t i = vectors; i < n; ++i) out[i] = ops::exp_float((x[i] - top) * inv_temperature);
  double sums[8] = {};
  const size_t whole = n / 8 * 8;
  for (size_t i = 0; i < whole; i += 8) {
    for (size_t j = 0; j < 8; ++j) sums[j] += static_cast<double>(out[i + j]);
  }
  for (size_t i = whole; i < n; ++i) sums[i - whole] += static_cast<double>(out[i]);
  return ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]));
}

// Ids a block of weights holds: the draw skips whole blocks by their sums.
constexpr size_t kWeightBlock = 1024;

// A uniform draw in [0, total) walked down the blocks' masses to its block,
// then down that block's weights of the ids `in` keeps (total: the sum of
// block_mass, each block's the sum of its kept weights). Rounding may leave
// a sliver past a block or past the last: it goes on to the next block, or
// to the last kept id that has a weight.
template <typename In>
int32_t draw_blocks(std::span<const float> weights, std::span<const double> block_mass, double total, In in,
                    std::mt19937_64& rng) {
  double r = std::uniform_real_distribution<double>(0.0, total)(rng);
  const size_t n = weights.size();
  for (size_t b = 0; b < block_mass.size(); ++b) {
    if (r >= block_mass[b]) {
      r -= block_mass[b];
      continue;
    }
    const size_t end = std::min(n, (b + 1) * kWeightBlock);
    for (size_t i = b * kWeightBlock; i < end; ++i) {
      if (!in(i)) continue;
      r -= weights[i];
      if (r < 0) return static_cast<int32_t>(i);
    }
  }
  for (size_t i = n; i-- > 0;) {
    if (in(i) && weights[i] > 0) return static_cast<int32_t>(i);
  }
  return 0;  // no weight at all: the scan's best logit was not finite, which next() refuses first
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
// are made by a vectorized exp (ops/simd_cpu.h) and summed in blocks of
// ids, only the top-k (or the ids where the nucleus ends) are ordered, and
// the draw walks the blocks' sums, then its block's kept ids in id order
// (any fixed order draws from the same distribution).
int32_t TokenSampler::next(std::span<const float> logits) {
  SPW_CHECK(!logits.empty(), "sampler", "no logits to sample from");
  const ByLogit by_logit{logits};
  const size_t vocab = logits.size();
  const auto top_k = static_cast<size_t>(options_.top_k);
  const bool cut_k = options_.temperature > 0 && top_k > 0 && top_k < vocab;
  const Scan found = scan(logits);
  // A NaN has no place in the order (sorting with it is undefined).
  SPW_CHECK(options_.temperature <= 0 || !found.nan, "sampler", "the logits hold a NaN");
  const auto best = static_cast<int32_t>(found.best);
  if (options_.temperature <= 0) return best;
  const float top = found.top;
  SPW_CHECK(std::isfinite(top), "sampler", "the best logit is ", top);
  const auto inv_temperature = static_cast<float>(1.0 / options_.temperature);
  const auto scaled = [&](size_t id) { return (logits[id] - top) * inv_temperature; };  // <= 0

  if (cut_k) {  // the k best in order, then top-p among them
    std::vector<int32_t> ids = candidates(logits, top, top_k);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(top_k), ids.end(), by_logit);
    ids.resize(top_k);
    std::vector<double> weights(top_k);
    double total = 0;
    for (size_t i = 0; i < top_k; ++i) total += weights[i] = std::exp(scaled(static_cast<size_t>(ids[i])));
    size_t n = top_k;
    if (options_.top_p < 1.0) {
      const double wanted = options_.top_p * total;
      total = 0;
      for (n = 0; n < top_k && total < wanted; ++n) total += weights[n];
    }
    const int32_t at = draw(std::span<const double>(weights).first(n), total, rng_);
    return ids[static_cast<size_t>(at)];
  }

  weights_.resize(vocab);
  block_mass_.resize((vocab + kWeightBlock - 1) / kWeightBlock);
  double total = 0;
  for (size_t b = 0; b < block_mass_.size(); ++b) {
    const size_t at = b * kWeightBlock, n = std::min(kWeightBlock, vocab - at);
    total += block_mass_[b] = weigh(logits.data() + at, weights_.data() + at, n, top, inv_temperature);
  }
  if (options_.top_p >= 1.0) return draw_blocks(weights_, block_mass_, total, [](size_t) { return true; }, rng_);
  // The nucleus: the fewest best ids holding top_p of the mass. The bucket
  // where the mass crosses is sorted to find its last id, `end`; the
  // nucleus is every id ahead of it in the order, and itself.
  bucket_.resize(vocab);
  std::vector<double> bucket_mass(kBuckets, 0.0);
  for (size_t i = 0; i < vocab; ++i) {
    bucket_[i] = static_cast<uint16_t>(std::min(-scaled(i) * kBucketsPerUnit, static_cast<float>(kBuckets - 1)));
  }
  for (size_t i = 0; i < vocab; ++i) bucket_mass[bucket_[i]] += weights_[i];
  const double wanted = options_.top_p * total;
  double mass = 0;
  int crossing = 0;
  while (crossing < kBuckets - 1 && mass + bucket_mass[static_cast<size_t>(crossing)] < wanted) {
    mass += bucket_mass[static_cast<size_t>(crossing++)];
  }
  std::vector<int32_t> edge;
  for (size_t i = 0; i < vocab; ++i) {
    if (bucket_[i] == crossing) edge.push_back(static_cast<int32_t>(i));
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
      mass += weights_[static_cast<size_t>(end)];
      if (mass >= wanted) break;
    }
    if (mass >= wanted || keep == edge.size()) break;
  }
  // The nucleus: logits above end's, and end's own up to end (ties by id).
  const float edge_logit = logits[static_cast<size_t>(end)];
  const auto last = static_cast<size_t>(end);
  const auto in = [&](size_t i) { return logits[i] > edge_logit || (logits[i] == edge_logit && i <= last); };
  double kept = 0;
  for (size_t b = 0; b < block_mass_.size(); ++b) {
    const size_t from = b * kWeightBlock, to = std::min(vocab, from + kWeightBlock);
    double mass_in = 0;
#pragma omp simd reduction(+ : mass_in)
    for (size_t i = from; i < to; ++i) mass_in += in(i) ? static_cast<double>(weights_[i]) : 0.0;
    kept += block_mass_[b] = mass_in;
  }
  return draw_blocks(weights_, block_mass_, kept, in, rng_);
}

}  // namespace spillway::infer
