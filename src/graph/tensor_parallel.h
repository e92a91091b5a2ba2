// Tensor parallelism as a graph pass: from the single-device forward graph
// and how each parameter is split (declared beside the model, e.g.
// model/llama_sharding.h), the graph one rank of a tensor-parallel group
// runs. Each op's rule (graph::OpDef::shard, beside the op) emits its node
// from where its inputs are placed; where a node needs an input placed
// otherwise, the pass inserts the collective that moves it (ops/
// collective_op.h), once per value and placement. Autodiff then derives the
// rank's backward from the rank's forward, collectives included.
//
// Convention: every rank computes the loss alike, and the objective is its
// mean over the group, so a rank's backward starts from 1/ranks (see
// seed_gradient); each rank's gradient of a whole value is then its part of
// the gradient, summed over the group by the collectives' own gradients,
// and a whole parameter's gradient is summed over the group by the caller
// (as data parallelism sums gradients over its ranks).
//
// With sequence parallelism the residual stream (norms, residual adds) is
// split by tokens between the layers' tensor-parallel regions: an all-gather
// enters each region and a reduce-scatter leaves it, where plain tensor
// parallelism keeps it whole and all-reduces the regions' partial sums.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "graph/builder.h"

namespace spillway::graph {

// How a value of a rank's graph stands for the single-device value.
enum class Placement : uint8_t {
  whole,    // every rank holds all of it, alike
  partial,  // the value is the sum of every rank's
  // Split, the value viewed as [rows, columns] (every dimension but the last
  // flattened into rows): by rows (a weight's output features, a table's
  // vocabulary, the tokens), or by columns (a weight's input features, an
  // activation's features or heads). Rank r holds piece r of
  // ceil(extent / ranks); the last pieces are padded with zeros.
  rows,
  columns,
};
std::string_view placement_name(Placement p);

// How a parameter is split: `parts` are the lengths of the tensors a
// stacked parameter holds one after the other along the split dimension
// (model::LlamaGraph::parameter_parts), each split on its own, a rank's
// pieces stacked in the same order; empty: one.
struct ParameterSplit {
  Placement placement = Placement::whole;
  std::vector<int64_t> parts;
};

struct TensorParallelism {
  int rank = 0, ranks = 1;
  int group = 3;  // the rank grid dimension its collectives span (dist::Dim::tp)
  bool sequence_parallel = false;
};

// What an op's shard rule (graph::OpDef::shard) works with.
class Sharder {
 public:
  Sharder(Builder& rank_builder, const Graph& single, const TensorParallelism& tp)
      : b(rank_builder), g(single), tp(tp) {}
  Builder& b;                   // emits the rank's graph
  const Graph& g;               // the single-device graph
  const TensorParallelism tp;

  // Where single-device value v (already emitted) is placed on this rank.
  virtual Placement placement(Value v) const = 0;
  // v in the rank's graph placed as `want`: as it is, or through a
  // collective. Error naming the value where no collective gets there
  // (a whole value is never split: no slice op).
  virtual Value as(Value v, Placement want) = 0;
  // n's outputs are the outputs of the node just emitted, placed `p`.
  virtual void define(const Node& n, Placement p) = 0;
  // The rule of an op without one: n on whole inputs, its outputs whole.
  virtual void whole(const Node& n) = 0;

  // The placement the residual stream takes between regions: split by
  // tokens with sequence parallelism, else whole.
  Placement tokens() const { return tp.sequence_parallel ? Placement::rows : Placement::whole; }
  // The length of this rank's piece of `extent`, and where it starts.
  int64_t piece_of(int64_t extent) const { return (extent + tp.ranks - 1) / tp.ranks; }
  int64_t first_of(int64_t extent) const { return piece_of(extent) * tp.rank; }
  // A count split evenly among the ranks; Error naming `what` where it is not.
  int64_t divided(int64_t count, std::string_view what) const;

 protected:
  ~Sharder() = default;
};

struct RankGraph {
  Graph graph;
  // By single-device value id: the rank graph's value standing for it
  // (invalid where the pass made none) and how it is placed.
  std::vector<Value> value;
  std::vector<Placement> placement;
  Value of(Value single) const { return value.at(static_cast<size_t>(single.id)); }
};

// The rank's graph of `forward` (a forward graph: no backward nodes, no
// fused forms). `split` says how each parameter is split (by its value).
// Inputs and outputs are whole, RankGraph::of naming the whole outputs.
RankGraph shard_graph(const Graph& forward, DType dtype, const std::function<ParameterSplit(const ValueInfo&)>& split,
                      const TensorParallelism& tp);

// The seed of a rank's backward (graph::append_backward's): the loss's
// gradient, 1/ranks (see the convention above).
inline double seed_gradient(const TensorParallelism& tp) { return 1.0 / tp.ranks; }

// The shape of rank `rank`'s piece of a value of `whole` split as `split`.
Shape piece_shape(const Shape& whole, const ParameterSplit& split, int rank, int ranks);
// Rank `rank`'s piece of `whole` (row-major, of shape `shape`), as the rank
// graph's parameter holds it: zeros where padded.
template <typename T>
std::vector<T> piece_of(std::span<const T> whole, const Shape& shape, const ParameterSplit& split, int rank,
                        int ranks);
// The whole tensor of `shape` from every rank's piece, in rank order one
// after the other (an all-gather of the pieces): piece_of, backwards.
template <typename T>
std::vector<T> whole_of(std::span<const T> pieces, const Shape& shape, const ParameterSplit& split, int ranks);

}  // namespace spillway::graph
