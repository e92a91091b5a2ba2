#include "train/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <string>

#include "base/status.h"

namespace spillway::train {

void check_virtual_stages(int64_t ranks, int64_t chunks, int64_t layers) {
  if (chunks == 1) return;
  SPW_CHECK(ranks > 1, "--virtual-stages", chunks, " stages a rank need pipeline parallelism (--pp 2 or more)");
  SPW_CHECK(ranks * chunks <= layers, "--virtual-stages", chunks, " stages a rank over ", ranks, " ranks make ",
            ranks * chunks, " stages, more than the model's ", layers, " layers");
}

void check_pipeline_micro_batches(int ranks, int chunks, int64_t micro_batches) {
  SPW_CHECK(chunks == 1 || micro_batches % ranks == 0, "--grad-accum",
            "interleaved stages take micro-batches in groups of --pp; ", micro_batches, " micro-batches a pipeline ",
            "are not a multiple of ", ranks);
}

std::vector<PipelinePass> pipeline_order(int rank, int ranks, int chunks, int64_t micro_batches, bool backward) {
  SPW_CHECK(ranks >= 1 && rank >= 0 && rank < ranks && chunks >= 1 && micro_batches >= 1, "pipeline schedule",
            "rank ", rank, " of ", ranks, " with ", chunks, " chunks and ", micro_batches, " micro-batches");
  std::vector<PipelinePass> order;
  if (!backward) {  // stage after stage
    for (int chunk = 0; chunk < chunks; ++chunk) {
      for (int64_t mb = 0; mb < micro_batches; ++mb) order.push_back({false, chunk, mb});
    }
    return order;
  }
  check_pipeline_micro_batches(ranks, chunks, micro_batches);
  const int64_t total = micro_batches * chunks;
  // The k-th forward pass (or, chunks reversed, the k-th backward one).
  auto pass = [&](int64_t k, bool back) {
    const int64_t group = ranks * static_cast<int64_t>(chunks);
    int chunk = static_cast<int>(k % group / ranks);
    if (chunks == 1) return PipelinePass{back, 0, k};
    if (back) chunk = chunks - 1 - chunk;
    return PipelinePass{back, chunk, k / group * ranks + k % ranks};
  };
  const int64_t ahead = chunks == 1 ? ranks - rank - 1 : (ranks - rank - 1) * 2 + (chunks - 1) * int64_t{ranks};
  const int64_t warmup = std::min(ahead, total);
  for (int64_t k = 0; k < warmup; ++k) order.push_back(pass(k, false));
  for (int64_t k = 0; k < total; ++k) {
    if (k + warmup < total) order.push_back(pass(k + warmup, false));
    order.push_back(pass(k, true));
  }
  return order;
}

std::optional<int> PipelineTimeline::receiver(int stage, const PipelinePass& p) const {
  const int to = p.backward ? stage - 1 : stage + 1;
  if (to < 0 || to >= stages()) return std::nullopt;
  return to % ranks;
}

double PipelineTimeline::idle_fraction() const {
  int64_t busy = 0;
  for (const auto& tick : ticks) {
    for (const auto& p : tick) busy += p.has_value();
  }
  return ticks.empty() ? 0.0 : 1.0 - static_cast<double>(busy) / static_cast<double>(ticks.size() * ranks);
}

std::vector<PipelineTimeline::Arrival> PipelineTimeline::arrivals(size_t tick, int rank) const {
  std::vector<Arrival> out;
  for (int r = 0; r < ranks; ++r) {
    const auto& pass = ticks[tick][static_cast<size_t>(r)];
    if (r == rank || !pass) continue;
    const int from = stage_of(r, *pass);
    if (receiver(from, *pass) != rank) continue;
    out.push_back({.from = r, .gradient = pass->backward, .stage = pass->backward ? from - 1 : from + 1,
                   .micro_batch = pass->micro_batch});
  }
  return out;
}

PipelineTimeline pipeline_timeline(int ranks, int chunks, int64_t micro_batches, bool backward) {
  PipelineTimeline t{.ranks = ranks, .chunks = chunks, .ticks = {}};
  std::vector<std::vector<PipelinePass>> orders;
  for (int r = 0; r < ranks; ++r) orders.push_back(pipeline_order(r, ranks, chunks, micro_batches, backward));
  std::vector<size_t> next(static_cast<size_t>(ranks), 0);
  // The tick each (backward?, stage, micro-batch) pass ran at.
  std::map<std::tuple<bool, int, int64_t>, size_t> done;
  size_t left = 0;
  for (const auto& o : orders) left += o.size();
  for (size_t tick = 0; left > 0; ++tick) {
    auto ran_before = [&](bool back, int stage, int64_t mb) {
      const auto it = done.find({back, stage, mb});
      return it != done.end() && it->second < tick;
    };
    std::vector<std::optional<PipelinePass>> row(static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const auto& order = orders[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      if (i == order.size()) continue;
      const PipelinePass& p = order[i];
      const int stage = t.stage_of(r, p);
      const bool ready = p.backward ? ran_before(false, stage, p.micro_batch) &&
                                          (stage + 1 == t.stages() || ran_before(true, stage + 1, p.micro_batch))
                                    : stage == 0 || ran_before(false, stage - 1, p.micro_batch);
      if (!ready) continue;
      row[static_cast<size_t>(r)] = p;
      done[{p.backward, stage, p.micro_batch}] = tick;
      ++i;
      --left;
    }
    // An order that waits on itself would never end: each order above
    // makes progress at some rank every tick.
    SPW_CHECK(std::any_of(row.begin(), row.end(), [](const auto& p) { return p.has_value(); }), "pipeline schedule",
              "no rank can run at tick ", tick, " (", ranks, " ranks, ", chunks, " chunks, ", micro_batches,
              " micro-batches)");
    t.ticks.push_back(std::move(row));
  }
  return t;
}

}  // namespace spillway::train
