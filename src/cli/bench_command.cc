#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/host_memory.h"
#include "base/status.h"
#include "cli/bench_collectives.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "cli/training_ranks.h"
#include "device/power_monitor.h"
#include "model/llama_config_json.h"
#include "plan/machine_rates.h"
#include "train/engine.h"
#include "train/lora_plan.h"
#include "train/lora_state.h"
#include "train/start_weights.h"

namespace spillway::cli {

namespace {

// What a bench run takes besides its run configuration: how long to time,
// and what to report where.
struct BenchArgs {
  int64_t steps = 10;  // timed steps
  int64_t warmup = 2;  // untimed steps first
  uint64_t seed = 1;   // of the random weights and tokens
  std::string json_path;
  bool profile = false;
  std::string timeline;
  bool collectives = false;
};

// With data-parallel ranks, each runs its share of the step's grad_accum
// micro-batches (on tokens of its own; the ranks of a tensor-parallel group
// on the same ones) and the lead rank (rank 0 of the world) reports the step.
int run_bench(const train::RunConfig& given, const BenchArgs& a) {
  if (std::optional<int> exit_code = start_ranks_here(given)) return *exit_code;
  // With no degrees given, the planner's layout, as `train` takes it.
  const train::RunConfig c = with_planned_layout(given);
  const TrainingRanks ranks = meet_ranks(c, train::Command::bench);
  const int rank = ranks.data_parallel.rank(), size = ranks.data_parallel.size();
  const bool lead = ranks.data_parallel.world_rank == 0;
  const int world = ranks.data_parallel.world_size;
  model::LlamaConfig config = model::resolve_config(c.model.config);
  SPW_CHECK(a.steps > 0 && a.warmup >= 0, "--steps", "need at least one timed step");
  const train::ScheduleConfig& s = c.schedule;
  SPW_CHECK(s.grad_accum % size == 0, "--grad-accum", s.grad_accum, " micro-batches do not split evenly over ", size,
            " data-parallel ranks");
  const int64_t micro_batches = s.grad_accum / size;
  // Start-up, timed: on a lent machine it is a real share of the lease.
  const auto started = std::chrono::steady_clock::now();
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // QLoRA: the base quantized as it is drawn, never whole in float32.
  train::StartWeights start = train::random_start_weights(config, c, a.seed, ranks.data_parallel.ranks_on_host);
  model::LlamaWeights& weights = start.weights;
  const double init_s = seconds_since(started);
  // No moments: the engine starts its own at zero.
  train::AdamW optimizer;
  // LoRA: fresh adapters over the random weights, frozen.
  std::optional<train::LoraState> lora;
  if (c.lora.rank > 0) lora = train::LoraState::fresh(config, train::lora_config(c), a.seed);
  const train::EngineOptions eo{.batch = s.batch,
                                .seq = s.seq,
                                .micro_batches = micro_batches,
                                .device = c.run.device,
                                .memory = c.memory,
                                .kernels = c.kernels,
                                .data_parallel = ranks.data_parallel.comm,
                                .shard = c.parallel.shard,
                                .tensor_parallel = ranks.data_parallel.tensor_parallel,
                                .sequence_parallel = c.parallel.sequence_parallel,
                                .pipeline_parallel = ranks.data_parallel.pipeline_parallel,
                                .context_parallel = ranks.data_parallel.context_parallel,
                                .replicas = ranks.data_parallel.replicas,
                                .gpu_ordinal = ranks.data_parallel.gpu_ordinal,
                                .ranks_on_host = ranks.data_parallel.ranks_on_host,
                                .lora = lora ? &*lora : nullptr,
                                .lora_base = c.lora.base,
                                .lora_quantized = start.quantized ? &*start.quantized : nullptr};
  const auto engine_started = std::chrono::steady_clock::now();
  auto engine = train::make_engine(weights, optimizer, eo);
  const double engine_s = seconds_since(engine_started);
  const uint64_t started_rss = resident_host_bytes();

  const size_t n = static_cast<size_t>(s.batch * s.seq * s.grad_accum);  // over all ranks
  const size_t mine = n / static_cast<size_t>(size);
  std::vector<int32_t> tokens(mine), targets(mine);
  std::mt19937_64 rng(a.seed + static_cast<uint64_t>(rank));
  for (size_t i = 0; i < mine; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab_size));
    targets[i] = static_cast<int32_t>(rng() % static_cast<uint64_t>(config.vocab_size));
  }
  // Only the lead rank prints; the others' errors still reach the terminal.
  std::string ranks_note = size > 1 ? " x " + std::to_string(size) + " data-parallel ranks" : "";
  if (c.parallel.pp > 1) ranks_note += " x " + std::to_string(c.parallel.pp) + " pipeline stages";
  if (c.parallel.cp > 1) ranks_note += " x " + std::to_string(c.parallel.cp) + " context-parallel ranks";
  if (c.parallel.tp > 1) ranks_note += " x " + std::to_string(c.parallel.tp) + " tensor-parallel ranks";
  if (lead) {
    std::printf("bench: %s, %s parameters, batch %lld x seq %lld x accum %lld = %zu tokens per step, on %s%s\n",
                c.model.config.c_str(), std::to_string(model::parameter_count(config)).c_str(),
                static_cast<long long>(s.batch), static_cast<long long>(s.seq), static_cast<long long>(s.grad_accum),
                n, engine->description().c_str(), ranks_note.c_str());
    std::printf("start-up: %.1f s of random weights, %.1f s making the engine (plan, state, runners); host memory "
                "resident after it %s\n",
                init_s, engine_s, format_bytes(started_rss).c_str());
  }
  const bool gpu = engine->on_gpu();
  // The lead rank's GPU, sampled over the timed steps only.
  std::string no_power;
  std::unique_ptr<PowerMonitor> power =
      gpu && lead ? open_gpu_power_monitor(ranks.data_parallel.gpu_ordinal, std::chrono::milliseconds(50), &no_power)
                       : nullptr;
  PowerSummary power_summary;
  std::vector<double> times;
  double loss = 0;
  for (int64_t i = 0; i < a.warmup + a.steps; ++i) {
    if (power && i == a.warmup) power->start();
    auto t0 = std::chrono::steady_clock::now();
    loss = engine->train_step(tokens, targets, micro_batches, 1e-4).loss;  // returns after the step finished
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i >= a.warmup) times.push_back(secs);
    if (lead) {
      std::printf("  step %lld: %.3f s, loss %.4f%s\n", static_cast<long long>(i + 1), secs, loss,
                  i < a.warmup ? " (warm-up)" : "");
    }
  }
  if (power) power_summary = power->stop();
  if (a.profile) {
    engine->set_profiling(true);
    engine->train_step(tokens, targets, micro_batches, 1e-4);
    if (!lead) {
      // Every rank's own times: where ranks wait for each other, a
      // collective's time on one rank is another's slower work. One write
      // each, so that the ranks' reports do not interleave.
      const std::string report = "rank " + std::to_string(ranks.data_parallel.world_rank) +
                                 ", time by op (one profiled step):\n" + engine->profile_report();
      std::fwrite(report.data(), 1, report.size(), stderr);
      return 0;
    }
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
  const double flops = (lora ? train::lora_training_flops_per_token(config, lora->adapters.lora(), s.seq)
                             : model::training_flops_per_token(config, s.seq)) *
                      tok_s;
  const double mfu = flops / (plan::rates_for_gpu(engine->device_name()).peak_flops * world);
  if (!lead) return 0;
  if (flops >= 1e12) std::printf("median step %.4f s | %.0f tok/s | %.1f TFLOP/s", step_s, tok_s, flops / 1e12);
  else std::printf("median step %.4f s | %.0f tok/s | %.1f GFLOP/s", step_s, tok_s, flops / 1e9);
  if (gpu) std::printf(" | MFU %.3f", mfu);
  std::printf(" | peak device memory %s | peak resident host memory %s\n",
              format_bytes(engine->peak_device_bytes()).c_str(), format_bytes(peak_resident_host_bytes()).c_str());
  if (power) std::printf("power over the timed steps: %s\n", format_power(power_summary).c_str());
  else if (gpu) std::printf("power: not sampled (%s)\n", no_power.c_str());
  const double predicted = engine->predicted_step_seconds();
  if (predicted > 0) {
    std::printf("planned: %.4f s per step predicted, %+.1f%% against the measured median\n", predicted,
                100.0 * (predicted - step_s) / step_s);
  }
  if (!a.json_path.empty()) {
    nlohmann::json j = {{"system", "spillway"},
                        {"config", c.model.config},
                        {"device", engine->description()},
                        {"seq", s.seq},
                        {"batch", s.batch},
                        {"grad_accum", s.grad_accum},
                        {"gpus", gpu ? world : 0},
                        {"dp", size},
                        {"tp", c.parallel.tp},
                        {"pp", c.parallel.pp},
                        {"cp", c.parallel.cp},
                        {"sequence_parallel", c.parallel.tp > 1 && c.parallel.sequence_parallel},
                        {"shard", train::enum_name(c.parallel.shard)},
                        {"tok_s_per_gpu", tok_s / world},
                        {"tokens_per_step", n},
                        {"step_s", step_s},
                        {"mean_step_s", mean_step_s},
                        {"mean_tok_s", static_cast<double>(n) / mean_step_s},
                        {"tok_s", tok_s},
                        {"tflops", flops / 1e12},
                        {"mfu", gpu ? nlohmann::json(mfu) : nlohmann::json(nullptr)},
                        {"peak_device_bytes", engine->peak_device_bytes()},
                        {"peak_host_rss_bytes", peak_resident_host_bytes()},
                        {"deterministic", c.kernels.deterministic},
                        {"bf16_moments", c.memory.bf16_moments},
                        {"recompute", train::enum_name(c.memory.recompute)},
                        {"cuda_graph", engine->replays_cuda_graph()},
                        {"fused_projections", engine->fused_projections()},
                        {"matmul_candidates", c.kernels.matmul_candidates},
                        {"own_gemm", c.kernels.own_gemm},
                        {"final_loss", loss},
                        {"startup_s", {{"weights", init_s}, {"engine", engine_s}}},
                        {"started_host_rss_bytes", started_rss}};
    if (predicted > 0) j["predicted_step_s"] = predicted;
    if (lora) {
      j["lora"] = {{"rank", c.lora.rank},
                   {"alpha", c.lora.alpha},
                   {"targets", c.lora.targets},
                   {"base", model::lora_base_name(c.lora.base)},
                   {"trained_parameters", lora->adapters.numel()}};
    }
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
  auto flags = std::make_shared<RunFlags>(cmd, train::Command::bench);
  cmd->add_option("--steps", a->steps, "timed steps (the median is reported)")->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "untimed steps first")->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed of the random weights and tokens")->capture_default_str();
  cmd->add_option("--json", a->json_path, "append the result as one JSON line to this file");
  cmd->add_flag("--profile", a->profile,
                "after the timed steps, time each op kind over two more steps (on several ranks, each rank's times "
                "too, on stderr)");
  cmd->add_option("--timeline", a->timeline, "with --profile: write the measured per-stream timeline here (SVG)");
  cmd->add_flag("--collectives", a->collectives,
                "instead of training steps, time the collectives between the ranks: the link rate for plan --link-rate");
  return [a, flags] {
    return a->collectives ? run_collectives_bench(flags->resolve(), a->json_path) : run_bench(flags->resolve(), *a);
  };
}

}  // namespace spillway::cli
