#include "plan/placement.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/bytes.h"
#include "base/status.h"

namespace spillway::plan {

using graph::Graph;
using graph::Value;
using graph::ValueRole;

namespace {

// A stretch of nodes [first, last] during which a value is on the device.
struct Segment {
  int32_t first, last;
};

struct ValuePlan {
  std::vector<int32_t> touches;  // nodes that produce or read it, ascending
  std::vector<Segment> segments;
  uint64_t cost = 0;
  bool computed = false;
  bool output = false;
};

std::vector<ValuePlan> initial_plans(const Graph& g, const graph::AllocationCost& cost) {
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
    p.computed = g.values()[v].role == ValueRole::computed;
    p.output = g.is_output(Value{static_cast<int32_t>(v)});
    if (!t.empty()) p.segments.push_back({t.front(), t.back()});
  }
  return plans;
}

std::vector<uint64_t> device_profile(const std::vector<ValuePlan>& plans, size_t nodes) {
  std::vector<int64_t> delta(nodes + 1, 0);
  for (const auto& p : plans) {
    for (const auto& s : p.segments) {
      delta[static_cast<size_t>(s.first)] += static_cast<int64_t>(p.cost);
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
      p.segments[k] = {s.first, gap.first};
      p.segments.insert(p.segments.begin() + static_cast<std::ptrdiff_t>(k) + 1, Segment{gap.second, s.last});
      return;
    }
  }
}

}  // namespace

uint64_t minimum_device_budget(const Graph& g, const graph::AllocationCost& cost) {
  uint64_t minimum = 0;
  for (const auto& n : g.nodes()) {
    std::vector<int32_t> ids;
    for (Value v : n.inputs) ids.push_back(v.id);
    for (Value v : n.outputs) ids.push_back(v.id);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    uint64_t bytes = 0;
    for (int32_t id : ids) bytes += cost(g.values()[static_cast<size_t>(id)].bytes());
    minimum = std::max(minimum, bytes);
  }
  return minimum;
}

Placement plan_placement(const Graph& g, uint64_t device_budget, uint64_t host_budget,
                         const graph::AllocationCost& cost) {
  const uint64_t minimum = minimum_device_budget(g, cost);
  SPW_CHECK(device_budget >= minimum, "--device-mem", "a budget of ", format_bytes(device_budget),
            " is below this step's minimum of ", format_bytes(minimum), " (the largest single op's tensors)");
  const size_t n_nodes = g.nodes().size();
  std::vector<ValuePlan> plans = initial_plans(g, cost);

  for (;;) {
    std::vector<uint64_t> profile = device_profile(plans, n_nodes);
    auto peak_it = std::max_element(profile.begin(), profile.end());
    if (peak_it == profile.end() || *peak_it <= device_budget) break;
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
    // The minimum check above guarantees a candidate: over budget at a node
    // means something resident there is not one of its operands.
    SPW_CHECK(best >= 0, "planner", "no value to offload at node ", at);
    split(plans[static_cast<size_t>(best)], best_gap);
  }

  Placement out;
  out.nodes.resize(n_nodes);
  std::vector<int64_t> host_delta(n_nodes + 1, 0);
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
        out.nodes[static_cast<size_t>(s.first)].load.push_back(value);
        out.bytes_loaded += g.values()[v].bytes();
      }
      out.nodes[static_cast<size_t>(s.last)].drop.push_back(value);
    }
    // A computed value goes home once, at the end of its first stretch, when
    // it comes back later or is an output the caller reads after the step.
    const bool stored = p.computed && (p.segments.size() > 1 || p.output);
    if (stored) {
      const int32_t at = p.segments.front().last;
      out.nodes[static_cast<size_t>(at)].store.push_back(value);
      out.bytes_stored += g.values()[v].bytes();
      if (p.segments.size() > 1) ++out.values_offloaded;
      if (!p.output) {
        const int32_t release = p.segments.back().first;  // after its last load
        out.nodes[static_cast<size_t>(release)].release_host.push_back(value);
        host_delta[static_cast<size_t>(at)] += static_cast<int64_t>(p.cost);
        host_delta[static_cast<size_t>(release) + 1] -= static_cast<int64_t>(p.cost);
      } else {
        host_delta[static_cast<size_t>(at)] += static_cast<int64_t>(p.cost);
      }
    }
  }
  std::vector<uint64_t> profile = device_profile(plans, n_nodes);
  out.device_peak = profile.empty() ? 0 : *std::max_element(profile.begin(), profile.end());
  int64_t host = 0;
  for (size_t i = 0; i < n_nodes; ++i) {
    host += host_delta[i];
    out.host_peak = std::max<uint64_t>(out.host_peak, static_cast<uint64_t>(host));
  }
  SPW_CHECK(out.host_peak <= host_budget, "--host-mem", "the plan needs ", format_bytes(out.host_peak),
            " of host memory for offloaded values, more than the budget of ", format_bytes(host_budget));
  return out;
}

}  // namespace spillway::plan
