#include "train/batch_sampler.h"

#include <algorithm>

#include "base/status.h"

namespace spillway {
namespace {

void check_shape(const TokenFile& file, int64_t batch, int64_t seq_len) {
  SPW_CHECK(batch > 0 && seq_len > 0, file.path(), "batch ", batch, " and sequence length ", seq_len,
            " must be positive");
  SPW_CHECK(file.size() >= static_cast<uint64_t>(seq_len) + 1, file.path(), "holds ", file.size(),
            " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1);
}

// Splits a window of seq_len + 1 tokens into a row of inputs and targets.
void fill_row(std::span<const int32_t> window, int64_t seq_len, int64_t row, std::span<int32_t> inputs,
              std::span<int32_t> targets) {
  const auto n = static_cast<size_t>(seq_len);
  std::copy_n(window.begin(), n, inputs.begin() + row * seq_len);
  std::copy_n(window.begin() + 1, n, targets.begin() + row * seq_len);
}

}  // namespace

BatchSampler::BatchSampler(const TokenFile& file, int64_t batch, int64_t seq_len, uint64_t seed)
    : file_(file), batch_(batch), seq_len_(seq_len) {
  check_shape(file, batch, seq_len);
  starts_ = file.size() - static_cast<uint64_t>(seq_len);
  window_.resize(static_cast<size_t>(seq_len) + 1);
  restore({seed, 0, 0});
}

void BatchSampler::restore(const SamplerState& state) {
  rng_.seed(state.seed);
  rng_.discard(state.draws);
  state_ = state;
}

TokenBatch BatchSampler::next() {
  TokenBatch out;
  out.rows = batch_;
  out.seq_len = seq_len_;
  out.inputs.resize(static_cast<size_t>(batch_ * seq_len_));
  out.targets.resize(out.inputs.size());
  next(out.inputs, out.targets);
  return out;
}

void BatchSampler::next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const auto want = static_cast<size_t>(batch_ * seq_len_);
  SPW_CHECK(inputs.size() == want && targets.size() == want, file_.path(), "batch buffers hold ",
            inputs.size(), " and ", targets.size(), " tokens, not ", want);
  for (int64_t row = 0; row < batch_; ++row) {
    // Multiply-shift maps one 64-bit draw onto [0, starts_) with a bias
    // below starts_ / 2^64, and always uses exactly one draw.
    const auto start = static_cast<uint64_t>((static_cast<unsigned __int128>(rng_()) * starts_) >> 64);
    file_.copy(start, window_);
    fill_row(window_, seq_len_, row, inputs, targets);
  }
  state_.draws += static_cast<uint64_t>(batch_);
  state_.tokens_consumed += want;
}

double BatchSampler::epochs() const {
  return static_cast<double>(state_.tokens_consumed) / static_cast<double>(file_.size());
}

SequentialBatches::SequentialBatches(const TokenFile& file, int64_t batch, int64_t seq_len)
    : file_(file), batch_(batch), seq_len_(seq_len) {
  check_shape(file, batch, seq_len);
  windows_ = (file.size() - 1) / static_cast<uint64_t>(seq_len);
  window_.resize(static_cast<size_t>(seq_len) + 1);
}

bool SequentialBatches::next(TokenBatch& out) {
  if (next_window_ >= windows_) return false;
  const auto rows =
      static_cast<int64_t>(std::min<uint64_t>(static_cast<uint64_t>(batch_), windows_ - next_window_));
  out.rows = rows;
  out.seq_len = seq_len_;
  out.inputs.resize(static_cast<size_t>(rows * seq_len_));
  out.targets.resize(out.inputs.size());
  for (int64_t row = 0; row < rows; ++row) {
    file_.copy((next_window_ + static_cast<uint64_t>(row)) * static_cast<uint64_t>(seq_len_), window_);
    fill_row(window_, seq_len_, row, out.inputs, out.targets);
  }
  next_window_ += static_cast<uint64_t>(rows);
  return true;
}

}  // namespace spillway
