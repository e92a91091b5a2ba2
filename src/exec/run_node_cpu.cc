#include "exec/run_node_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status.h"
#include "ops/add.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/fill.h"
#include "ops/matmul.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace spillway::exec {

using graph::Graph;
using graph::Node;
using graph::OpKind;
using graph::Value;

namespace {

template <typename T>
class Operands {
 public:
  Operands(const Graph& g, const Node& n, const std::vector<void*>& data) : g_(g), n_(n), data_(data) {}
  T* in(size_t i) const { return static_cast<T*>(data_[static_cast<size_t>(n_.inputs[i].id)]); }
  const int32_t* ids(size_t i) const { return static_cast<const int32_t*>(data_[static_cast<size_t>(n_.inputs[i].id)]); }
  T* out(size_t i) const { return static_cast<T*>(data_[static_cast<size_t>(n_.outputs[i].id)]); }
  const Shape& in_shape(size_t i) const { return g_.value(n_.inputs[i]).shape; }
  const Shape& out_shape(size_t i) const { return g_.value(n_.outputs[i]).shape; }

 private:
  const Graph& g_;
  const Node& n_;
  const std::vector<void*>& data_;
};

ops::AttentionShape attention_shape(const Graph& g, const Node& n) {
  const graph::AttentionDims d = graph::attention_dims(g, n);
  return ops::AttentionShape{d.batch, d.seq, d.heads, d.kv_heads, d.head_dim};
}

// A packed q|k|v [rows, (heads + 2 kv_heads) * head_dim] and the three
// separate tensors the CPU attention takes: copied apart for the forward
// pass, and the three gradients copied back together.
template <typename T>
struct UnpackedQkv {
  int64_t rows, q_cols, kv_cols;
  std::vector<T> q, k, v;
  explicit UnpackedQkv(const ops::AttentionShape& s)
      : rows(s.batch * s.seq),
        q_cols(s.q_width()),
        kv_cols(s.kv_width()),
        q(static_cast<size_t>(rows * q_cols)),
        k(static_cast<size_t>(rows * kv_cols)),
        v(static_cast<size_t>(rows * kv_cols)) {}
  int64_t width() const { return q_cols + 2 * kv_cols; }
  void split(const T* packed) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = packed + r * width();
      std::copy_n(row, q_cols, q.data() + r * q_cols);
      std::copy_n(row + q_cols, kv_cols, k.data() + r * kv_cols);
      std::copy_n(row + q_cols + kv_cols, kv_cols, v.data() + r * kv_cols);
    }
  }
  void join(T* packed) const {
    for (int64_t r = 0; r < rows; ++r) {
      T* row = packed + r * width();
      std::copy_n(q.data() + r * q_cols, q_cols, row);
      std::copy_n(k.data() + r * kv_cols, kv_cols, row + q_cols);
      std::copy_n(v.data() + r * kv_cols, kv_cols, row + q_cols + kv_cols);
    }
  }
};

