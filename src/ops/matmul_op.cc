// matmul's definition: the product, and the work the fusion passes fold into
// it (graph::Fused), which the own Hopper GEMM does in its epilogue where
// the shape allows and the separate kernels do elsewhere.
#include "ops/matmul_op.h"

#include <algorithm>
#include <vector>

#include "ops/matmul.h"
#include "ops/op_definition.h"
#include "ops/rope.h"
#include "ops/rope_op.h"
#include "ops/swiglu.h"
#ifdef SPILLWAY_HAS_CUDA
#include "ops/gemm_hopper.h"
#endif

namespace spillway::ops {

namespace {

// For Y = op(A) op(B); each gradient is one more matmul (see ops/matmul.h).
// A parameter's gradient comes out in the accumulation dtype.
void matmul_vjp(graph::Vjp& vjp, const Node& n, graph::Value dy) {
  graph::Builder& b = vjp.b;
  const std::string name = graph::backward_name(n);
  const graph::Value a = n.inputs[0], bv = n.inputs[1];
  const bool ta = n.attrs.trans_a, tb = n.attrs.trans_b;
  const Shape a_shape = b.info(a).shape, b_shape = b.info(bv).shape;
  auto grad_dtype = [&](graph::Value v) -> std::optional<DType> {
    if (b.info(v).role != graph::ValueRole::parameter) return std::nullopt;
    return graph::accumulation_dtype(b.info(v).dtype);
  };
  if (vjp.needs(a)) {
    const std::string da_name = name + ".da";
    const graph::Value da = !ta ? matmul(b, dy, bv, false, !tb, da_name, &a_shape, grad_dtype(a))
                                : (!tb ? matmul(b, bv, dy, false, true, da_name, &a_shape, grad_dtype(a))
                                       : matmul(b, bv, dy, true, true, da_name, &a_shape, grad_dtype(a)));
    vjp.add(a, da);
  }
  if (vjp.needs(bv)) {
    const std::string db_name = name + ".db";
    const graph::Value db = !tb ? (!ta ? matmul(b, a, dy, true, false, db_name, &b_shape, grad_dtype(bv))
                                       : matmul(b, a, dy, false, false, db_name, &b_shape, grad_dtype(bv)))
                                : (!ta ? matmul(b, dy, a, true, false, db_name, &b_shape, grad_dtype(bv))
                                       : matmul(b, dy, a, true, true, db_name, &b_shape, grad_dtype(bv)));
    vjp.add(bv, db);
  }
}

// From the operands: a product with SwiGLU's backward folded in writes
// d(gate|up), not the product.
// A linear layer split as Megatron splits it: a weight split by output
// features (rows) gives every token's features of this rank (columns); one
// split by input features (columns) reads the activation split alike and
// gives a part of the sum. A whole weight over tokens split by rows keeps
// them so (the product is per token).
void matmul_shard(Sharder& s, const Node& n) {
  const graph::Value x = n.inputs[0], w = n.inputs[1];
  const bool linear = !n.attrs.trans_a && n.attrs.trans_b;
  const Placement pw = s.placement(w), px = s.placement(x);
  const DType out_dtype = s.g.value(n.outputs[0]).dtype;
  auto emit = [&](Placement in, Placement weight, Placement out) {
    matmul(s.b, s.as(x, in), s.as(w, weight), false, true, n.name, nullptr, out_dtype);
    s.define(n, out);
  };
  if (!linear || (pw == Placement::whole && px != Placement::rows)) return s.whole(n);
  if (pw == Placement::whole) return emit(Placement::rows, Placement::whole, Placement::rows);
  if (pw == Placement::rows) return emit(Placement::whole, Placement::rows, Placement::columns);
  SPW_CHECK(pw == Placement::columns && px == Placement::columns, node_label(n), "a weight ",
            graph::placement_name(pw), " over an input ", graph::placement_name(px),
            ": a weight split by input features reads an activation split by features");
  emit(Placement::columns, Placement::columns, Placement::partial);
}

graph::OpCost matmul_cost(const Graph& g, const Node& n) {
  return {matmul_dims(g, n).flops(), graph::operand_bytes(g, n), graph::RateClass::gemm};
}

// beta = 1 into the product; a folded rope would rotate the sum.
int product_accumulates(const Node& n) { return n.attrs.fused == Fused::rope ? -1 : 0; }

template <typename T>
void cpu_matmul(const Operands& x) {
  const graph::NodeAttrs& a = x.attrs();
  const auto [m, nn, k] = matmul_dims(x.graph(), x.node());
  if (a.fused == Fused::swiglu_backward) {
    // The product is dout of a packed SwiGLU, made here in scratch memory;
    // the node writes its backward.
    std::vector<T> dout(static_cast<size_t>(m * nn));
    matmul<T>(a.trans_a, a.trans_b, m, nn, k, T(1), x.in<T>(0), x.in<T>(1), T(0), dout.data());
    swiglu_packed_backward(dout.data(), x.in<T>(2), x.out<T>(0), m, nn);
    return;
  }
  if (a.fused == Fused::addend) std::copy_n(x.in<T>(2), m * nn, x.out<T>(0));
  const bool add_to_out = a.accumulate || a.fused == Fused::addend;
  matmul<T>(a.trans_a, a.trans_b, m, nn, k, T(1), x.in<T>(0), x.in<T>(1), T(add_to_out ? 1 : 0), x.out<T>(0));
  if (a.fused == Fused::swiglu_gate) {
    swiglu_packed_forward(x.out<T>(0), x.out<T>(1), x.out_shape(1).rows(), x.out_shape(1).last());
  }
  if (a.fused == Fused::rope) {
    // Rotated in place, as the rope folded in did: its [batch, seq, heads *
    // head_dim] output is the product.
    const RopeDims r = rope_dims(x.graph(), x.node());
    rope_forward(x.out<T>(0), x.out<T>(0), r.batch, r.seq, r.heads, r.head_dim, a.inv_freq->data(), a.pos0,
                 r.rotated_heads);
  }
}

#ifdef SPILLWAY_HAS_CUDA
// A fused matmul runs as one Hopper kernel where the shape is whole tiles
// (the kernels take bf16 operands and output only, A not transposed), else
// as cuBLASLt's product then the separate kernel.
uint64_t prepare_matmul(const Graph& g, const Node& n, CudaOpContext& cuda) {
  const graph::NodeAttrs& a = n.attrs;
  const auto [m, cols, k] = matmul_dims(g, n);
  const DType out_dtype = g.value(n.outputs[0]).dtype;
  const bool hopper = cuda.hopper && g.value(n.inputs[0]).dtype == DType::bf16 &&
                      g.value(n.inputs[1]).dtype == DType::bf16 && out_dtype == DType::bf16 && !a.trans_a;
  switch (a.fused) {
    case Fused::swiglu_backward: {
      // Off the Hopper kernel, dout is made in the workspace first.
      const bool own = hopper && !a.trans_b && hopper_gemm_swiglu_backward_fits(m, cols, k);
      cuda.preferred[&n] = own;
      return own ? 0 : static_cast<uint64_t>(m * cols) * dtype_size(out_dtype);
    }
    case Fused::swiglu_gate:
      cuda.preferred[&n] = hopper && a.trans_b && hopper_gemm_swiglu_fits(m, cols / 2, k);
      return 0;
    case Fused::rope: {
      const RopeDims r = rope_dims(g, n);
      const bool own = hopper && a.trans_b && hopper_gemm_rope_fits(m, cols, k, r.seq, r.head_dim, r.rotated_cols());
      cuda.preferred[&n] = own;
      // Made now, not in the step (which may be captured as a CUDA graph).
      if (own) {
        const auto& inv_freq = *a.inv_freq;
        cuda.rope_table_on_device(inv_freq, cuda.inv_freq_on_device(inv_freq), r.seq, r.head_dim, a.pos0);
      }
      return 0;
    }
    default:
      return 0;
  }
}

void cuda_matmul(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const graph::NodeAttrs& a = n.attrs;
  const auto [m, nn, k] = matmul_dims(g, n);
  const DType a_type = x.in_value(0).dtype, b_type = x.in_value(1).dtype, c_type = x.out_value(0).dtype;
  // cuBLASLt's product into `to`; beta = 1 adds into the caller's buffer (an accumulated gradient).
  auto product = [&](void* to, float beta) {
    cuda.matmul->run(a.trans_a, a.trans_b, m, nn, k, 1.0f, x.in(0), a_type, x.in(1), b_type, beta, to, c_type,
                     cuda.stream);
  };
  switch (a.fused) {
    case Fused::swiglu_backward:
      if (cuda.preferred.at(&n)) {
        hopper_gemm_swiglu_backward(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.out<bf16>(0), m, nn, k,
                                    cuda.stream);
      } else {
        product(cuda.workspace, 0.0f);
        swiglu_packed_backward_cuda(static_cast<const bf16*>(cuda.workspace), x.in<bf16>(2), x.out<bf16>(0), m, nn,
                                    cuda.stream);
      }
      return;
    case Fused::addend:
      cuda.matmul->run_with_addend(a.trans_a, a.trans_b, m, nn, k, x.in(0), a_type, x.in(1), b_type, x.in(2), x.out(0),
                                   c_type, cuda.stream);
      return;
    case Fused::rope: {
      const RopeDims r = rope_dims(g, n);
      const float* freq = cuda.inv_freq_on_device(*a.inv_freq);
      if (cuda.preferred.at(&n)) {
        hopper_gemm_rope(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), m, nn, k,
                         cuda.rope_table_on_device(*a.inv_freq, freq, r.seq, r.head_dim, a.pos0), r.seq, r.head_dim,
                         r.rotated_cols(), cuda.stream);
      } else {
        product(x.out(0), 0.0f);
        rope_forward_cuda(x.out<bf16>(0), x.out<bf16>(0), r.batch, r.seq, r.heads, r.head_dim, freq, a.pos0,
                          cuda.stream, r.rotated_heads);
      }
      return;
    }
    case Fused::swiglu_gate: {
      const int64_t ffn = nn / 2;
      if (cuda.preferred.at(&n)) {
        hopper_gemm_swiglu(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), x.out<bf16>(1), m, ffn, k, cuda.stream);
      } else {
        product(x.out(0), 0.0f);
        swiglu_packed_forward_cuda(x.out<bf16>(0), x.out<bf16>(1), m, ffn, cuda.stream);
      }
      return;
    }
    default: {
      // A tied embedding's product goes straight to its gradient
      // (CudaOpContext::tied_in_place).
      const Node* scatter = cuda.tied_in_place(n);
      product(scatter ? data[static_cast<size_t>(scatter->outputs[0].id)] : x.out(0), cuda.accumulate(n) ? 1.0f : 0.0f);
    }
  }
}
#endif

}  // namespace

