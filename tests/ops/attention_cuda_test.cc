// GPU attention (cuDNN SDPA and the own flash kernel) against the CPU kernel
// in float on the same bf16-rounded inputs, and against each other at a
// LLaMA length.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/attention.h"
#include "ops/attention_cudnn.h"
#include "testing/numeric.h"

namespace spillway::ops {
namespace {

using testing::random_vector;
using testing::rel_error;

constexpr double kBf16Tolerance = 2e-2;
// lse is fp32 all the way, from identical bf16 inputs.
constexpr double kLseTolerance = 1e-3;

int64_t q_numel(const AttentionShape& s) { return s.batch * s.seq * s.q_heads * s.head_dim; }
int64_t kv_numel(const AttentionShape& s) { return s.batch * s.seq * s.kv_heads * s.head_dim; }
int64_t lse_numel(const AttentionShape& s) { return s.batch * s.q_heads * s.seq; }

std::string describe(const AttentionShape& s, double scale) {
  return "batch " + std::to_string(s.batch) + ", seq " + std::to_string(s.seq) + ", heads " +
         std::to_string(s.q_heads) + "/" + std::to_string(s.kv_heads) + ", head_dim " +
         std::to_string(s.head_dim) + ", scale " + std::to_string(scale);
}

// A device allocation of n elements of T, freed on scope exit. `offset`
// elements of slack in front let a test hand out a misaligned pointer.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int64_t n, int64_t offset = 0) : n_(n), offset_(offset) {
    SPW_CUDA(cudaMalloc(&base_, static_cast<size_t>(n + offset + 1) * sizeof(T)));
  }
  ~DeviceBuffer() { SPW_CUDA_WARN(cudaFree(base_)); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() { return base_ + offset_; }
  // Both wait for the device: the kernels run on non-blocking streams,
  // which wait neither for the legacy stream's memset nor for a pageable
  // copy's DMA.
  void upload(const std::vector<T>& host) {
    SPW_CUDA(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    SPW_CUDA(cudaDeviceSynchronize());
  }
  std::vector<T> download() {
    std::vector<T> host(static_cast<size_t>(n_));
    SPW_CUDA(cudaMemcpy(host.data(), get(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // All bits set: NaN as bf16 and as fp32, so an element left unwritten fails.
  void poison() {
    SPW_CUDA(cudaMemset(get(), 0xFF, static_cast<size_t>(n_) * sizeof(T)));
    SPW_CUDA(cudaDeviceSynchronize());
  }

 private:
  T* base_ = nullptr;
  int64_t n_, offset_;
};

// Random values in [-1, 1) rounded to bf16, as bf16 and as their float values.
struct Rounded {
  std::vector<bf16> bits;
  std::vector<float> values;
};

Rounded rounded(const std::vector<double>& x) {
  Rounded r;
  r.bits.reserve(x.size());
  r.values.reserve(x.size());
  for (double d : x) {
    r.bits.push_back(to_bf16(static_cast<float>(d)));
    r.values.push_back(to_float(r.bits.back()));
  }
  return r;
}

Rounded random_rounded(int64_t n, uint64_t seed) { return rounded(random_vector(n, seed)); }

std::vector<float> as_float(const std::vector<bf16>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = to_float(x[i]);
  return r;
}

std::vector<double> as_double(const std::vector<float>& x) {
  return std::vector<double>(x.begin(), x.end());
}

// Inputs of one case and the CPU kernel's results on them. Both backwards
// (CPU and GPU) get the CPU forward's out rounded to bf16 and its lse, so the
// backward check does not depend on the GPU forward.
struct Problem {
  AttentionShape shape;
  double scale;
  Rounded q, k, v, dout, out;
  std::vector<float> lse;
  std::vector<double> want_out, want_lse, want_dq, want_dk, want_dv;
};

Problem make_problem(const AttentionShape& s, double scale, uint64_t seed) {
  Problem p{s, scale, random_rounded(q_numel(s), seed), random_rounded(kv_numel(s), seed + 1),
            random_rounded(kv_numel(s), seed + 2), random_rounded(q_numel(s), seed + 3),
            {}, {}, {}, {}, {}, {}, {}};
  std::vector<float> out(static_cast<size_t>(q_numel(s)));
  p.lse.resize(static_cast<size_t>(lse_numel(s)));
  attention_forward(p.q.values.data(), p.k.values.data(), p.v.values.data(), out.data(),
                    p.lse.data(), s, scale);
  p.want_out = as_double(out);
  p.want_lse = as_double(p.lse);
  p.out = rounded(p.want_out);
  std::vector<float> dq(static_cast<size_t>(q_numel(s)));
  std::vector<float> dk(static_cast<size_t>(kv_numel(s))), dv(dk.size());
  attention_backward(p.dout.values.data(), p.q.values.data(), p.k.values.data(),
                     p.v.values.data(), p.out.values.data(), p.lse.data(), dq.data(), dk.data(),
                     dv.data(), s, scale);
  p.want_dq = as_double(dq);
  p.want_dk = as_double(dk);
  p.want_dv = as_double(dv);
  return p;
}

// What one GPU implementation returned, as floats.
struct Results {
  bool has_backward = false;
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<bf16> out_bits, dq_bits, dk_bits, dv_bits;
};

// One GPU implementation: both passes on device buffers.
struct Implementation {
  virtual ~Implementation() = default;
  virtual bool has_backward(const AttentionShape&, double) { return true; }
  virtual void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                       const AttentionShape& s, double scale) = 0;
  virtual void backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* out, const float* lse, bf16* dq, bf16* dk, bf16* dv,
                        const AttentionShape& s, double scale) = 0;
};

struct OwnKernel final : Implementation {
  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
               const AttentionShape& s, double scale) override {
    attention_forward_cuda(q, k, v, out, lse, s, scale, nullptr);
  }
  void backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                const float* lse, bf16* dq, bf16* dk, bf16* dv, const AttentionShape& s,
                double scale) override {
    DeviceBuffer<unsigned char> workspace(
        static_cast<int64_t>(attention_backward_cuda_workspace_bytes(s)));
    attention_backward_cuda(dout, q, k, v, out, lse, dq, dk, dv, s, scale, workspace.get(),
                            nullptr);
  }
};

struct Cudnn final : Implementation {
  explicit Cudnn(CudnnBackwardOrder order) : attention(order) {}
  bool has_backward(const AttentionShape& s, double scale) override {
    return attention.supports(s, scale, AttentionPass::kBackward);
  }
  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
               const AttentionShape& s, double scale) override {
    DeviceBuffer<unsigned char> workspace(static_cast<int64_t>(
        attention.workspace_bytes(s, scale, AttentionPass::kForward)));
    attention.forward(q, k, v, out, lse, s, scale, workspace.get(), nullptr);
  }
  void backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                const float* lse, bf16* dq, bf16* dk, bf16* dv, const AttentionShape& s,
                double scale) override {
    DeviceBuffer<unsigned char> workspace(static_cast<int64_t>(
        attention.workspace_bytes(s, scale, AttentionPass::kBackward)));
    attention.backward(dout, q, k, v, out, lse, dq, dk, dv, s, scale, workspace.get(), nullptr);
  }
  CudnnAttention attention;
};

