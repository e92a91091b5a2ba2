// The launch machinery shared by the elementwise CUDA kernels (add, casts,
// SwiGLU, AdamW): an aligned body moved in 16-byte vectors, and a scalar head
// and tail for pointers or sizes that do not line up. Each op supplies a
// functor with vector(i) and scalar(i).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "base/status.h"
#include "device/cuda/cuda_check.h"

namespace spillway::ops::elementwise {

constexpr int kThreads = 256;

// Elements to take one at a time before every pointer (address, element
// size) sits on a boundary of its vector's bytes (V elements, at most 16), so
// the rest can move in 16-byte loads; -1 when no count below V aligns them all.
// A null pointer (an output not asked for) constrains nothing.
inline int64_t vector_head(std::initializer_list<std::pair<const void*, int>> pointers, int v) {
  for (int head = 0; head < v; ++head) {
    bool aligned = true;
    for (const auto& [p, size] : pointers) {
      const int boundary = v * size < 16 ? v * size : 16;
      const uintptr_t at = reinterpret_cast<uintptr_t>(p) + uintptr_t(head) * size;
      if (p != nullptr && at % boundary != 0) aligned = false;
    }
    if (aligned) return head;
  }
  return -1;
}

// Thread i handles vector i of the aligned body and scalar i of the head and
// tail together (at most 2V - 2 of them); each element is read and written at
// its own index only, which is what lets out alias an input.
template <int V, typename Op>
__global__ void __launch_bounds__(kThreads)
    elementwise_kernel(Op op, int64_t n, int64_t head, int64_t vectors) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < vectors) op.vector(head + i * V);
  const int64_t tail = head + vectors * V;
  if (i < head) {
    op.scalar(i);
  } else if (i - head < n - tail) {
    op.scalar(tail + (i - head));
  }
}

template <int V, typename Op>
inline void launch_elementwise(const char* thing, const Op& op, int64_t n, int64_t head,
                        cudaStream_t stream) {
  SPW_CHECK(n >= 0, thing, "negative element count ", n);
  int64_t vectors = 0;
  if (head < 0 || head >= n) {
    head = n;
  } else {
    vectors = (n - head) / V;
  }
  const int64_t scalars = n - vectors * V;
  const int64_t threads = vectors > scalars ? vectors : scalars;
  if (threads == 0) return;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  elementwise_kernel<V>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(op, n, head, vectors);
  SPW_CUDA(cudaGetLastError());
}

}  // namespace spillway::ops::elementwise
