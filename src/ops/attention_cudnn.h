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
// cuDNN's heuristic ranks a list of plans (engine configurations) for each
// graph, and the passes run the first that builds. Benchmarks and tests can
// list the others and pin one (plan_count, plan_name, pin_plan). The
// heuristic's first has been the fastest for the 1B step's attention
// (docs/performance.md); bench/attention_cuda_bench's BM_CudnnPlans rechecks
// that after a cuDNN upgrade.
//
// One instance per thread: the handle and the cache are not locked.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
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

  // Whether cuDNN has an engine for this shape and pass (with a plan
  // pinned: whether that plan built); builds and caches the graph on first
  // use. Empty shapes (batch or seq 0) are supported.
  bool supports(const AttentionShape& shape, double scale, AttentionPass pass);

  // Device bytes the pass needs as `workspace` (0 allows nullptr), for the
  // plan it runs: the heuristic's first, or the pinned one.
  uint64_t workspace_bytes(const AttentionShape& shape, double scale, AttentionPass pass);

  // For benchmarks and tests: the heuristic's list of plans for a shape and
  // pass, in its order of preference. The first call for a (shape, scale,
  // pass) builds every plan in the list, which takes seconds, in a graph
  // cached apart from the one the passes run by default; the default path
  // never builds it. Plans that fail to build stay in the list (pinning one
  // makes supports() false and workspace_bytes() throw cuDNN's reason).
  //
  // plan_count: the list's length; 0 when cuDNN refuses the graph itself, or
  // the shape is empty.
  int plan_count(const AttentionShape& shape, double scale, AttentionPass pass);
  // The index of the plan the default path runs: the first in the list that
  // builds. Throws when none does.
  int heuristic_plan(const AttentionShape& shape, double scale, AttentionPass pass);
  // cuDNN's name for plan `index` (engine and knobs, "eng3_k2=4_k3=0..."), or
  // for the default path's plan when index is kHeuristicPlan. Throws for an
  // index outside the list.
  std::string plan_name(const AttentionShape& shape, double scale, AttentionPass pass, int index);

  static constexpr int kHeuristicPlan = -1;
  // From now on supports, workspace_bytes, forward and backward run plan
  // `index` of the list above, for every shape and both passes;
  // kHeuristicPlan (the default) returns to the heuristic's first through
  // the default path. An index outside a shape's list makes that shape
  // unsupported.
  void pin_plan(int index);
  int pinned_plan() const { return pinned_plan_; }

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
  // The shape (with the keys' count and the query offset), the scale's
  // bits, the pass, and the plan: kHeuristicPlan for
  // the default path's graph; for the graph built with every plan, one entry
  // per index into the list (sharing that graph) and one for the list as a
  // whole (attention_cudnn.cc's kWholeList).
  using PlanKey =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint32_t, AttentionPass, bool, int>;

  static PlanKey key(const AttentionShape& shape, float scale, AttentionPass pass, int index);
  // The plan the passes run now (pinned_plan_).
  Plan& plan(const AttentionShape& shape, double scale, AttentionPass pass);
  Plan& plan(const AttentionShape& shape, double scale, AttentionPass pass, int index);
  // Builds the graph with every plan of the list and files one entry per index.
  void build_every_plan(const AttentionShape& shape, float scale, AttentionPass pass);
  void bind_stream(cudaStream_t stream);

  cudnnContext* handle_ = nullptr;
  CudnnBackwardOrder backward_order_;
  int pinned_plan_ = kHeuristicPlan;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
};

}  // namespace spillway::ops
