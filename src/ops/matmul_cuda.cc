// Compiled by the host compiler (no device code here); built only with the
// CUDA backend, since every src/ops/*.cc is compiled in CPU-only builds too.
#ifdef SPILLWAY_HAS_CUDA

#include "ops/matmul_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"
#include "device/cuda/cublas_check.h"
#include "device/cuda/cuda_check.h"

// Row-major through a column-major library. A row-major [r, c] buffer is, to
// cuBLASLt, the column-major matrix [c, r] with the same leading dimension,
// i.e. its transpose. So C = op(A) op(B) in row-major is, to cuBLASLt,
// C^T = op(B)^T op(A)^T: the caller's B goes in cuBLASLt's A slot, the
// caller's A in its B slot, with the same transpose flags, and C is the
// column-major [n, m] with leading dimension n. Swapping costs nothing, and it
// keeps every layout CUBLASLT_ORDER_COL, the order all of cuBLASLt's
// algorithms support (CUBLASLT_ORDER_ROW layouts narrow the heuristic's
// choice and are not accepted by every kernel).

namespace spillway::ops {

namespace {

constexpr const char* kThing = "matmul_cuda";
constexpr uint32_t kMaxAlignment = 256;
// Timing a candidate: one warm-up, one run to estimate, then twice enough
// runs to fill a window long enough that launch gaps and clock noise stay
// small.
constexpr float kTimedWindowMs = 3.0f;
constexpr int kMinTimedRuns = 3, kMaxTimedRuns = 100;

bool supported(DType a, DType b, DType c) {
  if (a == DType::bf16 && b == DType::bf16) return c == DType::bf16 || c == DType::f32;
  return a == DType::f32 && b == DType::f32 && c == DType::f32;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      throw Error(kThing, std::string("no cuBLASLt type for dtype ") + std::string(dtype_name(t)));
  }
}

// The largest power of two (at most 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = kMaxAlignment;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

std::string key_text(const MatmulKey& key) {
  std::ostringstream out;
  out << "m=" << key.m << " n=" << key.n << " k=" << key.k << " " << (key.trans_a ? 'T' : 'N')
      << (key.trans_b ? 'T' : 'N') << " " << dtype_name(key.a_type) << "*"
      << dtype_name(key.b_type) << "->" << dtype_name(key.c_type)
      << (key.beta_zero ? " beta=0" : " beta!=0");
  return out.str();
}

// Column-major [rows, cols], packed (leading dimension = rows).
cublasLtMatrixLayout_t make_layout(DType t, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  SPW_CUBLAS(cublasLtMatrixLayoutCreate(&layout, cuda_type(t), static_cast<uint64_t>(rows),
                                        static_cast<uint64_t>(cols), rows));
  return layout;
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, T value) {
  SPW_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof(value)));
}

struct Preference {
  cublasLtMatmulPreference_t pref = nullptr;
  Preference() { SPW_CUBLAS(cublasLtMatmulPreferenceCreate(&pref)); }
  ~Preference() { SPW_CUBLAS_WARN(cublasLtMatmulPreferenceDestroy(pref)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
};

uint32_t algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  uint32_t value = 0;
  size_t written = 0;
  SPW_CUBLAS(cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written));
  return value;
}

// One CTA sums each element's products over all of k, in k order: no split
// of k and no reduction pass. Such algorithms differ in tiles, stages and
// clusters, which change speed, not the order of any element's sum.
bool whole_k_per_element(const cublasLtMatmulAlgo_t& algo) {
  return algo_config(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) <= 1 &&
         algo_config(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) == CUBLASLT_REDUCTION_SCHEME_NONE;
}

struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  TimingEvents() {
    SPW_CUDA(cudaEventCreate(&start));
    try {
      SPW_CUDA(cudaEventCreate(&stop));
    } catch (...) {
      SPW_CUDA_WARN(cudaEventDestroy(start));
      throw;
    }
  }
  ~TimingEvents() {
    SPW_CUDA_WARN(cudaEventDestroy(start));
    SPW_CUDA_WARN(cudaEventDestroy(stop));
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;
};

}  // namespace

