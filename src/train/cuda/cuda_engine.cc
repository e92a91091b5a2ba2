// The GPU engine: the step graph in bf16 and the training state, both placed
// by the plan (train/step_plan.h). Where the whole state and every
// activation fit, the step runs on one stream as a replayed CUDA graph and
// AdamW updates the state in place; otherwise the masters' rest and the
// moments live at home and AdamW streams them through the GPU, and the
// working weights, the gradient sums and the activations go home too where
// the plan says. The same kernels run in every layout, so the layouts train
// the same numbers.
//
// Gradients: the first micro-batch of an optimizer step writes the sums
// (no zeroing pass, matmul beta = 0), every later one adds into them, and
// AdamW reads them with one scale that takes the mean over micro-batches and
// clips.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "base/bytes.h"
#include "base/host_memory.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "device/cuda/cuda_pool.h"
#include "device/cuda/pinned_host.h"
#include "model/llama_config_json.h"
#include "ops/attention.h"
#include "plan/timeline_svg.h"
#include "train/cuda/cuda_adamw.h"
#include "train/cuda/cuda_pipeline.h"
#include "train/cuda/cuda_step.h"
#include "train/cuda/cuda_tensor_parallel.h"
#include "train/device_reserve.h"
#include "train/cuda/grad_norm.h"
#include "train/cuda/replica_sums.h"
#include "train/cuda/shard_rings.h"
#include "train/cuda/training_state.h"
#include "train/adamw_state.h"
#include "train/engine.h"
#include "train/loss_weights.h"
#include "train/pipeline_plan.h"
#include "train/step_plan.h"

namespace spillway::train {

namespace {

CudaStepOptions step_options(const EngineOptions& o) {
  return {.deterministic = o.kernels.deterministic,
          .matmul_candidates = o.kernels.matmul_candidates,
          .own_gemm = o.kernels.own_gemm,
          .cuda_graph = o.kernels.cuda_graph};
}

class CudaEngine final : public Engine {
 public:
  CudaEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights), optimizer_(optimizer), options_(o) {
    SPW_CHECK(cuda_device_count() > 0, "--device cuda", "no CUDA GPU is visible to this process");
    const int gpu = o.gpu_ordinal;
    SPW_CHECK(gpu >= 0 && gpu < cuda_device_count(), "--device cuda", "GPU ", gpu, " is not visible (",
              cuda_device_count(), " are)");
    // The kernels of every op run on the current device: this rank's GPU.
    SPW_CUDA(cudaSetDevice(gpu));
    device_ = make_cuda_device(gpu, o.memory.device_mem ? o.memory.device_mem : MemorySpace::kUnlimited, 64ull << 20);
    gpu_ = cuda_device_name(gpu);
    MemorySpace& mem = device_->device_memory();
    const auto tokens = static_cast<uint64_t>(o.batch * o.seq);
    StepIoBuffers io = make_step_io(mem, tokens, o.weighted_loss, o.documents);
    io_ = io.io;
    pinned_io_ = std::move(io.pinned);
    if (o.weighted_loss) loss_weights_.resize(tokens);

    if (o.data_parallel || o.tensor_parallel || o.context_parallel || o.pipeline_parallel) {
      scalars_ = mem.allocate(kScalarBytes, "sums over ranks");
    }
    if (o.tensor_parallel) start_tensor_parallel();
    if (o.context_parallel) start_context_parallel();
    if (o.pipeline_parallel) start_pipeline();
    // tp_ and pp_ took their parts of the caller's masters and moments,
    // which sync_to_host refills; moments it holds none of are none.
    if (tp_ || pp_) optimizer_.m = optimizer_.v = model::LlamaWeights();
    plan_sharding();
    take_own_chunk_step();
    // Before the runners and the state take the device: the pipeline's
    // prediction measures its workspaces as the plan did.
    predicted_step_ = pp_ ? pipeline_prediction() : planned_.plan.step_seconds;
    const plan::TrainingPlan& p = planned_.plan;
    const LlamaStep& step = *planned_.step;
    if (!p.all_on_device()) {
      log_info("planned step: " + p.layout() + "; device " + format_bytes(p.placement.device_peak) + " planned + " +
               format_bytes(p.resident_bytes) + " resident; host " + format_bytes(p.host_state_bytes) + " state + " +
               format_bytes(p.placement.host_peak) + " offloaded; predicted " + std::to_string(p.step_seconds) +
               " s per step");
    }
    const auto& parts = step.model.parameter_parts;
    // The runners first: they take the places the ones measured while
    // planning had, below the state, as the plan's arena assumed.
    make_runners();
    SPW_CHECK((!tp_ && !pp_) || p.all_on_device(), tp_ ? "--tp" : "--pp", "a ",
              tp_ ? "tensor-parallel" : "pipeline", " rank keeps its step and its state on its device; this plan does "
              "not (", p.layout(), "): add ranks, or shard the state (--shard optimizer)");
    state_ = std::make_unique<CudaTrainingState>(state_weights(), state_optimizer(), parts, p, o.memory.bf16_moments,
                                                 *device_, sharding());
    norm_ = std::make_unique<CudaGradNorm>(*state_, parts, *device_);
    // What this rank holds that another counts in the gradient norm: a
    // tensor-parallel group's whole tensors (its rank 0 counts them), the
    // last stage's copy of a tied table.
    const auto uncounted = tp_ && tp_->group().rank() != 0 ? tp_->whole_parts(parts)
                           : pp_                           ? pp_->copied_parts()
                                                           : std::vector<std::vector<int>>{};
    if (!uncounted.empty()) uncounted_norm_ = std::make_unique<CudaGradNorm>(*state_, uncounted, *device_);
    adamw_ = std::make_unique<CudaAdamW>(*state_, *device_);
    make_executors();
  }

