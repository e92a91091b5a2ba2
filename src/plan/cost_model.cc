#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>

#include "graph/op_def.h"
#include "plan/timeline_svg.h"

namespace spillway::plan {

namespace {

// The rate that bounds an op's compute, or 0 for one bound by memory alone.
double compute_rate(graph::RateClass rate, const MachineRates& r) {
  switch (rate) {
    case graph::RateClass::memory: return 0;
    case graph::RateClass::gemm: return r.gemm_flops;
    case graph::RateClass::attention: return r.attention_flops;
    case graph::RateClass::attention_head_dim_64: return r.attention_flops_head_dim_64;
    case graph::RateClass::link: return 0;
  }
  return 0;
}

}  // namespace

NodeCost node_cost(const graph::Graph& g, const graph::Node& n, const MachineRates& r) {
  const graph::OpCost op = graph::op_def(n.kind).cost(g, n);
  NodeCost c;
  c.flops = op.flops;
  c.bytes = op.bytes;
  const double rate = compute_rate(op.rate, r);
  const double compute_s = rate > 0 ? c.flops / rate : 0;
  const double link_s = op.link_bytes / (r.graph_collective_bytes > 0 ? r.graph_collective_bytes : r.collective_bytes);
  c.seconds = std::max({compute_s, link_s, c.bytes / r.memory_bytes});
  return c;
}

namespace {

// The planned executor's step on three streams, in predicted seconds: the
// same actions, in the same order, joined by the same events. Bars are
// drawn only when asked for: the planner replays every layout it tries.
struct Replay {
  double end = 0, wait = 0, h2d_busy = 0, d2h_busy = 0;
};

Replay replay(const graph::Graph& g, const Placement& placement, const std::vector<double>& node_seconds,
              const MachineRates& rates, std::vector<TimelineBar>* bars = nullptr) {
  Replay r;
  const size_t n_values = g.values().size();
  std::vector<double> loaded(n_values, -1), stored(n_values, -1);
  double compute = 0, h2d = 0, d2h = 0;
  double released_load = 0;  // a store may reuse host memory whose load just ended
  auto wait_for = [&](double t) {
    if (t > compute) {
      r.wait += t - compute;
      compute = t;
    }
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto& act = placement.nodes[i];
    const auto& n = g.nodes()[i];
    for (auto v : act.load) {
      const double d = static_cast<double>(g.value(v).bytes()) / rates.h2d_bytes;
      const double start = std::max(h2d, compute);
      h2d = start + d;
      r.h2d_busy += d;
      loaded[static_cast<size_t>(v.id)] = h2d;
      if (bars) bars->push_back({1, start, h2d, "load " + g.value(v).name, false});
    }
    for (const auto* list : {&n.inputs, &n.outputs}) {
      for (auto v : *list) wait_for(loaded[static_cast<size_t>(v.id)]);
    }
    if (bars) {
      const auto rate = graph::op_def(n.kind).cost(g, n).rate;
      const bool heavy = rate != graph::RateClass::memory && rate != graph::RateClass::link;
      bars->push_back({0, compute, compute + node_seconds[i], std::string(graph::op_name(n.kind)) + " " + n.name, heavy});
    }
    compute += node_seconds[i];
    for (auto v : act.store) {
      const double c = static_cast<double>(g.value(v).bytes()) / rates.d2h_bytes;
      const double start = std::max({d2h, compute, released_load});
      d2h = start + c;
      r.d2h_busy += c;
      stored[static_cast<size_t>(v.id)] = d2h;
      if (bars) bars->push_back({2, start, d2h, "store " + g.value(v).name, false});
    }
    for (auto v : act.drop) wait_for(stored[static_cast<size_t>(v.id)]);
    for (auto v : act.release_host) released_load = std::max(released_load, loaded[static_cast<size_t>(v.id)]);
    // A value loaded again later waits only for its own new load.
    for (auto v : act.drop) loaded[static_cast<size_t>(v.id)] = stored[static_cast<size_t>(v.id)] = -1;
  }
  wait_for(d2h);
  r.end = compute;
  return r;
}

}  // namespace

StepPrediction predict_step(const graph::Graph& g, const Placement& placement, const MachineRates& r) {
  StepPrediction p;
  for (const auto& n : g.nodes()) {
    p.node_seconds.push_back(node_cost(g, n, r).seconds);
    p.compute_seconds += p.node_seconds.back();
  }
  const Replay run = replay(g, placement, p.node_seconds, r);
  p.h2d_seconds = run.h2d_busy;
  p.d2h_seconds = run.d2h_busy;
  p.wait_seconds = run.wait;
  p.step_seconds = run.end;
  return p;
}

std::string timeline_svg(const graph::Graph& g, const Placement& placement, const StepPrediction& p,
                         const MachineRates& rates, const std::string& title) {
  std::vector<TimelineBar> bars;
  replay(g, placement, p.node_seconds, rates, &bars);
  return timeline_svg(bars, title + " (predicted)");
}

}  // namespace spillway::plan
