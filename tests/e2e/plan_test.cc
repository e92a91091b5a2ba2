// `spillway plan` through the command line: what it prints for a step that
// does not fit the GPU, and how --batch auto splits an optimizer step.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

double predicted_mfu(const std::string& out) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(out, m, std::regex("predicted on [^\\n]* MFU ([0-9.]+)"))) << out;
  return m.empty() ? 0 : std::stod(m[1]);
}

// An 8B step in 24 GiB: 64 sequences per optimizer step, as one micro-batch
// each or split as the planner finds fastest. The split keeps the tokens
// per step and is never predicted slower than one sequence per micro-batch.
TEST(PlanE2E, BatchAutoKeepsTheTokensAndPredictsNoSlowerStep) {
  const std::string common =
      " --config llama3-8b --seq 8192 --grad-accum 64 --device-mem 24GiB --host-mem 110GiB --bf16-moments "
      "--recompute layers";
  const CommandResult one = run_spillway("plan --batch 1" + common);
  ASSERT_EQ(one.exit_code, 0) << one.out;
  const CommandResult chosen = run_spillway("plan --batch auto" + common);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.out;
  EXPECT_NE(chosen.out.find("(auto)"), std::string::npos) << chosen.out;
  EXPECT_NE(chosen.out.find("= 524288 tokens per optimizer step"), std::string::npos) << chosen.out;
  EXPECT_GE(predicted_mfu(chosen.out), predicted_mfu(one.out));
  // Where it does not fit whole, the plan says where each part lives and
  // how long the copies make compute wait.
  EXPECT_NE(one.out.find("gradient sums at home"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("waiting for copies"), std::string::npos) << one.out;
}

}  // namespace
}  // namespace spillway::e2e
