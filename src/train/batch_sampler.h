// Batches of training windows from a token file.
//
// BatchSampler draws each row's start uniformly from the file with a seeded
// std::mt19937_64, one draw per row, so its whole state is three numbers
// (seed, draws, tokens consumed): a resumed run restores them and continues
// bit-identically. SequentialBatches walks a validation file in order, for
// evaluation that is the same every time.
//
// A window is seq_len + 1 consecutive tokens: inputs are its first seq_len,
// targets its last seq_len (the next token at every position).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "train/token_file.h"

namespace spillway {

struct TokenBatch {
  int64_t rows = 0;  // may be fewer than the batch size at the end of SequentialBatches
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;   // [rows, seq_len], row-major
  std::vector<int32_t> targets;  // [rows, seq_len]
};

struct SamplerState {
  uint64_t seed = 0;
  uint64_t draws = 0;            // engine outputs used so far
  uint64_t tokens_consumed = 0;  // target tokens handed out so far
};

class BatchSampler {
 public:
  // `file` must outlive the sampler. Error if it holds fewer than
  // seq_len + 1 tokens.
  BatchSampler(const TokenFile& file, int64_t batch, int64_t seq_len, uint64_t seed);

  TokenBatch next();
  // Fills spans of batch * seq_len each, without allocating.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets);

  SamplerState state() const { return state_; }
  // Re-seeds and skips `draws` outputs: the next batch is the one that would
  // have followed when the state was taken.
  void restore(const SamplerState& state);

  int64_t batch() const { return batch_; }
  int64_t seq_len() const { return seq_len_; }
  uint64_t tokens_consumed() const { return state_.tokens_consumed; }
  // Passes over the file so far: tokens consumed / tokens in the file.
  double epochs() const;

 private:
  const TokenFile& file_;
  int64_t batch_;
  int64_t seq_len_;
  uint64_t starts_;  // number of distinct window starts
  std::mt19937_64 rng_;
  SamplerState state_;
  std::vector<int32_t> window_;
};

class SequentialBatches {
 public:
  // Windows start at 0, seq_len, 2 seq_len, ... so every token but the first
  // is a target exactly once. `file` must outlive this.
  SequentialBatches(const TokenFile& file, int64_t batch, int64_t seq_len);

  // False once every window was handed out.
  bool next(TokenBatch& out);
  void reset() { next_window_ = 0; }
  uint64_t windows() const { return windows_; }

 private:
  const TokenFile& file_;
  int64_t batch_;
  int64_t seq_len_;
  uint64_t windows_;
  uint64_t next_window_ = 0;
  std::vector<int32_t> window_;
};

}  // namespace spillway
