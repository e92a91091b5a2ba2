#include "ops/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "base/status.h"

namespace spillway::ops {

namespace {

// The number of leading heads to rotate (-1: all of them).
int64_t check_rope_shape(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotated_heads) {
  SPW_CHECK(batch >= 0 && seq >= 0 && heads >= 0, "rope",
            "negative size: batch ", batch, ", seq ", seq, ", heads ", heads);
  SPW_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope",
            "head_dim must be positive and even, got ", head_dim);
  SPW_CHECK(rotated_heads <= heads, "rope", "cannot rotate ", rotated_heads, " of ", heads, " heads");
  return rotated_heads < 0 ? heads : rotated_heads;
}

// Rotates the first `rotated` heads of every token by +angle (sign 1) or
// -angle (sign -1) and copies the others.
// cos and sin depend only on the token, so each (batch, token) computes them
// once and reuses them across heads. Each pair (i, i + half) is read before it
// is written, which is what lets out alias x.
template <typename T>
void rotate(const T* x, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
            const float* inv_freq, int64_t pos0, T sign, int64_t rotated, const int32_t* positions) {
  const int64_t half = head_dim / 2;
  const int64_t row = heads * head_dim;
#pragma omp parallel if (batch * seq * row > (1 << 14))
  {
    std::vector<T> cos_t(static_cast<size_t>(half));
    std::vector<T> sin_t(static_cast<size_t>(half));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < seq; ++t) {
        const T pos = static_cast<T>(pos0 + (positions ? positions[b * seq + t] : t));
        for (int64_t i = 0; i < half; ++i) {
          const T angle = pos * static_cast<T>(inv_freq[i]);
          cos_t[i] = std::cos(angle);
          sin_t[i] = sign * std::sin(angle);
        }
        const int64_t offset = (b * seq + t) * row;
        for (int64_t h = 0; h < heads; ++h) {
          const T* xh = x + offset + h * head_dim;
          T* oh = out + offset + h * head_dim;
          if (h >= rotated) {
            if (oh != xh) std::copy(xh, xh + head_dim, oh);  // in place, a carried head stays as it is
            continue;
          }
          for (int64_t i = 0; i < half; ++i) {
            const T lo = xh[i];
            const T hi = xh[i + half];
            oh[i] = lo * cos_t[i] - hi * sin_t[i];
            oh[i + half] = hi * cos_t[i] + lo * sin_t[i];
          }
        }
      }
    }
  }
}

}  // namespace

// Every step runs in float32 in the order transformers evaluates it (its
// `a / tensor` is `tensor.reciprocal() * a`), so the table matches its buffer.
std::vector<float> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling) {
  SPW_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope_inv_freq",
            "head_dim must be positive and even, got ", head_dim);
  SPW_CHECK(theta > 0, "rope_inv_freq", "theta must be positive, got ", theta);
  const int64_t half = head_dim / 2;
  const float base = static_cast<float>(theta);
  const float dim = static_cast<float>(head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / dim;
    inv_freq[i] = 1.0f / std::pow(base, exponent);
  }
  if (!scaling.llama3) return inv_freq;

  SPW_CHECK(scaling.factor > 0 && scaling.low_freq_factor > 0 &&
                scaling.high_freq_factor > scaling.low_freq_factor &&
                scaling.original_max_position_embeddings > 0,
            "rope_inv_freq", "llama3 scaling needs factor > 0, 0 < low_freq_factor < ",
            "high_freq_factor and original_max_position_embeddings > 0; got factor ",
            scaling.factor, ", low ", scaling.low_freq_factor, ", high ",
            scaling.high_freq_factor, ", original ", scaling.original_max_position_embeddings);
  const double original = static_cast<double>(scaling.original_max_position_embeddings);
  const float factor = static_cast<float>(scaling.factor);
  const float low = static_cast<float>(scaling.low_freq_factor);
  const float low_freq_wavelen = static_cast<float>(original / scaling.low_freq_factor);
  const float high_freq_wavelen = static_cast<float>(original / scaling.high_freq_factor);
  const float band = static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
  const float two_pi = static_cast<float>(2 * std::numbers::pi);
  const float original_f = static_cast<float>(original);
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * two_pi;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
      continue;
    }
    const float smooth = ((1.0f / wavelen) * original_f - low) / band;
    f = (1.0f - smooth) * f / factor + smooth * f;
  }
  return inv_freq;
}

template <typename T>
void rope_forward(const T* x, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                  const float* inv_freq, int64_t pos0, int64_t rotated_heads, const int32_t* positions) {
  const int64_t rotated = check_rope_shape(batch, seq, heads, head_dim, rotated_heads);
  rotate(x, out, batch, seq, heads, head_dim, inv_freq, pos0, T(1), rotated, positions);
}

template <typename T>
void rope_backward(const T* dout, T* dx, int64_t batch, int64_t seq, int64_t heads,
                   int64_t head_dim, const float* inv_freq, int64_t pos0, int64_t rotated_heads,
                   const int32_t* positions) {
  const int64_t rotated = check_rope_shape(batch, seq, heads, head_dim, rotated_heads);
  rotate(dout, dx, batch, seq, heads, head_dim, inv_freq, pos0, T(-1), rotated, positions);
}

template void rope_forward<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t,
                                  const float*, int64_t, int64_t, const int32_t*);
template void rope_forward<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t,
                                   const float*, int64_t, int64_t, const int32_t*);
template void rope_backward<float>(const float*, float*, int64_t, int64_t, int64_t, int64_t,
                                   const float*, int64_t, int64_t, const int32_t*);
template void rope_backward<double>(const double*, double*, int64_t, int64_t, int64_t, int64_t,
                                    const float*, int64_t, int64_t, const int32_t*);

}  // namespace spillway::ops
