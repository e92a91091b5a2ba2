// The GPU engine of LoRA and QLoRA fine-tuning: the same step graph the CPU
// engine runs (the model's weights frozen inputs, the adapters' products
// added to the targeted projections), in bf16 on one stream, replayed as a
// CUDA graph; the state all on the device (train/cuda/cuda_lora_state.h),
// its size checked against the budget before anything is taken
// (train/lora_plan.h). AdamW updates the adapters alone, in fp32 masters.
// With data parallelism the adapters are replicated and their gradient
// sums summed over the ranks before the update.
//
// Gradients: the first micro-batch of an optimizer step writes the sums,
// every later one adds into them, and AdamW reads them with one scale that
// takes the mean over micro-batches and ranks and clips, as the GPU engine
// of every weight does.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "model/qlora.h"
#include "ops/attention.h"
#include "train/cuda/cuda_lora_state.h"
#include "train/cuda/cuda_step.h"
#include "train/device_reserve.h"
#include "train/engine.h"
#include "train/lora_plan.h"
#include "train/loss_weights.h"

namespace spillway::train {

namespace {

class CudaLoraEngine final : public Engine {
 public:
  CudaLoraEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights), optimizer_(optimizer), options_(o) {
    check_gpu_lora_options(o);
    SPW_CHECK(cuda_device_count() > 0, "--device cuda", "no CUDA GPU is visible to this process");
    const int gpu = o.gpu_ordinal;
    SPW_CHECK(gpu >= 0 && gpu < cuda_device_count(), "--device cuda", "GPU ", gpu, " is not visible (",
              cuda_device_count(), " are)");
    SPW_CUDA(cudaSetDevice(gpu));
    device_ = make_cuda_device(gpu, o.memory.device_mem ? o.memory.device_mem : MemorySpace::kUnlimited, 64ull << 20);
    gpu_ = cuda_device_name(gpu);
    const model::LoraConfig& lora = o.lora->adapters.lora();
    // QLoRA: the device keeps the targeted weights' codes and scales;
    // checkpoints write the values they were made from (model/qlora.h: a
    // resumed run quantizes those again, alike), which the host keeps, or
    // where the base was quantized as it was made, makes or reads again.
    quantized_ = o.lora_quantized ? take_quantized_base(o, weights_.config())
                                  : model::quantize_lora_base(weights_, lora, o.lora_base, false);
    make_io();
    // The steps' runners take their workspaces as they are made: the plan
    // is shown what they took, with what the pool holds already.
    LoraStepPlan plan = plan_lora_step(
        {.config = weights_.config(),
         .lora = lora,
         .base = o.lora_base,
         .batch = o.batch,
         .seq = o.seq,
         .weighted_loss = o.weighted_loss,
         .documents = o.documents,
         .recompute = o.memory.recompute,
         .budget = device_->device_memory().budget()},
        [this](const LlamaStep& train, const LlamaStep& eval) {
          make_steps(train, eval);
          return device_->device_memory().in_use();
        });
    train_graph_ = std::move(plan.train);
    eval_graph_ = std::move(plan.eval);
    need_ = plan.need;
    recomputed_ = plan.recomputed;
    check_lora_fits(need_, device_->device_memory().budget(), o.lora_base, recomputed_);
    const LoraBaseLayout base = lora_base_layout(weights_.config(), lora, o.lora_base);
    const LoraAdapterLayout adapters = lora_adapter_layout(weights_.config(), lora);
    state_ = std::make_unique<CudaLoraState>(weights_, quantized_, *o.lora, base, adapters, *device_);
    train_->make_executor();
    eval_->make_executor();
    state_->bind(train_->program(), *train_graph_, /*with_grads=*/true);
    state_->bind(eval_->program(), *eval_graph_, /*with_grads=*/false);
    // NF4 weights are made in the scratch just before the nodes that read
    // them, on every micro-batch (and captured with it).
    for (auto [step, graph] : {std::pair{train_.get(), train_graph_.get()}, std::pair{eval_.get(), eval_graph_.get()}}) {
      CudaStep::MicroBatchHooks hooks;
      hooks.before_node = state_->dequantizer(*graph);
      hooks.every_micro_batch = true;
      if (hooks.before_node) step->set_micro_batch_hooks(std::move(hooks));
    }
  }

  ~CudaLoraEngine() override {
    device_->synchronize_at_end("GPU LoRA engine");
    train_.reset();
    eval_.reset();
    state_.reset();
  }

