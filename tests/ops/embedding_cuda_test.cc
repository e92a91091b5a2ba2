// GPU embedding lookup and its deterministic backward against the CPU kernels
// (and, for backward, an fp32 sum in token order that the GPU must equal bit
// for bit), with repeated ids, sort sizes around the shared-memory tile, LLaMA
// widths, out-of-range ids, and run-to-run bit equality.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/add.h"
#include "ops/embedding.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::widen;
using spillway::testing::as_double;

using spillway::testing::random_vector;
using spillway::testing::rel_error;

std::vector<uint32_t> float_bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float f : v) out.push_back(float_bits(f));
  return out;
}

// Ids drawn from [0, distinct), so rows repeat when distinct < tokens.
std::vector<int32_t> random_ids(int64_t tokens, int64_t distinct, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, distinct - 1);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& id : ids) id = static_cast<int32_t>(dist(rng));
  return ids;
}

// dtable as the GPU must form it: fp32 sums in token order, ids out of range
// left out.
std::vector<float> sum_in_token_order(const std::vector<int32_t>& ids,
                                      const std::vector<float>& dout, int64_t vocab, int64_t dim) {
  std::vector<float> table(static_cast<size_t>(vocab * dim), 0.0f);
  for (size_t t = 0; t < ids.size(); ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) continue;
    for (int64_t j = 0; j < dim; ++j) table[ids[t] * dim + j] += dout[t * dim + j];
  }
  return table;
}

struct EmbeddingCase {
  int64_t tokens, vocab, dim, distinct;
};

std::string describe(const EmbeddingCase& c) {
  return "tokens " + std::to_string(c.tokens) + " vocab " + std::to_string(c.vocab) + " dim " +
         std::to_string(c.dim) + " distinct " + std::to_string(c.distinct);
}

TEST(EmbeddingCuda, ForwardAndBackwardMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const EmbeddingCase cases[] = {
      {1, 1, 1, 1},
      {3, 11, 7, 11},
      {7, 11, 129, 3},
      {300, 1000, 64, 1000},
      {2048, 50, 24, 50},
      {2049, 5000, 16, 40},
      {5000, 128256, 8, 128256},
      {4096, 32000, 2048, 32000},  // LLaMA width
      {16384, 600, 136, 600},      // many tokens per row
  };
  for (const EmbeddingCase& c : cases) {
    const auto ids = random_ids(c.tokens, c.distinct, static_cast<uint64_t>(c.tokens + c.dim));
    const auto table = random_bf16(c.vocab * c.dim, 3);
    const auto dout = random_bf16(c.tokens * c.dim, 4);
    DeviceArray<int32_t> dids(ids);
    DeviceArray<bf16> dtable_in(table), ddout(dout), out(static_cast<size_t>(c.tokens * c.dim));
    DeviceArray<float> dtable(static_cast<size_t>(c.vocab * c.dim));
    DeviceArray<char> workspace(embedding_backward_workspace_bytes(c.tokens, c.vocab));
    DeviceArray<int> first_bad(1);
    embedding_check_ids_cuda(dids.get(), c.tokens, c.vocab, first_bad.get(), nullptr);
    embedding_forward_cuda(dids.get(), dtable_in.get(), out.get(), c.tokens, c.vocab, c.dim,
                           nullptr);
    embedding_backward_cuda(dids.get(), ddout.get(), dtable.get(), c.tokens, c.vocab, c.dim,
                            workspace.get(), nullptr);

    EXPECT_EQ(first_bad.download()[0], -1) << describe(c);
    const auto ftable = widen(table), fdout = widen(dout);
    std::vector<float> want_out(static_cast<size_t>(c.tokens * c.dim));
    std::vector<float> want_dtable(static_cast<size_t>(c.vocab * c.dim));
    embedding_forward(ids.data(), ftable.data(), want_out.data(), c.tokens, c.vocab, c.dim);
    embedding_backward(ids.data(), fdout.data(), want_dtable.data(), c.tokens, c.vocab, c.dim);
    const auto got_dtable = dtable.download();
    EXPECT_LT(rel_error(widen(out.download()), as_double(want_out)), 1e-2)
        << "forward, " << describe(c);
    EXPECT_LT(rel_error(got_dtable, as_double(want_dtable)), 1e-5) << "backward, " << describe(c);
    EXPECT_TRUE(float_bits_of(got_dtable) ==
                float_bits_of(sum_in_token_order(ids, fdout, c.vocab, c.dim)))
        << "backward is not the fp32 sum in token order, " << describe(c);
  }
}

