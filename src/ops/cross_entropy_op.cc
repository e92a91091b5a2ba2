// cross_entropy's definition: the loss, which can also write its own
// gradient (graph/fuse_loss_gradient.h), and the separate backward.
#include "ops/cross_entropy_op.h"

#include "ops/cross_entropy.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

// The forward's weights (its third input) and the backward's (its fifth).
constexpr size_t kForwardWeights = 2, kBackwardWeights = 4;

// The weights as the node's kernels read them, or null for the mean.
template <typename T>
const T* weights_of(const Operands& x, size_t input) {
  return x.node().inputs.size() > input ? x.in<const T>(input) : nullptr;
}

// The weights take no gradient (ops/cross_entropy.h): the trainer makes them
// from the data.
void cross_entropy_vjp(graph::Vjp& vjp, const Node& n, graph::Value dout) {
  const auto& in = n.inputs;
  const graph::Value weights = in.size() > kForwardWeights ? in[kForwardWeights] : graph::Value{};
  vjp.add(in[0], cross_entropy_backward(vjp.b, in[0], in[1], n.outputs[1], dout, graph::backward_name(n), weights));
}

// dlogits over the logits, the step's largest activation: each element is
// read before it is written, in the same thread (ops/cross_entropy.h).
int dlogits_over_logits(const Node& n, size_t output) {
  return n.attrs.fused == Fused::loss_gradient && output == 2 ? 0 : -1;
}

template <typename T>
void cpu_cross_entropy(const Operands& x) {
  const Shape& logits = x.in_shape(0);
  const T* weights = weights_of<T>(x, kForwardWeights);
  if (x.attrs().fused == Fused::loss_gradient) {
    cross_entropy_forward_backward(x.in<T>(0), x.in<const int32_t>(1), x.attrs().dloss, x.out<T>(1), x.out<T>(0),
                                   x.out<T>(2), logits.rows(), logits.last(), weights);
    return;
  }
  cross_entropy_forward(x.in<T>(0), x.in<const int32_t>(1), x.out<T>(1), x.out<T>(0), logits.rows(), logits.last(),
                        weights);
}

template <typename T>
void cpu_cross_entropy_backward(const Operands& x) {
  const Shape& logits = x.in_shape(0);
  cross_entropy_backward(x.in<T>(0), x.in<const int32_t>(1), x.in<T>(2), x.in<T>(3), x.out<T>(0), logits.rows(),
                         logits.last(), weights_of<T>(x, kBackwardWeights));
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
  const float* weights = weights_of<float>(x, kForwardWeights);
  if (n.attrs.fused == Fused::loss_gradient) {
    cross_entropy_forward_backward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), static_cast<float>(n.attrs.dloss),
                                        x.out<float>(1), x.out<float>(0), x.out<bf16>(2), logits.rows(), logits.last(),
                                        cuda.workspace, cuda.stream, 0, weights);
    return;
  }
  cross_entropy_forward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), x.out<float>(1), x.out<float>(0), logits.rows(),
                             logits.last(), cuda.workspace, cuda.stream, weights);
}

void cuda_cross_entropy_backward(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const Shape& logits = x.in_shape(0);
  cross_entropy_backward_cuda(x.in<bf16>(0), x.in<const int32_t>(1), x.in<float>(2), x.in<float>(3), x.out<bf16>(0),
                              logits.rows(), logits.last(), cuda.stream, weights_of<float>(x, kBackwardWeights));
}
#endif

}  // namespace

namespace {

// Checks the operands; returns the node's inputs.
std::vector<graph::Value> loss_inputs(graph::Builder& b, graph::Value logits, graph::Value targets,
                                      graph::Value weights, std::string_view name) {
  const graph::ValueInfo& li = b.info(logits);
  const graph::ValueInfo& ti = b.info(targets);
  const std::string label = b.label(OpKind::cross_entropy, name);
  SPW_CHECK(ti.dtype == DType::i32, label, "targets must be i32, got ", dtype_name(ti.dtype));
  SPW_CHECK(ti.shape.numel() == li.shape.rows(), label, "targets ", ti.shape.str(), " do not match the rows of logits ",
            li.shape.str());
  if (!weights.valid()) return {logits, targets};
  const graph::ValueInfo& wi = b.info(weights);
  const DType stats = graph::accumulation_dtype(li.dtype);
  SPW_CHECK(wi.dtype == stats, label, "weights must be ", dtype_name(stats), ", got ", dtype_name(wi.dtype));
  SPW_CHECK(wi.shape.numel() == li.shape.rows(), label, "weights ", wi.shape.str(),
            " do not match the rows of logits ", li.shape.str());
  return {logits, targets, weights};
}

graph::Value emit_loss(graph::Builder& b, std::vector<graph::Value> inputs, std::string_view name) {
  const graph::ValueInfo& li = b.info(inputs[0]);
  const DType stats = graph::accumulation_dtype(li.dtype);
  return b.emit(OpKind::cross_entropy, name, std::move(inputs),
                {{Shape{}, stats, ""}, {Shape{li.shape.rows()}, stats, "lse"}})[0];
}

}  // namespace

graph::Value cross_entropy(graph::Builder& b, graph::Value logits, graph::Value targets, std::string_view name) {
  return emit_loss(b, loss_inputs(b, logits, targets, {}, name), name);
}

graph::Value cross_entropy_weighted(graph::Builder& b, graph::Value logits, graph::Value targets,
                                    graph::Value weights, std::string_view name) {
  SPW_CHECK(weights.valid(), b.label(OpKind::cross_entropy, name), "weighted without weights");
  return emit_loss(b, loss_inputs(b, logits, targets, weights, name), name);
}

graph::Value cross_entropy_backward(graph::Builder& b, graph::Value logits, graph::Value targets, graph::Value lse,
                                    graph::Value dloss, std::string_view name, graph::Value weights) {
  const graph::ValueInfo& li = b.info(logits);
  std::vector<graph::Value> inputs{logits, targets, lse, dloss};
  if (weights.valid()) inputs.push_back(weights);
  return b.emit(OpKind::cross_entropy_backward, name, std::move(inputs), {{li.shape, li.dtype, ""}})[0];
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
