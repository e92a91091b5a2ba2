// The paged cache's GPU kernels against the CPU: new keys and values land in
// the slots the block tables name, and attention over the pools equals the
// CPU's paged_attention (float32, on the same bf16 values) to bf16 rounding
// of the output: relative error below 1e-2 over every row. And a row's
// output is the same bits alone as in the batch.
#include "infer/cuda/paged_cache_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "infer/paged_attention.h"
#include "testing/cuda_arrays.h"

namespace spillway::infer {
namespace {

using testing::DeviceArray;

constexpr double kTolerance = 1e-2;

struct Sequence {
  int64_t pos0, n;             // its rows in the step: positions pos0 .. pos0 + n - 1
  std::vector<int32_t> table;  // blocks, scattered through the pool
};

struct Case {
  PagedAttentionShape shape;
  int64_t num_blocks;
  std::vector<Sequence> sequences;
};

// A prompt's first chunk, a token decoded at 300 and a chunk at 595 (past
// 256 keys: every warp takes several pieces), tokens at 2,100 (their keys
// in 5 splits) and at 4,500 (in the most splits), and a chunk of 70 at
// 1,000 (89 rows in all: past kPagedAttentionCudaGroupFrom, so heads in
// groups of 4 or 8 share a block), on tables that interleave the
// sequences' blocks.
Case make_case(int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  Case c{{q_heads, kv_heads, head_dim, 16},
         600,
         {{0, 10, {}}, {300, 1, {}}, {595, 5, {}}, {2100, 1, {}}, {4500, 2, {}}, {1000, 70, {}}}};
  std::vector<int32_t> blocks(static_cast<size_t>(c.num_blocks));
  std::iota(blocks.begin(), blocks.end(), 0);
  for (size_t i = 0; i < blocks.size(); ++i) std::swap(blocks[i], blocks[(i * 37 + 11) % blocks.size()]);
  size_t next = 0;
  for (Sequence& s : c.sequences) {
    const int64_t need = (s.pos0 + s.n + 15) / 16;
    for (int64_t b = 0; b < need; ++b) s.table.push_back(blocks.at(next++));  // 539 of them
  }
  return c;
}

struct Step {
  int64_t rows = 0, q_row = 0, kv_row = 0, stride = 0;
  std::vector<int32_t> position, table_start, tables;
  std::vector<bf16> qkv;             // [rows, q | k | v]
  std::vector<bf16> k_pool, v_pool;  // before the step's rows are written
};

Step make_step(const Case& c) {
  Step s;
  s.q_row = c.shape.q_heads * c.shape.head_dim;
  s.kv_row = c.shape.kv_heads * c.shape.head_dim;
  s.stride = s.q_row + 2 * s.kv_row;
  for (const Sequence& q : c.sequences) {
    const auto start = static_cast<int32_t>(s.tables.size());
    s.tables.insert(s.tables.end(), q.table.begin(), q.table.end());
    for (int64_t i = 0; i < q.n; ++i) {
      s.position.push_back(static_cast<int32_t>(q.pos0 + i));
      s.table_start.push_back(start);
    }
  }
  s.rows = static_cast<int64_t>(s.position.size());
  s.qkv = testing::random_bf16(s.rows * s.stride, 5);
  const int64_t pool = c.num_blocks * c.shape.block_tokens * s.kv_row;
  s.k_pool = testing::random_bf16(pool, 6);
  s.v_pool = testing::random_bf16(pool, 7);
  return s;
}

// The pools with the step's rows written, on the CPU.
void write_rows(const Case& c, const Step& s, std::vector<bf16>& k_pool, std::vector<bf16>& v_pool) {
  const int64_t bt = c.shape.block_tokens;
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t t = s.position[r];
    const int64_t slot = s.tables[static_cast<size_t>(s.table_start[r] + t / bt)] * bt + t % bt;
    for (int64_t i = 0; i < s.kv_row; ++i) {
      k_pool[static_cast<size_t>(slot * s.kv_row + i)] = s.qkv[static_cast<size_t>(r * s.stride + s.q_row + i)];
      v_pool[static_cast<size_t>(slot * s.kv_row + i)] =
          s.qkv[static_cast<size_t>(r * s.stride + s.q_row + s.kv_row + i)];
    }
  }
}

void check_case(const Case& c) {
  Step s = make_step(c);
  DeviceArray<bf16> qkv(s.qkv), k_pool(s.k_pool), v_pool(s.v_pool), out(static_cast<size_t>(s.rows * s.q_row));
  DeviceArray<float> splits(static_cast<size_t>(paged_attention_workspace_floats(s.rows, c.shape)));
  DeviceArray<int32_t> position(s.position), table_start(s.table_start), tables(s.tables);
  const PagedRowsCuda rows{s.rows, position.get(), table_start.get(), tables.get()};
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.shape.head_dim)));
  paged_kv_write_cuda(qkv.get() + s.q_row, qkv.get() + s.q_row + s.kv_row, s.stride, rows, k_pool.get(),
                      v_pool.get(), c.shape, nullptr);
  const int64_t most_keys = *std::max_element(s.position.begin(), s.position.end()) + 1;
  paged_attention_cuda(qkv.get(), s.stride, out.get(), s.q_row, k_pool.get(), v_pool.get(), rows, c.shape, scale,
                       most_keys, splits.get(), nullptr);
  SPW_CUDA(cudaDeviceSynchronize());

  write_rows(c, s, s.k_pool, s.v_pool);
  EXPECT_EQ(testing::bits_of(k_pool.download()), testing::bits_of(s.k_pool)) << "keys written";
  EXPECT_EQ(testing::bits_of(v_pool.download()), testing::bits_of(s.v_pool)) << "values written";

  // The CPU's attention on the same numbers, widened.
  std::vector<float> q(static_cast<size_t>(s.rows * s.q_row)), want(q.size());
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t i = 0; i < s.q_row; ++i) q[r * s.q_row + i] = to_float(s.qkv[r * s.stride + i]);
  }
  std::vector<PagedQueries> queries;
  int64_t row = 0;
  for (const Sequence& seq : c.sequences) {
    queries.push_back({q.data() + row * s.q_row, want.data() + row * s.q_row, seq.n, seq.pos0, seq.table});
    row += seq.n;
  }
  const std::vector<float> k = testing::widen(s.k_pool), v = testing::widen(s.v_pool);
  paged_attention(queries, k.data(), v.data(), c.shape, scale);
  const std::vector<float> got = testing::widen(out.download());
  EXPECT_LT(testing::rel_error(got, testing::as_double(want)), kTolerance);
  for (int64_t r = 0; r < s.rows; ++r) {
    const std::vector<float> g(got.begin() + r * s.q_row, got.begin() + (r + 1) * s.q_row);
    const std::vector<float> w(want.begin() + r * s.q_row, want.begin() + (r + 1) * s.q_row);
    EXPECT_LT(testing::rel_error(g, testing::as_double(w)), kTolerance) << "row " << r;
  }

  // Each row alone (the splits' kernels run only for the rows that split,
  // and a head has a block of its own): the same bits as in the batch.
  const std::vector<uint16_t> batch = testing::bits_of(out.download());
  for (int64_t r = 0; r < s.rows; ++r) {
    DeviceArray<bf16> alone(static_cast<size_t>(s.q_row));
    const PagedRowsCuda one{1, position.get() + r, table_start.get() + r, tables.get()};
    paged_attention_cuda(qkv.get() + r * s.stride, s.stride, alone.get(), s.q_row, k_pool.get(), v_pool.get(), one,
                         c.shape, scale, s.position[r] + 1, splits.get(), nullptr);
    EXPECT_EQ(testing::bits_of(alone.download()),
              std::vector<uint16_t>(batch.begin() + r * s.q_row, batch.begin() + (r + 1) * s.q_row))
        << "row " << r << " alone";
  }
}

