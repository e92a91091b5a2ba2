// GPU matmul (cuBLASLt) against the CPU matmul (OpenBLAS) on the same
// bf16-rounded inputs: every transpose combination, odd and LLaMA shapes,
// bf16 and f32 outputs, beta = 0 (over NaN-poisoned C) and beta != 0, k = 0,
// unaligned views, determinism and the plan cache.
#include "ops/matmul_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cublas_check.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/matmul.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

// Tolerances of the brief: bf16 outputs carry bf16 rounding; bf16 inputs
// into f32 only fp32 accumulation; f32 only fp32 rounding.
double tolerance(DType ab, DType c) {
  if (c == DType::bf16) return 1e-2;
  return ab == DType::bf16 ? 1e-3 : 1e-5;
}

// Uniform in [-1, 1) from (seed, index) alone, so the big LLaMA operands can
// be filled by every core at once and stay reproducible.
float uniform_at(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

// Host values exactly representable in `type`, so the CPU reference sees
// what the GPU sees.
struct HostMatrix {
  DType type = DType::f32;
  std::vector<float> values;
};

HostMatrix random_matrix(int64_t count, uint64_t seed, DType type) {
  HostMatrix h{type, std::vector<float>(static_cast<size_t>(count))};
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float x = uniform_at(seed, static_cast<uint64_t>(i));
    h.values[static_cast<size_t>(i)] = type == DType::bf16 ? to_float(to_bf16(x)) : x;
  }
  return h;
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { SPW_CUDA(cudaMalloc(&ptr_, std::max<size_t>(bytes, 256))); }
  ~DeviceBuffer() { SPW_CUDA_WARN(cudaFree(ptr_)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

void upload(const HostMatrix& h, void* dst, cudaStream_t stream) {
  const size_t n = h.values.size();
  if (h.type == DType::f32) {
    SPW_CUDA(cudaMemcpyAsync(dst, h.values.data(), n * 4, cudaMemcpyHostToDevice, stream));
    SPW_CUDA(cudaStreamSynchronize(stream));
    return;
  }
  std::vector<bf16> staged(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i) {
    staged[static_cast<size_t>(i)] = to_bf16(h.values[static_cast<size_t>(i)]);
  }
  SPW_CUDA(cudaMemcpyAsync(dst, staged.data(), n * 2, cudaMemcpyHostToDevice, stream));
  SPW_CUDA(cudaStreamSynchronize(stream));
}

// A GPU result as raw bytes (for bitwise comparison) with float access.
struct HostResult {
  DType type = DType::f32;
  std::vector<unsigned char> bytes;

  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(type)); }
  float at(int64_t i) const {
    if (type == DType::f32) {
      float v;
      std::memcpy(&v, bytes.data() + i * 4, 4);
      return v;
    }
    bf16 h;
    std::memcpy(&h.bits, bytes.data() + i * 2, 2);
    return to_float(h);
  }
  std::vector<float> floats() const {
    std::vector<float> out(static_cast<size_t>(size()));
    for (int64_t i = 0; i < size(); ++i) out[static_cast<size_t>(i)] = at(i);
    return out;
  }
  int64_t non_finite() const {
    int64_t bad = 0;
#pragma omp parallel for reduction(+ : bad) schedule(static)
    for (int64_t i = 0; i < size(); ++i) bad += std::isfinite(at(i)) ? 0 : 1;
    return bad;
  }
};

HostResult download(const void* src, int64_t count, DType type, cudaStream_t stream) {
  HostResult r{type, std::vector<unsigned char>(static_cast<size_t>(count) * dtype_size(type))};
  SPW_CUDA(cudaMemcpyAsync(r.bytes.data(), src, r.bytes.size(), cudaMemcpyDeviceToHost, stream));
  SPW_CUDA(cudaStreamSynchronize(stream));
  return r;
}

struct Case {
  bool trans_a = false, trans_b = false;
  int64_t m = 1, n = 1, k = 1;
  DType ab = DType::bf16, c = DType::bf16;
  float alpha = 1.0f, beta = 0.0f;

  std::string text() const {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " " + (trans_a ? "T" : "N") + (trans_b ? "T" : "N") + " " +
           std::string(dtype_name(ab)) + "->" + std::string(dtype_name(c)) +
           " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  }
};

// Inputs and the GPU result of one case. C starts as `c0` when beta != 0 and
// as NaN everywhere (0xFF bytes) when beta = 0, so unwritten elements show.
struct Outcome {
  HostMatrix a, b, c0;
  HostResult c;
};

Outcome run_on_gpu(CublasLtMatmul& mm, const Case& cs, uint64_t seed, cudaStream_t stream) {
  Outcome out;
  out.a = random_matrix(cs.m * cs.k, seed, cs.ab);
  out.b = random_matrix(cs.k * cs.n, seed + 1, cs.ab);
  DeviceBuffer a(out.a.values.size() * dtype_size(cs.ab));
  DeviceBuffer b(out.b.values.size() * dtype_size(cs.ab));
  DeviceBuffer c(static_cast<size_t>(cs.m * cs.n) * dtype_size(cs.c));
  upload(out.a, a.get(), stream);
  upload(out.b, b.get(), stream);
  if (cs.beta != 0.0f) {
    out.c0 = random_matrix(cs.m * cs.n, seed + 2, cs.c);
    upload(out.c0, c.get(), stream);
  } else {
    SPW_CUDA(cudaMemsetAsync(c.get(), 0xFF, static_cast<size_t>(cs.m * cs.n) * dtype_size(cs.c),
                             stream));
  }
  mm.run(cs.trans_a, cs.trans_b, cs.m, cs.n, cs.k, cs.alpha, a.get(), cs.ab, b.get(), cs.ab,
         cs.beta, c.get(), cs.c, stream);
  out.c = download(c.get(), cs.m * cs.n, cs.c, stream);
  return out;
}

// The CPU matmul in float64 over the whole of C.
std::vector<double> full_reference(const Case& cs, const Outcome& o) {
  std::vector<double> a(o.a.values.begin(), o.a.values.end());
  std::vector<double> b(o.b.values.begin(), o.b.values.end());
  std::vector<double> c(static_cast<size_t>(cs.m * cs.n), 0.0);
  if (cs.beta != 0.0f) c.assign(o.c0.values.begin(), o.c0.values.end());
  matmul<double>(cs.trans_a, cs.trans_b, cs.m, cs.n, cs.k, cs.alpha, a.data(), b.data(), cs.beta,
                 c.data());
  return c;
}

double full_error(CublasLtMatmul& mm, const Case& cs, uint64_t seed, cudaStream_t stream) {
  const Outcome o = run_on_gpu(mm, cs, seed, stream);
  return testing::rel_error(o.c.floats(), full_reference(cs, o));
}

// Rows and columns worth checking in a C too big for a full CPU reference:
// both ends, tile boundaries and a few spread through the middle.
std::vector<int64_t> sample_indices(int64_t size) {
  std::vector<int64_t> picks = {0, 1, 63, 64, 127, 128, 255, 256, size / 3, size / 2 + 1,
                                (size * 3) / 4 + 5, size - 129, size - 2, size - 1};
  std::erase_if(picks, [size](int64_t i) { return i < 0 || i >= size; });
  std::sort(picks.begin(), picks.end());
  picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
  return picks;
}

// Sampled rows and columns of C against the CPU float matmul, and every
// element of C finite (written, since C started as NaN when beta = 0).
void check_sampled(const Case& cs, const Outcome& o) {
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  auto op_a = [&](int64_t i, int64_t p) {
    return o.a.values[static_cast<size_t>(cs.trans_a ? p * m + i : i * k + p)];
  };
  auto op_b = [&](int64_t p, int64_t j) {
    return o.b.values[static_cast<size_t>(cs.trans_b ? j * k + p : p * n + j)];
  };
  auto c0 = [&](int64_t i, int64_t j) {
    return cs.beta != 0.0f ? cs.beta * static_cast<double>(o.c0.values[static_cast<size_t>(i * n + j)])
                           : 0.0;
  };
  const double tol = tolerance(cs.ab, cs.c);

  const std::vector<int64_t> rows = sample_indices(m);
  const auto r = static_cast<int64_t>(rows.size());
  std::vector<float> sub_a(static_cast<size_t>(r * k));
  for (int64_t t = 0; t < r; ++t) {
    for (int64_t p = 0; p < k; ++p) sub_a[static_cast<size_t>(t * k + p)] = op_a(rows[t], p);
  }
  std::vector<float> row_out(static_cast<size_t>(r * n));
  matmul<float>(false, cs.trans_b, r, n, k, cs.alpha, sub_a.data(), o.b.values.data(), 0.0f,
                row_out.data());
  std::vector<double> want(static_cast<size_t>(r * n));
  std::vector<float> got(static_cast<size_t>(r * n));
  for (int64_t t = 0; t < r; ++t) {
    for (int64_t j = 0; j < n; ++j) {
      want[static_cast<size_t>(t * n + j)] = row_out[static_cast<size_t>(t * n + j)] + c0(rows[t], j);
      got[static_cast<size_t>(t * n + j)] = o.c.at(rows[t] * n + j);
    }
  }
  EXPECT_LT(testing::rel_error(got, want), tol) << "sampled rows";

  const std::vector<int64_t> cols = sample_indices(n);
  const auto s = static_cast<int64_t>(cols.size());
  std::vector<float> sub_b(static_cast<size_t>(k * s));
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t t = 0; t < s; ++t) sub_b[static_cast<size_t>(p * s + t)] = op_b(p, cols[t]);
  }
  std::vector<float> col_out(static_cast<size_t>(m * s));
  matmul<float>(cs.trans_a, false, m, s, k, cs.alpha, o.a.values.data(), sub_b.data(), 0.0f,
                col_out.data());
  want.assign(static_cast<size_t>(m * s), 0.0);
  got.assign(static_cast<size_t>(m * s), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t t = 0; t < s; ++t) {
      want[static_cast<size_t>(i * s + t)] = col_out[static_cast<size_t>(i * s + t)] + c0(i, cols[t]);
      got[static_cast<size_t>(i * s + t)] = o.c.at(i * n + cols[t]);
    }
  }
  EXPECT_LT(testing::rel_error(got, want), tol) << "sampled columns";

  EXPECT_EQ(o.c.non_finite(), 0) << "elements of C left unwritten or overflowed";
}

class MatmulCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU";
    SPW_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_ != nullptr) SPW_CUDA_WARN(cudaStreamDestroy(stream_));
  }
  cudaStream_t stream_ = nullptr;
};

TEST(CublasCheck, NamesTheCallAndTheStatus) {
  // Host-only calls: this runs with or without a GPU.
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  std::string msg;
  try {
    SPW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    nullptr, 3));
  } catch (const Error& e) {
    msg = e.what();
  }
  cublasLtMatmulPreferenceDestroy(pref);
  EXPECT_EQ(msg.rfind("cublasLtMatmulPreferenceSetAttribute(", 0), 0u) << msg;
  EXPECT_NE(msg.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << msg;
}

TEST_F(MatmulCudaTest, OddShapesEveryTransposeAndType) {
  CublasLtMatmul mm;
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 129}, {1000, 1, 4096},
                               {4096, 1536, 512}};
  struct Mode {
    DType ab, c;
    float beta;
  };
  const Mode modes[] = {{DType::bf16, DType::bf16, 0.0f},
                        {DType::bf16, DType::f32, 0.0f},
                        {DType::bf16, DType::f32, 1.0f},
                        {DType::f32, DType::f32, 0.0f},
                        {DType::f32, DType::f32, 1.0f}};
  uint64_t seed = 100;
  for (const auto& shape : shapes) {
    for (int t = 0; t < 4; ++t) {
      for (const Mode& mode : modes) {
        Case cs;
        cs.m = shape[0];
        cs.n = shape[1];
        cs.k = shape[2];
        cs.trans_a = (t & 1) != 0;
        cs.trans_b = (t & 2) != 0;
        cs.ab = mode.ab;
        cs.c = mode.c;
        cs.beta = mode.beta;
        SCOPED_TRACE(cs.text());
        EXPECT_LT(full_error(mm, cs, seed += 10, stream_), tolerance(cs.ab, cs.c));
      }
    }
  }
}

