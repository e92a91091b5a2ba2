// Causal self-attention with grouped-query heads, computed flash-style: keys
// are visited in blocks with an online softmax, so memory stays O(seq * dim)
// and the [seq, seq] score matrix never exists.
//
// Contract:
//   q   [batch, seq, q_heads * head_dim]    (the q projection's output as is)
//   k,v [batch, seq, kv_heads * head_dim]   q_heads % kv_heads == 0; query head
//                                           h reads kv head h / (q_heads / kv_heads)
//   out [batch, seq, q_heads * head_dim]
//   lse [batch, q_heads, seq]  log-sum-exp of row t's scaled scores, for backward
//   scores s[t, u] = scale * q[t] . k[u] for u <= t; out[t] = softmax(s[t]) v
//
// Backward (FlashAttention-2): with P = exp(s - lse) rebuilt block by block
// and D[t] = dout[t] . out[t]:
//   dv[u] = sum_t P[t,u] dout[t]          (summed over the query heads of the group)
//   dS    = P * (dout v^T - D)
//   dq[t] = scale * sum_u dS[t,u] k[u]
//   dk[u] = scale * sum_t dS[t,u] q[t]    (summed over the query heads of the group)
// dq, dk, dv are overwritten; every sum runs in a fixed order.
//
// Documents (packed training rows): `doc_starts` null is the plain causal
// mask above. Otherwise it is [batch, seq] int32, the position in its row
// where token t's document starts, and query t sees only keys u with
// doc_starts[t] <= u <= t: attention never crosses from one packed example
// into another. Documents are contiguous runs, so each entry is either its
// own position (a document starts there) or the entry before it
// (check_doc_starts says so for the CPU; the GPU kernels rely on it).
#pragma once

#include <cstdint>

namespace spillway::ops {

struct AttentionShape {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 1;
  // q, k and v (and dq, dk, dv) are column blocks of one packed
  // [batch, seq, (q_heads + 2 kv_heads) * head_dim] tensor, a row apart by
  // that width; out and dout stay [batch, seq, q_heads * head_dim]. Only
  // cuDNN reads this layout; the own kernels and the CPU reference refuse it
  // (their callers unpack).
  bool packed_qkv = false;
  // Context parallelism: the queries are positions [q_start, q_start + seq)
  // of a sequence whose keys and values k, v hold [0, kv_seq) (0: seq, the
  // plain case); query t sees keys u <= q_start + t. The CPU's reference
  // (attention_offset_cpu.cc) and cuDNN (its causal band moved right by
  // q_start) run it; the own GPU kernels do not.
  int64_t kv_seq = 0;
  int64_t q_start = 0;

  int64_t keys() const { return kv_seq > 0 ? kv_seq : seq; }
  bool offset() const { return q_start != 0 || keys() != seq; }
  int64_t q_width() const { return q_heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  // A packed q|k|v row: q's columns, then k's, then v's.
  int64_t packed_width() const { return q_width() + 2 * kv_width(); }
};

// The offset case (AttentionShape::offset()), row by row in T: what
// attention_forward and attention_backward run for it. No documents.
template <typename T>
void attention_offset_forward(const T* q, const T* k, const T* v, T* out, T* lse, const AttentionShape& shape,
                              double scale);
template <typename T>
void attention_offset_backward(const T* dout, const T* q, const T* k, const T* v, const T* out, const T* lse, T* dq,
                               T* dk, T* dv, const AttentionShape& shape, double scale);

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse,
                       const AttentionShape& shape, double scale,
                       const int32_t* doc_starts = nullptr);

template <typename T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const T* lse, T* dq, T* dk, T* dv, const AttentionShape& shape,
                        double scale, const int32_t* doc_starts = nullptr);

// Error naming `thing`, the row and the position where doc_starts [batch,
// seq] is not a run of contiguous documents (see above).
void check_doc_starts(const int32_t* doc_starts, int64_t batch, int64_t seq, const char* thing);

}  // namespace spillway::ops

#ifdef SPILLWAY_HAS_CUDA
#include <cuda_runtime_api.h>

#include "base/dtype.h"

namespace spillway::ops {

// GPU, own flash kernel (the reference for cuDNN's, and the fallback for the
// shapes cuDNN refuses): bf16 q, k, v, out, dout, dq, dk, dv; fp32 lse and
// fp32 math on tensor cores. Same contract as above; any head_dim up to
// kAttentionCudaMaxHeadDim; every result is bitwise repeatable.
inline constexpr int64_t kAttentionCudaMaxHeadDim = 128;

// doc_starts: as above, device memory, or null.
void attention_forward_cuda(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                            const AttentionShape& shape, double scale, cudaStream_t stream,
                            const int32_t* doc_starts = nullptr);

// Device bytes attention_backward_cuda needs as `workspace`: the row terms D,
// fp32 [batch, q_heads, seq].
uint64_t attention_backward_cuda_workspace_bytes(const AttentionShape& shape);

void attention_backward_cuda(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                             const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                             const AttentionShape& shape, double scale, void* workspace,
                             cudaStream_t stream, const int32_t* doc_starts = nullptr);

}  // namespace spillway::ops
#endif
