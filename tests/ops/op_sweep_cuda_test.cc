// Every registered op and fused form (testing/op_sweep_cases.h) on the GPU:
// the graph in bf16 through exec::CudaNodeRunner, the kernels its ops'
// definitions call, against the same graph in f32 on the CPU, from the same
// inputs (rounded to bf16, statistics to f32), every allocation poisoned.
// The CPU half, and the checks of the ops themselves, are op_sweep_test.cc.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <string_view>
#include <vector>

#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "exec/cuda/cuda_node_runner.h"
#include "graph/op_def.h"
#include "testing/cuda_arrays.h"
#include "testing/numeric.h"
#include "testing/op_sweep.h"
#include "testing/op_sweep_cases.h"

namespace spillway::testing {
namespace {

// Device memory that comes filled with 0xFF bytes, NaN in bf16 and f32.
class PoisonedDeviceMemory final : public MemoryBacking {
 public:
  void* allocate(uint64_t bytes, std::string_view) override {
    void* p = nullptr;
    SPW_CUDA(cudaMalloc(&p, bytes));
    SPW_CUDA(cudaMemset(p, 0xff, bytes));
    // The kernels run on a non-blocking stream, which would not wait for it.
    SPW_CUDA(cudaDeviceSynchronize());
    return p;
  }
  void free(void* ptr, uint64_t) override { SPW_CUDA_WARN(cudaFree(ptr)); }
};

// Each output of `s` after one step on the GPU, as doubles.
std::vector<std::vector<double>> run_on_gpu(const SweepGraph& s) {
  CudaStream compute("sweep:compute", 0);
  std::vector<std::vector<double>> outputs;
  {
    MemorySpace space("sweep:cuda", MemorySpace::kUnlimited, std::make_unique<PoisonedDeviceMemory>());
    std::vector<std::unique_ptr<DeviceArray<char>>> inputs;
    exec::CudaNodeRunner runner(s.graph, space, compute);
    exec::Executor executor(s.graph, space, runner);
    for (const InputSpec& in : s.inputs) {
      const graph::ValueInfo& info = s.graph.value(in.value);
      const std::vector<double> values = sweep_values(in, info.shape.numel(), DType::bf16);
      inputs.push_back(std::make_unique<DeviceArray<char>>(to_bytes(values, info.dtype)));
      executor.bind(in.value, static_cast<void*>(inputs.back()->get()));
    }
    executor.run();
    runner.synchronize();
    for (const graph::Value v : s.outputs) {
      const graph::ValueInfo& info = s.graph.value(v);
      std::vector<char> host(info.bytes());
      SPW_CUDA(cudaMemcpy(host.data(), executor.data(v), host.size(), cudaMemcpyDeviceToHost));
      outputs.push_back(from_bytes(host.data(), info.shape.numel(), info.dtype));
    }
  }
  return outputs;
}

TEST(OpSweepCuda, EveryRegisteredOpHasACudaKernel) {
  for (int k = 0; k < graph::kOpKinds; ++k) {
    const auto kind = static_cast<graph::OpKind>(k);
    EXPECT_NE(graph::op_def(kind).cuda, nullptr) << graph::op_name(kind) << " has no CUDA kernel";
  }
}

class EveryOpOnTheGpu : public ::testing::TestWithParam<SweepCase> {};

TEST_P(EveryOpOnTheGpu, Bf16MatchesTheCpuInF32) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
  const SweepCase& c = GetParam();
  const uint64_t seed = sweep_seed(c);
  const SweepGraph gpu = build_sweep_graph(c, DType::bf16, seed, true);
  const SweepGraph cpu = build_sweep_graph(c, DType::f32, seed, true);
  ASSERT_TRUE(has_node(gpu.graph, c.kind, c.fused));
  const std::vector<std::vector<double>> got = run_on_gpu(gpu);
  CpuSweepRun want(cpu.graph, cpu.inputs, DType::bf16);
  want.run();
  for (size_t i = 0; i < cpu.outputs.size(); ++i) {
    EXPECT_LE(rel_error(got[i], want.read(cpu.outputs[i])), c.bf16_tolerance) << gpu.graph.value(gpu.outputs[i]).name;
  }
}

INSTANTIATE_TEST_SUITE_P(OpSweep, EveryOpOnTheGpu, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<SweepCase>& info) { return info.param.label; });

}  // namespace
}  // namespace spillway::testing
