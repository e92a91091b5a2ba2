#include "train/run_plan.h"

#include <algorithm>

#include "base/bytes.h"
#include "base/status.h"
#include "model/llama_graph.h"
#include "device/memory_space.h"
#include "model/llama_config_json.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "train/device_reserve.h"
#include "train/pipeline_schedule.h"

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

void check_layout(const model::LlamaConfig& c, const RunConfig& run, int gpus, bool batch_auto) {
  const ParallelConfig& p = run.parallel;
  const int64_t tp = p.tp, pp = p.pp, cp = p.cp;
  SPW_CHECK(gpus % tp == 0, "--tp", tp, " does not divide the ", gpus, " GPUs (--gpus)");
  SPW_CHECK(gpus % (tp * pp) == 0, "--pp", pp, " stages of ", tp, " GPUs each do not divide the ", gpus,
            " GPUs (--gpus)");
  SPW_CHECK(gpus % (tp * pp * cp) == 0, "--cp", cp, " context ranks of ", tp * pp, " GPUs each do not divide the ",
            gpus, " GPUs (--gpus)");
  SPW_CHECK(c.num_attention_heads % tp == 0 && c.num_key_value_heads % tp == 0, "--tp", tp,
            " does not divide the model's ", c.num_attention_heads, " query heads and ", c.num_key_value_heads,
            " key/value heads");
  SPW_CHECK(c.intermediate_size % tp == 0, "--tp", tp, " does not divide the model's MLP width ",
            c.intermediate_size);
  SPW_CHECK(pp <= c.num_hidden_layers, "--pp", pp, " pipeline stages need at least as many layers; the model has ",
            c.num_hidden_layers);
  const ScheduleConfig& s = run.schedule;
  if (cp > 1) {
    SPW_CHECK(!batch_auto && s.batch == 1, "--cp", "context parallelism takes one sequence a micro-batch: --batch 1");
    model::check_context_sequence(s.seq, cp);
  }
  // Sequence parallelism splits a micro-batch's tokens (the rank's chunk)
  // over the tensor-parallel group.
  SPW_CHECK(tp == 1 || !p.sequence_parallel || batch_auto || s.batch * (s.seq / cp) % tp == 0, "--tp",
            s.batch * (s.seq / cp), " tokens of a micro-batch do not split evenly over ", tp,
            " ranks (--no-sequence-parallel keeps them whole)");
  const int64_t dp = gpus / (tp * pp * cp);
  // As in training, --grad-accum counts the micro-batches of all
  // data-parallel ranks; the ranks of a group share theirs.
  SPW_CHECK(s.grad_accum % dp == 0, "--grad-accum", s.grad_accum, " micro-batches do not split evenly over ", dp,
            " data-parallel ranks");
  const int64_t v = p.virtual_stages;
  check_virtual_stages(pp, v, c.num_hidden_layers);
  if (v > 1) {
    SPW_CHECK(!batch_auto, "--virtual-stages", "plans the micro-batches as given, not --batch auto");
    check_pipeline_micro_batches(static_cast<int>(pp), static_cast<int>(v), s.grad_accum / dp);
  }
}

StepPlanRequest rank_request(const RunConfig& run, const RunPlanOptions& a, std::string* link_rate_source) {
  const ScheduleConfig& s = run.schedule;
  const MemoryConfig& m = run.memory;
  const int tp = static_cast<int>(run.parallel.tp), pp = static_cast<int>(run.parallel.pp),
            cp = static_cast<int>(run.parallel.cp);
  const int dp = a.gpus / (tp * pp * cp);
  StepPlanRequest req;
  req.config = model::resolve_config(run.model.config);
  // A context group's ranks hold the same weights, as data-parallel ranks
  // do: their gradients are summed over dp x cp, and the state may be
  // sharded over them.
  req.data_parallel = dp * cp;
  req.tensor_parallel = {.rank = 0, .ranks = tp, .sequence_parallel = run.parallel.sequence_parallel};
  // Every context rank's two chunks cost the same (model::LlamaContext);
  // rank 0's graph is the one each rank runs the plan of (its late chunk
  // sees every key: the largest workspaces).
  req.context = {.rank = 0, .ranks = cp};
  req.seq = s.seq / cp;
  req.batch = s.batch;
  req.micro_batches = s.grad_accum / dp;
  req.device_budget = m.device_mem;
  // The GPUs of one host share its memory evenly.
  req.host_budget = m.host_mem / static_cast<uint64_t>(a.gpus / a.hosts);
  req.host_reserved = kHostRuntimeBytes;
  // What the GPU engine keeps outside the graph, estimated as it measures it.
  const bool deterministic = run.kernels.deterministic, communicates = req.data_parallel > 1 || tp > 1;
  req.device_reserved = [deterministic, communicates, budget = req.device_budget](const LlamaStep& step) {
    return device_reserve(estimated_kernel_workspaces(step.step.graph, deterministic), budget, communicates);
  };
  req.rates = plan::rates_for_gpu(a.gpu);
  const double nvlink = req.rates.collective_bytes;
  std::string source = "the " + req.rates.name + "'s NVLink, measured";
  if (a.link_rate > 0) {
    req.rates.collective_bytes = a.link_rate * 1e9;
    source = "given";
  } else if (a.hosts > 1) {
    req.rates.collective_bytes = kNetworkRate;
    source = "a 400 Gb/s network link per GPU, assumed: measure with bench --collectives and give --link-rate";
  }
  if (link_rate_source) *link_rate_source = source;
  // Groups of neighbouring ranks (tp innermost, then cp, then pp) that a
  // host holds whole talk over its NVLink; the rest cross the network.
  const int per_host = a.gpus / a.hosts;
  if (a.hosts > 1 && per_host % (tp * cp) == 0) req.rates.graph_collective_bytes = nvlink;
  if (a.hosts > 1 && per_host % (tp * cp * pp) == 0) req.stage_link_bytes = nvlink;
  req.bf16_moments = m.bf16_moments;
  req.offload = m.offload;
  const ProjectionMode projections = run.kernels.projections;
  if (projections != ProjectionMode::automatic) req.fused_projections = projections == ProjectionMode::fused;
  if (run.kernels.loss_chunk_rows >= 0) req.loss_chunk_rows = run.kernels.loss_chunk_rows;
  req.recompute = recompute_policy(m.recompute);
  req.cache = a.cache;
  return req;
}