  std::string description() const override {
    const model::LoraWeights& a = options_.lora->adapters;
    std::string d = device_name() + " (" + (train_ ? train_->runner().attention_summary() : "finished") +
                    "; LoRA rank " + std::to_string(a.lora().rank) + " on " + std::to_string(a.tensors().size() / 2) +
                    " projections (" + std::to_string(a.numel()) + " trained parameters, the weights frozen in bf16)";
    if (!quantized_.tensors.empty()) d += "; " + quantized_.describe();
    if (recomputed_) d += "; recomputation: layers";
    if (data_parallel_size(options_) > 1) {
      d += "; adapters replicated over " + std::to_string(data_parallel_size(options_)) + " ranks";
    }
    return d + "; device memory: " + need_.describe(options_.lora_base) + ")";
  }
  std::string device_name() const override { return "cuda:" + std::to_string(options_.gpu_ordinal) + " " + gpu_; }
  bool on_gpu() const override { return true; }

  using Engine::train_step;
  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                       const PackedDocuments& documents, int64_t micro_batches, double lr) override {
    SPW_CHECK(train_ != nullptr, "GPU LoRA engine", "a training step after finish()");
    const size_t n = micro_batch_tokens(options_, inputs, targets, documents, micro_batches);
    const int ranks = data_parallel_size(options_);
    const double token_weight =
        options_.weighted_loss ? step_token_weight(*this, targets, micro_batches, ranks) : 0.0;
    StepStats stats;
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      const auto x = inputs.subspan(micro * n, n), y = targets.subspan(micro * n, n);
      check_step_ids(x, y, weights_.config().vocab_size, n);
      const PackedDocuments docs = documents.subspan(micro * n, n);
      // The kernels rely on contiguous documents and cannot throw.
      if (!docs.empty()) ops::check_doc_starts(docs.doc_starts.data(), options_.batch, options_.seq, "doc_starts");
      if (options_.weighted_loss) fill_loss_weights(y, token_weight, loss_weights_);
      train_->set_dropout_key(micro_batch_dropout_key(options_, optimizer_.steps_taken, micro_batches, micro));
      stats.loss += train_->run(x, y, micro == 0, micro + 1 == micro_batches, loss_weights_, docs.positions,
                                docs.doc_starts);
    }
    stats.loss /= static_cast<double>(micro_batches);
    const auto optimizer_start = std::chrono::steady_clock::now();
    if (ranks > 1) {
      state_->sum_grads_over(*options_.data_parallel, device_->stream(StreamKind::comm));
      sum_over_ranks(std::span<double>(&stats.loss, 1));
      stats.loss /= ranks;
    }
    const double scale = accumulated_grad_scale(std::sqrt(state_->grad_sum_of_squares()), micro_batches * ranks,
                                                options_.grad_clip, &stats.grad_norm);
    stats.updated = update_is_finite(stats);
    if (stats.updated) {
      ++optimizer_.steps_taken;
      state_->update(optimizer_, lr, scale);
      host_current_ = false;
    }
    if (profiling_) {
      optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
      ++profiled_steps_;
    }
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    SPW_CHECK(eval_ != nullptr, "GPU LoRA engine", "an evaluation after finish()");
    check_step_ids(inputs, targets, weights_.config().vocab_size, static_cast<size_t>(options_.batch * options_.seq));
    return eval_->run(inputs, targets, true);
  }

  // `values` summed over the data-parallel ranks, through the device.
  void sum_over_ranks(std::span<double> values) override {
    Communicator* dp = options_.data_parallel;
    if (!dp) return;
    const uint64_t bytes = values.size_bytes();
    SPW_CHECK(bytes <= kScalarBytes, "data parallelism", "summing ", values.size(), " values over the ranks at once");
    Stream& comm = device_->stream(StreamKind::comm);
    device_->copy_async(scalars_, values.data(), bytes, comm);
    dp->all_reduce_sum(scalars_, values.size(), DType::f64, comm);
    device_->copy_async(values.data(), scalars_, bytes, comm);
    dp->wait(comm);
  }

  // The host's LoRA state (the trainer's, which checkpoints write) made the
  // device's; the frozen weights are on the host already.
  void sync_to_host() override {
    if (host_current_) return;
    state_->download(*options_.lora);
    host_current_ = true;
  }
  // The base as it came (with QLoRA, the values its NF4 codes were made
  // from); LoRA keeps no moments of it.
  void read_state(StatePart part, size_t i, std::span<float> out) override {
    SPW_CHECK(part == StatePart::master, "GPU LoRA engine",
              "the frozen weights have no moments; a LoRA checkpoint writes the adapters'");
    const std::vector<float>& data = weights_.tensors().at(i).data;
    if (data.empty() && quantized_.original && weights_.tensors()[i].shape.numel() > 0) {
      SPW_CHECK(static_cast<int64_t>(out.size()) == weights_.tensors()[i].shape.numel(), weights_.tensors()[i].name,
                "has ", weights_.tensors()[i].shape.numel(), " values, not ", out.size());
      return quantized_.original(i, out);
    }
    SPW_CHECK(data.size() == out.size(), weights_.tensors()[i].name, "holds ", data.size(), " values, not ",
              out.size());
    if (out.data() != data.data()) std::copy(data.begin(), data.end(), out.begin());  // the trainer reads in place
  }
  void finish() override {
    sync_to_host();
    device_->synchronize();
    train_.reset();
    eval_.reset();
  }
  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }
  bool replays_cuda_graph() const override { return train_ && train_->replays(); }

  void set_profiling(bool on) override {
    profiling_ = on;
    train_->set_profiling(on);
  }
  std::string profile_report() const override {
    return op_time_report(train_->graph(), train_->node_seconds(), std::max(1, profiled_steps_), optimizer_seconds_);
  }

 private:
  // The device buffers every step binds its ids (and weights, positions and
  // document starts) to, and the pinned one they go through.
  void make_io() {
    MemorySpace& mem = device_->device_memory();
    const auto tokens = static_cast<uint64_t>(options_.batch * options_.seq);
    StepIoBuffers b = make_step_io(mem, tokens, options_.weighted_loss, options_.documents,
                                   options_.lora->adapters.lora().dropout > 0);
    io_ = b.io;
    pinned_io_ = std::move(b.pinned);
    if (options_.weighted_loss) loss_weights_.resize(tokens);
    if (options_.data_parallel) scalars_ = mem.allocate(kScalarBytes, "sums over ranks");
  }

  // The steps of these graphs, whose runners take their workspaces now
  // (those of steps made before go first).
  void make_steps(const LlamaStep& train, const LlamaStep& eval) {
    train_.reset();
    eval_.reset();
    StepIo train_io = io_;
    train_io.tokens = train.model.tokens;
    train_io.targets = train.model.targets;
    train_io.loss = train.model.loss;
    train_io.loss_weights = train.model.loss_weights;
    train_io.positions = train.model.positions;
    train_io.doc_starts = train.model.doc_starts;
    train_io.dropout_key = train.model.dropout_key;
    StepIo eval_io = io_;  // the plain mean, over rows of one example each
    eval_io.tokens = eval.model.tokens;
    eval_io.targets = eval.model.targets;
    eval_io.loss = eval.model.loss;
    const KernelConfig& k = options_.kernels;
    const CudaStepOptions so{.deterministic = k.deterministic,
                             .matmul_candidates = k.matmul_candidates,
                             .own_gemm = k.own_gemm,
                             .cuda_graph = k.cuda_graph};
    CudaStepOptions eval_so = so;
    eval_so.cuda_graph = false;
    auto made = std::make_unique<CudaStep>(train.step.graph, train_io, *device_, so);
    eval_ = std::make_unique<CudaStep>(eval.step.graph, eval_io, *device_, eval_so);
    train_ = std::move(made);
  }

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::unique_ptr<Device> device_;
  std::string gpu_;
  model::QuantizedBase quantized_;  // with QLoRA: the targeted projections, NF4 (the host's copy)
  StepIo io_;
  std::unique_ptr<PinnedBuffer> pinned_io_;
  std::unique_ptr<LlamaStep> train_graph_, eval_graph_;
  std::unique_ptr<CudaStep> train_, eval_;
  std::unique_ptr<CudaLoraState> state_;
  LoraDeviceNeed need_;
  static constexpr uint64_t kScalarBytes = 256;
  void* scalars_ = nullptr;  // room for sum_over_ranks's values on the device
  std::vector<float> loss_weights_;  // a micro-batch's, with the weighted loss
  bool recomputed_ = false;
  bool host_current_ = true;  // the trainer's LoRA state holds the device's
  bool profiling_ = false;
  int profiled_steps_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_lora_engine(model::LlamaWeights& weights, AdamW& optimizer,
                                              const EngineOptions& options) {
  return std::make_unique<CudaLoraEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