// cuDNN reading q, k and v as the column blocks of one packed tensor, and
// writing dq, dk and dv into one (AttentionShape::packed_qkv): the test packs
// the dense inputs on the device and unpacks the gradients, whose packed
// buffer starts poisoned, so a block cuDNN left unwritten fails.
struct PackedCudnn final : Implementation {
  explicit PackedCudnn(CudnnBackwardOrder order) : attention(order) {}
  static AttentionShape packed(AttentionShape s) {
    s.packed_qkv = true;
    return s;
  }
  // Copies the three blocks between the dense tensors and the packed one.
  static void copy(const AttentionShape& s, bf16* packed, bf16* const (&dense)[3], bool to_packed) {
    const int64_t rows = s.batch * s.seq, width = (s.q_heads + 2 * s.kv_heads) * s.head_dim;
    const int64_t cols[3] = {s.q_heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim};
    int64_t at = 0;
    for (int i = 0; i < 3; ++i) {
      const size_t pitch = static_cast<size_t>(width) * 2, dense_pitch = static_cast<size_t>(cols[i]) * 2;
      if (to_packed) {
        SPW_CUDA(cudaMemcpy2D(packed + at, pitch, dense[i], dense_pitch, dense_pitch, static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice));
      } else {
        SPW_CUDA(cudaMemcpy2D(dense[i], dense_pitch, packed + at, pitch, dense_pitch, static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice));
      }
      at += cols[i];
    }
  }
  static int64_t packed_numel(const AttentionShape& s) { return q_numel(s) + 2 * kv_numel(s); }
  bool has_backward(const AttentionShape& s, double scale) override {
    return attention.supports(packed(s), scale, AttentionPass::kBackward);
  }
  void forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse, const AttentionShape& s,
               double scale) override {
    const AttentionShape ps = packed(s);
    DeviceBuffer<bf16> qkv(packed_numel(s));
    copy(s, qkv.get(), {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v)}, true);
    DeviceBuffer<unsigned char> workspace(
        static_cast<int64_t>(attention.workspace_bytes(ps, scale, AttentionPass::kForward)));
    const int64_t kv_at = s.q_heads * s.head_dim, v_at = kv_at + s.kv_heads * s.head_dim;
    attention.forward(qkv.get(), qkv.get() + kv_at, qkv.get() + v_at, out, lse, ps, scale, workspace.get(), nullptr);
    SPW_CUDA(cudaDeviceSynchronize());
  }
  void backward(const bf16* dout, const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                bf16* dq, bf16* dk, bf16* dv, const AttentionShape& s, double scale) override {
    const AttentionShape ps = packed(s);
    DeviceBuffer<bf16> qkv(packed_numel(s)), dqkv(packed_numel(s));
    copy(s, qkv.get(), {const_cast<bf16*>(q), const_cast<bf16*>(k), const_cast<bf16*>(v)}, true);
    dqkv.poison();
    DeviceBuffer<unsigned char> workspace(
        static_cast<int64_t>(attention.workspace_bytes(ps, scale, AttentionPass::kBackward)));
    const int64_t kv_at = s.q_heads * s.head_dim, v_at = kv_at + s.kv_heads * s.head_dim;
    attention.backward(dout, qkv.get(), qkv.get() + kv_at, qkv.get() + v_at, out, lse, dqkv.get(),
                       dqkv.get() + kv_at, dqkv.get() + v_at, ps, scale, workspace.get(), nullptr);
    copy(s, dqkv.get(), {dq, dk, dv}, false);
    SPW_CUDA(cudaDeviceSynchronize());
  }
  CudnnAttention attention;
};

