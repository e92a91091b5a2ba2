#include "graph/recompute.h"

#include <algorithm>
#include <string>

#include "base/status.h"
#include "graph/op_def.h"

namespace spillway::graph {

namespace {

constexpr std::string_view kSuffix = " (recompute)";

// The scope of the transformer layer a node was built in ("model.layers.3"
// for "model.layers.3.self_attn.q_proj"): the path up to a "layers.<N>"
// segment. Empty for nodes outside any layer.
std::string_view layer_scope(std::string_view name) {
  constexpr std::string_view kLayers = "layers.";
  for (size_t at = name.find(kLayers); at != std::string_view::npos; at = name.find(kLayers, at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;  // "sublayers." is not a layer scope
    size_t end = at + kLayers.size();
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end == at + kLayers.size()) continue;  // no index
    if (end < name.size() && name[end] != '.') continue;
    return name.substr(0, end);
  }
  return {};
}

bool inside(std::string_view name, std::string_view scope) {
  return name.size() > scope.size() && name.starts_with(scope) && name[scope.size()] == '.';
}

// Kept by `layers`: made outside any layer, or read by a forward node outside
// the layer that made it (the residual stream leaving the layer, which is
// the next layer's input).
bool crosses_layer_boundary(const Graph& g, Value v) {
  const Node& producer = g.nodes()[static_cast<size_t>(g.value(v).producer)];
  std::string_view scope = layer_scope(producer.name);
  if (scope.empty()) return true;
  for (const Node& n : g.nodes()) {
    if (n.backward) continue;
    for (Value in : n.inputs) {
      if (in == v && !inside(n.name, scope)) return true;
    }
  }
  return false;
}

class Transform {
 public:
  Transform(const Graph& g, const KeepRule& keep) : g_(g), keep_(keep), fate_(g.values().size()), clone_(g.values().size()) {}

  Recomputed run() {
    out_.graph = values_of(g_);
    for (const Node& node : g_.nodes()) {
      Node copy = node;
      if (node.backward) {
        for (Value& in : copy.inputs) in = materialize(in);
      }
      out_.graph.add_node(std::move(copy));
    }
    for (size_t v = 0; v < fate_.size(); ++v) {
      if (fate_[v] != Fate::dropped) continue;
      out_.stats.values_dropped += 1;
      out_.stats.bytes_dropped += g_.values()[v].bytes();
    }
    return std::move(out_);
  }

 private:
  enum class Fate : uint8_t { undecided, kept, dropped };

  bool dropped(Value v) {
    Fate& fate = fate_[static_cast<size_t>(v.id)];
    if (fate == Fate::undecided) {
      const ValueInfo& info = g_.value(v);
      const bool forward = info.role == ValueRole::computed && !g_.nodes()[static_cast<size_t>(info.producer)].backward;
      fate = !forward || g_.is_output(v) || keep_(g_, v) ? Fate::kept : Fate::dropped;
    }
    return fate == Fate::dropped;
  }

  // The value a backward node should read in place of `v`: v itself when it
  // is kept, else its clone, emitting the clones it needs first. Recursion
  // ends at kept values, and its depth is at most the forward graph's.
  Value materialize(Value v) {
    if (!dropped(v)) return v;
    Value& clone = clone_[static_cast<size_t>(v.id)];
    if (clone.valid()) return clone;

    Node node = g_.nodes()[static_cast<size_t>(g_.value(v).producer)];
    for (Value& in : node.inputs) in = materialize(in);
    for (Value& o : node.outputs) {
      ValueInfo info = g_.value(o);
      info.name += kSuffix;
      info.producer = -1;
      Value made = out_.graph.add_value(std::move(info));
      // A sibling output kept by the rule is still read as the original.
      clone_[static_cast<size_t>(o.id)] = made;
      o = made;
    }
    node.name += kSuffix;
    node.backward = true;
    node.recompute = true;
    out_.graph.add_node(std::move(node));
    out_.stats.nodes_cloned += 1;
    return clone;
  }

  const Graph& g_;
  const KeepRule& keep_;
  std::vector<Fate> fate_;    // by original value id
  std::vector<Value> clone_;  // by original value id: its recomputed value
  Recomputed out_;
};

}  // namespace

std::string_view recompute_policy_name(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::none: return "none";
    case RecomputePolicy::layers: return "layers";
    case RecomputePolicy::selective: return "selective";
  }
  return "?";
}

RecomputePolicy parse_recompute_policy(std::string_view name) {
  for (auto p : {RecomputePolicy::none, RecomputePolicy::layers, RecomputePolicy::selective}) {
    if (name == recompute_policy_name(p)) return p;
  }
  throw Error("--recompute", "unknown policy '" + std::string(name) + "' (choose none, layers or selective)");
}

KeepRule keep_rule(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::none:
      return [](const Graph&, Value) { return true; };
    case RecomputePolicy::layers:
      return crosses_layer_boundary;
    case RecomputePolicy::selective:
      return [](const Graph& g, Value v) {
        const Node& producer = g.nodes()[static_cast<size_t>(g.value(v).producer)];
        return !op_def(producer.kind).cheap_to_recompute || crosses_layer_boundary(g, v);
      };
  }
  throw Error("recompute", "unknown policy");
}

std::string recompute_kind(const Graph& g, Value v) {
  const ValueInfo& info = g.value(v);
  if (info.producer < 0 || crosses_layer_boundary(g, v)) return {};
  const std::string& node = g.nodes()[static_cast<size_t>(info.producer)].name;
  const std::string_view scope = layer_scope(node);
  return std::string(std::string_view(node).substr(scope.size() + 1));
}

KeepRule keep_rule(std::vector<std::string> dropped_kinds) {
  std::sort(dropped_kinds.begin(), dropped_kinds.end());
  return [dropped = std::move(dropped_kinds)](const Graph& g, Value v) {
    const std::string kind = recompute_kind(g, v);
    return kind.empty() || !std::binary_search(dropped.begin(), dropped.end(), kind);
  };
}

Recomputed recompute(const Graph& graph, const KeepRule& keep) { return Transform(graph, keep).run(); }

Recomputed recompute(const Graph& graph, RecomputePolicy policy) { return recompute(graph, keep_rule(policy)); }

}  // namespace spillway::graph
