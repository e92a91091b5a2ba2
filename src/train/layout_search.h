// The planner choosing the layout: every split of the GPUs into dp x pp x cp
// x tp (powers of two, tp innermost) that the model and the step divide
// into, each rank's step planned as plan_run plans it (the --shard level,
// offload and recomputation searched there), and the fastest predicted
// kept. `spillway plan --gpus N` prints what it found and `train` on GPUs
// runs its choice.
//
// Planning every layout of 1,024 GPUs would take minutes, so layouts are
// planned in the order of a bound on their step that needs no placement:
// the rank graph's own compute with every value on the device and nothing
// remade (built once per pp x cp x tp, whatever dp is), times the
// micro-batches (with pp: the 1F1B slots, each a forward more; interleaved
// with two stages a rank, tried beside each pp > 1). No plan is
// faster than its bound, so once `keep` layouts are planned faster than the
// next one's bound, the rest cannot be among the fastest and are not planned.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/run_config.h"
#include "train/run_plan.h"

namespace spillway::train {

struct Layout {
  int dp = 1, pp = 1, cp = 1, tp = 1;
  int virtual_stages = 1;    // pipeline stages a rank holds (interleaved 1F1B when more)
  std::string text() const;  // "dp 8 x pp 2 x cp 1 x tp 4", "dp 8 x pp 2v2 x cp 1 x tp 4"
  bool operator==(const Layout&) const = default;
};

struct LayoutOutcome {
  Layout layout;
  double bound_seconds = 0;   // no plan of it is faster
  // Planned: the step, tokens a second over all GPUs, MFU, a GPU's device
  // memory and the --shard level; else `why` (the planner's error).
  bool planned = false;
  double step_seconds = 0, tokens_per_second = 0, mfu = 0;
  uint64_t device_bytes = 0;
  std::string shard = {};
  std::string why = {};
};

struct LayoutSearchOptions {
  size_t keep = 5;          // the fastest planned layouts to be sure of
  bool pipeline = true;     // layouts with pp > 1 (engines that run them)
  bool context = true;      // layouts with cp > 1
  // Only what the GPU engine runs: tp, cp or both beside dp, or pp beside dp
  // alone; no interleaved stages; a tp or pp rank's plan all on its device.
  bool gpu_engine = false;
  unsigned threads = 0;     // layouts planned at once; 0: one a hardware thread
};

struct LayoutSearch {
  std::vector<LayoutOutcome> fastest;  // planned, fastest first (at least `keep` where as many fit)
  std::vector<LayoutOutcome> refused;  // the model or the budgets do not fit them
  std::vector<LayoutOutcome> slower;   // not planned: their bound is slower than the keep-th fastest
  std::optional<RunPlan> chosen;       // the fastest's plan; none when nothing fits
};

// The layouts of options.gpus GPUs; run.parallel's degrees are ignored.
// Error (the planner's, naming the flag) only where not one layout fits.
LayoutSearch search_layouts(const RunConfig& run, RunPlanOptions options, const LayoutSearchOptions& search = {});

// The RunConfig of a layout: run with its tp, pp, cp and dp.
RunConfig with_layout(RunConfig run, const Layout& layout);

}  // namespace spillway::train
