// The memory of a node's inputs and outputs as an op's kernel hooks
// (graph::OpDef::cpu, ::cuda) read it, typed at the call: x.in<float>(0).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "graph/graph.h"

namespace spillway::ops {

class Operands {
 public:
  // data[v] holds the memory of value id v.
  Operands(const graph::Graph& g, const graph::Node& n, const std::vector<void*>& data)
      : g_(g), n_(n), data_(data) {}

  template <typename T = void>
  T* in(size_t i) const {
    return static_cast<T*>(data_[static_cast<size_t>(n_.inputs[i].id)]);
  }
  template <typename T = void>
  T* out(size_t i) const {
    return static_cast<T*>(data_[static_cast<size_t>(n_.outputs[i].id)]);
  }
  const graph::ValueInfo& in_value(size_t i) const { return g_.value(n_.inputs[i]); }
  const graph::ValueInfo& out_value(size_t i) const { return g_.value(n_.outputs[i]); }
  const Shape& in_shape(size_t i) const { return in_value(i).shape; }
  const Shape& out_shape(size_t i) const { return out_value(i).shape; }

  const graph::Graph& graph() const { return g_; }
  const graph::Node& node() const { return n_; }
  const graph::NodeAttrs& attrs() const { return n_.attrs; }

 private:
  const graph::Graph& g_;
  const graph::Node& n_;
  const std::vector<void*>& data_;
};

// The CPU hook of an op whose kernels compute in the dtype of the node's
// first output: F32 or F64, which the CPU backend's graphs use.
template <void (*F32)(const Operands&), void (*F64)(const Operands&)>
void on_cpu(const graph::Graph& g, const graph::Node& n, const std::vector<void*>& data) {
  const Operands x(g, n, data);
  const DType t = x.out_value(0).dtype;
  if (t == DType::f32) return F32(x);
  if (t == DType::f64) return F64(x);
  throw Error(graph::node_label(n), "the CPU backend computes in f32 or f64, not " + std::string(dtype_name(t)));
}

}  // namespace spillway::ops
