#include "train/instruction_batches.h"

#include <algorithm>
#include <numeric>

#include "base/status.h"

namespace spillway::train {

namespace {

constexpr int32_t kNotCounted = -100;

}  // namespace

void fill_instruction_row(const InstructionExample& example, int32_t pad, std::span<int32_t> inputs,
                          std::span<int32_t> targets) {
  const size_t seq = inputs.size();
  const size_t n = std::min(example.ids.size(), seq + 1);  // tokens of the example in the row, cut
  std::fill(inputs.begin(), inputs.end(), pad);
  std::fill(targets.begin(), targets.end(), kNotCounted);
  for (size_t i = 0; i + 1 < n; ++i) {
    inputs[i] = example.ids[i];
    if (example.trained[i + 1]) targets[i] = example.ids[i + 1];
  }
}

int64_t counted_in_row(const InstructionExample& example, int64_t seq) {
  const size_t n = std::min(example.ids.size(), static_cast<size_t>(seq) + 1);
  int64_t counted = 0;
  for (size_t i = 1; i < n; ++i) counted += example.trained[i] ? 1 : 0;
  return counted;
}

InstructionSampler::InstructionSampler(const std::vector<InstructionExample>& examples, int64_t batch, int64_t seq,
                                       int32_t pad, uint64_t seed)
    : examples_(examples), batch_(batch), seq_(seq), pad_(pad), order_(examples.size()) {
  SPW_CHECK(!examples.empty(), "instruction data", "no training examples");
  SPW_CHECK(batch > 0 && seq > 0, "instruction data", "batch ", batch, " and sequence length ", seq,
            " must be positive");
  restore({seed, 0, 0});
}

void InstructionSampler::restore(const SamplerState& state) { state_ = state; }

uint32_t ShuffledOrder::at(uint64_t seed, uint64_t draw) {
  const uint64_t pass = draw / count_;
  if (pass != pass_ || seed != seed_) {
    order_.resize(count_);
    std::iota(order_.begin(), order_.end(), 0u);
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + pass);
    for (uint64_t i = count_ - 1; i > 0; --i) {
      const auto j = static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * (i + 1)) >> 64);
      std::swap(order_[i], order_[j]);
    }
    pass_ = pass;
    seed_ = seed;
  }
  return order_[draw % count_];
}

void InstructionSampler::next(std::span<int32_t> inputs, std::span<int32_t> targets) {
  const auto want = static_cast<size_t>(batch_ * seq_);
  SPW_CHECK(inputs.size() == want && targets.size() == want, "instruction data", "batch buffers hold ",
            inputs.size(), " and ", targets.size(), " tokens, not ", want);
  const auto seq = static_cast<size_t>(seq_);
  for (int64_t row = 0; row < batch_; ++row) {
    const InstructionExample& e = examples_[order_.at(state_.seed, state_.draws++)];
    fill_instruction_row(e, pad_, inputs.subspan(row * seq, seq), targets.subspan(row * seq, seq));
    state_.tokens_consumed += static_cast<uint64_t>(counted_in_row(e, seq_));
  }
}

double InstructionSampler::epochs() const {
  return static_cast<double>(state_.draws) / static_cast<double>(examples_.size());
}

bool InstructionBatches::next(TokenBatch& out) {
  if (next_ >= examples_.size()) return false;
  const size_t rows = std::min(examples_.size() - next_, static_cast<size_t>(batch_));
  const auto seq = static_cast<size_t>(seq_);
  out.rows = static_cast<int64_t>(rows);
  out.seq_len = seq_;
  out.inputs.assign(rows * seq, 0);
  out.targets.assign(rows * seq, 0);
  for (size_t r = 0; r < rows; ++r) {
    fill_instruction_row(examples_[next_ + r], pad_, std::span<int32_t>(out.inputs).subspan(r * seq, seq),
                         std::span<int32_t>(out.targets).subspan(r * seq, seq));
  }
  next_ += rows;
  return true;
}

}  // namespace spillway::train
