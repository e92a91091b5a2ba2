#include "plan/placement.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/bytes.h"
#include "base/status.h"
#include "device/arena.h"
#include "device/memory_space.h"

namespace spillway::plan {

using graph::Graph;
using graph::Value;
using graph::ValueRole;

namespace {

// A stretch of nodes [first, last] that use a value while it is on the
// device; its memory is taken at `load` (<= first: a prefetch starts early).
struct Segment {
  int32_t first, last;
  int32_t load;
};

struct ValuePlan {
  std::vector<int32_t> touches;  // nodes that produce or read it, ascending
  std::vector<Segment> segments;
  uint64_t cost = 0;
  bool computed = false;     // made by a node of the step (accumulated values are not: they come from home)
  bool accumulated = false;  // the caller's running sum: loaded before its producer adds to it, stored back after
  bool output = false;
};

std::vector<ValuePlan> initial_plans(const Graph& g, const graph::AllocationCost& cost,
                                     const std::vector<bool>& resident) {
  std::vector<ValuePlan> plans(g.values().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto& n = g.nodes()[i];
    for (Value v : n.inputs) plans[static_cast<size_t>(v.id)].touches.push_back(static_cast<int32_t>(i));
    for (Value v : n.outputs) plans[static_cast<size_t>(v.id)].touches.push_back(static_cast<int32_t>(i));
  }
  for (size_t v = 0; v < plans.size(); ++v) {
    ValuePlan& p = plans[v];
    auto& t = p.touches;
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    p.cost = cost(g.values()[v].bytes());
    p.accumulated = g.values()[v].accumulated;
    p.computed = g.values()[v].role == ValueRole::computed && !p.accumulated;
    p.output = g.is_output(Value{static_cast<int32_t>(v)});
    const bool stays = v < resident.size() && resident[v];
    if (!t.empty() && !stays) p.segments.push_back({t.front(), t.back(), t.front()});
  }
  return plans;
}

std::vector<uint64_t> device_profile(const std::vector<ValuePlan>& plans, size_t nodes) {
  std::vector<int64_t> delta(nodes + 1, 0);
  for (const auto& p : plans) {
    for (const auto& s : p.segments) {
      delta[static_cast<size_t>(s.load)] += static_cast<int64_t>(p.cost);
      delta[static_cast<size_t>(s.last) + 1] -= static_cast<int64_t>(p.cost);
    }
  }
  std::vector<uint64_t> profile(nodes);
  int64_t running = 0;
  for (size_t i = 0; i < nodes; ++i) {
    running += delta[i];
    profile[i] = static_cast<uint64_t>(running);
  }
  return profile;
}

// The gap (last touch before `at`, first touch after) of the segment of `p`
// that spans node `at` without touching it; nullopt when there is none.
std::optional<std::pair<int32_t, int32_t>> gap_around(const ValuePlan& p, int32_t at) {
  for (const Segment& s : p.segments) {
    if (s.first >= at || s.last <= at) continue;
    auto next = std::upper_bound(p.touches.begin(), p.touches.end(), at);
    const int32_t before = *std::prev(next);
    if (before == at) return std::nullopt;  // used at `at`: it must be on the device
    return std::make_pair(before, *next);
  }
  return std::nullopt;
}

// Sends `p` home between the two touches of `gap`.
void split(ValuePlan& p, std::pair<int32_t, int32_t> gap) {
  for (size_t k = 0; k < p.segments.size(); ++k) {
    Segment s = p.segments[k];
    if (s.first <= gap.first && gap.second <= s.last) {
      p.segments[k] = {s.first, gap.first, s.load};
      p.segments.insert(p.segments.begin() + static_cast<std::ptrdiff_t>(k) + 1,
                        Segment{gap.second, s.last, gap.second});
      return;
    }
  }
}

}  // namespace

uint64_t minimum_device_budget(const Graph& g, const graph::AllocationCost& cost, const std::vector<bool>& resident) {
  uint64_t minimum = 0;
  for (const auto& n : g.nodes()) {
    std::vector<int32_t> ids;
    for (Value v : n.inputs) ids.push_back(v.id);
    for (Value v : n.outputs) ids.push_back(v.id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    uint64_t bytes = 0;
    for (int32_t id : ids) {
      const auto u = static_cast<size_t>(id);
      if (u < resident.size() && resident[u]) continue;
      bytes += cost(g.values()[u].bytes());
    }
    minimum = std::max(minimum, bytes);
  }
  return minimum;
}

namespace {

// Sends the largest idle values home until the device profile (loads at
// their first use) fits `budget`.
void offload_until_under(std::vector<ValuePlan>& plans, size_t n_nodes, uint64_t budget) {
  for (;;) {
    std::vector<uint64_t> profile = device_profile(plans, n_nodes);
    auto peak_it = std::max_element(profile.begin(), profile.end());
    if (peak_it == profile.end() || *peak_it <= budget) return;
    const auto at = static_cast<int32_t>(peak_it - profile.begin());
    // The largest value idle at the peak goes home; ties go to the longest gap.
    int best = -1;
    std::pair<int32_t, int32_t> best_gap{0, 0};
    for (size_t v = 0; v < plans.size(); ++v) {
      auto gap = gap_around(plans[v], at);
      if (!gap) continue;
      const uint64_t best_cost = best < 0 ? 0 : plans[static_cast<size_t>(best)].cost;
      if (best < 0 || plans[v].cost > best_cost ||
          (plans[v].cost == best_cost && gap->second - gap->first > best_gap.second - best_gap.first)) {
        best = static_cast<int>(v);
        best_gap = *gap;
      }
    }
    // The caller checked the minimum: over budget at a node means something
    // resident there is not one of its operands.
    SPW_CHECK(best >= 0, "planner", "no value to offload at node ", at);
    split(plans[static_cast<size_t>(best)], best_gap);
  }
}

// When each node starts with the nodes run back to back; the last entry is
// the end of the step.
std::vector<double> start_times(const std::vector<double>& node_seconds) {
  std::vector<double> start_of(node_seconds.size() + 1, 0.0);
  for (size_t i = 0; i < node_seconds.size(); ++i) start_of[i + 1] = start_of[i] + node_seconds[i];
  return start_of;
}

// Adds `cost` to `profile` at nodes `first`, `first + step`, ... through
// `last` (step is +1 or -1) for as many of them as fit `budget`, stopping at
// the first that does not; returns the last node taken, or `first - step`
// when none fits. The direction is given, not inferred from the ends: a
// one-node walk would otherwise go the wrong way from its only node.
int32_t take_while_fits(std::vector<uint64_t>& profile, int32_t first, int32_t last, int32_t step, uint64_t cost,
                        uint64_t budget) {
  int32_t taken = first - step;
  for (int32_t k = first; step < 0 ? k >= last : k <= last; k += step) {
    if (profile[static_cast<size_t>(k)] + cost > budget) break;
    taken = k;
  }
  for (int32_t k = first; k != taken + step; k += step) profile[static_cast<size_t>(k)] += cost;
  return taken;
}

// Moves each load as late as a single host->device stream allows while
// still finishing before its first use: walking the loads from the last
// needed to the first, each ends when the next one (in stream order) starts
// or when its node starts, whichever is earlier. A load never starts before
// the value's previous stretch ended, nor where the device memory it would
// hold earlier than its node is not within `budget`: then it starts later
// and the compute stream may wait for it.
void schedule_loads(const Graph& g, std::vector<ValuePlan>& plans, const std::vector<double>& node_seconds,
                    double h2d_rate, uint64_t budget) {
  const std::vector<double> start_of = start_times(node_seconds);
  std::vector<uint64_t> profile = device_profile(plans, node_seconds.size());
  struct Load {
    size_t value, segment;
    int32_t need, earliest;
  };
  std::vector<Load> loads;
  for (size_t v = 0; v < plans.size(); ++v) {
    ValuePlan& p = plans[v];
    for (size_t k = 0; k < p.segments.size(); ++k) {
      if (p.computed && k == 0) continue;  // born on the device
      const int32_t earliest = k == 0 ? 0 : p.segments[k - 1].last + 1;
      loads.push_back({v, k, p.segments[k].first, earliest});
    }
  }
  std::sort(loads.begin(), loads.end(), [](const Load& a, const Load& b) {
    return a.need != b.need ? a.need > b.need : a.value > b.value;
  });
  double stream_free_from = start_of.back();
  for (const Load& l : loads) {
    const double seconds = static_cast<double>(g.values()[l.value].bytes()) / h2d_rate;
    const double start = std::min(start_of[static_cast<size_t>(l.need)], stream_free_from) - seconds;
    // The last node that begins at or before `start`.
    auto at = static_cast<int32_t>(std::upper_bound(start_of.begin(), start_of.end() - 1, start) - start_of.begin()) - 1;
    at = std::clamp(at, l.earliest, l.need);
    if (at < l.need) at = take_while_fits(profile, l.need - 1, at, -1, plans[l.value].cost, budget);
    at = std::min(at, l.need);
    plans[l.value].segments[l.segment].load = at;
    stream_free_from = std::max(start, start_of[static_cast<size_t>(at)]);
  }
}

// Keeps each value that goes home on the device until its store is
// predicted to be over, as far as `budget` allows: stores run one after
// another on the device->host stream, each from the end of the node that
// made its value.
void hold_until_stored(const Graph& g, std::vector<ValuePlan>& plans, const std::vector<double>& node_seconds,
                       double d2h_rate, uint64_t budget) {
  const std::vector<double> start_of = start_times(node_seconds);
  std::vector<uint64_t> profile = device_profile(plans, node_seconds.size());
  std::vector<size_t> stored;
  for (size_t v = 0; v < plans.size(); ++v) {
    const ValuePlan& p = plans[v];
    if (!p.segments.empty() && (p.accumulated || (p.computed && (p.segments.size() > 1 || p.output)))) {
      stored.push_back(v);
    }
  }
  std::sort(stored.begin(), stored.end(), [&](size_t a, size_t b) {
    return plans[a].segments[0].first != plans[b].segments[0].first ? plans[a].segments[0].first < plans[b].segments[0].first
                                                                     : a < b;
  });
  double stream_free_at = 0;
  for (size_t v : stored) {
    Segment& s = plans[v].segments[0];
    const double start = std::max(stream_free_at, start_of[static_cast<size_t>(s.first) + 1]);
    stream_free_at = start + static_cast<double>(g.values()[v].bytes()) / d2h_rate;
    // The first node that starts after the store ends; the value is freed
    // after the node before it.
    auto done = static_cast<int32_t>(std::lower_bound(start_of.begin(), start_of.end() - 1, stream_free_at) -
                                     start_of.begin()) - 1;
    if (plans[v].segments.size() > 1) done = std::min(done, plans[v].segments[1].load - 1);
    done = std::min(done, static_cast<int32_t>(node_seconds.size()) - 1);
    if (done > s.last) s.last = take_while_fits(profile, s.last + 1, done, +1, plans[v].cost, budget);
  }
}

uint64_t peak_of(const std::vector<ValuePlan>& plans, size_t n_nodes) {
  std::vector<uint64_t> profile = device_profile(plans, n_nodes);
  return profile.empty() ? 0 : *std::max_element(profile.begin(), profile.end());
}

// The actions around each node for the stretches in `plans`.
Placement to_placement(const Graph& g, const std::vector<ValuePlan>& plans, const PlacementRequest& r) {
  const size_t n_nodes = g.nodes().size();
  Placement out;
  out.nodes.resize(n_nodes);
  out.resident = r.resident;
  out.resident.resize(g.values().size(), false);
  std::vector<int64_t> host_delta(n_nodes + 1, 0);
  struct Issue {
    int32_t node, need;
    Value value;
  };
  std::vector<Issue> issues;
  for (size_t v = 0; v < plans.size(); ++v) {
    const ValuePlan& p = plans[v];
    if (p.segments.empty()) continue;
    const Value value{static_cast<int32_t>(v)};
    for (size_t k = 0; k < p.segments.size(); ++k) {
      const Segment& s = p.segments[k];
      const bool born_here = p.computed && k == 0;
      if (born_here) {
        out.nodes[static_cast<size_t>(s.first)].allocate.push_back(value);
      } else {
        issues.push_back({s.load, s.first, value});
        out.bytes_loaded += g.values()[v].bytes();
      }
      out.nodes[static_cast<size_t>(s.last)].drop.push_back(value);
    }
    // An accumulated value goes back to the caller's buffer right after its
    // producer added to it (the caller's memory: no host copy is counted).
    if (p.accumulated) {
      out.nodes[static_cast<size_t>(p.segments.front().first)].store.push_back(value);
      out.bytes_stored += g.values()[v].bytes();
      continue;
    }
    // A computed value goes home once, as soon as it exists, when it comes
    // back later or is an output the caller reads after the step.
    const bool stored = p.computed && (p.segments.size() > 1 || p.output);
    if (stored) {
      const int32_t at = p.segments.front().first;
      out.nodes[static_cast<size_t>(at)].store.push_back(value);
      out.bytes_stored += g.values()[v].bytes();
      if (p.segments.size() > 1) ++out.values_offloaded;
      host_delta[static_cast<size_t>(at)] += static_cast<int64_t>(p.cost);
      if (!p.output) {
        const int32_t release = p.segments.back().first;  // after its last load
        out.nodes[static_cast<size_t>(release)].release_host.push_back(value);
        host_delta[static_cast<size_t>(release) + 1] -= static_cast<int64_t>(p.cost);
      }
    }
  }
  // Loads are issued in the order the host->device stream should run them:
  // by issuing node, then by the node that needs them.
  std::sort(issues.begin(), issues.end(), [](const Issue& a, const Issue& b) {
    return a.node != b.node ? a.node < b.node : a.need != b.need ? a.need < b.need : a.value.id < b.value.id;
  });
  for (const Issue& i : issues) out.nodes[static_cast<size_t>(i.node)].load.push_back(i.value);
  out.device_peak = peak_of(plans, n_nodes);
  int64_t host = 0;
  for (size_t i = 0; i < n_nodes; ++i) {
    host += host_delta[i];
    out.host_peak = std::max<uint64_t>(out.host_peak, static_cast<uint64_t>(host));
  }
  return out;
}

// How many bytes the largest request falls short when the executor's exact
// sequence of allocations and frees replays in a best-fit arena of
// `capacity` bytes (the CUDA pool's allocator); 0 when all fit.
uint64_t arena_shortfall(const Graph& g, const Placement& p, uint64_t capacity) {
  Arena arena("plan replay", capacity, MemorySpace::kAlignment);
  std::vector<uint64_t> offset(g.values().size(), 0);
  for (const NodeActions& act : p.nodes) {
    for (const auto* list : {&act.load, &act.allocate}) {
      for (Value v : *list) {
        const uint64_t bytes = g.value(v).bytes();
        std::optional<uint64_t> at = arena.try_allocate(bytes);
        if (!at) {
          const uint64_t need = MemorySpace::accounted_bytes(bytes);
          return std::max<uint64_t>(need - std::min(need, arena.largest_free_block()), MemorySpace::kAlignment);
        }
        offset[static_cast<size_t>(v.id)] = *at;
      }
    }
    for (Value v : act.drop) arena.free(offset[static_cast<size_t>(v.id)]);
  }
  return 0;
}

}  // namespace

Placement plan_placement(const Graph& g, const PlacementRequest& r, const graph::AllocationCost& cost) {
  const uint64_t minimum = minimum_device_budget(g, cost, r.resident);
  SPW_CHECK(r.device_budget >= minimum, "--device-mem", "a budget of ", format_bytes(r.device_budget),
            " is below this step's minimum of ", format_bytes(minimum), " (the largest single op's tensors)");
  const size_t n_nodes = g.nodes().size();
  const bool prefetch = !r.node_seconds.empty() && r.h2d_bytes_per_second > 0;
  SPW_CHECK(!prefetch || r.node_seconds.size() == n_nodes, "planner", "node times for ", r.node_seconds.size(),
            " nodes, the graph has ", n_nodes);

  // Plans under `effective` and says by how much the result misses the
  // budget: its peak over it, or what a best-fit arena of the budget's size
  // would lack at its most fragmented; 0 when `out` fits.
  Placement out;
  auto miss = [&](uint64_t effective, bool early_loads) -> uint64_t {
    std::vector<ValuePlan> plans = initial_plans(g, cost, r.resident);
    offload_until_under(plans, n_nodes, effective);
    if (early_loads) {
      // Stores are held first: a free that waits stalls compute at once,
      // a late load only if its copy is not done by its node.
      if (r.d2h_bytes_per_second > 0) hold_until_stored(g, plans, r.node_seconds, r.d2h_bytes_per_second, effective);
      schedule_loads(g, plans, r.node_seconds, r.h2d_bytes_per_second, effective);
    }
    const uint64_t peak = peak_of(plans, n_nodes);
    if (peak > r.device_budget) return peak - r.device_budget;
    out = to_placement(g, plans, r);
    return r.best_fit_arena ? arena_shortfall(g, out, r.device_budget) : 0;
  };
  // Early loads hold memory longer than the greedy pass counted, and the
  // pool can be too fragmented for what the byte count allows: plan again
  // under a budget lowered by the miss until the plan fits. If early loads
  // never fit, loads start at their nodes (the greedy pass then fits in
  // bytes), lowered the same way down to the minimum.
  for (bool early_loads : {true, false}) {
    if (early_loads && !prefetch) continue;
    uint64_t effective = r.device_budget;
    for (int attempt = 0; !early_loads || attempt < 24; ++attempt) {
      const uint64_t short_by = miss(effective, early_loads);
      if (short_by == 0) {
        SPW_CHECK(out.host_peak <= r.host_budget, "--host-mem", "the plan needs ", format_bytes(out.host_peak),
                  " of host memory for offloaded values",
                  r.host_taken ? " beside " + format_bytes(r.host_taken) + " of training state at home" : "",
                  ", more than the budget of ", format_bytes(r.host_budget + r.host_taken));
        return out;
      }
      const uint64_t step = std::max(short_by, r.device_budget / 64);
      if (effective < minimum + step) {
        SPW_CHECK(early_loads, "--device-mem", "a budget of ", format_bytes(r.device_budget),
                  " holds this step's tensors but not in one piece each: the pool would be ", format_bytes(short_by),
                  " short at its most fragmented (the minimum is ", format_bytes(minimum), ")");
        break;
      }
      effective -= step;
    }
  }
  throw Error("planner", "no placement found");  // unreachable: the last phase returns or throws
}

Placement plan_placement(const Graph& g, uint64_t device_budget, uint64_t host_budget,
                         const graph::AllocationCost& cost) {
  PlacementRequest r;
  r.device_budget = device_budget;
  r.host_budget = host_budget;
  return plan_placement(g, r, cost);
}

}  // namespace spillway::plan
