#include <omp.h>

#include <algorithm>
#include <cmath>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cpu/cpu_device.h"
#include "train/cpu_pipeline.h"
#include "train/cpu_sharded_adamw.h"
#include "train/engine.h"
#include "train/loss_weights.h"
#include "train/tensor_parallel_state.h"
#include "train/train_step.h"

namespace spillway::train {

namespace {

class CpuEngine final : public Engine {
 public:
  CpuEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights),
        optimizer_(optimizer),
        options_(o),
        device_(make_cpu_device(o.memory.device_mem ? o.memory.device_mem : MemorySpace::kUnlimited)),
        step_(make_step(/*with_backward=*/true)),
        eval_(make_step(/*with_backward=*/false)) {
    SPW_CHECK(o.lora || o.lora_base == model::LoraBase::weights, "--lora-base",
              model::lora_base_name(o.lora_base), " keeps LoRA's frozen base; it needs --lora-rank");
    if (o.lora) {
      // The weights are frozen: gradients and updates are the adapters' alone.
      SPW_CHECK(o.shard == StateSharding::none || o.shard == StateSharding::automatic,
                "--shard " + std::string(enum_name(o.shard)), "LoRA's state is small; it is not sharded");
      const model::LoraWeights& adapters = o.lora->adapters;
      // QLoRA: the targeted projections' weights become their NF4 round trip.
      if (o.lora_quantized) {
        quantized_ = take_quantized_base(o, weights.config());
        model::write_round_trip(quantized_, weights);
      } else {
        quantized_ = model::quantize_lora_base(weights, adapters.lora(), o.lora_base);
      }
      adapter_grads_ = model::LoraWeights::zeros(weights.config(), adapters.lora());
      step_->bind_adapters(o.lora->adapters, &adapter_grads_);
      eval_->bind_adapters(o.lora->adapters, nullptr);
      return;
    }
    const bool split = o.tensor_parallel || o.pipeline_parallel || o.context_parallel;
    SPW_CHECK(!split || o.shard == StateSharding::none || o.shard == StateSharding::automatic,
              "--shard " + std::string(enum_name(o.shard)), "with --tp, --pp or --cp, sharding the state over the ",
              "data-parallel ranks too is not supported yet");
    if (o.context_parallel) {
      SPW_CHECK(!o.weighted_loss, "--cp", "instruction data is not supported with context parallelism yet");
    }
    if (o.pipeline_parallel) {
      SPW_CHECK(!o.weighted_loss && !o.documents, "--pp", "instruction data and packed rows are not supported with "
                "pipeline parallelism yet");
      check_pipeline_micro_batches(o.pipeline_parallel->size(), o.virtual_stages, o.micro_batches);
      pipe_ = std::make_unique<CpuPipeline>(weights_, optimizer_,
                                            PipelineRanks{.pipeline = o.pipeline_parallel,
                                                          .tensor = o.tensor_parallel,
                                                          .context = o.context_parallel,
                                                          .sequence_parallel = o.sequence_parallel,
                                                          .chunks = o.virtual_stages},
                                            o.batch, o.seq, device_->device_memory(), device_->stream(StreamKind::comm));
      return;
    }
    if (o.tensor_parallel) {
      tp_ = std::make_unique<TensorParallelState>(weights_, optimizer_, *o.tensor_parallel);
      return;
    }
    grads_ = model::LlamaWeights::zeros(weights.config());
    // Host memory holds the CPU's whole state with room to spare: sharded
    // only where asked for.
    if (o.shard != StateSharding::none && o.shard != StateSharding::automatic && data_parallel_size(o) > 1) {
      shard_ = o.shard;
      sharded_ = std::make_unique<CpuShardedAdamW>(weights_, optimizer_, *o.data_parallel,
                                                   shard_ == StateSharding::weights);
    } else if (optimizer_.m.tensors().empty()) {  // a fresh run: the trainer makes no moments
      optimizer_.m = model::LlamaWeights::zeros(weights_.config());
      optimizer_.v = model::LlamaWeights::zeros(weights_.config());
    }
  }