TEST(EmbeddingCuda, OutOfRangeIdsAreFlaggedZeroedAndLeftOut) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t tokens = 40, vocab = 30, dim = 16;
  auto ids = random_ids(tokens, vocab, 8);
  ids[9] = static_cast<int32_t>(vocab);
  ids[5] = -1;
  ids[31] = 1 << 30;
  const auto table = random_bf16(vocab * dim, 9);
  const auto dout = random_bf16(tokens * dim, 10);
  DeviceArray<int32_t> dids(ids);
  DeviceArray<bf16> dtable_in(table), ddout(dout), out(static_cast<size_t>(tokens * dim));
  DeviceArray<float> dtable(static_cast<size_t>(vocab * dim));
  DeviceArray<char> workspace(embedding_backward_workspace_bytes(tokens, vocab));
  DeviceArray<int> first_bad(1);
  embedding_check_ids_cuda(dids.get(), tokens, vocab, first_bad.get(), nullptr);
  embedding_forward_cuda(dids.get(), dtable_in.get(), out.get(), tokens, vocab, dim, nullptr);
  embedding_backward_cuda(dids.get(), ddout.get(), dtable.get(), tokens, vocab, dim,
                          workspace.get(), nullptr);

  EXPECT_EQ(first_bad.download()[0], 5);
  const auto got = out.download();
  for (int64_t t = 0; t < tokens; ++t) {
    const bool bad = ids[t] < 0 || ids[t] >= vocab;
    for (int64_t j = 0; j < dim; ++j) {
      const uint16_t want = bad ? to_bf16(0.0f).bits : table[ids[t] * dim + j].bits;
      ASSERT_EQ(got[t * dim + j].bits, want) << "token " << t << " column " << j;
    }
  }
  EXPECT_EQ(float_bits_of(dtable.download()),
            float_bits_of(sum_in_token_order(ids, widen(dout), vocab, dim)));
}

TEST(EmbeddingCuda, UnalignedBuffersTakeTheScalarPath) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t tokens = 100, vocab = 70, dim = 64;
  const auto ids = random_ids(tokens, 20, 11);
  const auto table = random_bf16(vocab * dim + 1, 12);
  const auto dout = random_bf16(tokens * dim + 1, 13);
  DeviceArray<int32_t> dids(ids);
  DeviceArray<bf16> dtable_in(table), ddout(dout), out(static_cast<size_t>(tokens * dim) + 1);
  DeviceArray<float> dtable(static_cast<size_t>(vocab * dim) + 1);
  DeviceArray<char> workspace(embedding_backward_workspace_bytes(tokens, vocab));
  embedding_forward_cuda(dids.get(), dtable_in.get() + 1, out.get() + 1, tokens, vocab, dim,
                         nullptr);
  embedding_backward_cuda(dids.get(), ddout.get() + 1, dtable.get() + 1, tokens, vocab, dim,
                          workspace.get(), nullptr);
  const auto ftable = widen(table), fdout = widen(dout);
  std::vector<float> want_out(static_cast<size_t>(tokens * dim));
  embedding_forward(ids.data(), ftable.data() + 1, want_out.data(), tokens, vocab, dim);
  const auto got_out = out.download();
  EXPECT_LT(rel_error(widen({got_out.begin() + 1, got_out.end()}), as_double(want_out)), 1e-2);
  const auto got_dtable = dtable.download();
  const std::vector<float> fdout_n(fdout.begin() + 1, fdout.end());
  EXPECT_EQ(float_bits_of({got_dtable.begin() + 1, got_dtable.end()}),
            float_bits_of(sum_in_token_order(ids, fdout_n, vocab, dim)));
}

