// Where a training step runs. The trainer speaks to an Engine and never to
// a backend: the CPU engine runs the step graph on host threads over the
// host's float32 weights; the GPU engine (train/cuda/cuda_engine.cc) runs it
// in bf16 with fp32 master weights, gradients and AdamW moments placed by a
// plan across device and host memory, and copies them back only for
// checkpoints.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/communicator.h"
#include "device/device.h"
#include "graph/graph.h"
#include "model/llama_weights.h"
#include "model/qlora.h"
#include "train/lora_state.h"
#include "train/optimizer.h"
#include "train/run_config.h"
#include "train/state_part.h"

namespace spillway::train {

struct StepStats {
  double loss = 0;       // mean over the micro-batches of every data-parallel rank
  double grad_norm = 0;  // of the step's gradient, before clipping
  // False where the loss or the gradient norm is not finite: the update was
  // skipped, the weights and moments are as they were (on every rank, which
  // all see the same summed loss and norm).
  bool updated = true;
};

// Whether a step's loss and gradient norm let its update be taken.
inline bool update_is_finite(const StepStats& s) { return std::isfinite(s.loss) && std::isfinite(s.grad_norm); }

// What an engine needs of a run configuration (train/run_config.h).
struct EngineOptions {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t micro_batches = 1;  // per optimizer step, as the trainer will call train_step (the planner needs it)
  double grad_clip = 1.0;     // <= 0: no clipping
  DeviceChoice device = DeviceChoice::automatic;
  MemoryConfig memory;
  KernelConfig kernels;
  // Data parallelism: the ranks whose micro-batches make one optimizer step
  // together (null: this process alone). Each rank's engine runs its own
  // micro_batches; the gradient sums are summed over the ranks before the
  // update, so every rank updates the same weights.
  Communicator* data_parallel = nullptr;
  StateSharding shard = StateSharding::automatic;  // with data_parallel (train/run_config.h)
  // Tensor parallelism (graph/tensor_parallel.h): the ranks that split each
  // layer's matrices between them, computing every micro-batch together
  // (null: none); with sequence parallelism, the residual stream split by
  // tokens between the layers' split regions.
  Communicator* tensor_parallel = nullptr;
  bool sequence_parallel = true;
  // Pipeline parallelism (train/cpu_pipeline.h): the ranks whose stages of
  // the model each micro-batch passes through in turn (null: none). The CPU
  // engine only, so far.
  Communicator* pipeline_parallel = nullptr;
  // Pipeline stages each rank holds: more than one runs interleaved 1F1B
  // (train/pipeline_schedule.h).
  int virtual_stages = 1;
  // Context parallelism (model::LlamaContext): the ranks each of whose
  // micro-batches is its chunk of every sequence, the weights replicated
  // (null: none). The CPU engine only, so far.
  Communicator* context_parallel = nullptr;
  // The ranks holding the same weights and state: the data-parallel ranks
  // and, with context parallelism, every chunk's (dist::World::replicas).
  // The GPU engine sums the gradient sums and shards the state over them.
  Communicator* replicas = nullptr;
  int gpu_ordinal = 0;  // the GPU this rank runs on
  // Ranks on this host: they share its memory (memory.host_mem is the
  // host's budget), each planning with an even share of it.
  int ranks_on_host = 1;
  // The training loss is the mean over the counted targets (>= 0) of the
  // whole optimizer step, on every rank, through per-token weights
  // (train/loss_weights.h), instead of the mean of each micro-batch's mean:
  // for data whose micro-batches count different numbers of tokens
  // (instruction data). Evaluation is unchanged.
  bool weighted_loss = false;
  // Packed rows (train/instruction_packing.h): each training step is given
  // every token's position within its example and where its example starts
  // (PackedDocuments), so RoPE restarts and attention stays inside each
  // example. Evaluation is one example a row and takes neither.
  bool documents = false;
  // LoRA (model/lora.h): the adapters and their AdamW moments, which the
  // engine trains in place, the weights frozen; the optimizer's own moments
  // are then unused. Must outlive the engine. Null: every weight trains.
  // The GPU trains them on the device (train/cuda/cuda_lora_engine.cc) and
  // writes them back here in sync_to_host.
  LoraState* lora = nullptr;
  // With LoRA: how the targeted projections' frozen weights are kept
  // (model/qlora.h). NF4 replaces their values in the engine's weights by
  // the dequantized NF4 ones once, at the start; the GPU keeps the NF4
  // codes and dequantizes each weight just before a matmul reads it.
  model::LoraBase lora_base = model::LoraBase::weights;
  // With NF4: the base quantized as the weights were made or read
  // (model/qlora_stream.h), whose targeted tensors the weights then hold
  // without values. The engine takes it (moved from), so the NF4 base is
  // held once. Null: the engine quantizes the weights it is given.
  model::QuantizedBase* lora_quantized = nullptr;
  // The run's seed, which LoRA's dropout draws from (ops/dropout.h): each
  // micro-batch's key from it, the optimizer steps taken and the
  // micro-batch's place in the step over the data-parallel ranks.
  uint64_t seed = 0;
};

// The base options.lora_quantized holds, moved out, after checking it is
// the one options.lora_base and the adapters' targets ask of `config`.
model::QuantizedBase take_quantized_base(const EngineOptions& options, const model::LlamaConfig& config);

// The dropout key of this rank's micro-batch `micro` (of `micro_batches`)
// of the optimizer step after `steps_taken` updates.
uint64_t micro_batch_dropout_key(const EngineOptions& o, int64_t steps_taken, int64_t micro_batches, int64_t micro);

// Packed rows' per-token positions and document starts
// (model::LlamaGraphOptions::documents), laid out as the step's inputs;
// both empty where each row is one example.
struct PackedDocuments {
  std::span<const int32_t> positions, doc_starts;
  bool empty() const { return positions.empty() && doc_starts.empty(); }
  PackedDocuments subspan(size_t first, size_t count) const {
    if (empty()) return {};
    return {positions.subspan(first, count), doc_starts.subspan(first, count)};
  }
};

class Engine;

// The weighted loss's weight of each counted token of an optimizer step
// (train/loss_weights.h) whose targets on this rank are `targets`: the
// count summed over the ranks through `engine`. Every rank must call it.
double step_token_weight(Engine& engine, std::span<const int32_t> targets, int64_t micro_batches, int ranks);

// How many ranks train together (1 without data parallelism).
inline int data_parallel_size(const EngineOptions& o) { return o.data_parallel ? o.data_parallel->size() : 1; }

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string description() const = 0;  // "cpu, 16 threads", "cuda:0 NVIDIA H100 80GB HBM3 (...)"
  virtual std::string device_name() const = 0;  // "cpu", "cuda:0 NVIDIA H100 80GB HBM3"
  virtual bool on_gpu() const = 0;

