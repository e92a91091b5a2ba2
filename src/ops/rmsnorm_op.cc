// rmsnorm's definition: the norm and its backward, which can add the
// residual stream's other gradient to dx (graph/fuse_rmsnorm_add.h).
#include "ops/rmsnorm_op.h"

#include "ops/op_definition.h"
#include "ops/rmsnorm.h"

namespace spillway::ops {

namespace {

void rmsnorm_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const auto& in = n.inputs;
  const auto d = rmsnorm_backward(vjp.b, dout, in[0], in[1], n.outputs[1], graph::backward_name(n));
  vjp.add(in[0], d[0]);
  vjp.add(in[1], d[1]);
}

int dweight_accumulates(const Node&) { return 1; }

template <typename T>
void cpu_rmsnorm(const Operands& x) {
  const Shape& s = x.in_shape(0);
  rmsnorm_forward(x.in<T>(0), x.in<T>(1), x.out<T>(0), x.out<T>(1), s.rows(), s.last(), x.attrs().eps);
}

template <typename T>
void cpu_rmsnorm_backward(const Operands& x) {
  const Shape& s = x.in_shape(1);
  const T* dx_addend = x.attrs().fused == Fused::addend ? x.in<T>(4) : nullptr;
  rmsnorm_backward(x.in<T>(0), x.in<T>(1), x.in<T>(2), x.in<T>(3), x.out<T>(0), x.out<T>(1), s.rows(), s.last(),
                   x.attrs().accumulate, dx_addend);
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_rmsnorm(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& s = x.in_shape(0);
  rmsnorm_forward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), x.out<float>(1), s.rows(), s.last(),
                       static_cast<float>(n.attrs.eps), cuda.stream);
}

uint64_t prepare_rmsnorm_backward(const Graph& g, const Node& n, CudaOpContext&) {
  const Shape& s = g.value(n.inputs[1]).shape;
  return rmsnorm_backward_workspace_bytes(s.rows(), s.last());
}

void cuda_rmsnorm_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& s = x.in_shape(1);
  const bf16* dx_addend = n.attrs.fused == Fused::addend ? x.in<bf16>(4) : nullptr;
  rmsnorm_backward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.in<float>(3), x.out<bf16>(0), x.out<float>(1),
                        s.rows(), s.last(), cuda.workspace, cuda.stream, cuda.accumulate(n), dx_addend);
}
#endif

// Per token: on the residual stream as it is placed, a part of a sum made
// whole (or split by tokens, with sequence parallelism) first.
void rmsnorm_shard(Sharder& s, const Node& n) {
  Placement p = s.placement(n.inputs[0]);
  if (p == Placement::partial) p = s.tokens();
  if (p != Placement::rows) p = Placement::whole;
  rmsnorm(s.b, s.as(n.inputs[0], p), s.as(n.inputs[1], Placement::whole), n.attrs.eps, n.name);
  s.define(n, p);
}

}  // namespace

graph::Value rmsnorm(graph::Builder& b, graph::Value x, graph::Value weight, double eps, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  const graph::ValueInfo& wi = b.info(weight);
  SPW_CHECK(wi.shape == Shape{xi.shape.last()}, b.label(OpKind::rmsnorm, name), "weight ", wi.shape.str(),
            " does not match the last dimension of x ", xi.shape.str());
  graph::NodeAttrs attrs;
  attrs.eps = eps;
  return b.emit(OpKind::rmsnorm, name, {x, weight},
                {{xi.shape, xi.dtype, ""}, {Shape{xi.shape.rows()}, graph::accumulation_dtype(xi.dtype), "rstd"}},
                attrs)[0];
}

std::vector<graph::Value> rmsnorm_backward(graph::Builder& b, graph::Value dy, graph::Value x, graph::Value weight,
                                           graph::Value rstd, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  const graph::ValueInfo& wi = b.info(weight);
  return b.emit(OpKind::rmsnorm_backward, name, {dy, x, weight, rstd},
                {{xi.shape, xi.dtype, "dx"}, {wi.shape, graph::accumulation_dtype(wi.dtype), "dweight"}});
}

constinit const graph::OpDef rmsnorm_def{
    .backward = rmsnorm_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .shard = rmsnorm_shard,
    .cpu = on_cpu<cpu_rmsnorm<float>, cpu_rmsnorm<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_rmsnorm,
#endif
};

// dweight (output 1) can accumulate micro-batches; dx can take the residual
// stream's other gradient as a fifth input.
constinit const graph::OpDef rmsnorm_backward_def{
    .cost = graph::memory_bound,
    .accumulating_output = dweight_accumulates,
    .fused_forms = graph::fused_bit(Fused::addend),
    .cpu = on_cpu<cpu_rmsnorm_backward<float>, cpu_rmsnorm_backward<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_rmsnorm_backward,
    .cuda = cuda_rmsnorm_backward,
#endif
};

}  // namespace spillway::ops
