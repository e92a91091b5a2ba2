// add's definition: the residual stream's sums and gradient accumulation.
#include "ops/add_op.h"

#include "ops/add.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void add_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  vjp.add(n.inputs[0], dout);
  vjp.add(n.inputs[1], dout);
}

int add_accumulating_output(const Node&) { return 0; }

template <typename T>
void cpu_add(const Operands& x) {
  ops::add(x.in<T>(0), x.in<T>(1), x.out<T>(0), x.out_shape(0).numel(), x.attrs().accumulate);
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_add(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const int64_t count = x.out_shape(0).numel();
  if (x.out_value(0).dtype == DType::f32) {
    add_cuda(x.in<float>(0), x.in<float>(1), x.out<float>(0), count, cuda.stream, cuda.accumulate(n));
  } else {
    add_cuda(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), count, cuda.stream, cuda.accumulate(n));
  }
}
#endif

// Alike placed, added as they are; a part of a sum beside a whole (or
// split) value is made so first.
void add_shard(Sharder& s, const Node& n) {
  const graph::Value a = n.inputs[0], c = n.inputs[1];
  const Placement pa = s.placement(a), pc = s.placement(c);
  Placement p = pa == Placement::partial ? pc : pa;
  if (pa != pc && p == Placement::columns) p = Placement::whole;
  add(s.b, s.as(a, p), s.as(c, p), n.name);
  s.define(n, p);
}

}  // namespace

graph::Value add(graph::Builder& b, graph::Value a, graph::Value c, std::string_view name) {
  const graph::ValueInfo& ai = b.info(a);
  const graph::ValueInfo& ci = b.info(c);
  const std::string label = b.label(OpKind::add, name);
  SPW_CHECK(ai.shape == ci.shape, label, "shapes differ: a ", ai.shape.str(), ", b ", ci.shape.str());
  SPW_CHECK(ai.dtype == ci.dtype, label, "dtypes differ: a ", dtype_name(ai.dtype), ", b ", dtype_name(ci.dtype));
  return b.emit(OpKind::add, name, {a, c}, {{ai.shape, ai.dtype, ""}})[0];
}

constinit const graph::OpDef add_def{
    .backward = add_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .accumulating_output = add_accumulating_output,
    .shard = add_shard,
    .cpu = on_cpu<cpu_add<float>, cpu_add<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_add,
#endif
};

}  // namespace spillway::ops