  // One optimizer step over `micro_batches` micro-batches laid end to end in
  // inputs and targets (each micro-batch batch * seq tokens), and in
  // `documents` as the inputs where the engine takes packed rows
  // (EngineOptions::documents), else empty.
  virtual StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                               const PackedDocuments& documents, int64_t micro_batches, double lr) = 0;
  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) {
    return train_step(inputs, targets, PackedDocuments{}, micro_batches, lr);
  }
  // Mean loss of one batch, weights unchanged.
  virtual double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) = 0;
  // Every rank calls it before an evaluation's eval_loss calls, of which
  // the ranks then make unequal numbers (they take turns at the batches):
  // an engine whose weights are sharded gathers them here, eval_loss
  // needing them whole.
  virtual void begin_evaluation() {}
  // Whether eval_loss is a collective every rank must join as often as the
  // others (an engine that gathers sharded weights layer by layer in it):
  // the ranks then evaluate equally many batches, padding with rows that
  // count nothing.
  virtual bool evaluation_is_collective() const { return false; }
  // `values` summed over the data-parallel ranks, in place (as they are
  // without data parallelism). Every rank must call it.
  virtual void sum_over_ranks(std::span<double> values) = 0;
  // `values` summed over every rank of the run (data- and tensor-parallel),
  // in place. Every rank must call it.
  virtual void sum_over_world(std::span<double> values) { sum_over_ranks(values); }
  // Makes the host weights and optimizer handed to the engine current and
  // whole (an engine may have let go of their arrays while it holds the
  // state itself).
  virtual void sync_to_host() = 0;
  // Tensor `i` (model::parameter_specs's order) of the state's `part`, as
  // fp32, into `out`: a checkpoint's reads, one tensor at a time, so the
  // state never needs a second whole copy in host memory. Where
  // reads_are_collective(), every rank must make the same reads in the same
  // order.
  virtual void read_state(StatePart part, size_t i, std::span<float> out) = 0;
  virtual bool reads_are_collective() const { return false; }
  // Training is over: the engine lets go of what its steps need (the room
  // of their offloaded values, which the planner lets the caller's masters
  // share), keeping the state for read_state and peak_device_bytes; no
  // step or evaluation may follow.
  virtual void finish() {}
  virtual uint64_t peak_device_bytes() const = 0;

  // Per-op timing of the training step (synchronizing after every op, so
  // steps run slower while it is on). The report sums time by op kind.
  virtual void set_profiling(bool on) = 0;
  virtual std::string profile_report() const = 0;
  // The last profiled step as a picture of what each stream did (SVG);
  // empty where the engine has a single stream.
  virtual std::string measured_timeline_svg() const { return {}; }
  // Whether training steps are replayed from a captured CUDA graph
  // (KernelConfig::cuda_graph, where the step copies nothing, and no
  // capture has failed).
  virtual bool replays_cuda_graph() const { return false; }
  // Whether the step runs q|k|v and gate|up as single matmuls
  // (KernelConfig::projections; the CPU engine keeps them separate).
  virtual bool fused_projections() const { return false; }
  // The planner's prediction of one optimizer step, in seconds (0 where the
  // engine runs without a plan), for comparing with the measured step.
  virtual double predicted_step_seconds() const { return 0; }
};