graph::Value linear(graph::Builder& b, graph::Value x, graph::Value weight, std::string_view name) {
  return matmul(b, x, weight, false, true, name);
}

graph::Value matmul(graph::Builder& b, graph::Value a, graph::Value c, bool trans_a, bool trans_b,
                    std::string_view name, const Shape* out_shape, std::optional<DType> out_dtype) {
  const graph::ValueInfo& ai = b.info(a);
  const graph::ValueInfo& ci = b.info(c);
  const std::string label = b.label(OpKind::matmul, name);
  SPW_CHECK(ai.dtype == ci.dtype, label, "dtypes differ: a ", dtype_name(ai.dtype), ", b ", dtype_name(ci.dtype));
  const int64_t m = trans_a ? ai.shape.last() : ai.shape.rows();
  const int64_t k_a = trans_a ? ai.shape.rows() : ai.shape.last();
  const int64_t k_b = trans_b ? ci.shape.last() : ci.shape.rows();
  const int64_t n = trans_b ? ci.shape.rows() : ci.shape.last();
  SPW_CHECK(k_a == k_b, label, "inner dimensions differ: a ", ai.shape.str(), trans_a ? " (transposed)" : "",
            " gives ", k_a, ", b ", ci.shape.str(), trans_b ? " (transposed)" : "", " gives ", k_b);
  Shape out = trans_a ? Shape{m, n} : ai.shape.with_last(n);
  if (out_shape) {
    SPW_CHECK(out_shape->numel() == m * n, label, "requested output ", out_shape->str(), " does not hold [", m, ", ",
              n, "]");
    out = *out_shape;
  }
  graph::NodeAttrs attrs;
  attrs.trans_a = trans_a;
  attrs.trans_b = trans_b;
  return b.emit(OpKind::matmul, name, {a, c}, {{out, out_dtype.value_or(ai.dtype), ""}}, attrs)[0];
}

