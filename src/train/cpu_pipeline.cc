#include "train/cpu_pipeline.h"

#include <algorithm>
#include <optional>

#include "base/status.h"
#include "exec/executor.h"
#include "graph/autodiff.h"
#include "model/llama_sharding.h"
#include "model/llama_stages.h"
#include "plan/machine_rates.h"

namespace spillway::train {

// A stage's graph made runnable: forward only (the next stage's input, or
// the loss), or forward and backward from the gradient handed back (the
// loss's own, at the last stage), the stage's gradient sums accumulated.
//
// With tensor parallelism the stage's graph is the rank's (the pass of
// graph/tensor_parallel.h); each rank of a tensor-parallel group hands its
// part of a hidden state's gradient to the same rank of the previous
// stage, whose backward from that part gives its part in turn.
struct CpuPipeline::Program {
  graph::Graph forward_graph;
  graph::Builder fb{forward_graph, DType::f32};
  std::optional<graph::RankGraph> rank;
  std::optional<graph::Builder> rb;
  model::LlamaGraph m;
  graph::Gradients grads;
  graph::Value seed;  // the gradient of hidden_out, handed back
  std::unique_ptr<exec::CpuExecutor> exec;

  Program(const model::LlamaConfig& c, int64_t batch, int64_t seq, const model::LlamaStage& stage, bool backward,
          MemorySpace& space, const graph::TensorParallelism& tp, const model::LlamaContext& context,
          const ops::CollectiveGroups* groups) {
    m = model::build_llama(fb, c, batch, seq, {.stage = stage, .context = context});
    forward_graph.mark_output(m.loss.valid() ? m.loss : m.hidden_out);
    graph::Builder* b = &fb;
    if (tp.ranks > 1) {
      rank = model::shard_llama(forward_graph, m, c, DType::f32, tp);
      b = &rb.emplace(rank->graph, DType::f32);
    }
    graph::Graph& g = b->graph();
    if (backward) {
      std::vector<graph::Value> wrt = m.parameters;
      if (m.hidden_in.valid()) wrt.push_back(m.hidden_in);
      if (m.loss.valid()) {
        // Each context rank's loss is its chunk's mean: the step's is their mean.
        grads = graph::append_backward(*b, m.loss, wrt, graph::GradientOutput::accumulated,
                                       graph::seed_gradient(tp) / context.ranks);
      } else {
        seed = b->input("hidden_out.grad", g.value(m.hidden_out).shape, DType::f32);
        grads = graph::append_backward_from(*b, m.hidden_out, seed, wrt, graph::GradientOutput::accumulated);
      }
    }
    exec = std::make_unique<exec::CpuExecutor>(g, space, groups);
  }
};

CpuPipeline::CpuPipeline(const model::LlamaWeights& weights, const AdamW& optimizer, const PipelineRanks& ranks,
                         int64_t batch, int64_t seq, MemorySpace& space, Stream& comm)
    : group_(*ranks.pipeline), ranks_(ranks), comm_(comm), batch_(batch), seq_(seq),
      hidden_(weights.config().hidden_size) {
  const model::LlamaConfig& c = weights.config();
  graph::TensorParallelism tp;
  if (ranks.tensor) {
    tp = {.rank = ranks.tensor->rank(), .ranks = ranks.tensor->size(), .sequence_parallel = ranks.sequence_parallel};
    groups_.by_group[static_cast<size_t>(tp.group)] = ranks.tensor;
  }
  model::LlamaContext& context = context_;
  if (ranks.context) {
    model::check_context_sequence(seq, ranks.context->size());
    context = {.rank = ranks.context->rank(), .ranks = ranks.context->size()};
    groups_.by_group[static_cast<size_t>(context.group)] = ranks.context;
    seq_ = seq / ranks.context->size();
  }
  groups_.stream = &comm;
  // The stages' costs are proportions: any GPU's rates split them alike.
  stages_ = model::balance_llama_stages(model::llama_step_costs(c, batch, seq_, plan::h100_rates()), stage_count());
  splits_ = model::llama_tensor_splits(c);
  for (int k = 0; k < ranks.chunks; ++k) {
    const model::LlamaStage& s = stages_[static_cast<size_t>(k * group_.size() + rank())];
    chunks_.push_back({s, std::make_unique<Program>(c, batch, seq_, s, false, space, tp, context, &groups_),
                       std::make_unique<Program>(c, batch, seq_, s, true, space, tp, context, &groups_)});
  }
  const size_t tensors = weights.tensors().size();
  for (const model::NamedTensor& t : weights.tensors()) shapes_.push_back(t.shape);
  owner_.assign(tensors, -1);
  own_index_.assign(tensors, -1);
  // A tied table is the first stage's (the last holds a copy).
  for (size_t t = 0; t < tensors; ++t) {
    owner_[t] = model::llama_stage_of_tensor(c, stages_, static_cast<int>(t)) % group_.size();
  }
  const bool moments = !optimizer.m.tensors().empty();
  // This rank's tensors, or with tensor parallelism its pieces.
  const int piece = ranks.tensor ? ranks.tensor->rank() : 0, pieces = ranks.tensor ? ranks.tensor->size() : 1;
  table_elements_ = graph::piece_shape(weights.tensors()[0].shape, splits_[0], piece, pieces).numel();
  auto mine = [&](const model::NamedTensor& t, size_t i) {
    return model::NamedTensor{t.name, graph::piece_shape(t.shape, splits_[i], piece, pieces),
                              graph::piece_of<float>(t.data, t.shape, splits_[i], piece, pieces)};
  };
  for (const Chunk& chunk : chunks_) {
    for (const auto& parts : chunk.train->m.parameter_parts) {
      const auto t = static_cast<size_t>(parts.front());
      own_index_[t] = static_cast<int>(weights_.size());
      weights_.push_back(mine(weights.tensors()[t], t));
      const model::NamedTensor& w = weights_.back();
      grads_.push_back({w.name, w.shape, std::vector<float>(w.data.size(), 0.0f)});
      m_.push_back(moments ? mine(optimizer.m.tensors()[t], t) : grads_.back());
      v_.push_back(moments ? mine(optimizer.v.tensors()[t], t) : grads_.back());
    }
  }
  tied_ = c.tie_word_embeddings && group_.size() > 1;
  hidden_out_.resize(static_cast<size_t>(batch * seq_ * hidden_));
  hidden_grad_.resize(hidden_out_.size());
  walk_ = std::make_unique<PipelineWalk>(group_, hidden_out_.size(), DType::f32, space, comm);
}

CpuPipeline::~CpuPipeline() = default;

std::string CpuPipeline::describe() const {
  const int ranks = group_.size();
  std::string d = "pipeline rank " + std::to_string(rank() + 1) + " of " + std::to_string(ranks) + " (layers";
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const model::LlamaStage& s = chunks_[k].stage;
    d += k ? ", " : " ";
    d += std::to_string(s.first_layer) + "-" + std::to_string(s.last_layer - 1);
  }
  d += "; " + std::to_string(stage_count()) + " stages of";
  for (const model::LlamaStage& s : stages_) {
    d += ' ';
    d += std::to_string(s.last_layer - s.first_layer);
  }
  d += " layers, split by their predicted time; ";
  d += ranks_.chunks > 1 ? "interleaved 1F1B, " + std::to_string(ranks_.chunks) + " stages a rank)" : "1F1B)";
  return d;
}

