// Command line mistakes: one line naming the flag or word and the problem,
// exit 1, and none of CLI11's own "Run with --help for more information.".
#include <gtest/gtest.h>

#include "e2e/e2e_util.h"

namespace spillway::e2e {
namespace {

void expect_only(const std::string& args, const std::string& line) {
  const CommandResult r = run_spillway(args);
  EXPECT_EQ(r.exit_code, 1) << args << ": " << r.out;
  EXPECT_EQ(r.out, line) << args;
}

constexpr const char* kCommands = "train, finetune, generate, eval, tokenize, bench, plan, convert, serve, chat";

TEST(CommandLine, MissingOrUnknownCommand) {
  expect_only("", std::string("spillway: no command given; the commands are ") + kCommands + " (--help says more)\n");
  expect_only("frobnicate --steps 3",
              std::string("spillway: frobnicate: not a command; the commands are ") + kCommands + "\n");
}

TEST(CommandLine, UnknownFlagAndMissingValue) {
  expect_only("plan --bogus",
              "spillway: --bogus: not an option or argument that this command takes (--help lists them)\n");
  expect_only("train --steps", "spillway: --steps: needs a value\n");
}

TEST(CommandLine, HelpAndVersionStillSucceed) {
  for (const char* args : {"--help", "plan --help", "--version"}) {
    const CommandResult r = run_spillway(args);
    EXPECT_EQ(r.exit_code, 0) << args << ": " << r.out;
    EXPECT_NE(r.out.find("spillway"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("terminate"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace spillway::e2e