size_t MatmulKeyHash::operator()(const MatmulKey& key) const {
  size_t h = 0;
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<uint64_t>(key.m));
  mix(static_cast<uint64_t>(key.n));
  mix(static_cast<uint64_t>(key.k));
  mix((uint64_t(key.trans_a) << 0) | (uint64_t(key.trans_b) << 1) | (uint64_t(key.beta_zero) << 2) |
      (uint64_t(key.a_type) << 8) | (uint64_t(key.b_type) << 16) | (uint64_t(key.c_type) << 24));
  mix((uint64_t(key.a_align) << 32) | (uint64_t(key.b_align) << 16) | key.c_align);
  return h;
}

MatmulPlan::~MatmulPlan() {
  if (c_layout != nullptr) SPW_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(c_layout));
  if (b_layout != nullptr) SPW_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(b_layout));
  if (a_layout != nullptr) SPW_CUBLAS_WARN(cublasLtMatrixLayoutDestroy(a_layout));
  if (desc != nullptr) SPW_CUBLAS_WARN(cublasLtMatmulDescDestroy(desc));
}

std::string MatmulPlan::describe() const {
  auto config = [this](cublasLtMatmulAlgoConfigAttributes_t attr) -> std::string {
    // Every attribute read here is 4 bytes except the cluster shape (2).
    uint32_t value = 0;
    size_t written = 0;
    const size_t size = attr == CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID ? 2 : 4;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, size, &written) !=
        CUBLAS_STATUS_SUCCESS) {
      return "?";
    }
    return std::to_string(size == 2 ? static_cast<uint16_t>(value) : value);
  };
  std::ostringstream out;
  out << "algo " << config(CUBLASLT_ALGO_CONFIG_ID) << " tile "
      << config(CUBLASLT_ALGO_CONFIG_TILE_ID) << " stages "
      << config(CUBLASLT_ALGO_CONFIG_STAGES_ID) << " cluster "
      << config(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID) << " splitK "
      << config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM) << " reduction "
      << config(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) << " ws " << format_bytes(workspace_bytes)
      << (pinned >= 0 ? " (candidate " + std::to_string(pinned) + " of " + std::to_string(candidates) + ")"
          : candidates > 1 ? " (fastest of " + std::to_string(candidates) + " timed)"
                           : std::string(" (heuristic's first)"));
  return out.str();
}

CublasLtMatmul::CublasLtMatmul(uint64_t workspace_bytes, int timed_candidates)
    : timed_candidates_(timed_candidates), workspace_bytes_(workspace_bytes) {
  SPW_CHECK(timed_candidates >= 1, kThing, "timed_candidates must be at least 1, got ",
            timed_candidates);
  SPW_CUDA(cudaGetDevice(&device_));
  if (workspace_bytes_ > 0) {
    try {
      SPW_CUDA(cudaMalloc(&workspace_, workspace_bytes_));
    } catch (const Error& e) {
      throw Error(kThing, "cannot allocate a cuBLASLt workspace of " +
                              format_bytes(workspace_bytes_) + " (" + e.what() + ")");
    }
    owns_workspace_ = true;
  }
  try {
    SPW_CUBLAS(cublasLtCreate(&handle_));
  } catch (...) {
    if (owns_workspace_) SPW_CUDA_WARN(cudaFree(workspace_));
    throw;
  }
}

CublasLtMatmul::CublasLtMatmul(void* workspace, uint64_t workspace_bytes, int timed_candidates)
    : timed_candidates_(timed_candidates), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  SPW_CHECK(timed_candidates >= 1, kThing, "timed_candidates must be at least 1, got ",
            timed_candidates);
  SPW_CHECK(workspace_bytes == 0 || workspace != nullptr, kThing,
            "a workspace of ", workspace_bytes, " bytes at a null pointer");
  SPW_CHECK(alignment_of(workspace) == kMaxAlignment, kThing,
            "the workspace must be 256-byte aligned");
  SPW_CUDA(cudaGetDevice(&device_));
  SPW_CUBLAS(cublasLtCreate(&handle_));
}

CublasLtMatmul::~CublasLtMatmul() {
  // Plans hold descriptors of this handle: they go first.
  plans_.clear();
  if (handle_ != nullptr) SPW_CUBLAS_WARN(cublasLtDestroy(handle_));
  if (owns_workspace_) SPW_CUDA_WARN(cudaFree(workspace_));
}