  ~CudaEngine() override {
    device_->synchronize_at_end("GPU engine");
    train_.reset();
    eval_.reset();
    rings_.reset();
    replica_sums_.reset();
    adamw_.reset();
    uncounted_norm_.reset();
    norm_.reset();
    state_.reset();
    tp_.reset();
    pp_.reset();
  }

  std::string description() const override {
    const plan::TrainingPlan& p = planned_.plan;
    std::string moments = options_.memory.bf16_moments ? "; bf16 AdamW moments" : "";
    if (sharded_) {
      const char* what = state_->weights_sharded()     ? "masters, moments, gradient sums and weights"
                         : state_->gradients_sharded() ? "masters, moments and gradient sums"
                                                       : "masters and moments";
      moments += std::string("; ") + what + " sharded over " + std::to_string(replica_count()) + " ranks";
    }
    const std::string recompute =
        recompute_report(*planned_.step, options_.memory.recompute == RecomputeChoice::automatic);
    std::string remade = recompute.empty() ? "" : "; recomputation: " + recompute;
    if (const std::string head = head_summary(*planned_.step); !head.empty()) remade += "; " + head;
    if (tp_) {
      remade += "; tensor parallel over " + std::to_string(tp_->group().size()) + " ranks" +
                (options_.sequence_parallel ? ", sequence parallel" : "");
    }
    if (options_.context_parallel) {
      remade += "; context parallel over " + std::to_string(context().ranks) + " ranks (this one positions " +
                std::to_string(context().rank * options_.seq / context().ranks) + " on)";
    }
    if (pp_) remade += "; " + pp_->describe();
    if (!p.all_on_device()) {
      return device_name() + " (planned: " + p.layout() + moments + remade + "; " +
             train_->runner().attention_summary() + ")";
    }
    const std::string gemm = train_->runner().gemm_summary();
    return device_name() + " (" + train_->runner().attention_summary() + (gemm.empty() ? "" : "; " + gemm) + moments +
           remade + ")";
  }
  std::string device_name() const override { return "cuda:" + std::to_string(options_.gpu_ordinal) + " " + gpu_; }
  bool on_gpu() const override { return true; }