// Accumulating into a table that already holds values (not poison: the old
// contents count): each row gets old + its fp32 sum in token order, rows no
// token uses keep their values, and the CPU's accumulating kernel agrees.
TEST(EmbeddingCuda, BackwardAccumulatesIntoTheTable) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const EmbeddingCase cases[] = {
      {3, 11, 7, 11}, {300, 1000, 64, 1000}, {2049, 5000, 16, 40}, {4096, 32000, 2048, 32000}};
  for (const EmbeddingCase& c : cases) {
    const auto ids = random_ids(c.tokens, c.distinct, static_cast<uint64_t>(c.tokens + 7 * c.dim));
    const auto dout = random_bf16(c.tokens * c.dim, 16);
    auto old_d = random_vector(c.vocab * c.dim, 17, -2.0, 2.0);
    const std::vector<float> old(old_d.begin(), old_d.end());
    DeviceArray<int32_t> dids(ids);
    DeviceArray<bf16> ddout(dout);
    DeviceArray<float> dtable(old);
    DeviceArray<char> workspace(embedding_backward_workspace_bytes(c.tokens, c.vocab));
    embedding_backward_cuda(dids.get(), ddout.get(), dtable.get(), c.tokens, c.vocab, c.dim,
                            workspace.get(), nullptr, /*accumulate=*/true);
    const auto got = dtable.download();

    const auto fdout = widen(dout);
    auto want_bits = sum_in_token_order(ids, fdout, c.vocab, c.dim);
    for (size_t i = 0; i < want_bits.size(); ++i) want_bits[i] = old[i] + want_bits[i];
    EXPECT_TRUE(float_bits_of(got) == float_bits_of(want_bits)) << "not old + the fp32 sum, " << describe(c);
    auto cpu = old;
    embedding_backward(ids.data(), fdout.data(), cpu.data(), c.tokens, c.vocab, c.dim, /*accumulate=*/true);
    EXPECT_LT(rel_error(got, as_double(cpu)), 1e-6) << describe(c);
  }
}

// A base with a -0 every 5th element: in a row no token uses, base + 0 (what
// the unfused add computes) is +0 there, and a plain copy of base is not.
std::vector<float> base_values(int64_t n, uint64_t seed, double lo, double hi) {
  auto v = random_vector(n, seed, lo, hi);
  for (size_t i = 0; i < v.size(); i += 5) v[i] = -0.0;
  return {v.begin(), v.end()};
}

struct BaseCase {
  EmbeddingCase c;
  // Element offsets of dout, base and dtable: 0 keeps them 16-byte aligned,
  // 1 takes the scalar paths.
  int dout_offset, base_offset, dtable_offset;
  bool bad_id;  // one id out of range, left out of every sum
};

std::string describe(const BaseCase& b, bool accumulate) {
  return describe(b.c) + " offsets " + std::to_string(b.dout_offset) + "," + std::to_string(b.base_offset) + "," +
         std::to_string(b.dtable_offset) + (b.bad_id ? " bad id" : "") + (accumulate ? " accumulating" : "");
}

