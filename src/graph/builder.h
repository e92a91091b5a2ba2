// Writes a model as ordinary C++ calls that append nodes to a graph, checking
// shapes as it goes: a mismatch throws at build time with the op's name and
// both shapes, long before any memory is touched.
//
// Tensor layouts are the ones the op contracts in src/ops/ define; attention
// and RoPE read heads out of the last dimension, so no reshape is ever needed.
//
// Reductions keep full precision whatever the activations' dtype: RMSNorm's
// rstd, attention's lse, the loss, and every gradient of a parameter are in
// accumulation_dtype (f32, or f64 in an f64 graph), so bf16 training still
// has full-precision gradients.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"

namespace spillway::graph {

inline DType accumulation_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

class Builder {
 public:
  // `dtype` is the floating type of parameters and activations (f32 for
  // training on the CPU, f64 for gradient checks).
  Builder(Graph& graph, DType dtype) : g_(graph), dtype_(dtype) {}

  Graph& graph() { return g_; }
  DType dtype() const { return dtype_; }

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

  Value input(std::string_view name, Shape shape, DType dtype);
  Value parameter(std::string_view name, Shape shape);
  Value fill(std::string_view name, Shape shape, double value, DType dtype);

  // --- forward ops -------------------------------------------------------
  Value embedding(Value table, Value ids, std::string_view name = "embedding");
  Value rmsnorm(Value x, Value weight, double eps, std::string_view name = "rmsnorm");
  // x [..., in] times weight [out, in] transposed: a linear layer, HF layout.
  Value linear(Value x, Value weight, std::string_view name = "linear");
  // a and b are read as 2-D [rows, last]. The result keeps a's leading
  // dimensions when a is not transposed, else is [m, n]; `out_shape`
  // overrides that with any shape of m * n elements.
  Value matmul(Value a, Value b, bool trans_a, bool trans_b, std::string_view name = "matmul",
               const Shape* out_shape = nullptr, std::optional<DType> out_dtype = std::nullopt);
  // `rotated_heads` (0: all) rotates only the leading heads of x's `heads`.
  Value rope(Value x, int64_t heads, std::shared_ptr<const std::vector<float>> inv_freq,
             int64_t pos0 = 0, std::string_view name = "rope", int64_t rotated_heads = 0);
  Value attention(Value q, Value k, Value v, int64_t q_heads, int64_t kv_heads, double scale,
                  std::string_view name = "attention");
  // Attention over one packed qkv [batch, seq, (q_heads + 2 kv_heads) * head_dim]:
  // q, k and v are its column blocks, in that order.
  Value attention_packed(Value qkv, int64_t q_heads, int64_t kv_heads, double scale,
                         std::string_view name = "attention");
  Value swiglu(Value gate, Value up, std::string_view name = "swiglu");
  // SwiGLU over one packed gate_up [..., 2 * ffn], each row's gate then its up.
  Value swiglu_packed(Value gate_up, std::string_view name = "swiglu");
  Value add(Value a, Value b, std::string_view name = "add");
  // Mean cross-entropy over rows whose target is >= 0: a one-element value.
  Value cross_entropy(Value logits, Value targets, std::string_view name = "cross_entropy");
  Value cast(Value x, DType to, std::string_view name = "cast");

  // --- backward ops, emitted by autodiff ---------------------------------
  Value embedding_backward(Value ids, Value dout, int64_t vocab, std::string_view name);
  std::vector<Value> rmsnorm_backward(Value dy, Value x, Value weight, Value rstd,
                                      std::string_view name);  // {dx, dweight}
  Value rope_backward(Value dout, const NodeAttrs& forward_attrs, std::string_view name);
  std::vector<Value> attention_backward(Value dout, Value q, Value k, Value v, Value out,
                                        Value lse, const NodeAttrs& forward_attrs,
                                        std::string_view name);  // {dq, dk, dv}
  Value attention_packed_backward(Value dout, Value qkv, Value out, Value lse,
                                  const NodeAttrs& forward_attrs, std::string_view name);  // dqkv
  std::vector<Value> swiglu_backward(Value dout, Value gate, Value up,
                                     std::string_view name);  // {dgate, dup}
  Value swiglu_packed_backward(Value dout, Value gate_up, std::string_view name);  // dgate_up
  Value cross_entropy_backward(Value logits, Value targets, Value lse, Value dloss,
                               std::string_view name);

  // Nodes built from now on are marked as backward nodes.
  void set_backward(bool on) { backward_ = on; }

 private:
  std::string path(std::string_view name) const;
  Value new_value(std::string name, Shape shape, DType dtype);
  std::vector<Value> emit(OpKind kind, std::string_view name, std::vector<Value> inputs,
                          std::vector<std::pair<Shape, DType>> outputs,
                          std::vector<std::string_view> output_suffixes, NodeAttrs attrs = {});
  const ValueInfo& info(Value v) const { return g_.value(v); }

  Graph& g_;
  DType dtype_;
  std::string scope_;
  bool backward_ = false;
};

}  // namespace spillway::graph