// Runs forward on (q, k, v) and, where the implementation has it, backward
// on (dout, q, k, v, out, lse), with every output poisoned first. `misalign` offsets the input pointers by one
// element (2 bytes), off every vector boundary.
Results run(Implementation& impl, const AttentionShape& s, double scale, const Rounded& q,
            const Rounded& k, const Rounded& v, const Rounded& dout, const Rounded& out,
            const std::vector<float>& lse, int64_t misalign = 0) {
  DeviceBuffer<bf16> q_d(q_numel(s), misalign), k_d(kv_numel(s), misalign),
      v_d(kv_numel(s), misalign), dout_d(q_numel(s), misalign), out_in_d(q_numel(s), misalign);
  DeviceBuffer<float> lse_in_d(lse_numel(s));
  DeviceBuffer<bf16> out_d(q_numel(s)), dq_d(q_numel(s)), dk_d(kv_numel(s)), dv_d(kv_numel(s));
  DeviceBuffer<float> lse_d(lse_numel(s));
  q_d.upload(q.bits);
  k_d.upload(k.bits);
  v_d.upload(v.bits);
  dout_d.upload(dout.bits);
  out_in_d.upload(out.bits);
  lse_in_d.upload(lse);
  out_d.poison();
  lse_d.poison();
  dq_d.poison();
  dk_d.poison();
  dv_d.poison();
  impl.forward(q_d.get(), k_d.get(), v_d.get(), out_d.get(), lse_d.get(), s, scale);
  Results r;
  r.has_backward = impl.has_backward(s, scale);
  if (r.has_backward) {
    impl.backward(dout_d.get(), q_d.get(), k_d.get(), v_d.get(), out_in_d.get(), lse_in_d.get(),
                  dq_d.get(), dk_d.get(), dv_d.get(), s, scale);
  }
  SPW_CUDA(cudaDeviceSynchronize());
  r.out_bits = out_d.download();
  r.dq_bits = dq_d.download();
  r.dk_bits = dk_d.download();
  r.dv_bits = dv_d.download();
  r.out = as_float(r.out_bits);
  r.dq = as_float(r.dq_bits);
  r.dk = as_float(r.dk_bits);
  r.dv = as_float(r.dv_bits);
  r.lse = lse_d.download();
  return r;
}

