// Writes a model as ordinary C++ calls that append nodes to a graph. The
// Builder holds what every op shares: the scope that prefixes node names,
// the graph's inputs and parameters, and emit(). The typed functions that
// build each op's nodes live beside the op (src/ops/<family>_op.h, e.g.
// ops::rmsnorm(b, x, weight, eps)) and check shapes as they go: a mismatch
// throws at build time with the op's name and both shapes, long before any
// memory is touched.
//
// Tensor layouts are the ones the op contracts in src/ops/ define; attention
// and RoPE read heads out of the last dimension, so no reshape is ever needed.
//
// Reductions keep full precision whatever the activations' dtype: RMSNorm's
// rstd, attention's lse, the loss, and every gradient of a parameter are in
// accumulation_dtype (f32, or f64 in an f64 graph), so bf16 training still
// has full-precision gradients.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace spillway::graph {

inline DType accumulation_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// One output of a node being emitted: its value is named after the node,
// with ".<suffix>" when the suffix is not empty.
struct OutputSpec {
  Shape shape;
  DType dtype;
  std::string_view suffix;
};

class Builder {
 public:
  // `dtype` is the floating type of parameters and activations (f32 for
  // training on the CPU, f64 for gradient checks).
  Builder(Graph& graph, DType dtype) : g_(graph), dtype_(dtype) {}

  Graph& graph() { return g_; }
  DType dtype() const { return dtype_; }
  const ValueInfo& info(Value v) const { return g_.value(v); }

  // Names of nodes built while a Scope lives are prefixed with its path.
  class Scope {
   public:
    Scope(Builder& b, std::string_view name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Builder& b_;
    size_t saved_;
  };
  Scope scope(std::string_view name) { return Scope(*this, name); }
  // `name` under the current scope.
  std::string path(std::string_view name) const;
  // "matmul 'layers.0.q_proj'": what a node named `name` here is called in
  // build-time errors.
  std::string label(OpKind kind, std::string_view name) const;

  Value input(std::string_view name, Shape shape, DType dtype);
  Value parameter(std::string_view name, Shape shape);

  // Appends a node of `kind` reading `inputs` and making new values of
  // `outputs`; returns them. The typed functions of src/ops/ check shapes
  // before they call it.
  std::vector<Value> emit(OpKind kind, std::string_view name, std::vector<Value> inputs,
                          const std::vector<OutputSpec>& outputs, NodeAttrs attrs = {});

  // Nodes built from now on are marked as backward nodes.
  void set_backward(bool on) { backward_ = on; }

 private:
  Graph& g_;
  DType dtype_;
  std::string scope_;
  bool backward_ = false;
};

}  // namespace spillway::graph