  std::string description() const override {
    std::string d = "cpu, " + std::to_string(omp_get_max_threads()) + " threads";
    if (sharded_) {
      const char* what = shard_ == StateSharding::weights     ? "the weights, the gradient sums and AdamW's moments"
                         : shard_ == StateSharding::gradients ? "the gradient sums and AdamW's moments"
                                                              : "AdamW's moments";
      d += "; " + std::string(what) + " sharded over " + std::to_string(data_parallel_size(options_)) + " ranks";
    }
    if (pipe_) d += "; " + pipe_->describe();
    if (tp_) {
      d += "; tensor parallel over " + std::to_string(options_.tensor_parallel->size()) + " ranks" +
           (options_.sequence_parallel ? ", sequence parallel" : "");
    }
    if (options_.lora) {
      const model::LoraWeights& a = options_.lora->adapters;
      d += "; LoRA rank " + std::to_string(a.lora().rank) + " on " + std::to_string(a.tensors().size() / 2) +
           " projections (" + std::to_string(a.numel()) + " trained parameters, the weights frozen)";
      if (!quantized_.tensors.empty()) d += "; " + quantized_.describe();
    }
    if (const plan::Placement* p = step_ ? step_->placement() : nullptr) {
      d += "; device budget " + format_bytes(options_.memory.device_mem) + " planned: peak " +
           format_bytes(p->device_peak) + ", " + std::to_string(p->values_offloaded) + " values offloaded, " +
           format_bytes(p->bytes_loaded + p->bytes_stored) + " moved per micro-step";
    }
    return d;
  }

