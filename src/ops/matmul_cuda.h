// The GPU matrix product, through cuBLASLt. Same contract as ops/matmul.h:
// row-major and contiguous, C[m, n] = alpha * op(A) * op(B) + beta * C, A is
// [m, k] ([k, m] when trans_a), B is [k, n] ([n, k] when trans_b), and
// beta = 0 ignores C's old contents (NaN included).
//
// Types: A and B bf16 with C bf16 or f32, or all three f32. Products are
// accumulated in fp32 (CUBLAS_COMPUTE_32F); the f32 path is exact fp32 (no
// TF32 tensor cores, no emulation). beta = 1 into an f32 C accumulates
// gradients across micro-batches.
//
// A CublasLtMatmul is made for one device and one stream at a time: its
// workspace is shared by every call, so two streams that multiply at once
// each need their own. It is not thread-safe (its plan cache grows on first
// use of a shape).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

#include "base/dtype.h"

namespace spillway::ops {

// What cuBLASLt's choice of algorithm depends on, so plans are cached by it.
struct MatmulKey {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  DType a_type = DType::bf16, b_type = DType::bf16, c_type = DType::bf16;
  // beta = 0 lets a plan be timed by writing C (see timed_candidates).
  bool beta_zero = true;
  // Pointer alignments in bytes (a power of two, at most 256). The heuristic
  // assumes 256 unless told otherwise, and a kernel chosen for 256 may fault
  // on a view that starts inside an allocation.
  uint32_t a_align = 256, b_align = 256, c_align = 256;

  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const;
};

// The descriptors and algorithm for one key, made once and reused.
struct MatmulPlan {
  MatmulPlan() = default;
  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  cublasLtMatmulDesc_t desc = nullptr;
  // Layouts of the caller's buffers as cuBLASLt (column-major) sees them;
  // see matmul_cuda.cc for why A and B change places.
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, c_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  uint64_t workspace_bytes = 0;  // what the algorithm needs, at most the workspace
  int candidates = 0;            // heuristic results considered (timed when more than 1)
  int pinned = -1;               // the candidate CublasLtMatmul::pin_candidate chose, if any

  // "algo 66 tile 24 stages 35 cluster 5 splitK 1 reduction 0 ws 4 B
  // (heuristic's first)", for benchmarks and logs.
  std::string describe() const;
};

class CublasLtMatmul {
 public:
  static constexpr uint64_t kDefaultWorkspaceBytes = 64ull << 20;

  // Allocates the workspace once, here, on the current device.
  // timed_candidates = 1 takes the heuristic's first choice. More makes the
  // first call of each shape time up to that many of the heuristic's
  // candidates on the caller's buffers (synchronizing the stream) and keep the
  // fastest. Only bf16 tensor-core algorithms that sum every element over
  // the whole of k in one pass, as the first does, take part (no split-k, no
  // reduction scheme), so the choice, which can differ between processes,
  // does not change the bits (tests/ops/matmul_cuda_test checks every
  // candidate on the training step's shapes); fp32 products keep the
  // heuristic's first. The heuristic's first is slow on some step shapes
  // when they run alone (docs/performance.md). Shapes first met
  // accumulating in place (beta != 0 without a separate addend) take the
  // heuristic's choice, since timing would overwrite the C they add into.
  explicit CublasLtMatmul(uint64_t workspace_bytes = kDefaultWorkspaceBytes,
                          int timed_candidates = 1);
  // Uses the caller's workspace: device memory on the current device,
  // 256-byte aligned, outliving this object.
  CublasLtMatmul(void* workspace, uint64_t workspace_bytes, int timed_candidates = 1);
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  // Enqueues C = alpha * op(A) * op(B) + beta * C on `stream`. Pointers are
  // device memory on this object's device.
  void run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const void* a, DType a_type, const void* b, DType b_type, float beta, void* c,
           DType c_type, cudaStream_t stream);

  // Enqueues out = op(A) * op(B) + addend (C read from `addend`, D written
  // to `out`, same type and layout): an add folded into the product.
  void run_with_addend(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a, DType a_type,
                       const void* b, DType b_type, const void* addend, void* out, DType c_type,
                       cudaStream_t stream);
  // The key run() files these arguments under.
  static MatmulKey key_for(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                           const void* a, DType a_type, const void* b, DType b_type, float beta,
                           const void* c, DType c_type);
  // The cached plan, or nullptr before the key's first run. Plans stay at the
  // same address for this object's lifetime.
  const MatmulPlan* find_plan(const MatmulKey& key) const;
  size_t plan_count() const { return plans_.size(); }

  // Tests: plans made from now on take the index-th candidate (the last when
  // there are fewer) instead of timing them.
  void pin_candidate(int index) { pinned_candidate_ = index; }

  int device() const { return device_; }
  uint64_t workspace_bytes() const { return workspace_bytes_; }

 private:
  // Timing candidates runs D = A*B + beta*C with C read from c_in (or c).
  const MatmulPlan& plan_for(const MatmulKey& key, const void* a, const void* b, void* c,
                             const void* c_in, float beta, cudaStream_t stream);
  // run() for k > 0, with `workspace` (a 256-byte aligned part of this
  // object's) given to cuBLASLt.
  void multiply(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const void* a, DType a_type, const void* b, DType b_type, float beta, void* c,
                DType c_type, void* workspace, uint64_t workspace_bytes, cudaStream_t stream,
                const void* c_in = nullptr);  // C read from here when given (D is always c)
  // run() for k = 0: C = beta * C.
  void scale_only(int64_t m, int64_t n, float beta, void* c, DType ab_type, DType c_type,
                  cudaStream_t stream);

  int device_ = 0;
  int timed_candidates_ = 1;
  int pinned_candidate_ = -1;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  uint64_t workspace_bytes_ = 0;
  bool owns_workspace_ = false;
  std::unordered_map<MatmulKey, std::unique_ptr<MatmulPlan>, MatmulKeyHash> plans_;
};

}  // namespace spillway::ops
