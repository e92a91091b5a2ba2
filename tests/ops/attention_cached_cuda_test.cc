// GPU attention against a key/value cache vs the CPU kernel on the same
// (bf16-rounded) inputs: decoding one token against short and long caches
// (the split-key path, with 2 to 33 key ranges, an odd head dim among them),
// prefill from an empty cache, chunks of a prompt against a partly filled
// cache, grouped and plain multi-head attention, head dims 64 and 128 and odd
// ones, with and without a workspace. The cache rows past kv_len hold NaN,
// which must not reach the output, and the output and the workspace start
// poisoned.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <span>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/attention_cached.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using spillway::testing::as_double;
using spillway::testing::bits_of;
using spillway::testing::DeviceArray;
using spillway::testing::random_bf16;
using spillway::testing::rel_error;
using spillway::testing::widen;

std::string describe(const CachedAttentionShape& s) {
  return "batch " + std::to_string(s.batch) + " q_len " + std::to_string(s.q_len) + " kv_len " +
         std::to_string(s.kv_len) + " cache_len " + std::to_string(s.cache_len) + " heads " +
         std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + " head_dim " + std::to_string(s.head_dim);
}

struct Inputs {
  std::vector<bf16> q, k, v;  // k and v: the whole cache, NaN past kv_len
};

Inputs make_inputs(const CachedAttentionShape& s, uint64_t seed) {
  const int64_t q_row = s.q_heads * s.head_dim, kv_row = s.kv_heads * s.head_dim;
  Inputs in;
  // Queries of size ~2 make the softmax peaked enough that a wrong key shows.
  in.q = random_bf16(s.batch * s.q_len * q_row, seed, -2.0, 2.0);
  in.k = random_bf16(s.batch * s.cache_len * kv_row, seed + 1);
  in.v = random_bf16(s.batch * s.cache_len * kv_row, seed + 2);
  const bf16 nan = to_bf16(NAN);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t u = s.kv_len; u < s.cache_len; ++u) {
      for (int64_t j = 0; j < kv_row; ++j) {
        in.k[static_cast<size_t>((b * s.cache_len + u) * kv_row + j)] = nan;
        in.v[static_cast<size_t>((b * s.cache_len + u) * kv_row + j)] = nan;
      }
    }
  }
  return in;
}

std::vector<double> cpu_reference(const Inputs& in, const CachedAttentionShape& s, double scale) {
  // The CPU kernel never reads rows past kv_len, but give it zeros there so
  // that a bug of its own could not hide behind NaN.
  std::vector<float> k = widen(in.k), v = widen(in.v);
  for (auto* cache : {&k, &v}) {
    for (float& x : *cache) {
      if (std::isnan(x)) x = 0.0f;
    }
  }
  std::vector<float> out(in.q.size());
  attention_cached(widen(in.q).data(), k.data(), v.data(), out.data(), s, scale);
  return as_double(out);
}

std::vector<bf16> run_gpu(const Inputs& in, const CachedAttentionShape& s, double scale, uint64_t workspace_bytes) {
  DeviceArray<bf16> q(in.q), k(in.k), v(in.v), out(in.q.size());
  DeviceArray<char> workspace(static_cast<size_t>(workspace_bytes));
  attention_cached_cuda(q.get(), k.get(), v.get(), out.get(), s, scale,
                        workspace_bytes > 0 ? workspace.get() : nullptr, workspace_bytes, nullptr);
  SPW_CUDA(cudaGetLastError());
  return out.download();
}

// Small shapes that still take every path (split keys, ragged tiles, odd
// head dims), quick enough for compute-sanitizer's racecheck; then the
// LLaMA-sized ones.
const CachedAttentionShape kSmallShapes[] = {
    // batch, q_len, kv_len, cache_len, q_heads, kv_heads, head_dim
    {1, 1, 1, 8, 4, 2, 64},          // the first token
    {1, 1, 300, 512, 32, 8, 64},     // decoding, LLaMA-3.2-1B heads
    {2, 37, 170, 200, 6, 2, 128},    // ragged tiles
    {1, 17, 40, 40, 3, 3, 80},       // a head dim between the kernel's sizes
    {1, 5, 70, 70, 2, 1, 33},        // an odd head dim
    {1, 1, 700, 800, 4, 2, 33},      // decoding, odd head dim, 6 key ranges on an H100
};
const CachedAttentionShape kLongShapes[] = {
    {1, 1, 4097, 4100, 32, 8, 128},  // decoding, LLaMA-3-8B heads, long cache
    {2, 1, 777, 1000, 4, 4, 128},    // plain multi-head, two sequences
    {1, 3, 515, 600, 8, 1, 64},      // a few tokens, one kv head for eight
    {1, 300, 300, 512, 8, 2, 64},    // prefill from an empty cache
    {1, 128, 640, 1024, 32, 8, 64},  // a chunk of a prompt after 512 tokens
    {1, 2048, 2048, 2048, 8, 2, 128},  // a long prompt at once
};

