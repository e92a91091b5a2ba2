#include "plan/training_plan.h"

#include <algorithm>
#include <utility>
#include <optional>

#include "base/bytes.h"
#include "base/status.h"
#include "device/communicator.h"
#include "device/memory_space.h"

namespace spillway::plan {

namespace {

uint64_t accounted(uint64_t n) { return MemorySpace::accounted_bytes(n); }

enum class Grads { all, kept_first, none };  // which gradient sums stay on the device

struct Layout {
  bool optimizer;  // the masters' rest and the moments on the device
  bool weights;
  Grads grads;
};

// From the most to the least on the device.
constexpr Layout kLayouts[] = {
    {true, true, Grads::all},         {false, true, Grads::all},  {false, true, Grads::kept_first},
    {false, true, Grads::none},       {false, false, Grads::kept_first}, {false, false, Grads::none},
};

bool allowed(const Layout& l, OffloadMode mode) {
  switch (mode) {
    case OffloadMode::automatic: return true;
    case OffloadMode::on: return !l.optimizer;
    case OffloadMode::off: return l.optimizer;
    case OffloadMode::stream: return !l.weights;
  }
  return false;
}

// One layout planned for the step; the caller keeps the fastest.
struct Planned {
  Layout layout;
  TrainingPlan plan;
  uint64_t grad_bytes_at_home = 0;
  std::vector<bool> resident;  // by value id, until placed
};

// Where the state of `layout` lives: what stays on the device, what the
// host holds. Nothing is placed yet.
Planned state_of(const graph::Graph& g, const TrainingStateSpec& s, const StateBytes& total, Layout layout) {
  Planned out;
  out.layout = layout;
  TrainingPlan& p = out.plan;
  p.optimizer_resident = layout.optimizer;
  p.weights_resident = layout.weights;
  p.parameters = total.elements;
  p.kept_first_label = s.kept_first_label;
  std::vector<bool> resident(g.values().size(), false);
  auto keep = [&](graph::Value v) {
    resident[static_cast<size_t>(v.id)] = true;
    p.resident_bytes += accounted(g.value(v).bytes());
  };
  // Sharded sums and weights are bound to the rings: counted as their
  // shares and the rings.
  auto bind = [&](graph::Value v) { resident[static_cast<size_t>(v.id)] = true; };
  for (graph::Value v : s.inputs) keep(v);
  const uint64_t shares = std::max<uint64_t>(1, s.state_shards);
  if (s.shard_gradients) {
    p.resident_bytes += s.ring_bytes + accounted(total.grads / shares) +
                        (s.shard_weights ? 0 : accounted(total.weights / shares));
  }
  if (s.shard_weights) p.resident_bytes += accounted(total.weights / shares);
  for (const StateParameter& param : s.parameters) {
    if (layout.weights && s.shard_weights) {
      bind(param.weight);
    } else if (layout.weights) {
      keep(param.weight);
    }
    const bool grad_kept = layout.grads == Grads::all || (layout.grads == Grads::kept_first && param.grad_kept_first);
    p.grad_resident.push_back(grad_kept);
    if (grad_kept) {
      if (s.shard_gradients) {
        bind(param.grad);
      } else {
        keep(param.grad);
      }
    } else {
      p.grad_elements_at_home += static_cast<uint64_t>(g.value(param.grad).shape.numel());
      out.grad_bytes_at_home += g.value(param.grad).bytes();
    }
  }
  const uint64_t rest = total.master + total.optimizer;
  if (layout.optimizer) {
    p.resident_bytes += rest;
  } else {
    p.resident_bytes += s.staging_bytes;
    p.host_state_bytes = rest + (layout.weights ? 0 : total.weights) + out.grad_bytes_at_home;
  }
  // The caller's arrays cover every element on every rank while they exist.
  // A checkpoint, read through one tensor's room while they do not, takes
  // less.
  const bool moments_are_home_state =
      !layout.optimizer && s.caller_optimizer_bytes > 0 && s.caller_optimizer_bytes == s.optimizer_bytes;
  p.host_startup_bytes = total.elements * (s.caller_master_bytes + s.caller_optimizer_bytes) -
                         (moments_are_home_state ? total.optimizer : 0);
  p.host_process_bytes = p.host_startup_bytes;
  out.resident = std::move(resident);
  return out;
}

// What each rank sends per optimizer step, and the time of it the step
// waits for. Ring collectives: each rank sends (N-1)/N of the data per
// pass. Where nothing moves (the plain executor), the sums are all-reduced
// in buckets under the last micro-batch's backward pass, about two thirds
// of it; otherwise after it, reduce-scattered where the state is sharded.
// Sharded, the updated weights are all-gathered after the optimizer. With
// the sums sharded, each micro-batch reduce-scatters them (and with the
// weights sharded, all-gathers those twice) under its own compute, but for
// the ring's tail. What runs beside compute still slows it a little
// (MachineRates::overlap_slowdown).
std::pair<double, double> communication(const StateBytes& total, const TrainingStateSpec& s,
                                        const TrainingPlanRequest& r, const TrainingPlan& p) {
  const int n = r.data_parallel;
  const double rate = r.rates.collective_bytes;
  const auto grads = static_cast<double>(total.grads), weights = static_cast<double>(total.weights);
  if (s.shard_gradients) {
    const double per_micro = ring_bytes_sent(Collective::reduce_scatter, grads, n) +
                             (s.shard_weights ? 2 * ring_bytes_sent(Collective::all_gather, weights, n) : 0.0);
    const double after = s.shard_weights ? 0.0 : ring_bytes_sent(Collective::all_gather, weights, n);
    const double busy = per_micro / rate, hidden = std::min(busy, p.micro.step_seconds);
    const double exposed =
        busy - hidden + r.rates.overlap_slowdown * hidden + static_cast<double>(s.ring_tail_bytes) / rate;
    const auto micro_batches = static_cast<double>(r.micro_batches);
    return {micro_batches * per_micro + after, micro_batches * exposed + after / rate};
  }
  const bool sharded = total.shards > 1, overlapped = p.all_on_device();
  const double summed =
      ring_bytes_sent(overlapped || !sharded ? Collective::all_reduce : Collective::reduce_scatter, grads, n);
  const double gathered = sharded ? ring_bytes_sent(Collective::all_gather, weights, n) : 0.0;
  double summing = summed / rate;
  if (overlapped) {
    const double hidden = std::min(summing, 2.0 / 3.0 * p.micro.step_seconds);
    summing += r.rates.overlap_slowdown * hidden - hidden;
  }
  return {summed + gathered, summing + gathered / rate};
}

// Places the step graph around the state of `out` and predicts its time.
void place(const graph::Graph& g, const TrainingStateSpec& s, const StateBytes& total, const TrainingPlanRequest& r,
           Planned& out) {
  TrainingPlan& p = out.plan;
  const uint64_t taken = r.device_reserved + p.resident_bytes;
  SPW_CHECK(taken < r.device_budget, "--device-mem", "a budget of ", format_bytes(r.device_budget),
            " cannot hold the resident state and workspaces (", format_bytes(taken), ")");
  // Beside the step's offloaded values: all but the caller's arrays.
  const uint64_t host_taken = p.host_state_bytes + p.host_process_bytes - p.host_startup_bytes;
  p.placement = plan_gpu_placement(g, r.device_budget - taken, r.host_budget - host_taken, std::move(out.resident),
                                   r.rates, host_taken);
  SPW_CHECK(!s.shard_gradients || p.placement.values_offloaded == 0, "--shard", "a budget of ",
            format_bytes(r.device_budget), " holds the sharded state but not the step's activations: sharded gradient ",
            "sums and weights need every activation on the device");
  SPW_CHECK(!out.layout.optimizer || r.offload != OffloadMode::off || p.placement.values_offloaded == 0,
            "--device-mem", "a budget of ", format_bytes(r.device_budget), " holds the training state but not the ",
            "step's activations with nothing offloaded (--offload off)");
  p.micro = predict_step(g, p.placement, r.rates);
  p.optimizer_seconds =
      optimizer_seconds(total, p.optimizer_resident, p.weights_resident, out.grad_bytes_at_home, r.rates);
  if (r.data_parallel > 1) {
    const auto [bytes, seconds] = communication(total, s, r, p);
    p.bytes_communicated = static_cast<uint64_t>(bytes);
    p.communication_seconds = seconds;
  }
  p.step_seconds =
      static_cast<double>(r.micro_batches) * p.micro.step_seconds + p.communication_seconds + p.optimizer_seconds;
}

}  // namespace

std::string_view offload_mode_name(OffloadMode mode) {
  switch (mode) {
    case OffloadMode::automatic: return "auto";
    case OffloadMode::on: return "on";
    case OffloadMode::off: return "off";
    case OffloadMode::stream: return "stream";
  }
  return "?";
}

OffloadMode parse_offload_mode(std::string_view name) {
  for (OffloadMode m : {OffloadMode::automatic, OffloadMode::on, OffloadMode::off, OffloadMode::stream}) {
    if (name == offload_mode_name(m)) return m;
  }
  throw Error("--offload", "unknown value '" + std::string(name) + "' (auto, on, off or stream)");
}

StateBytes state_bytes(const graph::Graph& g, const TrainingStateSpec& s) {
  StateBytes b;
  for (const StateParameter& p : s.parameters) {
    const auto n = static_cast<uint64_t>(g.value(p.weight).shape.numel());
    b.elements += n;
    b.weights += g.value(p.weight).bytes();
    b.grads += g.value(p.grad).bytes();
  }
  const uint64_t shards = std::max<uint64_t>(1, s.state_shards);
  b.shards = shards;
  b.master = (b.elements * s.master_bytes + shards - 1) / shards;
  b.optimizer = (b.elements * s.optimizer_bytes + shards - 1) / shards;
  return b;
}

TrainingPlan plan_training(const graph::Graph& g, const TrainingStateSpec& s, const TrainingPlanRequest& r) {
  SPW_CHECK(r.micro_batches >= 1, "--grad-accum", "needs at least one micro-batch");
  const StateBytes total = state_bytes(g, s);
  const bool any_kept_first = std::any_of(s.parameters.begin(), s.parameters.end(),
                                          [](const StateParameter& p) { return p.grad_kept_first; });
  std::optional<Planned> best;
  std::optional<Error> frugal_error;
  uint64_t least_host = UINT64_MAX;
  for (const Layout& layout : kLayouts) {
    if (!allowed(layout, r.offload)) continue;
    if (r.gradient_sums_on_device && layout.grads != Grads::all) continue;
    if (layout.grads == Grads::kept_first && !any_kept_first) continue;
    // Sharded sums and weights live on the device with everything else.
    if (s.shard_gradients && !(layout.optimizer && layout.weights && layout.grads == Grads::all)) continue;
    Planned candidate = state_of(g, s, total, layout);
    candidate.plan.host_process_bytes += r.host_reserved;
    const uint64_t host_taken = candidate.plan.host_state_bytes + candidate.plan.host_process_bytes;
    if (host_taken >= r.host_budget) {
      least_host = std::min(least_host, host_taken);
      continue;
    }
    try {
      place(g, s, total, r, candidate);
      if (!best || candidate.plan.step_seconds < best->plan.step_seconds) best = std::move(candidate);
    } catch (const Error& e) {
      // Layouts are tried from the most to the least device memory: the
      // last one's reason is the one to report.
      frugal_error = e;
    }
  }
  if (!best) {
    SPW_CHECK(frugal_error || least_host != UINT64_MAX, "--offload", "no layout of the training state that --offload ",
              offload_mode_name(r.offload), " allows suits these options",
              s.shard_gradients ? " (sharded gradient sums keep the whole state on the device)" : "");
    const std::string host_need = "at least " + format_bytes(least_host) +
                                  " of host memory (the state at home, the fp32 masters the process starts from, "
                                  "its runtime), more than the budget of " +
                                  format_bytes(r.host_budget);
    if (!frugal_error) throw Error("--host-mem", "the training state needs " + host_need + " in any layout");
    if (least_host == UINT64_MAX) throw *frugal_error;
    // Both budgets bind: say what the layouts with less on the device need.
    const std::string what = frugal_error->what();
    throw Error(frugal_error->thing(), what.substr(frugal_error->thing().size() + 2) +
                                           "; the layouts that keep less on the device need " + host_need +
                                           " (--host-mem)");
  }
  TrainingPlan p = std::move(best->plan);
  const double tokens = r.tokens_per_micro_batch * static_cast<double>(r.micro_batches);
  p.tokens_per_second = tokens / p.step_seconds;
  p.mfu = r.flops_per_token * p.tokens_per_second / r.rates.peak_flops;
  return p;
}

Placement plan_gpu_placement(const graph::Graph& g, uint64_t device_budget, uint64_t host_budget,
                             std::vector<bool> resident, const MachineRates& rates, uint64_t host_taken) {
  PlacementRequest req;
  req.device_budget = device_budget;
  req.host_budget = host_budget;
  req.host_taken = host_taken;
  req.resident = std::move(resident);
  for (const auto& n : g.nodes()) req.node_seconds.push_back(node_cost(g, n, rates).seconds);
  req.h2d_bytes_per_second = rates.h2d_bytes;
  req.d2h_bytes_per_second = rates.d2h_bytes;
  req.best_fit_arena = true;
  return plan_placement(g, req, accounted);
}

double optimizer_seconds(const StateBytes& s, bool optimizer_resident, bool weights_resident,
                         uint64_t grad_bytes_at_home, const MachineRates& rates) {
  if (optimizer_resident) {
    // Read: weights, masters' rest, gradient sums, moments; written: all
    // but the sums; and the sums read once more for their norm. Sharded,
    // each rank updates its share of all of them.
    const double shares = static_cast<double>(s.shards);
    const double bytes = 2.0 * (static_cast<double>(s.weights + s.grads) / shares + static_cast<double>(s.master + s.optimizer));
    return bytes / rates.memory_bytes;
  }
  // Up: the masters' rest and the moments (and the sums and the weights
  // that live at home); down: the same but the sums. The weights come up
  // when they live at home, since the master is joined from them.
  const double state = static_cast<double>(s.master + s.optimizer + (weights_resident ? 0 : s.weights));
  const double up = state + static_cast<double>(grad_bytes_at_home);
  return std::max(up / rates.h2d_bytes, state / rates.d2h_bytes);
}

bool TrainingPlan::all_grads_resident() const { return grad_elements_at_home == 0; }

bool TrainingPlan::all_on_device() const {
  return optimizer_resident && weights_resident && all_grads_resident() && placement.values_offloaded == 0;
}

std::string TrainingPlan::layout() const {
  const std::string activations = std::to_string(placement.values_offloaded) + " activations offloaded";
  if (optimizer_resident) return "the whole training state on the device; " + activations;
  const bool some_home = grad_elements_at_home > 0;
  const bool some_kept = std::find(grad_resident.begin(), grad_resident.end(), true) != grad_resident.end();
  if (weights_resident && !some_home) return "weights and gradients on the device; " + activations;
  const std::string grads = !some_home  ? "gradient sums on the device"
                            : some_kept ? "gradient sums at home but " + kept_first_label
                                        : "gradient sums at home";
  return std::string(weights_resident ? "weights on the device, " : "weights streamed from the host, ") + grads + "; " +
         activations;
}

}  // namespace spillway::plan
