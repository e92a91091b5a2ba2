#include "cli/plan_layouts.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"

namespace spillway::cli {

void print_tensor_parallel_layouts(const train::RunConfig& run, const train::RunPlanOptions& a) {
  struct Layout {
    int tp;
    std::string line;
    double step_seconds = 0, tokens_per_second = 0;
  };
  std::vector<Layout> layouts;
  for (int tp = 1; tp <= a.gpus; tp *= 2) {
    if (a.gpus % tp != 0) continue;
    train::RunConfig with = run;
    with.parallel.tp = tp;
    Layout l{tp, ""};
    try {
      const train::RunPlan p = train::plan_run(with, a);
      const plan::TrainingPlan& q = p.plan();
      l.step_seconds = q.step_seconds;
      l.tokens_per_second = q.tokens_per_second * p.dp;
      char step[96];
      std::snprintf(step, sizeof step, "step %.3f s, %.0f tok/s over all GPUs (MFU %.3f)", q.step_seconds,
                    l.tokens_per_second, q.mfu);
      l.line = format_bytes(q.resident_bytes + q.placement.device_peak) + " a GPU; --shard " +
               std::string(train::enum_name(train::sharding_level(p.chosen.state))) + "; " + q.layout() + "; " + step;
    } catch (const Error& e) {
      l.line = std::string("does not fit: ") + e.what();
    }
    layouts.push_back(std::move(l));
  }
  const auto fastest = std::max_element(layouts.begin(), layouts.end(), [](const Layout& x, const Layout& y) {
    return x.tokens_per_second < y.tokens_per_second;
  });
  std::printf("tensor-parallel layouts of the %d GPUs:\n", a.gpus);
  for (const Layout& l : layouts) {
    const bool best = fastest != layouts.end() && fastest->tokens_per_second > 0 && &l == &*fastest;
    std::printf("  --tp %-2d x dp %-4d %s%s%s\n", l.tp, a.gpus / l.tp, l.line.c_str(),
                l.tp == run.parallel.tp ? " (chosen)" : "", best ? " (fastest)" : "");
  }
}

namespace {

// An error's problem, without the flag it names, cut to a line's worth.
std::string brief(const std::string& why) {
  constexpr size_t kMost = 110;
  return why.size() <= kMost ? why : why.substr(0, kMost - 3) + "...";
}

}  // namespace

void print_layout_search(const train::LayoutSearch& s, int gpus) {
  const size_t total = s.fastest.size() + s.refused.size() + s.slower.size();
  std::printf("layouts of the %d GPUs (dp x pp x cp x tp, tp innermost): %zu searched, %zu planned; the fastest:\n",
              gpus, total, s.fastest.size());
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < std::min(kShown, s.fastest.size()); ++i) {
    const train::LayoutOutcome& o = s.fastest[i];
    std::printf("  %-28s step %.3f s, %.0f tok/s over all GPUs, MFU %.3f, %s a GPU, --shard %s%s\n",
                o.layout.text().c_str(), o.step_seconds, o.tokens_per_second, o.mfu,
                format_bytes(o.device_bytes).c_str(), o.shard.c_str(), i == 0 ? " (chosen)" : "");
  }
  if (s.fastest.size() > kShown) std::printf("  %zu more planned, slower\n", s.fastest.size() - kShown);
  if (!s.slower.empty()) {
    std::printf("  %zu not planned: even with every value on the device and nothing remade, slower than these\n",
                s.slower.size());
  }
  // Why the rest do not fit, one line a reason, its layouts counted.
  std::map<std::string, std::vector<const train::LayoutOutcome*>> by_reason;
  for (const train::LayoutOutcome& o : s.refused) by_reason[brief(o.why)].push_back(&o);
  for (const auto& [why, layouts] : by_reason) {
    std::string which = layouts.front()->layout.text();
    if (layouts.size() > 1) which += " and " + std::to_string(layouts.size() - 1) + " more";
    std::printf("  does not fit: %s: %s\n", which.c_str(), why.c_str());
  }
}

void print_split_lines(const train::RunPlan& p) {
  const train::StepPlanRequest& req = p.request;
  if (p.cp > 1) {
    const double rate = req.rates.graph_collective_bytes > 0 ? req.rates.graph_collective_bytes
                                                             : req.rates.collective_bytes;
    std::printf("context parallel over %d GPUs: each takes %lld tokens of every sequence (two chunks, an early and a "
                "late one, so that their causal attention costs each GPU the same), each layer's keys and values "
                "all-gathered (the graph's collectives priced at %.0f GB/s); the weights' gradients summed over %d "
                "GPUs\n",
                p.cp, static_cast<long long>(req.seq), rate / 1e9, req.data_parallel);
  }
  if (!p.pipeline) return;
  const train::PipelinePricing& pp = *p.pipeline;
  std::string cuts;
  for (const model::LlamaStage& st : pp.stages) {
    const int64_t last = st.last_layer < 0 ? req.config.num_hidden_layers : st.last_layer;
    cuts += (cuts.empty() ? "" : ", ") + std::to_string(last - st.first_layer);
  }
  const int ranks = static_cast<int>(pp.stages.size()) / pp.chunks;
  const std::string schedule =
      pp.chunks > 1 ? "interleaved 1F1B (" + std::to_string(pp.chunks) + " stages a rank)" : std::string("1F1B");
  std::printf("pipeline of %d stages on %d ranks (layers a stage: %s), %s over %lld micro-batches: %.2f slots of the "
              "slowest rank (%d), each %.3f s (its forwards ahead %.3f + forwards again and backwards %.3f + "
              "hidden states handed over %.3f); bubble %.1f%% of the step; a stage keeps %lld hidden states of %s; "
              "most device memory: rank %d, %s\n",
              static_cast<int>(pp.stages.size()), ranks, cuts.c_str(), schedule.c_str(),
              static_cast<long long>(pp.micro_batches),
              static_cast<double>(pp.micro_batches) + (ranks - 1.0) / pp.chunks, pp.slowest, pp.slot_seconds,
              pp.forward_seconds, pp.slot_seconds - pp.forward_seconds - pp.transfer_seconds, pp.transfer_seconds,
              100 * pp.bubble, static_cast<long long>(pp.kept_inputs), format_bytes(pp.hidden_bytes).c_str(),
              pp.largest, format_bytes(pp.largest_bytes).c_str());
}

}  // namespace spillway::cli
