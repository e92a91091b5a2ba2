#include "train/cuda/cuda_step.h"

#include <algorithm>
#include <string>

#include "base/log.h"
#include "base/status.h"
#include "device/cuda/cuda_check.h"
#include "device/cuda/cuda_stream.h"
#include "device/cuda/graph_capture.h"
#include "ops/dropout.h"

namespace spillway::train {

void check_step_ids(std::span<const int32_t> inputs, std::span<const int32_t> targets, int64_t vocab,
                    size_t batch_tokens) {
  SPW_CHECK(inputs.size() == batch_tokens && targets.size() == batch_tokens, "tokens", "got ", inputs.size(),
            " tokens and ", targets.size(), " targets for a batch of ", batch_tokens);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SPW_CHECK(inputs[i] >= 0 && inputs[i] < vocab, "tokens", "id ", inputs[i], " at position ", i,
              " is outside the vocabulary of ", vocab);
    SPW_CHECK(targets[i] < vocab, "targets", "id ", targets[i], " at position ", i,
              " is outside the vocabulary of ", vocab);
  }
}

StepIoBuffers make_step_io(MemorySpace& mem, uint64_t tokens, bool weighted_loss, bool documents,
                           bool dropout_key) {
  StepIoBuffers b;
  StepIo& io = b.io;
  io.device_tokens = static_cast<int32_t*>(mem.allocate(tokens * 4, "tokens"));
  io.device_targets = static_cast<int32_t*>(mem.allocate(tokens * 4, "targets"));
  // Tokens, targets, loss weights, positions, document starts, the loss,
  // the dropout key.
  b.pinned = std::make_unique<PinnedBuffer>(5 * tokens * 4 + sizeof(float) + 2 * sizeof(int32_t));
  io.pinned_ids = b.pinned->as<int32_t>();
  io.pinned_loss_weights = reinterpret_cast<float*>(io.pinned_ids + 2 * tokens);
  io.pinned_documents = io.pinned_ids + 3 * tokens;
  io.pinned_loss = reinterpret_cast<float*>(io.pinned_ids + 5 * tokens);
  io.pinned_dropout_key = io.pinned_ids + 5 * tokens + 1;
  if (dropout_key) io.device_dropout_key = static_cast<int32_t*>(mem.allocate(2 * sizeof(int32_t), "dropout key"));
  if (weighted_loss) io.device_loss_weights = static_cast<float*>(mem.allocate(tokens * 4, "loss weights"));
  if (documents) {
    io.device_positions = static_cast<int32_t*>(mem.allocate(tokens * 4, "positions"));
    io.device_doc_starts = static_cast<int32_t*>(mem.allocate(tokens * 4, "document starts"));
  }
  return b;
}

CudaStep::CudaStep(const graph::Graph& graph, const StepIo& io, Device& device, const CudaStepOptions& options)
    : graph_(graph), io_(io), device_(device), options_(options) {
  stream_ = as_cuda_stream(device_.stream(StreamKind::compute)).handle();
  runner_ = std::make_unique<exec::CudaNodeRunner>(graph_, device_.device_memory(),
                                                   device_.stream(StreamKind::compute), options.deterministic,
                                                   options.matmul_candidates, options.own_gemm, options.collectives);
}

void CudaStep::make_executor(std::optional<plan::Placement> placement, MemorySpace* pinned_host) {
  MemorySpace& mem = device_.device_memory();
  if (placement) {
    SPW_CHECK(pinned_host != nullptr, "GPU step", "a planned step needs pinned host memory for what goes home");
    auto planned = std::make_unique<exec::PlannedExecutor>(graph_, std::move(*placement), device_, *pinned_host,
                                                               *runner_);
    planned_ = planned.get();
    program_ = std::move(planned);
  } else {
    // The executor keeps the gradient sums bound for the whole step, so a
    // tied embedding's gradient can be written in place.
    runner_->set_tied_gradient_in_place(true);
    auto plain = std::make_unique<exec::Executor>(graph_, mem, *runner_);
    plain_ = plain.get();
    program_ = std::move(plain);
  }
  // A pipeline stage short of the loss reads no targets; one after the
  // first reads no tokens.
  if (io_.tokens.valid()) program_->bind(io_.tokens, io_.device_tokens);
  if (io_.targets.valid()) program_->bind(io_.targets, io_.device_targets);
  if (io_.loss_weights.valid()) program_->bind(io_.loss_weights, io_.device_loss_weights);
  if (io_.positions.valid()) {
    program_->bind(io_.positions, io_.device_positions);
    program_->bind(io_.doc_starts, io_.device_doc_starts);
  }
  if (io_.dropout_key.valid()) {
    SPW_CHECK(io_.device_dropout_key != nullptr, "GPU step", "the step drops adapter inputs but its io has no key");
    program_->bind(io_.dropout_key, io_.device_dropout_key);
  }
}

CudaStep::~CudaStep() {
  SPW_CUDA_WARN(cudaStreamSynchronize(stream_));
  for (auto& by_first : replay_) {
    for (cudaGraphExec_t r : by_first) {
      if (r) SPW_CUDA_WARN(cudaGraphExecDestroy(r));
    }
  }
  program_.reset();
  runner_.reset();
}

