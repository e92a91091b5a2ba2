// dropout's definition: its gradient is itself, its draws the same.
#include "ops/dropout_op.h"

#include "ops/dropout.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void dropout_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  vjp.add(n.inputs[0],
          dropout(vjp.b, dout, n.inputs[1], n.attrs.dropout, n.attrs.salt, graph::backward_name(n)));
}

double keep_scale(const Node& n) { return 1.0 / (1.0 - n.attrs.dropout); }

template <typename T>
void cpu_dropout(const Operands& x) {
  dropout_forward(x.in<T>(0), x.out<T>(0), x.out_shape(0).numel(), dropout_key(x.in<int32_t>(1)), x.attrs().salt,
                  dropout_threshold(x.attrs().dropout), keep_scale(x.node()));
}

#ifdef SPILLWAY_HAS_CUDA
void cuda_dropout(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  dropout_forward_cuda(x.in<bf16>(0), x.out<bf16>(0), x.out_shape(0).numel(), x.in<int32_t>(1), n.attrs.salt,
                       dropout_threshold(n.attrs.dropout), static_cast<float>(keep_scale(n)), cuda.stream);
}
#endif

}  // namespace

graph::Value dropout(graph::Builder& b, graph::Value x, graph::Value key, double p, uint32_t salt,
                     std::string_view name) {
  const graph::ValueInfo& xi = b.info(x);
  const graph::ValueInfo& ki = b.info(key);
  const std::string label = b.label(OpKind::dropout, name);
  SPW_CHECK(p > 0 && p < 1, label, "probability ", p, " is not in (0, 1)");
  SPW_CHECK(ki.dtype == DType::i32 && ki.shape == Shape{2}, label, "the key is ", dtype_name(ki.dtype), " ",
            ki.shape.str(), "; expected i32 [2]");
  graph::NodeAttrs attrs;
  attrs.dropout = p;
  attrs.salt = salt;
  return b.emit(OpKind::dropout, name, {x, key}, {{xi.shape, xi.dtype, ""}}, attrs)[0];
}

constinit const graph::OpDef dropout_def{
    .backward = dropout_vjp,
    .cost = graph::memory_bound,
    .cheap_to_recompute = true,
    .cpu = on_cpu<cpu_dropout<float>, cpu_dropout<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_dropout,
#endif
};

}  // namespace spillway::ops