TEST_F(MatmulCudaTest, AlphaAndBetaScale) {
  CublasLtMatmul mm;
  uint64_t seed = 2000;
  for (DType c : {DType::bf16, DType::f32}) {
    for (int t = 0; t < 4; ++t) {
      Case cs;
      cs.m = 65;
      cs.n = 31;
      cs.k = 257;
      cs.trans_a = (t & 1) != 0;
      cs.trans_b = (t & 2) != 0;
      cs.c = c;
      cs.alpha = 0.5f;
      cs.beta = 0.75f;
      SCOPED_TRACE(cs.text());
      EXPECT_LT(full_error(mm, cs, seed += 10, stream_), tolerance(cs.ab, cs.c));
    }
  }
  Case f32;
  f32.m = 40;
  f32.n = 9;
  f32.k = 100;
  f32.ab = f32.c = DType::f32;
  f32.alpha = -1.5f;
  f32.beta = 2.0f;
  SCOPED_TRACE(f32.text());
  EXPECT_LT(full_error(mm, f32, 3000, stream_), 1e-5);
}

// A weight gradient accumulated over two micro-batches, as the engines do:
// C (f32, holding known values) += op(A1) op(B1), then += op(A2) op(B2), with
// beta = 1, against the CPU's float matmul doing the same.
TEST_F(MatmulCudaTest, AccumulatesMicroBatchesIntoC) {
  CublasLtMatmul mm;
  const int64_t m = 96, n = 80, k = 300;
  uint64_t seed = 2500;
  for (DType ab : {DType::bf16, DType::f32}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
      SCOPED_TRACE(std::string(dtype_name(ab)) + (ta ? " T" : " N") + (tb ? "T" : "N"));
      const HostMatrix c0 = random_matrix(m * n, seed += 10, DType::f32);
      DeviceBuffer c(static_cast<size_t>(m * n) * 4);
      upload(c0, c.get(), stream_);
      std::vector<float> want = c0.values;
      for (int micro = 0; micro < 2; ++micro) {
        const HostMatrix a = random_matrix(m * k, seed += 10, ab), b = random_matrix(k * n, seed += 10, ab);
        DeviceBuffer da(a.values.size() * dtype_size(ab)), db(b.values.size() * dtype_size(ab));
        upload(a, da.get(), stream_);
        upload(b, db.get(), stream_);
        mm.run(ta, tb, m, n, k, 1.0f, da.get(), ab, db.get(), ab, 1.0f, c.get(), DType::f32, stream_);
        matmul<float>(ta, tb, m, n, k, 1.0f, a.values.data(), b.values.data(), 1.0f, want.data());
      }
      const HostResult got = download(c.get(), m * n, DType::f32, stream_);
      EXPECT_LT(testing::rel_error(got.floats(), std::vector<double>(want.begin(), want.end())),
                tolerance(ab, DType::f32));
    }
  }
}

