#include "train/layout_search.h"

#include <algorithm>
#include <future>
#include <thread>
#include <map>
#include <tuple>

#include "base/status.h"
#include "model/llama_config_json.h"
#include "model/llama_stages.h"

namespace spillway::train {

std::string Layout::text() const {
  std::string t = "dp " + std::to_string(dp) + " x pp " + std::to_string(pp);
  if (virtual_stages > 1) t += 'v' + std::to_string(virtual_stages);
  return t + " x cp " + std::to_string(cp) + " x tp " + std::to_string(tp);
}

RunConfig with_layout(RunConfig run, const Layout& l) {
  run.parallel.dp = l.dp;
  run.parallel.pp = l.pp;
  run.parallel.cp = l.cp;
  run.parallel.tp = l.tp;
  run.parallel.virtual_stages = l.virtual_stages;
  return run;
}

namespace {

// Every split of `gpus` into dp x pp x cp x tp with pp, cp and tp powers of
// two (dp what they leave).
std::vector<Layout> layouts_of(int gpus, const LayoutSearchOptions& o) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= gpus; tp *= 2) {
    for (int cp = 1; tp * cp <= gpus; cp *= 2) {
      if (cp > 1 && !o.context) break;
      for (int pp = 1; tp * cp * pp <= gpus; pp *= 2) {
        if (pp > 1 && !o.pipeline) break;
        if (gpus % (tp * cp * pp) != 0) continue;
        // The GPU engine runs pp beside dp alone; tp and cp beside each other and dp.
        if (o.gpu_engine && pp > 1 && tp * cp > 1) continue;
        out.push_back({gpus / (tp * cp * pp), pp, cp, tp});
        if (pp > 1 && !o.gpu_engine) out.push_back({gpus / (tp * cp * pp), pp, cp, tp, 2});  // interleaved
      }
    }
  }
  return out;
}

// A rank's micro-batch slot with every value on the device and nothing
// remade (the least any plan of it takes), by the part of the model, for
// one cp x tp split: what the bounds of every pp and dp are made of.
struct SlotCosts {
  model::LlamaStepCosts rank;   // the rank's graph, by part
  model::LlamaStepCosts whole;  // the whole model's, which the pipeline's cuts balance
};

SlotCosts slot_costs(const StepPlanRequest& r) {
  SlotCosts c;
  const bool fused = r.context.ranks == 1;
  const auto step = llama_step_of(r, fused, {.backward = true, .recompute = graph::RecomputePolicy::none});
  c.rank = model::llama_graph_costs(step->step.graph, r.config.num_hidden_layers, r.rates);
  c.whole = r.cache->costs(
      std::to_string(r.config.num_hidden_layers) + "," + std::to_string(r.batch) + "," + std::to_string(r.seq),
      [&] { return model::llama_step_costs(r.config, r.batch, r.seq, r.rates); });
  return c;
}

// No plan of the layout is faster: its micro-batches (with pp: its 1F1B
// slots, at the slowest stage of the cuts the pipeline makes) at the
// slot's least. The forward pass a pipeline stage runs ahead is left out,
// as the exchanges are.
double bound_seconds(const SlotCosts& c, int pp, int64_t micro_batches, int virtual_stages = 1) {
  if (pp == 1) {
    double s = c.rank.embedding + c.rank.head;
    for (double l : c.rank.layers) s += l;
    return static_cast<double>(micro_batches) * s;
  }
  // A rank's slot: its stages' passes (rank r holds stages r, r + pp, ...).
  const std::vector<model::LlamaStage> stages = model::balance_llama_stages(c.whole, pp * virtual_stages);
  double slowest = 0;
  for (int r = 0; r < pp; ++r) {
    double slot = 0;
    for (int k = 0; k < virtual_stages; ++k) slot += model::stage_seconds(c.rank, stages[static_cast<size_t>(k * pp + r)]);
    slowest = std::max(slowest, slot);
  }
  return (static_cast<double>(micro_batches) + (pp - 1.0) / virtual_stages) * slowest;
}

// A plan's line in the search: what it predicts and keeps.
LayoutOutcome outcome_of(const Layout& l, double bound, const RunPlan& p) {
  const plan::TrainingPlan& q = p.plan();
  LayoutOutcome o{.layout = l, .bound_seconds = bound, .planned = true};
  o.step_seconds = q.step_seconds;
  // tokens_per_second is one data-parallel replica's (a pp x cp x tp group).
  o.tokens_per_second = q.tokens_per_second * l.dp;
  o.mfu = q.mfu;
  o.device_bytes = p.pipeline ? p.pipeline->largest_bytes : q.resident_bytes + q.placement.device_peak + p.reserved;
  o.shard = std::string(enum_name(sharding_level(p.chosen.state)));
  return o;
}

}  // namespace

