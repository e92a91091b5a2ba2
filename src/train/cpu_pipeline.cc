#include "train/cpu_pipeline.h"

#include <algorithm>
#include <deque>
#include <optional>

#include "base/status.h"
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
          MemorySpace& space, const graph::TensorParallelism& tp, const ops::CollectiveGroups* groups) {
    m = model::build_llama(fb, c, batch, seq, {.stage = stage});
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
        grads = graph::append_backward(*b, m.loss, wrt, graph::GradientOutput::accumulated, graph::seed_gradient(tp));
      } else {
        seed = b->input("hidden_out.grad", g.value(m.hidden_out).shape, DType::f32);
        grads = graph::append_backward_from(*b, m.hidden_out, seed, wrt, graph::GradientOutput::accumulated);
      }
    }
    exec = std::make_unique<exec::CpuExecutor>(g, space, groups);
  }
};

CpuPipeline::CpuPipeline(const model::LlamaWeights& weights, const AdamW& optimizer, Communicator& group,
                         int64_t batch, int64_t seq, MemorySpace& space, Stream& comm, Communicator* tensor_group,
                         bool sequence_parallel)
    : group_(group), comm_(comm), tensor_group_(tensor_group), batch_(batch), seq_(seq),
      hidden_(weights.config().hidden_size) {
  const model::LlamaConfig& c = weights.config();
  // The stages' costs are proportions: any GPU's rates split them alike.
  stages_ = model::balance_llama_stages(model::llama_step_costs(c, batch, seq, plan::h100_rates()), group.size());
  graph::TensorParallelism tp;
  if (tensor_group) {
    tp = {.rank = tensor_group->rank(), .ranks = tensor_group->size(), .sequence_parallel = sequence_parallel};
    groups_.by_group[static_cast<size_t>(tp.group)] = tensor_group;
    groups_.stream = &comm;
  }
  splits_ = model::llama_tensor_splits(c);
  forward_ = std::make_unique<Program>(c, batch, seq, stage(), false, space, tp, &groups_);
  train_ = std::make_unique<Program>(c, batch, seq, stage(), true, space, tp, &groups_);
  const size_t tensors = weights.tensors().size();
  for (const model::NamedTensor& t : weights.tensors()) shapes_.push_back(t.shape);
  owner_.assign(tensors, -1);
  own_index_.assign(tensors, -1);
  // A tied table is the first stage's (the last holds a copy).
  for (size_t t = 0; t < tensors; ++t) owner_[t] = model::llama_stage_of_tensor(c, stages_, static_cast<int>(t));
  const bool moments = !optimizer.m.tensors().empty();
  table_elements_ = graph::piece_shape(weights.tensors()[0].shape, splits_[0], tensor_group ? tensor_group->rank() : 0,
                                       tensor_group ? tensor_group->size() : 1)
                        .numel();
  // This stage's tensors, or with tensor parallelism this rank's pieces.
  const int piece = tensor_group ? tensor_group->rank() : 0, pieces = tensor_group ? tensor_group->size() : 1;
  auto mine = [&](const model::NamedTensor& t, size_t i) {
    return model::NamedTensor{t.name, graph::piece_shape(t.shape, splits_[i], piece, pieces),
                              graph::piece_of<float>(t.data, t.shape, splits_[i], piece, pieces)};
  };
  for (const auto& parts : train_->m.parameter_parts) {
    const auto t = static_cast<size_t>(parts.front());
    own_index_[t] = static_cast<int>(weights_.size());
    weights_.push_back(mine(weights.tensors()[t], t));
    const model::NamedTensor& w = weights_.back();
    grads_.push_back({w.name, w.shape, std::vector<float>(w.data.size(), 0.0f)});
    m_.push_back(moments ? mine(optimizer.m.tensors()[t], t) : grads_.back());
    v_.push_back(moments ? mine(optimizer.v.tensors()[t], t) : grads_.back());
  }
  tied_ = c.tie_word_embeddings && group.size() > 1;
  hidden_out_.resize(static_cast<size_t>(batch * seq * hidden_));
  hidden_grad_.resize(hidden_out_.size());
}

CpuPipeline::~CpuPipeline() = default;

std::string CpuPipeline::describe() const {
  std::string d = "pipeline stage " + std::to_string(group_.rank() + 1) + " of " + std::to_string(group_.size()) +
                  " (layers " + std::to_string(stage().first_layer) + "-" + std::to_string(stage().last_layer - 1) +
                  "; stages split";
  for (const model::LlamaStage& s : stages_) {
    d += " " + std::to_string(s.last_layer - s.first_layer);
  }
  return d + " layers by their predicted time)";
}

void CpuPipeline::send(std::vector<float>& data, int peer) {
  group_.send(data.data(), data.size(), DType::f32, peer, comm_);
  group_.wait(comm_);
}

void CpuPipeline::receive(std::vector<float>& data, int peer) {
  group_.recv(data.data(), data.size(), DType::f32, peer, comm_);
  group_.wait(comm_);
}

void CpuPipeline::exchange(std::vector<float>& out, std::vector<float>& in, int peer) {
  group_.send_recv(out.data(), out.size(), peer, in.data(), in.size(), peer, DType::f32, comm_);
  group_.wait(comm_);
}

