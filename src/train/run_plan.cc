#include "train/run_plan.h"

#include <algorithm>

#include "base/status.h"
#include "device/memory_space.h"
#include "model/llama_config_json.h"
#include "plan/cost_model.h"
#include "plan/placement.h"

namespace spillway::train {

namespace {

// The most layers of the request's width whose step the planner can place
// under the budgets: doubled until one does not fit, then bisected. Error
// with the planner's reason when not even one layer fits.
int64_t largest_layer_count(StepPlanRequest req, StateSharding shard) {
  constexpr int64_t kMostLayers = 4096;
  auto fits = [&](int64_t layers) {
    req.config.num_hidden_layers = layers;
    try {
      plan_data_parallel_step(req, shard);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (!fits(1)) {
    req.config.num_hidden_layers = 1;
    plan_data_parallel_step(req, shard);  // throws the reason
  }
  int64_t fitting = 1, failing = 2;
  while (failing <= kMostLayers && fits(failing)) {
    fitting = failing;
    failing *= 2;
  }
  failing = std::min(failing, kMostLayers + 1);
  while (failing - fitting > 1) {
    const int64_t mid = fitting + (failing - fitting) / 2;
    (fits(mid) ? fitting : failing) = mid;
  }
  return fitting;
}

}  // namespace

std::string RunPlan::timeline_svg() const {
  const std::string title = model + " seq " + std::to_string(request.seq) + ", one micro-batch";
  return plan::timeline_svg(chosen.step->step.graph, chosen.plan.placement, chosen.plan.micro, request.rates, title);
}

RunPlan plan_run(const RunConfig& run, const RunPlanOptions& a) {
  const ScheduleConfig& s = run.schedule;
  const MemoryConfig& m = run.memory;
  SPW_CHECK(a.gpus >= 1, "--gpus", "needs at least one GPU, not ", a.gpus);
  SPW_CHECK(a.hosts >= 1 && a.gpus % a.hosts == 0, "--hosts", a.gpus, " GPUs do not split evenly over ", a.hosts,
            " hosts");
  SPW_CHECK(a.link_rate >= 0 && a.link_rate < 1e6, "--link-rate", a.link_rate,
            " GB/s is not a rate a link has (0: the GPU's own)");
  SPW_CHECK(run.parallel.pp == 1 && run.parallel.cp == 1, run.parallel.pp > 1 ? "--pp" : "--cp",
            "the planner does not plan pipeline stages or context parallelism yet; plan without them");
  const int tp = static_cast<int>(run.parallel.tp);
  SPW_CHECK(a.gpus % tp == 0, "--tp", tp, " does not divide the ", a.gpus, " GPUs (--gpus)");
  const int dp = a.gpus / tp;
  // As in training, --grad-accum counts the micro-batches of all
  // data-parallel ranks; a tensor-parallel group shares its rank's.
  SPW_CHECK(s.grad_accum % dp == 0, "--grad-accum", s.grad_accum, " micro-batches do not split evenly over ", dp,
            " data-parallel ranks");
  RunPlan out;
  out.gpus = a.gpus;
  out.hosts = a.hosts;
  out.tp = tp;
  out.batch_auto = a.batch_auto;
  StepPlanRequest& req = out.request;
  req.config = model::resolve_config(run.model.config);
  req.data_parallel = dp;
  req.tensor_parallel = {.rank = 0, .ranks = tp, .sequence_parallel = run.parallel.sequence_parallel};
  const int64_t grad_accum = s.grad_accum / dp;
  req.seq = s.seq;
  req.device_budget = m.device_mem;
  // The GPUs of one host share its memory evenly.
  req.host_budget = m.host_mem / static_cast<uint64_t>(a.gpus / a.hosts);
  req.host_reserved = kHostRuntimeBytes;
  // Kernel workspaces outside the graph, as the GPU engine measures them:
  // a few gigabytes at most.
  out.reserved = 2ull << 30;
  req.device_reserved = [reserved = out.reserved](const LlamaStep&) { return reserved; };
  req.rates = plan::rates_for_gpu(a.gpu);
  out.link_rate_source = "the " + req.rates.name + "'s NVLink, measured";
  if (a.link_rate > 0) {
    req.rates.collective_bytes = a.link_rate * 1e9;
    out.link_rate_source = "given";
  } else if (a.hosts > 1) {
    req.rates.collective_bytes = kNetworkRate;
    out.link_rate_source = "a 400 Gb/s network link per GPU, assumed: measure with bench --collectives and give "
                           "--link-rate";
  }
  req.bf16_moments = m.bf16_moments;
  req.offload = m.offload;
  const ProjectionMode projections = run.kernels.projections;
  if (projections != ProjectionMode::automatic) req.fused_projections = projections == ProjectionMode::fused;
  req.recompute = recompute_policy(m.recompute);
  out.model = out.name = run.model.config;
  if (a.largest) {
    SPW_CHECK(!a.batch_auto, "--largest", "plans the batch as given, not --batch auto");
    req.batch = s.batch;
    req.micro_batches = grad_accum;
    req.config.num_hidden_layers = largest_layer_count(req, run.parallel.shard);
    out.name = "the largest that fits: " + run.model.config + " with " +
               std::to_string(req.config.num_hidden_layers) + " layers";
  }
  if (a.batch_auto) {
    // The optimizer step keeps its --grad-accum sequences; they are split
    // into micro-batches of 1, 2, 4, ... sequences and the split with the
    // fastest predicted step is kept (more sequences per micro-batch: fewer
    // gradient-sum round trips over PCIe, more activation memory).
    int64_t batch = 1, micro_batches = 1;
    for (int64_t b = 1; b <= grad_accum; b *= 2) {
      if (grad_accum % b != 0) break;
      req.batch = b;
      req.micro_batches = grad_accum / b;
      try {
        PlannedStep c = plan_data_parallel_step(req, run.parallel.shard);
        if (!out.chosen.step || c.plan.step_seconds < out.chosen.plan.step_seconds) {
          out.chosen = std::move(c);
          batch = req.batch;
          micro_batches = req.micro_batches;
        }
      } catch (const Error&) {
        if (!out.chosen.step) throw;  // not even one sequence per micro-batch fits: say why
        break;                        // larger micro-batches fit less
      }
    }
    req.batch = batch;
    req.micro_batches = micro_batches;
  } else {
    req.batch = s.batch;
    req.micro_batches = grad_accum;
    out.chosen = plan_data_parallel_step(req, run.parallel.shard);
  }
  out.minimum_device_budget =
      plan::minimum_device_budget(out.chosen.step->step.graph,
                                  [](uint64_t n) { return MemorySpace::accounted_bytes(n); },
                                  out.chosen.plan.placement.resident);
  return out;
}

}  // namespace spillway::train