// The tokens of one micro-batch (batch × seq), after checking that a step's
// inputs and targets hold exactly `micro_batches` of them, and `documents`
// as many where the engine takes packed rows, else none.
size_t micro_batch_tokens(const EngineOptions& options, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, const PackedDocuments& documents,
                          int64_t micro_batches);

// Seconds by op kind (matmul split into forward/backward and lm_head) over
// the nodes of `graph`, as a table.
std::string op_time_report(const graph::Graph& graph, const std::vector<double>& node_seconds, int steps,
                           double other_seconds);

// Whether `device` picks the GPU engine on this machine; Error where it
// asks for CUDA this build does not have.
bool picks_gpu(DeviceChoice device);

// The device a run's engine would use, alone: GPU `gpu_ordinal` (made
// current) or the CPU, as picks_gpu chooses. For work beside training on
// the same memory and streams, such as timing the collectives.
std::unique_ptr<Device> make_run_device(DeviceChoice device, int gpu_ordinal);

// `weights` and `optimizer` must outlive the engine; they are its host copy.
std::unique_ptr<Engine> make_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);
#ifdef SPILLWAY_HAS_CUDA
std::unique_ptr<Engine> make_cuda_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options);
// LoRA and QLoRA on the GPU (options.lora set): train/cuda/cuda_lora_engine.cc.
std::unique_ptr<Engine> make_cuda_lora_engine(model::LlamaWeights& weights, AdamW& optimizer,
                                              const EngineOptions& options);
#endif

}  // namespace spillway::train
