#include "train/run_config_fields.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <type_traits>
#include <utility>

#include "base/bytes.h"
#include "base/limits.h"
#include "base/status.h"

namespace spillway::train {

namespace {

using nlohmann::json;

// Byte budgets are uint64 fields; their limit fits int64 as every field's does.
constexpr int64_t kMaxBudget = static_cast<int64_t>(limits::kMaxBudgetBytes);

template <typename E>
EnumRef enum_ref(E& value) {
  return {EnumNames<E>::names, EnumNames<E>::noun,
          [](const void* p) { return static_cast<size_t>(*static_cast<const E*>(p)); },
          [](void* p, size_t i) { *static_cast<E*>(p) = static_cast<E>(i); }, &value};
}

// The FieldRef of config.*Section.*Member.
template <auto Section, auto Member>
FieldRef at(RunConfig& config) {
  auto& value = (config.*Section).*Member;
  if constexpr (std::is_enum_v<std::remove_reference_t<decltype(value)>>) {
    return enum_ref(value);
  } else {
    return &value;
  }
}

constexpr Commands T = command_bit(Command::train), F = command_bit(Command::finetune),
                   B = command_bit(Command::bench), P = command_bit(Command::plan);
constexpr Commands kTraining = T | F;       // runs that train on data and keep checkpoints
constexpr Commands kSteps = T | F | B;      // commands that run training steps
constexpr Commands kAll = T | F | B | P;

using R = RunConfig;

// Rows in the order a config file and --help list them.
const Field kFields[] = {
    // model
    {.key = "model.config", .flag = "--config", .help = "a preset (tiny, llama3.2-1b, llama3-8b, ...) or a config.json",
     .commands = T | B | P, .ref = at<&R::model, &ModelConfig::config>, .plan_default = "llama3-8b"},
    {.key = "model.init_from", .flag = "--model", .aliases = "-m",
     .help = "model folder, run folder or GGUF file to start from (required)",
     .commands = F, .ref = at<&R::model, &ModelConfig::init_from>},
    // data
    {.key = "data.paths", .flag = "--data",
     .help = "text files or folders of them, or a folder made by `spillway tokenize` "
             "(default: the English fortunes corpus installed by setup)",
     .commands = kTraining, .ref = at<&R::data, &DataConfig::paths>},
    {.key = "data.separator", .flag = "--separator",
     .help = "a line holding exactly this text ends a document (default: a blank line; % for the default corpus)",
     .commands = kTraining, .ref = at<&R::data, &DataConfig::document_separator>},
    {.key = "data.format", .flag = "--data-format",
     .help = "text, instruction (JSONL of chat \"messages\" or Alpaca \"instruction\"/\"input\"/\"output\" records, "
             "rendered through the model's chat template; the loss counts the assistant's tokens only), or auto "
             "(instruction where every --data file is such a .jsonl)",
     .commands = kTraining, .ref = at<&R::data, &DataConfig::format>},
    {.key = "data.packing", .flag = "--packing",
     .help = "instruction data: pack several examples into each training row, positions and attention restarting "
             "at each (validation stays one example a row)",
     .commands = kTraining, .ref = at<&R::data, &DataConfig::packing>, .checkpointed = true},
    {.key = "data.vocab_size", .flag = "--vocab", .help = "size of the BPE tokenizer trained on the data",
     .commands = T, .ref = at<&R::data, &DataConfig::vocab_size>, .min = 1, .max = limits::kMaxVocab},
    {.key = "data.validation_fraction", .flag = "--validation-fraction",
     .help = "share of the tokens held out for validation, in whole documents (0: no validation)",
     .commands = kTraining,
     .ref = at<&R::data, &DataConfig::validation_fraction>},
    // optimizer
    {.key = "optimizer.lr", .flag = "--lr", .help = "peak learning rate", .commands = kTraining,
     .ref = at<&R::optimizer, &OptimizerConfig::lr>, .checkpointed = true, .finetune_default = "3e-4"},
    {.key = "optimizer.min_lr", .flag = "--min-lr", .help = "learning rate at the end of the cosine",
     .commands = kTraining, .ref = at<&R::optimizer, &OptimizerConfig::min_lr>, .checkpointed = true,
     .finetune_default = "3e-5"},
    {.key = "optimizer.warmup", .flag = "--warmup", .help = "linear warm-up steps", .commands = kTraining,
     .ref = at<&R::optimizer, &OptimizerConfig::warmup>,
     .min = 0, .max = limits::kMaxSteps, .checkpointed = true, .finetune_default = "10"},
    {.key = "optimizer.weight_decay", .flag = "--weight-decay", .help = "AdamW decoupled weight decay (matrices only)",
     .commands = kTraining, .ref = at<&R::optimizer, &OptimizerConfig::weight_decay>, .checkpointed = true},
    {.key = "optimizer.grad_clip", .flag = "--clip", .help = "clip the global gradient norm to this (0: off)",
     .commands = kTraining, .ref = at<&R::optimizer, &OptimizerConfig::grad_clip>, .checkpointed = true},
    {.key = "optimizer.beta1", .flag = "--beta1", .help = "AdamW's decay of the first moment", .commands = kTraining,
     .ref = at<&R::optimizer, &OptimizerConfig::beta1>, .checkpointed = true},
    {.key = "optimizer.beta2", .flag = "--beta2", .help = "AdamW's decay of the second moment", .commands = kTraining,
     .ref = at<&R::optimizer, &OptimizerConfig::beta2>, .checkpointed = true},
    {.key = "optimizer.eps", .flag = "--eps", .help = "AdamW's epsilon beside the second moment's root",
     .commands = kTraining, .ref = at<&R::optimizer, &OptimizerConfig::eps>, .checkpointed = true},
    // lora
    {.key = "lora.rank", .flag = "--lora-rank",
     .help = "fine-tune LoRA adapters of this rank on --lora-targets, the model's weights frozen (0: every weight "
             "trains)",
     .commands = F | B | P, .ref = at<&R::lora, &LoraRunConfig::rank>, .min = 0, .max = 65536, .checkpointed = true},
    {.key = "lora.alpha", .flag = "--lora-alpha", .help = "LoRA's alpha: the adapters' product is scaled by alpha / rank",
     .commands = F | B | P, .ref = at<&R::lora, &LoraRunConfig::alpha>, .checkpointed = true},
    {.key = "lora.dropout", .flag = "--lora-dropout", .help = "dropout on the adapters' input while training, as PEFT's lora_dropout (0: none)",
     .commands = F | B | P, .ref = at<&R::lora, &LoraRunConfig::dropout>, .checkpointed = true},
    {.key = "lora.targets", .flag = "--lora-targets",
     .help = "the projections that get adapters: some of q,k,v,o,gate,up,down, or all", .commands = F | B | P,
     .ref = at<&R::lora, &LoraRunConfig::targets>, .checkpointed = true},
    {.key = "lora.base", .flag = "--lora-base",
     .help = "how the targeted projections' frozen weights are kept: weights (as loaded), nf4 (QLoRA: 4-bit "
             "NormalFloat in blocks of 64, as bitsandbytes stores them) or nf4-dq (its scales double-quantized too)",
     .commands = F | B | P, .ref = at<&R::lora, &LoraRunConfig::base>, .checkpointed = true},
    // schedule
    {.key = "schedule.steps", .flag = "--steps", .help = "optimizer steps in the schedule", .commands = kTraining,
     .ref = at<&R::schedule, &ScheduleConfig::steps>,
     .min = 1, .max = limits::kMaxSteps, .checkpointed = true, .finetune_default = "200"},
    {.key = "schedule.stop_after", .flag = "--stop-after",
     .help = "stop after this many steps, with a checkpoint (resume later; -1: at the end)", .commands = kTraining,
     .ref = at<&R::schedule, &ScheduleConfig::stop_after>, .min = -1, .max = limits::kMaxSteps},
    {.key = "schedule.batch", .flag = "--batch", .help = "sequences per micro-batch", .commands = kAll,
     .ref = at<&R::schedule, &ScheduleConfig::batch>,
     .min = 1, .max = limits::kMaxBatch, .checkpointed = true, .bench_default = "8",
     .plan_default = "1"},
    {.key = "schedule.seq", .flag = "--seq", .help = "tokens per sequence", .commands = kAll,
     .ref = at<&R::schedule, &ScheduleConfig::seq>,
     .min = 1, .max = limits::kMaxSeq, .checkpointed = true, .plan_default = "8192"},
    {.key = "schedule.grad_accum", .flag = "--grad-accum", .help = "micro-batches per optimizer step",
     .commands = kAll, .ref = at<&R::schedule, &ScheduleConfig::grad_accum>,
     .min = 1, .max = limits::kMaxGradAccum, .checkpointed = true},
    {.key = "schedule.eval_every", .flag = "--eval-every", .help = "validation every N steps (0: only at the end)",
     .commands = kTraining, .ref = at<&R::schedule, &ScheduleConfig::eval_every>,
     .min = 0, .max = limits::kMaxSteps, .checkpointed = true},
    {.key = "schedule.eval_batches", .flag = "--eval-batches", .help = "validation batches per evaluation",
     .commands = kTraining, .ref = at<&R::schedule, &ScheduleConfig::eval_batches>,
     .min = 0, .max = limits::kMaxEvalBatches, .checkpointed = true},
    {.key = "schedule.checkpoint_every", .flag = "--checkpoint-every", .aliases = "--save-every",
     .help = "checkpoint every N steps (0: only at the end)", .commands = kTraining,
     .ref = at<&R::schedule, &ScheduleConfig::checkpoint_every>,
     .min = 0, .max = limits::kMaxSteps, .checkpointed = true},
    {.key = "schedule.keep_checkpoints", .flag = "--keep-checkpoints",
     .help = "newest checkpoints kept in the run folder (0: all)", .commands = kTraining,
     .ref = at<&R::schedule, &ScheduleConfig::keep_checkpoints>, .min = 0},
    {.key = "schedule.max_skipped_steps", .flag = "--max-skipped-steps",
     .help = "steps in a row whose update is skipped for a non-finite loss or gradient norm before the run stops",
     .commands = kTraining, .ref = at<&R::schedule, &ScheduleConfig::max_skipped_steps>, .min = 1},
    {.key = "schedule.seed", .flag = "--seed", .help = "seed for initialization, data order and the sample",
     .commands = kTraining, .ref = at<&R::schedule, &ScheduleConfig::seed>, .checkpointed = true},
    // memory
    {.key = "memory.device_mem", .flag = "--device-mem",
     .help = "device memory budget (bytes, 24GiB, ...; 0: the backend's default)", .commands = kAll,
     .ref = at<&R::memory, &MemoryConfig::device_mem>, .bytes = true, .max = kMaxBudget, .env = "SPILLWAY_DEVICE_MEM",
     .plan_default = "80GiB"},
    {.key = "memory.host_mem", .flag = "--host-mem",
     .help = "pinned host memory budget of a planned GPU step, the whole host's: data-parallel ranks on it share it "
             "evenly (bytes, 100GiB, ...; 0: 90% of what is available)",
     .commands = kAll, .ref = at<&R::memory, &MemoryConfig::host_mem>,
     .bytes = true, .max = kMaxBudget, .env = "SPILLWAY_HOST_MEM",
     .plan_default = "125GiB"},
    {.key = "memory.offload", .flag = "--offload",
     .help = "GPU: which layouts of the training state the plan may choose: auto (the fastest that fits), on (the "
             "masters' rest and the moments at home), off (everything on the device, nothing offloaded), stream "
             "(weights and gradient sums at home too)",
     .commands = kAll, .ref = at<&R::memory, &MemoryConfig::offload>},
    {.key = "memory.recompute", .flag = "--recompute",
     .help = "GPU: forward values remade in the backward pass (none, layers or selective), or auto (default): "
             "what the planner predicts fastest, policies and kinds of values alike (on the CPU: none)",
     .commands = kAll, .ref = at<&R::memory, &MemoryConfig::recompute>},
    {.key = "memory.bf16_moments", .flag = "--bf16-moments",
     .help = "GPU: AdamW moments in bf16 (half the moments' memory and optimizer traffic)", .commands = kAll,
     .ref = at<&R::memory, &MemoryConfig::bf16_moments>},
    // kernels
    {.key = "kernels.deterministic", .flag = "--deterministic", .negation = "--nondeterministic",
     .help = "GPU: the same bits run to run (--nondeterministic: cuDNN's faster atomic attention backward, which "
             "also needs no workspace of queries x keys)",
     .commands = kAll, .ref = at<&R::kernels, &KernelConfig::deterministic>},
    {.key = "kernels.own_gemm", .flag = "--own-gemm", .negation = "--cublaslt-only",
     .help = "GPU: spillway's Hopper GEMM with RoPE and SwiGLU fused in (--cublaslt-only: every matmul through "
             "cuBLASLt)",
     .commands = kSteps, .ref = at<&R::kernels, &KernelConfig::own_gemm>},
    {.key = "kernels.cuda_graph", .flag = "--cuda-graph", .negation = "--no-cuda-graph",
     .help = "GPU, where the step copies nothing: capture the step once, then replay it (--no-cuda-graph: launch "
             "every kernel every step)",
     .commands = kSteps, .ref = at<&R::kernels, &KernelConfig::cuda_graph>},
    {.key = "kernels.projections", .flag = "--projections",
     .help = "GPU: q|k|v and gate|up as one matmul each (fused), as the checkpoint stores them (separate), or auto "
             "(fused where everything stays on the device)",
     .commands = kAll, .ref = at<&R::kernels, &KernelConfig::projections>},
    {.key = "kernels.matmul_candidates", .flag = "--matmul-candidates",
     .help = "GPU: cuBLASLt candidates timed per matmul shape on first use (1: the heuristic's first)",
     .commands = kSteps, .ref = at<&R::kernels, &KernelConfig::matmul_candidates>, .min = 1},
    {.key = "kernels.loss_chunk_rows", .flag = "--loss-chunk-rows",
     .help = "GPU: rows of logits the model's head makes at a time (-1: the plan chooses, chunking where the "
             "logits would crowd the device; 0: all at once)",
     .commands = kAll, .ref = at<&R::kernels, &KernelConfig::loss_chunk_rows>, .min = -1},
    // parallel
    {.key = "parallel.dp", .flag = "--dp",
     .help = "data-parallel degree (0: every rank the other degrees leave); each rank trains on its share of an "
             "optimizer step's micro-batches",
     .commands = kSteps, .ref = at<&R::parallel, &ParallelConfig::dp>, .min = 0, .max = limits::kMaxRanks},
    {.key = "parallel.tp", .flag = "--tp",
     .help = "tensor-parallel degree: ranks that split each layer's matrices (q, k, v, gate, up by output features, "
             "o and down by input features, embedding and lm_head by vocabulary)",
     .commands = kAll, .ref = at<&R::parallel, &ParallelConfig::tp>, .min = 1, .max = limits::kMaxModelSplit},
    {.key = "parallel.sequence_parallel", .flag = "--sequence-parallel",
     .help = "with --tp: norms and residual adds split by tokens between the split regions (all-gather in, "
             "reduce-scatter out) instead of whole on every rank (all-reduce out)",
     .commands = kAll, .ref = at<&R::parallel, &ParallelConfig::sequence_parallel>},
    {.key = "parallel.pp", .flag = "--pp",
     .help = "pipeline-parallel degree: ranks that each hold a stage of the layers (balanced by the cost model), "
             "every micro-batch passing through them in turn; the CPU engine, so far (plan predicts it)",
     .commands = kAll, .ref = at<&R::parallel, &ParallelConfig::pp>, .min = 1, .max = limits::kMaxModelSplit},
    {.key = "parallel.virtual_stages", .flag = "--virtual-stages",
     .help = "with --pp: stages each rank holds (the layers cut into pp x this many stages, rank r holding stages "
             "r, r + pp, ...), run as interleaved 1F1B: a smaller pipeline bubble for more hidden states handed on",
     .commands = kAll, .ref = at<&R::parallel, &ParallelConfig::virtual_stages>, .min = 1,
     .max = limits::kMaxModelSplit},
    {.key = "parallel.cp", .flag = "--cp",
     .help = "context-parallel degree: ranks that each take a chunk of every sequence, attention reading every "
             "rank's keys and values; one sequence a micro-batch (--batch 1); on GPUs beside dp and tp, on the CPU "
             "engine beside any other degree",
     .commands = kAll,
     .ref = at<&R::parallel, &ParallelConfig::cp>, .min = 1, .max = limits::kMaxModelSplit},
    {.key = "parallel.nproc_per_node", .flag = "--nproc-per-node",
     .help = "start this many ranks on this host, one per device, when no launcher (torchrun, mpirun, srun) did",
     .commands = kSteps, .ref = at<&R::parallel, &ParallelConfig::nproc_per_node>, .min = 1, .max = limits::kMaxRanks},
    {.key = "parallel.timeout_s", .flag = "--rank-timeout",
     .help = "seconds a rank waits for the others to meet or to answer before it ends the run with an error",
     .commands = kSteps, .ref = at<&R::parallel, &ParallelConfig::timeout_s>, .min = 1},
    {.key = "parallel.shard", .flag = "--shard",
     .help = "data parallelism: none (every rank keeps the whole training state), optimizer (each rank keeps and "
             "updates 1/N of the masters and AdamW's moments; ZeRO-1), gradients (also 1/N of the gradient sums; "
             "ZeRO-2), weights (also 1/N of the bf16 weights, gathered layer by layer; ZeRO-3/FSDP), or auto (on "
             "GPUs, the least of these with which the whole state stays on the device; on the CPU, none)",
     .commands = kAll, .ref = at<&R::parallel, &ParallelConfig::shard>},
    // run
    {.key = "run.device", .flag = "--device", .help = "auto (the GPU when there is one), cpu or cuda",
     .commands = kSteps, .ref = at<&R::run, &RunPlace::device>},
    {.key = "run.out", .flag = "--out", .aliases = "-o",
     .help = "run folder: checkpoints, train_log.jsonl, loss.svg, run_config.toml",
     .commands = kTraining, .ref = at<&R::run, &RunPlace::out>, .finetune_default = "runs/finetune"},
    {.key = "run.resume", .flag = "--resume",
     .help = "continue the run in --out from its latest checkpoint, bit-identically", .commands = kTraining,
     .ref = at<&R::run, &RunPlace::resume>},
    {.key = "run.overwrite", .flag = "--overwrite",
     .help = "start over in an --out that holds a run, removing its checkpoints, logs and data first",
     .commands = kTraining, .ref = at<&R::run, &RunPlace::overwrite>},
    {.key = "run.threads", .flag = "--threads", .aliases = "-t", .help = "CPU threads (0: every core)",
     .commands = kTraining, .ref = at<&R::run, &RunPlace::threads>, .min = 0},
    {.key = "run.quiet", .flag = "--quiet", .help = "no progress output", .commands = kTraining,
     .ref = at<&R::run, &RunPlace::quiet>},
    // sample
    {.key = "sample.tokens", .flag = "--sample-tokens", .help = "tokens to generate at the end (0: none)",
     .commands = kTraining, .ref = at<&R::sample, &SampleConfig::tokens>, .min = 0, .max = limits::kMaxPositions},
    {.key = "sample.prompt", .flag = "--prompt", .aliases = "-p", .help = "prompt for the sample at the end",
     .commands = kTraining,
     .ref = at<&R::sample, &SampleConfig::prompt>},
    {.key = "sample.temperature", .flag = "--sample-temperature", .help = "temperature of the sample (0: greedy)",
     .commands = kTraining, .ref = at<&R::sample, &SampleConfig::temperature>},
    {.key = "sample.top_k", .flag = "--sample-top-k", .help = "sample among the k likeliest tokens (0: all)",
     .commands = kTraining, .ref = at<&R::sample, &SampleConfig::top_k>, .min = 0, .max = limits::kMaxVocab},
};

template <typename T>
constexpr bool kIsInteger = std::is_same_v<T, int*> || std::is_same_v<T, int64_t*> || std::is_same_v<T, uint64_t*>;

// The values an integer field's type holds (uint64_t: those a TOML or JSON
// integer holds too).
template <typename T>
bool fits(int64_t v) {
  if constexpr (std::is_same_v<T, uint64_t>) return v >= 0;
  else return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
}

std::string join(std::span<const std::string_view> names, std::string_view separator = ", ") {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += separator;
    out += n;
  }
  return out;
}

std::optional<size_t> enum_index(const EnumRef& e, std::string_view name) {
  for (size_t i = 0; i < e.names.size(); ++i) {
    if (e.names[i] == name) return i;
  }
  return std::nullopt;
}

}  // namespace

