#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "device/power_monitor.h"
#include "model/llama_config_json.h"
#include "plan/machine_rates.h"
#include "train/engine.h"

namespace spillway::cli {

namespace {

struct BenchArgs {
  std::string config = "tiny";
  int64_t seq = 128;
  int64_t batch = 8;
  int64_t grad_accum = 1;
  int64_t steps = 10;
  int64_t warmup = 2;
  std::string device = "auto";
  std::string device_mem;
  std::string host_mem;
  std::string offload = "auto";
  std::string timeline;
  std::string json_path;
  uint64_t seed = 1;
  bool nondeterministic = false;
  bool profile = false;
  bool bf16_moments = false;
  std::string recompute = "none";
  bool cuda_graph = true;
  std::string projections = "auto";
  int matmul_candidates = train::EngineOptions{}.matmul_candidates;
  bool cublaslt_only = false;
};

int run_bench(const BenchArgs& a) {
  model::LlamaConfig config = model::resolve_config(a.config);
  SPW_CHECK(a.steps > 0 && a.warmup >= 0, "--steps", "need at least one timed step");
  model::LlamaWeights weights = model::LlamaWeights::random(config, a.seed);
  // With bf16 moments the engine keeps its own; fp32 ones would only cost memory.
  train::AdamW optimizer = a.bf16_moments ? train::AdamW() : train::AdamW(config);
  train::EngineOptions eo;
  eo.batch = a.batch;
  eo.seq = a.seq;
  eo.device = a.device;
  eo.deterministic = !a.nondeterministic;
  if (!a.device_mem.empty()) eo.device_memory = parse_bytes(a.device_mem, "--device-mem");
  if (!a.host_mem.empty()) eo.host_memory = parse_bytes(a.host_mem, "--host-mem");
  eo.offload = a.offload;
  eo.bf16_moments = a.bf16_moments;
  eo.recompute = a.recompute;
  eo.cuda_graph = a.cuda_graph;
  eo.projections = a.projections;
  SPW_CHECK(a.matmul_candidates >= 1, "--matmul-candidates", "need at least 1, got ", a.matmul_candidates);
  eo.matmul_candidates = a.matmul_candidates;
  eo.own_gemm = !a.cublaslt_only;
  eo.micro_batches = a.grad_accum;
  auto engine = train::make_engine(weights, optimizer, eo);

  const size_t n = static_cast<size_t>(a.batch * a.seq * a.grad_accum);
  std::vector<int32_t> tokens(n), targets(n);
  std::mt19937_64 rng(a.seed);
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab_size));
    targets[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab_size));
  }
  std::printf("bench: %s, %s parameters, batch %lld x seq %lld x accum %lld = %zu tokens per step, on %s\n",
              a.config.c_str(), std::to_string(model::parameter_count(config)).c_str(), static_cast<long long>(a.batch),
              static_cast<long long>(a.seq), static_cast<long long>(a.grad_accum), n, engine->description().c_str());
  const bool gpu = engine->on_gpu();
  // The engines run on GPU 0. Sampled over the timed steps only.
  std::string no_power;
  std::unique_ptr<PowerMonitor> power =
      gpu ? open_gpu_power_monitor(0, std::chrono::milliseconds(50), &no_power) : nullptr;
  PowerSummary power_summary;
  std::vector<double> times;
  double loss = 0;
  for (int64_t i = 0; i < a.warmup + a.steps; ++i) {
    if (power && i == a.warmup) power->start();
    auto t0 = std::chrono::steady_clock::now();
    loss = engine->train_step(tokens, targets, a.grad_accum, 1e-4).loss;  // returns after the step finished
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= a.warmup) times.push_back(secs);
    std::printf("  step %lld: %.3f s, loss %.4f%s\n", static_cast<long long>(i + 1), secs, loss,
                i < a.warmup ? " (warm-up)" : "");
  }
  if (power) power_summary = power->stop();
  if (a.profile) {
    engine->set_profiling(true);
    engine->train_step(tokens, targets, a.grad_accum, 1e-4);
    std::printf("time by op (one profiled step):\n%s", engine->profile_report().c_str());
    const std::string svg = engine->measured_timeline_svg();
    if (!a.timeline.empty() && !svg.empty()) {
      write_text_file_atomically(a.timeline, svg);
      std::printf("measured timeline of the last micro-batch: %s\n", a.timeline.c_str());
    }
  }
  // The mean too: PyTorch's baseline (../shared/bench/torch_llama.py) reports
  // the time of all its steps over their count.
  const double mean_step_s = std::accumulate(times.begin(), times.end(), 0.0) / static_cast<double>(times.size());
  std::sort(times.begin(), times.end());
  const double step_s = times[times.size() / 2];
  const double tok_s = static_cast<double>(n) / step_s;
  const double flops = model::training_flops_per_token(config, a.seq) * tok_s;
  const double mfu = flops / plan::rates_for_gpu(engine->device_name()).peak_flops;
  if (flops >= 1e12) std::printf("median step %.4f s | %.0f tok/s | %.1f TFLOP/s", step_s, tok_s, flops / 1e12);
  else std::printf("median step %.4f s | %.0f tok/s | %.1f GFLOP/s", step_s, tok_s, flops / 1e9);
  if (gpu) std::printf(" | MFU %.3f", mfu);
  std::printf(" | peak device memory %s\n", format_bytes(engine->peak_device_bytes()).c_str());
  if (power) std::printf("power over the timed steps: %s\n", format_power(power_summary).c_str());
  else if (gpu) std::printf("power: not sampled (%s)\n", no_power.c_str());
  const double predicted = engine->predicted_step_seconds();
  if (predicted > 0) {
    std::printf("planned: %.4f s per step predicted, %+.1f%% against the measured median\n", predicted,
                100.0 * (predicted - step_s) / step_s);
  }
  if (!a.json_path.empty()) {
    nlohmann::json j = {{"system", "spillway"},
                        {"config", a.config},
                        {"device", engine->description()},
                        {"seq", a.seq},
                        {"batch", a.batch},
                        {"grad_accum", a.grad_accum},
                        {"tokens_per_step", n},
                        {"step_s", step_s},
                        {"mean_step_s", mean_step_s},
                        {"mean_tok_s", static_cast<double>(n) / mean_step_s},
                        {"tok_s", tok_s},
                        {"tflops", flops / 1e12},
                        {"mfu", gpu ? nlohmann::json(mfu) : nlohmann::json(nullptr)},
                        {"peak_device_bytes", engine->peak_device_bytes()},
                        {"deterministic", !a.nondeterministic},
                        {"bf16_moments", a.bf16_moments},
                        {"recompute", a.recompute},
                        {"cuda_graph", engine->replays_cuda_graph()},
                        {"fused_projections", engine->fused_projections()},
                        {"matmul_candidates", a.matmul_candidates},
                        {"own_gemm", !a.cublaslt_only},
                        {"final_loss", loss}};
    if (predicted > 0) j["predicted_step_s"] = predicted;
    if (power_summary.samples > 0) {
      j["power"] = {{"samples", power_summary.samples},
                    {"median_w", power_summary.median_watts},
                    {"limit_w", power_summary.limit_watts},
                    {"capped_fraction", power_summary.capped_fraction},
                    {"thermal_fraction", power_summary.thermal_fraction},
                    {"median_sm_mhz", power_summary.median_sm_mhz},
                    {"max_sm_mhz", power_summary.max_sm_mhz},
                    {"max_celsius", power_summary.max_celsius}};
    }
    std::ofstream(a.json_path, std::ios::app) << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "time full training steps (forward, backward, AdamW): tok/s, MFU, memory");
  cmd->add_option("--config", a->config, "a preset or a config.json")->capture_default_str();
  cmd->add_option("--seq", a->seq, "tokens per sequence")->capture_default_str();
  cmd->add_option("--batch", a->batch, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--grad-accum", a->grad_accum, "micro-batches per step")->capture_default_str();
  cmd->add_option("--steps", a->steps, "timed steps (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed steps first")->capture_default_str();
  cmd->add_option("--device", a->device, "auto, cpu or cuda")->capture_default_str();
  cmd->add_option("--device-mem", a->device_mem, "device memory budget (e.g. 24GiB, 0.9)")
      ->envname("SPILLWAY_DEVICE_MEM");
  cmd->add_option("--host-mem", a->host_mem, "pinned host memory budget for a planned GPU step")
      ->envname("SPILLWAY_HOST_MEM");
  cmd->add_option("--offload", a->offload,
                  "GPU: auto (the fastest layout that fits), on (the masters' rest and the moments at home), off "
                  "(everything on the device), stream (weights and gradient sums at home too)")
      ->capture_default_str();
  cmd->add_flag("--cuda-graph,!--no-cuda-graph", a->cuda_graph,
                "GPU, where the step copies nothing: capture the step once, then replay it (the default; "
                "--no-cuda-graph: launch every kernel every step)");
  cmd->add_option("--projections", a->projections,
                  "GPU: q|k|v and gate|up as one matmul each (fused), as the checkpoint stores them (separate), or "
                  "auto (fused where the step copies nothing)")
      ->capture_default_str();
  cmd->add_option("--matmul-candidates", a->matmul_candidates,
                  "GPU: cuBLASLt candidates timed per matmul shape on first use (1: the heuristic's first)")
      ->capture_default_str();
  cmd->add_flag("--cublaslt-only", a->cublaslt_only,
                "GPU: every matmul through cuBLASLt (no own Hopper GEMM with RoPE or SwiGLU fused in)");
  cmd->add_option("--recompute", a->recompute, "GPU: none, layers, selective or auto (the fastest predicted)")
      ->capture_default_str();
  cmd->add_flag("--bf16-moments", a->bf16_moments,
                "GPU: AdamW moments in bf16 (half the moments' memory and optimizer traffic)");
  cmd->add_option("--timeline", a->timeline, "with --profile: write the measured per-stream timeline here (SVG)");
  cmd->add_option("--json", a->json_path, "append the result as one JSON line to this file");
  cmd->add_option("--seed", a->seed, "seed of the random weights and tokens")->capture_default_str();
  cmd->add_flag("--profile", a->profile, "after the timed steps, time each op kind over two more steps");
  cmd->add_flag("--nondeterministic", a->nondeterministic,
                "use cuDNN's atomic attention backward (faster; results may differ in the last bits run to run)");
  return [a] { return run_bench(*a); };
}

}  // namespace spillway::cli
