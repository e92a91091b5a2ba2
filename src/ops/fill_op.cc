// fill's definition: a constant, with nothing to differentiate.
#include "ops/fill_op.h"

#include "ops/fill.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void fill_vjp(graph::Vjp&, const Node&, graph::Value) {}

// Adding zeros is nothing to do, so a fill of 0 can stand for an
// accumulated gradient the loss does not reach; += any other constant is
// not a fill's to do.
int fill_accumulating_output(const Node& n) { return n.attrs.fill_value == 0 ? 0 : -1; }

void cpu_fill(const Graph& g, const Node& n, const std::vector<void*>& data) {
  if (n.attrs.accumulate) return;  // adding zeros
  const Operands x(g, n, data);
  fill(x.out(0), x.out_value(0).dtype, x.out_shape(0).numel(), n.attrs.fill_value);
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_fill(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  if (cuda.accumulate(n)) return;  // adding zeros
  const Operands x(g, n, data);
  fill_cuda(x.out(0), x.out_value(0).dtype, x.out_shape(0).numel(), n.attrs.fill_value, cuda.stream);
}
#endif

}  // namespace

graph::Value fill(graph::Builder& b, std::string_view name, Shape shape, double value, DType dtype) {
  graph::NodeAttrs attrs;
  attrs.fill_value = value;
  return b.emit(OpKind::fill, name, {}, {{std::move(shape), dtype, ""}}, attrs)[0];
}

constinit const graph::OpDef fill_def{
    .backward = fill_vjp,
    .cost = graph::memory_bound,
    .accumulating_output = fill_accumulating_output,
    .cpu = cpu_fill,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_fill,
#endif
};

}  // namespace spillway::ops