  using Engine::train_step;
  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       const PackedDocuments& documents, int64_t micro_batches, double lr) override {
    const size_t n = micro_batch_tokens(options_, inputs, targets, documents, micro_batches);
    StepStats stats;
    const float share = 1.0f / static_cast<float>(micro_batches);
    const int ranks = data_parallel_size(options_);
    double token_weight = 0;
    if (options_.weighted_loss) {
      token_weight = step_token_weight(*this, targets, micro_batches, ranks);
      loss_weights_.resize(n);
    }
    // The step adds each micro-batch's gradients into grads_ (or the
    // adapters'); AdamW takes their mean, clipped, through one scale. With
    // the gradients sharded, grads_ holds one micro-batch's, which every
    // rank then reduce-scatters into its share of the sums.
    if (sharded_) begin_sharded_step();
    std::vector<model::NamedTensor>& grads = trained_grads();
    if (pipe_) {
      for (auto& t : grads) std::fill(t.data.begin(), t.data.end(), 0.0f);
      stats.loss = pipe_->run_micro_batches(inputs, targets, micro_batches);
      return finish_step(stats, grads, micro_batches, lr);
    }
    const bool each_micro_batch = shard_ == StateSharding::gradients || shard_ == StateSharding::weights;
    Stream& comm = device_->stream(StreamKind::comm);
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      if (micro == 0 || each_micro_batch) {
        for (auto& t : grads) std::fill(t.data.begin(), t.data.end(), 0.0f);
      }
      if (shard_ == StateSharding::weights) gather_weights();
      auto y = targets.subspan(micro * n, n);
      if (options_.weighted_loss) fill_loss_weights(y, token_weight, loss_weights_);
      const PackedDocuments docs = documents.subspan(micro * n, n);
      auto x = inputs.subspan(micro * n, n);
      x = model::take_context_chunks(context(), x, context_inputs_);  // this rank's chunks of the sequence
      y = model::take_context_chunks(context(), y, context_targets_);
      if (options_.lora) {
        step_->set_dropout_key(micro_batch_dropout_key(options_, optimizer_.steps_taken, micro_batches, micro));
      }
      const double loss =
          options_.lora ? step_->run(weights_, x, y, loss_weights_, docs.positions, docs.doc_starts)
                        : step_->run(step_weights(), x, y, tp_ ? tp_->grads() : grads_, loss_weights_,
                                     docs.positions, docs.doc_starts);
      stats.loss += loss * share;
      if (each_micro_batch) sharded_->add_gradients(grads_, comm);
    }
    if (sharded_) {
      if (!each_micro_batch) sharded_->add_gradients(grads_, comm);  // the step's sums, once
      if (shard_ == StateSharding::weights) release_whole();
      double sums[2] = {stats.loss, sharded_->grad_sum_of_squares()};
      sum_over_ranks(sums);
      stats.loss = sums[0] / ranks;
      const double scale =
          accumulated_grad_scale(std::sqrt(sums[1]), micro_batches * ranks, options_.grad_clip, &stats.grad_norm);
      if (profiling_) ++profiled_steps_;
      stats.updated = update_is_finite(stats);
      if (stats.updated) sharded_->step(weights_, lr, scale, comm);
      return stats;
    }
    return finish_step(stats, grads, micro_batches, lr);
  }

  // The step's gradient sums summed over the ranks, clipped, and AdamW's update.
  StepStats finish_step(StepStats stats, std::vector<model::NamedTensor>& grads, int64_t micro_batches, double lr) {
    const int ranks = data_parallel_size(options_);
    Stream& comm = device_->stream(StreamKind::comm);
    if (tp_) tp_->sum_whole_gradients(comm);
    // Every chunk's part of the gradient, and the chunks' mean loss.
    if (Communicator* cp = options_.context_parallel) {
      for (auto& t : grads) cp->all_reduce_sum(t.data.data(), t.data.size(), DType::f32, comm);
      cp->all_reduce_sum(&stats.loss, 1, DType::f64, comm);
      cp->wait(comm);
      stats.loss /= cp->size();
    }
    if (ranks > 1) {
      for (auto& t : grads) {
        options_.data_parallel->all_reduce_sum(t.data.data(), t.data.size(), DType::f32, comm);
      }
      sum_over_ranks(std::span<double>(&stats.loss, 1));  // waits for the sums above too
      stats.loss /= ranks;
    }
    const double norm = tp_     ? std::sqrt(tp_->grad_sum_of_squares(comm))
                        : pipe_ ? std::sqrt(pipe_->grad_sum_of_squares())
                                : global_grad_norm(grads);
    const double scale =
        accumulated_grad_scale(norm, micro_batches * ranks, options_.grad_clip, &stats.grad_norm);
    if (profiling_) ++profiled_steps_;
    stats.updated = update_is_finite(stats);
    if (stats.updated && pipe_) {
      pipe_->step(optimizer_, lr, scale);
    } else if (stats.updated && tp_) {
      tp_->step(optimizer_, lr, scale);
    } else if (stats.updated && options_.lora) {
      LoraState& l = *options_.lora;
      optimizer_.step(l.adapters.tensors(), grads, l.m.tensors(), l.v.tensors(), lr, scale);
    } else if (stats.updated) {
      optimizer_.step(weights_, grads_, lr, scale);
    }
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    SPW_CHECK(weights_whole_ || shard_ != StateSharding::weights, "evaluation",
              "the weights are sharded; begin_evaluation gathers them first");
    if (pipe_) return pipe_->eval_loss(inputs, targets);
    if (Communicator* cp = options_.context_parallel) {
      double loss = eval_->run(step_weights(), model::take_context_chunks(context(), inputs, context_inputs_),
                               model::take_context_chunks(context(), targets, context_targets_));
      Stream& comm = device_->stream(StreamKind::comm);
      cp->all_reduce_sum(&loss, 1, DType::f64, comm);
      cp->wait(comm);
      return loss / cp->size();
    }
    return eval_->run(step_weights(), inputs, targets);
  }
  // The ranks take turns at an evaluation's batches: the weights are
  // gathered once for all of them.
  void begin_evaluation() override {
    if (shard_ == StateSharding::weights && !weights_whole_) gather_weights();
  }

  void sum_over_ranks(std::span<double> values) override {
    if (!options_.data_parallel) return;
    Stream& comm = device_->stream(StreamKind::comm);
    options_.data_parallel->all_reduce_sum(values.data(), values.size(), DType::f64, comm);
    options_.data_parallel->wait(comm);
  }

  void sum_over_world(std::span<double> values) override {
    sum_over_ranks(values);
    Stream& comm = device_->stream(StreamKind::comm);
    for (Communicator* group : {options_.pipeline_parallel, options_.context_parallel, options_.tensor_parallel}) {
      if (!group) continue;
      group->all_reduce_sum(values.data(), values.size(), DType::f64, comm);
      group->wait(comm);
    }
  }

  std::string device_name() const override { return "cpu"; }
  bool on_gpu() const override { return false; }
  void sync_to_host() override {
    if (tp_ || pipe_) return gather_pieces();
    if (shard_ == StateSharding::weights && !weights_whole_) gather_weights();
    sync_moments();
  }
  // The CPU trains on the caller's arrays; sharded state is gathered into
  // them at the first read of it after a step, every rank reading alike.
  void read_state(StatePart part, size_t i, std::span<float> out) override {
    if (tp_) return tp_->read_whole(part, i, out, device_->stream(StreamKind::comm));
    if (pipe_) return pipe_->read_whole(part, i, out);
    if (part != StatePart::master) sync_moments();
    if (part == StatePart::master && shard_ == StateSharding::weights && !weights_whole_) gather_weights();
    const model::LlamaWeights& from = part == StatePart::master ? weights_ : part == StatePart::m ? optimizer_.m : optimizer_.v;
    const std::vector<float>& data = from.tensors().at(i).data;
    SPW_CHECK(data.size() == out.size(), from.tensors()[i].name, "holds ", data.size(), " values, not ", out.size());
    std::copy(data.begin(), data.end(), out.begin());
  }
  bool reads_are_collective() const override { return sharded_ != nullptr || tp_ != nullptr || pipe_ != nullptr; }
  void finish() override { grads_ = model::LlamaWeights(); }
  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }
  void set_profiling(bool on) override {
    if (auto* e = step_ ? dynamic_cast<exec::Executor*>(&step_->program()) : nullptr) e->set_profiling(on);
    profiling_ = on;
  }
  std::string profile_report() const override {
    if (!step_) return "no per-op profile of a pipeline stage yet\n";
    auto* e = dynamic_cast<const exec::Executor*>(&step_->program());
    return e ? op_time_report(step_->graph(), e->node_seconds(), std::max(1, profiled_steps_), 0)
             : "no profile under a device budget\n";
  }

 private:
  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::vector<model::NamedTensor>& trained_grads() {
    if (pipe_) return pipe_->grads();
    return options_.lora ? adapter_grads_.tensors() : tp_ ? tp_->grads().tensors() : grads_.tensors();
  }
  // The weights the steps run on: with tensor parallelism, this rank's pieces.
  model::LlamaWeights& step_weights() { return tp_ ? tp_->weights() : weights_; }
  // The caller's weights and moments, whole, from every rank's pieces (or stages).
  void gather_pieces() {
    for (StatePart part : {StatePart::master, StatePart::m, StatePart::v}) {
      model::LlamaWeights& to = part == StatePart::master ? weights_ : part == StatePart::m ? optimizer_.m : optimizer_.v;
      if (to.tensors().empty()) to = model::LlamaWeights::zeros(weights_.config());
      for (size_t i = 0; i < to.tensors().size(); ++i) read_state(part, i, to.tensors()[i].data);
    }
  }

  // Between steps a sharded rank keeps its shares alone: the whole moments
  // a checkpoint gathered go, and with the weights sharded, the whole
  // weights and gradients too, which the step brings back.
  void begin_sharded_step() {
    if (moments_gathered_) {
      optimizer_.m = model::LlamaWeights();
      optimizer_.v = model::LlamaWeights();
      moments_gathered_ = false;
    }
    if (grads_.tensors().empty()) grads_ = model::LlamaWeights::zeros(weights_.config());
    sharded_->begin_step();
  }
  void gather_weights() {
    sharded_->gather_weights(weights_, device_->stream(StreamKind::comm));
    weights_whole_ = true;
  }
  void release_whole() {
    sharded_->release_whole(weights_);
    grads_ = model::LlamaWeights();
    weights_whole_ = false;
  }
  void sync_moments() {
    if (sharded_ && !moments_gathered_) sharded_->sync_to_host(device_->stream(StreamKind::comm));
    moments_gathered_ = true;
  }

  // A device budget plans the steps across the device's memory and its host
  // memory; without one they run in device memory alone.
  // Evaluation keeps the plain mean (the trainer weighs its batches itself)
  // over rows of one example each.
  // None for a pipeline stage, whose programs are its own (train/cpu_pipeline.h).
  std::unique_ptr<TrainStep> make_step(bool with_backward) {
    if (options_.pipeline_parallel) return nullptr;
    const auto& c = weights_.config();
    const bool weighted = with_backward && options_.weighted_loss;
    const bool documents = with_backward && options_.documents;
    const model::LoraConfig* lora = options_.lora ? &options_.lora->adapters.lora() : nullptr;
    // Tensor parallelism splits each layer, context parallelism each
    // sequence: the step is the rank's graph of its chunk.
    if (options_.tensor_parallel || options_.context_parallel) {
      SPW_CHECK(options_.memory.device_mem == 0, "--device-mem", "a device budget plans one device's step; with ",
                "--tp or --cp the step is split over ranks, which the planner does not plan on the CPU yet");
      groups_.stream = &device_->stream(StreamKind::comm);
      int64_t seq = options_.seq;
      if (Communicator* tp = options_.tensor_parallel) {
        groups_.by_group[static_cast<size_t>(graph::TensorParallelism{}.group)] = tp;
        split_.tp = {.rank = tp->rank(), .ranks = tp->size(), .sequence_parallel = options_.sequence_parallel};
      }
      if (Communicator* cp = options_.context_parallel) {
        model::check_context_sequence(seq, cp->size());
        groups_.by_group[static_cast<size_t>(model::LlamaContext{}.group)] = cp;
        split_.context = {.rank = cp->rank(), .ranks = cp->size()};
        seq /= cp->size();
      }
      split_.groups = &groups_;
      return std::make_unique<TrainStep>(c, options_.batch, seq, device_->device_memory(), with_backward, weighted,
                                         documents, lora, &split_);
    }
    if (options_.memory.device_mem) {
      return std::make_unique<TrainStep>(c, options_.batch, options_.seq, *device_, with_backward, weighted,
                                         documents, lora);
    }
    return std::make_unique<TrainStep>(c, options_.batch, options_.seq, device_->device_memory(), with_backward,
                                       weighted, documents, lora);
  }

  // With --cp, this rank's place in the sequence (one rank's whole without).
  const model::LlamaContext& context() const { return split_.context; }

  // Members are built in declaration order: the device before the steps.
  std::unique_ptr<Device> device_;
  ops::CollectiveGroups groups_;  // with --tp: the steps' collectives
  StepSplit split_;
  std::unique_ptr<TrainStep> step_;
  std::unique_ptr<TrainStep> eval_;
  // The sum of the micro-batches' gradients, or with the gradients sharded
  // one micro-batch's (none with LoRA).
  model::LlamaWeights grads_;
  model::LoraWeights adapter_grads_;  // with LoRA: the sum of the adapters' gradients
  model::QuantizedBase quantized_;    // with QLoRA: the targeted projections' weights, NF4
  std::vector<float> loss_weights_;  // a micro-batch's, with the weighted loss
  std::vector<int32_t> context_inputs_, context_targets_;  // with --cp: this rank's chunks of a micro-batch
  std::unique_ptr<CpuShardedAdamW> sharded_;  // --shard optimizer, gradients or weights
  std::unique_ptr<TensorParallelState> tp_;   // --tp: this rank's pieces of the state
  std::unique_ptr<CpuPipeline> pipe_;         // --pp: this rank's stage and its state
  // What is sharded: none without data parallelism or with LoRA.
  StateSharding shard_ = StateSharding::none;
  bool profiling_ = false;
  int profiled_steps_ = 0;
  bool moments_gathered_ = false;  // the caller's moments hold the shares' (sharded)
  bool weights_whole_ = false;     // the caller's weights hold the shares' (weights sharded)
};

}  // namespace

std::unique_ptr<Engine> make_cpu_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CpuEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