TEST(PagedCacheCuda, WritesAndAttendsAsTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  // head_dim 36: rows not 16-byte multiples, keys read a number at a time;
  // 8 query heads on 2 and on 1 key/value heads: grouped for the batch.
  for (const auto& [hq, hkv, hd] : {std::tuple<int64_t, int64_t, int64_t>{4, 2, 64},
                                    {2, 1, 128},
                                    {3, 3, 40},
                                    {2, 2, 36},
                                    {8, 2, 64},
                                    {8, 1, 128}}) {
    SCOPED_TRACE(std::to_string(hq) + " heads, " + std::to_string(hkv) + " kv heads, head_dim " + std::to_string(hd));
    check_case(make_case(hq, hkv, hd));
  }
}

TEST(PagedCacheCuda, RefusesShapesItCannotRun) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<int32_t> zero(std::vector<int32_t>{0});
  const PagedRowsCuda rows{1, zero.get(), zero.get(), zero.get()};
  DeviceArray<bf16> buffer(1024);
  DeviceArray<float> splits(1024);
  EXPECT_THROW(paged_attention_cuda(buffer.get(), 256, buffer.get(), 256, buffer.get(), buffer.get(), rows,
                                    PagedAttentionShape{1, 1, 256, 16}, 1.0f, 1, splits.get(), nullptr),
               Error);
  EXPECT_THROW(paged_attention_cuda(buffer.get(), 64, buffer.get(), 64, buffer.get(), buffer.get(), rows,
                                    PagedAttentionShape{3, 2, 32, 16}, 1.0f, 1, splits.get(), nullptr),
               Error);
  EXPECT_THROW(paged_attention_cuda(buffer.get(), 64, buffer.get(), 64, buffer.get(), buffer.get(), rows,
                                    PagedAttentionShape{2, 1, 32, 16}, 1.0f, 5000, nullptr, nullptr),
               Error);
}

}  // namespace
}  // namespace spillway::infer
