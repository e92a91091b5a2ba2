// swiglu's definition, packed (one gate|up input) or not.
#include "ops/swiglu_op.h"

#include "ops/op_definition.h"
#include "ops/swiglu.h"

namespace spillway::ops {

namespace {

void swiglu_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const auto& in = n.inputs;
  const std::string name = graph::backward_name(n);
  if (n.attrs.packed) {
    vjp.add(in[0], swiglu_packed_backward(vjp.b, dout, in[0], name));
    return;
  }
  const auto d = swiglu_backward(vjp.b, dout, in[0], in[1], name);
  vjp.add(in[0], d[0]);
  vjp.add(in[1], d[1]);
}

template <typename T>
void cpu_swiglu(const Operands& x) {
  const Shape& out = x.out_shape(0);
  if (x.attrs().packed) {
    swiglu_packed_forward(x.in<T>(0), x.out<T>(0), out.rows(), out.last());
  } else {
    swiglu_forward(x.in<T>(0), x.in<T>(1), x.out<T>(0), out.numel());
  }
}

template <typename T>
void cpu_swiglu_backward(const Operands& x) {
  if (x.attrs().packed) {
    const Shape& dout = x.in_shape(0);
    swiglu_packed_backward(x.in<T>(0), x.in<T>(1), x.out<T>(0), dout.rows(), dout.last());
  } else {
    swiglu_backward(x.in<T>(0), x.in<T>(1), x.in<T>(2), x.out<T>(0), x.out<T>(1), x.out_shape(0).numel());
  }
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_swiglu(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& out = x.out_shape(0);
  if (n.attrs.packed) {
    swiglu_packed_forward_cuda(x.in<bf16>(0), x.out<bf16>(0), out.rows(), out.last(), cuda.stream);
  } else {
    swiglu_forward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), out.numel(), cuda.stream);
  }
}

void cuda_swiglu_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  if (n.attrs.packed) {
    const Shape& dout = x.in_shape(0);
    swiglu_packed_backward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.out<bf16>(0), dout.rows(), dout.last(), cuda.stream);
  } else {
    swiglu_backward_cuda(x.in<bf16>(0), x.in<bf16>(1), x.in<bf16>(2), x.out<bf16>(0), x.out<bf16>(1),
                         x.out_shape(0).numel(), cuda.stream);
  }
}
#endif

// Elementwise over features split by columns (a packed gate|up's pieces
// each hold their gate then their up).
void swiglu_shard(Sharder& s, const Node& n) {
  for (graph::Value in : n.inputs) {
    if (s.placement(in) != Placement::columns) return s.whole(n);
  }
  if (n.attrs.packed) {
    swiglu_packed(s.b, s.as(n.inputs[0], Placement::columns), n.name);
  } else {
    swiglu(s.b, s.as(n.inputs[0], Placement::columns), s.as(n.inputs[1], Placement::columns), n.name);
  }
  s.define(n, Placement::columns);
}

}  // namespace

graph::Value swiglu(graph::Builder& b, graph::Value gate, graph::Value up, std::string_view name) {
  const graph::ValueInfo& gi = b.info(gate);
  const graph::ValueInfo& ui = b.info(up);
  SPW_CHECK(gi.shape == ui.shape, b.label(OpKind::swiglu, name), "gate ", gi.shape.str(), " and up ",
            ui.shape.str(), " differ");
  return b.emit(OpKind::swiglu, name, {gate, up}, {{gi.shape, gi.dtype, ""}})[0];
}

graph::Value swiglu_packed(graph::Builder& b, graph::Value gate_up, std::string_view name) {
  const graph::ValueInfo& gi = b.info(gate_up);
  SPW_CHECK(gi.shape.rank() >= 1 && gi.shape.last() % 2 == 0, b.label(OpKind::swiglu, name), "gate_up ",
            gi.shape.str(), " does not split into gate and up halves");
  graph::NodeAttrs attrs;
  attrs.packed = true;
  return b.emit(OpKind::swiglu, name, {gate_up}, {{gi.shape.with_last(gi.shape.last() / 2), gi.dtype, ""}},
                attrs)[0];
}

std::vector<graph::Value> swiglu_backward(graph::Builder& b, graph::Value dout, graph::Value gate, graph::Value up,
                                          std::string_view name) {
  const graph::ValueInfo& gi = b.info(gate);
  const graph::ValueInfo& ui = b.info(up);
  return b.emit(OpKind::swiglu_backward, name, {dout, gate, up},
                {{gi.shape, gi.dtype, "dgate"}, {ui.shape, ui.dtype, "dup"}});
}

graph::Value swiglu_packed_backward(graph::Builder& b, graph::Value dout, graph::Value gate_up, std::string_view name) {
  const graph::ValueInfo& gi = b.info(gate_up);
  graph::NodeAttrs attrs;
  attrs.packed = true;
  return b.emit(OpKind::swiglu_backward, name, {dout, gate_up}, {{gi.shape, gi.dtype, "dgate_up"}}, attrs)[0];
}

constinit const graph::OpDef swiglu_def{
    .backward = swiglu_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .shard = swiglu_shard,
    .cpu = on_cpu<cpu_swiglu<float>, cpu_swiglu<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_swiglu,
#endif
};

constinit const graph::OpDef swiglu_backward_def{
    .cost = graph::memory_bound,
    .cpu = on_cpu<cpu_swiglu_backward<float>, cpu_swiglu_backward<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_swiglu_backward,
#endif
};

}  // namespace spillway::ops
