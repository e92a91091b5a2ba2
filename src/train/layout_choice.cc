#include "train/layout_choice.h"

#include <algorithm>
#include <cstdio>

#include "base/status.h"

namespace spillway::train {

std::optional<LayoutChoice> choose_gpu_layout(const RunConfig& run, int gpus, int hosts, const std::string& gpu,
                                              uint64_t device_budget, uint64_t host_budget) {
  if (run.parallel.degrees_given || gpus <= 1) return std::nullopt;
  RunConfig planned = run;
  planned.memory.device_mem = device_budget;
  planned.memory.host_mem = host_budget;
  RunPlanOptions options;
  options.gpus = gpus;
  options.hosts = hosts;
  options.gpu = gpu;
  LayoutChoice choice;
  choice.layout.dp = gpus;
  try {
    // The GPU engine's pipeline and context parallelism take plain text
    // rows, not instruction data.
    const DataConfig& d = run.data;
    const bool instruction =
        d.format == DataFormat::instruction || d.packing ||
        (d.format == DataFormat::automatic && std::any_of(d.paths.begin(), d.paths.end(), [](const std::string& p) {
           return p.size() >= 6 && p.compare(p.size() - 6, 6, ".jsonl") == 0;
         }));
    const LayoutSearch search = search_layouts(
        planned, options, {.keep = 1, .pipeline = !instruction, .context = !instruction, .gpu_engine = true});
    const LayoutOutcome& best = search.fastest.front();
    choice.layout = best.layout;
    choice.step_seconds = best.step_seconds;
    char line[256];
    std::snprintf(line, sizeof line,
                  "layout: the planner chose %s of %d GPUs (predicted step %.3f s, MFU %.3f, --shard %s); give "
                  "--dp, --tp, --pp or --cp to choose another",
                  best.layout.text().c_str(), gpus, best.step_seconds, best.mfu, best.shard.c_str());
    choice.line = line;
  } catch (const Error& e) {
    choice.line = "layout: data parallelism over the " + std::to_string(gpus) +
                  " GPUs; the planner found no layout that fits (" + e.what() + ")";
  }
  return choice;
}

}  // namespace spillway::train
