// cast's definition: dtype-generic on both backends, its own backward.
#include "ops/cast_op.h"

#include "ops/cast.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void cast_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const graph::Value x = n.inputs[0];
  vjp.add(x, cast(vjp.b, dout, vjp.b.info(x).dtype, graph::backward_name(n)));
}

void cpu_cast(const Graph& g, const Node& n, const std::vector<void*>& data) {
  const Operands x(g, n, data);
  cast(x.in(0), x.in_value(0).dtype, x.out(0), x.out_value(0).dtype, x.in_shape(0).numel());
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_cast(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  cast_cuda(x.in(0), x.in_value(0).dtype, x.out(0), x.out_value(0).dtype, x.out_shape(0).numel(), cuda.stream);
}
#endif

}  // namespace

graph::Value cast(graph::Builder& b, graph::Value x, DType to, std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  SPW_CHECK(dtype_is_float(xi.dtype) && dtype_is_float(to), b.label(OpKind::cast, name), "cannot cast ",
            dtype_name(xi.dtype), " to ", dtype_name(to));
  return b.emit(OpKind::cast, name, {x}, {{xi.shape, to, ""}})[0];
}

constinit const graph::OpDef cast_def{
    .backward = cast_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .cpu = cpu_cast,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_cast,
#endif
};

}  // namespace spillway::ops