void expect_matches_cpu(std::span<const CachedAttentionShape> shapes, uint64_t seed) {
  for (const CachedAttentionShape& s : shapes) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const Inputs in = make_inputs(s, seed += 7);
    const std::vector<double> want = cpu_reference(in, s, scale);
    for (uint64_t workspace : {uint64_t{0}, kAttentionCachedCudaWorkspaceBytes}) {
      EXPECT_LT(rel_error(widen(run_gpu(in, s, scale, workspace)), want), 1e-2)
          << describe(s) << " workspace " << workspace;
    }
  }
}

TEST(AttentionCachedCuda, SmallShapesMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_matches_cpu(kSmallShapes, 10);
}

TEST(AttentionCachedCuda, LongShapesMatchCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  expect_matches_cpu(kLongShapes, 100);
}

// Row by row, so that one wrong row cannot hide in the norm of many.
TEST(AttentionCachedCuda, EveryRowMatchesCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const CachedAttentionShape& s :
       {CachedAttentionShape{1, 1, 1000, 1024, 32, 8, 128}, CachedAttentionShape{1, 40, 1100, 1200, 4, 2, 64}}) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const Inputs in = make_inputs(s, 3);
    const std::vector<double> want = cpu_reference(in, s, scale);
    const std::vector<float> got = widen(run_gpu(in, s, scale, kAttentionCachedCudaWorkspaceBytes));
    const auto d = static_cast<size_t>(s.head_dim);
    for (size_t row = 0; row < want.size() / d; ++row) {
      std::vector<float> g(got.begin() + row * d, got.begin() + (row + 1) * d);
      std::vector<double> w(want.begin() + row * d, want.begin() + (row + 1) * d);
      ASSERT_LT(rel_error(g, w), 2e-2) << describe(s) << " row " << row;
    }
  }
}

// The split and the merge run in a fixed order: the same bits every run.
TEST(AttentionCachedCuda, Deterministic) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  for (const CachedAttentionShape& s :
       {CachedAttentionShape{1, 1, 3000, 3000, 32, 8, 128}, CachedAttentionShape{1, 256, 1024, 1024, 8, 2, 64}}) {
    const Inputs in = make_inputs(s, 21);
    const auto first = bits_of(run_gpu(in, s, 0.125, kAttentionCachedCudaWorkspaceBytes));
    EXPECT_EQ(bits_of(run_gpu(in, s, 0.125, kAttentionCachedCudaWorkspaceBytes)), first) << describe(s);
  }
}

TEST(AttentionCachedCuda, RejectsBadShapes) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  DeviceArray<bf16> buf(1 << 16);
  auto call = [&](CachedAttentionShape s) {
    attention_cached_cuda(buf.get(), buf.get(), buf.get(), buf.get(), s, 1.0, nullptr, 0, nullptr);
  };
  EXPECT_THROW(call({1, 1, 1, 1, 2, 1, 256}), Error);  // head dim too large
  EXPECT_THROW(call({1, 5, 4, 8, 2, 1, 64}), Error);   // more queries than keys
  EXPECT_THROW(call({1, 1, 9, 8, 2, 1, 64}), Error);   // more keys than the cache holds
  EXPECT_THROW(call({1, 1, 4, 8, 3, 2, 64}), Error);   // heads not grouped evenly
  // A workspace that is not float2-aligned.
  EXPECT_THROW(attention_cached_cuda(buf.get(), buf.get(), buf.get(), buf.get(), {1, 1, 4, 8, 2, 1, 64}, 1.0,
                                     reinterpret_cast<char*>(buf.get()) + 4, 1024, nullptr),
               Error);
}

}  // namespace
}  // namespace spillway::ops