double CpuPipeline::sum_over_stages(double value) {
  group_.all_reduce_sum(&value, 1, DType::f64, comm_);
  group_.wait(comm_);
  return value;
}

double CpuPipeline::run(Program& p, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        const float* hidden_in, const float* handed_back) {
  exec::CpuExecutor& e = *p.exec;
  if (p.m.tokens.valid()) e.bind(p.m.tokens, tokens);
  if (p.m.targets.valid()) e.bind(p.m.targets, targets);
  if (p.m.hidden_in.valid()) e.bind(p.m.hidden_in, std::span<const float>(hidden_in, hidden_out_.size()));
  if (p.seed.valid()) e.bind(p.seed, std::span<const float>(handed_back, hidden_out_.size()));
  for (size_t i = 0; i < p.m.parameters.size(); ++i) {
    const auto own = static_cast<size_t>(own_index_[static_cast<size_t>(p.m.parameter_parts[i].front())]);
    e.bind(p.m.parameters[i], std::span<float>(weights_[own].data));
    if (!p.grads.of.empty()) e.bind(p.grads[p.m.parameters[i]], std::span<float>(grads_[own].data));
  }
  // The gradient of the hidden state read: this run's alone.
  if (!p.grads.of.empty() && p.m.hidden_in.valid()) {
    std::fill(hidden_grad_.begin(), hidden_grad_.end(), 0.0f);
    e.bind(p.grads[p.m.hidden_in], std::span<float>(hidden_grad_));
  }
  e.run();
  if (p.grads.of.empty() && p.m.hidden_out.valid()) {
    const auto h = e.read<float>(p.m.hidden_out);
    std::copy(h.begin(), h.end(), hidden_out_.begin());
  }
  return p.m.loss.valid() ? e.read<float>(p.m.loss)[0] : 0.0;
}

double CpuPipeline::run_timeline(const PipelineTimeline& timeline, std::span<const int32_t> inputs,
                                 std::span<const int32_t> targets, bool training) {
  const auto n = static_cast<size_t>(batch_ * seq_);
  const size_t whole = n * static_cast<size_t>(context_.ranks);
  auto tokens = [&](int64_t mb) {
    return model::take_context_chunks(context_, inputs.subspan(static_cast<size_t>(mb) * whole, whole), inputs_);
  };
  auto labels = [&](int64_t mb) {
    return model::take_context_chunks(context_, targets.subspan(static_cast<size_t>(mb) * whole, whole), targets_);
  };
  return walk_->walk(timeline, training,
                     [&](const PipelinePass& pass, int, const void* input, const void* handed_back) {
                       Chunk& chunk = chunks_[static_cast<size_t>(pass.chunk)];
                       const int64_t mb = pass.micro_batch;
                       const auto* in = static_cast<const float*>(input);
                       if (!pass.backward) {
                         return PipelineWalk::Made{run(*chunk.forward, tokens(mb), labels(mb), in, nullptr),
                                                   hidden_out_.data()};
                       }
                       return PipelineWalk::Made{run(*chunk.train, tokens(mb), labels(mb), in,
                                                     static_cast<const float*>(handed_back)),
                                                 hidden_grad_.data()};
                     });
}

