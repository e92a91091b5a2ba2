#include "train/ring_schedule.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::train {

namespace {

// A region smaller than this part of the largest keeps a slot of its own.
constexpr uint64_t kSmallFraction = 16;

struct Interval {
  int32_t from, to;  // nodes, inclusive
  bool overlaps(const Interval& o) const { return from <= o.to && o.from <= to; }
};

// The nodes that touch each region's values, in order.
std::vector<std::vector<int32_t>> touching_nodes(const graph::Graph& g, const std::vector<RingRegion>& regions) {
  std::vector<int> region_of(g.values().size(), -1);
  for (size_t r = 0; r < regions.size(); ++r) {
    for (graph::Value v : regions[r].values) region_of[static_cast<size_t>(v.id)] = static_cast<int>(r);
  }
  std::vector<std::vector<int32_t>> nodes(regions.size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    for (const auto* list : {&n.inputs, &n.outputs}) {
      for (graph::Value v : *list) {
        const int r = region_of[static_cast<size_t>(v.id)];
        if (r < 0) continue;
        auto& at = nodes[static_cast<size_t>(r)];
        if (at.empty() || at.back() != static_cast<int32_t>(i)) at.push_back(static_cast<int32_t>(i));
      }
    }
  }
  for (size_t r = 0; r < regions.size(); ++r) {
    SPW_CHECK(!nodes[r].empty(), "sharded state", "region ", r, " is touched by no node of the step");
  }
  return nodes;
}

std::vector<bool> small_regions(const std::vector<RingRegion>& regions) {
  uint64_t largest = 0;
  for (const RingRegion& r : regions) largest = std::max(largest, r.bytes);
  std::vector<bool> small;
  for (const RingRegion& r : regions) small.push_back(r.bytes * kSmallFraction < largest);
  return small;
}

// Gives each region a slot whose other regions' occupancy never overlaps
// its own: the largest regions first, each into the tightest slot that
// holds it (else the largest, grown), else a new one; small ones alone.
RingSchedule colour(std::vector<RingSchedule::Episode> episodes, const std::vector<Interval>& occupied,
                    const std::vector<RingRegion>& regions, const std::vector<bool>& small) {
  RingSchedule s;
  s.slot_of_region.assign(regions.size(), -1);
  std::vector<std::vector<Interval>> by_region(regions.size());
  for (size_t e = 0; e < episodes.size(); ++e) {
    by_region[static_cast<size_t>(episodes[e].region)].push_back(occupied[e]);
  }
  std::vector<std::vector<Interval>> slot_intervals;
  std::vector<int> order(regions.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return regions[static_cast<size_t>(a)].bytes > regions[static_cast<size_t>(b)].bytes;
  });
  for (int r : order) {
    const auto ru = static_cast<size_t>(r);
    const uint64_t need = regions[ru].bytes;
    int pick = -1;
    if (!small[ru]) {
      for (size_t k = 0; k < slot_intervals.size(); ++k) {
        const bool free = std::none_of(by_region[ru].begin(), by_region[ru].end(), [&](const Interval& mine) {
          return std::any_of(slot_intervals[k].begin(), slot_intervals[k].end(),
                             [&](const Interval& other) { return mine.overlaps(other); });
        });
        if (!free) continue;
        const uint64_t have = s.slot_bytes[k];
        if (pick < 0) {
          pick = static_cast<int>(k);
          continue;
        }
        const uint64_t best = s.slot_bytes[static_cast<size_t>(pick)];
        const bool fits = have >= need, best_fits = best >= need;
        if ((fits && (!best_fits || have < best)) || (!fits && !best_fits && have > best)) pick = static_cast<int>(k);
      }
    }
    if (pick < 0) {
      pick = static_cast<int>(slot_intervals.size());
      slot_intervals.emplace_back();
      s.slot_bytes.push_back(0);
      // A small region's slot is its own: nothing else may join it.
      if (small[ru]) slot_intervals.back().push_back({0, INT32_MAX});
    }
    const auto k = static_cast<size_t>(pick);
    s.slot_bytes[k] = std::max(s.slot_bytes[k], need);
    if (!small[ru]) slot_intervals[k].insert(slot_intervals[k].end(), by_region[ru].begin(), by_region[ru].end());
    s.slot_of_region[ru] = pick;
  }
  // Each episode's predecessor in its slot.
  std::sort(episodes.begin(), episodes.end(),
            [](const RingSchedule::Episode& a, const RingSchedule::Episode& b) { return a.first_node < b.first_node; });
  std::vector<int> last_in_slot(s.slot_bytes.size(), -1);
  for (size_t e = 0; e < episodes.size(); ++e) {
    const auto slot = static_cast<size_t>(s.slot_of_region[static_cast<size_t>(episodes[e].region)]);
    const int prev = last_in_slot[slot];
    episodes[e].previous = prev;
    if (prev >= 0) {
      const RingSchedule::Episode& p = episodes[static_cast<size_t>(prev)];
      episodes[e].gather_after = p.region == episodes[e].region ? RingSchedule::kStillThere : p.last_node;
    }
    last_in_slot[slot] = static_cast<int>(e);
  }
  s.episodes = std::move(episodes);
  return s;
}

}  // namespace

