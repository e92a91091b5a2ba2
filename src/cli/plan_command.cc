#include <cstdio>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "device/memory_space.h"
#include "graph/autodiff.h"
#include "model/llama_config_json.h"
#include "model/llama_graph.h"
#include "plan/cost_model.h"
#include "plan/placement.h"
#include "plan/training_plan.h"

namespace spillway::cli {

namespace {

struct PlanArgs {
  std::string config = "llama3-8b";
  int64_t seq = 8192;
  int64_t batch = 1;
  int64_t grad_accum = 1;
  bool bf16_moments = false;
  std::string recompute = "none";
  std::string device_mem = "80GiB";
  std::string host_mem = "125GiB";
  std::string svg;
};

int run_plan(const PlanArgs& a) {
  plan::TrainingPlanRequest req;
  req.config = model::resolve_config(a.config);
  req.batch = a.batch;
  req.seq = a.seq;
  req.micro_batches = a.grad_accum;
  req.device_budget = parse_bytes(a.device_mem, "--device-mem");
  req.host_budget = parse_bytes(a.host_mem, "--host-mem");
  // Kernel workspaces and optimizer staging outside the graph, as the GPU
  // engine measures them at a few gigabytes at most.
  req.device_reserved = 2ull << 30;
  req.rates = plan::h100_rates();
  req.bf16_moments = a.bf16_moments;
  // auto: the policy with the fastest predicted step.
  std::string chosen = a.recompute;
  std::unique_ptr<plan::TrainingPlan> p;
  for (const char* policy : {"none", "selective", "layers"}) {
    if (a.recompute != "auto" && a.recompute != policy) continue;
    req.recompute = graph::parse_recompute_policy(policy);
    std::unique_ptr<plan::TrainingPlan> candidate;
    try {
      candidate = plan::plan_training(req);
    } catch (const Error&) {
      const bool last_try = a.recompute != "auto" || policy == std::string("layers");
      if (last_try && !p) throw;  // nothing fits: say why
      continue;
    }
    if (!p || candidate->step_seconds < p->step_seconds) {
      p = std::move(candidate);
      chosen = policy;
    }
  }
  SPW_CHECK(p != nullptr, "--recompute", "unknown policy '", a.recompute, "' (none, layers, selective or auto)");
  const auto& g = p->graph;
  std::printf("%s: %.2f B parameters, batch %lld x seq %lld x %lld micro-batches = %lld tokens per optimizer step\n",
              a.config.c_str(), static_cast<double>(p->parameters) / 1e9, static_cast<long long>(a.batch),
              static_cast<long long>(a.seq), static_cast<long long>(a.grad_accum),
              static_cast<long long>(a.batch * a.seq * a.grad_accum));
  std::printf("layout: %s%s\n", p->layout().c_str(),
              chosen == "none" ? "" : ("; recomputation: " + chosen).c_str());
  std::printf("step graph: %zu nodes, %zu values; minimum device budget beside the resident state %s\n",
              g.nodes().size(), g.values().size(),
              format_bytes(plan::minimum_device_budget(g, [](uint64_t n) { return MemorySpace::accounted_bytes(n); },
                                                       p->placement.resident))
                  .c_str());
  std::printf("device: %s resident + %s planned peak + %s workspaces of %s\n", format_bytes(p->resident_bytes).c_str(),
              format_bytes(p->placement.device_peak).c_str(), format_bytes(req.device_reserved).c_str(),
              format_bytes(req.device_budget).c_str());
  std::printf("host: %s state (fp32 master, %s AdamW moments%s) + %s offloaded values of %s\n",
              format_bytes(p->host_state_bytes).c_str(), a.bf16_moments ? "bf16" : "fp32",
              p->weights_resident ? "" : ", bf16 weights",
              format_bytes(p->placement.host_peak).c_str(), format_bytes(req.host_budget).c_str());
  std::printf("moved per micro-batch: %s host->device, %s device->host\n",
              format_bytes(p->placement.bytes_loaded).c_str(), format_bytes(p->placement.bytes_stored).c_str());
  std::printf("predicted on %s: micro-batch %.3f s (compute %.3f + waiting for copies %.3f; host->device busy %.3f, "
              "device->host busy %.3f), optimizer %.3f s -> step %.3f s, %.0f tok/s, MFU %.3f\n",
              req.rates.name.c_str(), p->micro.step_seconds, p->micro.compute_seconds, p->micro.wait_seconds,
              p->micro.h2d_seconds, p->micro.d2h_seconds, p->optimizer_seconds, p->step_seconds, p->tokens_per_second, p->mfu);
  if (plan::fits_on_device(req.config, a.batch, a.seq, req.device_budget)) {
    // The all-on-device engine runs this step (--offload auto): no copies,
    // and AdamW reads and writes fp32 master, moments and gradients and the
    // bf16 copy in device memory (30 bytes per parameter).
    const double optimizer = static_cast<double>(p->parameters) * 30.0 / req.rates.memory_bytes;
    const double step = static_cast<double>(a.grad_accum) * p->micro.compute_seconds + optimizer;
    const double tokens = static_cast<double>(a.batch * a.seq * a.grad_accum);
    std::printf("the whole state fits the device, so the all-on-device engine runs it: predicted %.3f s per step "
                "(optimizer %.4f s), %.0f tok/s, MFU %.3f\n",
                step, optimizer, tokens / step,
                model::training_flops_per_token(req.config, a.seq) * tokens / step / req.rates.peak_flops);
  }
  if (!a.svg.empty()) {
    write_text_file_atomically(a.svg, plan::timeline_svg(g, p->placement, p->micro, req.rates,
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
  cmd->add_option("--batch", a->batch, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--device-mem", a->device_mem, "device budget")->capture_default_str()->envname("SPILLWAY_DEVICE_MEM");
  cmd->add_option("--host-mem", a->host_mem, "host budget")->capture_default_str()->envname("SPILLWAY_HOST_MEM");
  cmd->add_option("--grad-accum", a->grad_accum, "micro-batches per optimizer step")->capture_default_str();
  cmd->add_option("--recompute", a->recompute, "none, layers, selective, or auto (the fastest predicted): forward values remade in the backward pass")
      ->capture_default_str();
  cmd->add_flag("--bf16-moments", a->bf16_moments, "AdamW moments in bf16 (half the host memory and optimizer traffic)");
  cmd->add_option("--svg", a->svg, "write the predicted timeline of the step here");
  return [a] { return run_plan(*a); };
}

}  // namespace spillway::cli
