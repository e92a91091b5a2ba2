#include "ops/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "base/status.h"
#include "ops/simd_cpu.h"

namespace spillway::ops {

namespace {

// Queries and keys are visited in square tiles of this edge. Because the two
// edges are equal, a query tile and the key tile of the same index start at
// the same position, so that tile is the only one the causal mask cuts.
constexpr int64_t kBlock = 64;

// tile_product builds its output in segments of 64 bytes of a row (16 floats,
// 8 doubles) and kProductRows rows at once: eight vector accumulators on any
// target, few enough to stay in registers, enough to keep the adders busy.
constexpr int64_t kSegmentVectors = 64 / kVectorBytes;
constexpr int64_t kProductRows = 8 / kSegmentVectors;

// Below this many score entries times head_dim, waking the thread team costs
// more than the work; the result does not depend on the choice.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;

int64_t block_count(int64_t seq) { return (seq + kBlock - 1) / kBlock; }

bool worth_threads(const AttentionShape& s) {
  return s.batch * s.q_heads * s.seq * s.seq * s.head_dim >= kMinParallelWork;
}

void check_shape(const AttentionShape& s) {
  SPW_CHECK(!s.packed_qkv, "attention", "the CPU kernel takes q, k and v as separate tensors, not packed");
  SPW_CHECK(s.batch >= 0 && s.seq >= 0, "attention", "negative size: batch ", s.batch, ", seq ",
            s.seq);
  SPW_CHECK(s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0, "attention",
            "q_heads, kv_heads and head_dim must be positive, got ", s.q_heads, ", ", s.kv_heads,
            ", ", s.head_dim);
  SPW_CHECK(s.q_heads % s.kv_heads == 0, "attention", "q_heads ", s.q_heads,
            " is not a multiple of kv_heads ", s.kv_heads);
}

// One segment of `rows` rows of c (see tile_product), accumulated in
// registers while k walks down the rows of b, so each load of b feeds every row.
template <typename T, int64_t rows>
void product_segment(int64_t depth, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                     int64_t ldc, bool accumulate) {
  using V = Simd<T>;
  typename V::Vec acc[rows][kSegmentVectors];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < kSegmentVectors; ++s) {
      acc[r][s] = accumulate ? V::load(c + r * ldc + s * V::kLanes) : typename V::Vec{};
    }
  }
  for (int64_t k = 0; k < depth; ++k) {
    typename V::Vec bk[kSegmentVectors];
    for (int64_t s = 0; s < kSegmentVectors; ++s) bk[s] = V::load(b + k * ldb + s * V::kLanes);
    for (int64_t r = 0; r < rows; ++r) {
      const T ark = a[r * lda + k];
      for (int64_t s = 0; s < kSegmentVectors; ++s) acc[r][s] += ark * bk[s];
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < kSegmentVectors; ++s) V::store(c + r * ldc + s * V::kLanes, acc[r][s]);
  }
}

// c[m, n] = (c[m, n] if accumulate) + sum_k a[m, k] * b[k, n] for an M x N
// tile; all three are row-major with the given row strides. Every sum runs in
// k order, in the vector segments and in the scalar tail columns alike, so a
// result depends on the shapes alone, never on which thread computes it.
template <typename T>
void tile_product(int64_t rows, int64_t cols, int64_t depth, const T* a, int64_t lda, const T* b,
                  int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  constexpr int64_t segment = kSegmentVectors * Simd<T>::kLanes;
  const int64_t whole = cols - cols % segment;
  for (int64_t n0 = 0; n0 < whole; n0 += segment) {
    int64_t m = 0;
    for (; m + kProductRows <= rows; m += kProductRows) {
      product_segment<T, kProductRows>(depth, a + m * lda, lda, b + n0, ldb, c + m * ldc + n0, ldc,
                                       accumulate);
    }
    for (; m < rows; ++m) {
      product_segment<T, 1>(depth, a + m * lda, lda, b + n0, ldb, c + m * ldc + n0, ldc,
                            accumulate);
    }
  }
  if (whole == cols) return;
  for (int64_t m = 0; m < rows; ++m) {
    const T* am = a + m * lda;
    T* cm = c + m * ldc;
    for (int64_t n = whole; n < cols; ++n) {
      T acc = accumulate ? cm[n] : T(0);
      for (int64_t k = 0; k < depth; ++k) acc += am[k] * b[k * ldb + n];
      cm[n] = acc;
    }
  }
}

