// A batched decoder's step (batch_decoder.h) cut into passes of at most
// `max_rows` rows, each pass described by the flat arrays a GPU kernel reads:
// row by row its token, position and where its sequence's block table starts
// in `tables`, which holds each sequence's table once. A chunk longer than a
// pass's room is cut and goes on in the next pass; the rows whose logits the
// step returns (each chunk's last) are listed with their chunk.
//
// Cutting a step into passes changes no result on a batch-invariant decoder,
// and bounds the memory of one pass's activations.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/batch_decoder.h"
#include "infer/paged_kv_blocks.h"

namespace spillway::infer {

struct StepPass {
  std::vector<int32_t> tokens, positions, table_start;  // one of each a row
  std::vector<int32_t> tables;                           // every sequence's table in the pass, one after another
  std::vector<int32_t> last_rows;                        // rows whose logits are wanted
  std::vector<size_t> last_chunk;                        // the chunk each of them ends
};

// `positions[i]`: chunk i's first position; the tables must already hold
// every row (BatchDecoder::step reserves them).
std::vector<StepPass> step_passes(std::span<const SequenceChunk> chunks, std::span<const int64_t> positions,
                                  const PagedKvBlocks& blocks, int64_t max_rows);

}  // namespace spillway::infer
