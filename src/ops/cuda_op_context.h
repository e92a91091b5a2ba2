// What the CUDA hooks of the op definitions (graph::OpDef::cuda_prepare,
// ::cuda) share while one graph runs on one stream: the stream, the one
// workspace every node uses in turn (sized once, before the first step, to
// what the largest node asks for), the cuBLASLt and cuDNN handles, device
// copies of RoPE frequencies and tables, and the algorithm each node was
// given. exec::CudaNodeRunner owns one per graph.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "device/memory_space.h"
#include "graph/graph.h"
#include "ops/attention_cudnn.h"
#include "ops/matmul_cuda.h"

namespace spillway::ops {

struct CollectiveGroups;

struct CudaOpContext {
  // Allocates cuBLASLt's workspace from `memory`. `deterministic` picks
  // cuDNN's ordered attention backward; `matmul_candidates` and `own_gemm`:
  // see exec::CudaNodeRunner.
  CudaOpContext(MemorySpace& memory, cudaStream_t stream, bool deterministic, int matmul_candidates, bool own_gemm);
  // Waits for the stream, then gives back everything it allocated.
  ~CudaOpContext();
  CudaOpContext(const CudaOpContext&) = delete;
  CudaOpContext& operator=(const CudaOpContext&) = delete;

  MemorySpace& memory;
  const cudaStream_t stream;
  // A fused matmul may run as one kernel of ops/gemm_hopper.h: asked for,
  // on a Hopper GPU, in a build with sm_90a code.
  const bool hopper;
  std::unique_ptr<CublasLtMatmul> matmul;
  void* workspace = nullptr;  // allocate_workspace's
  // Per node with a choice of kernel: whether it runs on the one its op
  // prefers (cuDNN's attention; the own Hopper GEMM with the fused work in
  // its epilogue) or on the fallback.
  std::map<const graph::Node*, bool> preferred;
  // An embedding_backward that writes an accumulated value from a plain
  // product read only as its base (a tied embedding's gradient,
  // graph/fuse_embedding_add.h): the product and the scatter, each to the
  // scatter.
  std::map<const graph::Node*, const graph::Node*> tied_scatter;
  // exec::CudaNodeRunner::set_overwrite_accumulated, ::set_tied_gradient_in_place.
  bool overwrite_accumulated = false;
  bool tied_gradient_in_place = false;
  // The communicators of a rank graph's collectives, whose stream is this
  // context's (null: none).
  const CollectiveGroups* collectives = nullptr;

  // Once, after every node's cuda_prepare: the shared workspace.
  void allocate_workspace(uint64_t bytes);
  // Made by the first node that asks.
  CudnnAttention& cudnn();
  // Whether `n` adds into its accumulating output this run.
  bool accumulate(const graph::Node& n) const { return n.attrs.accumulate && !overwrite_accumulated; }
  // The embedding_backward whose tied gradient node n (it, or the product
  // that is its base) writes in place this run: on, and that scatter
  // overwriting rather than adding; null otherwise.
  const graph::Node* tied_in_place(const graph::Node& n) const;
  const float* inv_freq_on_device(const std::vector<float>& inv_freq);
  // The cosines and sines of ops::rope_table_cuda for a matmul with its rope
  // folded in, made on first use and kept.
  const float* rope_table_on_device(const std::vector<float>& inv_freq, const float* inv_freq_device, int64_t seq,
                                    int64_t head_dim, int64_t pos0);

 private:
  const bool deterministic_;
  void* matmul_workspace_ = nullptr;
  std::unique_ptr<CudnnAttention> cudnn_;
  std::map<const std::vector<float>*, void*> inv_freq_;
  std::map<std::tuple<const std::vector<float>*, int64_t, int64_t, int64_t>, void*> rope_tables_;
};

}  // namespace spillway::ops