  using Engine::train_step;
  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       const PackedDocuments& documents, int64_t micro_batches, double lr) override {
    SPW_CHECK(train_ != nullptr, "GPU engine", "a training step after finish()");
    const size_t n = micro_batch_tokens(options_, inputs, targets, documents, micro_batches);
    StepStats stats;
    norm_->start_step();
    const int ranks = replica_count();
    const double token_weight = options_.weighted_loss ? step_token_weight(*this, targets, micro_batches, ranks) : 0;
    stats.loss = pp_ ? run_pipeline(inputs, targets, n, micro_batches)
                     : run_micro_batches(inputs, targets, documents, n, micro_batches, token_weight);
    // Overlapped (or through the rings), the micro-batches summed them over
    // the ranks already.
    if (replica_sums_ && !replica_sums_->overlapped() && !rings_) replica_sums_->sum_now(sharded_);
    Stream& compute = device_->stream(StreamKind::compute);
    if (tp_) tp_->sum_whole_gradients(*state_, compute, device_->stream(StreamKind::comm), *grads_ready_, *grads_summed_);
    if (pp_) pp_->sum_tied_gradients(*state_);
    const auto optimizer_start = std::chrono::steady_clock::now();
    // Sharded, each rank's sums of squares cover its share: summed with the
    // loss. A tensor-parallel group's whole tensors count on its rank 0.
    double sums[2] = {stats.loss, norm_->sum_of_squares()};
    if (uncounted_norm_) sums[1] -= uncounted_norm_->sum_of_squares();
    // A pipeline's loss is its last stage's; each stage's squares are its own.
    if (pp_) {
      sum_over(pp_->group(), std::span<double>(sums, 2));
      stats.loss = sums[0];
    }
    if (ranks > 1) {
      sum_over(*replicas(), std::span<double>(sums, sharded_ ? 2 : 1));
      stats.loss = sums[0] / ranks;
    }
    if (tp_) sum_over(tp_->group(), std::span<double>(&sums[1], 1));
    const double grad_scale =
        accumulated_grad_scale(std::sqrt(sums[1]), micro_batches * ranks, options_.grad_clip, &stats.grad_norm);
    stats.updated = update_is_finite(stats);
    if (stats.updated) {
      ++optimizer_.steps_taken;
      adamw_->update(optimizer_, lr, grad_scale);
      if (sharded_ && !state_->weights_sharded()) replica_sums_->gather_weights();
      host_current_ = false;
    }
    if (profiling_) {
      optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
      ++profiled_steps_;
    }
    return stats;
  }

  void sum_over_ranks(std::span<double> values) override {
    if (options_.data_parallel) sum_over(*options_.data_parallel, values);
  }
  void sum_over_world(std::span<double> values) override {
    sum_over_ranks(values);
    if (tp_) sum_over(tp_->group(), values);
    if (options_.context_parallel) sum_over(*options_.context_parallel, values);
    if (pp_) sum_over(pp_->group(), values);
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    SPW_CHECK(eval_ != nullptr, "GPU engine", "an evaluation after finish()");
    check_step_ids(inputs, targets, weights_.config().vocab_size, static_cast<size_t>(options_.batch * options_.seq));
    double loss = 0;
    if (pp_) {
      loss = pp_->run(1, false, {.forward = [&](int64_t) { return eval_->run(inputs, targets, true); }, .train = {}});
      sum_over(pp_->group(), std::span<double>(&loss, 1));
      return loss;
    }
    loss = eval_->run(own_chunks(inputs, context_inputs_), own_chunks(targets, context_targets_), true);
    if (Communicator* cp = options_.context_parallel) {  // the mean of the chunks' means
      sum_over(*cp, std::span<double>(&loss, 1));
      loss /= cp->size();
    }
    return loss;
  }