MatmulKey CublasLtMatmul::key_for(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                  const void* a, DType a_type, const void* b, DType b_type,
                                  float beta, const void* c, DType c_type) {
  MatmulKey key;
  key.m = m;
  key.n = n;
  key.k = k;
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.a_type = a_type;
  key.b_type = b_type;
  key.c_type = c_type;
  key.beta_zero = beta == 0.0f;
  key.a_align = alignment_of(a);
  key.b_align = alignment_of(b);
  key.c_align = alignment_of(c);
  return key;
}

const MatmulPlan* CublasLtMatmul::find_plan(const MatmulKey& key) const {
  auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : it->second.get();
}

const MatmulPlan& CublasLtMatmul::plan_for(const MatmulKey& key, const void* a, const void* b,
                                           void* c, const void* c_in, float beta, cudaStream_t stream) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;

  auto plan = std::make_unique<MatmulPlan>();
  SPW_CUBLAS(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is the caller's B and its B the caller's A (see the top).
  const cublasOperation_t lt_trans_a = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t lt_trans_b = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  SPW_CUBLAS(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &lt_trans_a,
                                            sizeof(lt_trans_a)));
  SPW_CUBLAS(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &lt_trans_b,
                                            sizeof(lt_trans_b)));
  // Row-major A is [m, k] ([k, m] when trans_a); its row length is the
  // column-major row count.
  plan->a_layout = make_layout(key.a_type, key.trans_a ? key.m : key.k, key.trans_a ? key.k : key.m);
  plan->b_layout = make_layout(key.b_type, key.trans_b ? key.k : key.n, key.trans_b ? key.n : key.k);
  plan->c_layout = make_layout(key.c_type, key.n, key.m);

  Preference pref;
  set_pref<uint64_t>(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes_);
  set_pref<uint32_t>(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.b_align);
  set_pref<uint32_t>(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.a_align);
  set_pref<uint32_t>(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.c_align);
  set_pref<uint32_t>(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.c_align);
  if (key.a_type == DType::f32) {
    // Exact fp32: only FMA (SIMT) kernels, so neither TF32 tensor cores nor
    // the bf16x9 emulation that newer GPUs may pick for CUBLAS_COMPUTE_32F.
    set_pref<uint64_t>(pref.pref, CUBLASLT_MATMUL_PREF_IMPL_MASK,
                       ~static_cast<uint64_t>(CUBLASLT_NUMERICAL_IMPL_FLAGS_TENSOR_OP_MASK));
  }

  // Timing writes D, which is only free to overwrite when C is not read
  // from it: beta = 0, or an addend read from elsewhere.
  const bool timeable = key.beta_zero || (c_in != nullptr && c_in != c);
  const int wanted = std::max(timeable ? timed_candidates_ : 1, pinned_candidate_ + 1);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(wanted));
  int returned = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->b_layout, plan->a_layout, plan->c_layout, plan->c_layout,
      pref.pref, wanted, results.data(), &returned);
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) SPW_CUBLAS(status);
  results.resize(static_cast<size_t>(std::max(returned, 0)));
  std::erase_if(results, [](const auto& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
  SPW_CHECK(!results.empty(), kThing, "cuBLASLt has no algorithm for ", key_text(key),
            " within a workspace of ", format_bytes(workspace_bytes_));
  // Only algorithms that sum each element as the heuristic's first does are
  // candidates, so whichever wins, the bits are the first's: tensor-core
  // kernels over all of k. The exact-fp32 (SIMT) kernels also split k
  // between threads in ways their configuration does not show (some gave
  // other bits: docs/performance.md), so fp32 keeps the heuristic's first.
  if (key.a_type == DType::bf16 && whole_k_per_element(results.front().algo)) {
    std::erase_if(results, [](const auto& r) { return !whole_k_per_element(r.algo); });
  } else {
    results.erase(results.begin() + 1, results.end());
  }

  size_t chosen = 0;
  if (pinned_candidate_ >= 0) {
    chosen = std::min(static_cast<size_t>(pinned_candidate_), results.size() - 1);
  } else if (results.size() > 1) {
    const float one = 1.0f;
    auto launch = [&](const cublasLtMatmulHeuristicResult_t& r) {
      return cublasLtMatmul(handle_, plan->desc, &one, b, plan->b_layout, a, plan->a_layout,
                            &beta, c_in ? c_in : c, plan->c_layout, c, plan->c_layout, &r.algo,
                            workspace_, workspace_bytes_, stream);
    };
    TimingEvents events;
    // Mean milliseconds of `runs` back-to-back launches, or -1 when the
    // library turns the candidate down (skipped, not fatal).
    auto time_runs = [&](const cublasLtMatmulHeuristicResult_t& r, int runs) -> float {
      SPW_CUDA(cudaEventRecord(events.start, stream));
      bool ok = true;
      for (int i = 0; i < runs && ok; ++i) ok = launch(r) == CUBLAS_STATUS_SUCCESS;
      SPW_CUDA(cudaEventRecord(events.stop, stream));
      SPW_CUDA(cudaEventSynchronize(events.stop));
      float ms = 0;
      SPW_CUDA(cudaEventElapsedTime(&ms, events.start, events.stop));
      return ok ? ms / static_cast<float>(runs) : -1.0f;
    };
    // Two rounds, the second in reverse order, so that no candidate is
    // favoured by running while the clocks are still high.
    std::vector<float> total_ms(results.size(), 0.0f);
    std::vector<int> runs(results.size(), 0);  // 0: not launchable
    for (size_t i = 0; i < results.size(); ++i) {
      if (launch(results[i]) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
      const float estimate = time_runs(results[i], 1);
      if (estimate < 0) continue;
      runs[i] = std::clamp(static_cast<int>(std::ceil(kTimedWindowMs / std::max(estimate, 1e-3f))),
                           kMinTimedRuns, kMaxTimedRuns);
    }
    for (int round = 0; round < 2; ++round) {
      for (size_t j = 0; j < results.size(); ++j) {
        const size_t i = round == 0 ? j : results.size() - 1 - j;
        if (runs[i] == 0) continue;
        const float ms = time_runs(results[i], runs[i]);
        if (ms < 0) {
          runs[i] = 0;
        } else {
          total_ms[i] += ms;
        }
      }
    }
    float best_ms = 0;
    bool found = false;
    for (size_t i = 0; i < results.size(); ++i) {
      // Ties go to the earlier candidate, the heuristic's preference.
      if (runs[i] > 0 && (!found || total_ms[i] < best_ms)) {
        best_ms = total_ms[i];
        chosen = i;
        found = true;
      }
    }
    SPW_CHECK(found, kThing, "every cuBLASLt candidate failed to launch for ", key_text(key));
  }
  plan->algo = results[chosen].algo;
  plan->workspace_bytes = results[chosen].workspaceSize;
  plan->candidates = static_cast<int>(results.size());
  if (pinned_candidate_ >= 0) plan->pinned = static_cast<int>(chosen);
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void CublasLtMatmul::multiply(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                              float alpha, const void* a, DType a_type, const void* b,
                              DType b_type, float beta, void* c, DType c_type, void* workspace,
                              uint64_t workspace_bytes, cudaStream_t stream, const void* c_in) {
  MatmulKey key = key_for(trans_a, trans_b, m, n, k, a, a_type, b, b_type, beta, c, c_type);
  if (c_in) key.c_align = std::min(key.c_align, alignment_of(c_in));
  const MatmulPlan& plan = plan_for(key, a, b, c, c_in, beta, stream);
  SPW_CHECK(plan.workspace_bytes <= workspace_bytes, kThing, "the plan for ", key_text(key),
            " needs ", format_bytes(plan.workspace_bytes), " of workspace, ",
            format_bytes(workspace_bytes), " left");
  // Operands swapped for the column-major library (see the top); C is
  // read from c_in (or c, in place) and D written to c, both in C's layout.
  SPW_CUBLAS(cublasLtMatmul(handle_, plan.desc, &alpha, b, plan.b_layout, a, plan.a_layout, &beta,
                            c_in ? c_in : c, plan.c_layout, c, plan.c_layout, &plan.algo, workspace,
                            workspace_bytes, stream));
}

void CublasLtMatmul::scale_only(int64_t m, int64_t n, float beta, void* c, DType ab_type,
                                DType c_type, cudaStream_t stream) {
  if (beta == 1.0f) return;
  if (beta == 0.0f) {
    // All-zero bits are 0.0 in f32 and bf16 alike, and overwrite NaNs.
    SPW_CUDA(cudaMemsetAsync(c, 0, static_cast<size_t>(m * n) * dtype_size(c_type), stream));
    return;
  }
  // C = 0 * 0 + beta * C: a product with k = 1 over zeros carved from the
  // front of the workspace, so beta is applied by the same kernels, in the
  // same fp32 arithmetic, as every other product. (cuBLASLt's
  // cublasLtMatrixTransform answers NOT_SUPPORTED for an in-place bf16 scale.)
  const uint64_t a_bytes = align_up(static_cast<uint64_t>(m) * dtype_size(ab_type), 256);
  const uint64_t b_bytes = align_up(static_cast<uint64_t>(n) * dtype_size(ab_type), 256);
  SPW_CHECK(a_bytes + b_bytes <= workspace_bytes_, kThing, "k = 0 with beta = ", beta, " needs ",
            format_bytes(a_bytes + b_bytes), " of workspace for zero operands, the workspace has ",
            format_bytes(workspace_bytes_));
  char* zeros = static_cast<char*>(workspace_);
  SPW_CUDA(cudaMemsetAsync(zeros, 0, a_bytes + b_bytes, stream));
  multiply(false, false, m, n, 1, 1.0f, zeros, ab_type, zeros + a_bytes, ab_type, beta, c, c_type,
           zeros + a_bytes + b_bytes, workspace_bytes_ - a_bytes - b_bytes, stream);
}

void CublasLtMatmul::run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                         const void* a, DType a_type, const void* b, DType b_type, float beta,
                         void* c, DType c_type, cudaStream_t stream) {
  SPW_CHECK(m >= 0 && n >= 0 && k >= 0, kThing, "negative size m=", m, " n=", n, " k=", k);
  SPW_CHECK(supported(a_type, b_type, c_type), kThing, "unsupported dtypes ", dtype_name(a_type),
            "*", dtype_name(b_type), "->", dtype_name(c_type),
            " (bf16*bf16->bf16, bf16*bf16->f32 or f32*f32->f32)");
  if (m == 0 || n == 0) return;
  SPW_CHECK(c != nullptr, kThing, "null C for m=", m, " n=", n);
  int current = 0;
  SPW_CUDA(cudaGetDevice(&current));
  SPW_CHECK(current == device_, kThing, "called on device ", current,
            " but made for device ", device_);
  if (k == 0) {
    scale_only(m, n, beta, c, a_type, c_type, stream);
    return;
  }
  SPW_CHECK(a != nullptr && b != nullptr, kThing, "null A or B for m=", m, " n=", n, " k=", k);
  multiply(trans_a, trans_b, m, n, k, alpha, a, a_type, b, b_type, beta, c, c_type, workspace_,
           workspace_bytes_, stream);
}

void CublasLtMatmul::run_with_addend(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* a,
                                     DType a_type, const void* b, DType b_type, const void* addend, void* out,
                                     DType c_type, cudaStream_t stream) {
  SPW_CHECK(supported(a_type, b_type, c_type), kThing, "unsupported dtypes ", dtype_name(a_type), "*",
            dtype_name(b_type), "->", dtype_name(c_type));
  if (m == 0 || n == 0) return;
  SPW_CHECK(a && b && addend && out && k > 0, kThing, "null operand or k = 0 in a product with an addend");
  int current = 0;
  SPW_CUDA(cudaGetDevice(&current));
  SPW_CHECK(current == device_, kThing, "called on device ", current, " but made for device ", device_);
  multiply(trans_a, trans_b, m, n, k, 1.0f, a, a_type, b, b_type, 1.0f, out, c_type, workspace_, workspace_bytes_,
           stream, addend);
}

}  // namespace spillway::ops

#endif  // SPILLWAY_HAS_CUDA
