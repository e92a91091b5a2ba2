// One typed configuration of a run, shared by `train`, `finetune`, `bench`
// and `plan`: what model, what data, how the optimizer steps, how long and
// how big the schedule is, how memory is spent, which kernels run, how the
// work is split over devices, and where the run lives.
//
// The member initializers are the defaults (of `train`; the field table in
// run_config_fields.h says where another command starts elsewhere). Reading
// files, command-line flags, the environment and checkpoints all goes
// through that table, so a setting is declared once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/recompute.h"
#include "model/lora.h"
#include "plan/training_plan.h"

namespace spillway::train {

// The commands that take a run configuration.
enum class Command : uint8_t { train, finetune, bench, plan };
std::string_view command_name(Command command);

// Where the step runs: the GPU when there is one, or as named.
enum class DeviceChoice : uint8_t { automatic, cpu, cuda };

// GPU: which layouts of the training state the plan may choose
// (plan/training_plan.h).
using plan::OffloadMode;

// GPU: q|k|v and gate|up as one matmul each over stacked weights
// (model/llama_graph.h): fused, separate, or automatic: fused where the whole
// state and every activation stay on the device, separate where the plan
// moves them (the planner places the smaller blocks better:
// docs/performance.md).
enum class ProjectionMode : uint8_t { automatic, fused, separate };

// GPU: a recomputation policy (graph/recompute.h), or automatic (the
// default): the recomputation, policy or kinds of values, with the fastest
// predicted step; the CPU engine remakes nothing.
enum class RecomputeChoice : uint8_t { none, layers, selective, automatic };
// The policy a choice names; nullopt for automatic.
std::optional<graph::RecomputePolicy> recompute_policy(RecomputeChoice choice);

// Data parallelism: what the ranks split between them instead of each
// keeping it whole. none: every rank keeps the whole training state and the
// gradient sums are all-reduced; optimizer: each rank keeps 1/N of the
// masters' rest and of AdamW's moments and updates that share of the
// weights, which are then all-gathered (ZeRO-1); gradients: also 1/N of the
// gradient sums, each micro-batch's gradients reduce-scattered into them as
// the backward pass makes them (ZeRO-2); weights: also 1/N of the bf16
// weights, each layer's gathered just ahead of its use, forward and
// backward (ZeRO-3, FSDP). automatic: on GPUs, the least sharding with
// which the whole state stays on the device, on the CPU none.
enum class StateSharding : uint8_t { automatic, none, optimizer, gradients, weights };

// What the data is: text (or token files) for next-token training, or
// instruction records (train/instruction_data.h) whose loss counts the
// assistant's tokens only; automatic: instruction where every path is a
// .jsonl file whose first record has "messages" or "instruction", as TRL's
// SFTTrainer tells a conversational dataset by its keys.
enum class DataFormat : uint8_t { automatic, text, instruction };

// Each enum's one table of names, indexed by value; `noun` is what an error
// calls a word that is not in it ("unknown policy 'x'").
template <typename E>
struct EnumNames;
template <>
struct EnumNames<DeviceChoice> {
  static constexpr std::array<std::string_view, 3> names{"auto", "cpu", "cuda"};
  static constexpr std::string_view noun = "device";
};
// plan/training_plan.h names the offload modes and graph/recompute.h the
// policies; these tables are built from those names.
template <>
struct EnumNames<OffloadMode> {
  static const std::array<std::string_view, 4> names;
  static constexpr std::string_view noun = "value";
};
template <>
struct EnumNames<ProjectionMode> {
  static constexpr std::array<std::string_view, 3> names{"auto", "fused", "separate"};
  static constexpr std::string_view noun = "value";
};
template <>
struct EnumNames<DataFormat> {
  static constexpr std::array<std::string_view, 3> names{"auto", "text", "instruction"};
  static constexpr std::string_view noun = "format";
};
template <>
struct EnumNames<StateSharding> {
  static constexpr std::array<std::string_view, 5> names{"auto", "none", "optimizer", "gradients", "weights"};
  static constexpr std::string_view noun = "value";
};
template <>
struct EnumNames<RecomputeChoice> {
  static const std::array<std::string_view, 4> names;
  static constexpr std::string_view noun = "policy";
};

template <>
struct EnumNames<model::LoraBase> {
  static constexpr std::array<std::string_view, 3> names = model::kLoraBaseNames;
  static constexpr std::string_view noun = "value";
};

template <typename E>
std::string_view enum_name(E value) {
  return EnumNames<E>::names[static_cast<size_t>(value)];
}

struct ModelConfig {
  std::string config = "tiny";  // a preset or a config.json; unused when init_from is set
  std::string init_from;        // finetune: the model or run folder to start from
};

struct DataConfig {
  std::vector<std::string> paths;  // empty: the default corpus
  std::string document_separator;  // empty: "%" for the default corpus, else whole files
  int32_t vocab_size = 4096;       // for a tokenizer trained here
  double validation_fraction = 0.05;
  uint64_t seed = 1;  // which documents are held out; fixed, so that a resume finds the same split
  DataFormat format = DataFormat::automatic;
  // Instruction data: several examples laid end to end in each training row
  // (train/instruction_packing.h), RoPE positions and attention restarting
  // at each, instead of one example a row and the rest padding.
  bool packing = false;
};

struct OptimizerConfig {
  double lr = 2e-3;      // peak learning rate
  double min_lr = 2e-4;  // at the end of the cosine
  int64_t warmup = 30;   // linear warm-up steps
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

// LoRA fine-tuning (model/lora.h): adapters of `rank` on the `targets`
// projections train, the model's weights frozen; rank 0 trains every weight.
struct LoraRunConfig {
  int64_t rank = 0;
  double alpha = 16;
  double dropout = 0;  // on the adapters' input while training (model::LoraConfig::dropout)
  std::string targets = "q,k,v,o,gate,up,down";  // some of these, or "all"
  // How the targeted projections' frozen weights are kept (model/qlora.h):
  // as loaded, NF4 (QLoRA) or NF4 with double-quantized scales.
  model::LoraBase base = model::LoraBase::weights;
};

struct ScheduleConfig {
  int64_t steps = 600;      // length of the schedule
  int64_t stop_after = -1;  // stop (with a checkpoint) after this many steps; -1: at the end
  int64_t batch = 16;       // sequences per micro-batch
  int64_t seq = 128;
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  int64_t eval_every = 100;
  int64_t eval_batches = 16;
  int64_t checkpoint_every = 200;
  int64_t keep_checkpoints = 2;  // newest step folders kept; 0: all
  uint64_t seed = 1337;
  int64_t max_skipped_steps = 5;  // updates skipped in a row (non-finite loss or norm) that stop the run
};

struct MemoryConfig {
  uint64_t device_mem = 0;  // device budget in bytes; 0: the backend's default
  uint64_t host_mem = 0;    // GPU: pinned host budget; 0: 90% of what is available
  OffloadMode offload = OffloadMode::automatic;
  RecomputeChoice recompute = RecomputeChoice::automatic;
  // GPU: AdamW moments kept in bf16 (half the moments' memory and traffic).
  // The caller's AdamW may then hold no fp32 moments; sync_to_host fills them.
  bool bf16_moments = false;
};

struct KernelConfig {
  bool deterministic = true;  // false: faster GPU attention backward whose last bits may vary
  // GPU: the q|k|v product with its RoPE, the MLP's gate|up product with its
  // SwiGLU gate, and down's dX product with SwiGLU's backward, each as one
  // kernel of spillway's own Hopper GEMM (ops/gemm_hopper.h) where the GPU is
  // Hopper; false keeps cuBLASLt and the separate kernels. The bits are the
  // same either way.
  bool own_gemm = true;
  // GPU, where the step copies nothing: capture the step once (after an
  // eager first run has made every cuBLASLt plan and cuDNN graph) and replay
  // it, the same bits with no per-kernel launches; a step that cannot be
  // captured stays eager, with a warning.
  bool cuda_graph = true;
  ProjectionMode projections = ProjectionMode::automatic;
  // GPU: how many of cuBLASLt's candidates each matmul shape times on its
  // first run, keeping the fastest (1: the heuristic's first). The choice
  // does not change the bits (ops/matmul_cuda.h); at the power cap it did
  // not pay (docs/performance.md).
  int matmul_candidates = 1;
  // Rows of logits the head makes at a time (graph/fuse_linear_loss.h):
  // -1 lets the plan choose (train/step_plan.h's head_chunk_rows), 0 keeps
  // them whole.
  int64_t loss_chunk_rows = -1;
};

// Degrees of data, tensor, pipeline and context parallelism (DESIGN.md's
// rank grid, dist/rank_grid.h), and how the ranks start. Data parallelism
// runs on both engines, and so do tp, pp and cp; the GPU's runs pp beside
// dp alone, and interleaved stages on the CPU's alone.
struct ParallelConfig {
  int64_t dp = 0;  // 0: every rank the other degrees leave
  int64_t tp = 1, pp = 1, cp = 1;
  // With pp > 1: stages each rank holds, interleaved 1F1B when more than one
  // (train/pipeline_schedule.h).
  int64_t virtual_stages = 1;
  // With tp > 1: the residual stream (norms, residual adds) split by tokens
  // between the layers' tensor-parallel regions (graph/tensor_parallel.h).
  bool sequence_parallel = true;
  // Ranks this command starts on this host when no launcher (torchrun,
  // mpirun, srun) started it: one process per device.
  int64_t nproc_per_node = 1;
  int64_t timeout_s = 300;  // how long a rank waits for the others to meet, or to answer
  StateSharding shard = StateSharding::automatic;
  // Whether a file, variable or flag set dp, tp, pp or cp: if not, the
  // planner may choose them (spillway plan --gpus N, train on GPUs). Not a
  // field: resolve_run_config says it.
  bool degrees_given = false;
};

// Where the run executes and keeps its files.
struct RunPlace {
  DeviceChoice device = DeviceChoice::automatic;
  std::string out = "runs/tiny";  // run folder: checkpoints, train_log.jsonl, loss.svg, run_config.toml
  bool resume = false;            // continue out's run from its latest checkpoint
  bool overwrite = false;         // start over in an out that holds a run, removing it first
  bool quiet = false;             // no progress output
  int64_t threads = 0;            // CPU threads; 0: every core
};

// The text generated after training.
struct SampleConfig {
  int64_t tokens = 120;  // 0: none
  std::string prompt;    // empty: start a new document
  double temperature = 0.8;
  int64_t top_k = 40;
};

struct RunConfig {
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  LoraRunConfig lora;
  ScheduleConfig schedule;
  MemoryConfig memory;
  KernelConfig kernels;
  ParallelConfig parallel;
  RunPlace run;
  SampleConfig sample;
};

// What a run configuration is read from, lowest precedence first after the
// defaults: a file, the environment, the command line. Flags are keyed by
// the field's dotted key and hold the text given ("24GiB"; "true" or "false"
// for switches; one text per value of a list).
struct RunSources {
  std::string file = {};  // .toml or .json; empty: none
  std::vector<std::pair<std::string, std::vector<std::string>>> flags = {};
  // Reads an environment variable (nullptr: unset); std::getenv by default.
  const char* (*getenv)(const char* name) = nullptr;
};

// `command`'s defaults.
RunConfig default_run_config(Command command);

// The run configuration `command` uses: its defaults, then `sources` over
// them. Errors name the file and dotted key, the environment variable or
// the flag that gave the value, in one line.
RunConfig resolve_run_config(Command command, const RunSources& sources);

// The adapters a run trains (rank 0: none), its targets parsed.
model::LoraConfig lora_config(const RunConfig& config);

// Checks the ranges of the fields `command` uses and that the run fits one
// device; Error naming the field's flag.
void check_run_config(const RunConfig& config, Command command);

}  // namespace spillway::train
