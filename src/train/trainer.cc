#include "train/trainer.h"

#include <omp.h>
#include <signal.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <tuple>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/host_memory.h"
#include "base/config_file.h"
#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/llama_weights_io.h"
#include "model/lora_io.h"
#include "model/tokenizer.h"
#include "model/tokenizer_vocab.h"
#include "train/batch_sampler.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/instruction_batches.h"
#include "train/instruction_data.h"
#include "train/instruction_packing.h"
#include "train/loss_plot.h"
#include "train/loss_weights.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/engine.h"
#include "train/run_config_fields.h"
#include "train/start_weights.h"
#include "train/trainer_state.h"

namespace spillway::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Resolving checked each field alone (run_config.h); what the loop needs of
// them together is checked here, for callers that build a RunConfig in code too.
void check_options(const RunConfig& o, Command command) {
  check_run_config(o, command);
  const OptimizerConfig& opt = o.optimizer;
  SPW_CHECK(opt.lr > 0 && opt.min_lr >= 0 && opt.min_lr <= opt.lr, "--lr",
            "need lr > 0 and 0 <= min-lr <= lr, got ", opt.lr, " and ", opt.min_lr);
}

// Mean loss over the first `max_batches` validation batches that
// `next_batch` hands out, weighted by counted targets (each batch's loss is
// the mean over its own); a short last batch is padded with rows whose
// targets do not count. Data-parallel ranks take turns at the batches and
// sum what they saw; where an evaluation is a collective of the engine's
// (its weights gathered from every rank), each rank makes as many calls,
// those short of batches evaluating rows that count nothing.
double evaluate(Engine& engine, int64_t batch, int64_t seq, const std::function<bool(TokenBatch&)>& next_batch,
                int64_t max_batches, const DataParallelRun& ranks) {
  TokenBatch b;
  double sums[2] = {0, 0};  // loss over counted targets, and their count
  std::vector<int32_t> inputs(static_cast<size_t>(batch * seq));
  std::vector<int32_t> targets(inputs.size());
  const bool together = engine.evaluation_is_collective();
  int64_t seen = 0, calls = 0;
  engine.begin_evaluation();
  for (int64_t i = 0; i < max_batches && next_batch(b); ++i) {
    ++seen;
    if (i % ranks.size() != ranks.rank()) continue;
    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), -100);
    std::copy(b.inputs.begin(), b.inputs.end(), inputs.begin());
    std::copy(b.targets.begin(), b.targets.end(), targets.begin());
    const auto n = static_cast<double>(counted_targets(b.targets));
    if (n == 0 && !together) continue;  // a batch that counts nothing has loss 0 and no weight
    const double loss = engine.eval_loss(inputs, targets);
    ++calls;
    if (n == 0) continue;
    sums[0] += loss * n;
    sums[1] += n;
  }
  if (together) {
    std::fill(inputs.begin(), inputs.end(), 0);
    std::fill(targets.begin(), targets.end(), -100);
    for (const int64_t rounds = (seen + ranks.size() - 1) / ranks.size(); calls < rounds; ++calls) {
      engine.eval_loss(inputs, targets);
    }
  }
  engine.sum_over_ranks(sums);
  return sums[1] > 0 ? sums[0] / sums[1] : NAN;
}

// What fills the rest of an instruction example's row (its targets never
// count): the tokenizer's padding token, or its end of text.
int32_t pad_id(const Tokenizer& t) { return t.roles().pad.value_or(t.eos_id()); }