Results run(Implementation& impl, const Problem& p, int64_t misalign = 0) {
  return run(impl, p.shape, p.scale, p.q, p.k, p.v, p.dout, p.out, p.lse, misalign);
}

// Relative error, except that a reference whose norm is below `floor` (dq
// and dk at seq 1 are zero up to rounding) is compared against `floor`.
double gradient_error(const std::vector<float>& got, const std::vector<double>& want,
                      double floor) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), floor);
}

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

void expect_matches_cpu(const Results& got, const Problem& p) {
  EXPECT_LT(rel_error(got.out, p.want_out), kBf16Tolerance) << "out";
  EXPECT_LT(rel_error(got.lse, p.want_lse), kLseTolerance) << "lse";
  if (!got.has_backward) return;
  const double floor = 1e-2 * norm(p.want_dv);
  EXPECT_LT(gradient_error(got.dq, p.want_dq, floor), kBf16Tolerance) << "dq";
  EXPECT_LT(gradient_error(got.dk, p.want_dk, floor), kBf16Tolerance) << "dk";
  EXPECT_LT(rel_error(got.dv, p.want_dv), kBf16Tolerance) << "dv";
}

struct Case {
  AttentionShape shape;
  double scale;
};

double default_scale(int64_t head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

// seq 1, 7, 128, 257, 1024; head_dim 64, 128; heads 8/8, 8/2, 32/8; batch 1,
// 2; and a larger scale (sharper softmax) on some.
std::vector<Case> llama_cases() {
  std::vector<Case> cases;
  auto add = [&](int64_t batch, int64_t seq, int64_t q_heads, int64_t kv_heads, int64_t dim,
                 double scale) {
    cases.push_back({AttentionShape{batch, seq, q_heads, kv_heads, dim}, scale});
  };
  add(1, 1, 8, 8, 64, default_scale(64));
  add(2, 1, 8, 2, 128, default_scale(128));
  add(2, 7, 8, 2, 128, default_scale(128));
  add(1, 7, 32, 8, 64, 0.5);
  add(1, 128, 32, 8, 64, default_scale(64));
  add(2, 128, 8, 8, 128, default_scale(128));
  add(1, 257, 8, 2, 64, 0.4);
  add(2, 257, 32, 8, 128, default_scale(128));
  add(1, 1024, 8, 2, 128, default_scale(128));
  add(2, 1024, 8, 8, 64, default_scale(64));
  add(1, 1024, 32, 8, 128, default_scale(128));
  return cases;
}

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU"

TEST(AttentionCudaTest, OwnKernelMatchesCpu) {
  SKIP_WITHOUT_GPU();
  OwnKernel own;
  uint64_t seed = 100;
  for (const Case& c : llama_cases()) {
    SCOPED_TRACE(describe(c.shape, c.scale));
    const Problem p = make_problem(c.shape, c.scale, seed += 10);
    expect_matches_cpu(run(own, p), p);
  }
}

// Head widths the kernel pads (to 32, 64 or 128), head_dim not a multiple of
// 8 (no vector loads), and pointers off the 16-byte boundary.
TEST(AttentionCudaTest, OwnKernelOddHeadDimsAndMisalignedPointers) {
  SKIP_WITHOUT_GPU();
  OwnKernel own;
  const std::vector<Case> cases = {
      {AttentionShape{1, 100, 4, 2, 36}, default_scale(36)},
      {AttentionShape{2, 65, 3, 3, 8}, default_scale(8)},
      {AttentionShape{1, 129, 2, 1, 100}, default_scale(100)},
      {AttentionShape{1, 70, 4, 1, 48}, default_scale(48)},
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.shape, c.scale));
    const Problem p = make_problem(c.shape, c.scale, seed += 10);
    expect_matches_cpu(run(own, p), p);
  }
  const Problem p = make_problem(AttentionShape{1, 97, 4, 2, 64}, default_scale(64), 400);
  SCOPED_TRACE("misaligned pointers, " + describe(p.shape, p.scale));
  expect_matches_cpu(run(own, p, 1), p);
}