MatmulDims matmul_dims(const Graph& g, const Node& n) {
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  return MatmulDims{n.attrs.trans_a ? a.last() : a.rows(), n.attrs.trans_b ? b.rows() : b.last(),
                    n.attrs.trans_a ? a.rows() : a.last()};
}

#ifdef SPILLWAY_HAS_CUDA
std::string gemm_summary(const CudaOpContext& cuda) {
  auto count = [&](Fused form, const std::string& what) -> std::string {
    int own = 0, nodes = 0;
    for (const auto& [node, preferred] : cuda.preferred) {
      if (node->kind != OpKind::matmul || node->attrs.fused != form) continue;
      ++nodes;
      own += preferred;
    }
    if (nodes == 0) return "";
    return what + " in the own Hopper GEMM in " + std::to_string(own) + " of " + std::to_string(nodes) + " nodes";
  };
  std::string summary;
  for (const std::string& part : {count(Fused::rope, "q|k|v with its RoPE"),
                                  count(Fused::swiglu_gate, "gate|up with its SwiGLU gate"),
                                  count(Fused::swiglu_backward, "down's dX with SwiGLU's backward")}) {
    if (!part.empty()) summary += (summary.empty() ? "" : "; ") + part;
  }
  if (cuda.tied_gradient_in_place && !cuda.tied_scatter.empty()) {
    summary += std::string(summary.empty() ? "" : "; ") + "lm_head's dW written into the tied embedding's gradient";
  }
  return summary;
}
#endif

constinit const graph::OpDef matmul_def{
    .backward = matmul_vjp,
    .cost = matmul_cost,
    .accumulating_output = product_accumulates,
    .fused_forms = graph::fused_bit(Fused::addend) | graph::fused_bit(Fused::swiglu_gate) |
                   graph::fused_bit(Fused::swiglu_backward) | graph::fused_bit(Fused::rope),
    .shard = matmul_shard,
    .cpu = on_cpu<cpu_matmul<float>, cpu_matmul<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_matmul,
    .cuda = cuda_matmul,
#endif
};

}  // namespace spillway::ops
