#include "graph/graph.h"

#include <algorithm>
#include <iterator>

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::graph {

std::string_view op_name(OpKind kind) {
  static constexpr std::string_view kNames[] = {
#define SPW_OP(kind) #kind,
#include "graph/op_list.h"
#undef SPW_OP
  };
  return kNames[static_cast<int>(kind)];
}

std::string_view fused_name(Fused fused) {
  static constexpr std::string_view kNames[] = {"none", "addend", "swiglu_gate", "swiglu_backward", "rope",
                                                "loss_gradient"};
  static_assert(std::size(kNames) == kFusedForms);
  return kNames[static_cast<int>(fused)];
}

std::string node_label(const Node& n) { return std::string(op_name(n.kind)) + " '" + n.name + "'"; }

Value Graph::add_value(ValueInfo info) {
  values_.push_back(std::move(info));
  return Value{static_cast<int32_t>(values_.size() - 1)};
}

int32_t Graph::add_node(Node node) {
  auto index = static_cast<int32_t>(nodes_.size());
  check_reads(node.name, node.inputs);
  SPW_CHECK(op_def(node.kind).runs(node.attrs.fused), node_label(node), "has no fused form ",
            fused_name(node.attrs.fused));
  for (Value out : node.outputs) {
    ValueInfo& info = values_.at(static_cast<size_t>(out.id));
    SPW_CHECK(info.producer < 0 && info.role == ValueRole::computed, info.name,
              "value already has a producer");
    info.producer = index;
  }
  nodes_.push_back(std::move(node));
  return index;
}

void Graph::check_reads(std::string_view node_name, const std::vector<Value>& inputs) const {
  for (Value in : inputs) {
    SPW_CHECK(!value(in).accumulated, std::string(node_name), "reads '", value(in).name,
              "', a value accumulated into caller memory (it holds a running sum, not this step's result)");
  }
}

void Graph::mark_output(Value v) {
  if (!is_output(v)) outputs_.push_back(v);
}

namespace {

// The output of `n` that can add into existing contents, or -1 when none can.
int accumulating_output(const Node& n) {
  const auto rule = op_def(n.kind).accumulating_output;
  return rule ? rule(n) : -1;
}

}  // namespace

bool Graph::can_accumulate(Value v) const {
  const ValueInfo& info = value(v);
  if (info.accumulated) return true;
  if (info.role != ValueRole::computed || info.producer < 0) return false;
  const Node& producer = nodes_[static_cast<size_t>(info.producer)];
  const int out = accumulating_output(producer);
  if (out < 0 || producer.outputs[static_cast<size_t>(out)] != v) return false;
  for (const Node& n : nodes_) {
    if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) return false;
  }
  return true;
}

void Graph::mark_accumulated(Value v) {
  const ValueInfo& info = value(v);
  if (!can_accumulate(v)) {
    throw Error(info.name, "cannot be accumulated into caller memory: only an output its op can add into "
                           "(graph::OpDef::accumulating_output) and that no node reads can; it is made by " +
                               (info.producer < 0 ? std::string("no node")
                                                  : node_label(nodes_[static_cast<size_t>(info.producer)])));
  }
  values_[static_cast<size_t>(v.id)].accumulated = true;
  nodes_[static_cast<size_t>(info.producer)].attrs.accumulate = true;
  mark_output(v);
}

bool Graph::is_output(Value v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

std::vector<Value> Graph::parameters() const {
  std::vector<Value> params;
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].role == ValueRole::parameter) params.push_back(Value{static_cast<int32_t>(i)});
  }
  return params;
}

Value Graph::find(std::string_view name) const {
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].name == name) return Value{static_cast<int32_t>(i)};
  }
  return Value{};
}

std::string Graph::str() const {
  std::string s;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    s += std::to_string(i) + (n.backward ? " B " : " F ") + std::string(op_name(n.kind));
    if (n.attrs.fused != Fused::none) s.append("+").append(fused_name(n.attrs.fused));
    s.append(" ").append(n.name).append(" (");
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      s += (j ? ", " : "") + value(n.inputs[j]).name;
    }
    s += ") -> ";
    for (size_t j = 0; j < n.outputs.size(); ++j) {
      const ValueInfo& v = value(n.outputs[j]);
      s += (j ? ", " : "") + v.name + v.shape.str() + (v.accumulated ? " (+=)" : "");
    }
    s += "\n";
  }
  return s;
}

int in_place_input(const Node& node, size_t output) {
  const auto rule = op_def(node.kind).in_place_input;
  return rule ? rule(node, output) : -1;
}

std::vector<int> reader_counts(const Graph& g) {
  std::vector<int> readers(g.values().size(), 0);
  for (const Node& n : g.nodes()) {
    for (const Value v : n.inputs) ++readers[static_cast<size_t>(v.id)];
  }
  return readers;
}

bool is_plain_product(const Graph& g, const Node& n) {
  return n.kind == OpKind::matmul && n.attrs.fused == Fused::none && !n.attrs.accumulate &&
         !g.value(n.outputs[0]).accumulated;
}

Graph values_of(const Graph& g) {
  Graph out;
  for (const ValueInfo& v : g.values()) {
    ValueInfo copy = v;
    copy.producer = -1;
    out.add_value(std::move(copy));
  }
  for (Value v : g.outputs()) out.mark_output(v);
  return out;
}

}  // namespace spillway::graph
