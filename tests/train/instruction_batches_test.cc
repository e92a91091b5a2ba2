#include "train/instruction_batches.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace spillway::train {
namespace {

// ids 10, 11, ...; the tokens at `trained` positions count.
InstructionExample example(size_t n, std::set<size_t> trained, int32_t first = 10) {
  InstructionExample e;
  for (size_t i = 0; i < n; ++i) {
    e.ids.push_back(first + static_cast<int32_t>(i));
    e.trained.push_back(trained.count(i) ? 1 : 0);
  }
  return e;
}

TEST(InstructionBatches, RowPredictsTheTrainedTokensAndPads) {
  const InstructionExample e = example(5, {3, 4});
  std::vector<int32_t> inputs(7), targets(7);
  fill_instruction_row(e, /*pad=*/2, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<int32_t>{10, 11, 12, 13, 2, 2, 2}));
  EXPECT_EQ(targets, (std::vector<int32_t>{-100, -100, 13, 14, -100, -100, -100}));
  EXPECT_EQ(counted_in_row(e, 7), 2);
}

TEST(InstructionBatches, LongExamplesAreCutToTheRow) {
  const InstructionExample e = example(9, {1, 4, 5, 8});
  std::vector<int32_t> inputs(4), targets(4);
  fill_instruction_row(e, 0, inputs, targets);
  EXPECT_EQ(inputs, (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(targets, (std::vector<int32_t>{11, -100, -100, 14}));
  EXPECT_EQ(counted_in_row(e, 4), 2);  // 15 and 18 are cut off
}

TEST(InstructionBatches, SamplerVisitsEveryExampleOncePerPassAndResumes) {
  std::vector<InstructionExample> examples;
  for (int32_t i = 0; i < 5; ++i) examples.push_back(example(3, {1, 2}, 100 * (i + 1)));
  InstructionSampler sampler(examples, /*batch=*/2, /*seq=*/4, /*pad=*/0, /*seed=*/7);
  std::vector<int32_t> inputs(8), targets(8);
  std::multiset<int32_t> firsts;
  for (int b = 0; b < 5; ++b) {  // two passes
    sampler.next(inputs, targets);
    firsts.insert(inputs[0]);
    firsts.insert(inputs[4]);
  }
  for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(firsts.count(100 * (i + 1)), 2u) << i;
  EXPECT_DOUBLE_EQ(sampler.epochs(), 2.0);
  EXPECT_EQ(sampler.state().tokens_consumed, 20u);

  const SamplerState mid = sampler.state();
  std::vector<int32_t> want(8), got(8), scratch(8);
  sampler.next(want, scratch);
  InstructionSampler resumed(examples, 2, 4, 0, 7);
  resumed.restore(mid);
  resumed.next(got, scratch);
  EXPECT_EQ(got, want);
}

TEST(InstructionBatches, ValidationBatchesWalkTheExamplesInOrder) {
  std::vector<InstructionExample> examples;
  for (int32_t i = 0; i < 3; ++i) examples.push_back(example(2, {1}, 10 * (i + 1)));
  InstructionBatches batches(examples, 2, 3, 0);
  TokenBatch b;
  ASSERT_TRUE(batches.next(b));
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.targets, (std::vector<int32_t>{11, -100, -100, 21, -100, -100}));
  ASSERT_TRUE(batches.next(b));
  EXPECT_EQ(b.rows, 1);
  EXPECT_EQ(b.inputs, (std::vector<int32_t>{30, 0, 0}));
  EXPECT_FALSE(batches.next(b));
}

}  // namespace
}  // namespace spillway::train
