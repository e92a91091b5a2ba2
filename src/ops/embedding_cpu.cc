#include "ops/embedding.h"

#include <algorithm>
#include <vector>

#include "base/status.h"

namespace spillway::ops {

namespace {

void check_ids(const int32_t* ids, int64_t tokens, int64_t vocab) {
  for (int64_t t = 0; t < tokens; ++t) {
    SPW_CHECK(ids[t] >= 0 && ids[t] < vocab, "embedding", "id ", ids[t], " at position ", t,
              " is outside [0, ", vocab, ")");
  }
}

}  // namespace

// This piece's row of id, or -1 where another piece holds it.
static int64_t row_of(int32_t id, int64_t first_row, int64_t rows) {
  const int64_t row = id - first_row;
  return row >= 0 && row < rows ? row : -1;
}

template <typename T>
void embedding_forward(const int32_t* ids, const T* table, T* out, int64_t tokens, int64_t vocab,
                       int64_t dim, int64_t first_row, int64_t whole_rows) {
  check_ids(ids, tokens, whole_rows > 0 ? whole_rows : vocab);
#pragma omp parallel for schedule(static) if (tokens * dim > (1 << 16))
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = row_of(ids[t], first_row, vocab);
    if (row < 0) {
      std::fill_n(out + t * dim, dim, T(0));
    } else {
      std::copy_n(table + row * dim, dim, out + t * dim);
    }
  }
}

template <typename T>
void embedding_backward(const int32_t* ids, const T* dout, T* dtable, int64_t tokens,
                        int64_t vocab, int64_t dim, bool accumulate, const T* base, int64_t first_row,
                        int64_t whole_rows) {
  check_ids(ids, tokens, whole_rows > 0 ? whole_rows : vocab);
  // A stable counting sort of the positions by id lets each table row be owned
  // by one thread and summed in token order, whatever the thread count.
  std::vector<int64_t> start(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = row_of(ids[t], first_row, vocab);
    if (row >= 0) ++start[row + 1];
  }
  for (int64_t v = 0; v < vocab; ++v) start[v + 1] += start[v];
  std::vector<int64_t> positions(static_cast<size_t>(start[vocab]));
  {
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = row_of(ids[t], first_row, vocab);
      if (row >= 0) positions[next[row]++] = t;
    }
  }

#pragma omp parallel if (vocab * dim > (1 << 16))
  {
    std::vector<double> sum(static_cast<size_t>(dim));
#pragma omp for schedule(static)
    for (int64_t v = 0; v < vocab; ++v) {
      T* row = dtable + v * dim;
      if (start[v] == start[v + 1] && base == nullptr) {
        if (!accumulate) std::fill_n(row, dim, T(0));
        continue;
      }
      // An unused row's sum stays 0, so with a base it still gets base + 0.
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t i = start[v]; i < start[v + 1]; ++i) {
        const T* src = dout + positions[i] * dim;
        for (int64_t j = 0; j < dim; ++j) sum[j] += static_cast<double>(src[j]);
      }
      const T* base_row = base != nullptr ? base + v * dim : nullptr;
      for (int64_t j = 0; j < dim; ++j) {
        // The rounding steps of a backward without base, then ops::add.
        T r = static_cast<T>(sum[j]);
        if (base_row != nullptr) r = base_row[j] + r;
        row[j] = accumulate ? row[j] + r : r;
      }
    }
  }
}

template void embedding_forward<float>(const int32_t*, const float*, float*, int64_t, int64_t,
                                       int64_t, int64_t, int64_t);
template void embedding_forward<double>(const int32_t*, const double*, double*, int64_t, int64_t,
                                        int64_t, int64_t, int64_t);
template void embedding_backward<float>(const int32_t*, const float*, float*, int64_t, int64_t,
                                        int64_t, bool, const float*, int64_t, int64_t);
template void embedding_backward<double>(const int32_t*, const double*, double*, int64_t,
                                         int64_t, int64_t, bool, const double*, int64_t, int64_t);

}  // namespace spillway::ops
