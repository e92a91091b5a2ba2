// Built only with the CUDA backend: the library globs every src/ops/*.cc.
#ifdef SPILLWAY_HAS_CUDA

#include "ops/cuda_op_context.h"

#include "device/cuda/cuda_check.h"
#include "ops/gemm_hopper.h"
#include "ops/rope.h"

namespace spillway::ops {

namespace {

bool hopper_gemm_on_current_device(bool own_gemm) {
  int device = 0;
  SPW_CUDA(cudaGetDevice(&device));
  return own_gemm && hopper_gemm_available(device);
}

}  // namespace

CudaOpContext::CudaOpContext(MemorySpace& memory, cudaStream_t stream, bool deterministic, int matmul_candidates,
                             bool own_gemm)
    : memory(memory),
      stream(stream),
      hopper(hopper_gemm_on_current_device(own_gemm)),
      deterministic_(deterministic) {
  matmul_workspace_ = memory.allocate(CublasLtMatmul::kDefaultWorkspaceBytes, "cuBLASLt workspace");
  matmul = std::make_unique<CublasLtMatmul>(matmul_workspace_, CublasLtMatmul::kDefaultWorkspaceBytes,
                                            matmul_candidates);
}

CudaOpContext::~CudaOpContext() {
  SPW_CUDA_WARN(cudaStreamSynchronize(stream));
  for (auto& [key, ptr] : inv_freq_) memory.free(ptr);
  for (auto& [key, ptr] : rope_tables_) memory.free(ptr);
  matmul.reset();
  memory.free(matmul_workspace_);
  memory.free(workspace);
}

void CudaOpContext::allocate_workspace(uint64_t bytes) {
  if (bytes > 0) workspace = memory.allocate(bytes, "kernel workspace");
}

CudnnAttention& CudaOpContext::cudnn() {
  if (!cudnn_) {
    cudnn_ = std::make_unique<CudnnAttention>(deterministic_ ? CudnnBackwardOrder::kDeterministic
                                                             : CudnnBackwardOrder::kAtomic);
  }
  return *cudnn_;
}

const graph::Node* CudaOpContext::tied_in_place(const graph::Node& n) const {
  if (!tied_gradient_in_place) return nullptr;
  const auto it = tied_scatter.find(&n);
  if (it == tied_scatter.end()) return nullptr;
  return !it->second->attrs.accumulate || overwrite_accumulated ? it->second : nullptr;
}

const float* CudaOpContext::inv_freq_on_device(const std::vector<float>& inv_freq) {
  auto it = inv_freq_.find(&inv_freq);
  if (it != inv_freq_.end()) return static_cast<const float*>(it->second);
  void* ptr = memory.allocate(inv_freq.size() * sizeof(float), "rope frequencies");
  SPW_CUDA(cudaMemcpyAsync(ptr, inv_freq.data(), inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  SPW_CUDA(cudaStreamSynchronize(stream));  // the host vector may go before the copy runs otherwise
  inv_freq_[&inv_freq] = ptr;
  return static_cast<const float*>(ptr);
}

const float* CudaOpContext::rope_table_on_device(const std::vector<float>& inv_freq, const float* inv_freq_device,
                                                 int64_t seq, int64_t head_dim, int64_t pos0) {
  const auto key = std::make_tuple(&inv_freq, seq, head_dim, pos0);
  auto it = rope_tables_.find(key);
  if (it != rope_tables_.end()) return static_cast<const float*>(it->second);
  void* ptr = memory.allocate(static_cast<uint64_t>(seq * head_dim) * sizeof(float), "rope cos/sin table");
  rope_table_cuda(inv_freq_device, seq, head_dim, pos0, static_cast<float*>(ptr), stream);
  rope_tables_[key] = ptr;
  return static_cast<const float*>(ptr);
}

}  // namespace spillway::ops

#endif  // SPILLWAY_HAS_CUDA
