// The planner is right for every budget: swept from below the least a step
// needs to more than its whole state, over shapes from tiny to LLaMA-3-8B,
// sequence lengths, batch sizes, recomputation and moment precisions, every
// budget gives a plan that a replay as the executor issues it proves sound
// (each operand on the device when its node runs, nothing loaded before it
// went home, no value allocated twice or freed off the device, every
// allocation fitting an arena of the planned budget at its most fragmented),
// or a one-line error naming --device-mem or --host-mem. On the small
// shapes the executor itself then runs the plan under a device space of
// that budget.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "base/bytes.h"
#include "base/status.h"
#include "device/arena.h"
#include "device/cpu/cpu_device.h"
#include "exec/planned_executor.h"
#include "exec/streamed_runner.h"
#include "model/llama_config_json.h"
#include "plan/training_plan.h"
#include "testing/llama.h"
#include "train/step_plan.h"

namespace spillway::plan {
namespace {

using graph::Graph;
using graph::Value;
using graph::ValueRole;

// What is wrong with `p` replayed as the executor issues it in an arena of
// `budget` bytes; empty when nothing is.
std::string replay_problem(const Graph& g, const Placement& p, uint64_t budget) {
  if (p.device_peak > budget) return "peak " + format_bytes(p.device_peak) + " over " + format_bytes(budget);
  Arena arena("replay", budget, MemorySpace::kAlignment);
  const size_t n = g.values().size();
  std::vector<std::optional<uint64_t>> at(n);
  std::vector<bool> home(n, false);  // a computed value's host copy exists
  auto name = [&](Value v) { return "'" + g.value(v).name + "'"; };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const NodeActions& act = p.nodes[i];
    const graph::Node& node = g.nodes()[i];
    for (const auto* list : {&act.load, &act.allocate}) {
      for (Value v : *list) {
        const auto id = static_cast<size_t>(v.id);
        const auto& info = g.value(v);
        if (at[id]) return name(v) + " taken twice at node " + std::to_string(i);
        if (list == &act.load && info.role == ValueRole::computed && !info.accumulated && !home[id]) {
          return name(v) + " loaded at node " + std::to_string(i) + " before it went home";
        }
        at[id] = arena.try_allocate(info.bytes());
        if (!at[id]) return name(v) + " finds no room at node " + std::to_string(i);
      }
    }
    for (const auto* list : {&node.inputs, &node.outputs}) {
      for (Value v : *list) {
        if (!p.resident[static_cast<size_t>(v.id)] && !at[static_cast<size_t>(v.id)]) {
          return "node " + std::to_string(i) + " uses " + name(v) + " off the device";
        }
      }
    }
    for (Value v : act.store) {
      if (!at[static_cast<size_t>(v.id)]) return name(v) + " stored off the device";
      home[static_cast<size_t>(v.id)] = true;
    }
    for (Value v : act.drop) {
      const auto id = static_cast<size_t>(v.id);
      if (!at[id]) return name(v) + " dropped off the device at node " + std::to_string(i);
      arena.free(*at[id]);
      at[id].reset();
    }
  }
  for (size_t v = 0; v < n; ++v) {
    if (at[v]) return name(Value{static_cast<int32_t>(v)}) + " never dropped";
  }
  return "";
}

// A runner that runs nothing: the executor's memory alone is under test.
class NoKernels final : public exec::NodeRunner {
 public:
  void run(const Graph&, const graph::Node&, const std::vector<void*>&) override {}
};

// The plan run by the executor on the CPU backend's streams, its device
// space no larger than the placement's budget.
void run_under_budget(const Graph& g, const TrainingStateSpec& state, const TrainingPlan& p, uint64_t budget) {
  auto device = make_cpu_device(budget, p.placement.host_peak + (1ull << 20));
  NoKernels none;
  exec::StreamedNodeRunner runner(none, static_cast<CpuDevice&>(*device).cpu_stream(StreamKind::compute));
  exec::PlannedExecutor executor(g, p.placement, *device, device->host_memory(), runner);
  // Resident state is the caller's device memory, outside the budget; the
  // rest of the state lives at home.
  std::vector<std::vector<char>> memory;
  auto bind = [&](Value v) {
    memory.emplace_back(g.value(v).bytes());
    executor.bind(v, memory.back().data());
  };
  for (Value v : state.inputs) bind(v);
  for (const StateParameter& param : state.parameters) {
    bind(param.weight);
    bind(param.grad);
  }
  executor.set_accumulators_zero(true);
  executor.run();
  device->synchronize();
  EXPECT_LE(device->device_memory().peak(), budget);
}

struct Shape {
  model::LlamaConfig config;
  int64_t batch, seq;
};

struct Sweep {
  int plans = 0, refusals = 0;
};

// Plans `shape` for every budget from `low` to `high` in `step`s, each
// checked; the executor runs the plans of shapes small enough.
Sweep sweep(const Shape& shape, graph::RecomputePolicy recompute, bool bf16_moments, OffloadMode offload,
            uint64_t low, uint64_t high, uint64_t step, uint64_t host_budget, bool run) {
  const auto llama = train::build_llama_step(shape.config, shape.batch, shape.seq, /*fused_projections=*/false,
                                             {.backward = true, .recompute = recompute}, DType::bf16);
  const TrainingStateSpec state = train::adamw_state_spec(*llama, shape.config, bf16_moments);
  const Graph& g = llama->step.graph;
  Sweep s;
  for (uint64_t budget = low; budget <= high; budget += step) {
    TrainingPlanRequest r;
    r.device_budget = budget;
    r.host_budget = host_budget;
    r.micro_batches = 4;
    r.offload = offload;
    r.rates = h100_rates();
    r.tokens_per_micro_batch = static_cast<double>(shape.batch * shape.seq);
    try {
      const TrainingPlan p = plan_training(g, state, r);
      ++s.plans;
      const uint64_t planned = budget - p.resident_bytes;
      const std::string problem = replay_problem(g, p.placement, planned);
      EXPECT_EQ(problem, "") << "budget " << format_bytes(budget) << ", layout " << p.layout();
      if (problem.empty() && run) run_under_budget(g, state, p, planned);
    } catch (const Error& e) {
      ++s.refusals;
      const std::string what = e.what();
      EXPECT_TRUE(e.thing() == "--device-mem" || e.thing() == "--host-mem") << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  return s;
}

TEST(BudgetSweep, SmallShapesPlanAndRunUnderEveryBudget) {
  const Shape shapes[] = {{testing::llama_config(512, 128, 352, 4, 4, 2), 2, 256},
                          {testing::llama_config(1000, 256, 512, 3, 4, 2, /*tied=*/true), 1, 128}};
  for (const Shape& shape : shapes) {
    for (auto recompute : {graph::RecomputePolicy::none, graph::RecomputePolicy::selective,
                           graph::RecomputePolicy::layers}) {
      for (bool bf16_moments : {false, true}) {
        SCOPED_TRACE(std::string("vocab ") + std::to_string(shape.config.vocab_size) + ", recompute " +
                     std::string(graph::recompute_policy_name(recompute)) + (bf16_moments ? ", bf16" : ", fp32"));
        // From below the least any layout needs to above the whole state.
        const Sweep s = sweep(shape, recompute, bf16_moments, OffloadMode::automatic, 1 << 20, 40 << 20, 1 << 19,
                              1ull << 30, /*run=*/true);
        EXPECT_GT(s.plans, 10);
        EXPECT_GT(s.refusals, 0);
      }
    }
  }
}

// The budgets `spillway plan` corrupted the heap or failed its own replay
// at (10.5, 12, 13 and 14 GiB), and every quarter GiB around them: with
// fp32 moments and every activation kept, 125 GiB of host memory holds no
// layout, which each budget says; with layer recomputation and bf16
// moments every budget gets a plan on a host of 160 GiB (the trainer's fp32
// masters, 32 GB, beside a state at home of up to 96 GB).
TEST(BudgetSweep, Llama3_8BFrom8To16GiB) {
  const Shape shape{model::resolve_config("llama3-8b"), 1, 8192};
  const Sweep kept = sweep(shape, graph::RecomputePolicy::none, false, OffloadMode::automatic, 8ull << 30,
                           16ull << 30, 1ull << 28, 125ull << 30, /*run=*/false);
  EXPECT_EQ(kept.refusals, 33);
  for (auto recompute : {graph::RecomputePolicy::layers, graph::RecomputePolicy::selective}) {
    const Sweep s = sweep(shape, recompute, true, OffloadMode::automatic, 8ull << 30, 16ull << 30, 1ull << 28,
                          160ull << 30, /*run=*/false);
    EXPECT_EQ(s.plans + s.refusals, 33);
    if (recompute == graph::RecomputePolicy::layers) {
      EXPECT_EQ(s.plans, 33);
    }
  }
}

// LLaMA-3.2-1B's step across the budgets where the whole state stops
// fitting the device and moves home.
TEST(BudgetSweep, Llama32_1BAroundTheWholeState) {
  const Shape shape{model::resolve_config("llama3.2-1b"), 4, 4096};
  const Sweep s = sweep(shape, graph::RecomputePolicy::none, false, OffloadMode::automatic, 4ull << 30, 64ull << 30,
                        1ull << 31, 110ull << 30, /*run=*/false);
  EXPECT_GT(s.plans, 20);
}

}  // namespace
}  // namespace spillway::plan
