#include "graph/liveness.h"

#include <algorithm>

namespace spillway::graph {

Liveness analyze_liveness(const Graph& graph, const AllocationCost& cost) {
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  Liveness live;
  live.of.resize(values.size());
  live.born_at.resize(nodes.size());
  live.dies_at.resize(nodes.size());
  live.bytes_in_use.resize(nodes.size());

  for (size_t v = 0; v < values.size(); ++v) {
    Lifetime& life = live.of[v];
    // Accumulated values live in the caller's memory, like parameters.
    // A value left without a producer by a graph rewrite is never made.
    life.managed = values[v].role == ValueRole::computed && !values[v].accumulated && values[v].producer >= 0;
    life.def = values[v].producer;
    life.last_use = life.def;  // a value nobody reads dies right after its producer
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Value in : nodes[i].inputs) {
      Lifetime& life = live.of[static_cast<size_t>(in.id)];
      life.last_use = std::max(life.last_use, static_cast<int32_t>(i));
    }
  }
  for (Value out : graph.outputs()) live.of[static_cast<size_t>(out.id)].last_use = Liveness::kEndOfStep;

  live.handed_over_at.resize(nodes.size());
  std::vector<bool> handed_over(values.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int k = in_place_input(n, o);
      if (k < 0 || static_cast<size_t>(k) >= n.inputs.size()) continue;
      const Value from = n.inputs[static_cast<size_t>(k)], to = n.outputs[o];
      const Lifetime& source = live.of[static_cast<size_t>(from.id)];
      // The input must die here, be read by this node only once (a second
      // read of it could come after the write), and be as large.
      if (!source.managed || !live.of[static_cast<size_t>(to.id)].managed ||
          source.last_use != static_cast<int32_t>(i) || handed_over[static_cast<size_t>(from.id)] ||
          std::count(n.inputs.begin(), n.inputs.end(), from) != 1 ||
          values[static_cast<size_t>(from.id)].bytes() != values[static_cast<size_t>(to.id)].bytes()) {
        continue;
      }
      handed_over[static_cast<size_t>(from.id)] = true;
      live.of[static_cast<size_t>(to.id)].takes_over = from.id;
      live.handed_over_at[i].push_back(Handover{from, to});
    }
  }

  for (size_t v = 0; v < values.size(); ++v) {
    const Lifetime& life = live.of[v];
    if (!life.managed) continue;
    if (life.takes_over < 0) live.born_at[static_cast<size_t>(life.def)].push_back(Value{static_cast<int32_t>(v)});
    if (life.last_use != Liveness::kEndOfStep && !handed_over[v]) {
      live.dies_at[static_cast<size_t>(life.last_use)].push_back(Value{static_cast<int32_t>(v)});
    }
  }

  uint64_t in_use = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (Value v : live.born_at[i]) in_use += cost(values[static_cast<size_t>(v.id)].bytes());
    live.bytes_in_use[i] = in_use;
    if (in_use > live.peak_bytes) {
      live.peak_bytes = in_use;
      live.peak_node = static_cast<int32_t>(i);
    }
    for (Value v : live.dies_at[i]) in_use -= cost(values[static_cast<size_t>(v.id)].bytes());
  }
  return live;
}

}  // namespace spillway::graph
