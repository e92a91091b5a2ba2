// The batched decoder's matmuls at LLaMA-3-8B's shapes, the CUDA-core
// batch-invariant kernel (ops/batch_linear.h) beside the tensor-core one
// (ops/batch_linear_tc.h, split over slices where the rows allow and whole),
// for 1 to 512 rows: microseconds a call, the weight's bytes a second and
// TFLOP/s. A decode step is memory-bound on the weight; a prompt's rows make
// it compute-bound. One line per shape, kernel and row count; each time is
// the median of 20 calls timed with CUDA events after 3 untimed ones.
// Usage: batch_linear_cuda_bench [rows,...]   (default 1,8,16,32,128,512)
#include <cstdio>

#ifdef SPILLWAY_HAS_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "ops/batch_linear.h"
#include "ops/batch_linear_tc.h"

namespace {

using spillway::bf16;
namespace ops = spillway::ops;

struct Matmul {
  const char* name;
  int64_t in, out;
};
// q|k|v and gate|up fused, as the decoder uploads them; the lm_head.
const Matmul kMatmuls[] = {{"qkv", 4096, 6144},  {"o", 4096, 4096},        {"gate_up", 4096, 28672},
                           {"down", 14336, 4096}, {"lm_head", 4096, 128256}};

double median_us(const std::function<void()>& call) {
  cudaEvent_t start, stop;
  SPW_CUDA(cudaEventCreate(&start));
  SPW_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) call();
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    SPW_CUDA(cudaEventRecord(start));
    call();
    SPW_CUDA(cudaEventRecord(stop));
    SPW_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    SPW_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  SPW_CUDA(cudaEventDestroy(start));
  SPW_CUDA(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + 10, ms.end());
  return ms[10] * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  if (spillway::cuda_device_count() == 0) {
    std::printf("batch_linear_cuda_bench: no GPU\n");
    return 0;
  }
  std::vector<int64_t> rows_list = {1, 8, 16, 32, 64, 128, 512};
  if (argc > 1) {
    rows_list.clear();
    std::stringstream list(argv[1]);
    for (std::string r; std::getline(list, r, ',');) rows_list.push_back(std::stoll(r));
  }
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  bf16 *x = nullptr, *w = nullptr, *y = nullptr;
  float* workspace = nullptr;
  SPW_CUDA(cudaMalloc(&x, static_cast<size_t>(max_rows * 14336) * sizeof(bf16)));
  SPW_CUDA(cudaMalloc(&w, static_cast<size_t>(4096 * 128256) * sizeof(bf16)));
  SPW_CUDA(cudaMalloc(&y, static_cast<size_t>(max_rows * 128256) * sizeof(bf16)));
  SPW_CUDA(cudaMemset(x, 0x3c, static_cast<size_t>(max_rows * 14336) * sizeof(bf16)));
  SPW_CUDA(cudaMemset(w, 0x3c, static_cast<size_t>(4096 * 128256) * sizeof(bf16)));
  uint64_t workspace_bytes = 0;
  for (const Matmul& m : kMatmuls) {
    workspace_bytes = std::max(workspace_bytes, ops::batch_linear_tc_workspace_bytes(1, m.in, m.out) *
                                                    static_cast<uint64_t>(ops::kBatchLinearTcSplitRows));
  }
  SPW_CUDA(cudaMalloc(&workspace, std::max<uint64_t>(workspace_bytes, 4)));
  std::printf("%-8s %5s %-10s %10s %8s %8s\n", "matmul", "rows", "kernel", "us", "GB/s", "TFLOP/s");
  for (const Matmul& m : kMatmuls) {
    for (const int64_t rows : rows_list) {
      const double weight_bytes = static_cast<double>(m.in * m.out) * sizeof(bf16);
      const double flops = 2.0 * static_cast<double>(rows * m.in * m.out);
      auto line = [&](const char* kernel, double us) {
        std::printf("%-8s %5lld %-10s %10.1f %8.0f %8.1f\n", m.name, static_cast<long long>(rows), kernel, us,
                    weight_bytes / us * 1e-3, flops / us * 1e-6);
      };
      line("cuda-core", median_us([&] { ops::batch_linear_cuda(x, nullptr, w, y, rows, m.in, m.out, nullptr); }));
      line("tc-whole",
           median_us([&] { ops::batch_linear_tc_cuda(x, nullptr, w, y, rows, m.in, m.out, nullptr, nullptr); }));
      if (ops::batch_linear_tc_workspace_bytes(rows, m.in, m.out) > 0) {
        line("tc-split",
             median_us([&] { ops::batch_linear_tc_cuda(x, nullptr, w, y, rows, m.in, m.out, workspace, nullptr); }));
      }
    }
  }
  SPW_CUDA(cudaFree(x));
  SPW_CUDA(cudaFree(w));
  SPW_CUDA(cudaFree(y));
  SPW_CUDA(cudaFree(workspace));
  return 0;
}

#else

int main() {
  std::printf("batch_linear_cuda_bench: built without CUDA\n");
  return 0;
}

#endif