double CpuPipeline::sum_over_stages(double value) {
  group_.all_reduce_sum(&value, 1, DType::f64, comm_);
  group_.wait(comm_);
  return value;
}

double CpuPipeline::run(Program& p, std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        std::vector<float>& hidden_in, std::vector<float>& hidden_grad) {
  exec::CpuExecutor& e = *p.exec;
  if (p.m.tokens.valid()) e.bind(p.m.tokens, tokens);
  if (p.m.targets.valid()) e.bind(p.m.targets, targets);
  if (p.m.hidden_in.valid()) e.bind(p.m.hidden_in, std::span<float>(hidden_in));
  if (p.seed.valid()) e.bind(p.seed, std::span<float>(hidden_grad));
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

// 1F1B: stage k runs S - k - 1 forwards ahead, then a forward and a
// backward in turn, then the backwards left; so it keeps at most S - k
// micro-batches' inputs. Where a stage hands a hidden state on and waits
// for a gradient back (or the other way), the send and the receive are one
// exchange, so that neighbours sending to each other at once both go on.
double CpuPipeline::run_micro_batches(std::span<const int32_t> inputs, std::span<const int32_t> targets,
                                      int64_t micro_batches) {
  const auto n = static_cast<size_t>(batch_ * seq_);
  const int rank = group_.rank(), stages = group_.size();
  const int64_t warmup = std::min<int64_t>(stages - rank - 1, micro_batches);
  auto tokens = [&](int64_t mb) { return inputs.subspan(static_cast<size_t>(mb) * n, n); };
  auto labels = [&](int64_t mb) { return targets.subspan(static_cast<size_t>(mb) * n, n); };
  std::vector<float> none;
  std::deque<std::vector<float>> kept;  // the inputs of micro-batches forwarded, not yet backward
  auto forward = [&](int64_t mb, std::vector<float> in) {
    if (!last()) run(*forward_, tokens(mb), labels(mb), in, none);
    if (!first()) kept.push_back(std::move(in));
  };
  std::vector<float> handed_back(hidden_out_.size());
  double loss = 0;
  auto backward = [&](int64_t mb) {
    std::vector<float> in = first() ? std::vector<float>() : std::move(kept.front());
    if (!first()) kept.pop_front();
    loss += run(*train_, tokens(mb), labels(mb), in, handed_back);
  };
  auto received = [&] {
    std::vector<float> in(hidden_out_.size());
    receive(in, rank - 1);
    return in;
  };
  for (int64_t mb = 0; mb < warmup; ++mb) {
    forward(mb, first() ? std::vector<float>() : received());
    if (!last()) send(hidden_out_, rank + 1);
  }
  std::vector<float> next = warmup < micro_batches && !first() ? received() : std::vector<float>();
  for (int64_t j = 0; j + warmup < micro_batches; ++j) {
    forward(j + warmup, std::move(next));
    if (!last()) exchange(hidden_out_, handed_back, rank + 1);  // this state on, a gradient back
    backward(j);
    const bool more = j + warmup + 1 < micro_batches;
    if (!first() && more) {
      next.assign(hidden_out_.size(), 0.0f);
      exchange(hidden_grad_, next, rank - 1);  // this gradient back, the next state in
    } else if (!first()) {
      send(hidden_grad_, rank - 1);
    }
  }
  for (int64_t j = std::max<int64_t>(0, micro_batches - warmup); j < micro_batches; ++j) {
    if (!last()) receive(handed_back, rank + 1);
    backward(j);
    if (!first()) send(hidden_grad_, rank - 1);
  }
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
  if (tensor_group_) {
    for (size_t t = 0; t < splits_.size(); ++t) {
      if (own_index_[t] < 0 || splits_[t].placement != graph::Placement::whole) continue;
      std::vector<float>& g = grads_[static_cast<size_t>(own_index_[t])].data;
      tensor_group_->all_reduce_sum(g.data(), g.size(), DType::f32, comm_);
    }
    tensor_group_->wait(comm_);
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
    if (tensor_group_ && tensor_group_->rank() != 0 && splits_[t].placement == graph::Placement::whole) {
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
  if (tensor_group_) {
    tensor_group_->all_reduce_sum(&sum, 1, DType::f64, comm_);
    tensor_group_->wait(comm_);
  }
  return sum;
}

void CpuPipeline::step(AdamW& optimizer, double lr, double grad_scale) {
  optimizer.step(weights_, grads_, m_, v_, lr, grad_scale);
}

double CpuPipeline::eval_loss(std::span<const int32_t> inputs, std::span<const int32_t> targets) {
  const int rank = group_.rank();
  std::vector<float> in(first() ? 0 : hidden_out_.size()), none;
  if (!first()) receive(in, rank - 1);
  const double loss = run(*forward_, inputs, targets, in, none);
  if (!last()) send(hidden_out_, rank + 1);
  return sum_over_stages(loss);
}

void CpuPipeline::read_whole(StatePart part, size_t i, std::span<float> out) {
  const int pieces = tensor_group_ ? tensor_group_->size() : 1;
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
  tensor_group_->all_gather(piece.data(), gathered.data(), piece.size(), DType::f32, comm_);
  tensor_group_->wait(comm_);
  const std::vector<float> w = graph::whole_of<float>(gathered, whole, splits_[i], pieces);
  std::copy(w.begin(), w.end(), out.begin());
}

}  // namespace spillway::train
