// Packed batches of instruction examples (train/instruction_data.h): whole
// examples laid end to end in rows of seq tokens, so short examples do not
// leave most of a row as padding. Each example's tokens go into the row as
// fill_instruction_row lays out one (inputs, and targets that count only
// where it trains), with two more arrays per row for the step graph
// (model/llama_graph.h's documents option):
//   positions[t]  the token's position within its example (RoPE restarts)
//   doc_starts[t] where its example starts in the row (attention stays in it)
// A row takes examples while the next fits whole; the one that does not
// starts the next row. An example longer than the row is cut to it, as
// unpacked, and fills a row alone. The row's tail after the last example is
// padding: pad inputs, targets that do not count, one more document.
//
// PackingSampler walks the same seeded shuffled order as InstructionSampler
// (train/instruction_batches.h), so its state is the seed, the examples
// placed so far and the counted targets handed out: a resumed run continues
// bit-identically. Each step's loss weights still come from its targets
// (train/loss_weights.h): the loss is the mean over the step's counted tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "train/batch_sampler.h"
#include "train/instruction_batches.h"
#include "train/instruction_data.h"

namespace spillway::train {

// One row of a packed batch: seq tokens in each span.
struct PackedRow {
  std::span<int32_t> inputs, targets, positions, doc_starts;
};

// The (input, target) pairs `example` gives a row of `seq`: its tokens but
// the first, cut to seq.
int64_t packed_length(const InstructionExample& example, int64_t seq);

// Writes `example` into `row` from position `at` (cut to the rest of the
// row); returns where the next example starts.
int64_t place_example(const InstructionExample& example, int64_t at, const PackedRow& row);

// Fills the row from `at` on with padding that is its own document.
void pad_packed_row(int64_t at, int32_t pad, const PackedRow& row);

class PackingSampler {
 public:
  // `examples` must outlive the sampler; Error when none has a token to train on.
  PackingSampler(const std::vector<InstructionExample>& examples, int64_t batch, int64_t seq, int32_t pad,
                 uint64_t seed);

  // Fills spans of batch * seq each.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets, std::span<int32_t> positions,
            std::span<int32_t> doc_starts);

  // Walks past `batches` batches without laying them out: where the
  // sampler stands after them.
  void skip(int64_t batches);

  // draws: examples placed in rows; tokens_consumed: targets that counted.
  // Rows take a varying number of examples, so unlike the other samplers'
  // a state says nothing of how many rows it drew: a caller that does not
  // trust one replays the walk (skip) and compares.
  SamplerState state() const { return state_; }
  void restore(const SamplerState& state) { state_ = state; }
  double epochs() const;

 private:
  // Takes one row's examples from the walk, laying them into `row` unless null.
  void take_row(const PackedRow* row);

  const std::vector<InstructionExample>& examples_;
  int64_t batch_, seq_;
  int32_t pad_;
  SamplerState state_;
  ShuffledOrder order_;
};

}  // namespace spillway::train
