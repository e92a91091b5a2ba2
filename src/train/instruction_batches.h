// Batches of instruction examples (train/instruction_data.h): one example a
// row, unpacked, as TRL's SFTTrainer lays them out without packing. A row's
// inputs are the example's tokens but the last, its targets the tokens
// after them where the loss counts them (the assistant's) and -100
// elsewhere; an example longer than seq + 1 tokens is cut to that, a
// shorter one is padded with `pad` inputs whose targets do not count.
//
// InstructionSampler walks the training examples in a seeded shuffled
// order, a new order each pass, so its state is the seed and the examples
// handed out: a resumed run continues bit-identically.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "train/batch_sampler.h"
#include "train/instruction_data.h"

namespace spillway::train {

// The row of `example` into inputs and targets (seq each).
void fill_instruction_row(const InstructionExample& example, int32_t pad, std::span<int32_t> inputs,
                          std::span<int32_t> targets);

// Tokens whose loss counts, of the examples as rows of `seq` (cut included).
int64_t counted_in_row(const InstructionExample& example, int64_t seq);

// The endless walk over `count` examples that both samplers take (this
// one and train/instruction_packing.h's): a new shuffled order each pass,
// from the seed and the pass's number, so that any draw's example is known
// without replaying the passes before it.
class ShuffledOrder {
 public:
  explicit ShuffledOrder(uint64_t count) : count_(count) {}
  // The index of the example at position `draw` of the walk for `seed`.
  uint32_t at(uint64_t seed, uint64_t draw);

 private:
  uint64_t count_;
  uint64_t seed_ = 0, pass_ = UINT64_MAX;  // what order_ is for
  std::vector<uint32_t> order_;
};

class InstructionSampler {
 public:
  // `examples` must outlive the sampler; Error when it is empty.
  InstructionSampler(const std::vector<InstructionExample>& examples, int64_t batch, int64_t seq, int32_t pad,
                     uint64_t seed);

  // Fills spans of batch * seq each.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets);

  // draws: examples handed out; tokens_consumed: targets that counted.
  SamplerState state() const { return state_; }
  void restore(const SamplerState& state);
  double epochs() const;

 private:
  const std::vector<InstructionExample>& examples_;
  int64_t batch_, seq_;
  int32_t pad_;
  SamplerState state_;
  ShuffledOrder order_;
};

// The validation examples in order, `batch` rows a batch (the last one
// possibly fewer); false once all were handed out.
class InstructionBatches {
 public:
  InstructionBatches(const std::vector<InstructionExample>& examples, int64_t batch, int64_t seq, int32_t pad)
      : examples_(examples), batch_(batch), seq_(seq), pad_(pad) {}
  bool next(TokenBatch& out);

 private:
  const std::vector<InstructionExample>& examples_;
  int64_t batch_, seq_;
  int32_t pad_;
  size_t next_ = 0;
};

}  // namespace spillway::train
