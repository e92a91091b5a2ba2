// The CUDA engine: the step graph in bf16 on one stream; fp32 master
// weights, fp32 gradients and fp32 AdamW moments stay on the GPU, and the
// optimizer writes the bf16 working copy the next step's graph reads.
//
// Gradients: one fp32 buffer per parameter, carved from one allocation and
// bound to the step graph's accumulated gradients
// (graph::GradientOutput::accumulated). The buffers are zeroed once per
// optimizer step, every micro-batch's backward adds into them (matmul beta =
// 1, accumulating embedding and RMSNorm kernels), and AdamW reads the sum
// with one scale that takes the mean over micro-batches and clips: no second
// gradient set, no separate add or scale kernels.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "base/bytes.h"
#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_device.h"
#include "exec/cuda/cuda_node_runner.h"
#include "graph/autodiff.h"
#include "graph/fuse_step.h"
#include "model/llama_graph.h"
#include "ops/adamw.h"
#include "ops/cast.h"
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
  // so the captured pointers stay valid.
  int eager_runs = 0;
  cudaGraphExec_t replay = nullptr;
};

class CudaEngine final : public Engine {
 public:
  CudaEngine(model::LlamaWeights& weights, AdamW& optimizer, const EngineOptions& o)
      : weights_(weights), optimizer_(optimizer), options_(o) {
    device_ = open_cuda_device(o, 256ull << 20);
    stream_ = as_cuda_stream(device_->stream(StreamKind::compute)).handle();
    name_ = cuda_engine_name(0);
    MemorySpace& mem = device_->device_memory();

    // Parameters: fp32 master, bf16 working copy, AdamW moments.
    for (const auto& t : weights_.tensors()) {
      const uint64_t n = static_cast<uint64_t>(t.shape.numel());
      Param p;
      p.n = static_cast<int64_t>(n);
      p.master = static_cast<float*>(mem.allocate(n * 4, t.name + " (fp32 master)"));
      p.working = static_cast<bf16*>(mem.allocate(n * 2, t.name + " (bf16)"));
      p.m = static_cast<float*>(mem.allocate(n * 4, t.name + " (AdamW m)"));
      p.v = static_cast<float*>(mem.allocate(n * 4, t.name + " (AdamW v)"));
      p.decay = t.shape.rank() >= 2;
      params_.push_back(p);
    }
    upload_state();

    // Gradients, each 256-byte aligned (cuBLASLt's plans assume it).
    for (const Param& p : params_) grad_bytes_ += align_up(static_cast<uint64_t>(p.n) * 4, 256);
    grads_ = static_cast<char*>(mem.allocate(grad_bytes_, "gradients (fp32)"));
    uint64_t offset = 0;
    for (Param& p : params_) {
      p.grad = reinterpret_cast<float*>(grads_ + offset);
      offset += align_up(static_cast<uint64_t>(p.n) * 4, 256);
    }

    const uint64_t tokens = static_cast<uint64_t>(o.batch * o.seq);
    tokens_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "tokens"));
    targets_ = static_cast<int32_t*>(mem.allocate(tokens * 4, "targets"));
    norm_workspace_ = mem.allocate(ops::sum_of_squares_workspace_bytes() + 8, "gradient norm");
    norm_out_ = reinterpret_cast<double*>(static_cast<char*>(norm_workspace_) + ops::sum_of_squares_workspace_bytes());

    build(train_, /*with_backward=*/true);
    build(eval_, /*with_backward=*/false);
  }

  ~CudaEngine() override {
    SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
    for (CudaStep* s : {&train_, &eval_}) {
      if (s->replay) SPW_CUDA_WARN(cudaGraphExecDestroy(s->replay));
      s->executor.reset();
      s->runner.reset();
    }
  }

  std::string description() const override {
    return name_ + " (" + train_.runner->attention_summary() + ")";
  }

  StepStats train_step(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t micro_batches,
                       double lr) override {
    const size_t n = micro_batch_tokens(options_, inputs, targets, micro_batches);
    StepStats stats;
    // Every micro-batch's backward adds into the gradient buffers.
    SPW_CUDA(cudaMemsetAsync(grads_, 0, grad_bytes_, stream_));
    for (int64_t micro = 0; micro < micro_batches; ++micro) {
      stats.loss += run_step(train_, inputs.subspan(micro * n, n), targets.subspan(micro * n, n)) /
                    static_cast<double>(micro_batches);
    }
    const auto optimizer_start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < params_.size(); ++i) {
      ops::sum_of_squares_cuda(params_[i].grad, params_[i].n, norm_out_, i > 0, norm_workspace_, stream_);
    }
    double sum_squares = 0;
    SPW_CUDA(cudaMemcpyAsync(&sum_squares, norm_out_, sizeof sum_squares, cudaMemcpyDeviceToHost, stream_));
    SPW_CUDA(cudaStreamSynchronize(stream_));
    // The mean over micro-batches and the clipping, folded into AdamW.
    const double grad_scale =
        accumulated_grad_scale(std::sqrt(sum_squares), micro_batches, options_.grad_clip, &stats.grad_norm);
    ++optimizer_.steps_taken;
    for (size_t i = 0; i < params_.size(); ++i) {
      const ops::AdamWHyper hp = optimizer_.hyper(lr, grad_scale, params_[i].decay);
      ops::adamw_update_cuda(params_[i].master, params_[i].grad, params_[i].m, params_[i].v, params_[i].working,
                             params_[i].n, hp, stream_);
    }
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

  void sync_to_host() override {
    if (host_current_) return;
    for (size_t i = 0; i < params_.size(); ++i) {
      const size_t bytes = static_cast<size_t>(params_[i].n) * 4;
      SPW_CUDA(cudaMemcpyAsync(weights_.tensors()[i].data.data(), params_[i].master, bytes, cudaMemcpyDeviceToHost, stream_));
      SPW_CUDA(cudaMemcpyAsync(optimizer_.m.tensors()[i].data.data(), params_[i].m, bytes, cudaMemcpyDeviceToHost, stream_));
      SPW_CUDA(cudaMemcpyAsync(optimizer_.v.tensors()[i].data.data(), params_[i].v, bytes, cudaMemcpyDeviceToHost, stream_));
    }
    SPW_CUDA(cudaStreamSynchronize(stream_));
    host_current_ = true;
  }

  uint64_t peak_device_bytes() const override { return device_->device_memory().peak(); }

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
    float* master = nullptr;
    bf16* working = nullptr;
    float *m = nullptr, *v = nullptr;
    float* grad = nullptr;  // the sum of this optimizer step's micro-batch gradients
    bool decay = false;
  };

  void upload_state() {
    if (optimizer_.m.tensors().empty()) optimizer_ = AdamW(weights_.config());
    for (size_t i = 0; i < params_.size(); ++i) {
      const size_t bytes = static_cast<size_t>(params_[i].n) * 4;
      SPW_CUDA(cudaMemcpyAsync(params_[i].master, weights_.tensors()[i].data.data(), bytes, cudaMemcpyHostToDevice, stream_));
      SPW_CUDA(cudaMemcpyAsync(params_[i].m, optimizer_.m.tensors()[i].data.data(), bytes, cudaMemcpyHostToDevice, stream_));
      SPW_CUDA(cudaMemcpyAsync(params_[i].v, optimizer_.v.tensors()[i].data.data(), bytes, cudaMemcpyHostToDevice, stream_));
      ops::cast_cuda(params_[i].master, DType::f32, params_[i].working, DType::bf16, params_[i].n, stream_);
    }
    SPW_CUDA(cudaStreamSynchronize(stream_));
  }

  void build(CudaStep& s, bool with_backward) {
    graph::Builder b(s.graph, DType::bf16);
    s.model = model::build_llama(b, weights_.config(), options_.batch, options_.seq);
    s.graph.mark_output(s.model.loss);
    if (with_backward) {
      s.grads = graph::append_backward(b, s.model.loss, s.model.parameters, graph::GradientOutput::accumulated);
    }
    s.graph = graph::fuse_step(s.graph);
    MemorySpace& mem = device_->device_memory();
    s.runner = std::make_unique<exec::CudaNodeRunner>(s.graph, mem, stream_, options_.deterministic);
    s.executor = std::make_unique<exec::Executor>(s.graph, mem, *s.runner);
    for (size_t i = 0; i < params_.size(); ++i) s.executor->bind(s.model.parameters[i], params_[i].working);
    s.executor->bind(s.model.tokens, tokens_);
    s.executor->bind(s.model.targets, targets_);
    if (with_backward) {
      for (size_t i = 0; i < params_.size(); ++i) s.executor->bind(s.grads[s.model.parameters[i]], params_[i].grad);
    }
  }

  double run_step(CudaStep& s, std::span<const int32_t> inputs, std::span<const int32_t> targets) {
    check_token_ids(inputs, targets, weights_.config().vocab_size);
    SPW_CUDA(cudaMemcpyAsync(tokens_, inputs.data(), inputs.size_bytes(), cudaMemcpyHostToDevice, stream_));
    SPW_CUDA(cudaMemcpyAsync(targets_, targets.data(), targets.size_bytes(), cudaMemcpyHostToDevice, stream_));
    if (s.replay && !profiling_) {
      SPW_CUDA(cudaGraphLaunch(s.replay, stream_));
    } else if (options_.cuda_graph && !profiling_ && &s == &train_ && s.eager_runs > 0) {
      capture(s);
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
  void capture(CudaStep& s) {
    cudaGraph_t graph = nullptr;
    try {
      SPW_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      s.executor->run();
      SPW_CUDA(cudaStreamEndCapture(stream_, &graph));
      SPW_CUDA(cudaGraphInstantiate(&s.replay, graph, 0));
      SPW_CUDA(cudaGraphDestroy(graph));
    } catch (const Error& e) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        (void)cudaStreamEndCapture(stream_, &partial);
        graph = graph ? graph : partial;
      }
      if (graph) (void)cudaGraphDestroy(graph);
      s.replay = nullptr;
      (void)cudaGetLastError();
      log_warn(std::string("CUDA graph capture failed, the step stays eager: ") + e.what());
      options_.cuda_graph = false;
      s.executor->run();
      return;
    }
    SPW_CUDA(cudaGraphLaunch(s.replay, stream_));
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
  char* grads_ = nullptr;  // every parameter's gradient (Param::grad), each 256-byte aligned
  uint64_t grad_bytes_ = 0;
  void* norm_workspace_ = nullptr;
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