namespace {

RunPlan plan_run_as_given(const RunConfig& run, const RunPlanOptions& a) {
  const ScheduleConfig& s = run.schedule;
  SPW_CHECK(a.gpus >= 1, "--gpus", "needs at least one GPU, not ", a.gpus);
  SPW_CHECK(a.hosts >= 1 && a.gpus % a.hosts == 0, "--hosts", a.gpus, " GPUs do not split evenly over ", a.hosts,
            " hosts");
  SPW_CHECK(a.link_rate >= 0 && a.link_rate < 1e6, "--link-rate", a.link_rate,
            " GB/s is not a rate a link has (0: the GPU's own)");
  check_layout(model::resolve_config(run.model.config), run, a.gpus, a.batch_auto);
  const int tp = static_cast<int>(run.parallel.tp), pp = static_cast<int>(run.parallel.pp),
            cp = static_cast<int>(run.parallel.cp);
  SPW_CHECK(pp == 1 || !a.largest, "--largest", "plans the layers of one stage's model; plan it without --pp");
  RunPlan out;
  out.gpus = a.gpus;
  out.hosts = a.hosts;
  out.dp = a.gpus / (tp * pp * cp);
  out.pp = pp;
  out.cp = cp;
  out.tp = tp;
  out.batch_auto = a.batch_auto;
  StepPlanRequest& req = out.request;
  req = rank_request(run, a, &out.link_rate_source);
  const int64_t grad_accum = req.micro_batches;
  out.model = out.name = run.model.config;
  auto plan_rank = [&](const StepPlanRequest& r) {
    if (pp == 1) return PlannedPipeline{plan_data_parallel_step(r, run.parallel.shard), {}};
    return plan_pipeline_step(r, run.parallel.shard, pp, static_cast<int>(run.parallel.virtual_stages));
  };
  auto choose = [&](PlannedPipeline p) {
    out.chosen = std::move(p.step);
    if (pp > 1) out.pipeline = std::move(p.pricing);
  };
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
        PlannedPipeline c = plan_rank(req);
        if (!out.chosen.step || c.step.plan.step_seconds < out.chosen.plan.step_seconds) {
          choose(std::move(c));
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
    choose(plan_rank(req));
  }
  out.reserved = req.device_reserved(*out.chosen.step);
  out.minimum_device_budget =
      plan::minimum_device_budget(out.chosen.step->step.graph,
                                  [](uint64_t n) { return MemorySpace::accounted_bytes(n); },
                                  out.chosen.plan.placement.resident);
  return out;
}

}  // namespace

RunPlan plan_run(const RunConfig& run, const RunPlanOptions& a) {
  try {
    return plan_run_as_given(run, a);
  } catch (const Error& e) {
    // At long sequences the one workspace that does not fit is often the
    // ordered attention backward's, which the budget's message cannot name.
    const model::LlamaConfig c = model::resolve_config(run.model.config);
    const ScheduleConfig& s = run.schedule;
    const int64_t heads = c.num_attention_heads / std::max<int64_t>(1, run.parallel.tp);
    // A context rank's queries come in two chunks (model::LlamaContext).
    const int64_t cp = std::max<int64_t>(1, run.parallel.cp), queries = cp > 1 ? s.seq / (2 * cp) : s.seq;
    const uint64_t attention = deterministic_attention_workspace(a.batch_auto ? 1 : s.batch, heads, queries, s.seq,
                                                                 c.hidden_size / c.num_attention_heads);
    if (!run.kernels.deterministic || attention < run.memory.device_mem / 4) throw;
    throw Error(e.thing(), e.problem() + "; cuDNN's deterministic attention backward alone takes " +
                               format_bytes(attention) + " of workspace here: --nondeterministic runs its atomic one");
  }
}

}  // namespace spillway::train
