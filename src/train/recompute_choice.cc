#include "train/recompute_choice.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/recompute.h"
#include "plan/cost_model.h"

namespace spillway::train {

std::vector<RecomputeKindCost> recompute_kinds_by_cost(const graph::Graph& g, const plan::MachineRates& rates) {
  // The values `layers` remade are those its clones ("<name> (recompute)") stand for.
  constexpr std::string_view kSuffix = " (recompute)";
  std::set<std::string> remade;
  for (const graph::Node& n : g.nodes()) {
    if (!n.recompute) continue;
    for (graph::Value o : n.outputs) {
      const std::string& name = g.value(o).name;
      if (name.ends_with(kSuffix)) remade.insert(name.substr(0, name.size() - kSuffix.size()));
    }
  }
  std::map<std::string, RecomputeKindCost> by_kind;
  for (const graph::Node& n : g.nodes()) {
    if (n.backward) continue;
    // A node's outputs share its kind, and remaking them runs it once.
    bool counted = false;
    for (graph::Value o : n.outputs) {
      if (!remade.contains(g.value(o).name)) continue;
      const std::string kind = graph::recompute_kind(g, o);
      if (kind.empty()) continue;
      RecomputeKindCost& c = by_kind[kind];
      c.kind = kind;
      c.bytes += g.value(o).bytes();
      if (!counted) c.seconds += plan::node_cost(g, n, rates).seconds;
      counted = true;
    }
  }
  std::vector<RecomputeKindCost> kinds;
  for (auto& [kind, cost] : by_kind) {
    if (cost.bytes > 0) kinds.push_back(std::move(cost));
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const RecomputeKindCost& a, const RecomputeKindCost& b) {
    return a.seconds * static_cast<double>(b.bytes) < b.seconds * static_cast<double>(a.bytes);
  });
  return kinds;
}

std::string recomputed_kinds_summary(const std::vector<std::string>& kinds) {
  std::string list;
  for (const std::string& k : kinds) list += (list.empty() ? "" : ", ") + k;
  return std::to_string(kinds.size()) + (kinds.size() == 1 ? " kind" : " kinds") + " of layer values (" + list + ")";
}

}  // namespace spillway::train
