// When each sharded region's whole copy exists in a step: the weights a
// region's pieces are all-gathered into just ahead of its uses (ZeRO-3), or
// the gradients its nodes write before they are reduce-scattered (ZeRO-2/3).
// The whole copies live in a few slots of device memory that the regions
// take turns in, each region always in the same slot (the step graph binds
// its values to fixed addresses, and a replayed CUDA graph keeps them).
//
// A region's weights are needed in episodes: runs of its uses with no use
// of another large region in between (a layer's forward, and its backward
// with whatever it recomputes). Each episode is gathered anew, as soon as
// the slot's previous episode has ended. A region's gradients are written
// in one episode (from the first node that writes one of them to the last)
// and reduce-scattered after it; the slot's next episode waits for that.
// Slots are shared where episodes do not overlap, counting the time a
// transfer needs: a gather may run during the episode before it, a
// reduce-scatter during the episode after it. Small regions (the norms'
// weights) get a slot of their own, gathered once a micro-batch.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "train/shard_layout.h"

namespace spillway::train {

struct RingRegion {
  std::vector<graph::Value> values;  // the parameters (or gradient sums) it holds
  uint64_t bytes = 0;                // of its whole copy
};

// The region of `layout.shards` each stack lies in.
std::vector<int> region_of_stacks(const StateLayout& layout);
// A ring region per layout region: the step's `values` of its stacks (one
// per stack: its parameters, or their gradient sums), its whole copy
// `bytes_per_element` wide.
std::vector<RingRegion> ring_regions(const StateLayout& layout, const std::vector<graph::Value>& values,
                                     uint64_t bytes_per_element);

struct RingSchedule {
  struct Episode {
    int region = 0;
    int32_t first_node = 0, last_node = 0;  // compute waits before first_node for a gather
    int previous = -1;  // the episode before it in its slot (-1: the slot is free at the step's start)
    // A gather's issue: after this node (where `previous` ends), at the
    // step's start (kAtStart), or never (kStillThere: `previous` holds the
    // same region).
    int32_t gather_after = kAtStart;
  };
  static constexpr int32_t kAtStart = -1, kStillThere = -2;
  std::vector<uint64_t> slot_bytes;
  std::vector<int> slot_of_region;
  std::vector<Episode> episodes;  // by first_node
  uint64_t bytes() const;
};

// Weights: episodes of reads, a gather before each.
RingSchedule gather_schedule(const graph::Graph& graph, const std::vector<RingRegion>& regions);
// Gradient sums: one episode of writes each, a reduce-scatter after it.
RingSchedule reduce_schedule(const graph::Graph& graph, const std::vector<RingRegion>& regions);

}  // namespace spillway::train
