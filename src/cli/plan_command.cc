#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "device/memory_space.h"
#include "model/llama_config_json.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/training_plan.h"
#include "train/step_plan.h"

namespace spillway::cli {

namespace {

// What a plan takes besides its run configuration.
struct PlanArgs {
  bool batch_auto = false;  // --batch auto
  int gpus = 1;             // data-parallel ranks, one per GPU
  int hosts = 1;            // the GPUs split evenly over them
  double link_rate = 0;     // GB/s each rank's collectives send; 0: the GPU's, or kNetworkRate across hosts
  bool largest = false;     // --largest
  std::string gpu = "H100";
  std::string svg;
};

// The most layers of the request's width whose step the planner can place
// under the budgets: doubled until one does not fit, then bisected. Error
// with the planner's reason when not even one layer fits.
int64_t largest_layer_count(train::StepPlanRequest req, train::StateSharding shard) {
  constexpr int64_t kMostLayers = 4096;
  auto fits = [&](int64_t layers) {
    req.config.num_hidden_layers = layers;
    try {
      train::plan_data_parallel_step(req, shard);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (!fits(1)) {
    req.config.num_hidden_layers = 1;
    train::plan_data_parallel_step(req, shard);  // throws the reason
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

// Across hosts the ring runs at the network's pace, not NVLink's: a 400
// Gb/s link per GPU, as the H100 clusters this plans for have, unless
// --link-rate gives what `bench --collectives` measured.
constexpr double kNetworkRate = 50e9;

// What a GPU training process holds on the host beside its masters,
// moments, state and offloaded values: CUDA's context, the libraries, the
// data's pages. The GPU engine measures its own (resident memory less its
// arrays); a plan made without one assumes this.
constexpr uint64_t kHostRuntimeBytes = 4ull << 30;

int run_plan(const train::RunConfig& run, const PlanArgs& a) {
  const train::ScheduleConfig& s = run.schedule;
  const train::MemoryConfig& m = run.memory;
  SPW_CHECK(a.gpus >= 1, "--gpus", "needs at least one GPU, not ", a.gpus);
  SPW_CHECK(a.hosts >= 1 && a.gpus % a.hosts == 0, "--hosts", a.gpus, " GPUs do not split evenly over ", a.hosts,
            " hosts");
  SPW_CHECK(a.link_rate >= 0 && a.link_rate < 1e6, "--link-rate", a.link_rate,
            " GB/s is not a rate a link has (0: the GPU's own)");
  const int gpus_per_host = a.gpus / a.hosts;
  // As in training, --grad-accum counts the micro-batches of all ranks.
  SPW_CHECK(s.grad_accum % a.gpus == 0, "--grad-accum", s.grad_accum, " micro-batches do not split evenly over ",
            a.gpus, " GPUs");
  train::StepPlanRequest req;
  req.config = model::resolve_config(run.model.config);
  req.data_parallel = a.gpus;
  const int64_t grad_accum = s.grad_accum / a.gpus;
  req.seq = s.seq;
  req.device_budget = m.device_mem;
  // The GPUs of one host share its memory evenly.
  req.host_budget = m.host_mem / static_cast<uint64_t>(gpus_per_host);
  // Kernel workspaces outside the graph, as the GPU engine measures them:
  // a few gigabytes at most.
  const uint64_t reserved = 2ull << 30;
  req.device_reserved = [reserved](const train::LlamaStep&) { return reserved; };
  req.host_reserved = kHostRuntimeBytes;
  req.rates = plan::rates_for_gpu(a.gpu);
  std::string rate_source = "the " + req.rates.name + "'s NVLink, measured";
  if (a.link_rate > 0) {
    req.rates.collective_bytes = a.link_rate * 1e9;
    rate_source = "given";
  } else if (a.hosts > 1) {
    req.rates.collective_bytes = kNetworkRate;
    rate_source = "a 400 Gb/s network link per GPU, assumed: measure with bench --collectives and give --link-rate";
  }
  req.bf16_moments = m.bf16_moments;
  req.offload = m.offload;
  const train::ProjectionMode projections = run.kernels.projections;
  if (projections != train::ProjectionMode::automatic) {
    req.fused_projections = projections == train::ProjectionMode::fused;
  }
  req.recompute = train::recompute_policy(m.recompute);
  if (a.largest) {
    SPW_CHECK(!a.batch_auto, "--largest", "plans the batch as given, not --batch auto");
    req.batch = s.batch;
    req.micro_batches = grad_accum;
    req.config.num_hidden_layers = largest_layer_count(req, run.parallel.shard);
  }
  train::PlannedStep chosen;
  int64_t batch = 1, micro_batches = 1;
  if (a.batch_auto) {
    // The optimizer step keeps its --grad-accum sequences; they are split
    // into micro-batches of 1, 2, 4, ... sequences and the split with the
    // fastest predicted step is kept (more sequences per micro-batch: fewer
    // gradient-sum round trips over PCIe, more activation memory).
    for (int64_t b = 1; b <= grad_accum; b *= 2) {
      if (grad_accum % b != 0) break;
      req.batch = b;
      req.micro_batches = grad_accum / b;
      try {
        train::PlannedStep c = train::plan_data_parallel_step(req, run.parallel.shard);
        if (!chosen.step || c.plan.step_seconds < chosen.plan.step_seconds) {
          chosen = std::move(c);
          batch = req.batch;
          micro_batches = req.micro_batches;
        }
      } catch (const Error&) {
        if (!chosen.step) throw;  // not even one sequence per micro-batch fits: say why
        break;                    // larger micro-batches fit less
      }
    }
  } else {
    req.batch = batch = s.batch;
    req.micro_batches = micro_batches = grad_accum;
    chosen = train::plan_data_parallel_step(req, run.parallel.shard);
  }
  const plan::TrainingPlan& p = chosen.plan;
  const graph::Graph& g = chosen.step->step.graph;
  const graph::RecomputePolicy recompute = chosen.step->recompute;
  const std::string per_gpu = a.gpus > 1 ? " per GPU" : "";
  const std::string name =
      a.largest ? "the largest that fits: " + run.model.config + " with " +
                      std::to_string(req.config.num_hidden_layers) + " layers"
                : run.model.config;
  std::printf("%s: %.2f B parameters, batch %lld%s x seq %lld x %lld micro-batches = %lld tokens per optimizer step%s\n",
              name.c_str(), static_cast<double>(p.parameters) / 1e9, static_cast<long long>(batch),
              a.batch_auto ? " (auto)" : "", static_cast<long long>(s.seq), static_cast<long long>(micro_batches),
              static_cast<long long>(batch * s.seq * micro_batches), per_gpu.c_str());
  if (a.gpus > 1) {
    const bool sharded = chosen.state.state_shards > 1;
    // As the GPU engine does: under the backward pass where nothing moves.
    const std::string sums = p.all_on_device() ? "gradient sums all-reduced under the backward pass"
                             : sharded         ? "gradient sums reduce-scattered after the backward pass"
                                               : "gradient sums all-reduced after the backward pass";
    const std::string where = a.hosts > 1 ? " on " + std::to_string(a.hosts) + " hosts" : "";
    std::printf("data parallel over %d GPUs%s: %s; each sends %s a step (%s%s) at %.0f GB/s (%s); the step waits "
                "%.3f s for it\n",
                a.gpus, where.c_str(),
                sharded ? "the masters' rest and AdamW's moments sharded, 1/N on each"
                        : "every GPU keeps the whole training state",
                format_bytes(p.bytes_communicated).c_str(), sums.c_str(), sharded ? ", weights all-gathered" : "",
                req.rates.collective_bytes / 1e9, rate_source.c_str(), p.communication_seconds);
  }
  std::printf("layout: %s; q|k|v and gate|up %s%s\n", p.layout().c_str(),
              chosen.step->fused_projections ? "stacked" : "separate",
              recompute == graph::RecomputePolicy::none
                  ? ""
                  : ("; recomputation: " + std::string(graph::recompute_policy_name(recompute))).c_str());
  std::printf("step graph: %zu nodes, %zu values; minimum device budget beside the resident state %s\n",
              g.nodes().size(), g.values().size(),
              format_bytes(plan::minimum_device_budget(g, [](uint64_t n) { return MemorySpace::accounted_bytes(n); },
                                                       p.placement.resident))
                  .c_str());
  std::printf("device%s: %s resident + %s planned peak + %s workspaces of %s\n", per_gpu.c_str(),
              format_bytes(p.resident_bytes).c_str(), format_bytes(p.placement.device_peak).c_str(),
              format_bytes(reserved).c_str(), format_bytes(req.device_budget).c_str());
  // The process's own: the fp32 masters (and fp32 moments) the trainer
  // keeps for checkpoints, and the runtime.
  const std::string own = format_bytes(p.host_process_bytes) + " the process's own (fp32 masters" +
                          (m.bf16_moments || !p.optimizer_resident ? "" : " and moments") + ", runtime " +
                          format_bytes(req.host_reserved) + ")";
  if (p.optimizer_resident) {
    std::printf("host%s: no state (fp32 masters' remainders and %s AdamW moments on the device) + %s offloaded values "
                "+ %s of %s\n",
                per_gpu.c_str(), m.bf16_moments ? "bf16" : "fp32", format_bytes(p.placement.host_peak).c_str(),
                own.c_str(), format_bytes(req.host_budget).c_str());
  } else {
    std::printf("host%s: %s state (fp32 masters' remainders, %s AdamW moments%s) + %s offloaded values + %s of %s\n",
                per_gpu.c_str(), format_bytes(p.host_state_bytes).c_str(), m.bf16_moments ? "bf16" : "fp32",
                p.weights_resident ? "" : ", bf16 weights", format_bytes(p.placement.host_peak).c_str(), own.c_str(),
                format_bytes(req.host_budget).c_str());
  }
  std::printf("moved per micro-batch: %s host->device, %s device->host\n",
              format_bytes(p.placement.bytes_loaded).c_str(), format_bytes(p.placement.bytes_stored).c_str());
  std::printf("predicted on %s: micro-batch %.3f s (compute %.3f + waiting for copies %.3f; host->device busy %.3f, "
              "device->host busy %.3f), communication %.3f s, optimizer %.3f s -> step %.3f s, %.0f tok/s%s, MFU %.3f\n",
              req.rates.name.c_str(), p.micro.step_seconds, p.micro.compute_seconds, p.micro.wait_seconds,
              p.micro.h2d_seconds, p.micro.d2h_seconds, p.communication_seconds, p.optimizer_seconds,
              p.step_seconds, p.tokens_per_second * a.gpus, a.gpus > 1 ? " over all GPUs" : "", p.mfu);
  if (!a.svg.empty()) {
    const std::string title = run.model.config + " seq " + std::to_string(s.seq) + ", one micro-batch";
    write_text_file_atomically(a.svg, plan::timeline_svg(g, p.placement, p.micro, req.rates, title));
    std::printf("timeline: %s\n", a.svg.c_str());
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
           "the --grad-accum sequences of a step split into the micro-batch size with the fastest predicted step"}});
  auto args = std::make_shared<PlanArgs>();
  cmd->add_option("--gpu", args->gpu, "the GPU to predict for: H100 or H200")->capture_default_str();
  cmd->add_option("--svg", args->svg, "write the predicted timeline of the step here");
  cmd->add_option("--gpus", args->gpus,
                  "data-parallel GPUs, one rank each (--device-mem is each GPU's, --host-mem each host's)")
      ->capture_default_str();
  cmd->add_option("--hosts", args->hosts, "hosts the --gpus are spread over evenly")->capture_default_str();
  cmd->add_option("--link-rate", args->link_rate,
                  "GB/s each GPU's collectives send (spillway bench --collectives measures it; default: NVLink's "
                  "within a host, 50 across hosts)");
  cmd->add_flag("--largest", args->largest,
                "plan the most layers of the model's width that fit the budgets instead of its own layer count");
  return [flags, args] {
    PlanArgs a = *args;
    a.batch_auto = flags->chose("schedule.batch");
    return run_plan(flags->resolve(), a);
  };
}

}  // namespace spillway::cli