// The backward with a base is, bit for bit, the graph it replaces: the
// backward without a base, then add_cuda(base, that) (out = base + dtable,
// or out += base + dtable). Also the fp32 sum in token order plus base (plus
// the old contents), and the CPU kernel with a base. The output, the
// workspace and the unfused intermediate start poisoned (NaN, run_end -1):
// every row must be written, and the rows tokens use must be told from the
// rest by this call alone.
TEST(EmbeddingCuda, BackwardWithBaseIsBackwardThenAdd) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const BaseCase cases[] = {
      {{0, 11, 8, 11}, 0, 0, 0, false},        // no tokens: base + 0 everywhere
      {{1, 1, 1, 1}, 0, 0, 0, false},
      {{3, 11, 7, 11}, 0, 0, 0, false},
      {{7, 11, 12, 3}, 0, 0, 0, true},         // dim % 4 == 0, % 8 != 0
      {{300, 1000, 64, 1000}, 0, 0, 0, false},
      {{2049, 5000, 16, 40}, 0, 0, 0, true},
      {{4096, 32000, 2048, 32000}, 0, 0, 0, false},  // LLaMA width
      {{16384, 600, 136, 600}, 0, 0, 0, false},      // many tokens per row
      {{100, 70, 64, 20}, 1, 1, 1, false},           // all unaligned
      {{100, 70, 64, 20}, 0, 1, 0, false},           // only base unaligned
      {{100, 70, 64, 20}, 1, 0, 0, false},           // only dout unaligned
  };
  for (const BaseCase& b : cases) {
    const EmbeddingCase& c = b.c;
    const int64_t n = c.vocab * c.dim;
    auto ids = random_ids(c.tokens, c.distinct, static_cast<uint64_t>(c.tokens + 3 * c.dim));
    if (b.bad_id) ids[1] = static_cast<int32_t>(c.vocab);
    const auto dout = random_bf16(c.tokens * c.dim + b.dout_offset, 21);
    const auto base = base_values(n + b.base_offset, 22, -3.0, 3.0);
    const auto old = base_values(n + b.dtable_offset, 23, -2.0, 2.0);
    DeviceArray<int32_t> dids(ids);
    DeviceArray<bf16> ddout(dout);
    DeviceArray<float> dbase(base);
    DeviceArray<char> workspace(embedding_backward_workspace_bytes(c.tokens, c.vocab));
    const bf16* dout_at = ddout.get() + b.dout_offset;
    const float* base_at = dbase.get() + b.base_offset;

    const auto fdout = widen(dout);
    const std::vector<float> fdout_n(fdout.begin() + b.dout_offset, fdout.end());
    const auto sums = sum_in_token_order(ids, fdout_n, c.vocab, c.dim);
    for (bool accumulate : {false, true}) {
      // Unfused: the backward into a poisoned scratch table, then the add.
      DeviceArray<float> scattered(static_cast<size_t>(n));
      DeviceArray<float> unfused(static_cast<size_t>(n + b.dtable_offset));
      if (accumulate) unfused.upload(old);
      workspace.poison();
      embedding_backward_cuda(dids.get(), dout_at, scattered.get(), c.tokens, c.vocab, c.dim, workspace.get(),
                              nullptr);
      add_cuda(base_at, scattered.get(), unfused.get() + b.dtable_offset, n, nullptr, accumulate);

      DeviceArray<float> fused(static_cast<size_t>(n + b.dtable_offset));
      if (accumulate) fused.upload(old);
      workspace.poison();
      embedding_backward_cuda(dids.get(), dout_at, fused.get() + b.dtable_offset, c.tokens, c.vocab, c.dim,
                              workspace.get(), nullptr, accumulate, base_at);

      const auto got_all = fused.download();
      const std::vector<float> got(got_all.begin() + b.dtable_offset, got_all.end());
      const auto unfused_all = unfused.download();
      EXPECT_TRUE(float_bits_of(got) == float_bits_of({unfused_all.begin() + b.dtable_offset, unfused_all.end()}))
          << "not the backward then the add, " << describe(b, accumulate);

      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const float sum = base[static_cast<size_t>(i + b.base_offset)] + sums[static_cast<size_t>(i)];
        want[static_cast<size_t>(i)] = accumulate ? old[static_cast<size_t>(i + b.dtable_offset)] + sum : sum;
      }
      EXPECT_TRUE(float_bits_of(got) == float_bits_of(want))
          << "not (old +) base + the fp32 sum in token order, " << describe(b, accumulate);

      if (b.bad_id) continue;  // the CPU kernel throws on it
      std::vector<float> cpu(old.begin() + b.dtable_offset, old.end());
      const std::vector<float> base_n(base.begin() + b.base_offset, base.end());
      embedding_backward(ids.data(), fdout_n.data(), cpu.data(), c.tokens, c.vocab, c.dim, accumulate,
                         base_n.data());
      EXPECT_LT(rel_error(got, as_double(cpu)), 1e-6) << describe(b, accumulate);
    }
  }
}

TEST(EmbeddingCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const int64_t tokens = 16384, vocab = 128256, dim = 64;
  const auto ids = random_ids(tokens, 1000, 14);  // heavy repetition
  DeviceArray<int32_t> dids(ids);
  DeviceArray<bf16> ddout(random_bf16(tokens * dim, 15));
  DeviceArray<float> dtable(static_cast<size_t>(vocab * dim));
  DeviceArray<char> workspace(embedding_backward_workspace_bytes(tokens, vocab));
  std::vector<uint32_t> first;
  for (int run = 0; run < 2; ++run) {
    dtable.poison();
    workspace.poison();
    embedding_backward_cuda(dids.get(), ddout.get(), dtable.get(), tokens, vocab, dim,
                            workspace.get(), nullptr);
    const auto bits = float_bits_of(dtable.download());
    if (run == 0) {
      first = bits;
    } else {
      EXPECT_EQ(bits, first);
    }
  }
}

}  // namespace
}  // namespace spillway::ops
