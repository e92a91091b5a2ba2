// How a flat training-state layout is split over data-parallel ranks. The
// layout is cut into regions (runs of whole stacks); each region is padded
// to split evenly and rank r keeps piece r of every region, the pieces back
// to back: its share. One region is ZeRO-1's split (each rank a contiguous
// 1/N of the layout, so one reduce-scatter and one all-gather cover it);
// a region per layer lets each layer's weights be all-gathered, and its
// gradients reduce-scattered, on their own (ZeRO-2/3), since a region's
// pieces are exactly the blocks NCCL's collectives take and give.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace spillway::train {

class ShardLayout {
 public:
  struct Region {
    uint64_t first = 0;     // in the layout
    uint64_t elements = 0;  // padded: a multiple of the rank count (and of the alignment)
    uint64_t piece = 0;     // elements / ranks
    uint64_t share_at = 0;  // where this rank's piece lies in its share
  };

  ShardLayout() = default;
  // `regions`: consecutive, padded already (Region::first and ::elements).
  ShardLayout(std::vector<Region> regions, int ranks, int rank);

  // Pads `elements` (a region's length) to split over `ranks` in pieces that
  // start on multiples of `align`.
  static uint64_t padded(uint64_t elements, int ranks, uint64_t align);

  const std::vector<Region>& regions() const { return regions_; }
  int ranks() const { return ranks_; }
  int rank() const { return rank_; }
  uint64_t share_elements() const { return share_; }
  uint64_t elements() const { return regions_.empty() ? 0 : regions_.back().first + regions_.back().elements; }

  // For layout elements [first, first + n): each part held by one rank, in
  // layout order, as f(owner, skip, count, at), `skip` elements into the
  // range and `at` in the owner's share (every rank's share has the same
  // shape).
  void for_each_owner(uint64_t first, uint64_t n,
                      const std::function<void(int owner, uint64_t skip, uint64_t count, uint64_t at)>& f) const;
  // The same, for this rank's parts only.
  void for_each_mine(uint64_t first, uint64_t n,
                     const std::function<void(uint64_t skip, uint64_t count, uint64_t at)>& f) const;
  // Of this rank's share, how many elements (from its start) come from
  // layout elements below `end`; a prefix where no region straddles `end`
  // other than as ZeRO-1's one region does (weight-decayed stacks first).
  uint64_t share_below(uint64_t end) const;

 private:
  std::vector<Region> regions_;
  int ranks_ = 1, rank_ = 0;
  uint64_t share_ = 0;
};

// Elements each stack of the GPU engine's state starts on: 256 bytes in
// bf16, which cuBLASLt's plans assume of a matrix, and 512 in fp32.
inline constexpr uint64_t kStateAlign = 128;

// Where every stack of the training state lies in the one flat layout the
// GPU engine keeps each part of it in: weight-decayed stacks first (so an
// update in place covers them in one launch and the rest in another), each
// stack starting on a multiple of `align` elements; sharded over `ranks`,
// each region (consecutive stacks of one key) padded to split evenly.
struct StateLayout {
  std::vector<uint64_t> tensor_at;  // by checkpoint tensor
  std::vector<uint64_t> stack_at;   // by stack (graph parameter)
  uint64_t elements = 0;            // the layout's length
  uint64_t decayed_elements = 0;    // the weight-decayed stacks lie below it
  ShardLayout shards;
};
// `parts[j]`: the checkpoint tensors stack j holds; `numel` and `decayed`
// by tensor (a stack's tensors agree); `region_key` by stack (empty: one
// region).
StateLayout lay_out_state(const std::vector<std::vector<int>>& parts, const std::vector<int64_t>& numel,
                          const std::vector<bool>& decayed, const std::vector<int>& region_key, int ranks, int rank,
                          uint64_t align);

// The region keys that shard LLaMA's state by layer (ZeRO-2/3): a layer's
// matrices make one region, the embedding and lm_head one each, and every
// norm weight together one more (too small to shard apart), from the graph
// parameters' names ("model.layers.3.mlp.down_proj.weight"); `decayed` by
// stack.
std::vector<int> layer_region_keys(const std::vector<std::string>& parameter_names, const std::vector<bool>& decayed);

}  // namespace spillway::train