std::string_view section_of(std::string_view key) { return key.substr(0, key.find('.')); }
std::string_view name_of(std::string_view key) { return key.substr(key.find('.') + 1); }

std::span<const Field> run_config_fields() { return kFields; }

const Field* find_field(std::string_view key) {
  for (const Field& f : kFields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

bool is_switch(const Field& field) {
  RunConfig scratch;
  return std::holds_alternative<bool*>(field.ref(scratch));
}

std::string negation_flag(const Field& field) {
  return field.negation.empty() ? "--no-" + std::string(field.flag.substr(2)) : std::string(field.negation);
}

std::string_view command_default(const Field& field, Command command) {
  switch (command) {
    case Command::finetune: return field.finetune_default;
    case Command::bench: return field.bench_default;
    case Command::plan: return field.plan_default;
    case Command::train: break;
  }
  return {};
}

namespace {

// How errors and --help speak of a field's values.
struct TypeWords {
  std::string expected;   // "a whole number"
  std::string type_name;  // "INT"
};

TypeWords type_words(const Field& field) {
  RunConfig scratch;
  return std::visit(
      [&](auto ref) -> TypeWords {
        using T = decltype(ref);
        if constexpr (std::is_same_v<T, EnumRef>) return {"one of " + join(ref.names), join(ref.names, "|")};
        else if constexpr (std::is_same_v<T, bool*>) return {"true or false", ""};
        else if constexpr (std::is_same_v<T, double*>) return {"a number", "FLOAT"};
        else if constexpr (std::is_same_v<T, std::string*>) return {"text", "TEXT"};
        else if constexpr (std::is_same_v<T, std::vector<std::string>*>) return {"a list of text", "PATH"};
        else if (field.bytes) return {"a byte size such as 24GiB, 512MB or 4096", "BYTES"};
        else return {"a whole number", "INT"};
      },
      field.ref(scratch));
}

}  // namespace

std::string expected_text(const Field& field) { return type_words(field).expected; }
std::string value_type_name(const Field& field) { return type_words(field).type_name; }

void set_field_text(const Field& field, RunConfig& config, std::span<const std::string> texts, std::string_view what) {
  SPW_CHECK(!texts.empty(), what, "needs a value");
  const std::string& text = texts.back();
  const auto not_a = [&] { return Error(what, "'" + text + "' is not " + expected_text(field)); };
  std::visit(
      [&](auto ref) {
        using T = decltype(ref);
        if constexpr (std::is_same_v<T, EnumRef>) {
          const std::optional<size_t> i = enum_index(ref, text);
          if (!i) throw Error(what, "unknown " + std::string(ref.noun) + " '" + text + "'; one of " + join(ref.names));
          ref.set(ref.target, *i);
        } else if constexpr (std::is_same_v<T, bool*>) {
          if (text != "true" && text != "false") throw not_a();
          *ref = text == "true";
        } else if constexpr (std::is_same_v<T, double*>) {
          double v = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) throw not_a();
          *ref = v;
        } else if constexpr (std::is_same_v<T, std::string*>) {
          *ref = text;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>*>) {
          ref->assign(texts.begin(), texts.end());
        } else {
          using V = std::remove_pointer_t<T>;
          if (field.bytes) {
            *ref = parse_bytes(text, what);
            return;
          }
          int64_t v = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
          if (ec != std::errc() || end != text.data() + text.size()) throw not_a();
          SPW_CHECK(fits<V>(v), what, "'", text, "' is out of range");
          *ref = static_cast<V>(v);
        }
      },
      field.ref(config));
}

void set_field_json(const Field& field, RunConfig& config, const json& value, std::string_view file) {
  const auto wrong = [&](const std::string& expectation) {
    return Error(file, std::string(field.key) + " is " + value.dump() + "; " + expectation);
  };
  const auto expected = [&] { return wrong("expected " + expected_text(field)); };
  std::visit(
      [&](auto ref) {
        using T = decltype(ref);
        if constexpr (std::is_same_v<T, EnumRef>) {
          const std::optional<size_t> i = value.is_string() ? enum_index(ref, value.get<std::string>()) : std::nullopt;
          if (!i) throw wrong("one of " + join(ref.names));
          ref.set(ref.target, *i);
        } else if constexpr (std::is_same_v<T, bool*>) {
          if (!value.is_boolean()) throw expected();
          *ref = value.get<bool>();
        } else if constexpr (std::is_same_v<T, double*>) {
          if (!value.is_number() || !std::isfinite(value.get<double>())) throw expected();
          *ref = value.get<double>();
        } else if constexpr (std::is_same_v<T, std::string*>) {
          if (!value.is_string()) throw expected();
          *ref = value.get<std::string>();
        } else if constexpr (std::is_same_v<T, std::vector<std::string>*>) {
          // One path may be given bare.
          const json list = value.is_array() ? value : json::array({value});
          std::vector<std::string> texts;
          for (const json& v : list) {
            if (!v.is_string()) throw expected();
            texts.push_back(v.get<std::string>());
          }
          *ref = std::move(texts);
        } else {
          using V = std::remove_pointer_t<T>;
          if (field.bytes && value.is_string()) {
            try {
              *ref = parse_bytes(value.get<std::string>(), field.key);
            } catch (const Error& e) {
              throw wrong(e.problem());
            }
            return;
          }
          const bool too_big = value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{INT64_MAX};
          if (!value.is_number_integer() || too_big || !fits<V>(value.get<int64_t>())) throw expected();
          *ref = static_cast<V>(value.get<int64_t>());
        }
      },
      field.ref(config));
}

json field_json(const Field& field, const RunConfig& config) {
  // The reference is only read from.
  return std::visit(
      [&](auto ref) -> json {
        using T = decltype(ref);
        if constexpr (std::is_same_v<T, EnumRef>) {
          return std::string(ref.names[ref.get(ref.target)]);
        } else if constexpr (std::is_same_v<T, uint64_t*>) {
          // A budget of 0 (the backend's default) reads better as a number.
          return field.bytes && *ref != 0 ? json(format_bytes_exact(*ref)) : json(*ref);
        } else {
          return *ref;
        }
      },
      field.ref(const_cast<RunConfig&>(config)));
}

std::string field_text(const Field& field, const RunConfig& config) {
  const json j = field_json(field, config);
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    std::string out;
    for (const json& v : j) {
      if (!out.empty()) out += " ";
      out += v.get<std::string>();
    }
    return out;
  }
  return j.dump();
}

