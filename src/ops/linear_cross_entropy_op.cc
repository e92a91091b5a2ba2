// linear_cross_entropy's definition (ops/linear_cross_entropy.h): made by
// graph/fuse_linear_loss.h from lm_head's matmul, the loss (with its
// gradient folded in, when training) and lm_head's two backward matmuls.
// Inputs: h, W, targets[, weights]. Outputs: loss, lse[, dh, dW].
#include <algorithm>
#include <vector>

#include "ops/cross_entropy.h"
#include "ops/linear_cross_entropy.h"
#include "ops/matmul.h"
#include "ops/op_definition.h"

namespace spillway::ops {

namespace {

constexpr size_t kWeights = 3, kGradients = 4;

struct HeadDims {
  int64_t rows, hidden, vocab, chunk;
  bool backward, weighted;
  int64_t chunks() const { return (rows + chunk - 1) / chunk; }
};

HeadDims head_dims(const Graph& g, const Node& n) {
  const Shape& h = g.value(n.inputs[0]).shape;
  const Shape& w = g.value(n.inputs[1]).shape;
  SPW_CHECK(n.attrs.chunk_rows > 0, node_label(n), "needs rows per chunk");
  return {.rows = h.rows(),
          .hidden = h.last(),
          .vocab = w.rows(),
          .chunk = std::min(n.attrs.chunk_rows, std::max<int64_t>(1, h.rows())),
          .backward = n.outputs.size() == kGradients,
          .weighted = n.inputs.size() > kWeights};
}

// The products' FLOPs; the logits' traffic through the scratch buffer is
// small beside them (the loss reads a chunk's logits from L2).
graph::OpCost linear_cross_entropy_cost(const Graph& g, const Node& n) {
  const HeadDims d = head_dims(g, n);
  const double product = 2.0 * static_cast<double>(d.rows) * static_cast<double>(d.hidden) *
                         static_cast<double>(d.vocab);
  const double logits_bytes = static_cast<double>(d.rows) * static_cast<double>(d.vocab) *
                              static_cast<double>(dtype_size(g.value(n.inputs[0]).dtype));
  return {.flops = product * (d.backward ? 3 : 1),
          .bytes = graph::operand_bytes(g, n) + logits_bytes * (d.backward ? 4 : 2),
          .rate = graph::RateClass::gemm};
}

int gradient_sum_output(const Node& n) { return n.outputs.size() == kGradients ? 3 : -1; }

template <typename T>
void cpu_linear_cross_entropy(const Operands& x) {
  const HeadDims d = head_dims(x.graph(), x.node());
  const T* h = x.in<const T>(0);
  const T* w = x.in<const T>(1);
  const auto* targets = x.in<const int32_t>(2);
  std::vector<T> mean;
  const T* weights = d.weighted ? x.in<const T>(kWeights) : nullptr;
  if (!weights) {
    mean.resize(static_cast<size_t>(d.rows));
    mean_loss_weights(targets, d.rows, mean.data());
    weights = mean.data();
  }
  std::vector<T> logits(static_cast<size_t>(d.chunk * d.vocab));
  T* lse = x.out<T>(1);
  double loss = 0;
  for (int64_t r0 = 0; r0 < d.rows; r0 += d.chunk) {
    const int64_t n = std::min(d.chunk, d.rows - r0);
    matmul<T>(false, true, n, d.vocab, d.hidden, T(1), h + r0 * d.hidden, w, T(0), logits.data());
    T part = 0;
    if (!d.backward) {
      cross_entropy_forward(logits.data(), targets + r0, lse + r0, &part, n, d.vocab, weights + r0);
    } else {
      cross_entropy_forward_backward(logits.data(), targets + r0, x.attrs().dloss, lse + r0, &part, logits.data(), n,
                                     d.vocab, weights + r0);
      matmul<T>(false, false, n, d.hidden, d.vocab, T(1), logits.data(), w, T(0), x.out<T>(2) + r0 * d.hidden);
      const bool add = r0 > 0 || x.attrs().accumulate;
      matmul<T>(true, false, d.vocab, d.hidden, n, T(1), logits.data(), h + r0 * d.hidden, T(add ? 1 : 0),
                x.out<T>(3));
    }
    loss += static_cast<double>(part);
  }
  *x.out<T>(0) = static_cast<T>(loss);
}

#ifdef SPILLWAY_HAS_CUDA
// The workspace: one chunk's logits, the loss kernel's own, each chunk's
// loss, and the mean's weights.
struct Workspace {
  uint64_t logits = 0, loss_kernel, parts, weights, total;
  explicit Workspace(const HeadDims& d) {
    auto aligned = [](uint64_t b) { return (b + 255) / 256 * 256; };
    loss_kernel = aligned(static_cast<uint64_t>(d.chunk * d.vocab) * sizeof(bf16));
    const uint64_t kernel = d.backward ? cross_entropy_forward_backward_workspace_bytes(d.chunk)
                                       : cross_entropy_forward_workspace_bytes(d.chunk);
    parts = loss_kernel + aligned(kernel);
    weights = parts + aligned(static_cast<uint64_t>(d.chunks()) * sizeof(float));
    total = weights + (d.weighted ? 0 : aligned(static_cast<uint64_t>(d.rows) * sizeof(float)));
  }
};

uint64_t prepare_linear_cross_entropy(const Graph& g, const Node& n, CudaOpContext&) {
  return Workspace(head_dims(g, n)).total;
}

void cuda_linear_cross_entropy(const Graph& g, const Node& n, const std::vector<void*>& data, CudaOpContext& cuda) {
  const Operands x(g, n, data);
  const HeadDims d = head_dims(g, n);
  const Workspace at(d);
  char* ws = static_cast<char*>(cuda.workspace);
  auto* logits = reinterpret_cast<bf16*>(ws + at.logits);
  auto* parts = reinterpret_cast<float*>(ws + at.parts);
  const auto* h = x.in<const bf16>(0);
  const auto* targets = x.in<const int32_t>(2);
  const float* weights = d.weighted ? x.in<const float>(kWeights) : reinterpret_cast<float*>(ws + at.weights);
  if (!d.weighted) mean_loss_weights_cuda(targets, d.rows, reinterpret_cast<float*>(ws + at.weights), cuda.stream);
  auto product = [&](bool ta, bool tb, int64_t m, int64_t nn, int64_t k, const void* a, const void* b, float beta,
                     void* c, DType c_type) {
    cuda.matmul->run(ta, tb, m, nn, k, 1.0f, a, DType::bf16, b, DType::bf16, beta, c, c_type, cuda.stream);
  };
  for (int64_t c = 0, r0 = 0; r0 < d.rows; ++c, r0 += d.chunk) {
    const int64_t rows = std::min(d.chunk, d.rows - r0);
    const bf16* h_chunk = h + r0 * d.hidden;
    product(false, true, rows, d.vocab, d.hidden, h_chunk, x.in(1), 0.0f, logits, DType::bf16);
    float* lse = x.out<float>(1) + r0;
    if (!d.backward) {
      cross_entropy_forward_cuda(logits, targets + r0, lse, parts + c, rows, d.vocab, ws + at.loss_kernel, cuda.stream,
                                 weights + r0);
      continue;
    }
    cross_entropy_forward_backward_cuda(logits, targets + r0, static_cast<float>(n.attrs.dloss), lse, parts + c,
                                        logits, rows, d.vocab, ws + at.loss_kernel, cuda.stream, 0, weights + r0);
    product(false, false, rows, d.hidden, d.vocab, logits, x.in(1), 0.0f, x.out<bf16>(2) + r0 * d.hidden,
            DType::bf16);
    const bool add = r0 > 0 || cuda.accumulate(n);
    product(true, false, d.vocab, d.hidden, rows, logits, h_chunk, add ? 1.0f : 0.0f, x.out(3),
            x.out_value(3).dtype);
  }
  sum_in_order_cuda(parts, d.chunks(), x.out<float>(0), cuda.stream);
}
#endif

}  // namespace

constinit const graph::OpDef linear_cross_entropy_def{
    .cost = linear_cross_entropy_cost,
    .accumulating_output = gradient_sum_output,
    .cpu = on_cpu<cpu_linear_cross_entropy<float>, cpu_linear_cross_entropy<double>>,
#ifdef SPILLWAY_HAS_CUDA
    .cuda_prepare = prepare_linear_cross_entropy,
    .cuda = cuda_linear_cross_entropy,
#endif
};

}  // namespace spillway::ops
