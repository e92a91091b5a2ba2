#include <cstdio>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "device/memory_space.h"
#include "graph/autodiff.h"
#include "model/llama_config_json.h"
#include "model/llama_graph.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/training_plan.h"

namespace spillway::cli {

namespace {

// What a plan searches over, where its flags said auto.
struct Search {
  bool batch = false;      // --batch auto
  bool recompute = false;  // --recompute auto
};

struct Chosen {
  std::unique_ptr<plan::TrainingPlan> plan;
  graph::RecomputePolicy recompute = graph::RecomputePolicy::none;  // the policy it was planned with
  int64_t batch = 1, micro_batches = 1;
};

// The plan for one micro-batch size; with --recompute auto, the policy with
// the fastest predicted step.
Chosen plan_for(plan::TrainingPlanRequest req, graph::RecomputePolicy recompute, bool search) {
  using graph::RecomputePolicy;
  Chosen c;
  c.batch = req.batch;
  c.micro_batches = req.micro_batches;
  for (RecomputePolicy policy : {RecomputePolicy::none, RecomputePolicy::selective, RecomputePolicy::layers}) {
    if (!search && recompute != policy) continue;
    req.recompute = policy;
    std::unique_ptr<plan::TrainingPlan> candidate;
    try {
      candidate = plan::plan_training(req);
    } catch (const Error&) {
      const bool last_try = !search || policy == RecomputePolicy::layers;
      if (last_try && !c.plan) throw;  // nothing fits: say why
      continue;
    }
    if (!c.plan || candidate->step_seconds < c.plan->step_seconds) {
      c.plan = std::move(candidate);
      c.recompute = policy;
    }
  }
  return c;
}

int run_plan(const train::RunConfig& run, Search search, const std::string& svg) {
  const train::ScheduleConfig& s = run.schedule;
  const train::MemoryConfig& m = run.memory;
  plan::TrainingPlanRequest req;
  req.config = model::resolve_config(run.model.config);
  req.seq = s.seq;
  req.device_budget = m.device_mem;
  req.host_budget = m.host_mem;
  // Kernel workspaces and optimizer staging outside the graph, as the GPU
  // engine measures them at a few gigabytes at most.
  req.device_reserved = 2ull << 30;
  req.rates = plan::h100_rates();
  req.bf16_moments = m.bf16_moments;
  // A plan is of the planned engine, where auto would mean separate; it is
  // refused so that a plan always says which layout it predicts.
  SPW_CHECK(run.kernels.projections != train::ProjectionMode::automatic, "--projections",
            "unknown value 'auto' for a plan; one of fused, separate");
  req.fused_projections = run.kernels.projections == train::ProjectionMode::fused;
  Chosen chosen;
  if (search.batch) {
    // The optimizer step keeps its --grad-accum sequences; they are split
    // into micro-batches of 1, 2, 4, ... sequences and the split with the
    // fastest predicted step is kept (more sequences per micro-batch: fewer
    // gradient-sum round trips over PCIe, more activation memory).
    for (int64_t b = 1; b <= s.grad_accum; b *= 2) {
      if (s.grad_accum % b != 0) break;
      req.batch = b;
      req.micro_batches = s.grad_accum / b;
      try {
        Chosen c = plan_for(req, m.recompute, search.recompute);
        if (!chosen.plan || c.plan->step_seconds < chosen.plan->step_seconds) chosen = std::move(c);
      } catch (const Error&) {
        if (!chosen.plan) throw;  // not even one sequence per micro-batch fits: say why
        break;                    // larger micro-batches fit less
      }
    }
  } else {
    req.batch = s.batch;
    req.micro_batches = s.grad_accum;
    chosen = plan_for(req, m.recompute, search.recompute);
  }
  const std::unique_ptr<plan::TrainingPlan>& p = chosen.plan;
  const int64_t batch = chosen.batch, micro_batches = chosen.micro_batches;
  const auto& g = p->graph;
  std::printf("%s: %.2f B parameters, batch %lld%s x seq %lld x %lld micro-batches = %lld tokens per optimizer step\n",
              run.model.config.c_str(), static_cast<double>(p->parameters) / 1e9, static_cast<long long>(batch),
              search.batch ? " (auto)" : "", static_cast<long long>(s.seq), static_cast<long long>(micro_batches),
              static_cast<long long>(batch * s.seq * micro_batches));
  std::printf("layout: %s%s\n", p->layout().c_str(),
              chosen.recompute == graph::RecomputePolicy::none
                  ? ""
                  : ("; recomputation: " + std::string(train::enum_name(chosen.recompute))).c_str());
  std::printf("step graph: %zu nodes, %zu values; minimum device budget beside the resident state %s\n",
              g.nodes().size(), g.values().size(),
              format_bytes(plan::minimum_device_budget(g, [](uint64_t n) { return MemorySpace::accounted_bytes(n); },
                                                       p->placement.resident))
                  .c_str());
  std::printf("device: %s resident + %s planned peak + %s workspaces of %s\n", format_bytes(p->resident_bytes).c_str(),
              format_bytes(p->placement.device_peak).c_str(), format_bytes(req.device_reserved).c_str(),
              format_bytes(req.device_budget).c_str());
  std::printf("host: %s state (fp32 masters' remainders, %s AdamW moments%s) + %s offloaded values of %s\n",
              format_bytes(p->host_state_bytes).c_str(), m.bf16_moments ? "bf16" : "fp32",
              p->weights_resident ? "" : ", bf16 weights",
              format_bytes(p->placement.host_peak).c_str(), format_bytes(req.host_budget).c_str());
  std::printf("moved per micro-batch: %s host->device, %s device->host\n",
              format_bytes(p->placement.bytes_loaded).c_str(), format_bytes(p->placement.bytes_stored).c_str());
  std::printf("predicted on %s: micro-batch %.3f s (compute %.3f + waiting for copies %.3f; host->device busy %.3f, "
              "device->host busy %.3f), optimizer %.3f s -> step %.3f s, %.0f tok/s, MFU %.3f\n",
              req.rates.name.c_str(), p->micro.step_seconds, p->micro.compute_seconds, p->micro.wait_seconds,
              p->micro.h2d_seconds, p->micro.d2h_seconds, p->optimizer_seconds, p->step_seconds, p->tokens_per_second, p->mfu);
  if (plan::fits_on_device(req.config, batch, s.seq, req.device_budget)) {
    // The all-on-device engine runs this step (--offload auto): no copies,
    // and AdamW reads and writes the fp32 master (held as the bf16 copy and
    // a 16-bit remainder), moments and gradients in device memory (28 bytes
    // per parameter).
    const double optimizer = static_cast<double>(p->parameters) * 28.0 / req.rates.memory_bytes;
    const double step = static_cast<double>(micro_batches) * p->micro.compute_seconds + optimizer;
    const double tokens = static_cast<double>(batch * s.seq * micro_batches);
    std::printf("the whole state fits the device, so the all-on-device engine runs it: predicted %.3f s per step "
                "(optimizer %.4f s), %.0f tok/s, MFU %.3f\n",
                step, optimizer, tokens / step,
                model::training_flops_per_token(req.config, s.seq) * tokens / step / req.rates.peak_flops);
  }
  if (!svg.empty()) {
    const std::string title = run.model.config + " seq " + std::to_string(s.seq) + ", one micro-batch";
    write_text_file_atomically(svg, plan::timeline_svg(g, p->placement, p->micro, req.rates, title));
    std::printf("timeline: %s\n", svg.c_str());
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("plan", "plan a training step under memory budgets: peaks, traffic, predicted time");
  auto flags = std::make_shared<RunFlags>(
      cmd, train::Command::plan,
      std::vector<ChoiceWord>{
          {"schedule.batch", "auto",
           "the --grad-accum sequences of a step split into the micro-batch size with the fastest predicted step"},
          {"memory.recompute", "auto", "the policy with the fastest predicted step"}});
  auto svg = std::make_shared<std::string>();
  cmd->add_option("--svg", *svg, "write the predicted timeline of the step here");
  return [flags, svg] {
    const train::RunConfig run = flags->resolve();
    return run_plan(run, {.batch = flags->chose("schedule.batch"), .recompute = flags->chose("memory.recompute")},
                    *svg);
  };
}

}  // namespace spillway::cli