// dst[d, r] = src[r * stride + d] for r < rows, d < dim: a tile of rows
// turned into columns (dst row stride kBlock), so it can be the b operand of
// tile_product.
template <typename T>
void transpose_rows(const T* src, int64_t stride, int64_t rows, int64_t dim, T* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* sr = src + r * stride;
    for (int64_t d = 0; d < dim; ++d) dst[d * kBlock + r] = sr[d];
  }
}


inline float softmax_exp(float x) { return exp_float(x); }
inline double softmax_exp(double x) { return std::exp(x); }

// p[j] = exp(p[j] * scale - shift[j]) for j < n, or minus shift[0] for every
// j when the shift is shared.
inline void exp_row(float* p, int64_t n, float scale, const float* shift, bool shared_shift) {
  using V = Simd<float>;
  const int64_t whole = n - n % V::kLanes;
  for (int64_t j = 0; j < whole; j += V::kLanes) {
    const FloatVec s = shared_shift ? FloatVec{} + shift[0] : V::load(shift + j);
    V::store(p + j, exp_float(V::load(p + j) * scale - s));
  }
  for (int64_t j = whole; j < n; ++j) p[j] = exp_float(p[j] * scale - shift[shared_shift ? 0 : j]);
}

inline void exp_row(double* p, int64_t n, double scale, const double* shift, bool shared_shift) {
  for (int64_t j = 0; j < n; ++j) p[j] = std::exp(p[j] * scale - shift[shared_shift ? 0 : j]);
}

// max(init, p[0], ..., p[n-1]), taken lane-wise first so that it vectorizes;
// max is exact, so the grouping changes nothing.
template <typename T>
T max_of(const T* p, int64_t n, T init) {
  using V = Simd<T>;
  const int64_t whole = n - n % V::kLanes;
  typename V::Vec lanes = typename V::Vec{} + init;
  for (int64_t j = 0; j < whole; j += V::kLanes) {
    const typename V::Vec x = V::load(p + j);
    lanes = lanes > x ? lanes : x;
  }
  T result = init;
  for (int64_t l = 0; l < V::kLanes; ++l) result = std::max(result, lanes[l]);
  for (int64_t j = whole; j < n; ++j) result = std::max(result, p[j]);
  return result;
}

// p[0] + ... + p[n-1], summed lane-wise and then lane by lane, then the tail:
// a fixed order that vectorizes (a strict left-to-right sum would not).
template <typename T>
T sum_of(const T* p, int64_t n) {
  using V = Simd<T>;
  const int64_t whole = n - n % V::kLanes;
  typename V::Vec lanes{};
  for (int64_t j = 0; j < whole; j += V::kLanes) lanes += V::load(p + j);
  T result = 0;
  for (int64_t l = 0; l < V::kLanes; ++l) result += lanes[l];
  for (int64_t j = whole; j < n; ++j) result += p[j];
  return result;
}

// How many of the `visible` keys from j0 on lie before query t's document
// (none without documents).
inline int64_t hidden_keys(const int32_t* starts, int64_t t, int64_t j0, int64_t visible) {
  if (!starts) return 0;
  return std::clamp<int64_t>(starts[t] - j0, 0, visible);
}

// Strides and base offsets of the [batch, seq, heads * head_dim] layouts.
struct Layout {
  int64_t seq, q_heads, kv_heads, dim, group, q_stride, kv_stride;
  explicit Layout(const AttentionShape& s)
      : seq(s.seq),
        q_heads(s.q_heads),
        kv_heads(s.kv_heads),
        dim(s.head_dim),
        group(s.q_heads / s.kv_heads),
        q_stride(s.q_heads * s.head_dim),
        kv_stride(s.kv_heads * s.head_dim) {}
  // Row t of query head h (q, out, dout, dq) and of kv head g (k, v, dk, dv).
  int64_t q_at(int64_t b, int64_t t, int64_t h) const { return (b * seq + t) * q_stride + h * dim; }
  int64_t kv_at(int64_t b, int64_t t, int64_t g) const {
    return (b * seq + t) * kv_stride + g * dim;
  }
  // Row t of query head h in lse and in the backward's D.
  int64_t stat_at(int64_t b, int64_t h, int64_t t) const { return (b * q_heads + h) * seq + t; }
};

}  // namespace