TEST_F(MatmulCudaTest, AddendIsAddedInTheEpilogueAndLeftUnchanged) {
  // With several candidates each is timed writing `out` and reading the addend.
  for (int candidates : {1, 4}) {
    SCOPED_TRACE(std::to_string(candidates) + " candidates");
    CublasLtMatmul mm(CublasLtMatmul::kDefaultWorkspaceBytes, candidates);
    const int64_t m = 130, n = 72, k = 200;
    uint64_t seed = 2700;
    for (DType ab : {DType::bf16, DType::f32}) {
      for (DType c : {DType::bf16, DType::f32}) {
        if (ab == DType::f32 && c == DType::bf16) continue;
        for (int t = 0; t < 4; ++t) {
          const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
          SCOPED_TRACE(std::string(dtype_name(ab)) + "->" + std::string(dtype_name(c)) + (ta ? " T" : " N") +
                       (tb ? "T" : "N"));
          const HostMatrix a = random_matrix(m * k, seed += 10, ab), b = random_matrix(k * n, seed += 10, ab);
          const HostMatrix addend = random_matrix(m * n, seed += 10, c);
          DeviceBuffer da(a.values.size() * dtype_size(ab)), db(b.values.size() * dtype_size(ab));
          DeviceBuffer dx(static_cast<size_t>(m * n) * dtype_size(c)), dout(static_cast<size_t>(m * n) * dtype_size(c));
          upload(a, da.get(), stream_);
          upload(b, db.get(), stream_);
          upload(addend, dx.get(), stream_);
          SPW_CUDA(cudaMemsetAsync(dout.get(), 0xFF, static_cast<size_t>(m * n) * dtype_size(c), stream_));
          mm.run_with_addend(ta, tb, m, n, k, da.get(), ab, db.get(), ab, dx.get(), dout.get(), c, stream_);
          std::vector<float> want = addend.values;
          matmul<float>(ta, tb, m, n, k, 1.0f, a.values.data(), b.values.data(), 1.0f, want.data());
          const HostResult got = download(dout.get(), m * n, c, stream_);
          EXPECT_EQ(got.non_finite(), 0);
          EXPECT_LT(testing::rel_error(got.floats(), std::vector<double>(want.begin(), want.end())), tolerance(ab, c));
          const HostResult kept = download(dx.get(), m * n, c, stream_);
          EXPECT_EQ(kept.floats(), addend.values) << "the addend was written to";
        }
      }
    }
  }
}

