// The own GPU attention kernel over packed rows (ops/attention.h's
// doc_starts) against the CPU kernel with the same documents, on the same
// bf16-rounded inputs; and one document a row equal to no documents, bit
// for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_device.h"
#include "ops/attention.h"
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

constexpr double kBf16Tolerance = 2e-2;
constexpr double kLseTolerance = 1e-3;

std::vector<int32_t> starts_of(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int32_t> starts;
  for (const auto& lengths : rows) {
    int64_t at = 0;
    for (int64_t len : lengths) {
      for (int64_t i = 0; i < len; ++i) starts.push_back(static_cast<int32_t>(at));
      at += len;
    }
  }
  return starts;
}

struct GpuRun {
  std::vector<bf16> out, dq, dk, dv;
  std::vector<float> lse;
};

// Forward, then backward from the forward's out and lse, on the GPU.
GpuRun run_gpu(const AttentionShape& s, double scale, const std::vector<bf16>& q, const std::vector<bf16>& k,
               const std::vector<bf16>& v, const std::vector<bf16>& dout, const int32_t* docs_on_device) {
  const auto qn = static_cast<size_t>(s.batch * s.seq * s.q_width());
  const auto kn = static_cast<size_t>(s.batch * s.seq * s.kv_width());
  DeviceArray<bf16> dq_in(q), dk_in(k), dv_in(v), ddout(dout), out(qn), dq(qn), dk(kn), dv(kn);
  DeviceArray<float> lse(static_cast<size_t>(s.batch * s.q_heads * s.seq));
  DeviceArray<unsigned char> workspace(attention_backward_cuda_workspace_bytes(s));
  attention_forward_cuda(dq_in.get(), dk_in.get(), dv_in.get(), out.get(), lse.get(), s, scale, nullptr,
                         docs_on_device);
  attention_backward_cuda(ddout.get(), dq_in.get(), dk_in.get(), dv_in.get(), out.get(), lse.get(), dq.get(),
                          dk.get(), dv.get(), s, scale, workspace.get(), nullptr, docs_on_device);
  return {out.download(), dq.download(), dk.download(), dv.download(), lse.download()};
}

struct DocumentsCase {
  AttentionShape shape;
  std::vector<std::vector<int64_t>> rows;
};

TEST(AttentionDocumentsCuda, MatchesCpuWithTheSameDocuments) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const DocumentsCase cases[] = {
      {{2, 130, 4, 2, 64}, {{5, 70, 1, 54}, {64, 64, 2}}},
      {{1, 300, 8, 2, 128}, {{1, 63, 129, 100, 7}}},
      {{2, 96, 3, 1, 48}, {{96}, {20, 20, 56}}},  // head_dim padded to 64; a row of one document
  };
  for (const DocumentsCase& c : cases) {
    const AttentionShape& s = c.shape;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const int64_t qn = s.batch * s.seq * s.q_width(), kn = s.batch * s.seq * s.kv_width();
    const auto q = random_bf16(qn, 1), k = random_bf16(kn, 2), v = random_bf16(kn, 3), dout = random_bf16(qn, 4);
    const std::vector<int32_t> docs = starts_of(c.rows);
    DeviceArray<int32_t> ddocs(docs);
    const GpuRun got = run_gpu(s, scale, q, k, v, dout, ddocs.get());

    // The CPU's backward starts from the GPU forward's (bf16) out and its lse.
    const auto fq = widen(q), fk = widen(k), fv = widen(v), fdout = widen(dout);
    std::vector<float> out(static_cast<size_t>(qn)), lse(static_cast<size_t>(s.batch * s.q_heads * s.seq));
    attention_forward(fq.data(), fk.data(), fv.data(), out.data(), lse.data(), s, scale, docs.data());
    const auto gpu_out = widen(got.out);
    std::vector<float> dq(static_cast<size_t>(qn)), dk(static_cast<size_t>(kn)), dv(static_cast<size_t>(kn));
    attention_backward(fdout.data(), fq.data(), fk.data(), fv.data(), gpu_out.data(), got.lse.data(), dq.data(),
                       dk.data(), dv.data(), s, scale, docs.data());
    const std::string where = "seq " + std::to_string(s.seq) + ", head_dim " + std::to_string(s.head_dim);
    EXPECT_LT(rel_error(gpu_out, as_double(out)), kBf16Tolerance) << "out, " << where;
    EXPECT_LT(rel_error(got.lse, as_double(lse)), kLseTolerance) << "lse, " << where;
    EXPECT_LT(rel_error(widen(got.dq), as_double(dq)), kBf16Tolerance) << "dq, " << where;
    EXPECT_LT(rel_error(widen(got.dk), as_double(dk)), kBf16Tolerance) << "dk, " << where;
    EXPECT_LT(rel_error(widen(got.dv), as_double(dv)), kBf16Tolerance) << "dv, " << where;
  }
}

TEST(AttentionDocumentsCuda, OneDocumentPerRowIsThePlainKernelBitForBit) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
  const AttentionShape s{2, 200, 8, 2, 128};
  const double scale = 1.0 / std::sqrt(128.0);
  const int64_t qn = s.batch * s.seq * s.q_width(), kn = s.batch * s.seq * s.kv_width();
  const auto q = random_bf16(qn, 5), k = random_bf16(kn, 6), v = random_bf16(kn, 7), dout = random_bf16(qn, 8);
  DeviceArray<int32_t> ddocs(starts_of({{200}, {200}}));
  const GpuRun with = run_gpu(s, scale, q, k, v, dout, ddocs.get());
  const GpuRun without = run_gpu(s, scale, q, k, v, dout, nullptr);
  EXPECT_EQ(bits_of(with.out), bits_of(without.out));
  EXPECT_EQ(with.lse, without.lse);
  EXPECT_EQ(bits_of(with.dq), bits_of(without.dq));
  EXPECT_EQ(bits_of(with.dk), bits_of(without.dk));
  EXPECT_EQ(bits_of(with.dv), bits_of(without.dv));
}

}  // namespace
}  // namespace spillway::ops
