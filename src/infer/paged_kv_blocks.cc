#include "infer/paged_kv_blocks.h"

#include "base/status.h"

namespace spillway::infer {

PagedKvBlocks::PagedKvBlocks(int64_t num_blocks, int64_t block_tokens)
    : num_blocks_(num_blocks), block_tokens_(block_tokens) {
  SPW_CHECK(num_blocks > 0, "kv cache", "needs at least one block, got ", num_blocks);
  SPW_CHECK(block_tokens > 0, "kv cache", "block size must be positive, got ", block_tokens);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t PagedKvBlocks::open() {
  const int64_t id = next_id_++;
  tables_[id];
  return id;
}

const std::vector<int32_t>& PagedKvBlocks::table_of(int64_t sequence) const {
  auto it = tables_.find(sequence);
  SPW_CHECK(it != tables_.end(), "kv cache", "no open sequence ", sequence);
  return it->second;
}

void PagedKvBlocks::reserve(int64_t sequence, int64_t tokens) {
  table_of(sequence);
  std::vector<int32_t>& table = tables_[sequence];
  const int64_t want = blocks_for(tokens), have = static_cast<int64_t>(table.size());
  if (want <= have) return;
  SPW_CHECK(want - have <= free_blocks(), "kv cache", "a sequence of ", tokens, " tokens needs ", want,
            " blocks of ", block_tokens_, " tokens; it holds ", have, " and ", free_blocks(), " of the cache's ",
            num_blocks_, " are free");
  for (int64_t i = have; i < want; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
}

void PagedKvBlocks::close(int64_t sequence) {
  const std::vector<int32_t>& table = table_of(sequence);
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  tables_.erase(sequence);
}

std::span<const int32_t> PagedKvBlocks::table(int64_t sequence) const { return table_of(sequence); }

int64_t PagedKvBlocks::reserved_tokens(int64_t sequence) const {
  return static_cast<int64_t>(table_of(sequence).size()) * block_tokens_;
}

}  // namespace spillway::infer