TEST_F(MatmulCudaTest, ZeroInnerSizeScalesC) {
  CublasLtMatmul mm;
  const int64_t m = 37, n = 19;
  for (DType type : {DType::bf16, DType::f32}) {
    for (float beta : {0.0f, 1.0f, 0.5f}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + " beta=" + std::to_string(beta));
      const HostMatrix c0 = random_matrix(m * n, 77, type);
      DeviceBuffer c(static_cast<size_t>(m * n) * dtype_size(type));
      DeviceBuffer ab(256);
      if (beta != 0.0f) {
        upload(c0, c.get(), stream_);
      } else {
        SPW_CUDA(cudaMemsetAsync(c.get(), 0xFF, static_cast<size_t>(m * n) * dtype_size(type),
                                 stream_));
      }
      mm.run(false, false, m, n, 0, 1.0f, ab.get(), type, ab.get(), type, beta, c.get(), type,
             stream_);
      const HostResult got = download(c.get(), m * n, type, stream_);
      std::vector<double> want(c0.values.begin(), c0.values.end());
      for (double& w : want) w *= beta;
      // Scaling by 0.5 is exact; everything else copies or zeroes.
      EXPECT_EQ(testing::rel_error(got.floats(), want), 0.0);
    }
  }
}

TEST_F(MatmulCudaTest, UnalignedViews) {
  // Views starting one element into an allocation: only 2- or 4-byte
  // aligned, where the heuristic's default assumption is 256.
  CublasLtMatmul mm;
  uint64_t seed = 4000;
  for (DType ab : {DType::bf16, DType::f32}) {
    for (int64_t size : {33, 256}) {
      Case cs;
      cs.m = cs.n = cs.k = size;
      cs.trans_b = true;
      cs.ab = cs.c = ab;
      SCOPED_TRACE(cs.text());
      const HostMatrix a = random_matrix(size * size, seed, ab);
      const HostMatrix b = random_matrix(size * size, seed + 1, ab);
      const size_t es = dtype_size(ab);
      DeviceBuffer da((a.values.size() + 1) * es), db((b.values.size() + 1) * es);
      DeviceBuffer dc(static_cast<size_t>(size * size + 1) * es);
      char* pa = da.get() + es;
      char* pb = db.get() + es;
      char* pc = dc.get() + es;
      upload(a, pa, stream_);
      upload(b, pb, stream_);
      SPW_CUDA(cudaMemsetAsync(pc, 0xFF, static_cast<size_t>(size * size) * es, stream_));
      mm.run(false, true, size, size, size, 1.0f, pa, ab, pb, ab, 0.0f, pc, ab, stream_);
      const HostResult got = download(pc, size * size, ab, stream_);
      const MatmulKey key =
          CublasLtMatmul::key_for(false, true, size, size, size, pa, ab, pb, ab, 0.0f, pc, ab);
      EXPECT_EQ(key.a_align, es);
      ASSERT_NE(mm.find_plan(key), nullptr);
      Outcome o{a, b, {}, got};
      EXPECT_LT(testing::rel_error(got.floats(), full_reference(cs, o)), tolerance(ab, ab));
      seed += 10;
    }
  }
}

