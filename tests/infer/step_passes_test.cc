// A step's rows as the GPU's passes take them: tokens, positions and table
// starts row by row, each sequence's table once a pass, chunks cut where a
// pass is full, and each chunk's last row listed for its logits.
#include "infer/step_passes.h"

#include <gtest/gtest.h>

#include <vector>

#include "base/status.h"

namespace spillway::infer {
namespace {

TEST(StepPasses, OnePassHoldsEveryRow) {
  PagedKvBlocks blocks(8, 4);
  const int64_t a = blocks.open(), b = blocks.open();
  blocks.reserve(a, 6);  // a at 3 .. 5: blocks 0, 1
  blocks.reserve(b, 1);  // b at 0: block 2
  const std::vector<int32_t> ta = {10, 11, 12}, tb = {20};
  const std::vector<SequenceChunk> chunks = {{a, ta}, {b, tb}};
  const std::vector<int64_t> positions = {3, 0};
  const auto passes = step_passes(chunks, positions, blocks, 16);
  ASSERT_EQ(passes.size(), 1u);
  const StepPass& p = passes[0];
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{10, 11, 12, 20}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{3, 4, 5, 0}));
  EXPECT_EQ(p.tables, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.table_start, (std::vector<int32_t>{0, 0, 0, 2}));
  EXPECT_EQ(p.last_rows, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(p.last_chunk, (std::vector<size_t>{0, 1}));
}

TEST(StepPasses, AChunkIsCutWhereAPassIsFull) {
  PagedKvBlocks blocks(8, 4);
  const int64_t a = blocks.open(), b = blocks.open();
  blocks.reserve(a, 1);
  blocks.reserve(b, 7);
  const std::vector<int32_t> ta = {1}, tb = {2, 3, 4, 5, 6, 7, 8};
  const std::vector<SequenceChunk> chunks = {{a, ta}, {b, tb}};
  const std::vector<int64_t> positions = {0, 0};
  const auto passes = step_passes(chunks, positions, blocks, 3);
  ASSERT_EQ(passes.size(), 3u);
  // a's row and b's first two; b's next three; b's last two.
  EXPECT_EQ(passes[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(passes[0].tables, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(passes[0].table_start, (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(passes[0].last_rows, (std::vector<int32_t>{0}));
  EXPECT_EQ(passes[1].tokens, (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(passes[1].positions, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(passes[1].tables, (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(passes[1].last_rows.empty());
  EXPECT_EQ(passes[2].positions, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(passes[2].last_rows, (std::vector<int32_t>{1}));
  EXPECT_EQ(passes[2].last_chunk, (std::vector<size_t>{1}));
}

TEST(StepPasses, RowsWithoutBlocksOrRoomAreRefused) {
  PagedKvBlocks blocks(8, 4);
  const int64_t a = blocks.open();
  blocks.reserve(a, 4);
  const std::vector<int32_t> five = {1, 2, 3, 4, 5};
  const std::vector<SequenceChunk> chunks = {{a, five}};
  const std::vector<int64_t> positions = {0};
  EXPECT_THROW(step_passes(chunks, positions, blocks, 8), Error);
  blocks.reserve(a, 5);
  EXPECT_EQ(step_passes(chunks, positions, blocks, 8).size(), 1u);
  EXPECT_THROW(step_passes(chunks, positions, blocks, 0), Error);
}

}  // namespace
}  // namespace spillway::infer
