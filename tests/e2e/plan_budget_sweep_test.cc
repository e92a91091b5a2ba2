// Issue 23's acceptance test for the planner, through the command line as
// the issue ran it: `spillway plan --device-mem X` for X from 8 to 16 GiB in
// quarter-GiB steps (LLaMA-3-8B, seq 8192, the defaults) gave heap
// corruption and failed replays. Every budget must now end in a plan, or in
// exit 1 with one line naming --device-mem or --host-mem; the ASan suite
// (scripts/asan_test.sh) runs it under the sanitizers. The defaults' host
// budget holds no layout of that state, so a second sweep gives the host
// room and the moments bf16, where every budget plans with layer
// recomputation (as tests/plan/budget_sweep_test.cc finds one level down).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

struct SweepCount {
  int plans = 0, refusals = 0;
};

SweepCount sweep_8_to_16_gib(const std::string& flags) {
  SweepCount count;
  for (int quarter = 32; quarter <= 64; ++quarter) {
    std::ostringstream budget;
    budget << quarter / 4.0 << "GiB";
    SCOPED_TRACE("--device-mem " + budget.str() + flags);
    const CommandResult r = run_spillway("plan --device-mem " + budget.str() + flags);
    EXPECT_EQ(r.out.find("Sanitizer"), std::string::npos) << r.out;
    if (r.exit_code == 0) {
      ++count.plans;
      EXPECT_NE(r.out.find("\nlayout: "), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("spillway: "), std::string::npos) << r.out;
      continue;
    }
    ++count.refusals;
    EXPECT_EQ(r.exit_code, 1) << r.out;
    const bool names_a_budget =
        r.out.rfind("spillway: --device-mem: ", 0) == 0 || r.out.rfind("spillway: --host-mem: ", 0) == 0;
    EXPECT_TRUE(names_a_budget) << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "not one line: " << r.out;
  }
  return count;
}

TEST(PlanBudgetSweep, EveryQuarterGiBFrom8To16PlansOrSaysWhichBudget) {
  const SweepCount defaults = sweep_8_to_16_gib("");
  EXPECT_EQ(defaults.plans + defaults.refusals, 33);
  // Atomic attention: the ordered backward's workspace alone is 4 GiB.
  const SweepCount roomy = sweep_8_to_16_gib(" --host-mem 160GiB --bf16-moments --recompute layers --nondeterministic");
  EXPECT_EQ(roomy.plans, 33);
}

}  // namespace
}  // namespace spillway::e2e