  void sync_to_host() override {
    if (host_current_) return;
    if (tp_ || pp_) {
      for (StatePart part : {StatePart::master, StatePart::m, StatePart::v}) {
        model::LlamaWeights& to = part == StatePart::master ? weights_ : part == StatePart::m ? optimizer_.m : optimizer_.v;
        if (to.tensors().empty()) to = model::LlamaWeights::zeros(weights_.config());
        for (model::NamedTensor& t : to.tensors()) {
          t.data.resize(static_cast<size_t>(t.shape.numel()));
          read_state(part, static_cast<size_t>(&t - to.tensors().data()), t.data);
        }
      }
    } else {
      state_->sync_to_host();
    }
    host_current_ = true;
  }
  void read_state(StatePart part, size_t i, std::span<float> out) override {
    if (tp_) return tp_->read_whole(*state_, part, i, out);
    if (pp_) return pp_->read_whole(*state_, part, i, out);
    state_->read(part, i, out);
  }
  void finish() override {
    device_->synchronize();
    train_.reset();
    eval_.reset();
    rings_.reset();
    host_pool_.reset();
  }
  bool reads_are_collective() const override { return sharded_ || tp_ || pp_; }
  bool evaluation_is_collective() const override { return state_->weights_sharded() || pp_; }

  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }
  bool replays_cuda_graph() const override { return train_->replays(); }
  bool fused_projections() const override { return planned_.step->fused_projections; }
  double predicted_step_seconds() const override { return predicted_step_; }

  void set_profiling(bool on) override {
    profiling_ = on;
    train_->set_profiling(on);
  }
  std::string profile_report() const override {
    return op_time_report(train_->graph(), train_->node_seconds(), std::max(1, profiled_steps_), optimizer_seconds_);
  }
  std::string measured_timeline_svg() const override {
    std::vector<plan::TimelineBar> bars;
    for (const auto& i : train_->timeline()) {
      const bool heavy = i.label.rfind("matmul", 0) == 0 || i.label.rfind("attention", 0) == 0;
      bars.push_back({static_cast<int>(i.stream), i.start, i.end, i.label, heavy});
    }
    return bars.empty() ? std::string() : plan::timeline_svg(bars, "one micro-batch on " + device_name() + ", measured");
  }

 private:
  // `values` summed over `group`'s ranks, through the device.
  void sum_over(Communicator& group, std::span<double> values) {
    const uint64_t bytes = values.size_bytes();
    SPW_CHECK(bytes <= kScalarBytes, "parallelism", "summing ", values.size(), " values over the ranks at once");
    Stream& comm = device_->stream(StreamKind::comm);
    device_->copy_async(scalars_, values.data(), bytes, comm);
    group.all_reduce_sum(scalars_, values.size(), DType::f64, comm);
    device_->copy_async(values.data(), scalars_, bytes, comm);
    group.wait(comm);
  }

  // Tensor parallelism: the rank's pieces of the state, and the
  // communicators its steps' collectives go through (on the compute stream).
  void start_tensor_parallel() {
    SPW_CHECK(options_.shard == StateSharding::automatic || options_.shard == StateSharding::none ||
                  options_.shard == StateSharding::optimizer,
              "--shard " + std::string(enum_name(options_.shard)), "with --tp, the state is sharded over the ",
              "data-parallel ranks as far as the optimizer's (--shard optimizer) so far");
    tp_ = std::make_unique<CudaTensorParallel>(weights_, optimizer_, *options_.tensor_parallel, *device_);
    collectives_.by_group[static_cast<size_t>(graph::TensorParallelism{}.group)] = options_.tensor_parallel;
    collectives_.stream = &device_->stream(StreamKind::compute);
    grads_ready_ = device_->new_event();
    grads_summed_ = device_->new_event();
  }
  // Context parallelism: each rank's step is its chunk of every sequence,
  // the keys and values all-gathered over the group (on the compute
  // stream); the weights are replicated, so the state is summed and
  // sharded over dp x cp ranks as data parallelism's is over dp.
  void start_context_parallel() {
    SPW_CHECK(!options_.weighted_loss && !options_.documents, "--cp",
              "instruction data and packed rows are not supported with context parallelism yet");
    SPW_CHECK(options_.replicas, "--cp", "the ranks holding the same state were not given to the engine");
    model::check_context_sequence(options_.seq, options_.context_parallel->size());
    collectives_.by_group[static_cast<size_t>(model::LlamaContext{}.group)] = options_.context_parallel;
    collectives_.stream = &device_->stream(StreamKind::compute);
  }
  // Pipeline parallelism: this rank's stage of the layers and its state
  // alone (train/cuda/cuda_pipeline.h).
  void start_pipeline() {
    SPW_CHECK(!options_.tensor_parallel && !options_.context_parallel, "--pp",
              "beside --tp or --cp runs on the CPU engine so far; add --device cpu");
    SPW_CHECK(options_.virtual_stages == 1, "--virtual-stages",
              "interleaved stages run on the CPU engine so far; add --device cpu");
    SPW_CHECK(!options_.weighted_loss && !options_.documents, "--pp",
              "instruction data and packed rows are not supported with pipeline parallelism on the GPU yet");
    pp_ = std::make_unique<CudaPipeline>(weights_, optimizer_, *options_.pipeline_parallel, options_.batch,
                                         options_.seq, *device_);
    SPW_CHECK(!pp_->tied() || options_.shard == StateSharding::automatic || options_.shard == StateSharding::none ||
                  options_.shard == StateSharding::optimizer,
              "--shard " + std::string(enum_name(options_.shard)), "a tied table's gradient sums are added over the ",
              "stages whole: with --pp, a tied model shards as far as the optimizer's state (--shard optimizer)");
  }
  // The micro-batches one after another: their mean loss.
  double run_micro_batches(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                           const PackedDocuments& documents, size_t n, int64_t micro_batches, double token_weight) {
    double loss = 0;
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      const auto x = own_chunks(inputs.subspan(micro * n, n), context_inputs_);
      const auto y = own_chunks(targets.subspan(micro * n, n), context_targets_);
      check_step_ids(x, y, weights_.config().vocab_size, x.size());
      const PackedDocuments docs = documents.subspan(micro * n, n);
      // The kernels rely on contiguous documents and cannot throw.
      if (!docs.empty()) ops::check_doc_starts(docs.doc_starts.data(), options_.batch, options_.seq, "doc_starts");
      if (options_.weighted_loss) fill_loss_weights(y, token_weight, loss_weights_);
      if (exec::PlannedExecutor* planned = train_->planned(); planned && norm_->takes_parts_before_store()) {
        // The last micro-batch leaves each sum final on the device just
        // before it goes home: its squares are taken there.
        planned->set_before_store(micro + 1 < micro_batches ? exec::PlannedExecutor::BeforeStore{} : before_store_);
      }
      loss += train_->run(x, y, micro == 0, micro + 1 == micro_batches, loss_weights_, docs.positions,
                          docs.doc_starts);
    }
    return loss / static_cast<double>(micro_batches);
  }
  // The micro-batches through the pipeline's stages (its plan keeps all on
  // the device): the mean loss over them (the last stage's; 0 elsewhere).
  double run_pipeline(std::span<const int32_t> inputs, std::span<const int32_t> targets, size_t n,
                      int64_t micro_batches) {
    auto ids = [&](std::span<const int32_t> all, int64_t mb) { return all.subspan(static_cast<size_t>(mb) * n, n); };
    const CudaPipeline::Passes passes{
        .forward = [&](int64_t mb) { return eval_->run(ids(inputs, mb), ids(targets, mb), true); },
        .train = [&](int64_t mb, bool first, bool last) {
          return train_->run(ids(inputs, mb), ids(targets, mb), first, last);
        }};
    for (int64_t mb = 0; mb < micro_batches; ++mb) {
      check_step_ids(ids(inputs, mb), ids(targets, mb), weights_.config().vocab_size, n);
    }
    return pp_->run(micro_batches, true, passes) / static_cast<double>(micro_batches);
  }
  // The step as the planner prices a pipeline (train/pipeline_plan.h): the
  // slots of the slowest stage, with this rank's workspaces. Only a
  // prediction: where the planner's estimates do not fit a stage, this
  // rank's own step stands for it.
  double pipeline_prediction() {
    try {
      StepPlanRequest r = plan_request();
      const uint64_t reserved = r.device_reserved(*planned_.step);
      r.device_reserved = [reserved](const LlamaStep&) { return reserved; };
      r.stage = {};
      return plan_pipeline_step(r, options_.shard, pp_->stages()).step.plan.step_seconds;
    } catch (const Error& e) {
      log_warn("pipeline: no prediction of the whole step (" + std::string(e.what()) + ")");
      return planned_.plan.step_seconds;
    }
  }
  model::LlamaWeights& state_weights() { return tp_ ? tp_->pieces() : pp_ ? pp_->weights() : weights_; }
  AdamW& state_optimizer() { return tp_ ? tp_->piece_optimizer() : pp_ ? pp_->optimizer() : optimizer_; }
  model::LlamaStage stage() const { return pp_ ? pp_->stage() : model::LlamaStage{}; }
  model::LlamaContext context() const {
    const Communicator* cp = options_.context_parallel;
    return cp ? model::LlamaContext{.rank = cp->rank(), .ranks = cp->size()} : model::LlamaContext{};
  }
  // This rank's chunk of a micro-batch's sequence (batch 1 with --cp).
  // This rank's chunks of a micro-batch's sequence, in `buffer`.
  std::span<const int32_t> own_chunks(std::span<const int32_t> ids, std::vector<int32_t>& buffer) const {
    return model::take_context_chunks(context(), ids, buffer);
  }
  // The ranks the state is summed and sharded over.
  Communicator* replicas() const { return options_.context_parallel ? options_.replicas : options_.data_parallel; }
  int replica_count() const { return replicas() ? replicas()->size() : 1; }
  bool has_collectives() const { return tp_ || options_.context_parallel; }

  graph::TensorParallelism tensor_parallelism() const {
    if (!tp_) return {};
    return {.rank = tp_->group().rank(), .ranks = tp_->group().size(), .sequence_parallel = options_.sequence_parallel};
  }
  CudaStepOptions runner_options() const {
    CudaStepOptions s = step_options(options_);
    if (has_collectives()) s.collectives = &collectives_;
    return s;
  }

  // Data parallelism may shard the optimizer's state (train/step_plan.h);
  // every rank must take the same way, so sharded only where all can.
  void plan_sharding() {
    const int ranks = replica_count();
    planned_ = plan_data_parallel_step(plan_request(), options_.shard);
    // --shard auto keeps a tensor-parallel rank's state, and a pipeline's
    // with a tied table, at ZeRO-1 at most.
    if ((tp_ || (pp_ && pp_->tied())) && planned_.state.shard_gradients) {
      planned_ = plan_data_parallel_step(plan_request(), StateSharding::optimizer);
    }
    sharded_ = planned_.state.state_shards > 1;
    if (ranks == 1) return;
    // The ranks agree when their levels' sum squared is N times the sum of
    // their squares.
    const auto level = static_cast<double>(sharding_level(planned_.state));
    double sums[2] = {level, level * level};
    sum_over(*replicas(), sums);
    if (sums[0] * sums[0] == ranks * sums[1]) return;
    SPW_CHECK(options_.shard == StateSharding::automatic, "--shard " + std::string(enum_name(options_.shard)),
              "a rank's plan cannot keep its share of the training state on its device; --shard none lets it offload");
    sharded_ = false;
    planned_ = plan_data_parallel_step(plan_request(), StateSharding::none);
  }

  // Every context rank runs the plan of rank 0, so that all make the same
  // choices and their collectives meet; its own graph differs from that one
  // only in its chunks' positions, so the plan's places hold for it (and
  // its work is the same: each rank an early and a late chunk). Rank 0's
  // late chunk is the sequence's last, whose attention sees every key: the
  // largest kernel workspaces, which the plan reserves.
  void take_own_chunk_step() {
    if (options_.context_parallel) planned_.step = llama_step_for_context_rank(plan_request(), *planned_.step, context());
  }

  // How the state splits over the ranks: the planner's sharding, the
  // regions it gathers and reduces by (by layer where the gradient sums or
  // weights are sharded; else one).
  CudaTrainingState::Sharding sharding() const {
    CudaTrainingState::Sharding s;
    if (!sharded_) return s;
    s.over = replicas();
    s.gradients = planned_.state.shard_gradients;
    s.weights = planned_.state.shard_weights;
    const LlamaStep& step = *planned_.step;
    s.region_key = s.gradients ? llama_region_keys(step, weights_.config())
                               : std::vector<int>(step.model.parameters.size(), 0);
    return s;
  }

  StepPlanRequest plan_request() {
    MemorySpace& mem = device_->device_memory();
    StepPlanRequest r;
    r.config = weights_.config();
    r.batch = options_.batch;
    r.seq = options_.seq / context().ranks;
    r.context = {.rank = 0, .ranks = context().ranks};  // take_own_chunk_step
    r.micro_batches = std::max<int64_t>(1, options_.micro_batches);
    const KernelConfig& k = options_.kernels;
    if (k.projections != ProjectionMode::automatic) r.fused_projections = k.projections == ProjectionMode::fused;
    if (k.loss_chunk_rows >= 0) r.loss_chunk_rows = k.loss_chunk_rows;
    r.recompute = recompute_policy(options_.memory.recompute);
    r.bf16_moments = options_.memory.bf16_moments;
    r.weighted_loss = options_.weighted_loss;
    r.documents = options_.documents;
    r.offload = options_.memory.offload;
    r.device_budget = mem.budget();
    // --host-mem is the host's, shared evenly by its ranks, and a rank's
    // share is its whole process's: what it holds already (the caller's
    // masters and moments, CUDA's context, libraries, data) counts against
    // it. Without one: what it holds and 90% of what is still available.
    const auto ranks = static_cast<uint64_t>(std::max(1, options_.ranks_on_host));
    const uint64_t held = resident_host_bytes();
    r.host_budget = options_.memory.host_mem
                        ? options_.memory.host_mem / ranks
                        : held + static_cast<uint64_t>(0.9 * static_cast<double>(available_host_bytes())) / ranks;
    // The arrays the plan counts itself (adamw_state_spec: the caller's, or
    // a tp/pp rank's part of them); the rest of what is held is the runtime's.
    r.caller_moments = !state_optimizer().m.tensors().empty();
    uint64_t arrays = 0;
    for (const model::NamedTensor& t : state_weights().tensors()) {
      arrays += t.data.size() * (sizeof(float) + (r.caller_moments ? adamw_moment_bytes(false) : 0));
    }
    r.host_reserved = held > arrays ? held - arrays : 0;
    r.rates = plan::rates_for_gpu(gpu_);
    r.data_parallel = replica_count();
    r.tensor_parallel = tensor_parallelism();
    if (pp_) {
      r.stage = pp_->stage();
      r.pipeline_stages = pp_->stages();
    }
    // What a candidate's runners take (their workspaces), measured by making
    // them, and a little of the pool for the arena's fragmentation.
    r.device_reserved = [this, &mem](const LlamaStep& s) {
      const uint64_t before = mem.in_use();
      uint64_t taken = 0;
      {
        auto eval = eval_step(s);
        const KernelConfig& k = options_.kernels;
        Stream& compute = device_->stream(StreamKind::compute);
        const ops::CollectiveGroups* groups = has_collectives() ? &collectives_ : nullptr;
        exec::CudaNodeRunner train_runner(s.step.graph, mem, compute, k.deterministic, k.matmul_candidates,
                                          k.own_gemm, groups);
        exec::CudaNodeRunner eval_runner(eval->step.graph, mem, compute, k.deterministic, k.matmul_candidates,
                                         k.own_gemm, groups);
        taken = mem.in_use() - before;
      }
      const bool communicates = replica_count() > 1 || tp_ || pp_;
      const uint64_t in_flight = pp_ ? pp_->reserved_bytes(std::max<int64_t>(1, options_.micro_batches)) : 0;
      return device_reserve(before + taken + in_flight, mem.budget(), communicates);
    };
    return r;
  }

  std::unique_ptr<LlamaStep> eval_step(const LlamaStep& train) const {
    return build_llama_step(weights_.config(), options_.batch, options_.seq / context().ranks,
                            train.fused_projections,
                            {.backward = false, .recompute = graph::RecomputePolicy::none,
                             .loss_chunk_rows = train.loss_chunk_rows},
                            DType::bf16, false, false, tensor_parallelism(), stage(), context());
  }

  void make_runners() {
    const LlamaStep& step = *planned_.step;
    eval_graph_ = eval_step(step);
    io_.tokens = step.model.tokens;
    io_.targets = step.model.targets;
    io_.loss = step.model.loss;
    io_.loss_weights = step.model.loss_weights;
    io_.positions = step.model.positions;
    io_.doc_starts = step.model.doc_starts;
    StepIo eval_io = io_;
    eval_io.loss_weights = {};  // evaluation keeps the plain mean
    eval_io.positions = eval_io.doc_starts = {};  // over rows of one example each
    eval_io.tokens = eval_graph_->model.tokens;
    eval_io.targets = eval_graph_->model.targets;
    eval_io.loss = eval_graph_->model.loss;
    CudaStepOptions eval_options = runner_options();
    eval_options.cuda_graph = false;
    train_ = std::make_unique<CudaStep>(step.step.graph, io_, *device_, runner_options());
    eval_ = std::make_unique<CudaStep>(eval_graph_->step.graph, eval_io, *device_, eval_options);
  }

  // The training and evaluation programs, bound to the state. Evaluation
  // runs as training does: on one stream when nothing is copied, else under
  // a placement of its own in what the training step leaves (the two never
  // run at the same time).
  void make_executors() {
    const plan::TrainingPlan& p = planned_.plan;
    const LlamaStep& step = *planned_.step;
    if (p.all_on_device()) {
      train_->make_executor();
      eval_->make_executor();
    } else {
      const uint64_t pinned = p.placement.host_peak + p.placement.host_peak / 8 + (64ull << 20);
      // Pinning a hundred GiB takes minutes: say so before the wait.
      log_info("pinning " + format_bytes(pinned) + " of host memory for the offloaded values");
      host_pool_ = make_cuda_pool_space(device_name() + ":pinned_host", CudaPoolKind::pinned_host, options_.gpu_ordinal,
                                        pinned);
      train_->make_executor(p.placement, host_pool_.get());
      const graph::Graph& g = eval_graph_->step.graph;
      std::vector<bool> resident(g.values().size(), false);
      const graph::Value tokens = eval_graph_->model.tokens, targets = eval_graph_->model.targets;
      resident[static_cast<size_t>(tokens.id)] = resident[static_cast<size_t>(targets.id)] = true;
      if (p.weights_resident) {
        for (graph::Value w : eval_graph_->model.parameters) resident[static_cast<size_t>(w.id)] = true;
      }
      MemorySpace& mem = device_->device_memory();
      eval_->make_executor(plan::plan_gpu_placement(g, mem.budget() - mem.in_use() - mem.budget() / 100,
                                                    host_pool_->budget(), std::move(resident),
                                                    plan::rates_for_gpu(gpu_)),
                           host_pool_.get());
    }
    if (state_->gradients_sharded()) {
      std::vector<const LlamaStep*> over{&step};
      if (state_->weights_sharded()) over.push_back(eval_graph_.get());
      rings_ = std::make_unique<CudaShardRings>(*state_, over, *device_, *replicas());
      rings_->attach(0, *train_);
      if (state_->weights_sharded()) {
        rings_->attach(1, *eval_);
      } else {
        bind(*eval_, *eval_graph_, /*with_grads=*/false);
      }
    } else {
      bind(*train_, step, /*with_grads=*/true);
      bind(*eval_, *eval_graph_, /*with_grads=*/false);
    }
    if (pp_) {
      pp_->bind(train_->program(), step, true);
      pp_->bind(eval_->program(), *eval_graph_, false);
    }
    if (replica_count() > 1) {
      replica_sums_ = std::make_unique<ReplicaSums>(*state_, *device_, *replicas());
      Communicator* comm = replicas();
      auto bounded = [comm](Stream& stream) { comm->wait(stream); };
      train_->set_waiter(bounded);
      eval_->set_waiter(bounded);
      if (!train_->planned() && !rings_) replica_sums_->overlap(*train_, step);
    }
    std::vector<int> parameter_of(step.step.graph.values().size(), -1);
    for (size_t j = 0; j < step.model.parameters.size(); ++j) {
      parameter_of[static_cast<size_t>(step.step.grads[step.model.parameters[j]].id)] = static_cast<int>(j);
    }
    before_store_ = [this, parameter_of](graph::Value v, const void* sum, Stream& compute) {
      norm_->take_before_store(parameter_of[static_cast<size_t>(v.id)], sum, compute);
    };
  }

  // A stacked parameter starts where its first tensor does.
  void bind(CudaStep& s, const LlamaStep& step, bool with_grads) {
    for (size_t j = 0; j < step.model.parameters.size(); ++j) {
      const auto& first = state_->tensors()[static_cast<size_t>(step.model.parameter_parts[j].front())];
      s.program().bind(step.model.parameters[j], first.working);
      if (with_grads) s.program().bind(step.step.grads[step.model.parameters[j]], first.grad);
    }
  }

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::unique_ptr<Device> device_;
  std::string gpu_;
  StepIo io_;
  std::unique_ptr<PinnedBuffer> pinned_io_;
  PlannedStep planned_;
  std::unique_ptr<LlamaStep> eval_graph_;
  std::unique_ptr<CudaTrainingState> state_;
  std::unique_ptr<CudaGradNorm> norm_;
  std::unique_ptr<CudaTensorParallel> tp_;       // --tp: this rank's pieces of the state
  std::unique_ptr<CudaPipeline> pp_;             // --pp: this rank's stage
  std::unique_ptr<CudaGradNorm> uncounted_norm_;  // tensors another rank counts in the norm
  ops::CollectiveGroups collectives_;            // --tp: the steps' collectives
  std::unique_ptr<MemorySpace> host_pool_;
  std::unique_ptr<CudaStep> train_, eval_;
  std::unique_ptr<CudaAdamW> adamw_;
  std::unique_ptr<CudaShardRings> rings_;  // sharded gradient sums (and weights)
  std::unique_ptr<ReplicaSums> replica_sums_;
  exec::PlannedExecutor::BeforeStore before_store_;
  std::unique_ptr<Event> grads_ready_, grads_summed_;  // --tp: its whole tensors' sums
  static constexpr uint64_t kScalarBytes = 256;
  bool sharded_ = false;
  std::vector<float> loss_weights_;  // a micro-batch's, with the weighted loss
  std::vector<int32_t> context_inputs_, context_targets_;  // with --cp: this rank's chunks of a micro-batch
  double predicted_step_ = 0;
  void* scalars_ = nullptr;  // room for sum_over_ranks's values on the device
  bool host_current_ = false;  // the caller's arrays hold the engine's state (sync_to_host)
  bool profiling_ = false;
  int profiled_steps_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CudaEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