void check_doc_starts(const int32_t* doc_starts, int64_t batch, int64_t seq, const char* thing) {
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* row = doc_starts + b * seq;
    for (int64_t t = 0; t < seq; ++t) {
      const bool starts_here = row[t] == t;
      const bool continues = t > 0 && row[t] == row[t - 1];
      SPW_CHECK(starts_here || continues, thing, "document start ", row[t], " at row ", b, " position ", t,
                " is neither the position itself nor the start before it");
    }
  }
}

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, T* out, T* lse,
                       const AttentionShape& shape, double scale, const int32_t* doc_starts) {
  check_shape(shape);
  if (shape.offset()) {
    SPW_CHECK(!doc_starts, "attention", "documents and a query offset together are not supported");
    return attention_offset_forward(q, k, v, out, lse, shape, scale);
  }
  if (doc_starts) check_doc_starts(doc_starts, shape.batch, shape.seq, "attention");
  const Layout at(shape);
  const int64_t dim = at.dim;
  const int64_t blocks = block_count(shape.seq);
  const T scale_t = static_cast<T>(scale);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const bool threaded = worth_threads(shape);

#pragma omp parallel if (threaded)
  {
    std::vector<T> k_cols(static_cast<size_t>(dim * kBlock));
    std::vector<T> probs(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> acc(static_cast<size_t>(kBlock * dim));
    std::vector<T> row_max(kBlock), row_sum(kBlock);

    // Later query tiles see more keys, so they are handed out first.
#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t r = 0; r < blocks; ++r) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        for (int64_t h = 0; h < at.q_heads; ++h) {
          const int64_t qb = blocks - 1 - r;
          const int64_t g = h / at.group;
          const int64_t i0 = qb * kBlock;
          const int64_t rows = std::min(kBlock, shape.seq - i0);
          const T* q_tile = q + at.q_at(b, i0, h);
          const int32_t* starts = doc_starts ? doc_starts + b * shape.seq : nullptr;
          std::fill(acc.begin(), acc.end(), T(0));
          std::fill(row_max.begin(), row_max.end(), neg_inf);
          std::fill(row_sum.begin(), row_sum.end(), T(0));

          // Key tiles before the tile's first document are hidden from all its rows.
          for (int64_t kb = starts ? starts[i0] / kBlock : 0; kb <= qb; ++kb) {
            const int64_t j0 = kb * kBlock;
            const int64_t cols = std::min(kBlock, shape.seq - j0);
            transpose_rows(k + at.kv_at(b, j0, g), at.kv_stride, cols, dim, k_cols.data());
            tile_product(rows, cols, dim, q_tile, at.q_stride, k_cols.data(), kBlock,
                         probs.data(), kBlock, false);

            // Online softmax: rescale what earlier tiles summed to the new max.
            for (int64_t i = 0; i < rows; ++i) {
              T* row = probs.data() + i * kBlock;
              const int64_t visible = kb == qb ? i + 1 : cols;
              // Keys [j0, j0 + hidden) lie in earlier documents than row i's.
              const int64_t hidden = hidden_keys(starts, i0 + i, j0, visible);
              if (hidden == visible) {  // none of this tile: the row's max and sum stay
                std::fill(row, row + cols, T(0));
                continue;
              }
              std::fill(row, row + hidden, T(0));
              T* p = row + hidden;
              const int64_t seen = visible - hidden;
              for (int64_t j = 0; j < seen; ++j) p[j] *= scale_t;
              const T new_max = max_of(p, seen, row_max[i]);
              exp_row(p, seen, T(1), &new_max, true);
              for (int64_t j = visible; j < cols; ++j) row[j] = 0;
              const T sum = sum_of(p, seen);
              const T shrink = softmax_exp(row_max[i] - new_max);
              row_sum[i] = row_sum[i] * shrink + sum;
              row_max[i] = new_max;
              if (shrink != T(1)) {
                T* o = acc.data() + i * dim;
                for (int64_t d = 0; d < dim; ++d) o[d] *= shrink;
              }
            }
            tile_product(rows, dim, cols, probs.data(), kBlock, v + at.kv_at(b, j0, g),
                         at.kv_stride, acc.data(), dim, true);
          }

          for (int64_t i = 0; i < rows; ++i) {
            const T inv_sum = T(1) / row_sum[i];
            const T* o = acc.data() + i * dim;
            T* dst = out + at.q_at(b, i0 + i, h);
            for (int64_t d = 0; d < dim; ++d) dst[d] = o[d] * inv_sum;
            lse[at.stat_at(b, h, i0 + i)] = row_max[i] + std::log(row_sum[i]);
          }
        }
      }
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* out,
                        const T* lse, T* dq, T* dk, T* dv, const AttentionShape& shape,
                        double scale, const int32_t* doc_starts) {
  check_shape(shape);
  if (shape.offset()) {
    SPW_CHECK(!doc_starts, "attention", "documents and a query offset together are not supported");
    return attention_offset_backward(dout, q, k, v, out, lse, dq, dk, dv, shape, scale);
  }
  if (doc_starts) check_doc_starts(doc_starts, shape.batch, shape.seq, "attention");
  const Layout at(shape);
  const int64_t dim = at.dim;
  const int64_t blocks = block_count(shape.seq);
  const T scale_t = static_cast<T>(scale);
  const bool threaded = worth_threads(shape);

  // D[t] = dout[t] . out[t], the row term of the softmax gradient.
  std::vector<T> row_dot(static_cast<size_t>(shape.batch * at.q_heads * shape.seq));
#pragma omp parallel for collapse(2) schedule(static) if (threaded)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t t = 0; t < shape.seq; ++t) {
      for (int64_t h = 0; h < at.q_heads; ++h) {
        const T* go = dout + at.q_at(b, t, h);
        const T* o = out + at.q_at(b, t, h);
        T sum = 0;
        for (int64_t d = 0; d < dim; ++d) sum += go[d] * o[d];
        row_dot[at.stat_at(b, h, t)] = sum;
      }
    }
  }

  // Pass 1: each task owns one key tile of one kv head and sums dk and dv over
  // every query row at or after the tile's start, for all query heads of the
  // group. The score tiles are built transposed (keys down, queries across) so
  // that P^T and dS^T come out ready to multiply.
