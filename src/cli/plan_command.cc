#include <charconv>
#include <cstdio>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "device/memory_space.h"
#include "model/llama_config_json.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/training_plan.h"
#include "train/step_plan.h"

namespace spillway::cli {

namespace {

struct PlanArgs {
  std::string config = "llama3-8b";
  int64_t seq = 8192;
  std::string batch = "1";
  int64_t grad_accum = 1;
  bool bf16_moments = false;
  std::string projections = "auto";
  std::string recompute = "none";
  std::string offload = "auto";
  std::string device_mem = "80GiB";
  std::string host_mem = "125GiB";
  std::string gpu = "H100";
  std::string svg;
};

int64_t parse_batch(const std::string& text) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  SPW_CHECK(ec == std::errc() && end == text.data() + text.size() && n >= 1, "--batch",
            "expected a number of sequences or auto, got '", text, "'");
  return n;
}

int run_plan(const PlanArgs& a) {
  train::StepPlanRequest req;
  req.config = model::resolve_config(a.config);
  req.seq = a.seq;
  req.device_budget = parse_bytes(a.device_mem, "--device-mem");
  req.host_budget = parse_bytes(a.host_mem, "--host-mem");
  // Kernel workspaces outside the graph, as the GPU engine measures them:
  // a few gigabytes at most.
  const uint64_t reserved = 2ull << 30;
  req.device_reserved = [reserved](const train::LlamaStep&) { return reserved; };
  req.rates = plan::rates_for_gpu(a.gpu);
  req.bf16_moments = a.bf16_moments;
  req.offload = plan::parse_offload_mode(a.offload);
  SPW_CHECK(a.projections == "auto" || a.projections == "fused" || a.projections == "separate", "--projections",
            "unknown value '", a.projections, "' (auto, fused or separate)");
  if (a.projections != "auto") req.fused_projections = a.projections == "fused";
  if (a.recompute != "auto") req.recompute = graph::parse_recompute_policy(a.recompute);
  train::PlannedStep chosen;
  int64_t batch = 1, micro_batches = 1;
  if (a.batch == "auto") {
    // The optimizer step keeps its --grad-accum sequences; they are split
    // into micro-batches of 1, 2, 4, ... sequences and the split with the
    // fastest predicted step is kept (more sequences per micro-batch: fewer
    // gradient-sum round trips over PCIe, more activation memory).
    SPW_CHECK(a.grad_accum >= 1, "--grad-accum", "needs at least one sequence per optimizer step");
    for (int64_t b = 1; b <= a.grad_accum; b *= 2) {
      if (a.grad_accum % b != 0) break;
      req.batch = b;
      req.micro_batches = a.grad_accum / b;
      try {
        train::PlannedStep c = train::plan_llama_step(req);
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
    req.batch = batch = parse_batch(a.batch);
    req.micro_batches = micro_batches = a.grad_accum;
    chosen = train::plan_llama_step(req);
  }
  const plan::TrainingPlan& p = chosen.plan;
  const graph::Graph& g = chosen.step->step.graph;
  const graph::RecomputePolicy recompute = chosen.step->recompute;
  std::printf("%s: %.2f B parameters, batch %lld%s x seq %lld x %lld micro-batches = %lld tokens per optimizer step\n",
              a.config.c_str(), static_cast<double>(p.parameters) / 1e9, static_cast<long long>(batch),
              a.batch == "auto" ? " (auto)" : "", static_cast<long long>(a.seq), static_cast<long long>(micro_batches),
              static_cast<long long>(batch * a.seq * micro_batches));
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
  std::printf("device: %s resident + %s planned peak + %s workspaces of %s\n", format_bytes(p.resident_bytes).c_str(),
              format_bytes(p.placement.device_peak).c_str(), format_bytes(reserved).c_str(),
              format_bytes(req.device_budget).c_str());
  if (p.optimizer_resident) {
    std::printf("host: no state (fp32 masters' remainders and %s AdamW moments on the device) + %s offloaded values of %s\n",
                a.bf16_moments ? "bf16" : "fp32", format_bytes(p.placement.host_peak).c_str(),
                format_bytes(req.host_budget).c_str());
  } else {
    std::printf("host: %s state (fp32 masters' remainders, %s AdamW moments%s) + %s offloaded values of %s\n",
                format_bytes(p.host_state_bytes).c_str(), a.bf16_moments ? "bf16" : "fp32",
                p.weights_resident ? "" : ", bf16 weights", format_bytes(p.placement.host_peak).c_str(),
                format_bytes(req.host_budget).c_str());
  }
  std::printf("moved per micro-batch: %s host->device, %s device->host\n",
              format_bytes(p.placement.bytes_loaded).c_str(), format_bytes(p.placement.bytes_stored).c_str());
  std::printf("predicted on %s: micro-batch %.3f s (compute %.3f + waiting for copies %.3f; host->device busy %.3f, "
              "device->host busy %.3f), optimizer %.3f s -> step %.3f s, %.0f tok/s, MFU %.3f\n",
              req.rates.name.c_str(), p.micro.step_seconds, p.micro.compute_seconds, p.micro.wait_seconds,
              p.micro.h2d_seconds, p.micro.d2h_seconds, p.optimizer_seconds, p.step_seconds, p.tokens_per_second, p.mfu);
  if (!a.svg.empty()) {
    write_text_file_atomically(a.svg, plan::timeline_svg(g, p.placement, p.micro, req.rates,
                                                         a.config + " seq " + std::to_string(a.seq) + ", one micro-batch"));
    std::printf("timeline: %s\n", a.svg.c_str());
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand("plan", "plan a training step under memory budgets: peaks, traffic, predicted time");
  cmd->add_option("--config", a->config, "a preset or a config.json")->capture_default_str();
  cmd->add_option("--seq", a->seq, "tokens per sequence")->capture_default_str();
  cmd->add_option("--batch", a->batch,
                  "sequences per micro-batch, or auto: the --grad-accum sequences of a step split into the "
                  "micro-batch size with the fastest predicted step")
      ->capture_default_str();
  cmd->add_option("--device-mem", a->device_mem, "device budget")->capture_default_str()->envname("SPILLWAY_DEVICE_MEM");
  cmd->add_option("--host-mem", a->host_mem, "host budget")->capture_default_str()->envname("SPILLWAY_HOST_MEM");
  cmd->add_option("--grad-accum", a->grad_accum, "micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--recompute", a->recompute, "none, layers, selective, or auto (the fastest predicted): forward values remade in the backward pass")
      ->capture_default_str();
  cmd->add_option("--offload", a->offload,
                  "which layouts of the training state the plan may choose: auto (the fastest that fits), on (the "
                  "masters' rest and the moments at home), off (everything on the device), stream (weights and "
                  "gradient sums at home too)")
      ->capture_default_str();
  cmd->add_option("--gpu", a->gpu, "the GPU to predict for: H100 or H200")->capture_default_str();
  cmd->add_flag("--bf16-moments", a->bf16_moments, "AdamW moments in bf16 (half the host memory and optimizer traffic)");
  cmd->add_option("--projections", a->projections,
                  "q|k|v and gate|up as one matmul each (fused), as the checkpoint stores them (separate), or auto "
                  "(fused where the step copies nothing)")
      ->capture_default_str();
  cmd->add_option("--svg", a->svg, "write the predicted timeline of the step here");
  return [a] { return run_plan(*a); };
}

}  // namespace spillway::cli
