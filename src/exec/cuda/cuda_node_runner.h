// Runs graph nodes on one CUDA stream through their ops' definitions
// (graph::OpDef::cuda, beside the GPU kernels in src/ops/: bf16
// activations, fp32 statistics and parameter gradients). Work is only
// enqueued; the stream's order is what makes the executor's frees at last
// use safe.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "device/memory_space.h"
#include "device/stream.h"
#include "exec/executor.h"
#include "ops/cuda_op_context.h"

namespace spillway::exec {

class CudaNodeRunner final : public NodeRunner {
 public:
  // Sizes and allocates, from `memory`, the one workspace every node of
  // `graph` can share, and chooses cuDNN or the own kernel per attention node.
  // `deterministic` picks cuDNN's ordered attention backward (bitwise
  // repeatable; slower, and it needs a workspace of b*h*s*s*2 bytes) over
  // its atomic one. `matmul_candidates`: see CublasLtMatmul's timed_candidates.
  // `own_gemm`: a matmul that also writes its SwiGLU gate, or that writes
  // SwiGLU's backward instead of its product (graph/fuse_matmul_swiglu.h),
  // or that rotates its product by RoPE (graph/fuse_matmul_rope.h), runs as
  // one kernel of ops/gemm_hopper.h on a Hopper GPU; off, or elsewhere, it
  // is cuBLASLt then the separate kernel.
  // Kernels go to `stream`, a CUDA device's compute stream.
  // Collective nodes (a tensor-parallel rank's graph) go through
  // `collectives` on `stream` (none: a graph without them).
  CudaNodeRunner(const graph::Graph& graph, MemorySpace& memory, Stream& stream, bool deterministic = true,
                 int matmul_candidates = 1, bool own_gemm = true, const ops::CollectiveGroups* collectives = nullptr);
  ~CudaNodeRunner() override;

  void run(const graph::Graph& graph, const graph::Node& node, const std::vector<void*>& data) override;
  void synchronize() override;

  // How many attention nodes run through cuDNN (the rest use the own kernel),
  // as "attention through cuDNN in 64 of 64 nodes".
  int cudnn_attention_nodes() const;
  std::string attention_summary() const;
  // How many q|k|v projections with their RoPE, gate|up projections with
  // their SwiGLU gate, and down dX products with SwiGLU's backward run as
  // the own Hopper GEMM, as "q|k|v with its RoPE in the own Hopper GEMM in
  // 16 of 16 nodes; gate|up with its SwiGLU gate in the own Hopper GEMM in
  // 16 of 16 nodes; ..."; each part left out when the graph has no such node.
  // A tied embedding's gradient made in place (set_tied_gradient_in_place)
  // is said last.
  std::string gemm_summary() const;

  // While on, nodes that add into an accumulated value (NodeAttrs::accumulate)
  // write it instead: the first micro-batch of an optimizer step then needs
  // no zeroed gradient buffers, and its matmuls no read of them (beta = 0).
  // Adding a result to zero gives the result's bits, so nothing else changes.
  void set_overwrite_accumulated(bool on);

  // For a caller whose accumulated values stay bound to its buffers for the
  // whole step (the all-on-device engine). While overwriting (above), a
  // tied embedding's gradient skips a pass over the table: the product that
  // is the embedding_backward's base (lm_head's dW, graph/fuse_embedding_add.h)
  // is written straight into the gradient's buffer, and the scatter then adds
  // the batch's rows there, instead of the product going to a buffer of its
  // own that the scatter reads whole to write base + sum. The same bits,
  // except that a row no token uses keeps a product of -0 where base + 0
  // would make it +0 (as overwriting itself keeps a -0 that 0 + -0 would
  // not): AdamW and the gradient norm treat the two zeros alike.
  void set_tied_gradient_in_place(bool on);

 private:
  // Each node's kernels, choices and shared buffers, reached through its
  // op's definition (graph::OpDef::cuda_prepare, ::cuda).
  std::unique_ptr<ops::CudaOpContext> cuda_;
};

}  // namespace spillway::exec
