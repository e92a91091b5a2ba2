// One compiled step of the GPU engine: a step graph, its node runner and its
// executor. Where the plan copies nothing, the plain executor runs it on the
// compute stream (each value freed at its last use, an op writing over an
// input that dies at it), and the step is captured once as a CUDA graph and
// replayed; otherwise the planned executor runs it on three streams, loads
// and stores under compute.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/cuda/pinned_host.h"
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
  graph::Value loss_weights;  // a weighted loss's per-token weights (f32), else invalid
  graph::Value positions, doc_starts;  // packed rows' (i32), else invalid
  graph::Value dropout_key;  // LoRA's dropout key (i32 [2], ops/dropout.h), else invalid
  int32_t* device_tokens = nullptr;
  int32_t* device_targets = nullptr;
  float* device_loss_weights = nullptr;
  int32_t* device_positions = nullptr;
  int32_t* device_doc_starts = nullptr;
  int32_t* device_dropout_key = nullptr;
  int32_t* pinned_ids = nullptr;  // room for a micro-batch's tokens, then its targets
  float* pinned_loss_weights = nullptr;  // room for a micro-batch's weights
  int32_t* pinned_documents = nullptr;  // room for a micro-batch's positions, then its document starts
  float* pinned_loss = nullptr;
  int32_t* pinned_dropout_key = nullptr;
};

// A StepIo's buffers for micro-batches of `tokens` tokens: device room for
// the ids (and the loss weights, positions, document starts and dropout key
// where the step takes them), and one pinned buffer they all go through,
// which the caller keeps as long as the io.
struct StepIoBuffers {
  StepIo io;  // its graph values unset: each step sets its own
  std::unique_ptr<PinnedBuffer> pinned;
};
StepIoBuffers make_step_io(MemorySpace& device_memory, uint64_t tokens, bool weighted_loss, bool documents,
                           bool dropout_key = false);

struct CudaStepOptions {
  bool deterministic = true;
  int matmul_candidates = 1;
  bool own_gemm = true;
  bool cuda_graph = true;  // replay a captured step where the executor is the plain one
  // A tensor-parallel rank's step: its collectives' communicators (must
  // outlive the step; null: none).
  const ops::CollectiveGroups* collectives = nullptr;
};

// A micro-batch of this many tokens and targets is all the device buffers
// hold; a kernel cannot throw, so ids outside the vocabulary are refused
// here, naming the first (negative targets are ignored positions).
void check_step_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab,
                    size_t batch_tokens);

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

  // Work of the caller's issued beside a micro-batch's own, on the plain
  // executor only: before_node and after_node around each node as it is
  // issued, at_start before the first and at_end after the last (which must
  // join every stream it forked back to the compute stream); a replayed
  // step captures them. Each is told whether the micro-batch is its
  // optimizer step's first. Issued on the last micro-batch of a step, or on
  // every one. Empty functions are skipped.
  struct MicroBatchHooks {
    std::function<void(size_t node, bool first)> before_node, after_node;
    std::function<void(bool first)> at_start, at_end;
    bool every_micro_batch = false;
  };
  void set_micro_batch_hooks(MicroBatchHooks hooks) { hooks_ = std::move(hooks); }
  // Every micro-batch writes the gradient sums afresh rather than adding to
  // them (they are reduce-scattered elsewhere after each one).
  void set_sums_written_each_micro_batch(bool on) { sums_written_each_ = on; }
  // How run() waits for its micro-batch to finish (default: the stream's
  // synchronize), e.g. a wait bounded in time where it holds collectives.
  void set_waiter(std::function<void(Stream&)> wait) { wait_ = std::move(wait); }

  // One micro-batch; returns its loss once it has run. `first`: the first
  // of an optimizer step, whose nodes write the gradient sums instead of
  // adding to them (no zeroing pass); `last`: the last, which issues the
  // hooks (see MicroBatchHooks). The ids must be checked already. `loss_weights`: one per token
  // where the step's loss is weighted, else empty; `positions` and
  // `doc_starts` (checked already): one per token where its rows are
  // packed, else empty.
  double run(std::span<const int32_t> tokens, std::span<const int32_t> targets, bool first, bool last = false,
             std::span<const float> loss_weights = {}, std::span<const int32_t> positions = {},
             std::span<const int32_t> doc_starts = {});
  // Whether the step is replayed from a captured CUDA graph (no capture has
  // failed).
  bool replays() const { return options_.cuda_graph && !planned_; }
  // The key LoRA's dropout draws the next runs' elements with; a step
  // without adapter dropout ignores it.
  void set_dropout_key(uint64_t key) { dropout_key_ = key; }

  // Per-node timing; it synchronizes after every node, so steps run slower.
  void set_profiling(bool on);
  // Seconds by node over the profiled runs.
  std::vector<double> node_seconds() const;
  // What each stream did in the last profiled run (planned executor only).
  std::vector<exec::StreamInterval> timeline() const;

 private:
  void enqueue(bool first, bool hooked);
  void run_program(bool first, bool hooked);
  void capture(cudaGraphExec_t& replay, bool first, bool hooked);

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
  // A capture after a first eager run of the same kind (which makes every
  // cuBLASLt plan and cuDNN graph, and connects the hooks' collectives): the
  // executor allocates the same addresses in the same order every run, so
  // the captured pointers stay valid. One by whether the micro-batch is the
  // first and whether it issues the hooks.
  bool ran_eagerly_[2][2] = {{false, false}, {false, false}};
  cudaGraphExec_t replay_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  MicroBatchHooks hooks_;
  bool sums_written_each_ = false;
  uint64_t dropout_key_ = 0;
  std::function<void(Stream&)> wait_;
};

}  // namespace spillway::train
