// Activation recomputation as a graph transform: forward values the backward
// pass reads are either kept (alive from the forward pass to their last
// backward use) or dropped, in which case the forward nodes that make them
// are emitted again, as clones, right before the first backward node that
// needs them. A dropped original then dies at its last forward use, and its
// clone dies at its last backward use, so the step trades FLOPs for memory.
//
// Clones run the same kernels on the same inputs, so a transformed step gives
// bit-identical loss and gradients.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace spillway::graph {

enum class RecomputePolicy : uint8_t {
  none,       // keep every forward value the backward reads
  // Full activation checkpointing: keep only what crosses a transformer layer's
  // boundary (the residual stream entering "model.layers.N", the last layer's
  // output) and values made outside the layers (embedding, final norm,
  // logits, loss statistics); recompute everything inside a layer.
  layers,
  // Keep what `layers` keeps plus the outputs of ops that are not cheap to
  // recompute (graph::OpDef::cheap_to_recompute: matmuls, attention);
  // recompute the outputs of cheap ops (rmsnorm, rope, swiglu, cast, add)
  // inside a layer. The residual stream between layers stays kept: dropping
  // it would chain every layer's recomputation back to the embedding.
  selective,
};
std::string_view recompute_policy_name(RecomputePolicy policy);
RecomputePolicy parse_recompute_policy(std::string_view name);  // throws Error naming the choices

// Whether a forward value `v` of `graph` is kept for the backward pass. It is
// asked about values the backward reads and about inputs of the nodes being
// recomputed; a value it drops is recomputed from its producer's inputs,
// recursively, until kept values, inputs and parameters are reached. Graph
// outputs are always kept and never asked about.
using KeepRule = std::function<bool(const Graph& graph, Value v)>;
KeepRule keep_rule(RecomputePolicy policy);

// The kind of a forward value that `layers` drops: the name of the node
// that makes it with its transformer layer's scope taken off ("mlp.swiglu"
// for "model.layers.3.mlp.swiglu"), the same in every layer and for every
// output of the node (remaking one remakes them all, so they are dropped
// together: a norm's output and its rstd, the attention's and its
// log-sum-exp). Empty for values every rule keeps (made outside a layer, or
// crossing a layer's boundary).
std::string recompute_kind(const Graph& graph, Value v);
// Keeps every value but those of the given kinds (recompute_kind): the
// recomputation the planner chooses value kind by value kind.
KeepRule keep_rule(std::vector<std::string> dropped_kinds);

// What a transform did, for `spillway plan`.
struct RecomputeStats {
  int values_dropped = 0;      // forward values recomputed instead of kept (original values)
  uint64_t bytes_dropped = 0;  // their bytes
  int nodes_cloned = 0;        // forward nodes emitted again in the backward pass
};

struct Recomputed {
  Graph graph;
  RecomputeStats stats;
};

// Returns a copy of `graph` (forward and backward, as autodiff leaves it) in
// which every value keeps its id, name, shape and role, and the graph outputs
// are the same, so handles into `graph` (tokens, parameters, loss, gradients)
// work on the result. Forward nodes stay in place and in order; the clones of
// recomputed nodes (named "<name> (recompute)", marked `backward` and
// `recompute`, making new values named "<value> (recompute)") are inserted
// just before the first backward node reading what they make, and later
// backward readers share them.
Recomputed recompute(const Graph& graph, const KeepRule& keep);
Recomputed recompute(const Graph& graph, RecomputePolicy policy);

}  // namespace spillway::graph
