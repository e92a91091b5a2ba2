// Matrix product, the one op that does nearly all of a transformer's FLOPs.
//
// Contract (row-major, contiguous):
//   C[m, n] = alpha * op(A) * op(B) + beta * C
//   A is [m, k], or [k, m] when trans_a; B is [k, n], or [n, k] when trans_b.
//   beta = 0 overwrites C (its old contents, even NaN, are ignored).
//
// Backward (the graph emits these as further matmuls), for Y = op(A) op(B):
//   Y = A B     : dA = dY B^T,   dB = A^T dY
//   Y = A B^T   : dA = dY B,     dB = dY^T A      (a linear layer, W stored [out, in])
//   Y = A^T B   : dA = B dY^T,   dB = A dY
//   Y = A^T B^T : dA = B^T dY^T, dB = dY^T A^T
//
// CPU: OpenBLAS sgemm/dgemm.
#pragma once

#include <cstdint>

namespace spillway::ops {

template <typename T>
void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
            const T* b, T beta, T* c);

}  // namespace spillway::ops