LayoutSearch search_layouts(const RunConfig& run, RunPlanOptions a, const LayoutSearchOptions& o) {
  SPW_CHECK(a.gpus >= 1, "--gpus", "needs at least one GPU, not ", a.gpus);
  if (!a.cache) a.cache = std::make_shared<LlamaStepCache>();
  SPW_CHECK(!a.largest, "--largest", "plans one layout; give its degrees (--tp, --pp, --cp)");
  const model::LlamaConfig config = model::resolve_config(run.model.config);
  LayoutSearch out;
  struct Candidate {
    Layout layout;
    double bound;
  };
  std::vector<Candidate> candidates;
  std::map<std::pair<int, int>, SlotCosts> costs;  // by cp, tp: whatever pp and dp
  std::optional<Error> first_refusal;
  for (const Layout& l : layouts_of(a.gpus, o)) {
    const RunConfig r = with_layout(run, l);
    try {
      check_layout(config, r, a.gpus, a.batch_auto);
      StepPlanRequest req = rank_request(r, a);
      // --batch auto plans micro-batches of one sequence or more: the
      // bound of one each, its bubble left out, is below all of them.
      if (a.batch_auto) req.batch = 1;
      auto it = costs.find({l.cp, l.tp});
      if (it == costs.end()) it = costs.emplace(std::make_pair(l.cp, l.tp), slot_costs(req)).first;
      const double bound = a.batch_auto ? bound_seconds(it->second, 1, req.micro_batches) / l.pp
                                        : bound_seconds(it->second, l.pp, req.micro_batches, l.virtual_stages);
      candidates.push_back({l, bound});
    } catch (const Error& e) {
      if (!first_refusal) first_refusal = e;
      out.refused.push_back({.layout = l, .why = e.what()});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& x, const Candidate& y) { return x.bound < y.bound; });
  std::optional<Error> first_error;
  // Planned in waves of as many layouts as the machine has threads, each
  // wave the next candidates not yet known to be slower; the results are
  // taken in the candidates' order, so the choice is the same however the
  // threads run.
  const size_t wave = std::max(1u, o.threads ? o.threads : std::thread::hardware_concurrency());
  for (size_t next = 0; next < candidates.size();) {
    std::vector<const Candidate*> batch;
    for (; next < candidates.size() && batch.size() < wave; ++next) {
      const Candidate& c = candidates[next];
      if (out.fastest.size() >= o.keep && out.fastest[o.keep - 1].step_seconds <= c.bound) {
        out.slower.push_back({.layout = c.layout, .bound_seconds = c.bound, .why = "slower at best"});
      } else {
        batch.push_back(&c);
      }
    }
    std::vector<std::future<RunPlan>> plans;
    for (const Candidate* c : batch) {
      plans.push_back(std::async(batch.size() > 1 ? std::launch::async : std::launch::deferred,
                                 [&run, &a, c] { return plan_run(with_layout(run, c->layout), a); }));
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const Candidate& c = *batch[i];
      try {
        RunPlan p = plans[i].get();
        SPW_CHECK(!o.gpu_engine || (c.layout.tp == 1 && c.layout.pp == 1) || p.plan().all_on_device(),
                  c.layout.tp > 1 ? "--tp" : "--pp", "the GPU engine keeps a ",
                  c.layout.tp > 1 ? "tensor-parallel" : "pipeline", " rank's step and state on its device, which ",
                  "this plan does not (", p.plan().layout(), ")");
        LayoutOutcome line = outcome_of(c.layout, c.bound, p);
        if (out.fastest.empty() || line.step_seconds < out.fastest.front().step_seconds) out.chosen = std::move(p);
        out.fastest.insert(std::upper_bound(out.fastest.begin(), out.fastest.end(), line,
                                            [](const LayoutOutcome& x, const LayoutOutcome& y) {
                                              return x.step_seconds < y.step_seconds;
                                            }),
                           std::move(line));
      } catch (const Error& e) {
        if (!first_error && (e.thing() == "--host-mem" || e.thing() == "--device-mem")) {
          // A budget the likeliest layout overruns, said to be that
          // layout's: the others' needs differ (a pipeline rank starts from
          // its stages' masters, a data-parallel one from all of them).
          const std::string why = e.what();
          first_error = Error(e.thing(), "no layout of the " + std::to_string(a.gpus) + " GPUs fits; the likeliest, " +
                                             c.layout.text() + ": " + why.substr(e.thing().size() + 2));
        } else if (!first_error) {
          first_error = e;
        }
        out.refused.push_back({.layout = c.layout, .bound_seconds = c.bound, .why = e.what()});
      }
    }
  }
  if (!out.chosen) {
    if (first_error) throw *first_error;
    if (first_refusal) throw *first_refusal;
    throw Error("--gpus", "no layout of the GPUs to plan");
  }
  return out;
}

}  // namespace spillway::train
