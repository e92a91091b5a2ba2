#include "ops/adamw.h"

#include <cmath>

#include "base/status.h"

namespace spillway::ops {

namespace {

// Moments stored as M, computed in T: the identity for M = T; bf16 widens
// exactly on load and rounds to nearest even on store.
template <typename T>
inline T load_moment(T x) { return x; }
inline float load_moment(bf16 x) { return to_float(x); }
template <typename T>
inline void store_moment(T& out, T x) { out = x; }
inline void store_moment(bf16& out, float x) { out = to_bf16(x); }

// The step's scalars are formed in double, as Python forms them for torch, and
// each enters the element arithmetic rounded to T, as torch's scalar operands do.
template <typename T, typename M>
void adamw_step(T* param, const T* grad, M* m, M* v, int64_t n, const AdamWHyper& hp) {
  SPW_CHECK(hp.step >= 1, "adamw", "step counts from 1, got ", hp.step);
  const double t = static_cast<double>(hp.step);
  const T decay = static_cast<T>(1.0 - hp.lr * hp.weight_decay);
  const T beta1 = static_cast<T>(hp.beta1);
  const T one_minus_beta1 = static_cast<T>(1.0 - hp.beta1);
  const T beta2 = static_cast<T>(hp.beta2);
  const T one_minus_beta2 = static_cast<T>(1.0 - hp.beta2);
  const T step_size = static_cast<T>(hp.lr / (1.0 - std::pow(hp.beta1, t)));
  const T correction2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(hp.beta2, t)));
  const T eps = static_cast<T>(hp.eps);
  const T grad_scale = static_cast<T>(hp.grad_scale);

#pragma omp parallel for simd schedule(static) if (n > (1 << 15))
  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i] * grad_scale;
    const T p = param[i] * decay;
    const T mi = beta1 * load_moment(m[i]) + one_minus_beta1 * g;
    const T vi = beta2 * load_moment(v[i]) + one_minus_beta2 * g * g;
    const T denom = std::sqrt(vi) / correction2_sqrt + eps;
    store_moment(m[i], mi);
    store_moment(v[i], vi);
    param[i] = p - step_size * mi / denom;  // the unrounded moments of this step
  }
}

}  // namespace

template <typename T>
void adamw_update(T* param, const T* grad, T* m, T* v, int64_t n, const AdamWHyper& hp) {
  adamw_step<T, T>(param, grad, m, v, n, hp);
}

void adamw_update_bf16_moments(float* param, const float* grad, bf16* m, bf16* v, int64_t n,
                               const AdamWHyper& hp) {
  adamw_step<float, bf16>(param, grad, m, v, n, hp);
}

template void adamw_update<float>(float*, const float*, float*, float*, int64_t,
                                  const AdamWHyper&);
template void adamw_update<double>(double*, const double*, double*, double*, int64_t,
                                   const AdamWHyper&);

}  // namespace spillway::ops
