#include "plan/training_plan.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "base/bytes.h"
#include "base/status.h"
#include "device/memory_space.h"
#include "graph/fuse_step.h"
#include "graph/liveness.h"
#include "model/llama_config_json.h"

namespace spillway::plan {

namespace {

uint64_t accounted(uint64_t n) { return MemorySpace::accounted_bytes(n); }

enum class Grads { all, vocab, none };  // which gradient sums stay on the device

struct Layout {
  bool weights;
  Grads grads;
};

// One layout planned for `g`; the caller keeps the fastest.
struct Planned {
  Layout layout;
  Placement placement;
  std::vector<bool> grad_resident;
  uint64_t grad_elements_at_home = 0;
  uint64_t resident_bytes = 0, host_state_bytes = 0;
  std::vector<bool> resident;  // by value id, until placed
  StepPrediction micro;
  double optimizer_seconds = 0, step_seconds = 0;
};

// Where the state of `layout` lives: what stays on the device, what the
// host holds. Nothing is placed yet.
Planned state_of(const TrainingPlan& p, const TrainingPlanRequest& r, Layout layout) {
  Planned out;
  out.layout = layout;
  const auto& g = p.graph;
  std::vector<bool> resident(g.values().size(), false);
  auto keep = [&](graph::Value v) {
    resident[static_cast<size_t>(v.id)] = true;
    out.resident_bytes += accounted(g.value(v).bytes());
  };
  keep(p.model.tokens);
  keep(p.model.targets);
  const int64_t vocab = r.config.vocab_size;
  for (graph::Value w : p.model.parameters) {
    if (layout.weights) keep(w);
    const auto& shape = g.value(w).shape;
    const bool vocab_sized = shape.rank() == 2 && (shape[0] == vocab || shape[1] == vocab);
    const bool grad_kept = layout.grads == Grads::all || (layout.grads == Grads::vocab && vocab_sized);
    out.grad_resident.push_back(grad_kept);
    if (grad_kept) {
      keep(p.grads[w]);
    } else {
      out.grad_elements_at_home += static_cast<uint64_t>(shape.numel());
    }
  }
  SPW_CHECK(layout.grads != Grads::vocab || (out.grad_elements_at_home > 0 && out.grad_elements_at_home < p.parameters),
            "planner", "no vocabulary-sized gradient to keep apart");
  // The fp32 masters' remainders (ops/master_split.h) and the moments always
  // live at home, and the bf16 weights and the fp32 gradient sums when they
  // are not on the device.
  out.host_state_bytes = p.parameters * (r.bf16_moments ? 6 : 10) + (layout.weights ? 0 : p.parameters * 2) +
                         out.grad_elements_at_home * 4;
  out.resident = std::move(resident);
  return out;
}

// Places the step graph around the state of `out` and predicts its time.
void place(const TrainingPlan& p, const TrainingPlanRequest& r, Planned& out) {
  const auto& g = p.graph;
  const uint64_t taken = r.device_reserved + out.resident_bytes;
  SPW_CHECK(taken < r.device_budget, "--device-mem", "a budget of ", format_bytes(r.device_budget),
            " cannot hold the resident state and workspaces (", format_bytes(taken), ")");
  out.placement = plan_gpu_placement(g, r.device_budget - taken, r.host_budget - out.host_state_bytes,
                                     std::move(out.resident), r.rates);
  out.micro = predict_step(g, out.placement, r.rates);
  out.optimizer_seconds =
      optimizer_seconds(p.parameters, out.layout.weights, out.grad_elements_at_home, r.bf16_moments, r.rates);
  out.step_seconds = static_cast<double>(r.micro_batches) * out.micro.step_seconds + out.optimizer_seconds;
}

}  // namespace

std::unique_ptr<TrainingPlan> training_graph(const TrainingPlanRequest& r) {
  SPW_CHECK(r.micro_batches >= 1, "--grad-accum", "needs at least one micro-batch");
  auto p = std::make_unique<TrainingPlan>();
  graph::Builder b(p->graph, DType::bf16);
  p->model = model::build_llama(b, r.config, r.batch, r.seq, {.fused_projections = r.fused_projections});
  p->graph.mark_output(p->model.loss);
  p->grads = graph::append_backward(b, p->model.loss, p->model.parameters, graph::GradientOutput::accumulated);
  p->graph = graph::fuse_step(p->graph);  // before recomputation: see graph/fuse_step.h
  if (r.recompute != graph::RecomputePolicy::none) p->graph = graph::recompute(p->graph, r.recompute).graph;
  p->parameters = static_cast<uint64_t>(model::parameter_count(r.config));
  return p;
}

void choose_layout(TrainingPlan& p, const TrainingPlanRequest& r) {
  std::optional<Planned> best;
  std::optional<Error> frugal_error;
  uint64_t least_host = UINT64_MAX;
  for (Layout layout : {Layout{true, Grads::all}, Layout{true, Grads::vocab}, Layout{true, Grads::none},
                        Layout{false, Grads::vocab}, Layout{false, Grads::none}}) {
    if (r.stream_weights && layout.weights) continue;
    Planned candidate = state_of(p, r, layout);
    if (candidate.host_state_bytes >= r.host_budget) {
      least_host = std::min(least_host, candidate.host_state_bytes);
      continue;
    }
    try {
      place(p, r, candidate);
      if (!best || candidate.step_seconds < best->step_seconds) best = std::move(candidate);
    } catch (const Error& e) {
      // Layouts are tried from the most to the least device memory: the
      // last one's reason is the one to report.
      frugal_error = e;
    }
  }
  if (!best) {
    const std::string host_need = "at least " + format_bytes(least_host) + " of host memory, more than the budget of " +
                                  format_bytes(r.host_budget);
    if (!frugal_error) throw Error("--host-mem", "the training state needs " + host_need + " in any layout");
    if (least_host == UINT64_MAX) throw *frugal_error;
    // Both budgets bind: say what the layouts with less on the device need.
    const std::string what = frugal_error->what();
    throw Error(frugal_error->thing(), what.substr(frugal_error->thing().size() + 2) +
                                           "; the layouts that keep less on the device need " + host_need);
  }
  p.weights_resident = best->layout.weights;
  p.grad_resident = std::move(best->grad_resident);
  p.grad_elements_at_home = best->grad_elements_at_home;
  p.placement = std::move(best->placement);
  p.resident_bytes = best->resident_bytes;
  p.host_state_bytes = best->host_state_bytes;
  p.micro = std::move(best->micro);
  p.optimizer_seconds = best->optimizer_seconds;
  p.step_seconds = best->step_seconds;
  const double tokens = static_cast<double>(r.batch * r.seq * r.micro_batches);
  p.tokens_per_second = tokens / p.step_seconds;
  p.mfu = model::training_flops_per_token(r.config, r.seq) * p.tokens_per_second / r.rates.peak_flops;
}

std::unique_ptr<TrainingPlan> plan_training(const TrainingPlanRequest& r) {
  auto p = training_graph(r);
  choose_layout(*p, r);
  return p;
}

bool fits_on_device(const model::LlamaConfig& config, int64_t batch, int64_t seq, uint64_t device_budget) {
  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  auto m = model::build_llama(b, config, batch, seq);
  g.mark_output(m.loss);
  graph::append_backward(b, m.loss, m.parameters, graph::GradientOutput::accumulated);
  const uint64_t params = static_cast<uint64_t>(model::parameter_count(config));
  // bf16 weights, the rest of the fp32 master (2 bytes: ops/master_split.h),
  // two fp32 moments and fp32 gradients; the graph's own peak; about a
  // gigabyte of kernel workspaces.
  const uint64_t need = params * 16 + graph::analyze_liveness(g, accounted).peak_bytes + (1ull << 30);
  return need <= device_budget;
}

Placement plan_gpu_placement(const graph::Graph& g, uint64_t device_budget, uint64_t host_budget,
                             std::vector<bool> resident, const MachineRates& rates) {
  PlacementRequest req;
  req.device_budget = device_budget;
  req.host_budget = host_budget;
  req.resident = std::move(resident);
  for (const auto& n : g.nodes()) req.node_seconds.push_back(node_cost(g, n, rates).seconds);
  req.h2d_bytes_per_second = rates.h2d_bytes;
  req.d2h_bytes_per_second = rates.d2h_bytes;
  req.best_fit_arena = true;
  return plan_placement(g, req, accounted);
}

double optimizer_seconds(uint64_t parameters, bool weights_resident, uint64_t grad_elements_at_home,
                         bool bf16_moments, const MachineRates& rates) {
  const double n = static_cast<double>(parameters);
  // Up: the masters' remainders and both moments (and the gradient when it
  // lives at home); down: the same three; both ways the bf16 weights when
  // they live at home (AdamW joins the master from them).
  const double state = 2.0 + (bf16_moments ? 4.0 : 8.0) + (weights_resident ? 0.0 : 2.0);
  const double up = n * state + static_cast<double>(grad_elements_at_home) * 4.0;
  const double down = n * state;
  return std::max(up / rates.h2d_bytes, down / rates.d2h_bytes);
}

bool TrainingPlan::all_grads_resident() const { return grad_elements_at_home == 0; }

std::string TrainingPlan::layout() const {
  const bool some_home = grad_elements_at_home > 0;
  const bool some_kept = std::find(grad_resident.begin(), grad_resident.end(), true) != grad_resident.end();
  if (weights_resident && !some_home) {
    return "weights and gradients on the device; " + std::to_string(placement.values_offloaded) + " activations offloaded";
  }
  std::string grads = !some_home  ? "gradient sums on the device"
                      : some_kept ? "gradient sums at home but the vocabulary-sized ones"
                                  : "gradient sums at home";
  return std::string(weights_resident ? "weights on the device, " : "weights streamed from the host, ") + grads + "; " +
         std::to_string(placement.values_offloaded) + " activations offloaded";
}

}  // namespace spillway::plan