template <typename T>
void run_typed(const Graph& g, const Node& n, const std::vector<void*>& data) {
  Operands<T> x(g, n, data);
  const auto& a = n.attrs;
  switch (n.kind) {
    case OpKind::fill:
      break;  // dtype-generic, handled by run_node_cpu
    case OpKind::embedding: {
      const Shape& table = x.in_shape(0);
      ops::embedding_forward(x.ids(1), x.in(0), x.out(0), x.in_shape(1).numel(), table[0], table[1]);
      break;
    }
    case OpKind::embedding_backward: {
      const Shape& dtable = x.out_shape(0);
      // A third input is added to dtable (graph/fuse_embedding_add.h).
      ops::embedding_backward(x.ids(0), x.in(1), x.out(0), x.in_shape(0).numel(), dtable[0], dtable[1],
                              a.accumulate, n.inputs.size() == 3 ? x.in(2) : nullptr);
      break;
    }
    case OpKind::rmsnorm:
      ops::rmsnorm_forward(x.in(0), x.in(1), x.out(0), x.out(1), x.in_shape(0).rows(),
                           x.in_shape(0).last(), a.eps);
      break;
    case OpKind::rmsnorm_backward:
      // A fifth input is added to dx (graph/fuse_rmsnorm_add.h).
      ops::rmsnorm_backward(x.in(0), x.in(1), x.in(2), x.in(3), x.out(0), x.out(1),
                            x.in_shape(1).rows(), x.in_shape(1).last(), a.accumulate,
                            n.inputs.size() == 5 ? x.in(4) : nullptr);
      break;
    case OpKind::matmul: {
      const auto [m, nn, k] = graph::matmul_dims(g, n);
      if (a.swiglu_backward) {
        // The product is dout of a packed SwiGLU, made here in scratch memory;
        // the node writes its backward (graph/fuse_matmul_swiglu.h).
        std::vector<T> dout(static_cast<size_t>(m * nn));
        ops::matmul<T>(a.trans_a, a.trans_b, m, nn, k, T(1), x.in(0), x.in(1), T(0), dout.data());
        ops::swiglu_packed_backward(dout.data(), x.in(2), x.out(0), m, nn);
        break;
      }
      // A third input is added to the product (graph/fuse_matmul_add.h).
      if (n.inputs.size() == 3) std::copy_n(x.in(2), m * nn, x.out(0));
      const bool add_to_out = a.accumulate || n.inputs.size() == 3;
      ops::matmul<T>(a.trans_a, a.trans_b, m, nn, k, T(1), x.in(0), x.in(1), T(add_to_out ? 1 : 0), x.out(0));
      // A second output is the SwiGLU gate of the product (graph/fuse_matmul_swiglu.h).
      if (n.outputs.size() == 2) ops::swiglu_packed_forward(x.out(0), x.out(1), x.out_shape(1).rows(), x.out_shape(1).last());
      // The product is rotated in place by the rope folded in (graph/fuse_matmul_rope.h),
      // as that rope's [batch, seq, heads * head_dim] output.
      if (a.rope) {
        const graph::RopeDims r = graph::rope_dims(g, n);
        ops::rope_forward(x.out(0), x.out(0), r.batch, r.seq, r.heads, r.head_dim, a.inv_freq->data(), a.pos0,
                          r.rotated_heads);
      }
      break;
    }
    case OpKind::rope:
    case OpKind::rope_backward: {
      const graph::RopeDims r = graph::rope_dims(g, n);
      if (n.kind == OpKind::rope) {
        ops::rope_forward(x.in(0), x.out(0), r.batch, r.seq, r.heads, r.head_dim, a.inv_freq->data(), a.pos0,
                          r.rotated_heads);
      } else {
        ops::rope_backward(x.in(0), x.out(0), r.batch, r.seq, r.heads, r.head_dim, a.inv_freq->data(), a.pos0,
                           r.rotated_heads);
      }
      break;
    }
    case OpKind::attention: {
      const ops::AttentionShape shape = attention_shape(g, n);
      if (!a.packed) {
        ops::attention_forward(x.in(0), x.in(1), x.in(2), x.out(0), x.out(1), shape, a.scale);
        break;
      }
      UnpackedQkv<T> qkv(shape);
      qkv.split(x.in(0));
      ops::attention_forward(qkv.q.data(), qkv.k.data(), qkv.v.data(), x.out(0), x.out(1), shape, a.scale);
      break;
    }
    case OpKind::attention_backward: {
      const ops::AttentionShape shape = attention_shape(g, n);
      if (!a.packed) {
        ops::attention_backward(x.in(0), x.in(1), x.in(2), x.in(3), x.in(4), x.in(5), x.out(0), x.out(1), x.out(2),
                                shape, a.scale);
        break;
      }
      UnpackedQkv<T> qkv(shape), grads(shape);
      qkv.split(x.in(1));
      ops::attention_backward(x.in(0), qkv.q.data(), qkv.k.data(), qkv.v.data(), x.in(2), x.in(3), grads.q.data(),
                              grads.k.data(), grads.v.data(), shape, a.scale);
      grads.join(x.out(0));
      break;
    }
    case OpKind::swiglu:
      if (a.packed) {
        ops::swiglu_packed_forward(x.in(0), x.out(0), x.out_shape(0).rows(), x.out_shape(0).last());
      } else {
        ops::swiglu_forward(x.in(0), x.in(1), x.out(0), x.out_shape(0).numel());
      }
      break;
    case OpKind::swiglu_backward:
      if (a.packed) {
        ops::swiglu_packed_backward(x.in(0), x.in(1), x.out(0), x.in_shape(0).rows(), x.in_shape(0).last());
      } else {
        ops::swiglu_backward(x.in(0), x.in(1), x.in(2), x.out(0), x.out(1), x.out_shape(0).numel());
      }
      break;
    case OpKind::add:
      ops::add(x.in(0), x.in(1), x.out(0), x.out_shape(0).numel(), a.accumulate);
      break;
    case OpKind::cross_entropy:
      // A third output, dlogits, is the fused backward (graph/fuse_loss_gradient.h).
      if (n.outputs.size() == 3) {
        ops::cross_entropy_forward_backward(x.in(0), x.ids(1), a.dloss, x.out(1), x.out(0), x.out(2),
                                            x.in_shape(0).rows(), x.in_shape(0).last());
        break;
      }
      ops::cross_entropy_forward(x.in(0), x.ids(1), x.out(1), x.out(0), x.in_shape(0).rows(),
                                 x.in_shape(0).last());
      break;
    case OpKind::cross_entropy_backward:
      ops::cross_entropy_backward(x.in(0), x.ids(1), x.in(2), x.in(3), x.out(0), x.in_shape(0).rows(),
                                  x.in_shape(0).last());
      break;
    case OpKind::cast:
      break;  // dtype-generic, handled by run_node_cpu
  }
}

}  // namespace

void run_node_cpu(const Graph& g, const Node& n, const std::vector<void*>& data) {
  if (n.kind == OpKind::fill) {
    if (n.attrs.accumulate) return;  // adding zeros (graph.h allows no other value)
    const auto& out = g.value(n.outputs[0]);
    ops::fill(data[static_cast<size_t>(n.outputs[0].id)], out.dtype, out.shape.numel(), n.attrs.fill_value);
    return;
  }
  if (n.kind == OpKind::cast) {
    const auto& in = g.value(n.inputs[0]);
    const auto& out = g.value(n.outputs[0]);
    ops::cast(data[static_cast<size_t>(n.inputs[0].id)], in.dtype, data[static_cast<size_t>(n.outputs[0].id)],
              out.dtype, in.shape.numel());
    return;
  }
  DType t = g.value(n.outputs[0]).dtype;
  switch (t) {
    case DType::f32: run_typed<float>(g, n, data); break;
    case DType::f64: run_typed<double>(g, n, data); break;
    default:
      throw Error(std::string(graph::op_name(n.kind)) + " '" + n.name + "'",
                  "the CPU backend computes in f32 or f64, not " + std::string(dtype_name(t)));
  }
}

}  // namespace spillway::exec