TEST_F(MatmulCudaTest, LlamaShapes) {
  CublasLtMatmul mm;
  struct Shape {
    int64_t m, n, k;
    bool trans_a, trans_b;
    DType c;
    float beta;
  };
  const Shape shapes[] = {
      {16384, 2048, 2048, false, true, DType::bf16, 0.0f},    // q/o projection forward
      {16384, 8192, 2048, false, false, DType::bf16, 0.0f},   // down projection dX
      {2048, 2048, 16384, true, false, DType::f32, 0.0f},     // q/o dW, first micro-batch
      {2048, 2048, 16384, true, false, DType::f32, 1.0f},     // q/o dW, accumulated
  };
  uint64_t seed = 5000;
  for (const Shape& s : shapes) {
    Case cs;
    cs.m = s.m;
    cs.n = s.n;
    cs.k = s.k;
    cs.trans_a = s.trans_a;
    cs.trans_b = s.trans_b;
    cs.c = s.c;
    cs.beta = s.beta;
    SCOPED_TRACE(cs.text());
    check_sampled(cs, run_on_gpu(mm, cs, seed += 10, stream_));
  }
}

TEST_F(MatmulCudaTest, LmHeadFitsWithoutExtraMemory) {
  // logits[16384, 128256] = x[16384, 2048] W^T, W [128256, 2048]: 4.2 GB of
  // bf16 output. The run must use only the workspace made up front.
  CublasLtMatmul mm;
  Case cs;
  cs.m = 16384;
  cs.n = 128256;
  cs.k = 2048;
  cs.trans_b = true;
  SCOPED_TRACE(cs.text());
  Outcome o;
  o.a = random_matrix(cs.m * cs.k, 6000, cs.ab);
  o.b = random_matrix(cs.n * cs.k, 6001, cs.ab);
  DeviceBuffer a(o.a.values.size() * 2), b(o.b.values.size() * 2);
  DeviceBuffer c(static_cast<size_t>(cs.m * cs.n) * 2);
  upload(o.a, a.get(), stream_);
  upload(o.b, b.get(), stream_);
  SPW_CUDA(cudaMemsetAsync(c.get(), 0xFF, static_cast<size_t>(cs.m * cs.n) * 2, stream_));
  SPW_CUDA(cudaStreamSynchronize(stream_));
  size_t free_before = 0, free_after = 0, total = 0;
  SPW_CUDA(cudaMemGetInfo(&free_before, &total));
  mm.run(false, true, cs.m, cs.n, cs.k, 1.0f, a.get(), cs.ab, b.get(), cs.ab, 0.0f, c.get(), cs.c,
         stream_);
  SPW_CUDA(cudaStreamSynchronize(stream_));
  SPW_CUDA(cudaMemGetInfo(&free_after, &total));
  const double grown_mib =
      (static_cast<double>(free_before) - static_cast<double>(free_after)) / (1 << 20);
  std::printf("lm_head: device memory taken by the first run %.1f MiB (beyond the workspace)\n",
              grown_mib);
  // Loading the kernel's code may take a few MiB; a hidden output-sized
  // buffer would take gigabytes.
  EXPECT_LT(grown_mib, 256.0);
  const MatmulPlan* plan = mm.find_plan(CublasLtMatmul::key_for(
      false, true, cs.m, cs.n, cs.k, a.get(), cs.ab, b.get(), cs.ab, 0.0f, c.get(), cs.c));
  ASSERT_NE(plan, nullptr);
  EXPECT_LE(plan->workspace_bytes, mm.workspace_bytes());
  std::printf("lm_head plan: %s\n", plan->describe().c_str());
  o.c = download(c.get(), cs.m * cs.n, cs.c, stream_);
  check_sampled(cs, o);
}