#pragma omp parallel if (threaded)
  {
    std::vector<T> q_cols(static_cast<size_t>(dim * kBlock));
    std::vector<T> dout_cols(static_cast<size_t>(dim * kBlock));
    std::vector<T> probs_t(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> dscores_t(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> dk_acc(static_cast<size_t>(kBlock * dim));
    std::vector<T> dv_acc(static_cast<size_t>(kBlock * dim));

#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t kb = 0; kb < blocks; ++kb) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        for (int64_t g = 0; g < at.kv_heads; ++g) {
          const int64_t j0 = kb * kBlock;
          const int64_t cols = std::min(kBlock, shape.seq - j0);
          const T* k_tile = k + at.kv_at(b, j0, g);
          const T* v_tile = v + at.kv_at(b, j0, g);
          const int32_t* starts = doc_starts ? doc_starts + b * shape.seq : nullptr;
          std::fill(dk_acc.begin(), dk_acc.end(), T(0));
          std::fill(dv_acc.begin(), dv_acc.end(), T(0));

          for (int64_t h = g * at.group; h < (g + 1) * at.group; ++h) {
            for (int64_t qb = kb; qb < blocks; ++qb) {
              const int64_t i0 = qb * kBlock;
              // Starts never decrease: once a query tile begins past this key
              // tile's last key, it and every later one see none of it.
              if (starts && starts[i0] >= j0 + cols) break;
              const int64_t rows = std::min(kBlock, shape.seq - i0);
              const T* q_tile = q + at.q_at(b, i0, h);
              const T* dout_tile = dout + at.q_at(b, i0, h);
              transpose_rows(q_tile, at.q_stride, rows, dim, q_cols.data());
              transpose_rows(dout_tile, at.q_stride, rows, dim, dout_cols.data());
              tile_product(cols, rows, dim, k_tile, at.kv_stride, q_cols.data(), kBlock,
                           probs_t.data(), kBlock, false);
              tile_product(cols, rows, dim, v_tile, at.kv_stride, dout_cols.data(), kBlock,
                           dscores_t.data(), kBlock, false);

              const T* lse_row = lse + at.stat_at(b, h, i0);
              const T* dot_row = row_dot.data() + at.stat_at(b, h, i0);
              for (int64_t j = 0; j < cols; ++j) {
                T* p = probs_t.data() + j * kBlock;
                T* ds = dscores_t.data() + j * kBlock;
                // On the diagonal tile, key j is seen only by queries i >= j.
                const int64_t first = qb == kb ? j : 0;
                for (int64_t i = 0; i < first; ++i) p[i] = ds[i] = 0;
                exp_row(p + first, rows - first, scale_t, lse_row + first, false);
                for (int64_t i = first; i < rows; ++i) ds[i] = p[i] * (ds[i] - dot_row[i]);
                if (starts) {
                  // Queries of later documents than key j's (their entries
                  // were computed above and are dropped here).
                  for (int64_t i = first; i < rows; ++i) {
                    if (starts[i0 + i] > j0 + j) p[i] = ds[i] = 0;
                  }
                }
              }
              tile_product(cols, dim, rows, probs_t.data(), kBlock, dout_tile, at.q_stride,
                           dv_acc.data(), dim, true);
              tile_product(cols, dim, rows, dscores_t.data(), kBlock, q_tile, at.q_stride,
                           dk_acc.data(), dim, true);
            }
          }

          for (int64_t j = 0; j < cols; ++j) {
            T* dk_row = dk + at.kv_at(b, j0 + j, g);
            T* dv_row = dv + at.kv_at(b, j0 + j, g);
            const T* dk_src = dk_acc.data() + j * dim;
            const T* dv_src = dv_acc.data() + j * dim;
            for (int64_t d = 0; d < dim; ++d) {
              dk_row[d] = dk_src[d] * scale_t;
              dv_row[d] = dv_src[d];
            }
          }
        }
      }
    }
  }

  // Pass 2: each task owns one query tile of one query head and sums dq over
  // the key tiles up to the diagonal, rebuilding P and dS the same way.
