// Causal GQA attention through cuDNN's fused flash attention (SDPA), forward
// and backward, with the contract of ops/attention.h on the GPU: bf16 q, k,
// v, out, dout, dq, dk, dv; fp32 lse [batch, q_heads, seq] (cuDNN's softmax
// stats are exactly that: natural-log log-sum-exp of the scaled scores, one
// per row, stored packed batch, head, position).
//
// Building a cuDNN graph costs milliseconds to seconds (heuristics, kernel
// compilation), so each (shape, scale, pass) is built once and cached. cuDNN
// refuses some shapes (head_dim not a multiple of 8 or above its limits, old
// GPUs; the backward at seq 1): supports() says so without throwing, and the
// caller falls back to attention_forward_cuda / attention_backward_cuda, whose
// lse is interchangeable with cuDNN's.
//
// One instance per thread: the handle and the cache are not locked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "base/dtype.h"
#include "ops/attention.h"

struct cudnnContext;

namespace spillway::ops {

// cuDNN's backward on Hopper sums dq with atomics by default: the fastest,
// but the last bits of dq change from run to run. The deterministic
// algorithm is bitwise repeatable and needs a workspace of about
// batch * q_heads * seq^2 * 2 bytes (cuDNN 9.19 on Hopper).
enum class CudnnBackwardOrder { kDeterministic, kAtomic };

enum class AttentionPass { kForward, kBackward };

class CudnnAttention {
 public:
  // Creates the cuDNN handle on the current device.
  explicit CudnnAttention(CudnnBackwardOrder backward_order);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  CudnnBackwardOrder backward_order() const { return backward_order_; }

  // Whether cuDNN has an engine for this shape and pass; builds and caches
  // the graph on first use. Empty shapes (batch or seq 0) are supported.
  bool supports(const AttentionShape& shape, double scale, AttentionPass pass);

  // Device bytes the pass needs as `workspace` (0 allows nullptr).
  uint64_t workspace_bytes(const AttentionShape& shape, double scale, AttentionPass pass);

  // Throw spillway::Error naming the cuDNN call when cuDNN refuses the shape
  // or fails. Pointers to bf16 tensors must be 16-byte aligned. With
  // shape.packed_qkv, q, k, v (dq, dk, dv) point at the column blocks of one
  // packed tensor: base, base + q_heads * head_dim, base + (q_heads + kv_heads) * head_dim.
  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
               const AttentionShape& shape, double scale, void* workspace, cudaStream_t stream);
  void backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                const float* lse, bf16* dq, bf16* dk, bf16* dv, const AttentionShape& shape,
                double scale, void* workspace, cudaStream_t stream);

 private:
  struct Plan;
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, AttentionPass, bool>;

  Plan& plan(const AttentionShape& shape, double scale, AttentionPass pass);
  void bind_stream(cudaStream_t stream);

  cudnnContext* handle_ = nullptr;
  CudnnBackwardOrder backward_order_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace spillway::ops
