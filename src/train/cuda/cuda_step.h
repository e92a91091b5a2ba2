// One compiled step of the GPU engine: a step graph, its node runner and its
// executor. Where the plan copies nothing, the plain executor runs it on the
// compute stream (each value freed at its last use, an op writing over an
// input that dies at it), and the step is captured once as a CUDA graph and
// replayed; otherwise the planned executor runs it on three streams, loads
// and stores under compute.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "exec/cuda/cuda_node_runner.h"
#include "exec/planned_executor.h"
#include "exec/executor.h"
#include "plan/placement.h"

namespace spillway::train {

// Where a step's token ids come from and its loss goes: the engine's device
// buffers, which every step binds, and a pinned buffer the ids go through
// (a pageable one may share a page with the caller's arrays pinned in place,
// which CUDA refuses to copy from).
struct StepIo {
  graph::Value tokens, targets, loss;
  int32_t* device_tokens = nullptr;
  int32_t* device_targets = nullptr;
  int32_t* pinned_ids = nullptr;  // room for a micro-batch's tokens, then its targets
  float* pinned_loss = nullptr;
};

struct CudaStepOptions {
  bool deterministic = true;
  int matmul_candidates = 1;
  bool own_gemm = true;
  bool cuda_graph = true;  // replay a captured step where the executor is the plain one
};

class CudaStep {
 public:
  // Sizes and takes the runner's workspaces from the device's memory now,
  // so that a placement can be planned in what is left.
  CudaStep(const graph::Graph& graph, const StepIo& io, Device& device, const CudaStepOptions& options);
  // Then the executor: without a placement the plain one; with one, the
  // planned one, its values going home to `pinned_host`.
  void make_executor(std::optional<plan::Placement> placement = std::nullopt, MemorySpace* pinned_host = nullptr);
  ~CudaStep();
  CudaStep(const CudaStep&) = delete;
  CudaStep& operator=(const CudaStep&) = delete;

  exec::StepProgram& program() { return *program_; }
  exec::CudaNodeRunner& runner() { return *runner_; }
  // The planned executor, or null.
  exec::PlannedExecutor* planned() { return planned_; }
  const graph::Graph& graph() const { return graph_; }

  // One micro-batch; returns its loss once it has run. `first`: the first
  // of an optimizer step, whose nodes write the gradient sums instead of
  // adding to them (no zeroing pass). The ids must be checked already.
  double run(std::span<const int32_t> tokens, std::span<const int32_t> targets, bool first);
  // Whether the step is replayed from a captured CUDA graph (no capture has
  // failed).
  bool replays() const { return options_.cuda_graph && !planned_; }

  // Per-node timing; it synchronizes after every node, so steps run slower.
  void set_profiling(bool on);
  // Seconds by node over the profiled runs.
  std::vector<double> node_seconds() const;
  // What each stream did in the last profiled run (planned executor only).
  std::vector<exec::StreamInterval> timeline() const;

 private:
  void enqueue(bool first);
  void capture(cudaGraphExec_t& replay);

  const graph::Graph& graph_;
  StepIo io_;
  Device& device_;
  CudaStepOptions options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<exec::CudaNodeRunner> runner_;
  std::unique_ptr<exec::StepProgram> program_;
  exec::Executor* plain_ = nullptr;
  exec::PlannedExecutor* planned_ = nullptr;
  bool profiling_ = false;
  std::vector<double> planned_node_seconds_;
  // A capture after a first eager run (which makes every cuBLASLt plan and
  // cuDNN graph): the executor allocates the same addresses in the same
  // order every run, so the captured pointers stay valid. One for a first
  // micro-batch, one for the others.
  int eager_runs_ = 0;
  cudaGraphExec_t replay_[2] = {nullptr, nullptr};
};

}  // namespace spillway::train
