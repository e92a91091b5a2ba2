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

namespace spillway::cli {

namespace {

struct PlanArgs {
  std::string config = "llama3-8b";
  int64_t seq = 8192;
  int64_t batch = 1;
  std::string device_mem = "80GiB";
  std::string host_mem = "125GiB";
  bool bf16_moments = false;
  std::string svg;
};

int run_plan(const PlanArgs& a) {
  const model::LlamaConfig config = model::resolve_config(a.config);
  const uint64_t device_budget = parse_bytes(a.device_mem, "--device-mem");
  const uint64_t host_budget = parse_bytes(a.host_mem, "--host-mem");
  const auto params = static_cast<uint64_t>(model::parameter_count(config));
  // Training state beyond the step graph: fp32 master weights and AdamW
  // moments (fp32, or bf16 with --bf16-moments), living at home in host
  // memory; the graph's bf16 weights and fp32 gradients are planned below.
  const uint64_t moments = params * (a.bf16_moments ? 4 : 8);
  const uint64_t master = params * 4;
  const uint64_t host_state = master + moments + params * 2;  // + the bf16 working copy
  std::printf("%s: %.2f B parameters, batch %lld x seq %lld\n", a.config.c_str(), static_cast<double>(params) / 1e9,
              static_cast<long long>(a.batch), static_cast<long long>(a.seq));
  std::printf("host state: fp32 master %s + AdamW moments (%s) %s + bf16 weights %s = %s of %s host budget\n",
              format_bytes(master).c_str(), a.bf16_moments ? "bf16" : "fp32", format_bytes(moments).c_str(),
              format_bytes(params * 2).c_str(), format_bytes(host_state).c_str(), format_bytes(host_budget).c_str());
  SPW_CHECK(host_state < host_budget, "--host-mem", "the optimizer state alone needs ", format_bytes(host_state),
            a.bf16_moments ? "" : " (try --bf16-moments)");

  graph::Graph g;
  graph::Builder b(g, DType::bf16);
  auto m = model::build_llama(b, config, a.batch, a.seq);
  g.mark_output(m.loss);
  graph::append_backward(b, m.loss, m.parameters);
  auto cost = [](uint64_t n) { return MemorySpace::accounted_bytes(n); };
  const uint64_t minimum = plan::minimum_device_budget(g, cost);
  std::printf("step graph: %zu nodes, %zu values; minimum device budget %s\n", g.nodes().size(), g.values().size(),
              format_bytes(minimum).c_str());
  // Workspaces (cuBLASLt, cuDNN, kernels) are outside the graph.
  const uint64_t reserve = 2ull << 30;
  SPW_CHECK(device_budget > reserve, "--device-mem", "leaves nothing beside ", format_bytes(reserve), " of workspaces");
  plan::Placement p = plan::plan_placement(g, device_budget - reserve, host_budget - host_state, cost);
  const plan::MachineRates rates = plan::h100_rates();
  const plan::StepPrediction pred = plan::predict_step(g, p, rates);
  const double tokens = static_cast<double>(a.batch * a.seq);
  const double flops = model::training_flops_per_token(config, a.seq) * tokens;
  std::printf("device peak %s (+%s workspaces) of %s; host peak %s (offloaded values) + %s state\n",
              format_bytes(p.device_peak).c_str(), format_bytes(reserve).c_str(), format_bytes(device_budget).c_str(),
              format_bytes(p.host_peak).c_str(), format_bytes(host_state).c_str());
  std::printf("moved per step: %s host->device, %s device->host; %d values offloaded\n",
              format_bytes(p.bytes_loaded).c_str(), format_bytes(p.bytes_stored).c_str(), p.values_offloaded);
  std::printf("predicted on %s: compute %.3f s, host->device %.3f s, device->host %.3f s -> step %.3f s, "
              "%.0f tok/s, MFU %.3f\n",
              rates.name.c_str(), pred.compute_seconds, pred.h2d_seconds, pred.d2h_seconds, pred.step_seconds,
              tokens / pred.step_seconds, flops / pred.step_seconds / rates.peak_flops);
  if (!a.svg.empty()) {
    write_text_file_atomically(a.svg, plan::timeline_svg(g, p, pred, rates, a.config + " seq " + std::to_string(a.seq)));
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
  cmd->add_flag("--bf16-moments", a->bf16_moments, "keep AdamW moments in bf16 to fit larger models");
  cmd->add_option("--svg", a->svg, "write the predicted timeline of the step here");
  return [a] { return run_plan(*a); };
}

}  // namespace spillway::cli