// The training batches: windows of a token file, or instruction examples
// one a row or packed.
class TrainingBatches {
 public:
  TrainingBatches(const Dataset& data, const InstructionSet* chats, bool packing, int64_t batch, int64_t seq,
                  uint64_t seed) {
    if (chats && packing) {
      packed_.emplace(chats->train, batch, seq, pad_id(*data.tokenizer), seed);
    } else if (chats) {
      examples_.emplace(chats->train, batch, seq, pad_id(*data.tokenizer), seed);
    } else {
      windows_.emplace(*data.train, batch, seq, seed);
    }
  }
  bool packed() const { return packed_.has_value(); }
  // positions and doc_starts: filled for packed rows, else left alone.
  void next(std::span<int32_t> inputs, std::span<int32_t> targets, std::span<int32_t> positions,
            std::span<int32_t> doc_starts) {
    if (packed_) return packed_->next(inputs, targets, positions, doc_starts);
    if (examples_) return examples_->next(inputs, targets);
    windows_->next(inputs, targets);
  }
  SamplerState state() const {
    return packed_ ? packed_->state() : examples_ ? examples_->state() : windows_->state();
  }
  void restore(const SamplerState& s) {
    if (packed_) return packed_->restore(s);
    if (examples_) return examples_->restore(s);
    windows_->restore(s);
  }
  double epochs() const { return packed_ ? packed_->epochs() : examples_ ? examples_->epochs() : windows_->epochs(); }

 private:
  std::optional<BatchSampler> windows_;
  std::optional<InstructionSampler> examples_;
  std::optional<PackingSampler> packed_;
};

// A packed sampler's state says nothing of how many rows it drew
// (train/instruction_packing.h): the walk of `steps` optimizer steps is
// replayed from the seed, and the saved state must be where it ends.
void check_packed_state(const SamplerState& saved, const std::vector<InstructionExample>& examples,
                        const ScheduleConfig& s, int32_t pad, int64_t steps, const std::string& path) {
  PackingSampler replay(examples, s.batch, s.seq, pad, s.seed);
  replay.skip(steps * s.grad_accum);
  const SamplerState want = replay.state();
  SPW_CHECK(saved.draws == want.draws && saved.tokens_consumed == want.tokens_consumed, path, "sampler.draws ",
            saved.draws, " and sampler.tokens_consumed ", saved.tokens_consumed, " are not where ", steps,
            " steps of packed rows end (", want.draws, " examples, ", want.tokens_consumed,
            " counted targets): the state belongs to other data or was altered");
}

// A resumed LoRA run's adapters must be the ones its options describe.
void check_same_lora(const model::LoraConfig& saved, const model::LoraConfig& run, const std::string& path) {
  auto described = [](const model::LoraConfig& l) {
    std::string text = "rank " + std::to_string(l.rank) + ", alpha " + std::to_string(l.alpha) + ", dropout " +
                       std::to_string(l.dropout) + " on";
    for (const std::string& t : l.targets) text += " " + t;
    return text;
  };
  SPW_CHECK(saved.rank == run.rank && saved.alpha == run.alpha && saved.dropout == run.dropout &&
                saved.targets == run.targets,
            path, "holds an ",
            "adapter of ", described(saved), " but the run's options say ", described(run),
            "; the checkpoint belongs to another run");
}

// Entropy (nats per token) of the unigram distribution of the targets the
// training examples count: the loss of a model that knows only their
// frequencies.
double counted_unigram_entropy(const std::vector<InstructionExample>& examples) {
  std::vector<double> counts;
  double total = 0;
  for (const InstructionExample& e : examples) {
    for (size_t i = 1; i < e.ids.size(); ++i) {
      if (!e.trained[i]) continue;
      const auto id = static_cast<size_t>(e.ids[i]);
      if (counts.size() <= id) counts.resize(id + 1, 0);
      counts[id] += 1;
      total += 1;
    }
  }
  double h = 0;
  for (double c : counts) {
    if (c > 0) h -= c / total * std::log(c / total);
  }
  return h;
}

// The signal that asked the run to stop, or 0. One-shot handlers: a second
// signal takes its default action and ends the process at once.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) { g_stop_signal.store(signal); }

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal.store(0);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  int received() const { return g_stop_signal.load(); }

 private:
  struct sigaction previous_int_ {}, previous_term_ {};
};

