// The CUDA engine: the step graph in bf16 on one stream; fp32 master
// weights, fp32 gradients and AdamW moments (fp32, or bf16 with
// EngineOptions::bf16_moments) stay on the GPU, and the optimizer writes the
// bf16 working copy the next step's graph reads. The master is held as that
// working copy plus a 16-bit remainder (ops/master_split.h): every bit of it,
// in 2 bytes a parameter beside the working copy instead of 4.
//
// Gradients: one fp32 buffer per parameter, carved from one allocation and
// bound to the step graph's accumulated gradients
// (graph::GradientOutput::accumulated). The first micro-batch of an optimizer
// step writes them (CudaNodeRunner::set_overwrite_accumulated: no zeroing
// pass, matmul beta = 0), every later one adds into them (beta = 1,
// accumulating embedding and RMSNorm kernels), and AdamW reads the sum with
// one scale that takes the mean over micro-batches and clips: no second
// gradient set, no separate add or scale kernels.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "base/bytes.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "exec/cuda/cuda_node_runner.h"
#include "graph/autodiff.h"
#include "graph/fuse_matmul_rope.h"
#include "graph/fuse_matmul_swiglu.h"
#include "graph/fuse_step.h"
#include "model/llama_graph.h"
#include "ops/adamw.h"
#include "ops/master_split.h"
#include "ops/grad_norm.h"
#include "train/cuda/cuda_engine_common.h"
#include "train/engine.h"
#include "train/optimizer.h"

namespace spillway::train {

namespace {

// A compiled step: graph, its runner and executor, bound to the engine's
// bf16 weights; tokens and targets are bound per micro-batch.
struct CudaStep {
  graph::Graph graph;
  model::LlamaGraph model;
  graph::Gradients grads;
  std::unique_ptr<exec::CudaNodeRunner> runner;
  std::unique_ptr<exec::Executor> executor;
  // With EngineOptions::cuda_graph: the step captured once (after a first
  // eager run has made every cuBLASLt plan and cuDNN graph) and replayed.
  // The executor allocates the same addresses in the same order every run,
  // so the captured pointers stay valid. One capture for a first micro-batch
  // (which writes the gradients) and one for the others (which add).
  int eager_runs = 0;
  cudaGraphExec_t replay[2] = {nullptr, nullptr};
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights), optimizer_(optimizer), options_(o) {
    device_ = open_cuda_device(o, 256ull << 20);
    stream_ = as_cuda_stream(device_->stream(StreamKind::compute)).handle();
    name_ = cuda_engine_name(0);
    MemorySpace& mem = device_->device_memory();

    for (const auto& t : weights_.tensors()) params_.push_back({.n = t.shape.numel(), .decay = t.shape.rank() >= 2});
    // The step graphs' parameters, each stacking one or more tensors.
    {
      graph::Graph g;
      graph::Builder b(g, DType::bf16);
      parts_ = model::build_llama(b, weights_.config(), 1, 1, graph_options()).parameter_parts;
    }
    // Every per-tensor array (working copy, master remainder, gradient,
    // moments) has one layout. The tensors a graph parameter stacks lie back
    // to back, so its matmul reads (and its gradient's matmul writes) them
    // as one matrix, each stack 256-byte aligned (cuBLASLt's plans assume
    // it). The stacks that take weight decay come first, so AdamW updates
    // every parameter in two launches, not one per tensor (147 for the 1B
    // model, most of them too small to fill the GPU); the gaps between
    // stacks go through it too, zero, which an update leaves zero.
    std::vector<int64_t> numel;
    for (const Param& p : params_) numel.push_back(p.n);
    std::vector<std::vector<int>> stacks, plain;
    for (const auto& stack : parts_) {
      const bool decay = params_[static_cast<size_t>(stack.front())].decay;
      for (int t : stack) {
        SPW_CHECK(params_[static_cast<size_t>(t)].decay == decay, weights_.tensors()[static_cast<size_t>(t)].name,
                  "is stacked with tensors of the other weight-decay setting");
      }
      (decay ? stacks : plain).push_back(stack);
    }
    decayed_elements_ = model::stacked_offsets(stacks, numel, kStackAlign).back();
    stacks.insert(stacks.end(), plain.begin(), plain.end());
    const std::vector<uint64_t> offsets = model::stacked_offsets(stacks, numel, kStackAlign);
    elements_ = offsets.back();
    const uint64_t moment_bytes = o.memory.bf16_moments ? 2 : 4;
    working_ = static_cast<bf16*>(mem.allocate(elements_ * 2, "weights (bf16)"));
    remainder_ = static_cast<uint16_t*>(mem.allocate(elements_ * 2, "fp32 master, low halves"));
    grads_ = static_cast<float*>(mem.allocate(elements_ * 4, "gradients (fp32)"));
    m_ = static_cast<char*>(mem.allocate(elements_ * moment_bytes, "AdamW m"));
    v_ = static_cast<char*>(mem.allocate(elements_ * moment_bytes, "AdamW v"));
    for (const auto& [array, bytes] : {std::pair<void*, uint64_t>{working_, 2}, {remainder_, 2}, {grads_, 4},
                                       {m_, moment_bytes}, {v_, moment_bytes}}) {
      SPW_CUDA(cudaMemsetAsync(array, 0, elements_ * bytes, stream_));
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].working = working_ + offsets[i];
      params_[i].remainder = remainder_ + offsets[i];
      params_[i].grad = grads_ + offsets[i];
      params_[i].m = m_ + offsets[i] * moment_bytes;
      params_[i].v = v_ + offsets[i] * moment_bytes;
    }
    upload_state();

