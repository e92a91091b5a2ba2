// Picks the next token from logits: greedy, or temperature with optional
// top-k and top-p (nucleus) truncation, from a seeded generator so that the
// same seed gives the same text.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace spillway::infer {

struct SamplingOptions {
  double temperature = 0.8;  // <= 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // 1: no limit
  uint64_t seed = 0;
};

class TokenSampler {
 public:
  explicit TokenSampler(const SamplingOptions& options);
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  // Kept from draw to draw: a vocabulary's weights are half a megabyte, and
  // memory of that size freshly allocated is freshly mapped each time.
  std::vector<float> weights_;
  std::vector<double> block_mass_;  // the weights' sums, a block of ids each
  std::vector<uint16_t> bucket_;    // top-p: each id's bucket

};

}  // namespace spillway::infer
