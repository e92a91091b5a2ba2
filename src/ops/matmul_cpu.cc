#include "ops/matmul.h"

#include <cblas.h>

#include <climits>

#include "base/status.h"

namespace spillway::ops {

namespace {

void check_dims(int64_t m, int64_t n, int64_t k) {
  SPW_CHECK(m >= 0 && n >= 0 && k >= 0, "matmul", "negative size m=", m, " n=", n, " k=", k);
  // OpenBLAS takes 32-bit sizes and leading dimensions.
  SPW_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "matmul",
            "size past OpenBLAS's 32-bit limit: m=", m, " n=", n, " k=", k);
}

// With k == 0 the product is empty and BLAS may return without touching C, so
// C = beta * C is done here; beta == 0 writes zeros, so old NaNs do not survive.
template <typename T>
void scale_c(int64_t count, T beta, T* c) {
  if (beta == T(0)) {
    for (int64_t i = 0; i < count; ++i) c[i] = T(0);
  } else {
    for (int64_t i = 0; i < count; ++i) c[i] *= beta;
  }
}

template <typename T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, T alpha, const T* a, int lda,
          const T* b, int ldb, T beta, T* c, int ldc);

template <>
void gemm<float>(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <>
void gemm<double>(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
                  const double* a, int lda, const double* b, int ldb, double beta, double* c,
                  int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
            const T* b, T beta, T* c) {
  check_dims(m, n, k);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m * n, beta, c);
    return;
  }
  // Row-major: each leading dimension is the length of a stored row.
  int lda = static_cast<int>(trans_a ? m : k);
  int ldb = static_cast<int>(trans_b ? k : n);
  gemm<T>(trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
          static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b, ldb,
          beta, c, static_cast<int>(n));
}

template void matmul<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*,
                            const float*, float, float*);
template void matmul<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*,
                             const double*, double, double*);

}  // namespace spillway::ops
