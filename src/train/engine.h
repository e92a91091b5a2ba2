// Where a training step runs. The trainer speaks to an Engine and never to
// a backend: the CPU engine runs the step graph on host threads over the
// host's float32 weights; the GPU engine (train/cuda/cuda_engine.cc) runs it
// in bf16 with fp32 master weights, gradients and AdamW moments placed by a
// plan across device and host memory, and copies them back only for
// checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "model/llama_weights.h"
#include "train/optimizer.h"

namespace spillway::train {

struct StepStats {
  double loss = 0;       // mean over the micro-batches
  double grad_norm = 0;  // before clipping
};

struct EngineOptions {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t micro_batches = 1;         // per optimizer step, as the trainer will call train_step (the planner needs it)
  double grad_clip = 1.0;            // <= 0: no clipping
  std::string device = "auto";       // auto (GPU when there is one), cpu, cuda
  uint64_t device_memory = 0;        // budget in bytes; 0: the backend's default
  uint64_t host_memory = 0;          // GPU: pinned host budget; 0: 90% of what is available
  // GPU: which layouts of the state the plan may choose (plan::OffloadMode):
  // auto, on, off or stream.
  std::string offload = "auto";
  // GPU: AdamW moments kept in bf16 (half the moments' memory and traffic).
  // The caller's AdamW may then hold no fp32 moments; sync_to_host fills them.
  bool bf16_moments = false;
  // GPU: none, layers or selective (graph/recompute.h), or auto: the
  // fastest predicted.
  std::string recompute = "none";
  bool deterministic = true;         // false: faster GPU attention backward whose last bits may vary
  // GPU, where the step copies nothing: capture the step once (after an
  // eager first run has made every cuBLASLt plan and cuDNN graph) and replay
  // it, the same bits with no per-kernel launches; a step that cannot be
  // captured stays eager, with a warning.
  bool cuda_graph = true;
  // GPU: how many of cuBLASLt's candidates each matmul shape times on its
  // first run, keeping the fastest (1: the heuristic's first). The choice
  // does not change the bits (ops/matmul_cuda.h); at the power cap it did
  // not pay (docs/performance.md).
  int matmul_candidates = 1;
  // GPU: the q|k|v product with its RoPE, the MLP's gate|up product with
  // its SwiGLU gate, and down's dX product with SwiGLU's backward, each as
  // one kernel of spillway's own Hopper GEMM (ops/gemm_hopper.h) where the
  // GPU is Hopper; false keeps cuBLASLt and the separate kernels. The bits
  // are the same either way.
  bool own_gemm = true;
  // GPU: q|k|v and gate|up as one matmul each over stacked weights
  // (model/llama_graph.h): fused, separate, or auto: fused where the step
  // copies nothing, separate where the plan moves state or activations
  // (the planner places the smaller blocks better: docs/performance.md).
  std::string projections = "auto";
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string description() const = 0;  // "cpu, 16 threads", "cuda:0 NVIDIA H100 80GB HBM3 (...)"
  virtual std::string device_name() const = 0;  // "cpu", "cuda:0 NVIDIA H100 80GB HBM3"
  virtual bool on_gpu() const = 0;

  // One optimizer step over `micro_batches` micro-batches laid end to end in
  // inputs and targets (each micro-batch batch * seq tokens).
  virtual StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                               int64_t micro_batches, double lr) = 0;
  // Mean loss of one batch, weights unchanged.
  virtual double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) = 0;
  // Makes the host weights and optimizer handed to the engine current.
  virtual void sync_to_host() = 0;
  virtual uint64_t peak_device_bytes() const = 0;

  // Per-op timing of the training step (synchronizing after every op, so
  // steps run slower while it is on). The report sums time by op kind.
  virtual void set_profiling(bool on) = 0;
  virtual std::string profile_report() const = 0;
  // The last profiled step as a picture of what each stream did (SVG);
  // empty where the engine has a single stream.
  virtual std::string measured_timeline_svg() const { return {}; }
  // Whether training steps are replayed from a captured CUDA graph
  // (EngineOptions::cuda_graph, where the step copies nothing, and no
  // capture has failed).
  virtual bool replays_cuda_graph() const { return false; }
  // Whether the step runs q|k|v and gate|up as single matmuls
  // (EngineOptions::projections; the CPU engine keeps them separate).
  virtual bool fused_projections() const { return false; }
  // The planner's prediction of one optimizer step, in seconds (0 where the
  // engine runs without a plan), for comparing with the measured step.
  virtual double predicted_step_seconds() const { return 0; }
};

// The tokens of one micro-batch (batch × seq), after checking that a step's
// inputs and targets hold exactly `micro_batches` of them.
size_t micro_batch_tokens(const EngineOptions& options, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, int64_t micro_batches);

// Seconds by op kind (matmul split into forward/backward and lm_head) over
// the nodes of `graph`, as a table.
std::string op_time_report(const graph::Graph& graph, const std::vector<double>& node_seconds, int steps,
                           double other_seconds);

// `weights` and `optimizer` must outlive the engine; they are its host copy.
std::unique_ptr<Engine> make_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);
#ifdef SPILLWAY_HAS_CUDA
std::unique_ptr<Engine> make_cuda_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);
#endif

}  // namespace spillway::train
