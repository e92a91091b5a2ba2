#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "base/atomic_file.h"
#include "base/bytes.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/plan_layouts.h"
#include "cli/run_flags.h"
#include "model/llama_config_json.h"
#include "model/lora.h"
#include "train/device_reserve.h"
#include "train/layout_search.h"
#include "train/lora_host_need.h"
#include "train/lora_plan.h"
#include "train/run_plan.h"

namespace spillway::cli {

namespace {

// What a plan takes besides its run configuration.
struct PlanArgs {
  train::RunPlanOptions options;
  std::string svg;
};

// Every --shard level side by side, as the planner would lay it out: what
// each GPU holds and the predicted step, or why it does not fit (with
// --largest, of the largest model each level fits).
void print_sharding_levels(const train::RunConfig& run, const train::RunPlanOptions& a,
                           const plan::TrainingStateSpec& chosen) {
  using train::StateSharding;
  const StateSharding chosen_level = train::sharding_level(chosen);
  for (StateSharding level :
       {StateSharding::none, StateSharding::optimizer, StateSharding::gradients, StateSharding::weights}) {
    std::string line;
    try {
      train::RunConfig with = run;
      with.parallel.shard = level;
      const train::RunPlan o = train::plan_run(with, a);
      const plan::TrainingPlan& q = o.plan();
      char step[64];
      std::snprintf(step, sizeof step, "step %.3f s (MFU %.3f)", q.step_seconds, q.mfu);
      line = format_bytes(q.resident_bytes + q.placement.device_peak) + " a GPU; " + q.layout() + "; " + step;
      // --largest: each level's own largest model, so its size leads the line.
      if (a.largest) {
        char size[64];
        const auto layers = static_cast<long long>(o.request.config.num_hidden_layers);
        std::snprintf(size, sizeof size, "%lld layer%s (%.2f B): ", layers, layers == 1 ? "" : "s",
                      static_cast<double>(q.parameters) / 1e9);
        line = size + line;
      }
    } catch (const Error& e) {
      line = std::string("does not fit: ") + e.what();
    }
    std::printf("  --shard %-9s %s%s\n", std::string(train::enum_name(level)).c_str(), line.c_str(),
                level == chosen_level ? " (chosen)" : "");
  }
}

// The plan of `run`'s layout, in detail.
int print_plan(const train::RunConfig& run, const train::RunPlan& planned, const PlanArgs& args) {
  const train::RunPlanOptions& a = args.options;
  const train::ScheduleConfig& s = run.schedule;
  const train::MemoryConfig& m = run.memory;
  const train::StepPlanRequest& req = planned.request;
  const train::PlannedStep& chosen = planned.chosen;
  const int64_t batch = req.batch, micro_batches = req.micro_batches;
  const uint64_t reserved = planned.reserved;
  const plan::TrainingPlan& p = chosen.plan;
  const graph::Graph& g = chosen.step->step.graph;
  const std::string recompute =
      train::recompute_report(*chosen.step, run.memory.recompute == train::RecomputeChoice::automatic);
  const std::string per_gpu = a.gpus > 1 ? " per GPU" : "";
  const std::string& name = planned.name;
  std::printf("%s: %.2f B parameters, batch %lld%s x seq %lld x %lld micro-batches = %lld tokens per optimizer step%s\n",
              name.c_str(), static_cast<double>(p.parameters) / 1e9, static_cast<long long>(batch),
              a.batch_auto ? " (auto)" : "", static_cast<long long>(s.seq), static_cast<long long>(micro_batches),
              static_cast<long long>(batch * s.seq * micro_batches), per_gpu.c_str());
  if (planned.tp > 1) {
    std::printf("tensor parallel over %d GPUs%s: each splits every layer's matrices (its graph's collectives priced "
                "at %.0f GB/s)%s\n",
                planned.tp, run.parallel.sequence_parallel ? " with sequence parallelism" : "",
                (req.rates.graph_collective_bytes > 0 ? req.rates.graph_collective_bytes : req.rates.collective_bytes) /
                    1e9,
                planned.tp < a.gpus ? (", " + std::to_string(a.gpus / planned.tp) + " such groups").c_str() : "");
  }
  if (req.data_parallel > 1) {
    const plan::TrainingStateSpec& st = chosen.state;
    const bool sharded = st.state_shards > 1;
    // As the GPU engine does: under the backward pass where nothing moves.
    const std::string sums = st.shard_gradients  ? "gradient sums reduce-scattered under each micro-batch's backward pass"
                             : p.all_on_device() ? "gradient sums all-reduced under the backward pass"
                             : sharded           ? "gradient sums reduce-scattered after the backward pass"
                                                 : "gradient sums all-reduced after the backward pass";
    const std::string kept =
        st.shard_weights     ? "weights, gradient sums, masters' rest and AdamW's moments sharded, 1/N on each (ZeRO-3)"
        : st.shard_gradients ? "gradient sums, masters' rest and AdamW's moments sharded, 1/N on each (ZeRO-2)"
        : sharded            ? "the masters' rest and AdamW's moments sharded, 1/N on each (ZeRO-1)"
                             : "every GPU keeps the whole training state";
    const std::string rings = st.shard_gradients ? "; whole copies in rings of " + format_bytes(st.ring_bytes) : "";
    const std::string gathered = st.shard_weights ? ", each layer's weights all-gathered ahead of its use forward and "
                                                    "backward"
                                 : sharded        ? ", weights all-gathered"
                                                  : "";
    const std::string where = a.hosts > 1 ? " on " + std::to_string(a.hosts) + " hosts" : "";
    std::printf("data parallel over %d GPUs%s: %s%s; each sends %s a step (%s%s) at %.0f GB/s (%s); the step waits "
                "%.3f s for it\n",
                req.data_parallel, where.c_str(), kept.c_str(), rings.c_str(), format_bytes(p.bytes_communicated).c_str(),
                sums.c_str(), gathered.c_str(), req.rates.collective_bytes / 1e9, planned.link_rate_source.c_str(),
                p.communication_seconds);
    print_sharding_levels(run, a, st);
  }
  print_split_lines(planned);
  if (run.parallel.degrees_given && a.gpus > 1 && !a.largest && planned.pp == 1 && planned.cp == 1) {
    print_tensor_parallel_layouts(run, a);
  }
  const std::string head = train::head_summary(*chosen.step);
  std::printf("layout: %s; q|k|v and gate|up %s%s%s\n", p.layout().c_str(),
              chosen.step->fused_projections ? "stacked" : "separate",
              recompute.empty() ? "" : ("; recomputation: " + recompute).c_str(),
              head.empty() ? "" : ("; " + head).c_str());
  std::printf("step graph: %zu nodes, %zu values; minimum device budget beside the resident state %s\n",
              g.nodes().size(), g.values().size(),
              format_bytes(planned.minimum_device_budget).c_str());
  std::printf("device%s: %s resident + %s planned peak + %s kernel workspaces and reserve of %s\n", per_gpu.c_str(),
              format_bytes(p.resident_bytes).c_str(), format_bytes(p.placement.device_peak).c_str(),
              format_bytes(reserved).c_str(), format_bytes(req.device_budget).c_str());
  // The offloaded values take the room of the fp32 masters the trainer
  // starts from, which the state has let go of before any step.
  const std::string shared_room = "runtime " + format_bytes(req.host_reserved) + " + the larger of " +
                                  format_bytes(p.placement.host_peak) + " offloaded values and " +
                                  format_bytes(p.host_startup_bytes) + " fp32 masters at start-up, of " +
                                  format_bytes(req.host_budget);
  if (p.optimizer_resident) {
    std::printf("host%s: no state (fp32 masters' remainders and %s AdamW moments on the device) + %s\n", per_gpu.c_str(),
                m.bf16_moments ? "bf16" : "fp32", shared_room.c_str());
  } else {
    std::printf("host%s: %s state (fp32 masters' remainders, %s AdamW moments%s) + %s\n", per_gpu.c_str(),
                format_bytes(p.host_state_bytes).c_str(), m.bf16_moments ? "bf16" : "fp32",
                p.weights_resident ? "" : ", bf16 weights", shared_room.c_str());
  }
  std::printf("moved per micro-batch: %s host->device, %s device->host\n",
              format_bytes(p.placement.bytes_loaded).c_str(), format_bytes(p.placement.bytes_stored).c_str());
  std::printf("predicted on %s: micro-batch %.3f s (compute %.3f + waiting for copies %.3f; host->device busy %.3f, "
              "device->host busy %.3f), communication %.3f s, optimizer %.3f s -> step %.3f s, %.0f tok/s%s, MFU %.3f\n",
              req.rates.name.c_str(), p.micro.step_seconds, p.micro.compute_seconds, p.micro.wait_seconds,
              p.micro.h2d_seconds, p.micro.d2h_seconds, p.communication_seconds, p.optimizer_seconds,
              p.step_seconds, p.tokens_per_second * req.data_parallel, a.gpus > 1 ? " over all GPUs" : "", p.mfu);
  if (!args.svg.empty()) {
    write_text_file_atomically(args.svg, planned.timeline_svg());
    std::printf("timeline: %s\n", args.svg.c_str());
  }
  return 0;
}

// LoRA's step on one GPU (train/lora_plan.h): what it takes on the device
// against --device-mem, the runners' workspaces estimated as for a full
// step, and the recomputation auto takes. LoRA's data-parallel ranks each
// hold the same; nothing is offloaded, so there is no layout to search.
int print_lora_plan(const train::RunConfig& run, const PlanArgs& args) {
  SPW_CHECK(args.options.gpus == 1 && run.parallel.tp == 1 && run.parallel.pp == 1 && run.parallel.cp == 1,
            args.options.gpus > 1 ? "--gpus" : "--tp", "LoRA is planned for one GPU: its data-parallel ranks each "
            "hold the same, and it has no other layout");
  const model::LlamaConfig config = model::resolve_config(run.model.config);
  const model::LoraConfig lora = train::lora_config(run);
  const uint64_t budget = run.memory.device_mem;
  const bool deterministic = run.kernels.deterministic;
  const train::LoraStepPlan p = train::plan_lora_step(
      {.config = config,
       .lora = lora,
       .base = run.lora.base,
       .batch = run.schedule.batch,
       .seq = run.schedule.seq,
       .recompute = run.memory.recompute,
       .budget = budget},
      [deterministic](const train::LlamaStep& train, const train::LlamaStep&) {
        return train::estimated_kernel_workspaces(train.step.graph, deterministic);
      });
  int64_t trained = 0;
  for (const auto& s : model::lora_specs(config, lora)) trained += s.shape.numel();
  std::printf("%s: LoRA rank %lld on %zu projections (%.2f M trained parameters; %.2f B weights frozen%s), batch %lld "
              "x seq %lld\n",
              run.model.config.c_str(), static_cast<long long>(lora.rank), p.train->model.adapters.size() / 2,
              static_cast<double>(trained) / 1e6, static_cast<double>(model::parameter_count(config)) / 1e9,
              run.lora.base == model::LoraBase::weights ? "" : ", the targeted ones NF4",
              static_cast<long long>(run.schedule.batch), static_cast<long long>(run.schedule.seq));
  std::printf("device: %s of %s: %s; recomputation: %s\n", format_bytes(p.need.total()).c_str(),
              format_bytes(budget).c_str(), p.need.describe(run.lora.base).c_str(),
              p.recomputed ? "layers" : "none");
  // The base as a run makes it: drawn at random by every thread at once
  // (bench, or train from a config; reading a folder quantizes one tensor
  // at a time, less).
  const int64_t makers = run.run.threads > 0 ? run.run.threads : omp_get_max_threads();
  const train::LoraHostNeed host = train::lora_host_need(config, lora, run.lora.base, makers, train::kHostRuntimeBytes);
  std::printf("host: %s of %s: %s\n", format_bytes(host.total()).c_str(), format_bytes(run.memory.host_mem).c_str(),
              host.describe(run.lora.base).c_str());
  train::check_lora_fits(p.need, budget, run.lora.base, p.recomputed);
  train::check_lora_host_fits(host, run.memory.host_mem, run.lora.base, "--host-mem");
  return 0;
}

// With no degree given, the planner chooses the layout of the GPUs: the
// search is printed, then the choice in detail.
int run_plan(const train::RunConfig& run, PlanArgs args) {
  if (run.lora.rank > 0) return print_lora_plan(run, args);
  train::RunPlanOptions& a = args.options;
  // The --shard levels and the layouts beside the plan build the same graphs.
  a.cache = std::make_shared<train::LlamaStepCache>();
  if (run.parallel.degrees_given || a.gpus == 1 || a.largest) return print_plan(run, train::plan_run(run, a), args);
  train::LayoutSearch search = train::search_layouts(run, a);
  print_layout_search(search, a.gpus);
  const train::Layout& l = search.fastest.front().layout;
  return print_plan(train::with_layout(run, l), *search.chosen, args);
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
  cmd->add_option("--gpu", args->options.gpu, "the GPU to predict for: H100 or H200")->capture_default_str();
  cmd->add_option("--svg", args->svg, "write the predicted timeline of the step here");
  cmd->add_option("--gpus", args->options.gpus,
                  "data-parallel GPUs, one rank each (--device-mem is each GPU's, --host-mem each host's)")
      ->capture_default_str();
  cmd->add_option("--hosts", args->options.hosts, "hosts the --gpus are spread over evenly")->capture_default_str();
  cmd->add_option("--link-rate", args->options.link_rate,
                  "GB/s each GPU's collectives send (spillway bench --collectives measures it; default: NVLink's "
                  "within a host, 50 across hosts)");
  cmd->add_flag("--largest", args->options.largest,
                "plan the most layers of the model's width that fit the budgets instead of its own layer count");
  return [flags, args] {
    PlanArgs a = *args;
    a.options.batch_auto = flags->chose("schedule.batch");
    return run_plan(flags->resolve(), a);
  };
}

}  // namespace spillway::cli
