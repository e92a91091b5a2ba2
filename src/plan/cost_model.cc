#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>

#include "plan/timeline_svg.h"

namespace spillway::plan {

using graph::OpKind;

NodeCost node_cost(const graph::Graph& g, const graph::Node& n, const MachineRates& r) {
  NodeCost c;
  for (auto v : n.inputs) c.bytes += static_cast<double>(g.value(v).bytes());
  for (auto v : n.outputs) c.bytes += static_cast<double>(g.value(v).bytes());
  double compute_s = 0;
  if (n.kind == OpKind::matmul) {
    // From the operands: a product with SwiGLU's backward folded in writes
    // d(gate|up), not the product (graph/fuse_matmul_swiglu.h).
    c.flops = graph::matmul_dims(g, n).flops();
    compute_s = c.flops / r.gemm_flops;
  } else if (n.kind == OpKind::attention || n.kind == OpKind::attention_backward) {
    const graph::AttentionDims a = graph::attention_dims(g, n);
    const double b = static_cast<double>(a.batch), s = static_cast<double>(a.seq);
    const double head_dim = static_cast<double>(a.head_dim);
    const double d = static_cast<double>(a.heads) * head_dim;
    const double forward = 2.0 * 2.0 * b * s * s * d / 2.0;
    c.flops = n.kind == OpKind::attention ? forward : 2.5 * forward;
    compute_s = c.flops / (head_dim <= 64 ? r.attention_flops_head_dim_64 : r.attention_flops);
  }
  c.seconds = std::max(compute_s, c.bytes / r.memory_bytes);
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
      const bool heavy = n.kind == OpKind::matmul || n.kind == OpKind::attention || n.kind == OpKind::attention_backward;
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
