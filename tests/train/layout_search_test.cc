// The planner choosing the layout: the search over the splits of the GPUs
// into dp x pp x cp x tp, and the choice `train` makes among those the GPU
// engine runs.
#include "train/layout_search.h"

#include <gtest/gtest.h>

#include "train/layout_choice.h"

namespace spillway::train {
namespace {

RunConfig run_of() {
  RunConfig r = default_run_config(Command::plan);
  r.model.config = "llama3.2-1b";
  r.schedule.batch = 1;
  r.schedule.seq = 1024;
  r.schedule.grad_accum = 16;
  r.memory.device_mem = 80ull << 30;
  r.memory.host_mem = 400ull << 30;
  return r;
}

TEST(LayoutSearch, EveryLayoutSplitsTheGpusAndTheChoiceIsTheFastest) {
  const LayoutSearch s = search_layouts(run_of(), {.gpus = 8});
  ASSERT_FALSE(s.fastest.empty());
  ASSERT_TRUE(s.chosen);
  bool pipelined = false, context = false, interleaved = false;
  for (const auto* list : {&s.fastest, &s.refused, &s.slower}) {
    for (const LayoutOutcome& o : *list) {
      const Layout& l = o.layout;
      EXPECT_EQ(l.dp * l.pp * l.cp * l.tp, 8) << l.text();
      pipelined = pipelined || l.pp > 1;
      interleaved = interleaved || l.virtual_stages > 1;
      EXPECT_TRUE(l.virtual_stages == 1 || l.pp > 1) << l.text();
      context = context || l.cp > 1;
    }
  }
  EXPECT_TRUE(pipelined);
  EXPECT_TRUE(interleaved);
  EXPECT_TRUE(context);
  // Fastest first; the chosen plan is the first's, and no layout left
  // unplanned could have beaten the ones kept.
  for (size_t i = 1; i < s.fastest.size(); ++i) EXPECT_LE(s.fastest[i - 1].step_seconds, s.fastest[i].step_seconds);
  EXPECT_EQ(s.chosen->plan().step_seconds, s.fastest.front().step_seconds);
  const Layout& best = s.fastest.front().layout;
  EXPECT_EQ(s.chosen->dp, best.dp);
  EXPECT_EQ(s.chosen->tp, best.tp);
  EXPECT_EQ(s.chosen->pp, best.pp);
  EXPECT_EQ(s.chosen->cp, best.cp);
  ASSERT_GE(s.fastest.size(), 5u);
  for (const LayoutOutcome& o : s.slower) EXPECT_GE(o.bound_seconds, s.fastest[4].step_seconds) << o.layout.text();
  for (const LayoutOutcome& o : s.fastest) EXPECT_LE(o.bound_seconds, o.step_seconds) << o.layout.text();
  // The 1B model's 8 key/value heads split 8 ways at most... and its 8
  // GPUs divide all of them: only the budgets or the step refuse any.
  for (const LayoutOutcome& o : s.refused) EXPECT_FALSE(o.why.empty()) << o.layout.text();
}

// Layouts planned four at a time (threads sharing the graphs) give the
// choice and the plans of one at a time.
TEST(LayoutSearch, PlanningInThreadsChoosesWhatOneThreadChooses) {
  const LayoutSearch one = search_layouts(run_of(), {.gpus = 8}, {.threads = 1});
  const LayoutSearch four = search_layouts(run_of(), {.gpus = 8}, {.threads = 4});
  ASSERT_GE(four.fastest.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(four.fastest[i].layout.text(), one.fastest[i].layout.text()) << i;
    EXPECT_DOUBLE_EQ(four.fastest[i].step_seconds, one.fastest[i].step_seconds) << i;
  }
}

TEST(LayoutSearch, TheSameLayoutPlannedAloneIsThePlanFound) {
  const LayoutSearch s = search_layouts(run_of(), {.gpus = 4});
  const LayoutOutcome& second = s.fastest.at(1);
  const RunPlan alone = plan_run(with_layout(run_of(), second.layout), {.gpus = 4});
  EXPECT_DOUBLE_EQ(alone.plan().step_seconds, second.step_seconds);
}

TEST(LayoutChoice, TrainTakesTheFastestLayoutTheGpuEngineRuns) {
  RunConfig r = run_of();
  const std::optional<LayoutChoice> choice = choose_gpu_layout(r, 8, 1, "H100", 80ull << 30, 400ull << 30);
  ASSERT_TRUE(choice);
  const Layout& l = choice->layout;
  EXPECT_TRUE(l.pp == 1 || l.tp * l.cp == 1) << l.text();
  EXPECT_EQ(l.virtual_stages, 1);
  EXPECT_EQ(l.dp * l.tp * l.pp * l.cp, 8);
  const LayoutSearch s = search_layouts(r, {.gpus = 8}, {.gpu_engine = true});
  bool tp_beside_cp = false;
  for (const auto* list : {&s.fastest, &s.refused, &s.slower}) {
    for (const LayoutOutcome& o : *list) {
      EXPECT_TRUE(o.layout.pp == 1 || o.layout.tp * o.layout.cp == 1) << o.layout.text();
      EXPECT_EQ(o.layout.virtual_stages, 1) << o.layout.text();
      tp_beside_cp = tp_beside_cp || (o.layout.tp > 1 && o.layout.cp > 1);
    }
  }
  EXPECT_TRUE(tp_beside_cp) << "the GPU engine runs cp beside tp: the search weighs such layouts";
  EXPECT_EQ(choice->layout, s.fastest.front().layout);
  EXPECT_DOUBLE_EQ(choice->step_seconds, s.fastest.front().step_seconds);
  EXPECT_NE(choice->line.find("the planner chose " + s.fastest.front().layout.text()), std::string::npos)
      << choice->line;

  // Instruction data: the GPU engine's pipeline and context parallelism
  // take text rows alone, so neither is chosen.
  RunConfig chats = r;
  chats.data.paths = {"chats.jsonl"};
  const std::optional<LayoutChoice> for_chats = choose_gpu_layout(chats, 8, 1, "H100", 80ull << 30, 400ull << 30);
  ASSERT_TRUE(for_chats);
  EXPECT_EQ(for_chats->layout.pp, 1);
  EXPECT_EQ(for_chats->layout.cp, 1);

  // Degrees given, or one GPU: the run keeps its own.
  RunConfig given = r;
  given.parallel.degrees_given = true;
  EXPECT_FALSE(choose_gpu_layout(given, 8, 1, "H100", 80ull << 30, 400ull << 30));
  EXPECT_FALSE(choose_gpu_layout(r, 1, 1, "H100", 80ull << 30, 400ull << 30));
  // No layout fits a 1 GiB card: plain data parallelism, and why.
  const std::optional<LayoutChoice> none = choose_gpu_layout(r, 8, 1, "H100", 1ull << 30, 400ull << 30);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->layout, (Layout{8, 1, 1, 1}));
  EXPECT_NE(none->line.find("--device-mem"), std::string::npos) << none->line;
}

}  // namespace
}  // namespace spillway::train