double CpuPipeline::run_micro_batches(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                      int64_t micro_batches) {
  const double loss = run_timeline(pipeline_timeline(group_.size(), ranks_.chunks, micro_batches, true), inputs,
                                   targets, true);
  // A tied table's gradient: the first stage's (the embedding) and the
  // last's (lm_head), summed on both.
  if (tied_) {
    const int own = own_index_[0];
    std::vector<float> zeros(own >= 0 ? 0 : static_cast<size_t>(table_elements_), 0.0f);
    std::vector<float>& g = own >= 0 ? grads_[static_cast<size_t>(own)].data : zeros;
    group_.all_reduce_sum(g.data(), g.size(), DType::f32, comm_);
    group_.wait(comm_);
  }
  // Each tensor-parallel rank's part of a whole tensor's gradient, summed.
  if (Communicator* tensor = ranks_.tensor) {
    for (size_t t = 0; t < splits_.size(); ++t) {
      if (own_index_[t] < 0 || splits_[t].placement != graph::Placement::whole) continue;
      std::vector<float>& g = grads_[static_cast<size_t>(own_index_[t])].data;
      tensor->all_reduce_sum(g.data(), g.size(), DType::f32, comm_);
    }
    tensor->wait(comm_);
  }
  return sum_over_stages(loss / static_cast<double>(micro_batches));
}

double CpuPipeline::grad_sum_of_squares() {
  // A whole tensor's gradient is alike on every tensor-parallel rank:
  // counted on rank 0; the tied table's, on the first stage.
  std::vector<bool> counted(grads_.size(), true);
  for (size_t t = 0; t < splits_.size(); ++t) {
    const int own = own_index_[t];
    if (own < 0) continue;
    if (ranks_.tensor && ranks_.tensor->rank() != 0 && splits_[t].placement == graph::Placement::whole) {
      counted[static_cast<size_t>(own)] = false;
    }
    if (t == 0 && tied_ && last()) counted[static_cast<size_t>(own)] = false;
  }
  double sum = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    if (!counted[i]) continue;
    for (float x : grads_[i].data) sum += static_cast<double>(x) * x;
  }
  sum = sum_over_stages(sum);
  if (Communicator* tensor = ranks_.tensor) {
    tensor->all_reduce_sum(&sum, 1, DType::f64, comm_);
    tensor->wait(comm_);
  }
  return sum;
}

void CpuPipeline::step(AdamW& optimizer, double lr, double grad_scale) {
  optimizer.step(weights_, grads_, m_, v_, lr, grad_scale);
}

double CpuPipeline::eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) {
  double loss = sum_over_stages(run_timeline(pipeline_timeline(group_.size(), ranks_.chunks, 1, false), inputs,
                                             targets, false));
  if (Communicator* context = ranks_.context) {  // the mean of the chunks' means
    context->all_reduce_sum(&loss, 1, DType::f64, comm_);
    context->wait(comm_);
    loss /= context->size();
  }
  return loss;
}

void CpuPipeline::read_whole(StatePart part, size_t i, std::span<float> out) {
  const int pieces = ranks_.tensor ? ranks_.tensor->size() : 1;
  const Shape& whole = shapes_.at(i);
  SPW_CHECK(static_cast<int64_t>(out.size()) == whole.numel(), "checkpoint read", "tensor ", i, " holds ",
            whole.numel(), " values, not ", out.size());
  // The stage that holds it hands this rank's piece to every stage...
  std::vector<float> piece(static_cast<size_t>(graph::piece_shape(whole, splits_[i], 0, pieces).numel()));
  if (const int own = own_index_.at(i); own >= 0) {
    const std::vector<model::NamedTensor>& from = part == StatePart::master ? weights_ : part == StatePart::m ? m_ : v_;
    piece = from[static_cast<size_t>(own)].data;
  }
  group_.broadcast(piece.data(), piece.size(), DType::f32, owner_.at(i), comm_);
  group_.wait(comm_);
  if (pieces == 1 || splits_[i].placement == graph::Placement::whole) {
    std::copy(piece.begin(), piece.end(), out.begin());
    return;
  }
  // ...and the tensor-parallel ranks put their pieces together.
  std::vector<float> gathered(piece.size() * static_cast<size_t>(pieces));
  ranks_.tensor->all_gather(piece.data(), gathered.data(), piece.size(), DType::f32, comm_);
  ranks_.tensor->wait(comm_);
  const std::vector<float> w = graph::whole_of<float>(gathered, whole, splits_[i], pieces);
  std::copy(w.begin(), w.end(), out.begin());
}

}  // namespace spillway::train