double CudaStep::run(std::span<const int32_t> tokens, std::span<const int32_t> targets, bool first, bool last,
                     std::span<const float> loss_weights, std::span<const int32_t> positions,
                     std::span<const int32_t> doc_starts) {
  Stream& compute = device_.stream(StreamKind::compute);
  // The previous micro-batch has finished with the pinned buffer: run()
  // returns synchronized.
  std::copy(tokens.begin(), tokens.end(), io_.pinned_ids);
  std::copy(targets.begin(), targets.end(), io_.pinned_ids + tokens.size());
  device_.copy_async(io_.device_tokens, io_.pinned_ids, tokens.size_bytes(), compute);
  device_.copy_async(io_.device_targets, io_.pinned_ids + tokens.size(), targets.size_bytes(), compute);
  SPW_CHECK(loss_weights.size() == (io_.loss_weights.valid() ? tokens.size() : 0), "GPU step", "got ",
            loss_weights.size(), " loss weights for ", tokens.size(), " tokens");
  if (!loss_weights.empty()) {
    std::copy(loss_weights.begin(), loss_weights.end(), io_.pinned_loss_weights);
    device_.copy_async(io_.device_loss_weights, io_.pinned_loss_weights, loss_weights.size_bytes(), compute);
  }
  const size_t documents = io_.positions.valid() ? tokens.size() : 0;
  SPW_CHECK(positions.size() == documents && doc_starts.size() == documents, "GPU step", "got ", positions.size(),
            " positions and ", doc_starts.size(), " document starts for ", tokens.size(), " tokens");
  if (documents) {
    std::copy(positions.begin(), positions.end(), io_.pinned_documents);
    std::copy(doc_starts.begin(), doc_starts.end(), io_.pinned_documents + documents);
    device_.copy_async(io_.device_positions, io_.pinned_documents, positions.size_bytes(), compute);
    device_.copy_async(io_.device_doc_starts, io_.pinned_documents + documents, doc_starts.size_bytes(), compute);
  }
  if (io_.dropout_key.valid()) {
    ops::dropout_key_words(dropout_key_, io_.pinned_dropout_key);
    device_.copy_async(io_.device_dropout_key, io_.pinned_dropout_key, 2 * sizeof(int32_t), compute);
  }
  const bool hooked = plain_ && (hooks_.before_node || hooks_.after_node || hooks_.at_start || hooks_.at_end) &&
                      (last || hooks_.every_micro_batch);
  enqueue(first, hooked);
  if (io_.loss.valid()) device_.copy_async(io_.pinned_loss, program_->data(io_.loss), sizeof(float), compute);
  if (wait_) {
    wait_(compute);
  } else {
    compute.synchronize();
  }
  if (profiling_ && planned_) {
    planned_node_seconds_.resize(graph_.nodes().size());
    size_t node = 0;
    for (const auto& i : planned_->timeline()) {
      if (i.stream != StreamKind::compute) continue;
      if (node < planned_node_seconds_.size()) planned_node_seconds_[node] += i.end - i.start;
      ++node;
    }
  }
  return io_.loss.valid() ? *io_.pinned_loss : 0.0;
}

void CudaStep::enqueue(bool first, bool hooked) {
  runner_->set_overwrite_accumulated(first || sums_written_each_);
  if (planned_) {
    // Sums at home start from zero with the step's first micro-batch.
    planned_->set_accumulators_zero(first);
    planned_->run();
    return;
  }
  cudaGraphExec_t& replay = replay_[first ? 0 : 1][hooked ? 1 : 0];
  bool& ran_eagerly = ran_eagerly_[first ? 0 : 1][hooked ? 1 : 0];
  if (replay && !profiling_) {
    SPW_CUDA(cudaGraphLaunch(replay, stream_));
  } else if (options_.cuda_graph && !profiling_ && ran_eagerly) {
    capture(replay, first, hooked);
  } else {
    run_program(first, hooked);
    ran_eagerly = true;
  }
}

void CudaStep::run_program(bool first, bool hooked) {
  auto around = [&](const std::function<void(size_t, bool)>& hook) -> std::function<void(size_t)> {
    if (!hooked || !hook) return nullptr;
    return [&hook, first](size_t node) { hook(node, first); };
  };
  plain_->set_before_node(around(hooks_.before_node));
  plain_->set_after_node(around(hooks_.after_node));
  if (hooked && hooks_.at_start) hooks_.at_start(first);
  program_->run();
  if (hooked && hooks_.at_end) hooks_.at_end(first);
}

// A step that cannot be captured (a library call that refuses capture) runs
// eagerly and stays eager, with a warning.
void CudaStep::capture(cudaGraphExec_t& replay, bool first, bool hooked) {
  std::string why;
  if (!capture_graph(stream_, [&] { run_program(first, hooked); }, &replay, &why)) {
    log_warn("CUDA graph capture failed, the step stays eager: " + why);
    options_.cuda_graph = false;
    run_program(first, hooked);
    return;
  }
  SPW_CUDA(cudaGraphLaunch(replay, stream_));
}

void CudaStep::set_profiling(bool on) {
  profiling_ = on;
  if (plain_) plain_->set_profiling(on);
  if (planned_) planned_->set_timing(on);
}

std::vector<double> CudaStep::node_seconds() const {
  if (plain_) return plain_->node_seconds();
  return planned_node_seconds_;
}

std::vector<exec::StreamInterval> CudaStep::timeline() const {
  return planned_ ? planned_->timeline() : std::vector<exec::StreamInterval>{};
}

}  // namespace spillway::train
