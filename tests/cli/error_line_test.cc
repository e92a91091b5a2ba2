#include "cli/error_line.h"

#include <gtest/gtest.h>

#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "base/status.h"

namespace spillway::cli {
namespace {

template <typename Thrower>
std::string text_of(Thrower thrower, std::string_view doing = "train") {
  try {
    thrower();
  } catch (...) {
    return escaped_error_text(std::current_exception(), doing);
  }
  return "no exception";
}

TEST(EscapedErrorText, SpillwayErrorsNameTheirOwnThing) {
  EXPECT_EQ(text_of([] { throw Error("config.json", "vocab_size is -1"); }), "config.json: vocab_size is -1");
}

TEST(EscapedErrorText, BadAllocSaysOutOfMemoryAndWhatWasBeingDone) {
  EXPECT_EQ(text_of([] { throw std::bad_alloc(); }, "finetune"),
            "finetune: out of memory: this machine could not allocate what it needs (are the sizes in the model's "
            "config, the data and the flags what you meant?)");
  EXPECT_EQ(text_of([] { std::vector<float>(std::vector<float>().max_size() + 1); }, "generate"),
            "generate: out of memory: asked for more elements than any allocation can hold (a huge size in the "
            "config, data or flags?)");
}

TEST(EscapedErrorText, OtherExceptionsOnOneLineWithoutLibraryPrefix) {
  EXPECT_EQ(text_of([] { throw std::runtime_error("disk on fire\nreally"); }), "train: disk on fire; really");
  EXPECT_EQ(text_of([] { (void)nlohmann::json("x").get<int>(); }), "train: type must be number, but is string");
  EXPECT_EQ(text_of([] { throw 42; }, "plan"), "plan: failed with an error of unknown kind");
}

TEST(CommandLineErrorText, OneLineWithTheFlagFirst) {
  EXPECT_EQ(command_line_error_text(CLI::ConversionError("--batch", std::vector<std::string>{"two"})),
            "--batch: 'two' is not a value it takes");
  EXPECT_EQ(command_line_error_text(CLI::ExtrasError(std::vector<std::string>{"--bogus"})),
            "--bogus: not an option or argument that this command takes (--help lists them)");
  EXPECT_EQ(command_line_error_text(CLI::ArgumentMismatch::TypedAtLeast("--steps", 1, "INT")),
            "--steps: needs a value");
}

}  // namespace
}  // namespace spillway::cli