TEST_F(MatmulCudaTest, RunsAreBitwiseDeterministic) {
  CublasLtMatmul mm;
  const Case cases[] = {
      {true, false, 2048, 2048, 16384, DType::bf16, DType::f32, 1.0f, 0.0f},   // dW, split-K territory
      {true, false, 2048, 512, 16384, DType::bf16, DType::f32, 1.0f, 1.0f},    // dW accumulated
      {false, false, 4096, 1536, 512, DType::bf16, DType::bf16, 1.0f, 0.0f},
      {false, true, 1000, 1, 4096, DType::f32, DType::f32, 1.0f, 0.0f},
  };
  uint64_t seed = 7000;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.text());
    const Outcome first = run_on_gpu(mm, cs, seed, stream_);
    const Outcome second = run_on_gpu(mm, cs, seed, stream_);
    EXPECT_EQ(first.c.non_finite(), 0);
    EXPECT_TRUE(first.c.bytes == second.c.bytes);
    seed += 10;
  }
}

TEST_F(MatmulCudaTest, PlanCacheReusesPlans) {
  CublasLtMatmul mm;
  DeviceBuffer a(1 << 20), b(1 << 20), c(1 << 20);
  SPW_CUDA(cudaMemsetAsync(a.get(), 0, 1 << 20, stream_));
  SPW_CUDA(cudaMemsetAsync(b.get(), 0, 1 << 20, stream_));
  auto run = [&](int64_t m, float beta) {
    mm.run(false, true, m, 17, 129, 1.0f, a.get(), DType::bf16, b.get(), DType::bf16, beta,
           c.get(), DType::f32, stream_);
  };
  auto key = [&](int64_t m, float beta) {
    return CublasLtMatmul::key_for(false, true, m, 17, 129, a.get(), DType::bf16, b.get(),
                                   DType::bf16, beta, c.get(), DType::f32);
  };
  EXPECT_EQ(mm.find_plan(key(33, 0.0f)), nullptr);
  run(33, 0.0f);
  const MatmulPlan* first = mm.find_plan(key(33, 0.0f));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(mm.plan_count(), 1u);
  run(33, 0.0f);
  EXPECT_EQ(mm.find_plan(key(33, 0.0f)), first);
  EXPECT_EQ(mm.plan_count(), 1u);
  run(33, 1.0f);  // beta != 0 is another key
  EXPECT_EQ(mm.plan_count(), 2u);
  run(34, 0.0f);  // and so is another shape
  EXPECT_EQ(mm.plan_count(), 3u);
  run(33, 0.0f);
  EXPECT_EQ(mm.find_plan(key(33, 0.0f)), first);
  EXPECT_EQ(mm.plan_count(), 3u);
  // A view two bytes in has another alignment, hence another key.
  EXPECT_FALSE(CublasLtMatmul::key_for(false, true, 33, 17, 129, a.get() + 2, DType::bf16,
                                       b.get(), DType::bf16, 0.0f, c.get(),
                                       DType::f32) == key(33, 0.0f));
  SPW_CUDA(cudaStreamSynchronize(stream_));
}

TEST_F(MatmulCudaTest, TimedCandidatesStayCorrect) {
  CublasLtMatmul mm(CublasLtMatmul::kDefaultWorkspaceBytes, 4);
  Case cs;
  cs.m = 4096;
  cs.n = 1536;
  cs.k = 512;
  cs.trans_b = true;
  SCOPED_TRACE(cs.text());
  const Outcome first = run_on_gpu(mm, cs, 8000, stream_);
  const Outcome second = run_on_gpu(mm, cs, 8000, stream_);
  EXPECT_LT(testing::rel_error(first.c.floats(), full_reference(cs, first)), 1e-2);
  EXPECT_TRUE(first.c.bytes == second.c.bytes);
  ASSERT_EQ(mm.plan_count(), 1u);
}