TEST(AttentionCudaTest, OwnKernelIsDeterministic) {
  SKIP_WITHOUT_GPU();
  OwnKernel own;
  const Problem p = make_problem(AttentionShape{2, 257, 8, 2, 128}, default_scale(128), 500);
  const Results a = run(own, p), b = run(own, p);
  EXPECT_EQ(std::memcmp(a.out_bits.data(), b.out_bits.data(), a.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.dq_bits.data(), b.dq_bits.data(), a.dq_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.dk_bits.data(), b.dk_bits.data(), a.dk_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.dv_bits.data(), b.dv_bits.data(), a.dv_bits.size() * 2), 0);
}

TEST(AttentionCudaTest, OwnKernelRejectsWideHeads) {
  SKIP_WITHOUT_GPU();
  const AttentionShape s{1, 4, 2, 2, kAttentionCudaMaxHeadDim + 8};
  EXPECT_THROW(attention_forward_cuda(nullptr, nullptr, nullptr, nullptr, nullptr, s, 0.1, nullptr),
               Error);
}

void cudnn_matches_cpu(CudnnBackwardOrder order, const std::vector<Case>& cases) {
  Cudnn cudnn(order);
  uint64_t seed = 700;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.shape, c.scale));
    // Throws with cuDNN's reason where it refuses the shape. cuDNN 9.19
    // refuses the backward at seq 1 (s_q = s_kv = 1), where callers run the
    // own kernel (tested above).
    ASSERT_NO_THROW(cudnn.attention.workspace_bytes(c.shape, c.scale, AttentionPass::kForward));
    if (c.shape.seq > 1) {
      ASSERT_NO_THROW(cudnn.attention.workspace_bytes(c.shape, c.scale, AttentionPass::kBackward));
    }
    const Problem p = make_problem(c.shape, c.scale, seed += 10);
    expect_matches_cpu(run(cudnn, p), p);
  }
}

TEST(AttentionCudaTest, CudnnDeterministicMatchesCpu) {
  SKIP_WITHOUT_GPU();
  cudnn_matches_cpu(CudnnBackwardOrder::kDeterministic, llama_cases());
}

// The atomic order differs only in how the backward sums dq: a few shapes.
TEST(AttentionCudaTest, CudnnAtomicMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> all = llama_cases();
  cudnn_matches_cpu(CudnnBackwardOrder::kAtomic, {all[1], all[3], all[7], all[10]});
}

TEST(AttentionCudaTest, CudnnDeterministicOrderIsBitwiseRepeatable) {
  SKIP_WITHOUT_GPU();
  Cudnn cudnn(CudnnBackwardOrder::kDeterministic);
  const Problem p = make_problem(AttentionShape{2, 1024, 8, 2, 128}, default_scale(128), 800);
  const Results a = run(cudnn, p), b = run(cudnn, p);
  EXPECT_EQ(std::memcmp(a.out_bits.data(), b.out_bits.data(), a.out_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4), 0);
  EXPECT_EQ(std::memcmp(a.dq_bits.data(), b.dq_bits.data(), a.dq_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.dk_bits.data(), b.dk_bits.data(), a.dk_bits.size() * 2), 0);
  EXPECT_EQ(std::memcmp(a.dv_bits.data(), b.dv_bits.data(), a.dv_bits.size() * 2), 0);
}

