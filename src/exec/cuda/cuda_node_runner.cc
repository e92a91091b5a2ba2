#include "exec/cuda/cuda_node_runner.h"

#include "device/cuda/cuda_stream.h"

#include <algorithm>

#include "base/bytes.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "graph/op_def.h"
#include "ops/attention_op.h"
#include "ops/matmul_op.h"

namespace spillway::exec {

CudaNodeRunner::CudaNodeRunner(const graph::Graph& graph, MemorySpace& memory, Stream& stream, bool deterministic,
                               int matmul_candidates, bool own_gemm, const ops::CollectiveGroups* collectives)
    : cuda_(std::make_unique<ops::CudaOpContext>(memory, as_cuda_stream(stream).handle(), deterministic,
                                                 matmul_candidates, own_gemm)) {
  cuda_->collectives = collectives;
  uint64_t need = 0;
  const graph::Node* neediest = nullptr;
  for (const graph::Node& n : graph.nodes()) {
    const auto prepare = graph::op_def(n.kind).cuda_prepare;
    const uint64_t bytes = prepare ? prepare(graph, n, *cuda_) : 0;
    if (bytes > need) need = bytes, neediest = &n;
  }
  try {
    cuda_->allocate_workspace(need);
  } catch (const Error& e) {
    const bool ordered_attention = deterministic && neediest->kind == graph::OpKind::attention_backward;
    throw Error(graph::node_label(*neediest),
                "needs " + format_bytes(need) + " of kernel workspace" +
                    (ordered_attention ? " (cuDNN's deterministic attention backward; --nondeterministic runs its "
                                         "atomic one)"
                                       : "") +
                    ": " + e.problem());
  }
}

CudaNodeRunner::~CudaNodeRunner() = default;

void CudaNodeRunner::run(const graph::Graph& g, const graph::Node& n, const std::vector<void*>& data) {
  const auto kernel = graph::op_def(n.kind).cuda;
  SPW_CHECK(kernel != nullptr, graph::node_label(n), "has no CUDA kernel");
  kernel(g, n, data, *cuda_);
}

void CudaNodeRunner::synchronize() { SPW_CUDA(cudaStreamSynchronize(cuda_->stream)); }

int CudaNodeRunner::cudnn_attention_nodes() const { return ops::cudnn_attention_nodes(*cuda_); }

std::string CudaNodeRunner::attention_summary() const { return ops::attention_summary(*cuda_); }

std::string CudaNodeRunner::gemm_summary() const { return ops::gemm_summary(*cuda_); }

void CudaNodeRunner::set_overwrite_accumulated(bool on) { cuda_->overwrite_accumulated = on; }

void CudaNodeRunner::set_tied_gradient_in_place(bool on) { cuda_->tied_gradient_in_place = on; }

}  // namespace spillway::exec
