// The matmul op in the graph (ops/matmul.h, ops/matmul_cuda.h), and the
// fused forms the passes give it: an addend, SwiGLU's gate or backward, a
// rope (graph::Fused).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "graph/builder.h"

namespace spillway::ops {

// x [..., in] times weight [out, in] transposed: a linear layer, HF layout.
graph::Value linear(graph::Builder& b, graph::Value x, graph::Value weight, std::string_view name = "linear");
// a and c are read as 2-D [rows, last]. The result keeps a's leading
// dimensions when a is not transposed, else is [m, n]; `out_shape`
// overrides that with any shape of m * n elements.
graph::Value matmul(graph::Builder& b, graph::Value a, graph::Value c, bool trans_a, bool trans_b,
                    std::string_view name = "matmul", const Shape* out_shape = nullptr,
                    std::optional<DType> out_dtype = std::nullopt);

// The product a matmul node computes, [m, n] over k, from its operands'
// shapes and transposes; its output can differ (Fused::swiglu_backward).
struct MatmulDims {
  int64_t m = 0, n = 0, k = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};
MatmulDims matmul_dims(const graph::Graph& g, const graph::Node& n);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
namespace spillway::ops {

struct CudaOpContext;
// How many q|k|v projections with their RoPE, gate|up projections with
// their SwiGLU gate, and down dX products with SwiGLU's backward run as the
// own Hopper GEMM, as "q|k|v with its RoPE in the own Hopper GEMM in 16 of
// 16 nodes; ..."; each part left out when the graph has no such node. A
// tied embedding's gradient made in place is said last.
std::string gemm_summary(const CudaOpContext& cuda);

}  // namespace spillway::ops
#endif
