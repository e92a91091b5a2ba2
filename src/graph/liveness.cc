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

  for (size_t v = 0; v < values.size(); ++v) {
    const Lifetime& life = live.of[v];
    if (!life.managed) continue;
    live.born_at[static_cast<size_t>(life.def)].push_back(Value{static_cast<int32_t>(v)});
    if (life.last_use != Liveness::kEndOfStep) {
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
