#include "train/instruction_packing.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::train {

namespace {

constexpr int32_t kNotCounted = -100;

}  // namespace

int64_t packed_length(const InstructionExample& example, int64_t seq) {
  return std::clamp<int64_t>(static_cast<int64_t>(example.ids.size()) - 1, 0, seq);
}

int64_t place_example(const InstructionExample& example, int64_t at, const PackedRow& row) {
  const auto seq = static_cast<int64_t>(row.inputs.size());
  const int64_t n = std::min(packed_length(example, seq), seq - at);
  for (int64_t i = 0; i < n; ++i) {
    const auto t = static_cast<size_t>(at + i);
    const auto e = static_cast<size_t>(i);
    row.inputs[t] = example.ids[e];
    row.targets[t] = example.trained[e + 1] ? example.ids[e + 1] : kNotCounted;
    row.positions[t] = static_cast<int32_t>(i);
    row.doc_starts[t] = static_cast<int32_t>(at);
  }
  return at + n;
}

void pad_packed_row(int64_t at, int32_t pad, const PackedRow& row) {
  for (auto t = static_cast<size_t>(at); t < row.inputs.size(); ++t) {
    row.inputs[t] = pad;
    row.targets[t] = kNotCounted;
    row.positions[t] = static_cast<int32_t>(static_cast<int64_t>(t) - at);
    row.doc_starts[t] = static_cast<int32_t>(at);
  }
}

PackingSampler::PackingSampler(const std::vector<InstructionExample>& examples, int64_t batch, int64_t seq,
                               int32_t pad, uint64_t seed)
    : examples_(examples), batch_(batch), seq_(seq), pad_(pad), state_{seed, 0, 0}, order_(examples.size()) {
  SPW_CHECK(batch > 0 && seq > 0, "instruction data", "batch ", batch, " and sequence length ", seq,
            " must be positive");
  // Examples of one token add nothing to a row: with only those, no row
  // would ever fill.
  SPW_CHECK(std::any_of(examples.begin(), examples.end(), [&](const auto& e) { return packed_length(e, seq) > 0; }),
            "instruction data", "no training example has two tokens or more, nothing to pack");
}

void PackingSampler::next(std::span<int32_t> inputs, std::span<int32_t> targets, std::span<int32_t> positions,
                          std::span<int32_t> doc_starts) {
  const auto want = static_cast<size_t>(batch_ * seq_);
  SPW_CHECK(inputs.size() == want && targets.size() == want && positions.size() == want && doc_starts.size() == want,
            "instruction data", "packed batch buffers hold ", inputs.size(), ", ", targets.size(), ", ",
            positions.size(), " and ", doc_starts.size(), " tokens, not ", want);
  const auto seq = static_cast<size_t>(seq_);
  for (int64_t r = 0; r < batch_; ++r) {
    const size_t first = static_cast<size_t>(r) * seq;
    const PackedRow row{inputs.subspan(first, seq), targets.subspan(first, seq), positions.subspan(first, seq),
                        doc_starts.subspan(first, seq)};
    take_row(&row);
  }
}

void PackingSampler::skip(int64_t batches) {
  for (int64_t r = 0; r < batches * batch_; ++r) take_row(nullptr);
}

void PackingSampler::take_row(const PackedRow* row) {
  int64_t at = 0;
  while (at < seq_) {
    const InstructionExample& e = examples_[order_.at(state_.seed, state_.draws)];
    const int64_t n = packed_length(e, seq_);
    // Whole examples only, except one longer than a row, which is cut.
    if (at > 0 && at + n > seq_) break;
    state_.draws++;
    state_.tokens_consumed += static_cast<uint64_t>(counted_in_row(e, seq_));
    at = row ? place_example(e, at, *row) : std::min(at + n, seq_);
  }
  if (row) pad_packed_row(at, pad_, *row);
}

double PackingSampler::epochs() const {
  return static_cast<double>(state_.draws) / static_cast<double>(examples_.size());
}

}  // namespace spillway::train
