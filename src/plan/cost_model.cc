#include "plan/cost_model.h"

#include <algorithm>
#include <cstdio>

namespace spillway::plan {

using graph::OpKind;

MachineRates h100_rates() {
  return MachineRates{"NVIDIA H100 80GB HBM3", 690e12, 530e12, 3.0e12, 43e9, 53e9, 989e12};
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
    compute_s = c.flops / r.attention_flops;
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
  const double width = 1200, left = 110, row = 34, top = 40;
  const double total = std::max(p.step_seconds, 1e-12);
  auto x = [&](double t) { return left + t / total * (width - left - 20); };
  char buf[256];
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"170\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof buf, "<text x=\"10\" y=\"22\" font-size=\"14\">%s (predicted step %.1f ms)</text>\n",
                title.c_str(), p.step_seconds * 1e3);
  svg += buf;
  const char* rows[] = {"compute", "host→device", "device→host"};
  for (int i = 0; i < 3; ++i) {
    std::snprintf(buf, sizeof buf, "<text x=\"10\" y=\"%.0f\">%s</text>\n", top + row * i + 20, rows[i]);
    svg += buf;
  }
  // Compute bars in node order; each copy is drawn on its stream as early
  // as its stream is free: a load just before the node that needs it, a
  // store right after the node that made it.
  double t = 0, h2d_free = 0, d2h_free = 0;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const auto& act = placement.nodes[i];
    for (auto v : act.load) {
      const double d = static_cast<double>(g.value(v).bytes()) / rates.h2d_bytes;
      const double start = std::max(h2d_free, t - d);
      h2d_free = start + d;
      std::snprintf(buf, sizeof buf, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"24\" fill=\"#2ca02c\"/>\n",
                    x(start), top + row, std::max(0.5, x(start + d) - x(start)));
      svg += buf;
    }
    const double d = p.node_seconds[i];
    const bool heavy = g.nodes()[i].kind == OpKind::matmul || g.nodes()[i].kind == OpKind::attention ||
                       g.nodes()[i].kind == OpKind::attention_backward;
    std::snprintf(buf, sizeof buf,
                  "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"24\" fill=\"%s\"><title>%s %s</title></rect>\n",
                  x(t), top, std::max(0.3, x(t + d) - x(t)), heavy ? "#1f77b4" : "#aec7e8",
                  std::string(graph::op_name(g.nodes()[i].kind)).c_str(), g.nodes()[i].name.c_str());
    svg += buf;
    t += d;
    for (auto v : act.store) {
      const double c = static_cast<double>(g.value(v).bytes()) / rates.d2h_bytes;
      const double start = std::max(d2h_free, t);
      d2h_free = start + c;
      std::snprintf(buf, sizeof buf, "<rect x=\"%.2f\" y=\"%.0f\" width=\"%.2f\" height=\"24\" fill=\"#d62728\"/>\n",
                    x(start), top + 2 * row, std::max(0.5, x(start + c) - x(start)));
      svg += buf;
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace spillway::plan