#pragma omp parallel if (threaded)
  {
    std::vector<T> k_cols(static_cast<size_t>(dim * kBlock));
    std::vector<T> v_cols(static_cast<size_t>(dim * kBlock));
    std::vector<T> probs(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> dscores(static_cast<size_t>(kBlock * kBlock));
    std::vector<T> dq_acc(static_cast<size_t>(kBlock * dim));

#pragma omp for collapse(3) schedule(dynamic, 1)
    for (int64_t r = 0; r < blocks; ++r) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        for (int64_t h = 0; h < at.q_heads; ++h) {
          const int64_t qb = blocks - 1 - r;
          const int64_t g = h / at.group;
          const int64_t i0 = qb * kBlock;
          const int64_t rows = std::min(kBlock, shape.seq - i0);
          const T* q_tile = q + at.q_at(b, i0, h);
          const T* dout_tile = dout + at.q_at(b, i0, h);
          const T* lse_row = lse + at.stat_at(b, h, i0);
          const T* dot_row = row_dot.data() + at.stat_at(b, h, i0);
          const int32_t* starts = doc_starts ? doc_starts + b * shape.seq : nullptr;
          std::fill(dq_acc.begin(), dq_acc.end(), T(0));

          for (int64_t kb = starts ? starts[i0] / kBlock : 0; kb <= qb; ++kb) {
            const int64_t j0 = kb * kBlock;
            const int64_t cols = std::min(kBlock, shape.seq - j0);
            const T* k_tile = k + at.kv_at(b, j0, g);
            transpose_rows(k_tile, at.kv_stride, cols, dim, k_cols.data());
            transpose_rows(v + at.kv_at(b, j0, g), at.kv_stride, cols, dim, v_cols.data());
            tile_product(rows, cols, dim, q_tile, at.q_stride, k_cols.data(), kBlock,
                         probs.data(), kBlock, false);
            tile_product(rows, cols, dim, dout_tile, at.q_stride, v_cols.data(), kBlock,
                         dscores.data(), kBlock, false);

            for (int64_t i = 0; i < rows; ++i) {
              T* p = probs.data() + i * kBlock;
              T* ds = dscores.data() + i * kBlock;
              const int64_t visible = kb == qb ? i + 1 : cols;
              const int64_t hidden = hidden_keys(starts, i0 + i, j0, visible);
              exp_row(p + hidden, visible - hidden, scale_t, lse_row + i, true);
              for (int64_t j = 0; j < hidden; ++j) ds[j] = 0;
              for (int64_t j = hidden; j < visible; ++j) ds[j] = p[j] * (ds[j] - dot_row[i]);
              for (int64_t j = visible; j < cols; ++j) ds[j] = 0;
            }
            tile_product(rows, dim, cols, dscores.data(), kBlock, k_tile, at.kv_stride,
                         dq_acc.data(), dim, true);
          }

          for (int64_t i = 0; i < rows; ++i) {
            T* dq_row = dq + at.q_at(b, i0 + i, h);
            const T* src = dq_acc.data() + i * dim;
            for (int64_t d = 0; d < dim; ++d) dq_row[d] = src[d] * scale_t;
          }
        }
      }
    }
  }
}

template void attention_forward<float>(const float*, const float*, const float*, float*, float*,
                                       const AttentionShape&, double,
                                       const int32_t*);
template void attention_forward<double>(const double*, const double*, const double*, double*,
                                        double*, const AttentionShape&, double,
                                       const int32_t*);
template void attention_backward<float>(const float*, const float*, const float*, const float*,
                                        const float*, const float*, float*, float*, float*,
                                        const AttentionShape&, double,
                                       const int32_t*);
template void attention_backward<double>(const double*, const double*, const double*,
                                         const double*, const double*, const double*, double*,
                                         double*, double*, const AttentionShape&, double,
                                       const int32_t*);

}  // namespace spillway::ops
