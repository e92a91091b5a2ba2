#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>

#include "plan/timeline_svg.h"

namespace spillway::plan {

using graph::OpKind;

MachineRates h100_rates() {
  // Attention at head dim 64: cuDNN forward 370 and backward 315 TFLOP/s in
  // the LLaMA-3.2-1B step (2026-11-22), 330 for the pair.
  return MachineRates{"NVIDIA H100 80GB HBM3", 690e12, 530e12, 330e12, 3.0e12, 43e9, 53e9, 989e12};
}

NodeCost node_cost(const graph::Graph& g, const graph::Node& n, const MachineRates& r) {
  NodeCost c;
  for (auto v : n.inputs) c.bytes += static_cast<double>(g.value(v).bytes());
  for (auto v : n.outputs) c.bytes += static_cast<double>(g.value(v).bytes());
  double compute_s = 0;
  if (n.kind == OpKind::matmul) {
    const auto& a = g.value(n.inputs[0]).shape;
    const auto& out = g.value(n.outputs[0]).shape;
    const double k = static_cast<double>(n.attrs.trans_a ? a.rows() : a.last());
    c.flops = 2.0 * static_cast<double>(out.numel()) * k;
    compute_s = c.flops / r.gemm_flops;
  } else if (n.kind == OpKind::attention || n.kind == OpKind::attention_backward) {
    const auto& q = g.value(n.inputs[n.kind == OpKind::attention ? 0 : 1]).shape;
    const double b = static_cast<double>(q[0]), s = static_cast<double>(q[1]);
    const double d = static_cast<double>(q.last());  // heads * head_dim
    const double forward = 2.0 * 2.0 * b * s * s * d / 2.0;
    c.flops = n.kind == OpKind::attention ? forward : 2.5 * forward;
    const double head_dim = d / static_cast<double>(std::max<int64_t>(n.attrs.heads, 1));
    compute_s = c.flops / (head_dim <= 64 ? r.attention_flops_head_dim_64 : r.attention_flops);
  }
  c.seconds = std::max(compute_s, c.bytes / r.memory_bytes);
  return c;
}

StepPrediction predict_step(const graph::Graph& g, const Placement& placement, const MachineRates& r) {
  StepPrediction p;
  for (const auto& n : g.nodes()) {
    p.node_seconds.push_back(node_cost(g, n, r).seconds);
    p.compute_seconds += p.node_seconds.back();
  }
  p.h2d_seconds = static_cast<double>(placement.bytes_loaded) / r.h2d_bytes;
  p.d2h_seconds = static_cast<double>(placement.bytes_stored) / r.d2h_bytes;
  p.step_seconds = std::max({p.compute_seconds, p.h2d_seconds, p.d2h_seconds});
  return p;
}

std::string timeline_svg(const graph::Graph& g, const Placement& placement, const StepPrediction& p,
                         const MachineRates& rates, const std::string& title) {
  // Compute bars in node order; each copy runs on its stream as early as the
  // stream is free: a load from the node that issues it, a store right after
  // the node that made its value.
  std::vector<TimelineBar> bars;
  double t = 0, h2d_free = 0, d2h_free = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto& act = placement.nodes[i];
    for (auto v : act.load) {
      const double d = static_cast<double>(g.value(v).bytes()) / rates.h2d_bytes;
      const double start = std::max(h2d_free, t);
      h2d_free = start + d;
      bars.push_back({1, start, start + d, "load " + g.value(v).name, false});
    }
    const auto& n = g.nodes()[i];
    const bool heavy = n.kind == OpKind::matmul || n.kind == OpKind::attention || n.kind == OpKind::attention_backward;
    bars.push_back({0, t, t + p.node_seconds[i], std::string(graph::op_name(n.kind)) + " " + n.name, heavy});
    t += p.node_seconds[i];
    for (auto v : act.store) {
      const double c = static_cast<double>(g.value(v).bytes()) / rates.d2h_bytes;
      const double start = std::max(d2h_free, t);
      d2h_free = start + c;
      bars.push_back({2, start, start + c, "store " + g.value(v).name, false});
    }
  }
  return timeline_svg(bars, title + " (predicted)");
}

}  // namespace spillway::plan