    const uint64_t tokens = static_cast<uint64_t>(o.batch * o.seq);
    tokens_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "tokens"));
    targets_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "targets"));
    // The gradients never move: the norm's list of them is laid out once.
    std::vector<ops::SquaresTensor> grad_list;
    for (const Param& p : params_) grad_list.push_back({p.grad, p.n});
    norm_grads_ = ops::SumOfSquaresList(
        grad_list, mem.allocate(ops::SumOfSquaresList::device_bytes(grad_list), "gradient norm"), stream_);
    norm_out_ = static_cast<double*>(mem.allocate(sizeof(double), "gradient norm (sum)"));

    build(train_, /*with_backward=*/true);
    build(eval_, /*with_backward=*/false);
  }

  ~CudaEngine() override {
    SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
    for (CudaStep* s : {&train_, &eval_}) {
      for (cudaGraphExec_t r : s->replay) {
        if (r) SPW_CUDA_WARN(cudaGraphExecDestroy(r));
      }
      s->executor.reset();
      s->runner.reset();
    }
  }

  std::string description() const override {
    const std::string gemm = train_.runner->gemm_summary();
    return name_ + " (" + train_.runner->attention_summary() + (gemm.empty() ? "" : "; " + gemm) +
           (options_.memory.bf16_moments ? "; bf16 AdamW moments" : "") + ")";
  }

  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) override {
    const size_t n = micro_batch_tokens(options_, inputs, targets, micro_batches);
    StepStats stats;
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      stats.loss += run_step(train_, inputs.subspan(micro * n, n), targets.subspan(micro * n, n), micro == 0) /
                    static_cast<double>(micro_batches);
    }
    const auto optimizer_start = std::chrono::steady_clock::now();
    // One call for every gradient, bit for bit the planned engine's per-tensor
    // parts added in parameter order.
    ops::sum_of_squares_many_cuda(norm_grads_, norm_out_, stream_);
    double sum_squares = 0;
    SPW_CUDA(cudaMemcpyAsync(&sum_squares, norm_out_, sizeof sum_squares, cudaMemcpyDeviceToHost, stream_));
    SPW_CUDA(cudaStreamSynchronize(stream_));
    // The mean over micro-batches and the clipping, folded into AdamW.
    const double grad_scale =
        accumulated_grad_scale(std::sqrt(sum_squares), micro_batches, options_.grad_clip, &stats.grad_norm);
    ++optimizer_.steps_taken;
    update(0, decayed_elements_, optimizer_.hyper(lr, grad_scale, /*matrix=*/true));
    update(decayed_elements_, elements_ - decayed_elements_, optimizer_.hyper(lr, grad_scale, /*matrix=*/false));
    SPW_CUDA(cudaStreamSynchronize(stream_));
    if (profiling_) {
      optimizer_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
      ++profiled_steps_;
    }
    host_current_ = false;
    return stats;
  }

  double eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) override {
    return run_step(eval_, inputs, targets);
  }

  // bf16 moments are widened into the caller's fp32 ones, made if the
  // caller had none.
  void sync_to_host() override {
    if (host_current_) return;
    if (optimizer_.m.tensors().empty()) {
      optimizer_.m = model::LlamaWeights::zeros(weights_.config());
      optimizer_.v = model::LlamaWeights::zeros(weights_.config());
    }
    std::vector<bf16> narrow, working;
    std::vector<uint16_t> remainder;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& p = params_[i];
      const size_t bytes = static_cast<size_t>(p.n) * 4;
      working.resize(static_cast<size_t>(p.n));
      remainder.resize(static_cast<size_t>(p.n));
      SPW_CUDA(cudaMemcpyAsync(working.data(), p.working, bytes / 2, cudaMemcpyDeviceToHost, stream_));
      SPW_CUDA(cudaMemcpyAsync(remainder.data(), p.remainder, bytes / 2, cudaMemcpyDeviceToHost, stream_));
      SPW_CUDA(cudaStreamSynchronize(stream_));
      ops::join_master(working.data(), remainder.data(), weights_.tensors()[i].data.data(), p.n);
      for (auto [moment, host] : {std::pair{p.m, &optimizer_.m}, std::pair{p.v, &optimizer_.v}}) {
        float* to = host->tensors()[i].data.data();
        if (!options_.memory.bf16_moments) {
          SPW_CUDA(cudaMemcpyAsync(to, moment, bytes, cudaMemcpyDeviceToHost, stream_));
          continue;
        }
        narrow.resize(static_cast<size_t>(p.n));
        SPW_CUDA(cudaMemcpyAsync(narrow.data(), moment, bytes / 2, cudaMemcpyDeviceToHost, stream_));
        SPW_CUDA(cudaStreamSynchronize(stream_));
        for (size_t j = 0; j < narrow.size(); ++j) to[j] = to_float(narrow[j]);
      }
    }
    SPW_CUDA(cudaStreamSynchronize(stream_));
    host_current_ = true;
  }

  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }
  bool replays_cuda_graph() const override { return options_.kernels.cuda_graph; }
  bool fused_projections() const override { return train::fused_projections(options_, /*planned_engine=*/false); }

  void set_profiling(bool on) override {
    profiling_ = on;
    static_cast<exec::Executor*>(train_.executor.get())->set_profiling(on);
  }
  std::string profile_report() const override {
    const auto& seconds = static_cast<const exec::Executor*>(train_.executor.get())->node_seconds();
    return op_time_report(train_.graph, seconds, std::max(1, profiled_steps_), optimizer_seconds_);
  }

 private:
  struct Param {
    int64_t n = 0;
    bf16* working = nullptr;     // the master's bf16 rounding, which the step reads
    uint16_t* remainder = nullptr;  // the rest of the fp32 master (ops/master_split.h)
    void *m = nullptr, *v = nullptr;  // AdamW moments: fp32, or bf16 with bf16_moments
    float* grad = nullptr;  // the sum of this optimizer step's micro-batch gradients
    bool decay = false;
  };

  // AdamW over elements [first, first + n) of the per-tensor arrays.
  void update(uint64_t first, uint64_t n, const ops::AdamWHyper& hp) {
    const auto count = static_cast<int64_t>(n);
    if (options_.memory.bf16_moments) {
      ops::adamw_update_split_bf16_moments_cuda(working_ + first, remainder_ + first, grads_ + first,
                                                reinterpret_cast<bf16*>(m_) + first,
                                                reinterpret_cast<bf16*>(v_) + first, count, hp, stream_);
    } else {
      ops::adamw_update_split_cuda(working_ + first, remainder_ + first, grads_ + first,
                                   reinterpret_cast<float*>(m_) + first, reinterpret_cast<float*>(v_) + first, count,
                                   hp, stream_);
    }
  }

  // bf16 moments start from the caller's fp32 ones rounded (a resumed run),
  // or stay as allocated, zero; fp32 moments are the caller's, made zero if
  // it had none.
  void upload_state() {
    const bool have_moments = !optimizer_.m.tensors().empty();
    if (!have_moments && !options_.memory.bf16_moments) optimizer_ = AdamW(weights_.config());
    std::vector<bf16> narrow, working;
    std::vector<uint16_t> remainder;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Param& p = params_[i];
      const size_t bytes = static_cast<size_t>(p.n) * 4;
      SPW_CUDA(cudaStreamSynchronize(stream_));  // `working` and `remainder` are reused
      working.resize(static_cast<size_t>(p.n));
      remainder.resize(static_cast<size_t>(p.n));
      ops::split_master(weights_.tensors()[i].data.data(), working.data(), remainder.data(), p.n);
      SPW_CUDA(cudaMemcpyAsync(p.working, working.data(), bytes / 2, cudaMemcpyHostToDevice, stream_));
      SPW_CUDA(cudaMemcpyAsync(p.remainder, remainder.data(), bytes / 2, cudaMemcpyHostToDevice, stream_));
      for (auto [moment, host] : {std::pair{p.m, &optimizer_.m}, std::pair{p.v, &optimizer_.v}}) {
        if (!options_.memory.bf16_moments) {
          SPW_CUDA(cudaMemcpyAsync(moment, host->tensors()[i].data.data(), bytes, cudaMemcpyHostToDevice, stream_));
        } else if (have_moments) {
          const float* from = host->tensors()[i].data.data();
          SPW_CUDA(cudaStreamSynchronize(stream_));  // `narrow` is reused
          narrow.resize(static_cast<size_t>(p.n));
          for (size_t j = 0; j < narrow.size(); ++j) narrow[j] = to_bf16(from[j]);
          SPW_CUDA(cudaMemcpyAsync(moment, narrow.data(), bytes / 2, cudaMemcpyHostToDevice, stream_));
        }
      }
    }
    SPW_CUDA(cudaStreamSynchronize(stream_));
  }

  model::LlamaGraphOptions graph_options() const { return {.fused_projections = fused_projections()}; }

  void build(CudaStep& s, bool with_backward) {
    graph::Builder b(s.graph, DType::bf16);
    s.model = model::build_llama(b, weights_.config(), options_.batch, options_.seq, graph_options());
    s.graph.mark_output(s.model.loss);
    if (with_backward) {
      s.grads = graph::append_backward(b, s.model.loss, s.model.parameters, graph::GradientOutput::accumulated);
    }
    s.graph = graph::fuse_matmul_rope(graph::fuse_matmul_swiglu(graph::fuse_step(s.graph)).graph).graph;
    MemorySpace& mem = device_->device_memory();
    s.runner = std::make_unique<exec::CudaNodeRunner>(s.graph, mem, stream_, options_.kernels.deterministic,
                                                      options_.kernels.matmul_candidates, options_.kernels.own_gemm);
    // The executor keeps the gradients bound for the whole step.
    s.runner->set_tied_gradient_in_place(true);
    s.executor = std::make_unique<exec::Executor>(s.graph, mem, *s.runner);
    // A stacked parameter starts where its first tensor does.
    for (size_t i = 0; i < s.model.parameters.size(); ++i) {
      const Param& first = params_[static_cast<size_t>(s.model.parameter_parts[i].front())];
      s.executor->bind(s.model.parameters[i], first.working);
      if (with_backward) s.executor->bind(s.grads[s.model.parameters[i]], first.grad);
    }
    s.executor->bind(s.model.tokens, tokens_);
    s.executor->bind(s.model.targets, targets_);
  }

  // `first`: the first micro-batch of an optimizer step, which writes the
  // gradient buffers instead of adding into them.
  double run_step(CudaStep& s, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                  bool first = true) {
    check_token_ids(inputs, targets, weights_.config().vocab_size,
                    static_cast<size_t>(options_.batch * options_.seq));
    SPW_CUDA(cudaMemcpyAsync(tokens_, inputs.data(), inputs.size_bytes(), cudaMemcpyHostToDevice, stream_));
    SPW_CUDA(cudaMemcpyAsync(targets_, targets.data(), targets.size_bytes(), cudaMemcpyHostToDevice, stream_));
    s.runner->set_overwrite_accumulated(first);
    cudaGraphExec_t& replay = s.replay[first ? 0 : 1];
    if (replay && !profiling_) {
      SPW_CUDA(cudaGraphLaunch(replay, stream_));
    } else if (options_.kernels.cuda_graph && !profiling_ && &s == &train_ && s.eager_runs > 0) {
      capture(s, replay);
    } else {
      s.executor->run();
      ++s.eager_runs;
    }
    float loss = 0;
    SPW_CUDA(cudaMemcpyAsync(&loss, s.executor->data(s.model.loss), sizeof loss, cudaMemcpyDeviceToHost, stream_));
    SPW_CUDA(cudaStreamSynchronize(stream_));
    return loss;
  }

  // Records one step into a CUDA graph and replays it from now on; a step
  // that cannot be captured (a library call that refuses capture) runs
  // eagerly and stays eager, with a warning.
  void capture(CudaStep& s, cudaGraphExec_t& replay) {
    cudaGraph_t graph = nullptr;
    try {
      SPW_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      s.executor->run();
      SPW_CUDA(cudaStreamEndCapture(stream_, &graph));
      SPW_CUDA(cudaGraphInstantiate(&replay, graph, 0));
      SPW_CUDA(cudaGraphDestroy(graph));
    } catch (const Error& e) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(stream_, &partial);
        graph = graph ? graph : partial;
      }
      if (graph) (void)cudaGraphDestroy(graph);
      replay = nullptr;
      (void)cudaGetLastError();
      log_warn(std::string("CUDA graph capture failed, the step stays eager: ") + e.what());
      options_.kernels.cuda_graph = false;
      s.executor->run();
      return;
    }
    SPW_CUDA(cudaGraphLaunch(replay, stream_));
  }

  model::LlamaWeights& weights_;
  AdamW& optimizer_;
  EngineOptions options_;
  std::unique_ptr<Device> device_;
  cudaStream_t stream_ = nullptr;
  std::string name_;
  std::vector<Param> params_;
  int32_t* tokens_ = nullptr;
  int32_t* targets_ = nullptr;
  std::vector<std::vector<int>> parts_;  // the tensors each graph parameter stacks (LlamaGraph::parameter_parts)
  // Every tensor's working copy, master remainder, gradient and moments
  // (Param's pointers point into these), in one layout of elements_: the
  // weight-decayed stacks in [0, decayed_elements_), the rest after.
  uint64_t elements_ = 0, decayed_elements_ = 0;
  bf16* working_ = nullptr;
  uint16_t* remainder_ = nullptr;
  float* grads_ = nullptr;
  char *m_ = nullptr, *v_ = nullptr;  // fp32, or bf16 with bf16_moments
  ops::SumOfSquaresList norm_grads_;  // every Param::grad, in order
  double* norm_out_ = nullptr;
  CudaStep train_, eval_;
  bool host_current_ = true;
  bool profiling_ = false;
  int profiled_steps_ = 0;
  double optimizer_seconds_ = 0;
};

}  // namespace

std::unique_ptr<Engine> make_cuda_engine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& options) {
  return std::make_unique<CudaEngine>(weights, optimizer, options);
}

}  // namespace spillway::train
