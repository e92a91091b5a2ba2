#include "infer/step_passes.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::infer {

std::vector<StepPass> step_passes(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions,
                                  const PagedKvBlocks& blocks, int64_t max_rows) {
  SPW_CHECK(max_rows > 0, "batch decoder", "a pass needs room for at least one row, got ", max_rows);
  SPW_CHECK(positions.size() == chunks.size(), "batch decoder", positions.size(), " positions for ", chunks.size(),
            " chunks");
  std::vector<StepPass> passes;
  size_t chunk = 0;
  int64_t done = 0;  // rows of `chunk` in earlier passes
  while (chunk < chunks.size()) {
    StepPass& pass = passes.emplace_back();
    while (chunk < chunks.size() && static_cast<int64_t>(pass.tokens.size()) < max_rows) {
      const std::span<const int32_t> tokens = chunks[chunk].tokens;
      const int64_t take = std::min(static_cast<int64_t>(tokens.size()) - done,
                                    max_rows - static_cast<int64_t>(pass.tokens.size()));
      const std::span<const int32_t> table = blocks.table(chunks[chunk].sequence);
      SPW_CHECK(blocks.blocks_for(positions[chunk] + done + take) <= static_cast<int64_t>(table.size()),
                "batch decoder", "sequence ", chunks[chunk].sequence, " holds too few blocks for its rows");
      const auto start = static_cast<int32_t>(pass.tables.size());
      pass.tables.insert(pass.tables.end(), table.begin(), table.end());
      for (int64_t i = done; i < done + take; ++i) {
        pass.tokens.push_back(tokens[static_cast<size_t>(i)]);
        pass.positions.push_back(static_cast<int32_t>(positions[chunk] + i));
        pass.table_start.push_back(start);
      }
      done += take;
      if (done == static_cast<int64_t>(tokens.size())) {
        pass.last_rows.push_back(static_cast<int32_t>(pass.tokens.size()) - 1);
        pass.last_chunk.push_back(chunk);
        ++chunk;
        done = 0;
      }
    }
  }
  return passes;
}

}  // namespace spillway::infer
