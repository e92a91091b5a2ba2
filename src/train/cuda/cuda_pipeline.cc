#include "train/cuda/cuda_pipeline.h"

#include <algorithm>
#include <cstring>

#include "base/status.h"
#include "device/cuda/cuda_stream.h"
#include "model/llama_stages.h"
#include "ops/add.h"
#include "plan/machine_rates.h"
#include "train/pipeline_schedule.h"
#include "train/pipeline_walk.h"

namespace spillway::train {

CudaPipeline::CudaPipeline(model::LlamaWeights& weights, AdamW& optimizer, Communicator& group,
                           int64_t batch, int64_t seq, Device& device)
    : group_(group), device_(device) {
  const model::LlamaConfig& c = weights.config();
  tied_ = c.tie_word_embeddings && group.size() > 1;
  // The cut the CPU engine and the planner make: the cost model's times
  // are proportions, which any GPU's rates split alike.
  stages_ = model::balance_llama_stages(model::llama_step_costs(c, batch, seq, plan::h100_rates()), group.size());
  std::vector<bool> mine;
  for (size_t t = 0; t < weights.tensors().size(); ++t) {
    stage_of_tensor_.push_back(model::llama_stage_of_tensor(c, stages_, static_cast<int>(t)));
    mine.push_back(stage_of_tensor_.back() == group.rank());
  }
  // A tied table is the first stage's; the last holds a copy for lm_head.
  if (tied_ && group.rank() + 1 == group.size()) mine[0] = true;
  weights_ = weights.take_only(mine);
  // The hyper-parameters and the step count; the moments of this stage's
  // tensors alone.
  optimizer_.beta1 = optimizer.beta1;
  optimizer_.beta2 = optimizer.beta2;
  optimizer_.eps = optimizer.eps;
  optimizer_.weight_decay = optimizer.weight_decay;
  optimizer_.steps_taken = optimizer.steps_taken;
  if (!optimizer.m.tensors().empty()) {
    optimizer_.m = optimizer.m.take_only(mine);
    optimizer_.v = optimizer.v.take_only(mine);
  }
  hidden_elements_ = static_cast<uint64_t>(batch * seq * c.hidden_size);
  MemorySpace& mem = device_.device_memory();
  const uint64_t bytes = hidden_elements_ * sizeof(bf16);
  auto buffer = [&](bool needed, const char* what) -> void* {
    if (!needed) return nullptr;
    owned_.push_back(mem.allocate(bytes, what));
    return owned_.back();
  };
  const bool first = group.rank() == 0, last = group.rank() + 1 == group.size();
  input_ = buffer(!first, "pipeline: the pass's input hidden state");
  input_grad_ = buffer(!first, "pipeline: the gradient of the pass's input");
  handed_back_ = buffer(!last, "pipeline: the gradient handed back");
  walk_ = std::make_unique<PipelineWalk>(group, hidden_elements_, DType::bf16, mem, device_.stream(StreamKind::comm));
}

CudaPipeline::~CudaPipeline() {
  MemorySpace& mem = device_.device_memory();
  for (void* p : owned_) mem.free(p);
  if (stage_buffer_) mem.free(stage_buffer_);
  if (tied_other_) mem.free(tied_other_);
}

std::vector<std::vector<int>> CudaPipeline::copied_parts() const {
  if (tied_ && group_.rank() + 1 == stages()) return {{0}};
  return {};
}

void CudaPipeline::sum_tied_gradients(CudaTrainingState& state) {
  const int rank = group_.rank(), last = stages() - 1;
  if (!tied_ || (rank != 0 && rank != last)) return;
  const CudaTrainingState::Tensor& t = state.tensors()[0];
  SPW_CHECK(t.grad != nullptr && t.grad_on_device, "--pp",
            "a tied table's gradient sums are summed over the stages where they lie whole on the device; --shard "
            "gradients and weights do not keep them so");
  if (!tied_other_) tied_other_ = device_.device_memory().allocate(kChunk * sizeof(float), "pipeline: tied gradients");
  Stream& compute = device_.stream(StreamKind::compute);
  Stream& comm = device_.stream(StreamKind::comm);
  const int other = rank == 0 ? last : 0;
  const auto n = static_cast<uint64_t>(t.n);
  // Each adds the other's to its own: a + b on one, b + a on the other, the
  // same bits.
  for (uint64_t off = 0; off < n; off += kChunk) {
    const uint64_t c = std::min<uint64_t>(kChunk, n - off);
    const PeerBuffer send{t.grad + off, c, other}, receive{tied_other_, c, other};
    group_.exchange({&send, 1}, {&receive, 1}, DType::f32, comm);
    group_.wait(comm);
    ops::accumulate_cuda(t.grad + off, static_cast<const float*>(tied_other_), static_cast<int64_t>(c),
                         as_cuda_stream(compute).handle());
    compute.synchronize();  // before the next piece lands where this one lay
  }
}

uint64_t CudaPipeline::reserved_bytes(int64_t micro_batches) const {
  // 1F1B keeps the inputs of at most S - rank micro-batches, and a
  // gradient waits at most a tick for its pass.
  const auto in_flight = static_cast<uint64_t>(std::min<int64_t>(stages() - group_.rank(), micro_batches) + 1);
  return in_flight * hidden_elements_ * sizeof(bf16);
}

std::string CudaPipeline::describe() const {
  const model::LlamaStage& s = stage();
  const int64_t last = s.last_layer < 0 ? weights_.config().num_hidden_layers : s.last_layer;
  return "pipeline stage " + std::to_string(group_.rank() + 1) + " of " + std::to_string(stages()) + " (layers " +
         std::to_string(s.first_layer) + "-" + std::to_string(last - 1) + ", 1F1B)";
}

void CudaPipeline::bind(exec::StepProgram& program, const LlamaStep& step, bool training) {
  const model::LlamaGraph& m = step.model;
  if (m.hidden_in.valid()) {
    program.bind(m.hidden_in, input_);
    if (training) program.bind(step.step.grads[m.hidden_in], input_grad_);
  }
  if (training && step.hidden_out_grad.valid()) program.bind(step.hidden_out_grad, handed_back_);
  if (!training) {
    forward_ = &program;
    hidden_out_ = m.hidden_out;
  }
}

double CudaPipeline::run(int64_t micro_batches, bool training, const Passes& passes) {
  const uint64_t bytes = hidden_elements_ * sizeof(bf16);
  Stream& compute = device_.stream(StreamKind::compute);
  int64_t trained = 0;
  return walk_->walk(pipeline_timeline(stages(), 1, micro_batches, training), training,
                     [&](const PipelinePass& pass, int stage, const void* input, const void* handed_back) {
                       const int64_t mb = pass.micro_batch;
                       // The step programs read their hand-overs from the buffers bound into them.
                       if (input) device_.copy_async(input_, input, bytes, compute);
                       PipelineWalk::Made made;
                       if (!pass.backward) {
                         made.loss = passes.forward(mb);
                         if (stage + 1 < stages()) made.hand_on = forward_->data(hidden_out_);
                         return made;
                       }
                       if (handed_back) device_.copy_async(handed_back_, handed_back, bytes, compute);
                       // The input's gradient is an accumulated output: this pass's alone.
                       if (stage > 0) device_.zero_async(input_grad_, bytes, compute);
                       made.loss = passes.train(mb, trained == 0, trained + 1 == micro_batches);
                       ++trained;
                       made.hand_on = input_grad_;
                       return made;
                     });
}

void CudaPipeline::read_whole(CudaTrainingState& state, StatePart part, size_t i, std::span<float> out) {
  const int owner = stage_of_tensor_.at(i);
  if (owner == group_.rank()) state.read(part, i, out);
  if (!stage_buffer_) {
    stage_buffer_ = device_.device_memory().allocate(kChunk * sizeof(float), "pipeline: checkpoint reads");
    pinned_ = std::make_unique<PinnedBuffer>(kChunk * sizeof(float));
  }
  Stream& comm = device_.stream(StreamKind::comm);
  float* pinned = pinned_->as<float>();
  for (uint64_t off = 0; off < out.size(); off += kChunk) {
    const uint64_t c = std::min<uint64_t>(kChunk, out.size() - off);
    if (owner == group_.rank()) std::memcpy(pinned, out.data() + off, c * sizeof(float));
    device_.copy_async(stage_buffer_, pinned, c * sizeof(float), comm);
    group_.broadcast(stage_buffer_, c, DType::f32, owner, comm);
    device_.copy_async(pinned, stage_buffer_, c * sizeof(float), comm);
    group_.wait(comm);
    if (owner != group_.rank()) std::memcpy(out.data() + off, pinned, c * sizeof(float));
  }
}

}  // namespace spillway::train
