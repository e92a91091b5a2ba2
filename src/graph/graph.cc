#include "graph/graph.h"

#include <algorithm>

#include "base/status.h"

namespace spillway::graph {

std::string_view op_name(OpKind kind) {
  static constexpr std::string_view kNames[] = {
      "fill",      "embedding",          "embedding_backward", "rmsnorm",
      "rmsnorm_backward", "matmul",      "rope",               "rope_backward",
      "attention", "attention_backward", "swiglu",             "swiglu_backward",
      "add",       "cross_entropy",      "cross_entropy_backward", "cast",
  };
  return kNames[static_cast<int>(kind)];
}

Value Graph::add_value(ValueInfo info) {
  values_.push_back(std::move(info));
  return Value{static_cast<int32_t>(values_.size() - 1)};
}

int32_t Graph::add_node(Node node) {
  auto index = static_cast<int32_t>(nodes_.size());
  check_reads(node.name, node.inputs);
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

// The output of a node of this kind that can add into existing contents, or
// -1 when none can.
int accumulating_output(const Node& n) {
  switch (n.kind) {
    case OpKind::matmul:
      return n.attrs.rope ? -1 : 0;  // a folded rope (graph/fuse_matmul_rope.h) would rotate the sum
    case OpKind::embedding_backward:
    case OpKind::add:
      return 0;
    case OpKind::fill:
      return n.attrs.fill_value == 0 ? 0 : -1;  // += 0 is nothing to do
    case OpKind::rmsnorm_backward:
      return 1;  // dweight
    default:
      return -1;
  }
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
  SPW_CHECK(can_accumulate(v), info.name,
            "cannot be accumulated into caller memory: only an output of matmul, embedding_backward, add, "
            "fill (0) or rmsnorm_backward's dweight that no node reads can");
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
    s += std::to_string(i) + (n.backward ? " B " : " F ") + std::string(op_name(n.kind)) + " " + n.name + " (";
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
  switch (node.kind) {
    case OpKind::rope:
    case OpKind::rope_backward:
      return output == 0 ? 0 : -1;
    case OpKind::cross_entropy:
      return node.outputs.size() == 3 && output == 2 ? 0 : -1;  // dlogits over logits
    default:
      return -1;
  }
}

AttentionDims attention_dims(const Graph& g, const Node& n) {
  const Shape& q = g.value(n.inputs[n.kind == OpKind::attention ? 0 : 1]).shape;
  const int64_t heads_in_row = n.attrs.heads + (n.attrs.packed ? 2 * n.attrs.kv_heads : 0);
  return AttentionDims{q[0], q[1], n.attrs.heads, n.attrs.kv_heads, q.last() / heads_in_row};
}

MatmulDims matmul_dims(const Graph& g, const Node& n) {
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  return MatmulDims{n.attrs.trans_a ? a.last() : a.rows(), n.attrs.trans_b ? b.rows() : b.last(),
                    n.attrs.trans_a ? a.rows() : a.last()};
}

RopeDims rope_dims(const Graph& g, const Node& n) {
  const Shape& s = g.value(n.outputs[0]).shape;  // the rotated rows: a rope's output has its input's shape
  const int64_t heads = n.attrs.heads;
  return RopeDims{s[0], s[1], heads, s.last() / heads, n.attrs.rotated_heads > 0 ? n.attrs.rotated_heads : heads};
}

std::vector<int> reader_counts(const Graph& g) {
  std::vector<int> readers(g.values().size(), 0);
  for (const Node& n : g.nodes()) {
    for (const Value v : n.inputs) ++readers[static_cast<size_t>(v.id)];
  }
  return readers;
}

bool is_plain_product(const Graph& g, const Node& n) {
  return n.kind == OpKind::matmul && n.inputs.size() == 2 && n.outputs.size() == 1 && !n.attrs.accumulate &&
         !n.attrs.swiglu_backward && !n.attrs.rope && !g.value(n.outputs[0]).accumulated;
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
