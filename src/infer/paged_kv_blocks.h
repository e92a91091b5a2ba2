// Which blocks of a paged key/value cache each sequence holds. The cache is
// cut into `num_blocks` blocks of `block_tokens` token rows each; a sequence
// owns a table of blocks, row t of it living in block table[t / block_tokens]
// at offset t % block_tokens. Sequences of different lengths so share one
// pool of memory, none holding more than one partly filled block.
//
// Only the bookkeeping: the memory itself belongs to the decoder (host
// floats for the CPU, device memory for a GPU), indexed by block number.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace spillway::infer {

class PagedKvBlocks {
 public:
  PagedKvBlocks(int64_t num_blocks, int64_t block_tokens);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_tokens() const { return block_tokens_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }
  // Blocks a sequence of `tokens` rows needs.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }

  // A new, empty sequence; its id is never reused.
  int64_t open();
  // Grows the sequence's table to hold `tokens` rows. Throws Error naming the
  // numbers when the free blocks do not suffice (the table is then unchanged).
  void reserve(int64_t sequence, int64_t tokens);
  // Returns the sequence's blocks to the pool and forgets it.
  void close(int64_t sequence);

  bool has(int64_t sequence) const { return tables_.count(sequence) != 0; }
  std::span<const int32_t> table(int64_t sequence) const;
  // Rows the sequence's blocks hold (a multiple of block_tokens).
  int64_t reserved_tokens(int64_t sequence) const;
  int64_t open_sequences() const { return static_cast<int64_t>(tables_.size()); }

 private:
  const std::vector<int32_t>& table_of(int64_t sequence) const;

  int64_t num_blocks_, block_tokens_;
  std::vector<int32_t> free_;  // a stack: the lowest numbers are handed out first
  std::map<int64_t, std::vector<int32_t>> tables_;
  int64_t next_id_ = 0;
};

}  // namespace spillway::infer
