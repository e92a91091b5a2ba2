// LLaMA split over two GPUs by the tensor-parallel pass, in bf16 through
// the CUDA kernels and NCCL (ranks as threads, one GPU each): every rank's
// loss and gradients against the same step in float64 on the CPU, as the
// op sweep compares each op's bf16 kernel (2e-2), with and without
// sequence parallelism and with a vocabulary the ranks split unevenly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device/cpu/cpu_device.h"
#include "device/cuda/cuda_device.h"
#include "dist/world.h"
#include "exec/cuda/cuda_node_runner.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "graph/tensor_parallel.h"
#include "model/llama_graph.h"
#include "model/llama_sharding.h"
#include "testing/cuda_arrays.h"
#include "testing/llama.h"
#include "testing/numeric.h"
#include "testing/thread_ranks.h"

namespace spillway::model {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16;
LlamaConfig config() { return testing::llama_config(37, 64, 96, 2, 4, 2); }

graph::ParameterSplit split_of(const graph::ValueInfo& v) { return llama_parameter_split(config(), v); }

std::vector<double> weights(const graph::ValueInfo& p, size_t i) {
  return testing::random_vector<double>(p.shape.numel(), 100 + i, -0.5, 0.5);
}

struct Step {
  double loss = 0;
  std::vector<std::vector<double>> grads;
};

// The whole step in float64 on the CPU.
Step reference() {
  graph::Graph g;
  graph::Builder b(g, DType::f64);
  LlamaGraph m = build_llama(b, config(), kBatch, kSeq);
  g.mark_output(m.loss);
  const auto grads = graph::append_backward(b, m.loss, m.parameters);
  auto space = make_host_heap_space("test", MemorySpace::kUnlimited);
  exec::CpuExecutor e(g, *space);
  std::vector<int32_t> in = testing::random_tokens(kBatch * kSeq, 1, 37), out = testing::random_tokens(kBatch * kSeq, 2, 37);
  e.bind(m.tokens, std::span<int32_t>(in));
  e.bind(m.targets, std::span<int32_t>(out));
  std::vector<std::vector<double>> w;
  for (size_t i = 0; i < m.parameters.size(); ++i) w.push_back(weights(g.value(m.parameters[i]), i));
  for (size_t i = 0; i < m.parameters.size(); ++i) e.bind(m.parameters[i], std::span<double>(w[i]));
  e.run();
  Step s{e.read<double>(m.loss)[0], {}};
  for (graph::Value p : m.parameters) {
    auto d = e.read<double>(grads[p]);
    s.grads.emplace_back(d.begin(), d.end());
  }
  return s;
}

// One rank's step in bf16 on GPU `rank`.
Step on_gpu(int rank, bool sequence_parallel, Communicator& comm, Device& device) {
  graph::Graph forward;
  graph::Builder fb(forward, DType::bf16);
  LlamaGraph m = build_llama(fb, config(), kBatch, kSeq);
  forward.mark_output(m.loss);
  const graph::TensorParallelism tp{.rank = rank, .ranks = 2, .sequence_parallel = sequence_parallel};
  graph::RankGraph r = graph::shard_graph(forward, DType::bf16, split_of, tp);
  graph::Builder rb(r.graph, DType::bf16);
  std::vector<graph::Value> params;
  for (graph::Value p : m.parameters) params.push_back(r.of(p));
  const auto grads = graph::append_backward(rb, r.of(m.loss), params, graph::GradientOutput::fresh,
                                            graph::seed_gradient(tp));
  ops::CollectiveGroups groups;
  groups.by_group[static_cast<size_t>(tp.group)] = &comm;
  groups.stream = &device.stream(StreamKind::compute);
  exec::CudaNodeRunner runner(r.graph, device.device_memory(), device.stream(StreamKind::compute), true, 1, true,
                              &groups);
  exec::Executor e(r.graph, device.device_memory(), runner);
  testing::DeviceArray<int32_t> in(testing::random_tokens(kBatch * kSeq, 1, 37));
  testing::DeviceArray<int32_t> out(testing::random_tokens(kBatch * kSeq, 2, 37));
  e.bind(r.of(m.tokens), in.get());
  e.bind(r.of(m.targets), out.get());
  std::vector<std::unique_ptr<testing::DeviceArray<bf16>>> w;
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    const graph::ValueInfo& p = forward.value(m.parameters[i]);
    std::vector<bf16> piece;
    for (double x : graph::piece_of<double>(weights(p, i), p.shape, split_of(p), rank, 2)) {
      piece.push_back(to_bf16(static_cast<float>(x)));
    }
    w.push_back(std::make_unique<testing::DeviceArray<bf16>>(piece));
    e.bind(params[i], w.back()->get());
  }
  e.run();
  runner.synchronize();
  auto read = [&](graph::Value v) {
    const graph::ValueInfo& info = r.graph.value(v);
    std::vector<float> host(static_cast<size_t>(info.shape.numel()));
    SPW_CUDA(cudaMemcpy(host.data(), e.data(v), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return std::vector<double>(host.begin(), host.end());
  };
  Step s{read(r.of(m.loss))[0], {}};
  for (graph::Value p : params) s.grads.push_back(read(grads[p]));
  return s;
}

void expect_matches_reference(bool sequence_parallel) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA GPUs";
  const Step want = reference();
  graph::Graph names;
  graph::Builder nb(names, DType::f64);
  const LlamaGraph m = build_llama(nb, config(), kBatch, kSeq);
  std::vector<Step> got(2);
  const std::vector<std::string> errors = testing::run_thread_ranks(
      dist::RankGrid(1, 1, 1, 2, 2),
      [&](dist::World& world, int rank) {
        set_current_cuda_device(rank);
        auto device = make_cuda_device(rank);
        got[static_cast<size_t>(rank)] = on_gpu(rank, sequence_parallel, *world.group(dist::Dim::tp), *device);
      },
      /*gpus=*/true);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(errors[static_cast<size_t>(rank)], "") << "rank " << rank;
    const Step& s = got[static_cast<size_t>(rank)];
    EXPECT_NEAR(s.loss, want.loss, 2e-2 * want.loss) << "rank " << rank;
    for (size_t i = 0; i < want.grads.size(); ++i) {
      const graph::ValueInfo& p = names.value(m.parameters[i]);
      std::vector<double> piece = graph::piece_of<double>(want.grads[i], p.shape, split_of(p), rank, 2);
      std::vector<double> mine = s.grads[i];
      if (split_of(p).placement == graph::Placement::whole) {
        // Each rank's part of a whole parameter's gradient: the sum is the gradient.
        const std::vector<double>& other = got[static_cast<size_t>(1 - rank)].grads[i];
        for (size_t j = 0; j < mine.size(); ++j) mine[j] += other[j];
      }
      EXPECT_LE(testing::rel_error(mine, piece), 2e-2) << "rank " << rank << " " << p.name;
    }
  }
}

TEST(LlamaShardingCuda, TensorParallelStepOnTwoGpusMatchesTheReference) { expect_matches_reference(false); }
TEST(LlamaShardingCuda, SequenceParallelStepOnTwoGpusMatchesTheReference) { expect_matches_reference(true); }

}  // namespace
}  // namespace spillway::model