// What a run folder holds that a new run in it would replace. The
// checkpoints go first, each in one step, so a kill midway leaves none
// half-deleted.
void clear_run_folder(const fs::path& run) {
  remove_checkpoints(run.string());
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "data" || name == "train_log.jsonl" || name == "loss.svg" || name == "run_config.toml") {
      fs::remove_all(entry.path());
    }
  }
}

// Only the lead rank of a data-parallel run writes one.
class JsonLog {
 public:
  JsonLog(const fs::path& path, bool lead) {
    if (!lead) return;
    out_.open(path, std::ios::app);
    SPW_CHECK(out_.good(), path.string(), "cannot open the training log for writing");
  }
  void write(const json& line) {
    if (!out_.is_open()) return;
    // A sample of a barely trained model may cut a character's bytes
    // apart: such bytes are written as U+FFFD rather than ending the run.
    out_ << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

// The engine's master weights into `weights` (whose arrays it may have let
// go of); a rank that does not `keep` them reads through one tensor's room.
void read_masters(Engine& engine, model::LlamaWeights& weights, bool keep) {
  std::vector<float> scratch;
  for (size_t i = 0; i < weights.tensors().size(); ++i) {
    model::NamedTensor& t = weights.tensors()[i];
    std::vector<float>& to = keep ? t.data : scratch;
    to.resize(static_cast<size_t>(t.shape.numel()));
    engine.read_state(StatePart::master, i, to);
  }
}

}  // namespace

void check_run_folder(const RunConfig& o) {
  SPW_CHECK(!(o.run.resume && o.run.overwrite), "--overwrite",
            "and --resume exclude each other: --resume continues the run in ", o.run.out,
            ", --overwrite removes it and starts over");
  if (o.run.resume) {
    const std::string ckpt = resolve_checkpoint(o.run.out);
    SPW_CHECK(ckpt != o.run.out, o.run.out, "has no checkpoint to resume from (no 'latest' file)");
    const std::string path = ckpt + "/trainer_state.json";
    const TrainerState state = read_trainer_state(load_trainer_state(ckpt), path);
    RunConfig resumed = o;
    restore_checkpointed(resumed, state.options, path);
    const int64_t step = state.step;
    const ScheduleConfig& s = resumed.schedule;
    SPW_CHECK(step < s.steps, o.run.out, "the run is finished (step ", step, " of ", s.steps,
              "); nothing to resume. Fine-tune from it with `spillway finetune --model ", o.run.out,
              "`, or start a new run");
    SPW_CHECK(s.stop_after < 0 || s.stop_after > step, "--stop-after", s.stop_after,
              " is not past the checkpoint's step ", step);
    return;
  }
  if (!is_run_folder(o.run.out)) return;
  SPW_CHECK(o.run.overwrite, o.run.out,
            "holds a run already; continue it with --resume, or start over with --overwrite (which removes its "
            "checkpoints)");
}

TrainResult train_model(RunConfig o, const SampleText& sample_text, const DataParallelRun& ranks,
                        const StepHook& on_step) {
  // The lead rank prints, logs and checkpoints; every rank trains.
  const bool lead = ranks.world_rank == 0;
  // The degrees asked for are the groups this process's ranks met in.
  for (const auto& [flag, want, group] : {std::tuple{"--tp", o.parallel.tp, ranks.tensor_parallel},
                                          std::tuple{"--pp", o.parallel.pp, ranks.pipeline_parallel},
                                          std::tuple{"--cp", o.parallel.cp, ranks.context_parallel}}) {
    const int have = group ? group->size() : 1;
    SPW_CHECK(want == have, flag, want, " asks for ", want, " ranks in each group; this run has ", have,
              " (start the ranks with `spillway train --nproc-per-node N`, torchrun, mpirun or srun)");
  }
  if (!lead) o.run.quiet = true;
  const Command command = o.model.init_from.empty() ? Command::train : Command::finetune;
  const fs::path run(o.run.out);
  model::LlamaWeights weights;
  AdamW optimizer;
  std::unique_ptr<Tokenizer> start_tokenizer;
  TrainerState state;
  std::optional<LoraState> lora;  // with --lora-rank: the adapters that train, the weights frozen
  std::optional<model::QuantizedBase> quantized;  // with --lora-base nf4: the base, quantized as it came
  auto start_from = [&](StartWeights start) {
    weights = std::move(start.weights);
    quantized = std::move(start.quantized);
  };
  // A setting a configuration may hold, but a run without LoRA cannot follow.
  SPW_CHECK(o.lora.base == model::LoraBase::weights || o.lora.rank > 0, "--lora-base", enum_name(o.lora.base),
            " keeps LoRA's frozen base; it needs --lora-rank");

  check_run_folder(o);
  if (o.run.resume) {
    const std::string ckpt = resolve_checkpoint(o.run.out);  // check_run_folder found it, not finished
    const std::string path = ckpt + "/trainer_state.json";
    state = read_trainer_state(load_trainer_state(ckpt), path);
    restore_checkpointed(o, state.options, path);
    start_from(load_start_weights(ckpt, o, false, ranks.ranks_on_host));
    if (o.lora.rank > 0) {
      lora = load_lora_checkpoint(ckpt, weights.config(), optimizer);
      check_same_lora(lora->adapters.lora(), lora_config(o), ckpt + "/adapter_config.json");
    } else {
      optimizer = load_optimizer(ckpt, weights.config());
    }
    const SampledRows sampled = !uses_instruction_data(o.data) ? SampledRows::windows
                                : o.data.packing                ? SampledRows::packed
                                                                : SampledRows::examples;
    check_trainer_state(state, o.schedule, optimizer.steps_taken, sampled, path);
    start_tokenizer = load_tokenizer(ckpt);
    model::check_tokenizer_fits(*start_tokenizer, weights.config(), ckpt);
  } else if (!o.model.init_from.empty()) {
    const std::string ckpt = resolve_checkpoint(o.model.init_from);
    // A LoRA run's checkpoint starts the next run as its tuned model.
    start_from(load_start_weights(ckpt, o, /*merge_adapter=*/true, ranks.ranks_on_host));
    start_tokenizer = load_tokenizer(ckpt);
    model::check_tokenizer_fits(*start_tokenizer, weights.config(), ckpt);
  }
  check_options(o, command);
  if (o.run.threads > 0) omp_set_num_threads(static_cast<int>(o.run.threads));
  const ScheduleConfig& s = o.schedule;
  // The config is checked before any data work, so a typo fails at once.
  std::optional<model::LlamaConfig> fresh_config;
  if (weights.tensors().empty()) fresh_config = model::resolve_config(o.model.config);
  if (lead && o.run.overwrite && fs::is_directory(run)) clear_run_folder(run);
  // What a killed run left (half-written checkpoints, temporaries) goes
  // before this run writes anything of its own.
  if (lead) remove_stale_temporaries(o.run.out);

  // The lead rank prepares the data, a whole corpus perhaps; the others
  // then find it prepared.
  constexpr std::chrono::hours kDataPreparationWait{24};
  if (!lead) ranks.barrier(kDataPreparationWait);
  Dataset data;
  std::optional<InstructionSet> chats;  // instruction data: read by every rank, nothing written
  if (uses_instruction_data(o.data)) {
    SPW_CHECK(start_tokenizer != nullptr, "--data",
              "instruction data fine-tunes a model through its chat template: `spillway finetune --model DIR` (the "
              "model's tokenizer renders the conversations)");
    chats = prepare_instruction_set(o.data, *start_tokenizer);
    data.tokenizer = std::move(start_tokenizer);
    data.unigram_entropy = counted_unigram_entropy(chats->train);
    if (!o.run.quiet) {
      std::printf("instruction data: %zu training and %zu validation conversations; the loss counts the "
                  "assistant's tokens%s\n", chats->train.size(), chats->validation.size(),
                  o.data.packing ? "; training rows packed with whole conversations" : "");
    }
  } else {
    SPW_CHECK(!o.data.packing, "--packing", "packs instruction examples into rows; the data here is text, whose "
              "rows are windows of the token stream already");
    data = prepare_dataset(o.data, o.run.out, start_tokenizer.get(), o.run.quiet);
  }
  if (lead && ranks.world_size > 1) ranks.barrier(kDataPreparationWait);
  SPW_CHECK(s.grad_accum % ranks.size() == 0, "--grad-accum", "the ", s.grad_accum,
            " micro-batches of an optimizer step do not split evenly over ", ranks.size(), " data-parallel ranks");
  const int64_t rank_micro_batches = s.grad_accum / ranks.size();
  if (fresh_config) {
    // A config.json's vocabulary is kept (its rows may outnumber the
    // tokenizer's tokens); a preset's follows the tokenizer.
    if (model::is_config_file(o.model.config) && fresh_config->vocab_size > 0) {
      SPW_CHECK(data.tokenizer->vocab_size() <= fresh_config->vocab_size, o.model.config, "vocab_size is ",
                fresh_config->vocab_size, " but the tokenizer has ", data.tokenizer->vocab_size(),
                " tokens (--vocab sets the size of a tokenizer trained here)");
    } else {
      fresh_config->vocab_size = data.tokenizer->vocab_size();
    }
    // A new model's context is at least what it trains on.
    fresh_config->max_position_embeddings = std::max(fresh_config->max_position_embeddings, s.seq);
    start_from(random_start_weights(*fresh_config, o, s.seed, ranks.ranks_on_host));
  }
  const model::LlamaConfig& config = weights.config();
  SPW_CHECK(s.seq <= config.max_position_embeddings, "--seq", s.seq, " is past the model's context of ",
            config.max_position_embeddings, " tokens (max_position_embeddings in its config.json); train on ",
            "sequences at most that long, or raise it there to extend the context on purpose");
  if (chats) {
    SPW_CHECK(config.vocab_size >= chats->vocab_needed, o.data.paths.front(), "token ids reach ",
              chats->vocab_needed, " but the model's vocabulary has ", config.vocab_size);
  } else {
    SPW_CHECK(config.vocab_size >= data.train->vocab_size(), data.train->path(), "token ids reach ",
              data.train->vocab_size(), " but the model's vocabulary has ", config.vocab_size);
  }
  // LoRA trains adapters with moments of their own, the weights none. A
  // fresh run brings no moments: each engine starts its own at zero.
  if (o.lora.rank > 0 && !lora) lora = LoraState::fresh(config, lora_config(o), s.seed);
  optimizer.weight_decay = o.optimizer.weight_decay;
  optimizer.beta1 = o.optimizer.beta1;
  optimizer.beta2 = o.optimizer.beta2;
  optimizer.eps = o.optimizer.eps;

  TrainingBatches sampler(data, chats ? &*chats : nullptr, o.data.packing, s.batch, s.seq, s.seed);
  if (o.run.resume) {
    if (sampler.packed()) {
      check_packed_state(state.sampler, chats->train, s, pad_id(*data.tokenizer), state.step,
                         resolve_checkpoint(o.run.out) + "/trainer_state.json");
    }
    sampler.restore(state.sampler);
  }
  LossCurves curves = state.curves;
  char title[96];
  std::snprintf(title, sizeof title, "spillway: %.1fM-parameter LLaMA", static_cast<double>(model::parameter_count(config)) / 1e6);
  curves.title = title;

  const EngineOptions engine_options{.batch = s.batch,
                                     .seq = s.seq,
                                     .micro_batches = rank_micro_batches,
                                     .grad_clip = o.optimizer.grad_clip,
                                     .device = o.run.device,
                                     .memory = o.memory,
                                     .kernels = o.kernels,
                                     .data_parallel = ranks.comm,
                                     .shard = o.parallel.shard,
                                     .tensor_parallel = ranks.tensor_parallel,
                                     .sequence_parallel = o.parallel.sequence_parallel,
                                     .pipeline_parallel = ranks.pipeline_parallel,
                                     .virtual_stages = static_cast<int>(o.parallel.virtual_stages),
                                     .context_parallel = ranks.context_parallel,
                                     .replicas = ranks.replicas,
                                     .gpu_ordinal = ranks.gpu_ordinal,
                                     .ranks_on_host = ranks.ranks_on_host,
                                     .weighted_loss = chats.has_value(),
                                     .documents = sampler.packed(),
                                     .lora = lora ? &*lora : nullptr,
                                     .lora_base = o.lora.base,
                                     .lora_quantized = quantized ? &*quantized : nullptr,
                                     .seed = s.seed};
  std::unique_ptr<Engine> engine = make_engine(weights, optimizer, engine_options);
  const LrSchedule schedule{o.optimizer.lr, o.optimizer.min_lr, o.optimizer.warmup, s.steps};
  const int64_t end_step = s.stop_after >= 0 ? std::min(s.steps, s.stop_after) : s.steps;
  const int64_t tokens_per_step = s.batch * s.seq * s.grad_accum;

  fs::create_directories(run);
  if (lead) write_text_file_atomically(
      (run / "run_config.toml").string(),
      settings_toml(run_config_json(o, command),
                    "The configuration this run resolved (docs/run_config.md); `spillway " +
                        std::string(command_name(command)) + " " + (run / "run_config.toml").string() +
                        "` reads it back."));
  const int64_t start_step = state.step;
  int64_t skipped_steps = state.skipped_steps, skipped_in_a_row = 0;
  JsonLog log(run / "train_log.jsonl", lead);
  Progress progress(s.steps, o.run.quiet ? nullptr : stdout);
  if (!o.run.quiet) {
    std::printf("device: %s\n", engine->description().c_str());
    std::printf("model: %s parameters (%lld layers, width %lld, vocab %lld); %lld tokens per step; "
                "unigram entropy of the data %.3f nats\n",
                std::to_string(model::parameter_count(config)).c_str(), static_cast<long long>(config.num_hidden_layers),
                static_cast<long long>(config.hidden_size), static_cast<long long>(config.vocab_size),
                static_cast<long long>(tokens_per_step), data.unigram_entropy);
  }
  log.write({{"event", "start"}, {"step", start_step}, {"parameters", model::parameter_count(config)},
             {"options", checkpointed_json(o)}, {"unigram_entropy", data.unigram_entropy}});

  // Checkpoints read the state from the engine tensor by tensor.
  CheckpointState engine_state;
  engine_state.config = config;
  engine_state.read = [&](StatePart part, size_t i, std::span<float> out) { engine->read_state(part, i, out); };
  engine_state.lora = lora ? &*lora : nullptr;
  engine_state.base_model = o.model.init_from;
  auto save = [&](int64_t steps_done) {
    engine_state.optimizer_steps = optimizer.steps_taken;
    // A checkpoint writes the adapters from the host: the GPU's come back.
    if (lora) engine->sync_to_host();
    if (!lead) {
      if (engine->reads_are_collective()) walk_checkpoint_reads(engine_state);
      return std::string();
    }
    TrainerState st;
    st.skipped_steps = skipped_steps;
    st.sampler = sampler.state();
    st.curves = curves;
    st.options = checkpointed_json(o);
    std::string dir = save_checkpoint(o.run.out, steps_done, engine_state, *data.tokenizer,
                                      trainer_state_json(st), s.keep_checkpoints);
    log.write({{"event", "checkpoint"}, {"step", steps_done}, {"path", dir}});
    return dir;
  };

  TrainResult result;
  result.unigram_entropy = data.unigram_entropy;
  const bool validates = chats ? !chats->validation.empty() : data.validation != nullptr;
  result.validation = validates;
  result.validation_loss = NAN;
  int64_t steps_done = start_step;
  StopSignals signals;
  const size_t micro_tokens = static_cast<size_t>(s.batch * s.seq);
  std::vector<int32_t> inputs(micro_tokens * static_cast<size_t>(s.grad_accum)), targets(inputs.size());
  // Packed rows' positions and document starts, laid out as the inputs.
  std::vector<int32_t> positions(sampler.packed() ? inputs.size() : 0), doc_starts(positions.size());
  auto micro_batch = [&](std::vector<int32_t>& v, int64_t micro) {
    return v.empty() ? std::span<int32_t>() : std::span<int32_t>(v).subspan(micro * micro_tokens, micro_tokens);
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = start_step; step < end_step; ++step) {
    for (int64_t micro = 0; micro < s.grad_accum; ++micro) {
      sampler.next(micro_batch(inputs, micro), micro_batch(targets, micro), micro_batch(positions, micro),
                   micro_batch(doc_starts, micro));
    }
    const double lr = schedule.at(step);
    // The step's micro-batches are drawn alike on every rank: this rank
    // trains on its share.
    const size_t share = micro_tokens * static_cast<size_t>(rank_micro_batches);
    const size_t first = share * static_cast<size_t>(ranks.rank());
    const PackedDocuments documents =
        PackedDocuments{positions, doc_starts}.subspan(first, share);
    const StepStats stats = engine->train_step(std::span<const int32_t>(inputs).subspan(first, share),
                                               std::span<const int32_t>(targets).subspan(first, share), documents,
                                               rank_micro_batches, lr);
    const double loss = stats.loss, norm = stats.grad_norm;
    progress.step(step, loss, lr, tokens_per_step);
    // A non-finite loss or norm (nlohmann writes them as null) left the
    // weights and moments as they were; the data moves on.
    const json record = {{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", norm},
                         {"tokens", (step + 1) * tokens_per_step}, {"epoch", sampler.epochs()},
                         {"tok_per_s", progress.tokens_per_second()},
                         {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                         {"updated", stats.updated}};
    log.write(record);
    const bool caller_stops = lead && on_step && !on_step(record);
    steps_done = step + 1;
    if (stats.updated) {
      skipped_in_a_row = 0;
      curves.train.emplace_back(static_cast<double>(step + 1), loss);
      result.train_loss = loss;
    } else {
      ++skipped_steps;
      ++skipped_in_a_row;
      char line[160];
      std::snprintf(line, sizeof line, "step %lld: loss %g, gradient norm %g: update skipped (%lld in a row)",
                    static_cast<long long>(step + 1), loss, norm, static_cast<long long>(skipped_in_a_row));
      progress.note(line);
      log.write({{"event", "skipped"}, {"step", step + 1}, {"loss", loss}, {"grad_norm", norm}});
      SPW_CHECK(skipped_in_a_row < s.max_skipped_steps, "training", "steps ", step + 2 - skipped_in_a_row, " to ",
                step + 1, " all had a non-finite loss or gradient norm, ", s.max_skipped_steps,
                " in a row (--max-skipped-steps); the run stops, its last checkpoint untouched (try a lower --lr, or "
                "check the data and the weights)");
    }
    const bool last = step + 1 == end_step;
    if (validates && ((s.eval_every > 0 && (step + 1) % s.eval_every == 0) || last)) {
      double val = 0;
      if (chats) {
        InstructionBatches batches(chats->validation, s.batch, s.seq, pad_id(*data.tokenizer));
        val = evaluate(*engine, s.batch, s.seq, [&](TokenBatch& b) { return batches.next(b); }, s.eval_batches, ranks);
      } else {
        SequentialBatches batches(*data.validation, s.batch, s.seq);
        val = evaluate(*engine, s.batch, s.seq, [&](TokenBatch& b) { return batches.next(b); }, s.eval_batches, ranks);
      }
      if (std::isfinite(val)) curves.validation.emplace_back(static_cast<double>(step + 1), val);
      result.validation_loss = val;
      char line[160];
      std::snprintf(line, sizeof line, "step %lld: validation loss %.4f (train %.4f, epoch %.2f)",
                    static_cast<long long>(step + 1), val, loss, sampler.epochs());
      progress.note(line);
      log.write({{"event", "eval"}, {"step", step + 1}, {"val_loss", val}});
    }
    // Every rank stops at the same step, whichever of them got the signal
    // (a terminal's Ctrl-C reaches them all, a kill may reach one).
    const int own = signals.received();
    std::array<double, 3> stop = {own == SIGINT ? 1.0 : 0.0, own == SIGTERM ? 1.0 : 0.0, caller_stops ? 1.0 : 0.0};
    if (ranks.world_size > 1) engine->sum_over_world(stop);
    const bool stopping = stop[0] > 0 || stop[1] > 0 || stop[2] > 0;
    if ((s.checkpoint_every > 0 && (step + 1) % s.checkpoint_every == 0) || last || stopping) {
      result.checkpoint = save(step + 1);
    }
    if (stopping && !last) {
      if (stop[0] > 0 || stop[1] > 0) {
        result.stop_signal = own != 0 ? own : stop[0] > 0 ? SIGINT : SIGTERM;
        log.write({{"event", "stopped"}, {"step", step + 1}, {"signal", result.stop_signal}});
      } else {
        result.stopped_by_caller = true;
        log.write({{"event", "stopped"}, {"step", step + 1}, {"by", "caller"}});
      }
      // The ranks end together, once the lead's checkpoint is complete.
      if (ranks.world_size > 1) ranks.barrier(std::chrono::seconds(o.parallel.timeout_s));
      break;
    }
  }
  progress.finish();
  result.steps_done = steps_done;
  result.tokens_per_second = progress.tokens_per_second();

  if (lead) write_text_file_atomically((run / "loss.svg").string(), loss_plot_svg(curves));
  result.peak_device_bytes = engine->peak_device_bytes();
  bool samples = sample_text && o.sample.tokens > 0 && steps_done == s.steps;
  // A base quantized as it came was never whole in float32: the sample
  // reads it back and merges a copy, which the host may not hold.
  const uint64_t sample_bytes = 2 * static_cast<uint64_t>(model::parameter_count(config)) * sizeof(float);
  if (samples && quantized && sample_bytes > available_host_bytes()) {
    samples = false;
    if (!o.run.quiet) {
      std::printf("no sample: the tuned model in float32 takes %s, more than the host has free; `spillway generate "
                  "-m %s` runs the checkpoint\n", format_bytes(sample_bytes).c_str(), o.run.out.c_str());
    }
  }
  if (samples) {
    // The final weights, read back (every rank: the reads may be
    // collectives), and the engine's state let go before the lead samples.
    engine->finish();
    if (lead || engine->reads_are_collective()) read_masters(*engine, weights, lead);
    engine.reset();
  }
  if (lead && samples) {
    result.sample = sample_text(lora ? model::merge_lora(weights, lora->adapters) : weights, *data.tokenizer, o.sample,
                                s.seed);
    log.write({{"event", "sample"}, {"text", result.sample}});
  }
  log.write({{"event", "end"}, {"step", steps_done}, {"train_loss", result.train_loss},
             {"val_loss", result.validation_loss}, {"tok_per_s", result.tokens_per_second}});
  return result;
}

}  // namespace spillway::train