std::vector<int> region_of_stacks(const StateLayout& layout) {
  const auto& regions = layout.shards.regions();
  std::vector<int> of;
  for (uint64_t at : layout.stack_at) {
    auto it = std::upper_bound(regions.begin(), regions.end(), at,
                               [](uint64_t a, const ShardLayout::Region& r) { return a < r.first + r.elements; });
    SPW_CHECK(it != regions.end(), "state layout", "a stack at ", at, " lies in no region");
    of.push_back(static_cast<int>(it - regions.begin()));
  }
  return of;
}

std::vector<RingRegion> ring_regions(const StateLayout& layout, const std::vector<graph::Value>& values,
                                     uint64_t bytes_per_element) {
  SPW_CHECK(values.size() == layout.stack_at.size(), "state layout", values.size(), " values for ",
            layout.stack_at.size(), " stacks");
  std::vector<RingRegion> out;
  for (const auto& r : layout.shards.regions()) out.push_back({.bytes = r.elements * bytes_per_element});
  const std::vector<int> of = region_of_stacks(layout);
  for (size_t j = 0; j < values.size(); ++j) out[static_cast<size_t>(of[j])].values.push_back(values[j]);
  return out;
}

uint64_t RingSchedule::bytes() const {
  uint64_t total = 0;
  for (uint64_t b : slot_bytes) total += b;
  return total;
}

RingSchedule gather_schedule(const graph::Graph& g, const std::vector<RingRegion>& regions) {
  const auto nodes = touching_nodes(g, regions);
  const std::vector<bool> small = small_regions(regions);
  // Which large region each node reads (a node reads at most a few).
  std::vector<std::vector<int>> large_at(g.nodes().size());
  for (size_t r = 0; r < regions.size(); ++r) {
    if (small[r]) continue;
    for (int32_t n : nodes[r]) large_at[static_cast<size_t>(n)].push_back(static_cast<int>(r));
  }
  auto other_between = [&](size_t r, int32_t a, int32_t b) {
    for (int32_t n = a + 1; n < b; ++n) {
      for (int o : large_at[static_cast<size_t>(n)]) {
        if (o != static_cast<int>(r)) return true;
      }
    }
    return false;
  };
  std::vector<RingSchedule::Episode> episodes;
  for (size_t r = 0; r < regions.size(); ++r) {
    const auto& at = nodes[r];
    RingSchedule::Episode e{.region = static_cast<int>(r), .first_node = at.front(), .last_node = at.front()};
    for (size_t k = 1; k < at.size(); ++k) {
      if (!small[r] && other_between(r, at[k - 1], at[k])) {
        episodes.push_back(e);
        e.first_node = at[k];
      }
      e.last_node = at[k];
    }
    episodes.push_back(e);
  }
  std::sort(episodes.begin(), episodes.end(),
            [](const RingSchedule::Episode& a, const RingSchedule::Episode& b) { return a.first_node < b.first_node; });
  // A gather may run while the episode before it (in time) goes on.
  std::vector<Interval> occupied;
  for (size_t e = 0; e < episodes.size(); ++e) {
    const int32_t from = e == 0 ? episodes[e].first_node : episodes[e - 1].first_node;
    occupied.push_back({from, episodes[e].last_node});
  }
  return colour(std::move(episodes), occupied, regions, small);
}

RingSchedule reduce_schedule(const graph::Graph& g, const std::vector<RingRegion>& regions) {
  const auto nodes = touching_nodes(g, regions);
  const std::vector<bool> small = small_regions(regions);
  std::vector<RingSchedule::Episode> episodes;
  for (size_t r = 0; r < regions.size(); ++r) {
    episodes.push_back({.region = static_cast<int>(r), .first_node = nodes[r].front(), .last_node = nodes[r].back()});
  }
  // A reduce-scatter may run while the episode after it (by end) goes on.
  std::vector<int32_t> ends;
  for (const auto& e : episodes) ends.push_back(e.last_node);
  std::sort(ends.begin(), ends.end());
  std::vector<Interval> occupied;
  for (const auto& e : episodes) {
    const auto next = std::upper_bound(ends.begin(), ends.end(), e.last_node);
    occupied.push_back({e.first_node, next == ends.end() ? e.last_node : *next});
  }
  return colour(std::move(episodes), occupied, regions, small);
}

}  // namespace spillway::train