// Timing may pick any candidate, and the pick can differ between processes:
// every candidate it may pick must give the heuristic's first's bits, on the
// training step's shapes where the heuristic's first is not the fastest.
TEST_F(MatmulCudaTest, EveryTimedCandidateGivesTheSameBits) {
  constexpr int kCandidates = 8;
  const Case cases[] = {
      {false, true, 16384, 3072, 2048, DType::bf16, DType::bf16, 1.0f, 0.0f},  // q|k|v forward
      {false, false, 16384, 8192, 2048, DType::bf16, DType::bf16, 1.0f, 0.0f}, // down dX
      {true, false, 3072, 2048, 16384, DType::bf16, DType::f32, 1.0f, 0.0f},   // q|k|v dW, first micro-batch
      {false, true, 16384, 2048, 2048, DType::bf16, DType::bf16, 1.0f, 1.0f},  // o forward with the residual
      {false, true, 1000, 1, 4096, DType::f32, DType::f32, 1.0f, 0.0f},        // exact fp32: not timed
  };
  // Device buffers are 256-byte aligned; the key only reads the alignment.
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  size_t distinct = 0;
  uint64_t seed = 9000;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.text());
    std::set<std::string> plans;
    std::vector<unsigned char> first;
    for (int i = 0; i < kCandidates; ++i) {
      CublasLtMatmul mm;
      mm.pin_candidate(i);
      const Outcome o = run_on_gpu(mm, cs, seed, stream_);
      const MatmulPlan* plan = mm.find_plan(CublasLtMatmul::key_for(
          cs.trans_a, cs.trans_b, cs.m, cs.n, cs.k, aligned, cs.ab, aligned, cs.ab, cs.beta, aligned, cs.c));
      ASSERT_NE(plan, nullptr);
      const std::string text = plan->describe();
      plans.insert(text.substr(0, text.find(" (")));
      if (i == 0) {
        first = o.c.bytes;
        EXPECT_EQ(o.c.non_finite(), 0);
      } else {
        EXPECT_TRUE(o.c.bytes == first) << "candidate " << i << ": " << text;
      }
    }
    std::printf("%s: %zu distinct algorithms, all the same bits\n", cs.text().c_str(), plans.size());
    distinct += plans.size();
    seed += 10;
  }
  // Otherwise nothing was compared with anything.
  EXPECT_GT(distinct, std::size(cases));
}

TEST_F(MatmulCudaTest, CallersWorkspace) {
  DeviceBuffer workspace(4 << 20);
  CublasLtMatmul mm(workspace.get(), 4 << 20);
  Case cs;
  cs.m = 300;
  cs.n = 200;
  cs.k = 1000;
  cs.c = DType::f32;
  SCOPED_TRACE(cs.text());
  EXPECT_LT(full_error(mm, cs, 9000, stream_), 1e-3);
  // k = 0 with beta = 0.5 takes its zero operands from this workspace too.
  cs.k = 0;
  cs.beta = 0.5f;
  const Outcome o = run_on_gpu(mm, cs, 9100, stream_);
  std::vector<double> want(o.c0.values.begin(), o.c0.values.end());
  for (double& w : want) w *= 0.5;
  EXPECT_EQ(testing::rel_error(o.c.floats(), want), 0.0);
  EXPECT_THROW(CublasLtMatmul(workspace.get() + 16, 1 << 20), Error);
}

TEST_F(MatmulCudaTest, RejectsWhatItCannotDo) {
  CublasLtMatmul mm;
  DeviceBuffer buf(1 << 16);
  auto error_of = [&](DType a, DType b, DType c, int64_t m) {
    try {
      mm.run(false, false, m, 4, 4, 1.0f, buf.get(), a, buf.get(), b, 0.0f, buf.get(), c, stream_);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of(DType::f32, DType::bf16, DType::f32, 4).rfind("matmul_cuda: unsupported dtypes", 0), 0u);
  EXPECT_EQ(error_of(DType::bf16, DType::bf16, DType::f16, 4).rfind("matmul_cuda: unsupported dtypes", 0), 0u);
  EXPECT_EQ(error_of(DType::bf16, DType::bf16, DType::bf16, -1).rfind("matmul_cuda: negative size", 0), 0u);
  EXPECT_THROW(CublasLtMatmul(CublasLtMatmul::kDefaultWorkspaceBytes, 0), Error);
}

}  // namespace
}  // namespace spillway::ops