// The fused q|k|v projection's layout: the same results as separate tensors.
TEST(AttentionCudaTest, CudnnReadsPackedQkvInPlace) {
  SKIP_WITHOUT_GPU();
  const std::vector<Case> all = llama_cases();
  for (CudnnBackwardOrder order : {CudnnBackwardOrder::kDeterministic, CudnnBackwardOrder::kAtomic}) {
    PackedCudnn packed(order);
    uint64_t seed = 1200;
    for (const Case& c : {all[3], all[4], all[7], all[10]}) {
      SCOPED_TRACE(describe(c.shape, c.scale));
      const Problem p = make_problem(c.shape, c.scale, seed += 10);
      expect_matches_cpu(run(packed, p), p);
    }
  }
}

// cuDNN needs head_dim a multiple of 8: it says so instead of failing, and
// running it anyway is one clear error.
TEST(AttentionCudaTest, CudnnRefusesHeadDimNotMultipleOf8) {
  SKIP_WITHOUT_GPU();
  CudnnAttention cudnn(CudnnBackwardOrder::kDeterministic);
  const AttentionShape s{1, 16, 2, 2, 36};
  EXPECT_FALSE(cudnn.supports(s, 0.2, AttentionPass::kForward));
  EXPECT_FALSE(cudnn.supports(s, 0.2, AttentionPass::kBackward));
  EXPECT_THROW(cudnn.forward(nullptr, nullptr, nullptr, nullptr, nullptr, s, 0.2, nullptr, nullptr),
               Error);
}

// The two GPU implementations on a LLaMA-3-8B attention shape at seq 4096,
// too long for the CPU kernel in a test.
TEST(AttentionCudaTest, CudnnMatchesOwnKernelAtSeq4096) {
  SKIP_WITHOUT_GPU();
  const AttentionShape s{1, 4096, 32, 8, 128};
  const double scale = default_scale(128);
  const Rounded q = random_rounded(q_numel(s), 900), k = random_rounded(kv_numel(s), 901),
                v = random_rounded(kv_numel(s), 902), dout = random_rounded(q_numel(s), 903);
  OwnKernel own;
  // The backward's out and lse come from the own kernel's forward.
  DeviceBuffer<bf16> q_d(q_numel(s)), k_d(kv_numel(s)), v_d(kv_numel(s)), out_d(q_numel(s));
  DeviceBuffer<float> lse_d(lse_numel(s));
  q_d.upload(q.bits);
  k_d.upload(k.bits);
  v_d.upload(v.bits);
  own.forward(q_d.get(), k_d.get(), v_d.get(), out_d.get(), lse_d.get(), s, scale);
  const Rounded out = {out_d.download(), {}};
  const std::vector<float> lse = lse_d.download();

  Cudnn cudnn(CudnnBackwardOrder::kDeterministic);
  const Results mine = run(own, s, scale, q, k, v, dout, out, lse);
  const Results theirs = run(cudnn, s, scale, q, k, v, dout, out, lse);
  EXPECT_LT(rel_error(theirs.out, as_double(mine.out)), kBf16Tolerance) << "out";
  EXPECT_LT(rel_error(theirs.lse, as_double(mine.lse)), kLseTolerance) << "lse";
  EXPECT_LT(rel_error(theirs.dq, as_double(mine.dq)), kBf16Tolerance) << "dq";
  EXPECT_LT(rel_error(theirs.dk, as_double(mine.dk)), kBf16Tolerance) << "dk";
  EXPECT_LT(rel_error(theirs.dv, as_double(mine.dv)), kBf16Tolerance) << "dv";
}

}  // namespace
}  // namespace spillway::ops