void check_field_range(const Field& field, const RunConfig& config, std::string_view what, bool in_file) {
  const auto show = [&](auto v) {
    return field.bytes ? format_bytes_exact(static_cast<uint64_t>(v)) : std::to_string(v);
  };
  std::visit(
      [&](auto ref) {
        if constexpr (kIsInteger<decltype(ref)>) {
          const auto v = *ref;
          // uint64 values above int64's range compare as what they are.
          const bool below = std::cmp_less(v, field.min), above = std::cmp_greater(v, field.max);
          if (!below && !above) return;
          const std::string bound =
              below ? "must be at least " + show(field.min) : "must be at most " + show(field.max);
          if (in_file) throw Error(what, detail::concat(field.key, " is ", show(v), "; ", bound));
          throw Error(what, detail::concat(bound, ", got ", show(v)));
        }
      },
      field.ref(const_cast<RunConfig&>(config)));
}

nlohmann::ordered_json run_config_json(const RunConfig& config, Command command) {
  nlohmann::ordered_json tree = nlohmann::ordered_json::object();
  for (const Field& f : kFields) {
    if (uses(f, command)) tree[std::string(section_of(f.key))][std::string(name_of(f.key))] = field_json(f, config);
  }
  return tree;
}

void apply_run_config_json(RunConfig& config, Command command, const json& tree, std::string_view file,
                           const std::function<void(const Field&)>& set_key) {
  std::vector<std::string_view> sections;
  for (const Field& f : kFields) {
    if (sections.empty() || sections.back() != section_of(f.key)) sections.push_back(section_of(f.key));
  }
  SPW_CHECK(tree.is_object(), file, "expected a table of sections (", join(sections), ")");
  for (const auto& [section, settings] : tree.items()) {
    SPW_CHECK(std::find(sections.begin(), sections.end(), section) != sections.end(), file, "unknown section ",
              section, " (sections: ", join(sections), ")");
    SPW_CHECK(settings.is_object(), file, section, " is ", settings.dump(), "; expected a table of settings");
    for (const auto& [name, value] : settings.items()) {
      const std::string key = section + "." + name;
      const Field* f = find_field(key);
      if (!f) {
        std::vector<std::string_view> names;
        for (const Field& g : kFields) {
          if (section_of(g.key) == section) names.push_back(name_of(g.key));
        }
        throw Error(file, "unknown key " + key + " (" + section + " has " + join(names) + ")");
      }
      if (!uses(*f, command)) continue;
      set_field_json(*f, config, value, file);
      if (set_key) set_key(*f);
    }
  }
}

json checkpointed_json(const RunConfig& config) {
  json tree = json::object();
  for (const Field& f : kFields) {
    if (f.checkpointed) tree[std::string(section_of(f.key))][std::string(name_of(f.key))] = field_json(f, config);
  }
  return tree;
}

void restore_checkpointed(RunConfig& config, const json& saved, std::string_view source) {
  SPW_CHECK(saved.is_object(), source, "options are ", saved.dump(), "; expected a table of sections");
  const RunConfig initial;
  for (const Field& f : kFields) {
    if (!f.checkpointed) continue;
    const std::string section(section_of(f.key)), name(name_of(f.key));
    if (saved.contains(section) && saved[section].is_object() && saved[section].contains(name)) {
      set_field_json(f, config, saved[section][name], source);
    } else if (saved.contains(name)) {
      set_field_json(f, config, saved[name], source);
    } else {
      set_field_json(f, config, field_json(f, initial), source);
    }
    // A resumed run trusts these as it would a file's: within the limits.
    check_field_range(f, config, source, true);
  }
}

}  // namespace spillway::train
