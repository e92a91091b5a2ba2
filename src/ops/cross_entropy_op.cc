// cross_entropy's definition: the loss, which can also write its own
// gradient (graph/fuse_loss_gradient.h), and the separate backward.
#include "ops/cross_entropy_op.h"

#include "ops/cross_entropy.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

void cross_entropy_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const auto& in = n.inputs;
  vjp.add(in[0], cross_entropy_backward(vjp.b, in[0], in[1], n.outputs[1], dout, graph::backward_name(n)));
}

// dlogits over the logits, the step's largest activation: each element is
// read before it is written, in the same thread (ops/cross_entropy.h).
int dlogits_over_logits(const Node& n, size_t output) {
  return n.attrs.fused == Fused::loss_gradient && output == 2 ? 0 : -1;
}

template <typename T>
void cpu_cross_entropy(const Operands& x) {
  const Shape& logits = x.in_shape(0);
  if (x.attrs().fused == Fused::loss_gradient) {
    cross_entropy_forward_backward(x.in<T>(0), x.in<const int32_t>(1), x.attrs().dloss, x.out<T>(1), x.out<T>(0),
                                   x.out<T>(2), logits.rows(), logits.last());
    return;
  }
  cross_entropy_forward(x.in<T>(0), x.in<const int32_t>(1), x.out<T>(1), x.out<T>(0), logits.rows(), logits.last());
}

template <typename T>
void cpu_cross_entropy_backward(const Operands& x) {
  const Shape& logits = x.in_shape(0);
  cross_entropy_backward(x.in<T>(0), x.in<const int32_t>(1), x.in<T>(2), x.in<T>(3), x.out<T>(0), logits.rows(),
                         logits.last());
}

#ifdef SPILLWAY_HAS_CUDA
uint64_t prepare_cross_entropy(const Graph& g, const Node& n, CudaOpContext&) {
  const int64_t rows = g.value(n.inputs[0]).shape.rows();
  return n.attrs.fused == Fused::loss_gradient ? cross_entropy_forward_backward_workspace_bytes(rows)
                                               : cross_entropy_forward_workspace_bytes(rows);
}

void cuda_cross_entropy(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& logits = x.in_shape(0);
  if (n.attrs.fused == Fused::loss_gradient) {
    cross_entropy_forward_backward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), static_cast<float>(n.attrs.dloss),
                                        x.out<float>(1), x.out<float>(0), x.out<bf16>(2), logits.rows(), logits.last(),
                                        cuda.workspace, cuda.stream);
    return;
  }
  cross_entropy_forward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), x.out<float>(1), x.out<float>(0), logits.rows(),
                             logits.last(), cuda.workspace, cuda.stream);
}

void cuda_cross_entropy_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& logits = x.in_shape(0);
  cross_entropy_backward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), x.in<float>(2), x.in<float>(3), x.out<bf16>(0),
                              logits.rows(), logits.last(), cuda.stream);
}
#endif

}  // namespace

graph::Value cross_entropy(graph::Builder& b, graph::Value logits, graph::Value targets, std::string_view name) {
  const graph::ValueInfo& li = b.info(logits);
  const graph::ValueInfo& ti = b.info(targets);
  const std::string label = b.label(OpKind::cross_entropy, name);
  SPW_CHECK(ti.dtype == DType::i32, label, "targets must be i32, got ", dtype_name(ti.dtype));
  SPW_CHECK(ti.shape.numel() == li.shape.rows(), label, "targets ", ti.shape.str(), " do not match the rows of logits ",
            li.shape.str());
  const DType stats = graph::accumulation_dtype(li.dtype);
  return b.emit(OpKind::cross_entropy, name, {logits, targets},
                {{Shape{}, stats, ""}, {Shape{li.shape.rows()}, stats, "lse"}})[0];
}

graph::Value cross_entropy_backward(graph::Builder& b, graph::Value logits, graph::Value targets, graph::Value lse,
                                    graph::Value dloss, std::string_view name) {
  const graph::ValueInfo& li = b.info(logits);
  return b.emit(OpKind::cross_entropy_backward, name, {logits, targets, lse, dloss},
                {{li.shape, li.dtype, ""}})[0];
}

constinit const graph::OpDef cross_entropy_def{
    .backward = cross_entropy_vjp,
    .cost = graph::memory_bound,
    .in_place_input = dlogits_over_logits,
    .fused_forms = graph::fused_bit(Fused::loss_gradient),
    .cpu = on_cpu<cpu_cross_entropy<float>, cpu_cross_entropy<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_cross_entropy,
    .cuda = cuda_cross_entropy,
#endif
};

constinit const graph::OpDef cross_entropy_backward_def{
    .cost = graph::memory_bound,
    .cpu = on_cpu<cpu_cross_entropy_backward<float>, cpu_cross_entropy_backward<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda = cuda_cross_entropy_backward,
#endif
};

}  // namespace spillway::ops
